"""The final verdict: accept / reject / inconclusive, with every reason that decided it (G4).

Accept only when the ablation shows the candidate improves its target metrics beyond noise, every
validation scenario meets the SLOs, and the quality-and-cost gate passes. Any hard failure (a failed or
regressing arm, an SLO failure, a failed gate) rejects. Anything else — no detectable change, a skipped
check that was required — is inconclusive. A locate/choose mismatch never decides alone but is always
reported.

Deliberately not here: computing any of the evidence; this is a pure function of the steps' outputs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Verdict:
    decision: str                       # accept / reject / inconclusive
    reasons: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def decide(*, ablation_verdict: str, ablation_reasons: list[str], scenarios_passed: dict[str, bool],
           scenario_reasons: dict[str, list[str]], quality_status: str, quality_required: bool,
           quality_reasons: list[str], cost_status: str, cost_reasons: list[str],
           locate_cause: str, choice_warning: str | None, evidence: dict[str, Any] | None = None) -> Verdict:
    rejects, inconclusive, reasons, warnings = [], [], [], []
    reasons.append(f"locate: dominant cause '{locate_cause}'")
    if choice_warning:
        warnings.append(choice_warning)

    reasons.append(f"ablate: candidate {ablation_verdict}")
    reasons += [f"  {r}" for r in ablation_reasons]
    if ablation_verdict in ("failed", "regresses"):
        rejects.append(f"ablation: {ablation_verdict}")
    elif ablation_verdict != "improves":
        inconclusive.append(f"ablation: {ablation_verdict}")

    if not scenarios_passed:
        inconclusive.append("validation: no scenario ran")
    for name, passed in scenarios_passed.items():
        reasons.append(f"validate[{name}]: {'pass' if passed else 'FAIL'}")
        reasons += [f"  {r}" for r in scenario_reasons.get(name, [])]
        if not passed:
            rejects.append(f"validation scenario '{name}' misses the SLO")

    reasons.append(f"gate quality: {quality_status}{' (required: the change can alter outputs)' if quality_required else ''}")
    reasons += [f"  {r}" for r in quality_reasons]
    if quality_status == "fail":
        rejects.append("quality gate failed")
    elif quality_status == "skipped" and quality_required:
        inconclusive.append("quality gate required but skipped")
    reasons.append(f"gate cost: {cost_status}")
    reasons += [f"  {r}" for r in cost_reasons]
    if cost_status == "fail":
        rejects.append("cost per successful request is worse")
    elif cost_status == "skipped":
        inconclusive.append("cost not measured")

    if rejects:
        decision = "reject"
        reasons.insert(0, "REJECT because: " + "; ".join(rejects))
    elif inconclusive:
        decision = "inconclusive"
        reasons.insert(0, "INCONCLUSIVE because: " + "; ".join(inconclusive))
    else:
        decision = "accept"
        reasons.insert(0, "ACCEPT: improves its targets beyond noise, meets every SLO scenario, passes quality and cost")
    return Verdict(decision=decision, reasons=reasons, warnings=warnings, evidence=evidence or {})
