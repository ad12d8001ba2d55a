"""The overload scenario (SPEC V2): arrivals above capacity, once with admission control and once without.

1. The judged run: the system with its queue bounded (`admission_limit`, else the system's own bound:
   `batching.max_queue` for hf/fake, `max_num_queued_reqs` for vLLM). Excess arrivals are rejected (HTTP
   503/429 or the engine's `RequestRejected`) and recorded as `rejected`, optionally retried by the scenario's
   `retry` policy (`inferopt.transport.retry`). It passes when the requests it admitted meet the SLOs
   (rejections are the point, not a failure), the fairness check holds, and — when the comparison ran — it
   served at least `MIN_GOODPUT_RATIO` of what the unbounded queue served (shedding everything is not
   admission control working).
2. The comparison run (`compare_unbounded`, not judged): the same requests with no queue bound. Its TTFT per
   quarter of the run against the requests in flight at arrival shows the queue growing and p99 with it.
An `openai` system (a server we do not launch) runs as it is: its bound cannot be changed from here.

Deliberately not here: the SLO and fairness checks themselves (`judge.py`), load generation (`measure`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from inferopt.config import AnySystem, SLOConfig
from inferopt.measure.session import MeasuredRun
from inferopt.measure.slices import headline
from inferopt.measure.slo import RequestSLO
from inferopt.stats.inference import quantile
from inferopt.validate.judge import (
    ScenarioLoad,
    ScenarioResult,
    add_attempts,
    check_slo,
    failed_result,
    retry_wrapper,
)

MIN_GOODPUT_RATIO = 0.5
WINDOWS = 4


def admission_limit_of(system: AnySystem) -> int | None:
    """The system's queue bound (None = unbounded or not ours to know)."""
    return system.capabilities.queue_bound


def with_admission_limit(system: AnySystem, limit: int | None) -> AnySystem:
    """`system` with its queue bound set to `limit` (None = unbounded); a system whose bound cannot be set
    from here (an endpoint) unchanged."""
    bounded = system.with_queue_bound(limit)
    return system if bounded is None else bounded


def queue_growth(run: MeasuredRun, windows: int = WINDOWS) -> pd.DataFrame:
    """TTFT of served requests per window of the run (equal spans of intended send time) beside how many
    requests were in flight when each arrived (`concurrency`: the client's view of the queue)."""
    intended = {r.request_id: r.intended_s for r in run.records}
    ph = run.phases.assign(intended_s=run.phases["request_id"].map(intended))
    if ph.empty:
        return pd.DataFrame()
    t0, t1 = float(ph["intended_s"].min()), float(ph["intended_s"].max())
    edges = np.linspace(t0, t1 + 1e-9, windows + 1)
    ph["window"] = np.clip(np.searchsorted(edges, ph["intended_s"], side="right") - 1, 0, windows - 1)
    rows = []
    for w in range(windows):
        g = ph[ph["window"] == w]
        ok = g[g["outcome"] == "ok"]["ttft_ms"].dropna().to_numpy(float)
        rows.append(
            {
                "window": w + 1,
                "start_s": edges[w] - t0,
                "end_s": edges[w + 1] - t0,
                "requests": len(g),
                "ok": int((g["outcome"] == "ok").sum()),
                "rejected": int((g["outcome"] == "rejected").sum()),
                "timeout": int((g["outcome"] == "timeout").sum()),
                "ttft_ms_p50": quantile(ok, 0.5),
                "ttft_ms_p99": quantile(ok, 0.99),
                "in_flight_median": float(g["concurrency"].median()) if len(g) else float("nan"),
                "in_flight_max": float(g["concurrency"].max()) if len(g) else float("nan"),
            }
        )
    return pd.DataFrame(rows)


def _growth_line(growth: pd.DataFrame, label: str) -> str:
    first, last = growth.iloc[0], growth.iloc[-1]
    return (
        f"{label}: TTFT p99 {first['ttft_ms_p99'] / 1000:.2f} s in the first quarter of the run -> "
        f"{last['ttft_ms_p99'] / 1000:.2f} s in the last (requests in flight at arrival, median "
        f"{first['in_flight_median']:.0f} -> {last['in_flight_median']:.0f})"
    )


def run_overload(system: AnySystem, load: ScenarioLoad, slo: SLOConfig) -> ScenarioResult:
    sc = load.scenario
    limit = sc.admission_limit if sc.admission_limit is not None else admission_limit_of(system)
    bounded = with_admission_limit(system, limit) if limit is not None else system
    wrap, made = retry_wrapper(sc, seed=load.workload.seed)
    run = load.run(bounded, wrap_engine=wrap)
    if run.failed:
        return failed_result(sc, run)
    metrics = headline(run.phases, run.duration_s, RequestSLO.from_slo(slo))  # + SLO attainment and goodput
    metrics["admission_limit"] = float(limit) if limit is not None else float("nan")
    result = ScenarioResult(sc, run, metrics=metrics)
    growth = queue_growth(run)
    result.tables["queue_growth"] = growth
    settable = system.capabilities.queue_bound_knob is not None
    if limit is None and not settable:
        passed, reasons = check_slo(metrics, slo, rejections_allowed=True)
        reasons.insert(0, "a server we do not launch: run with its own admission control (bound unknown here)")
    elif limit is None:
        passed, reasons = check_slo(metrics, slo)
        reasons.insert(
            0,
            f"no admission control (unbounded queue): p99 TTFT {metrics['ttft_ms_p99'] / 1000:.2f} s; "
            "fix: set admission_limit (max_queue / max_num_queued_reqs)",
        )
        if len(growth):
            reasons.insert(1, _growth_line(growth, "unbounded queue"))
    else:
        passed, reasons = check_slo(metrics, slo, rejections_allowed=True)
        refused = sum(
            a.outcome == "rejected" and not a.request_id.startswith("warmup-") for eng in made for a in eng.attempts
        )  # attempts refused, retried or not
        metrics["rejected_attempts"] = float(refused)
        retried = f" ({refused} attempts refused in all, the client retrying)" if made else ""
        reasons.insert(
            0,
            f"admission control (queue bound {limit}) held p99 TTFT at {metrics['ttft_ms_p99']:.0f} ms "
            f"while rejecting {100 * metrics['rejected_rate']:.1f} % of {int(metrics['requests'])} "
            f"requests{retried}",
        )
        if metrics["rejected_rate"] == 0 and metrics["timeout_rate"] == 0 and not refused:
            reasons.append("note: nothing was rejected — the offered load did not exceed capacity (raise rate_scale)")
    result.reasons = reasons  # one list: the lines below append to it
    add_attempts(result, made)
    if limit is not None and sc.compare_unbounded and settable:
        free = load.run(with_admission_limit(system, None), name=f"{sc.name}-unbounded")
        result.extra_runs.append(free)
        if free.failed:
            reasons.append(f"unbounded comparison run failed: {(free.error or '').splitlines()[0]}")
        else:
            fm = headline(free.phases, free.duration_s, RequestSLO.from_slo(slo))
            result.metrics.update({f"unbounded.{k}": v for k, v in fm.items()})
            fgrowth = queue_growth(free)
            result.tables["unbounded_queue_growth"] = fgrowth
            reasons.append(
                f"unbounded queue (same load, not judged): p99 TTFT {fm['ttft_ms_p99'] / 1000:.2f} s, "
                f"timeouts {100 * fm['timeout_rate']:.1f} %"
            )
            if len(fgrowth):
                reasons.append(_growth_line(fgrowth, "unbounded queue"))
                result.metrics["unbounded.ttft_p99_growth"] = float(
                    fgrowth["ttft_ms_p99"].iloc[-1] / max(fgrowth["ttft_ms_p99"].iloc[0], 1e-9)
                )
            good, free_good = metrics["goodput_req_per_s"], fm["goodput_req_per_s"]  # requests meeting every SLO
            ratio = good / free_good if free_good > 0 else (float("inf") if good > 0 else float("nan"))
            result.metrics["goodput_ratio_vs_unbounded"] = ratio
            held = ratio >= MIN_GOODPUT_RATIO  # NaN: neither served a request within the SLO
            passed &= held
            reasons.append(
                f"goodput (requests meeting every SLO) {good:.2f} req/s = {ratio:.2f} x the unbounded queue's "
                f"{free_good:.2f} req/s ({'>=' if held else '<'} {MIN_GOODPUT_RATIO:g}; served at all: "
                f"{metrics['ok_req_per_s']:.2f} vs {fm['ok_req_per_s']:.2f} req/s): {'ok' if held else 'FAIL'}"
            )
    result.passed = bool(passed)
    return result
