"""Step 6's quality evidence: the sliced suite run on baseline and candidate, compared per slice (G1, G2).

Which model: `gate.quality_model = "system"` evaluates each arm's own model (a real trained model on a GPU);
otherwise each arm's settings go onto a proxy that actually solves the tasks (`builtin:quality-tiny`, trained by
`inferopt.model.quality.train`), because the serving model here is random. The result says which. How each arm
is evaluated (`SuiteGate.paths`): hf in memory (the arm's dtype, attention, weight quantization and KV cache on
the loaded model); vLLM served (`served.py`: its own `vllm serve`, one at a time); openai served with
`quality_model: system`, else the proxy in memory with default settings (said so); fake skipped. Tasks an
endpoint could not serve are listed per arm with the reason; only documents both arms answered are compared.
`sliced_gate(..., tasks=, cache=)` runs a subset of the suite and reuses an arm's results across calls; within
one call, arms equal but for what the in-memory evaluation never reads (`UNREAD_IN_MEMORY`) run it once.

Deliberately not here: the statistics (`sliced.py`), lm-eval wiring (`lmeval.py`), launching servers
(`served.py`), the verdict.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from inferopt.config import AnySystem, GateSettings, HFSystem, ModelSpec
from inferopt.gate.judge import QualityStatus
from inferopt.gate.lmeval import SUITE, run_in_memory
from inferopt.gate.served import run_openai_served, run_vllm_served
from inferopt.gate.sliced import (
    PRIMARY_METRIC,
    accuracy_by_slice,
    calibration,
    compare,
    distance_table,
    overall_status,
)
from inferopt.model.loading import load_system_model


@dataclass(frozen=True)
class SuiteGate:
    status: QualityStatus
    reasons: list[str]
    model: str = ""  # what was evaluated (and whether it is a proxy)
    table: pd.DataFrame = field(default_factory=pd.DataFrame)  # slice x metric with paired CIs
    calibration: pd.DataFrame = field(default_factory=pd.DataFrame)  # ECE / Brier per language
    accuracy: pd.DataFrame = field(default_factory=pd.DataFrame)  # arm x task x lang x context
    distance: pd.DataFrame = field(default_factory=pd.DataFrame)  # retrieval accuracy per distance bucket, both arms
    task_success_rate: dict[str, float] = field(default_factory=dict)  # arm -> share of documents answered right
    lm_eval_results: dict[str, Any] = field(default_factory=dict)  # arm -> lm-eval's own aggregates
    samples: dict[str, pd.DataFrame] = field(default_factory=dict)
    paths: dict[str, str] = field(default_factory=dict)  # arm -> served / in-memory / in-memory proxy
    evaluated: dict[str, str] = field(default_factory=dict)  # arm -> what exactly was evaluated, in words
    skipped_tasks: dict[str, dict[str, str]] = field(default_factory=dict)  # arm -> task -> why it could not run


def evaluated_system(system: HFSystem, gate: GateSettings) -> HFSystem:
    """The system the suite loads: the arm itself, or the arm's settings on the proxy model."""
    if gate.quality_model == "system":
        return system
    return system.model_copy(update={"model": ModelSpec(path=gate.quality_model)})


def task_success_rate(samples: pd.DataFrame) -> float:
    """Share of documents answered correctly on their task's primary metric (each task weighted by its docs)."""
    prim = samples[[PRIMARY_METRIC.get(t) == m for t, m in zip(samples["task"], samples["metric"], strict=False)]]
    return float(prim["value"].mean()) if len(prim) else float("nan")


def run_suite(system: HFSystem, gate: GateSettings, tasks: tuple[str, ...] = SUITE) -> Any:
    """In memory: the arm's settings on the evaluated model, loaded in this process."""
    import torch

    prev = torch.get_num_threads()
    torch.set_num_threads(system.torch_threads)
    try:
        loaded = load_system_model(evaluated_system(system, gate))
        return run_in_memory(
            loaded.model, loaded.tokenizer, tasks=tasks, limit=gate.quality_limit, data_dir=gate.quality_data_dir
        )
    finally:
        torch.set_num_threads(prev)


def evaluation_path(system: AnySystem, gate: GateSettings) -> str | None:
    """How the suite evaluates this arm: `in-memory`, `in-memory proxy`, `served`, or None (cannot)."""
    proxy = gate.quality_model != "system"
    kind = system.capabilities.quality_eval
    if kind == "in-memory":
        return "in-memory proxy" if proxy else "in-memory"
    if kind == "served":
        return "served"
    if kind == "endpoint":
        return "in-memory proxy" if proxy else "served"
    return None


def run_arm(system: AnySystem, gate: GateSettings, tasks: tuple[str, ...] = SUITE) -> tuple[Any, str]:
    """The suite (`tasks` of it) on one arm along its `evaluation_path`; returns (SuiteResult, what was
    evaluated, in words)."""
    kind = system.capabilities.quality_eval
    if kind == "served":  # a server we launch with the arm's knobs (vLLM)
        return run_vllm_served(system, gate, tasks)
    if kind == "endpoint":
        if gate.quality_model == "system":
            return run_openai_served(system, gate, tasks)
        proxy = HFSystem(name=f"{system.name}-proxy", model=ModelSpec(path=gate.quality_model))
        return run_suite(proxy, gate, tasks), (
            f"in-memory proxy: {gate.quality_model} with default settings (an external "
            "endpoint's knobs cannot be applied to it: this is the proxy's own quality)"
        )
    assert kind == "in-memory", f"the suite cannot evaluate a {system.engine} arm"
    what = (
        f"in-memory: {system.model.path} as loaded"
        if gate.quality_model == "system"
        else f"in-memory proxy: {gate.quality_model} with the arm's settings"
    )
    return run_suite(system, gate, tasks), what


ArmCache = dict[str, tuple[Any, str]]  # `arm_key` -> run_arm's (SuiteResult, what was evaluated)

# an hf system's fields that the in-memory evaluation never reads (`run_suite` loads the model with the arm's
# dtype, attention, device, weights, KV cache, window and threads, then lm-eval drives it): the serving queue
UNREAD_IN_MEMORY = frozenset({"name", "batching"})


def arm_key(system: AnySystem, gate: GateSettings, tasks: tuple[str, ...]) -> str:
    """Everything an arm's suite result depends on: the system (in memory, less `UNREAD_IN_MEMORY`; served,
    all of it, as a server's scheduling can change its outputs), the evaluated model, the documents."""
    fields = system.model_dump(mode="json")
    if system.capabilities.quality_eval == "in-memory":
        fields = {k: v for k, v in fields.items() if k not in UNREAD_IN_MEMORY}
    what = [fields, gate.quality_model, gate.quality_limit, gate.quality_data_dir, tasks]
    return json.dumps(what, sort_keys=True, default=str)


def cached_arm(system: AnySystem, gate: GateSettings, tasks: tuple[str, ...], cache: ArmCache) -> tuple[Any, str]:
    """`run_arm`, once per `arm_key` in `cache` (greedy decoding and log-likelihoods are deterministic: a
    baseline shared by several candidates is evaluated once; the statistics are the same)."""
    key = arm_key(system, gate, tasks)
    if key in cache:
        result, said = cache[key]
        return result, f"{said} (reused: the evaluation of an arm that differs from this one in nothing it reads)"
    cache[key] = run_arm(system, gate, tasks)
    return cache[key]


def distance_lines(dist: pd.DataFrame) -> list[str]:
    """The retrieval-by-distance table (both languages pooled) as reason lines: where a candidate forgets."""
    rows = dist[dist["lang"] == "all"] if not dist.empty else dist
    if rows.empty:
        return []
    out = ["  kv retrieval by key-to-query distance (tokens: baseline -> candidate, n):"]
    out += [
        f"    {int(r.bucket_lo):>3}-{int(r.bucket_hi):<3} {r.base_acc:.3f} -> {r.cand_acc:.3f} (n={int(r.n)})"
        for r in rows.itertuples()
    ]
    return out


def sliced_gate(
    base: AnySystem,
    cand: AnySystem,
    gate: GateSettings,
    *,
    tasks: tuple[str, ...] = SUITE,
    cache: ArmCache | None = None,
) -> SuiteGate:
    """Run the suite (its `tasks`) on both arms and compare them slice by slice; never raises (a failure is
    `skipped` with the reason, and the verdict decides what a skipped required gate means). `cache` (a dict
    kept by the caller) reuses an arm's results when the same arm comes again (`cached_arm`)."""
    arms = {"baseline": base, "candidate": cand}
    cache = {} if cache is None else cache  # arms that evaluate the same settings run the suite once
    paths = {arm: evaluation_path(s, gate) for arm, s in arms.items()}
    if None in paths.values():
        return SuiteGate(
            "skipped",
            [(f"the suite cannot evaluate {base.engine}/{cand.engine} arms (a fake engine generates no text)")],
        )
    model = (
        cand.model.path
        if gate.quality_model == "system" and hasattr(cand, "model")
        else (
            "each arm's own model"
            if gate.quality_model == "system"
            else f"{gate.quality_model} (proxy: each arm's settings applied to it)"
        )
    )
    results: dict[str, Any] = {}
    said: dict[str, str] = {}
    for arm, system in arms.items():
        try:
            results[arm], said[arm] = cached_arm(system, gate, tasks, cache)
        except Exception as exc:  # noqa: BLE001 - evidence that could not be gathered is reported, not raised
            return SuiteGate(
                "skipped",
                [
                    (
                        f"quality suite failed to run on the {arm} ({paths[arm]}): "
                        f"{type(exc).__name__}: {str(exc)[-1500:]}"
                    )
                ],
                model=model,
                paths=paths,
                evaluated=said,
            )
    rb, rc = results["baseline"], results["candidate"]
    path_lines = [f"  {arm} [{paths[arm]}]: {said[arm]}" for arm in arms]
    skipped = {arm: dict(r.skipped) for arm, r in results.items() if r.skipped}
    skip_lines = [f"  {arm}: task {t} skipped ({why})" for arm, d in skipped.items() for t, why in d.items()]
    if rb.samples.empty or rc.samples.empty:
        return SuiteGate(
            "skipped",
            ["quality suite: no task ran on both arms", *path_lines, *skip_lines],
            model=model,
            paths=paths,
            evaluated=said,
            skipped_tasks=skipped,
        )
    table = compare(
        rb.samples,
        rc.samples,
        margin=gate.quality_margin,
        slice_margins=gate.slice_margins,
        mlperf_ratio=gate.mlperf_ratio,
        alpha=gate.quality_alpha,
        samples=gate.quality_bootstrap,
    )
    has_mc = all("p_gold" in r.samples for r in (rb, rc))  # no multiple choice ran on an arm: no calibration
    cal = (
        calibration(rb.samples, rc.samples, margin=gate.quality_margin, alpha=gate.quality_alpha)
        if has_mc
        else pd.DataFrame()
    )
    both = pd.concat([table, cal], ignore_index=True)
    status = overall_status(both)
    acc = pd.concat(
        [accuracy_by_slice(rb.samples).assign(arm="baseline"), accuracy_by_slice(rc.samples).assign(arm="candidate")],
        ignore_index=True,
    )
    rates = {"baseline": task_success_rate(rb.samples), "candidate": task_success_rate(rc.samples)}
    dist = distance_table(rb.samples, rc.samples)
    reasons = [
        f"sliced suite on {model}: {status} ({len(both)} slice x metric checks, margin {gate.quality_margin:g}"
        + (f", MLPerf ratio {gate.mlperf_ratio:g}" if gate.mlperf_ratio else "")
        + ")",
        *path_lines,
        *skip_lines,
    ]
    if all(s.capabilities.quality_eval == "endpoint" for s in arms.values()) and gate.quality_model != "system":
        status = "skipped"
        reasons.append(
            "  neither arm's settings reach the proxy (external endpoints): the comparison says nothing "
            "about the change; the suite only gives the task success rate"
        )
    blind = both[both["status"] == "uninformative"] if "status" in both else both.iloc[0:0]
    if len(blind):
        reasons.append(
            "  uninformative (baseline at the floor, or no drop of the margin detectable at its size; not a pass): "
            + ", ".join(f"{r.slice}:{r.metric} ({r.base_mean:.2f}, mde {r.mde:.2f})" for r in blind.itertuples())
        )
    for row in both[~both["status"].isin(["pass", "uninformative"])].itertuples():
        reasons.append(
            f"  {row.status}: {row.slice} {row.metric} {row.base_mean:.3f} -> {row.cand_mean:.3f} "
            f"(diff {row.diff:+.3f}, {100 * (1 - gate.quality_alpha):.0f}% CI "
            f"[{row.ci_lo:+.3f}, {row.ci_hi:+.3f}], n={row.n})"
        )
    reasons.append(f"  task success rate: baseline {rates['baseline']:.3f}, candidate {rates['candidate']:.3f}")
    reasons += distance_lines(dist)
    return SuiteGate(
        status,
        reasons,
        model=model,
        table=table,
        calibration=cal,
        accuracy=acc,
        distance=dist,
        task_success_rate=rates,
        lm_eval_results={"baseline": rb.results, "candidate": rc.results},
        samples={"baseline": rb.samples, "candidate": rc.samples},
        paths=paths,
        evaluated=said,
        skipped_tasks=skipped,
    )
