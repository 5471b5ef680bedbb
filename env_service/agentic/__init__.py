"""BFCL V4's agentic tasks (memory, web search) in the service: a task kind of their own.

kind.py is the kind (env_service/task_kind.py's interface: admission, backends, where
calls run, evaluation); episode_admission.py refuses a create the service cannot run
right; agentic_episode.py extends the episode's state machine with bfcl-eval's rules for
these tasks; web_calls.py makes the web-search tasks' outside calls in processes of their
own, shared by fair_share.py. The tasks themselves: seal/bfcl/agentic/.
"""
