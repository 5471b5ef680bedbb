"""Run reporting: what a run directory's records say, as tables, pages and plots (seal-report).

Reads records only (seal.runs): no endpoint, service or trainer; nothing here imports
seal.eval or a trainer. Its modules (summary, run_page and run_data, compare and
compare_runs, ood, paper, cli) and where each page comes from: docs/design.md, "Layout".
"""
