"""Step 4, ablate: `ablate(candidate, out_dir)` -> `AblationResult` with an `ArmVerdict` per arm (`run.py`)."""

from inferopt.ablate.arm_verdicts import ArmVerdict
from inferopt.ablate.run import AblationResult, ablate

__all__ = ["AblationResult", "ArmVerdict", "ablate"]
