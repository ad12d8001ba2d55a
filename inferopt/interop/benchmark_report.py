"""A trial's request records as an llm-d Benchmark Report v0.2 (`llmd-benchmark-report` on PyPI), built and
validated with that package's own schema classes, so any tool that reads the format can read our trials.

`trial_report` fills `run` (a uid per trial; the experiment id from the flow run, so all trials of one run
share it), `scenario.load` (our tool and version, input/output lengths, offered rate; the arm, scenario and
trial as native config) and `results.request_performance.aggregate`: request counts (failures = every
non-ok outcome, incomplete = timeouts), TTFT, TPOT, normalized TPOT and E2E latency in ms with our
percentiles, and token/request throughput over the trial's window (first intended send to last reply).
`trial_reports` splits a step's records into trials (arm, scenario, trial); warm-ups are left out.

Deliberately not here: the serving stack (`scenario.stack`: the caller may pass components) and time series.
"""

from __future__ import annotations

import datetime as dt
import uuid
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd
from llmd_benchmark_report import BenchmarkReportV02

from inferopt.measure.phases import phase_table
from inferopt.records import RequestRecord

NAMESPACE = uuid.UUID("6f1d8c2e-55f1-4a55-9a57-1b9a0f4a7c10")  # uid = uuid5(NAMESPACE, run/arm/scenario/trial)
QUANTILES = {"p0p1": 0.1, "p1": 1, "p5": 5, "p10": 10, "p25": 25, "p50": 50, "p75": 75, "p90": 90}
QUANTILES |= {"p95": 95, "p99": 99, "p99p9": 99.9}


def _tool_version() -> str:
    try:
        return version("inferopt")
    except PackageNotFoundError:
        return "unknown"


def statistics(values: Iterable[float], units: str) -> dict[str, Any] | None:
    """The schema's Statistics block of the finite values (None when there are none)."""
    arr = np.asarray([v for v in values if v is not None], dtype=float)
    arr = arr[np.isfinite(arr)]
    if not arr.size:
        return None
    out: dict[str, Any] = {"units": units, "mean": float(arr.mean()), "min": float(arr.min()), "max": float(arr.max())}
    out["stddev"] = float(arr.std(ddof=1)) if arr.size > 1 else 0.0
    return out | {k: float(np.percentile(arr, q)) for k, q in QUANTILES.items()}


def _lengths(values: pd.Series) -> dict[str, Any]:
    v = values.to_numpy(float)
    fixed = v.size and v.min() == v.max()
    base = {"distribution": "fixed" if fixed else "other", "value": float(v.mean()) if v.size else 0.0}
    return base if fixed or not v.size else base | {"std_dev": float(v.std()), "min": int(v.min()), "max": int(v.max())}


def _iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, tz=dt.timezone.utc).isoformat()


def _window_s(frame: pd.DataFrame) -> tuple[float, float]:
    start = float(pd.to_numeric(frame["intended_s"]).min())
    end = pd.to_numeric(frame["client_done_s"]).max()
    return start, float(end) if pd.notna(end) else start


def _aggregate(phases: pd.DataFrame, duration_s: float) -> dict[str, Any]:
    ok = phases[phases["outcome"] == "ok"]
    d = max(duration_s, 1e-9)
    out_tok, in_tok = float(ok["output_len"].sum()), float(ok["input_len"].sum())
    ntpot = ok["e2e_ms"] / ok["output_len"].where(ok["output_len"] > 0)
    latency = {
        "time_to_first_token": statistics(ok["ttft_ms"], "ms"),
        "time_per_output_token": statistics(ok["tpot_ms"], "ms/token"),
        "normalized_time_per_output_token": statistics(ntpot, "ms/token"),
        "request_latency": statistics(ok["e2e_ms"], "ms"),
    }
    requests = {
        "total": int(len(phases)),
        "failures": int((phases["outcome"] != "ok").sum()),
        "incomplete": int((phases["outcome"] == "timeout").sum()),
        "input_length": statistics(phases["input_len"], "count"),
        "output_length": statistics(ok["output_len"], "count"),
    }
    throughput = {
        "output_token_rate": {"units": "tokens/s", "mean": out_tok / d},
        "input_token_rate": {"units": "tokens/s", "mean": in_tok / d},
        "total_token_rate": {"units": "tokens/s", "mean": (in_tok + out_tok) / d},
        "request_rate": {"units": "queries/s", "mean": len(ok) / d},
    }
    drop = lambda block: {k: v for k, v in block.items() if v is not None}  # noqa: E731
    return {"requests": drop(requests), "latency": drop(latency), "throughput": throughput}


def trial_report(
    records: list[RequestRecord],
    *,
    experiment: str,
    description: str = "",
    source: str = "random",
    tool: str = "inferopt",
    tool_version: str | None = None,
    stack: list[dict[str, Any]] | None = None,
) -> BenchmarkReportV02:
    """One trial (records of one arm, scenario and trial; warm-ups are dropped) as a validated report.
    `tool`: the load generator that made the records (an imported GuideLLM/AIPerf file names its own)."""
    frame = pd.DataFrame(
        {"intended_s": [r.intended_s for r in records], "client_done_s": [r.client_done_s for r in records]}
    )
    phases = phase_table([r for r in records if not r.warmup])
    if phases.empty:
        raise ValueError("no measured request in the trial (only warm-ups?): nothing to report")
    first = next(r for r in records if not r.warmup)
    start, end = _window_s(frame)
    key = f"{experiment}/{first.arm}/{first.scenario}/{first.trial}"
    intended = sorted(r.intended_s for r in records if not r.warmup)
    offered = (
        (len(intended) - 1) / (intended[-1] - intended[0]) if len(intended) > 1 and intended[-1] > intended[0] else None
    )
    load = {
        "metadata": {"description": description or f"inferopt {first.scenario} {first.arm} trial {first.trial}"},
        "standardized": {
            "tool": tool,
            "tool_version": tool_version or (_tool_version() if tool == "inferopt" else "unknown"),
            "source": source,
            "stage": int(first.trial),
            "input_seq_len": _lengths(phases["input_len"]),
            "output_seq_len": _lengths(phases["target_output_len"]),
        }
        | ({"rate_qps": offered} if offered else {}),
        "native": {"config": {"arm": first.arm, "scenario": first.scenario, "trial": first.trial, "run": experiment}},
    }
    doc = {
        "version": "0.2.1",
        "run": {
            "uid": str(uuid.uuid5(NAMESPACE, key)),
            "eid": str(uuid.uuid5(NAMESPACE, experiment)),
            "time": {"start": _iso(start), "end": _iso(end), "duration": f"PT{max(end - start, 0.0):.6f}S"},
            "description": description
            or f"inferopt run {experiment}: {first.scenario} {first.arm} trial {first.trial}",
        },
        "scenario": {"load": load} | ({"stack": stack} if stack else {}),
        "results": {"request_performance": {"aggregate": _aggregate(phases, end - start)}},
    }
    return BenchmarkReportV02.model_validate(doc)


def trial_reports(
    records: list[RequestRecord], *, experiment: str, **report_args: Any
) -> dict[tuple[str, str, int], BenchmarkReportV02]:
    """A report per trial of a step's records, keyed (arm, scenario, trial); trials of only warm-ups are left out."""
    groups: dict[tuple[str, str, int], list[RequestRecord]] = {}
    for r in records:
        groups.setdefault((r.arm, r.scenario, int(r.trial)), []).append(r)
    return {
        key: trial_report(recs, experiment=experiment, **report_args)
        for key, recs in groups.items()
        if any(not r.warmup for r in recs)
    }


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in text)


def write_trial_reports(records: list[RequestRecord], out_dir: Path, *, experiment: str) -> list[Path]:
    """`<arm>-<scenario>-<trial>.json` per trial of `records` under `out_dir` (the paths written)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for (arm, scenario, trial), report in trial_reports(records, experiment=experiment).items():
        path = out_dir / f"{_safe(arm)}-{_safe(scenario)}-{trial}.json"
        path.write_text(report.get_json_str())
        paths.append(path)
    return paths
