"""Step 1, measure: `measure(candidate, out_dir)` (or `measure_system(system, workload, slo, out_dir)`) ->
`MeasureResult` (`step.py`)."""

from inferopt.measure.step import MeasureResult, measure, measure_system

__all__ = ["MeasureResult", "measure", "measure_system"]
