"""Run reporting: what a run directory's records say, as tables, pages and plots (seal-report).

    summary.py       per-category pass rates of each validation step (the end-of-run table)
    run_page.py      one run's page: report.md and its PNGs (plots.py, paper_views.py,
                     recurrence.py), from what run_data.py reads of the run directory
    compare.py       arms compared at their runs' final and best steps (stats.py,
                     config_diff.py); compare_runs.py loads the runs and chooses
                     their steps; compare_page.py writes the page
    ood.py           the paper's Table 2 (BFCL V4 agentic, tau2-bench)
    paper.py         the paper's published numbers; run_source.py, which row a run reproduces
    cli.py           seal-report's command line

Reads records only (seal.runs): no endpoint, service or trainer. seal.eval prints its
summaries with it; nothing here imports seal.eval or a trainer.
"""
