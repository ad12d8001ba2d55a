"""Step 2, locate: `locate_step(candidate, phases, ...)` (or `locate_system(system, hardware, phases, ...)`) ->
`LocateResult` with its `Diagnosis` (`step.py`)."""

from inferopt.locate.bottleneck import Diagnosis
from inferopt.locate.step import LocateResult, locate_step, locate_system, profile_enabled

__all__ = ["Diagnosis", "LocateResult", "locate_step", "locate_system", "profile_enabled"]
