"""Step 5, validate: `validate_candidate(candidate, out_dir)` -> a `ScenarioResult` per scenario (`step.py`)."""

from inferopt.validate.judge import ScenarioResult
from inferopt.validate.step import ScenarioVerdict, scenario_verdicts, validate_candidate

__all__ = ["ScenarioResult", "ScenarioVerdict", "scenario_verdicts", "validate_candidate"]
