"""Step 6, the quality-and-cost gate: `gate(candidate, ablation, located, choice)` -> `GateResult` (`step.py`)."""

from inferopt.gate.step import GateResult, gate

__all__ = ["GateResult", "gate"]
