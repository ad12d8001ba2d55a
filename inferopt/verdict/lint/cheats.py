"""The benchmark-cheat lint's shared vocabulary (SPEC V4): the five cheats, the severities, `Finding`, the
`lint.allow` override and the `lint.json` summary. What each cheat means, what is *not* one, and why a
microbenchmark may opt in: docs/method.md, V4.

Severities: `refuse` — at config level the run does not start (`CheatRefused`, a `ConfigError`); after the
run the verdict is at best inconclusive. `flag` — the verdict carries a warning. `note` — recorded, decides
nothing. `lint.allow` turns a `refuse` of an allowable cheat into a `flag` naming the override; `best_only`
and `dropped_failures` are integrity failures and cannot be allowed.

Deliberately not here: the checks (`prerun.py`: the config, before any model loads; `postrun.py`: a run's
artifacts), gathering artifacts (`collect.py`), running anything, tracking (tasks/verdict.py logs
`lint.json`), or the verdict itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from inferopt.config import ConfigError, LintSettings

# The cheat ids used in findings, tags and `lint.allow`, with the signs each check looks for.
CHEATS: dict[str, str] = {
    # engine ignores EOS / forces a minimum length undeclared (hf `stop_at_eos: false`, vLLM flags), forced
    # lengths short of production or a natural run collapsing (`workload.output_lengths`),
    # the workload asks for one output length, or every ok request came back the same length
    "fixed_outputs": "outputs forced short or fixed",
    # prefix cache not reset after the warm-ups (`info()["prefix_cache_reset"]`), warm-up records measured, or
    # a warm-up count other than the one declared (`MeasuredRun.warmup_declared`)
    "warm_cache": "caches warm at the start of the measured window",
    # fewer than two requests, or no request ever had another in flight; no burst scenario is flagged
    "no_queueing": "no queueing (single-request test)",
    # a planned ablation arm (`inferopt.ablate.plan.plan_arms`) missing from the results or the logs
    "best_only": "only the best configuration reported",
    # records != requests sent, or a rate or the cost table not dividing by every request sent
    "dropped_failures": "failed requests missing from the denominator",
}
ALLOWABLE: tuple[str, ...] = ("fixed_outputs", "warm_cache", "no_queueing")
SEVERITIES: tuple[str, ...] = ("refuse", "flag", "note")
FORCED_LENGTH_KEYS = ("ignore_eos", "min_tokens")  # vLLM sampling params that force an output's length


@dataclass(frozen=True)
class Finding:
    """One cheat seen in a run: which (`cheat`, one of CHEATS), how bad (`severity`: refuse / flag / note),
    what was seen and the fix (`message`), and the numbers behind it (`evidence`)."""

    cheat: str
    severity: str
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.cheat not in CHEATS:
            raise ValueError(f"unknown cheat {self.cheat!r}; one of {', '.join(CHEATS)}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"unknown severity {self.severity!r}; one of {', '.join(SEVERITIES)}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        return f"[{self.severity}] {self.cheat}: {self.message}"


class CheatRefused(ConfigError):
    """A benchmark cheat found in the config (SPEC V4): the run is refused before any model loads."""

    def __init__(self, findings: Sequence[Finding]) -> None:
        self.findings = list(findings)
        lines = "\n".join(f"  - {f.cheat}: {f.message}" for f in self.findings)
        super().__init__(f"refused, benchmark cheat (SPEC V4):\n{lines}")


def apply_allow(findings: Iterable[Finding], lint: LintSettings) -> list[Finding]:
    """`lint.allow` (the documented override): a `refuse` of an allowed cheat becomes a `flag` naming the
    override and its reason, so it is recorded and warns on the verdict — never silently passed."""
    out = []
    for f in findings:
        if f.severity == "refuse" and f.cheat in lint.allow and f.cheat in ALLOWABLE:
            f = Finding(
                f.cheat,
                "flag",
                f"allowed by lint.allow (reason: {lint.reason}): {f.message}",
                {**f.evidence, "allowed": True, "allow_reason": lint.reason},
            )
        out.append(f)
    return out


def lint_summary(findings: Sequence[Finding]) -> dict[str, Any]:
    """`lint.json`: status (refused > flagged > clean), counts per severity, cheats per severity, findings."""
    counts = {s: sum(f.severity == s for f in findings) for s in SEVERITIES}
    status = "refused" if counts["refuse"] else "flagged" if counts["flag"] else "clean"
    return {
        "spec": "V4",
        "status": status,
        "counts": counts,
        "cheats": {s: sorted({f.cheat for f in findings if f.severity == s}) for s in SEVERITIES},
        "findings": [f.to_dict() for f in findings],
    }
