"""Step 6's quality evidence: the sliced suite run on baseline and candidate, compared per slice (G1, G2).

Which model is evaluated: `gate.quality_model = "system"` evaluates each arm's own model (a real trained
model on a GPU); otherwise each arm's settings (dtype, attention, weight quantization, KV cache) are applied
to a proxy model that actually solves the tasks (`builtin:quality-tiny`, trained by `inferopt.quality.train`),
because the serving model here is random and would score zero everywhere. The result says which, so a
proxy result is never presented as the serving model's own quality.

Deliberately not here: the statistics (`sliced.py`), lm-eval wiring (`lmeval.py`), the verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from inferopt.config import AnySystem, GateSettings, HFSystem, ModelSpec
from inferopt.quality.sliced import PRIMARY_METRIC, accuracy_by_slice, calibration, compare, overall_status


@dataclass
class SuiteGate:
    status: str                                   # pass / fail / inconclusive / skipped
    reasons: list[str]
    model: str = ""                               # what was evaluated (and whether it is a proxy)
    table: pd.DataFrame = field(default_factory=pd.DataFrame)        # slice x metric with paired CIs
    calibration: pd.DataFrame = field(default_factory=pd.DataFrame)  # ECE / Brier per language
    accuracy: pd.DataFrame = field(default_factory=pd.DataFrame)     # arm x task x lang x context
    task_success_rate: dict[str, float] = field(default_factory=dict)  # arm -> share of documents answered right
    lm_eval_results: dict[str, Any] = field(default_factory=dict)      # arm -> lm-eval's own aggregates
    samples: dict[str, pd.DataFrame] = field(default_factory=dict)


def evaluated_system(system: HFSystem, gate: GateSettings) -> HFSystem:
    """The system the suite loads: the arm itself, or the arm's settings on the proxy model."""
    if gate.quality_model == "system":
        return system
    return system.model_copy(update={"model": ModelSpec(path=gate.quality_model)})


def task_success_rate(samples: pd.DataFrame) -> float:
    """Share of documents answered correctly on their task's primary metric (each task weighted by its docs)."""
    prim = samples[[PRIMARY_METRIC.get(t) == m for t, m in zip(samples["task"], samples["metric"])]]
    return float(prim["value"].mean()) if len(prim) else float("nan")


def run_suite(system: HFSystem, gate: GateSettings) -> Any:
    import torch

    from inferopt.model.loading import load_system_model
    from inferopt.quality.lmeval import run_in_memory

    prev = torch.get_num_threads()
    torch.set_num_threads(system.torch_threads)
    try:
        loaded = load_system_model(evaluated_system(system, gate))
        return run_in_memory(loaded.model, loaded.tokenizer, limit=gate.quality_limit, data_dir=gate.quality_data_dir)
    finally:
        torch.set_num_threads(prev)


def sliced_gate(base: AnySystem, cand: AnySystem, gate: GateSettings) -> SuiteGate:
    """Run the suite on both arms and compare them slice by slice; never raises (a failure is `skipped`
    with the reason, and the verdict decides what a skipped required gate means)."""
    if not isinstance(base, HFSystem) or not isinstance(cand, HFSystem):
        return SuiteGate("skipped", [f"the suite runs in-process on hf systems; this is {base.engine}/{cand.engine}"])
    model = cand.model.path if gate.quality_model == "system" else f"{gate.quality_model} (proxy: each arm's settings applied to it)"
    try:
        rb, rc = run_suite(base, gate), run_suite(cand, gate)
    except Exception as exc:  # noqa: BLE001 - evidence that could not be gathered is reported, not raised
        return SuiteGate("skipped", [f"quality suite failed to run: {type(exc).__name__}: {exc}"], model=model)
    table = compare(rb.samples, rc.samples, margin=gate.quality_margin, slice_margins=gate.slice_margins,
                    mlperf_ratio=gate.mlperf_ratio, alpha=gate.quality_alpha, samples=gate.quality_bootstrap)
    cal = calibration(rb.samples, rc.samples, margin=gate.quality_margin, alpha=gate.quality_alpha)
    both = pd.concat([table, cal], ignore_index=True)
    status = overall_status(both)
    acc = pd.concat([accuracy_by_slice(rb.samples).assign(arm="baseline"),
                     accuracy_by_slice(rc.samples).assign(arm="candidate")], ignore_index=True)
    rates = {"baseline": task_success_rate(rb.samples), "candidate": task_success_rate(rc.samples)}
    reasons = [f"sliced suite on {model}: {status} ({len(both)} slice x metric checks, margin {gate.quality_margin:g}"
               + (f", MLPerf ratio {gate.mlperf_ratio:g}" if gate.mlperf_ratio else "") + ")"]
    for row in both[both["status"] != "pass"].itertuples():
        reasons.append(f"  {row.status}: {row.slice} {row.metric} {row.base_mean:.3f} -> {row.cand_mean:.3f} "
                       f"(diff {row.diff:+.3f}, {100 * (1 - gate.quality_alpha):.0f}% CI [{row.ci_lo:+.3f}, {row.ci_hi:+.3f}], n={row.n})")
    reasons.append(f"  task success rate: baseline {rates['baseline']:.3f}, candidate {rates['candidate']:.3f}")
    return SuiteGate(status, reasons, model=model, table=table, calibration=cal, accuracy=acc, task_success_rate=rates,
                     lm_eval_results={"baseline": rb.results, "candidate": rc.results},
                     samples={"baseline": rb.samples, "candidate": rc.samples})
