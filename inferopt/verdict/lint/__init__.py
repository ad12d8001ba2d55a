"""The benchmark-cheat lint (SPEC V4): pure checks over a run's artifacts that refuse a run or flag its verdict.

`cheats.py` holds `Finding` and the shared vocabulary, `prerun.py` the config-level checks, `postrun.py` the
checks over a run's artifacts; `collect.py` turns the six steps' results into what the checks read.
Imports neither Prefect nor MLflow.
"""

from inferopt.verdict.lint.cheats import (
    ALLOWABLE,
    CHEATS,
    CheatRefused,
    Finding,
    apply_allow,
    lint_summary,
)
from inferopt.verdict.lint.postrun import (
    RunEvidence,
    check_arms,
    check_cost,
    check_denominators,
    check_outputs,
    check_queueing,
    check_warm_cache,
)
from inferopt.verdict.lint.prerun import check_config, refuse_cheats

__all__ = [
    "ALLOWABLE",
    "CHEATS",
    "CheatRefused",
    "Finding",
    "RunEvidence",
    "apply_allow",
    "check_arms",
    "check_config",
    "check_cost",
    "check_denominators",
    "check_outputs",
    "check_queueing",
    "check_warm_cache",
    "lint_summary",
    "refuse_cheats",
]
