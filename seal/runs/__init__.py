"""A training run's directory and everything written into it, below both trainers.

run.py opens it once (lock.py, run_dir_checks.py); run_record.py records each attempt,
data_order.py each epoch's task order, checkpoint.py the local trainer's checkpoints
(export.py: `seal-export`), records.py the validation records, metrics_log.py
metrics.jsonl, interface_log.py what each step's episodes were shown. Each module and
what it writes: docs/runs.md, "The code (seal/runs/)".

Nothing here imports a trainer, the launcher, verl or Ray.
"""
