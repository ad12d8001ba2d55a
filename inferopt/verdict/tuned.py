"""The search's final word (issue 14): a recommendation is "proven" only when the chain after it — the
one-variable ablation at the production rate, the validation scenarios, the quality-and-cost gate and the
verdict of `flows.optimize` — accepts it. `chain_outcome` combines the search's decision with the verdicts of
the points judged (in rank order: the recommendation, then the points it tied with): the first accepted one is
the proven change; none accepted is "not proven" with each verdict's first reasons; nothing to judge (no change
helps, nothing to try) keeps the search's own answer.

Deliberately not here: running the chain (flows.tune calls flows.optimize), and any decision of the steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

ChainDecision = Literal["proven", "not_proven", "nothing_to_judge"]
REASONS_SHOWN = 3  # of each judged point's verdict reasons, in the message


@dataclass(frozen=True)
class Judged:
    """One point through the chain: its label, its candidate YAML, and the verdict (`refused`: the pre-run check
    or the cheat lint stopped it; `error`: the flow raised) with its reasons and MLflow run."""

    label: str
    candidate: str
    decision: Literal["accept", "reject", "inconclusive", "refused", "error"]
    reasons: tuple[str, ...] = ()
    run_id: str | None = None
    report: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "reasons": list(self.reasons)}


@dataclass(frozen=True)
class ChainOutcome:
    decision: ChainDecision
    proven: Judged | None
    judged: tuple[Judged, ...]
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "decision": self.decision,
            "proven": self.proven.label if self.proven else None,
            "verdict_run_id": self.proven.run_id if self.proven else None,
            "message": self.message,
            "judged": [j.to_dict() for j in self.judged],
        }


def chain_outcome(search_decision: str, judged: Sequence[Judged]) -> ChainOutcome:
    """The final word over the search's decision and its judged points (see the module docstring)."""
    if not judged:
        why = f"the search's decision is {search_decision!r}: no candidate to judge"
        return ChainOutcome("nothing_to_judge", None, (), why)
    accepted = [j for j in judged if j.decision == "accept"]
    lines = [_line(j) for j in judged]
    if accepted:
        best = accepted[0]
        head = f"{best.label}: recommended and proven (verdict ACCEPT, run {best.run_id})"
        if best is not judged[0]:
            head += f"; the search's first pick {judged[0].label} was not accepted"
        return ChainOutcome("proven", best, tuple(judged), "; ".join([head, *lines]))
    head = f"recommended but not proven: none of the {len(judged)} point(s) judged was accepted"
    return ChainOutcome("not_proven", None, tuple(judged), "; ".join([head, *lines]))


def _line(j: Judged) -> str:
    reasons = " | ".join(r.strip() for r in j.reasons[:REASONS_SHOWN])
    return f"{j.label}: {j.decision.upper()}" + (f" ({reasons})" if reasons else "")
