"""Compare flow runs (`python -m inferopt.compare RUN_A RUN_B`): `runs.py` reads a run's results directory,
`core.py` compares two runs (paired where they replayed the same workload, plainly unpaired where not),
`unpaired.py` holds the unpaired tests, `render.py` the table, Markdown and HTML.

Deliberately not here: MLflow (tasks/compare.py finds runs and logs the comparison) and any verdict.
"""
