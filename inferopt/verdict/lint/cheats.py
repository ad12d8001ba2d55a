"""The benchmark-cheat lint's shared vocabulary (SPEC V4): the cheats, the severities, `Finding`, the
`lint.allow` override and the `lint.json` summary. The checks that produce findings live in `prerun.py`
(the config, before any model loads) and `postrun.py` (a run's artifacts).

The five cheats (ids used in findings, tags and `lint.allow`):

- `fixed_outputs` — outputs forced short or fixed. Config level: the engine ignores EOS or forces a minimum
  length (hf `stop_at_eos: false`; vLLM `ignore_eos` / `min_tokens` in `extra_args`), or the workload asks
  for one single output length (`output_sigma: 0`, `output_min == output_max`, a trace with one length, or
  bounds that clip every draw to one value). Post run: the engine reports `ignore_eos` / `min_tokens` in its
  info, or every ok request came back with the same length although the workload asked for several.
  What is *not* a cheat: capping each request at a length drawn from the production distribution (that is
  how a length mix is replayed on a model that does not produce it by itself), or a narrow distribution.
  A single fixed length is what a kernel microbenchmark uses (`vllm bench latency --output-len 128`) and is
  legitimate for *that* question; it is refused here because this pipeline's verdict claims a serving gain
  on the production load (V1), and equal lengths hide decode cost and the head-of-line blocking of static
  batching (B1). A deliberate microbenchmark opts in with `lint.allow: [fixed_outputs]` + `lint.reason`.
  The fake engine never emits EOS by design (a test double: every output runs to its target length): that is
  a `note`, not a refusal — its timings never stand for a served model.
- `warm_cache` — caches warm at the start of the measured window: an engine with a prefix cache that did not
  reset it after the warm-up requests (they replay the workload's own first prompts; the engine reports
  `info()["prefix_cache_reset"]`), warm-up records inside the measured records or phase table, or a
  warm-up count other than the one configured and declared (`MeasuredRun.warmup_declared`).
- `no_queueing` — a single-request test: a run that sends fewer than two requests (config level), or no
  request ever had another in flight (`concurrency` <= 1 in every run; post run). A validation without a
  burst scenario is flagged (V2: queue absorption is never tested).
- `best_only` — every planned ablation arm (`inferopt.ablate.plan.plan_arms`: baseline, aa, one per change,
  candidate) must come back with its outcome (failed and skipped arms included) and be logged.
- `dropped_failures` — failed requests missing from the denominator: records (all outcomes) must equal the
  requests sent per run; the phase table must keep every record; every reported rate (ok / timeout /
  rejected / error, `requests`) must divide by all requests sent; the cost table's request count likewise.

Severities: `refuse` — config level: the run does not start (`refuse_cheats` raises `CheatRefused`, a
`ConfigError`); post run: the verdict is at best inconclusive. `flag` — the verdict carries a warning.
`note` — recorded, decides nothing. `lint.allow` turns a `refuse` of an allowable cheat into a `flag` that
names the override (`best_only` and `dropped_failures` are integrity failures and cannot be allowed).

Deliberately not here: the checks themselves (`prerun.py`, `postrun.py`), gathering a run's artifacts
(`collect.py`), running anything, tracking (tasks/verdict.py logs `lint.json`), or the verdict itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from inferopt.config import ConfigError, LintSettings

CHEATS: dict[str, str] = {
    "fixed_outputs": "outputs forced short or fixed",
    "warm_cache": "caches warm at the start of the measured window",
    "no_queueing": "no queueing (single-request test)",
    "best_only": "only the best configuration reported",
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
