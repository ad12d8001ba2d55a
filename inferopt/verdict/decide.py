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
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from inferopt.ablate import ArmVerdict
from inferopt.choose import Choice
from inferopt.gate import GateResult
from inferopt.locate import Diagnosis
from inferopt.validate import ScenarioVerdict

Decision = Literal["accept", "reject", "inconclusive"]
ACCEPT_LINE = "ACCEPT: improves its targets beyond noise, meets every SLO scenario, passes quality and cost"


class LintFinding(Protocol):
    """What `decide` reads of an `inferopt.verdict.lint.Finding`."""

    cheat: str
    severity: str
    message: str


@dataclass(frozen=True)
class Verdict:
    """The decision, every reason (the first line says what decided it), warnings, the steps' evidence and the
    cheat lint's findings (SPEC V4). `to_dict()` is `verdict.json`."""

    decision: Decision
    reasons: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    evidence: dict[str, Any] = field(default_factory=dict)
    lint: tuple[dict[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "decision": self.decision,
            "reasons": list(self.reasons),
            "warnings": list(self.warnings),
            "evidence": self.evidence,
            "lint": [dict(f) for f in self.lint],
        }


@dataclass(frozen=True)
class _Lines:
    """One step's part of the verdict: its reason lines, and why it rejects or leaves the verdict open."""

    reasons: tuple[str, ...] = ()
    rejects: tuple[str, ...] = ()
    inconclusive: tuple[str, ...] = ()


def decide(
    *,
    diagnosis: Diagnosis,
    choice: Choice,
    ablation: ArmVerdict,
    scenarios: Sequence[ScenarioVerdict],
    gate: GateResult,
    lint: Sequence[LintFinding] = (),
    evidence: dict[str, Any] | None = None,
) -> Verdict:
    """Accept / reject / inconclusive from one result per step (see the module docstring): `diagnosis` (locate),
    `choice` (choose; its warning is only reported), `ablation` (the candidate arm's verdict), `scenarios`
    (validate), `gate` (quality and cost), and the cheat lint's findings."""
    lint_reasons, lint_warnings, lint_inconclusive = _lint_lines(lint)
    steps = (_ablation(ablation), _validation(scenarios), _quality(gate), _cost(gate))
    reasons = [f"locate: dominant cause '{diagnosis.cause}'", *(r for s in steps for r in s.reasons), *lint_reasons]
    rejects = [r for s in steps for r in s.rejects]
    inconclusive = [*lint_inconclusive, *(r for s in steps for r in s.inconclusive)]
    if rejects:
        decision: Decision = "reject"
        head = "REJECT because: " + "; ".join(rejects)
    elif inconclusive:
        decision, head = "inconclusive", "INCONCLUSIVE because: " + "; ".join(inconclusive)
    else:
        decision, head = "accept", ACCEPT_LINE
    return Verdict(
        decision=decision,
        reasons=(head, *reasons),
        warnings=(*([choice.warning] if choice.warning else []), *lint_warnings),
        evidence=evidence or {},
        lint=tuple(_finding_dict(f) for f in lint),
    )


def _ablation(arm: ArmVerdict) -> _Lines:
    reasons = (f"ablate: candidate {arm.verdict}", *(f"  {r}" for r in arm.reasons))
    if arm.verdict in ("failed", "regresses"):
        return _Lines(reasons, rejects=(f"ablation: {arm.verdict}",))
    if arm.verdict != "improves":
        return _Lines(reasons, inconclusive=(f"ablation: {arm.verdict}",))
    return _Lines(reasons)


def _validation(scenarios: Sequence[ScenarioVerdict]) -> _Lines:
    reasons: list[str] = []
    for s in scenarios:
        reasons.append(f"validate[{s.name}]: {'pass' if s.passed else 'FAIL'}")
        reasons += [f"  {r}" for r in s.reasons]
    rejects = tuple(f"validation scenario '{s.name}' misses the SLO" for s in scenarios if not s.passed)
    return _Lines(tuple(reasons), rejects, () if scenarios else ("validation: no scenario ran",))


def _quality(gate: GateResult) -> _Lines:
    required = " (required: the change can alter outputs)" if gate.quality_required else ""
    reasons = (f"gate quality: {gate.quality_status}{required}", *(f"  {r}" for r in gate.quality_reasons))
    if gate.quality_status == "fail":
        return _Lines(reasons, rejects=("quality gate failed",))
    if gate.quality_status == "skipped" and gate.quality_required:
        return _Lines(reasons, inconclusive=("quality gate required but skipped",))
    if gate.quality_status == "inconclusive":
        why = "quality: some slice's interval straddles the margin (more documents needed to tell)"
        return _Lines(reasons, inconclusive=(why,))
    return _Lines(reasons)


def _cost(gate: GateResult) -> _Lines:
    reasons = (f"gate cost: {gate.cost_status}", *(f"  {r}" for r in gate.cost_reasons))
    if gate.cost_status == "fail":
        return _Lines(reasons, rejects=("cost per successful task is worse",))
    if gate.cost_status == "skipped":
        return _Lines(reasons, inconclusive=("cost not measured",))
    return _Lines(reasons)


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
