"""Hand-made step results for `decide`: every step passing, and one-line ways to make one step fail."""

from __future__ import annotations

import dataclasses
from typing import Any

from inferopt.ablate import ArmVerdict
from inferopt.choose import choose
from inferopt.gate import GateResult
from inferopt.gate.suite_gate import SuiteGate
from inferopt.locate import Diagnosis
from inferopt.validate import ScenarioVerdict

DIAGNOSIS = Diagnosis("queueing", 0.9, "queue wait is 90% of TTFT (planted)")
CHOICE = choose("queueing", {"batching.max_batch_size": 8, "batching.batch_wait_ms": 2})  # a wait window: queueing
ARM = ArmVerdict("candidate", 0.05, 3, "improves", ("ttft_ms_p99: 500 -> 50 ms (x0.100, better)",))
STEADY = ScenarioVerdict("steady", "steady", True, ("TTFT p99 60.0 ms <= 200 ms: ok",))
GATE = GateResult(
    quality_status="pass",
    quality_required=False,
    quality_reasons=("sliced suite: pass",),
    cost_status="pass",
    cost_reasons=("cost per successful task: not more expensive",),
    suite=SuiteGate("pass", ["sliced suite: pass"]),
    served={"status": "skipped", "reason": "planted", "n": 0},
    next_token={"status": "skipped", "reason": "planted"},
)


def passing_steps(**replace: Any) -> dict[str, Any]:
    """`decide`'s keyword arguments with every step passing; `replace` swaps whole step results."""
    steps = {"diagnosis": DIAGNOSIS, "choice": CHOICE, "ablation": ARM, "scenarios": [STEADY], "gate": GATE}
    return steps | replace


def arm(verdict: str, *reasons: str) -> ArmVerdict:
    return dataclasses.replace(ARM, verdict=verdict, reasons=reasons or ARM.reasons)


def gate(**fields: Any) -> GateResult:
    return dataclasses.replace(GATE, **fields)
