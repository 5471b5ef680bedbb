"""Fixtures of the tests and the benchmarks, kept out of the shipped packages.

`service.py`: the environment service a bench measures, its memory, a timed client, the
ground-truth scripts; `web.py`: local web servers standing in for the outside web. Not
installed: the tests find it on their path (pyproject.toml's `pythonpath`), and each
script in scripts/ that uses it puts the repository's root on `sys.path` first. The
import contracts keep `seal` and `env_service` from importing it.
"""
