"""What the launcher composes and starts: the run config, the environment service, jobs,
resumes and termination (launcher.py is the entry point)."""
