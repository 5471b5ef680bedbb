"""Learning check: the SEAL loop raises the success rate of a small policy on a few tasks.

`seal-learning-check` (cli.py, or python -m seal.learning_check): the tasks and the success
measures (tasks.py), the supervised warm-up (warm_up.py), the `run` command's warm-up then
GRPO (run.py), the saved curves' tables and figures (curves.py). What each command does and
why its defaults: docs/development.md, "Learning check (CPU)".
"""
