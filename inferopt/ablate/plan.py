"""Which arms to run and in what order (A1): one fixed workload, arms that differ from the baseline only in the
candidate's changes, trials interleaved in a seeded random order per repeat (no arm always runs first on a
warming machine).

Arms derived from a candidate, in this order (`plan_arms` says what each is for): `baseline`; `aa`, the baseline
again — an A/A comparison measuring the noise floor in the same run; one arm per change, only when there are
two or more; one arm per `ablation.extra_arms` entry (an alternative for one field, outside the combination);
and `candidate`, all changes together, the remedy under test (with a single change it *is* the one-change arm).

Deliberately not here: running trials (`run.py`) and statistics (`compare.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from inferopt.config import AblationSettings, CandidateConfig, FakeSystem, HFSystem, single_change_systems

BASELINE = "baseline"
AA = "aa"
CANDIDATE = "candidate"
ROLES = ("baseline", "aa", "single", "extra", "candidate")


@dataclass(frozen=True)
class Arm:
    name: str
    role: str  # one of ROLES
    system: HFSystem | FakeSystem
    changes: dict[str, Any] = field(default_factory=dict)

    @property
    def tested(self) -> bool:
        """An arm whose effect is the question (single-change and extra arms, the candidate; not baseline or A/A)."""
        return self.role in ("single", "extra", "candidate")


@dataclass(frozen=True)
class Trial:
    order: int  # position in the run (0-based)
    repeat: int
    arm: str


def plan_arms(candidate: CandidateConfig) -> list[Arm]:
    """The arms of `candidate`'s ablation, in order. Raises ValueError when a one-change arm would differ from
    the baseline in anything but exactly one field.

    - `baseline` (role "baseline"): the baseline system;
    - `aa` (role "aa", when `ablation.aa_arm`): the baseline system again under another name. Baseline vs aa is
      an A/A comparison: it measures the noise floor in the same run, on the same machine state, and any
      "significant" effect it shows is a false alarm saying the run's noise is not what the statistics assume;
    - one arm per change (role "single", named by the change's dotted path), only with two or more changes:
      the baseline with that change alone, checked to differ from the baseline in exactly one leaf field
      (`inferopt.config.single_change_systems`, which also runs when the config is loaded);
    - one arm per `ablation.extra_arms` entry (role "extra", named `path=value`): an alternative for one field
      (another kernel, another bit width) compared with the baseline like a single-change arm, but not part of
      the combination and not in the interaction analysis;
    - `candidate` (role "candidate"): all changes together. The rest of the pipeline (validate, gate, verdict)
      reads this name. With a single change it *is* the one-change arm (not run twice)."""
    base = candidate.baseline
    arms = [Arm(name=BASELINE, role="baseline", system=base)]
    if candidate.ablation.aa_arm:
        arms.append(Arm(name=AA, role="aa", system=base))
    if len(candidate.changes) >= 2:
        for dotted, system in single_change_systems(base, candidate.changes).items():
            if dotted in (BASELINE, AA, CANDIDATE):
                raise ValueError(f"changes.{dotted}: this path collides with a reserved arm name")
            arms.append(Arm(name=dotted, role="single", system=system, changes={dotted: candidate.changes[dotted]}))
    else:
        single_change_systems(base, candidate.changes)  # the one change must still move exactly one field
    for extra in candidate.ablation.extra_arms:
        ((dotted, value),) = extra.items()
        name = f"{dotted}={value}"
        if name in {a.name for a in arms} or name == CANDIDATE:
            raise ValueError(f"ablation.extra_arms: {name!r} is listed twice or collides with another arm")
        arms.append(
            Arm(name=name, role="extra", system=single_change_systems(base, extra)[dotted], changes=dict(extra))
        )
    arms.append(
        Arm(name=CANDIDATE, role="candidate", system=candidate.candidate_system, changes=dict(candidate.changes))
    )
    return arms


def interleaved_order(arm_names: list[str], repeats: int, seed: int) -> list[Trial]:
    """Every repeat runs each arm once, in a fresh seeded permutation (ABBA-like balance on average)."""
    rng = np.random.default_rng(seed)
    trials: list[Trial] = []
    for rep in range(repeats):
        for name in rng.permutation(arm_names):
            trials.append(Trial(order=len(trials), repeat=rep, arm=str(name)))
    return trials


def check_bootstrap_resolution(settings: AblationSettings, n_metrics: int) -> None:
    """A bootstrap p-value is never below 2 / (B + 1); Holm's first step needs p <= alpha_look / n_metrics.
    If B is too small for that, no metric can ever be significant: refuse the design up front."""
    needed = settings.alpha_per_look / n_metrics
    smallest = 2.0 / (settings.bootstrap_samples + 1)
    if smallest > needed:
        b_min = int(np.ceil(2.0 / needed))
        raise ValueError(
            f"ablation.bootstrap_samples = {settings.bootstrap_samples} cannot resolve p <= {needed:.2g} (alpha "
            f"{settings.alpha} / {len(settings.look_repeats)} look(s) / {n_metrics} metrics): no effect could ever be "
            f"significant; fix: bootstrap_samples >= {b_min}, or fewer looks (max_repeats - min_repeats)"
        )
