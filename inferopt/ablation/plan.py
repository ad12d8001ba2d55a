"""Which arms to run and in what order (A1): one fixed workload, arms that differ from the baseline only
in the candidate's changes, trials interleaved in a seeded random order per repeat (no arm always runs
first on a warming machine).

The spine runs two arms: the baseline and the candidate (all of the candidate's changes, which together
form one remedy). `plan_arms` is where one-arm-per-change ablations will grow.

Deliberately not here: running trials (`run.py`) and statistics (`compare.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from inferopt.config import CandidateConfig, FakeSystem, HFSystem


@dataclass(frozen=True)
class Arm:
    name: str
    role: str                       # "baseline" | "candidate"
    system: HFSystem | FakeSystem
    changes: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Trial:
    order: int                      # position in the run (0-based)
    repeat: int
    arm: str


def plan_arms(candidate: CandidateConfig) -> list[Arm]:
    return [
        Arm(name="baseline", role="baseline", system=candidate.baseline),
        Arm(name="candidate", role="candidate", system=candidate.candidate_system, changes=dict(candidate.changes)),
    ]


def interleaved_order(arm_names: list[str], repeats: int, seed: int) -> list[Trial]:
    """Every repeat runs each arm once, in a fresh seeded permutation (ABBA-like balance on average)."""
    rng = np.random.default_rng(seed)
    trials: list[Trial] = []
    for rep in range(repeats):
        for name in rng.permutation(arm_names):
            trials.append(Trial(order=len(trials), repeat=rep, arm=str(name)))
    return trials
