"""The final verdict: accept / reject / inconclusive, with every reason that decided it (G4).

Accept only when the ablation shows the candidate improves its target metrics beyond noise, every
validation scenario meets the SLOs, and the quality-and-cost gate passes. Any hard failure (a failed or
regressing arm, an SLO failure, a failed gate) rejects. Anything else — no detectable change, a skipped
check that was required — is inconclusive. A locate/choose mismatch never decides alone but is always
reported.

Benchmark cheats (SPEC V4, `inferopt.verdict.lint`): every finding is reported. A `refuse` finding found after the run
makes the decision at best inconclusive (the evidence cannot be trusted, so it can neither accept nor, on
its own, reject); a `flag` is a warning; a `note` is a reason line that decides nothing.

Deliberately not here: computing any of the evidence; this is a pure function of the steps' outputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol


class LintFinding(Protocol):
    """What `decide` reads of an `inferopt.verdict.lint.Finding`."""

    cheat: str
    severity: str
    message: str


@dataclass
class Verdict:
    decision: str  # accept / reject / inconclusive
    reasons: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    evidence: dict[str, Any] = field(default_factory=dict)
    lint: list[dict[str, Any]] = field(default_factory=list)  # the cheat-lint findings (SPEC V4)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def decide(
    *,
    ablation_verdict: str,
    ablation_reasons: list[str],
    scenarios_passed: dict[str, bool],
    scenario_reasons: dict[str, list[str]],
    quality_status: str,
    quality_required: bool,
    quality_reasons: list[str],
    cost_status: str,
    cost_reasons: list[str],
    locate_cause: str,
    choice_warning: str | None,
    evidence: dict[str, Any] | None = None,
    lint: Sequence[LintFinding] = (),
) -> Verdict:
    rejects, inconclusive, reasons, warnings = [], [], [], []
    reasons.append(f"locate: dominant cause '{locate_cause}'")
    if choice_warning:
        warnings.append(choice_warning)
    lint_reasons, lint_warnings, lint_inconclusive = _lint_lines(lint)
    warnings += lint_warnings
    inconclusive += lint_inconclusive

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

    reasons.append(
        f"gate quality: {quality_status}{' (required: the change can alter outputs)' if quality_required else ''}"
    )
    reasons += [f"  {r}" for r in quality_reasons]
    if quality_status == "fail":
        rejects.append("quality gate failed")
    elif quality_status == "skipped" and quality_required:
        inconclusive.append("quality gate required but skipped")
    elif quality_status == "inconclusive":
        inconclusive.append("quality: some slice's interval straddles the margin (more documents needed to tell)")
    reasons.append(f"gate cost: {cost_status}")
    reasons += [f"  {r}" for r in cost_reasons]
    if cost_status == "fail":
        rejects.append("cost per successful task is worse")
    elif cost_status == "skipped":
        inconclusive.append("cost not measured")

    reasons += lint_reasons

    if rejects:
        decision = "reject"
        reasons.insert(0, "REJECT because: " + "; ".join(rejects))
    elif inconclusive:
        decision = "inconclusive"
        reasons.insert(0, "INCONCLUSIVE because: " + "; ".join(inconclusive))
    else:
        decision = "accept"
        reasons.insert(
            0, "ACCEPT: improves its targets beyond noise, meets every SLO scenario, passes quality and cost"
        )
    return Verdict(
        decision=decision,
        reasons=reasons,
        warnings=warnings,
        evidence=evidence or {},
        lint=[_finding_dict(f) for f in lint],
    )


def _finding_dict(f: LintFinding) -> dict[str, Any]:
    return {"cheat": f.cheat, "severity": f.severity, "message": f.message, "evidence": getattr(f, "evidence", {})}


def _lint_lines(lint: Sequence[LintFinding]) -> tuple[list[str], list[str], list[str]]:
    """(reason lines, warnings, inconclusive causes) for the cheat-lint findings (SPEC V4)."""
    by = {s: [f for f in lint if f.severity == s] for s in ("refuse", "flag", "note")}
    if by["refuse"] or by["flag"]:
        head = (
            "lint (V4 benchmark cheats): "
            + "; ".join(
                f"{sev} {', '.join(sorted({f.cheat for f in by[sev]}))}" for sev in ("refuse", "flag") if by[sev]
            )
            + " (details in the warnings)"
        )
    else:
        head = "lint (V4 benchmark cheats): clean"
    reasons = [head] + [f"  note {f.cheat}: {f.message}" for f in by["note"]]
    warnings = [f"benchmark cheat {f.cheat} (refused): {f.message}" for f in by["refuse"]]
    warnings += [f"benchmark cheat {f.cheat} (flagged): {f.message}" for f in by["flag"]]
    cheats = sorted({f.cheat for f in by["refuse"]})
    inconclusive = [f"benchmark cheat(s) {', '.join(cheats)} found after the run (SPEC V4)"] if cheats else []
    return reasons, warnings, inconclusive
