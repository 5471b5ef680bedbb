"""A training run's directory and everything written into it, below both trainers.

    run.py          open_run: lock, checks, set-aside, once per run (the launcher's)
    lock.py         the flock that keeps two runs of one name apart
    run_dir_checks.py what a fresh or resumed run may find in its directory
    data_order.py   the task order of each epoch and its record (data_order.json)
    run_record.py   attempts/NNN: each start's config, command, seeds, code, packages, base model
    checkpoint.py   the local trainer's checkpoints: save, find, resume, prune
    export.py       seal-export: a checkpoint's model as a clean Hugging Face directory
    records.py      validation records (validation/step_N.jsonl)
    metrics_log.py  metrics.jsonl and the names of its metrics
    interface_log.py  interface/step_N.json: what each step's episodes were shown

Nothing here imports a trainer, the launcher, verl or Ray.
"""
