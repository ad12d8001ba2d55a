"""The ablation's verdict per arm (A1): improves / regresses / no detectable change (from the effects at the
final look), skipped (the option cannot run here) or failed (the arm, or the baseline it is compared with,
crashed), each with its reasons. `arm_verdicts.json` is `{arm: ArmVerdict.to_dict()}`.

Deliberately not here: the statistics (`compare.py`, whose `arm_verdict` reads one arm's effects) and running
trials (`run.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

import pandas as pd

from inferopt.ablate.compare import arm_verdict
from inferopt.ablate.plan import BASELINE, Arm

ArmOutcome = Literal["improves", "regresses", "no detectable change", "skipped", "failed"]
ARM_OUTCOMES: tuple[str, ...] = ("improves", "regresses", "no detectable change", "skipped", "failed")
AA_QUIET = "A/A (baseline vs itself): no metric moved beyond noise, as it should"


@dataclass(frozen=True)
class ArmVerdict:
    """One arm's outcome against the baseline, why, and the test it came from (alpha per look, repeats)."""

    role: str  # the arm's role (plan.ROLES)
    alpha: float
    repeats: int
    verdict: ArmOutcome
    reasons: tuple[str, ...] = ()
    error: str | None = None  # the crash, for a failed arm

    def with_reasons(self, *lines: str) -> ArmVerdict:
        """This verdict with `lines` added to its reasons."""
        return replace(self, reasons=(*self.reasons, *lines))

    def to_dict(self) -> dict[str, Any]:
        """The `arm_verdict.json` document (key order as logged since the first version)."""
        return {
            "role": self.role,
            "alpha": self.alpha,
            "repeats": self.repeats,
            "error": self.error,
            "verdict": self.verdict,
            "reasons": list(self.reasons),
        }


def missing_candidate() -> ArmVerdict:
    """What the verdict reads when the ablation has no `candidate` arm: a failed arm, saying so."""
    return ArmVerdict("candidate", float("nan"), 0, "failed", ("candidate arm missing",))


def arm_verdicts(
    arms: list[Arm],
    effects: dict[str, pd.DataFrame],
    failed: dict[str, str],
    skipped: dict[str, str],
    targets: tuple[str, ...],
    alpha: float,
    repeats: int,
) -> dict[str, ArmVerdict]:
    """The verdict of every arm but the baseline: skipped before failed before the effects' verdict; an arm is
    skipped or failed also when the baseline it is compared with is."""
    verdicts: dict[str, ArmVerdict] = {}
    for arm in arms:
        if arm.role == "baseline":
            continue
        if arm.name in skipped or BASELINE in skipped:
            which = arm.name if arm.name in skipped else BASELINE
            reason = skipped[which] if which == arm.name else f"the baseline cannot run here: {skipped[BASELINE]}"
            verdicts[arm.name] = ArmVerdict(arm.role, alpha, repeats, "skipped", (f"skipped: {reason}",))
        elif arm.name in failed or BASELINE in failed:
            which = arm.name if arm.name in failed else BASELINE
            reasons = (f"{which} arm failed: {failed[which].splitlines()[0]}",)
            verdicts[arm.name] = ArmVerdict(arm.role, alpha, repeats, "failed", reasons, error=failed[which])
        else:
            verdict, reasons = arm_verdict(effects[arm.name], targets)
            if arm.role == "aa" and not effects[arm.name]["significant"].any():
                reasons = [AA_QUIET]
            verdicts[arm.name] = ArmVerdict(arm.role, alpha, repeats, verdict, tuple(reasons))  # type: ignore[arg-type]
    return verdicts
