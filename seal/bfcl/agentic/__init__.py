"""BFCL V4's agentic tasks (memory and web search), the paper's out-of-distribution check.

tasks.py reads them from the pinned bfcl-eval (ids, categories, system prompts, the answer
check); memory.py keeps the memory snapshots that carry a scenario from one conversation
to the next; web_search.py and web_fetch.py are the transports under bfcl-eval's
web-search backend. The service runs them as a task kind of their own (env_service/agentic/).
"""
