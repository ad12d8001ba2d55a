"""Step 6, the quality-and-cost gate (G1, G3, G4) as the spine implements it.

Quality has two sources: the sliced suite (`suite_gate.py`: lm-eval on a model that solves the tasks, paired
per-slice intervals) and output drift (`drift.py`). `combine_quality` decides: for a change that can alter
outputs (low precision, KV compression, approximate decoding) the suite decides and drift is expected and
reported; for a pure systems change the suite must not fail *and* outputs must not drift — a drift means the
change was not the pure systems change it claimed to be.

Cost per successful *task* = (device-hours × price + energy × electricity price) / (requests served within the
SLO × the arm's task success rate on the suite, an estimate of "answered correctly", labelled as such); with
sessions in the load the task is the session (every turn served within the SLO), not the request. On CPU
the energy is TDP × an utilisation estimate, and says so.

Deliberately not here: running the suite (suite_gate.py) or the statistics (sliced.py).
"""

from __future__ import annotations

import math
import os
from typing import Any, Literal

import numpy as np
import pandas as pd

from inferopt.config import GateSettings, SLOConfig
from inferopt.gate.cost import cost_per_successful_task, energy_estimate_j
from inferopt.locate.hardware import HardwareProfile
from inferopt.measure.session_table import has_session_rows, session_outcomes

USD_PER_KWH = 0.15  # a rough industrial electricity price; reported beside every cost figure


QualityStatus = Literal["pass", "fail", "inconclusive", "skipped"]  # of the suite, the drift check and the gate
CostStatus = Literal["pass", "fail", "skipped"]


def within_slo(phases: pd.DataFrame, slo: SLOConfig) -> pd.Series:
    """Per request: finished ok and its own TTFT / TPOT / E2E within the SLO bounds."""
    ok = phases["outcome"] == "ok"
    ttft = phases["ttft_ms"].fillna(np.inf) <= slo.ttft_p99_ms
    tpot = phases["tpot_ms"].fillna(0.0) <= slo.tpot_p95_ms
    e2e = phases["e2e_ms"].fillna(np.inf) <= (slo.e2e_p99_ms if slo.e2e_p99_ms is not None else np.inf)
    return ok & ttft & tpot & e2e


def cost_table(
    trials: pd.DataFrame,
    slo: SLOConfig,
    hw: HardwareProfile,
    threads_by_arm: dict[str, int],
    task_success: dict[str, float] | None = None,
) -> pd.DataFrame:
    """Cost per successful request for each arm, pooled over its trials; with `task_success` (arm -> share
    of suite documents answered right) also cost per successful task = served within SLO x answered right."""
    rows = []
    cores = os.cpu_count() or 1
    for arm, sub in trials[~trials["failed"]].groupby("arm"):
        device_s = float(sub["duration_s"].sum())
        phases = pd.concat(list(sub["phases"]), ignore_index=True)
        n_tasks, n_success, unit = successful_tasks(phases, slo)
        energy_j, energy_label = _energy(sub, device_s, hw, threads_by_arm.get(arm, 1) / cores)
        replicas, memory_label = replicas_for_kv(sub, phases, hw.memory_bytes)
        cost = cost_per_successful_task(
            device_s * replicas, hw.price_per_hour_usd, energy_j * replicas, USD_PER_KWH, n_success
        )
        row = {
            "arm": arm,
            "device_s": device_s,
            "requests": len(phases),
            "task_unit": unit,
            "tasks": n_tasks,
            "successful": n_success,
            "success_rate": n_success / max(1, n_tasks),
            "energy_j": energy_j,
            "energy_basis": energy_label,
            "replicas": replicas,
            "memory_basis": memory_label,
            **cost,
        }
        rate = (task_success or {}).get(str(arm))
        if rate is not None and np.isfinite(rate):
            tasks_ok = n_success * rate
            row.update(
                {
                    "task_success_rate": rate,
                    "successful_tasks": tasks_ok,
                    "cost_per_successful_task_usd": cost["total_cost_usd"] / tasks_ok if tasks_ok > 0 else None,
                    "task_success_basis": f"estimate: within-SLO {unit}s x the arm's suite accuracy",
                }
            )
        if unit == "session":
            row["cost_per_successful_session_usd"] = cost["cost_per_success_usd"]
        rows.append(row)
    return pd.DataFrame(rows)


def successful_tasks(phases: pd.DataFrame, slo: SLOConfig) -> tuple[int, int, Literal["request", "session"]]:
    """(tasks, successful tasks, the unit): a task is a request served within the SLO — or, when the load has
    sessions, a session all of whose planned turns were (`inferopt.measure.session_table`)."""
    met = within_slo(phases, slo)
    if has_session_rows(phases):
        outcomes = session_outcomes(phases, met.to_numpy())
        return len(outcomes), int((outcomes["outcome"] == "ok").sum()), "session"
    return len(phases), int(met.sum()), "request"


def _resource(sub: pd.DataFrame, key: str) -> list[float]:
    """The per-trial values of one resource an arm's trials measured (finite ones only)."""
    res = sub["resources"] if "resources" in sub else []
    vals = [r.get(key) for r in res if isinstance(r, dict)]
    return [float(v) for v in vals if isinstance(v, (int, float)) and math.isfinite(v)]


def _energy(sub: pd.DataFrame, device_s: float, hw: HardwareProfile, cpu_share: float) -> tuple[float, str]:
    """Energy over the arm's trials: NVML's measured board energy when every trial has it, else ESTIMATED
    from the TDP (CPU: x the share of cores the engine computes with; GPU: x 1.0), and which it was."""
    measured = _resource(sub, "gpu_energy_j")
    if measured and len(measured) == len(sub):
        return float(sum(measured)), "measured: NVML board energy over each trial's load"
    if hw.kind == "cpu":
        util = min(1.0, cpu_share)
        return energy_estimate_j(device_s, hw.tdp_w, util), f"estimated from TDP x {util:.2f} (threads/cores)"
    return energy_estimate_j(device_s, hw.tdp_w, 1.0), "estimated from TDP x 1.0 (no power measured)"


def replicas_for_kv(sub: pd.DataFrame, phases: pd.DataFrame, memory_bytes: float) -> tuple[int, str]:
    """Replicas (devices) needed to hold the weights plus the KV of the measured concurrency: p99 requests in
    flight x their mean context (prompt + output tokens) x KV bytes per token, beside the weights, against one
    device's memory. 1 with the reason when the trials did not measure KV or weight bytes."""
    kv_per_tok, weights = _resource(sub, "kv_bytes_per_token"), _resource(sub, "weight_bytes")
    if not kv_per_tok or not weights or "concurrency" not in phases or not memory_bytes:
        return 1, "1 replica: KV or weight bytes not measured (memory not priced)"
    in_flight = float(np.quantile(phases["concurrency"].to_numpy(float), 0.99))
    context = float((phases["input_len"] + phases["output_len"]).mean())
    need = float(np.median(weights)) + in_flight * context * float(np.median(kv_per_tok))
    replicas = max(1, math.ceil(need / memory_bytes))
    return replicas, (
        f"{replicas} replica(s): weights + KV of {in_flight:.0f} requests in flight (p99) x {context:.0f} tokens = "
        f"{need / 1e9:.3g} GB against {memory_bytes / 1e9:.3g} GB per device"
    )


def judge_quality(
    drift: dict[str, Any], served: dict[str, Any], gate: GateSettings, required: bool
) -> tuple[QualityStatus, list[str]]:
    reasons: list[str] = []
    fails = False
    measured = False
    if served.get("status") == "measured":
        measured = True
        ok = served["token_agreement"] >= gate.min_token_agreement
        fails |= not ok
        reasons.append(
            f"served outputs: token agreement {served['token_agreement']:.4f} "
            f"({'>=' if ok else '<'} {gate.min_token_agreement}), exact match {served['exact_match_rate']:.3f} "
            f"on {served['n']} requests"
        )
    else:
        reasons.append(f"served outputs: skipped ({served.get('reason')})")
    if drift.get("status") == "measured":
        measured = True
        ok_kl = drift["mean_kl"] <= gate.max_mean_kl
        ok_top1 = drift["top1_agreement"] >= gate.min_token_agreement
        fails |= not (ok_kl and ok_top1)
        reasons.append(
            f"next-token drift on {drift['prompts']} held prompts: mean KL {drift['mean_kl']:.3g} "
            f"({'<=' if ok_kl else '>'} {gate.max_mean_kl}), top-1 agreement {drift['top1_agreement']:.4f} "
            f"({'>=' if ok_top1 else '<'} {gate.min_token_agreement})"
        )
    else:
        reasons.append(f"next-token drift: skipped ({drift.get('reason')})")
    if not measured:
        return ("skipped" if not required else "fail"), reasons + (
            ["the change can alter outputs but no quality evidence was measured"] if required else []
        )
    return ("fail" if fails else "pass"), reasons


def combine_quality(
    suite_status: QualityStatus,
    suite_reasons: list[str],
    drift_status: QualityStatus,
    drift_reasons: list[str],
    required: bool,
) -> tuple[QualityStatus, list[str]]:
    """One quality status from the suite and the drift check (see the module docstring)."""
    reasons = list(suite_reasons) + [f"drift: {drift_status}"] + [f"  {r}" for r in drift_reasons]
    if suite_status == "fail":
        return "fail", reasons
    if required:
        if suite_status in ("pass", "inconclusive"):
            return suite_status, reasons + ["outputs may differ by design (the remedy alters them): the suite decides"]
        return drift_status, reasons  # no suite (fake arms, or it could not run): the drift evidence is all there is
    if drift_status == "fail":
        return "fail", reasons + ["a pure systems change must not change outputs, and these drifted"]
    if suite_status == "inconclusive":
        return "inconclusive", reasons
    return ("pass" if "pass" in (suite_status, drift_status) else drift_status), reasons


def judge_cost(costs: pd.DataFrame) -> tuple[CostStatus, list[str]]:
    if set(costs.get("arm", [])) < {"baseline", "candidate"}:
        return "skipped", ["cost needs both arms measured"]
    base = costs.set_index("arm").loc["baseline"]
    cand = costs.set_index("arm").loc["candidate"]
    col = "cost_per_successful_task_usd" if "cost_per_successful_task_usd" in costs else "cost_per_success_usd"
    b, c = _num(base[col]), _num(cand[col])
    if not np.isfinite(c):
        return "fail", [f"candidate served no request within SLO (cost per success is infinite; baseline {b:.3g} USD)"]
    passed = c <= b * 1.0 or not np.isfinite(b)
    unit = str(base.get("task_unit", "request"))
    return ("pass" if passed else "fail"), [
        f"{'cost per successful task' if col.endswith('task_usd') else f'cost per successful {unit}'}: "
        f"baseline {b:.3g} USD ({int(base['successful'])} {unit}s ok within SLO), "
        f"candidate {c:.3g} USD ({int(cand['successful'])}) -> {'not more expensive' if passed else 'more expensive'}"
    ]


def _num(value: Any) -> float:
    """None (no successful request) -> inf, so comparisons stay honest."""
    return float("inf") if value is None or value != value else float(value)
