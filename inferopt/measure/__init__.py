"""Step 1, measure: `measure(candidate, out_dir)` -> `MeasureResult` (`step.py`)."""

from inferopt.measure.step import MeasureResult, measure

__all__ = ["MeasureResult", "measure"]
