"""Our load client beside the peers: ours, AIPerf, inference-perf and GuideLLM against one no-op server.

The no-op streaming server is `client_throughput.py`'s (a separate process on 127.0.0.1, one SSE chunk per
requested token, at most 64) and it stamps the arrival of every completion request (`GET /stamps`), so every
figure below is measured the same way for every tool, from the server's side:

- achieved rate: arrivals / (last arrival - first arrival);
- send lag at a fixed rate R: arrival k (in order) minus its slot t0 + k / R on the ideal constant schedule, t0
  as early as the arrivals allow (the best-aligned arrival has lag 0; a client that falls behind, drifts,
  bunches or stalls shows here); p50 / p99 / max;
- client CPU per request: the tool's whole process tree (psutil, sampled every 50 ms; workers included) over
  the middle 80 % of its sending window, divided by the arrivals in that span — start-up is left out;
- all recorded: the tool's own output holds one record per request the server saw (none lost or unreported).

Each tool runs in its own process (ours too: `--ours-run`), twice: flat out with at most 256 requests in flight
(its highest sustainable rate here: `max_rps`) and at a constant 500 req/s (`p99_lag_ms_at_500`). Same prompts
(128 synthetic tokens; the builtin model's tokenizer, `.cache/models/tiny-llama`, for the peers that need one)
and 8 output tokens. The peers come from `bash scripts/setup_peers.sh` (own virtualenvs); a tool that is not
installed is reported as {"skipped": why}. Loopback only; request counts and a time bound per run cap it.

Usage: .venv/bin/python benchmarks/peers.py [--requests 8000] [--fixed-seconds 6] [--only ours,aiperf]
Last line of stdout: one JSON object {"ours": {...}, "aiperf": {...}, "inference_perf": {...}, "guidellm": {...}}.
Deliberately not here: tuning any tool beyond its documented flags, and serving-engine figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import client_throughput as ct  # noqa: E402 - the no-op server, our client's driver, GuideLLM's output reader

ROOT = ct.ROOT
CONCURRENCY = 256
FIXED_RATE = 500.0
TOOLS = ("ours", "aiperf", "inference_perf", "guidellm")
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}  # the tokenizer is a local directory
VENVS = {"aiperf": ".venv-aiperf", "inference_perf": ".venv-inference-perf", "guidellm": ".venv-guidellm"}


@dataclass(frozen=True)
class Launch:
    """How to run one tool once: the command, and how to count the per-request records it wrote."""

    cmd: list[str]
    count_records: Callable[[Path], int]
    files: tuple[str, ...] = ()  # its per-request output files (kept with --keep)
    env: dict[str, str] = field(default_factory=lambda: dict(OFFLINE))


# ------------------------------------------------------------------------------------------ measurement


def fetch_stamps(base_url: str) -> np.ndarray:
    with urllib.request.urlopen(f"{base_url}/stamps", timeout=30) as resp:
        return np.sort(np.array(json.loads(resp.read()), dtype=float))


class TreeCpu:
    """Samples the CPU seconds (user + system) of a process and its live descendants every `period_s`."""

    def __init__(self, pid: int, period_s: float = 0.05) -> None:
        import psutil

        self.proc, self.period_s = psutil.Process(pid), period_s
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._seen: dict[int, Any] = {}
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _total(self) -> float:
        import psutil

        try:
            procs = [self.proc, *self.proc.children(recursive=True)]
        except psutil.Error:
            procs = []
        for p in procs:
            self._seen.setdefault(p.pid, p)
        total = 0.0
        for p in procs:
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.Error:
                pass
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.time(), self._total()))
            self._stop.wait(self.period_s)

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(timeout=5)

    def cpu_between(self, t0: float, t1: float) -> float | None:
        inside = [(t, c) for t, c in self.samples if t0 <= t <= t1]
        return inside[-1][1] - inside[0][1] if len(inside) >= 2 else None


def figures(stamps: np.ndarray, cpu: TreeCpu, rate: float | None) -> dict[str, Any]:
    """Achieved rate, send lag against the constant schedule (when `rate`), CPU per request (middle 80 %)."""
    out: dict[str, Any] = {"arrivals": int(stamps.size)}
    if stamps.size < 2:
        return out
    span = float(stamps[-1] - stamps[0])
    out["achieved_rps"] = round((stamps.size - 1) / span, 1) if span > 0 else None
    if rate:
        behind_s = stamps - np.arange(stamps.size) / rate  # arrival k minus its offset on the schedule
        lag_ms = (behind_s - behind_s.min()) * 1000.0  # the schedule placed as early as the arrivals allow
        out |= {f"lag_ms_{k}": round(float(np.percentile(lag_ms, q)), 3) for k, q in (("p50", 50), ("p99", 99))}
        out["lag_ms_max"] = round(float(lag_ms.max()), 3)
    t0, t1 = stamps[0] + 0.1 * span, stamps[-1] - 0.1 * span
    used = cpu.cpu_between(t0, t1)
    inside = int(((stamps >= t0) & (stamps <= t1)).sum())
    if used is not None and inside:
        out["cpu_us_per_req"] = round(used / inside * 1e6, 1)
    return out


def run_tool(launch: Launch, base_url: str, out_dir: Path, expected: int, rate: float | None, limit_s: float) -> dict:
    """One run of one tool: its figures from the server's arrival stamps and its process tree's CPU."""
    fetch_stamps(base_url)  # clear what earlier runs (or readiness probes) left
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", **launch.env}
    log = (out_dir / "log.txt").open("w")
    t_start = time.time()
    proc = subprocess.Popen(launch.cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=out_dir)
    cpu = TreeCpu(proc.pid)
    try:
        rc = proc.wait(timeout=limit_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = proc.wait()
    cpu.stop()
    log.close()
    stamps = fetch_stamps(base_url)
    stamps = stamps[stamps >= t_start]
    out = {"rc": rc, "wall_s": round(time.time() - t_start, 1), **figures(stamps, cpu, rate)}
    try:
        recorded = launch.count_records(out_dir)
    except Exception as exc:  # noqa: BLE001 - an unreadable output is a finding, not a crash
        recorded, out["records_error"] = -1, f"{type(exc).__name__}: {exc}"[:300]
    out["recorded"] = recorded
    out["all_recorded"] = bool(recorded == expected == out["arrivals"])
    if rc != 0:
        out["log_tail"] = (out_dir / "log.txt").read_text(errors="replace")[-1500:]
    return out


# ------------------------------------------------------------------------------------------ the tools


def launch_ours(base_url: str, n: int, rate: float | None, out: Path) -> Launch:
    mode = str(rate) if rate else "max"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--ours-run", base_url, str(n), mode, str(out / "ours.json")]
    return Launch(cmd, lambda d: int(json.loads((d / "ours.json").read_text())["records"]), ("ours.json",))


def ours_run(base_url: str, n: int, mode: str, path: str) -> None:
    """Our OpenAIEngine + open-loop runner (the production code path), on uvloop like client_throughput."""
    recs = ct.run_ours(base_url, n, 1e6 if mode == "max" else float(mode), CONCURRENCY)
    ok = sum(r.outcome == "ok" for r in recs)
    Path(path).write_text(json.dumps({"records": len(recs), "ok": ok}))


def _jsonl_count(path: Path) -> int:
    with path.open("rb") as fh:
        return sum(1 for line in fh if line.strip())


def launch_aiperf(base_url: str, n: int, rate: float | None, out: Path) -> Launch:
    exe = str(ROOT / VENVS["aiperf"] / "bin" / "aiperf")
    load = ["--request-rate", f"{rate:g}", "--arrival-pattern", "constant"] if rate else []
    load += ["--concurrency", str(CONCURRENCY)]
    cmd = [
        exe, "profile", "--model", ct.MODEL_ID, "--url", base_url, "--endpoint-type", "completions", "--streaming",
        "--tokenizer", str(ct.TOKENIZER_DIR), "--synthetic-input-tokens-mean", str(ct.INPUT_LEN),
        "--synthetic-input-tokens-stddev", "0", "--output-tokens-mean", str(ct.OUTPUT_LEN),
        "--output-tokens-stddev", "0", "--request-count", str(n), *load, "--use-server-token-count",
        "--artifact-dir", str(out / "aiperf"), "--export-level", "records", "--ui-type", "none",
        "--no-server-metrics", "--no-gpu-telemetry", "--random-seed", "0",
    ]  # fmt: skip

    def count(d: Path) -> int:
        files = sorted((d / "aiperf").rglob("profile_export*.jsonl"))
        return sum(_jsonl_count(f) for f in files if "raw" not in f.name)

    # not HF_HUB_OFFLINE: in offline mode AIPerf 0.13 looks a tokenizer up only in the hub cache, never a local path
    return Launch(cmd, count, ("aiperf",), env={})


def launch_inference_perf(base_url: str, n: int, rate: float | None, out: Path) -> Launch:
    import yaml

    fixed = {"min": ct.INPUT_LEN, "max": ct.INPUT_LEN, "mean": ct.INPUT_LEN, "std_dev": 0, "type": "fixed"}
    outd = {"min": ct.OUTPUT_LEN, "max": ct.OUTPUT_LEN, "mean": ct.OUTPUT_LEN, "std_dev": 0, "type": "fixed"}
    if rate:
        load = {"type": "constant", "stages": [{"rate": rate, "duration": max(1, round(n / rate))}]}
    else:
        load = {"type": "concurrent", "stages": [{"num_requests": n, "concurrency_level": CONCURRENCY}]}
    config = {
        "api": {"type": "completion", "streaming": True},
        "server": {"type": "vllm", "model_name": ct.MODEL_ID, "base_url": base_url, "ignore_eos": True},
        "tokenizer": {"pretrained_model_name_or_path": str(ct.TOKENIZER_DIR)},
        "data": {"type": "random", "input_distribution": fixed, "output_distribution": outd},
        "load": {**load, "num_workers": 2},
        "report": {
            "request_lifecycle": {
                "summary": True,
                "per_stage": False,
                "per_request": True,  # its per-request records (timings only: no payloads, as ours)
                "per_request_fields": {"request": False, "response": False, "response_chunks": False},
            }
        },
        "storage": {"local_storage": {"path": str(out / "inference-perf")}},
    }
    (out / "inference-perf.yaml").write_text(yaml.safe_dump(config))
    exe = str(ROOT / VENVS["inference_perf"] / "bin" / "inference-perf")

    def count(d: Path) -> int:
        files = sorted((d / "inference-perf").rglob("per_request_lifecycle_metrics.json"))
        return sum(len(json.loads(f.read_text())) for f in files)

    return Launch([exe, "--config_file", str(out / "inference-perf.yaml")], count, ("inference-perf",))


def launch_guidellm(base_url: str, n: int, rate: float | None, out: Path) -> Launch:
    exe = str(ROOT / VENVS["guidellm"] / "bin" / "guidellm")
    profile = f"kind=constant,rate={rate:g},max_concurrency={CONCURRENCY}" if rate else None
    profile = profile or f"kind=throughput,max_concurrency={CONCURRENCY}"
    cmd = [
        exe, "run", "--backend",
        f"kind=openai_http,target={base_url},model={ct.MODEL_ID},request_format=/v1/completions",
        "--profile", profile, "--constraint", f"kind=max_requests,count={n}",
        "--tokenizer", f"kind=huggingface_auto,model={ct.TOKENIZER_DIR}",
        "--data", f"kind=synthetic_text,prompt_tokens={ct.INPUT_LEN},output_tokens={ct.OUTPUT_LEN}",
        "--output", f"kind=json,path={out / 'guidellm.json'}", "--disable-console-interactive",
    ]  # fmt: skip

    def count(d: Path) -> int:  # successful, errored and incomplete (cancelled at the end) are all records
        reqs = json.loads((d / "guidellm.json").read_text())["benchmarks"][0].get("requests", {})
        return sum(len(reqs.get(k) or []) for k in ("successful", "errored", "incomplete"))

    return Launch(cmd, count, ("guidellm.json",))


LAUNCHERS = {
    "ours": launch_ours,
    "aiperf": launch_aiperf,
    "inference_perf": launch_inference_perf,
    "guidellm": launch_guidellm,
}


def skip_reason(tool: str) -> str | None:
    if tool == "ours":
        return None
    venv = ROOT / VENVS[tool]
    skipped = venv.with_name(venv.name + ".skipped")
    if skipped.exists():
        return skipped.read_text().strip()
    if not (venv / ".inferopt-peer").exists():
        return f"not installed: run `bash scripts/setup_peers.sh` ({venv.name} missing)"
    if not (ct.TOKENIZER_DIR / "tokenizer.json").is_file():
        return f"{ct.TOKENIZER_DIR} has no tokenizer: run `bash scripts/setup.sh` first"
    return None


# ------------------------------------------------------------------------------------------ main


def one_tool(tool: str, base_url: str, args: argparse.Namespace, keep: Path | None) -> dict[str, Any]:
    runs: dict[str, Any] = {}
    for label, n, rate in (("max", args.requests, None), ("fixed", round(FIXED_RATE * args.fixed_seconds), FIXED_RATE)):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp)
            launch = LAUNCHERS[tool](base_url, n, rate, out)
            runs[label] = run_tool(launch, base_url, out, n, rate, args.limit_seconds)
            if keep is not None:
                dest = keep / f"{tool}-{label}"
                dest.mkdir(parents=True, exist_ok=True)
                for f in (*launch.files, "log.txt"):
                    subprocess.run(["cp", "-r", str(out / f), str(dest)], check=False)
        print(f"{tool} {label}: {json.dumps({k: v for k, v in runs[label].items() if k != 'log_tail'})}", flush=True)
        if runs[label].get("log_tail"):
            print(f"{tool} {label} log tail:\n{runs[label]['log_tail']}", flush=True)
    return runs


def headline(runs: dict[str, Any]) -> dict[str, Any]:
    mx, fx = runs["max"], runs["fixed"]
    return {
        "max_rps": mx.get("achieved_rps"),
        "p99_lag_ms_at_500": fx.get("lag_ms_p99"),
        "cpu_us_per_req": mx.get("cpu_us_per_req"),
        "p50_lag_ms_at_500": fx.get("lag_ms_p50"),
        "max_lag_ms_at_500": fx.get("lag_ms_max"),
        "achieved_rps_at_500": fx.get("achieved_rps"),
        "cpu_us_per_req_at_500": fx.get("cpu_us_per_req"),
        "all_recorded": bool(mx.get("all_recorded") and fx.get("all_recorded")),
        "recorded": [mx.get("recorded"), fx.get("recorded")],
        "arrivals": [mx.get("arrivals"), fx.get("arrivals")],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ours-run", nargs=4, help=argparse.SUPPRESS)
    ap.add_argument("--requests", type=int, default=8000, help="requests of the flat-out run")
    ap.add_argument("--fixed-seconds", type=float, default=6.0, help="length of the 500 req/s run")
    ap.add_argument("--limit-seconds", type=float, default=150.0, help="time bound of one tool run")
    ap.add_argument("--only", default=",".join(TOOLS), help="comma-separated tools")
    ap.add_argument("--keep", default=None, help="copy each tool's per-request output under this directory")
    args = ap.parse_args()
    if args.ours_run:
        ours_run(args.ours_run[0], int(args.ours_run[1]), args.ours_run[2], args.ours_run[3])
        return
    load_before = os.getloadavg()
    proc, base_url = ct.start_server()
    result: dict[str, Any] = {}
    try:
        for tool in [t for t in args.only.split(",") if t]:
            reason = skip_reason(tool)
            keep = Path(args.keep) if args.keep else None
            result[tool] = {"skipped": reason} if reason else headline(one_tool(tool, base_url, args, keep))
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    print(f"load average before {load_before}, after {os.getloadavg()}; {os.cpu_count()} CPUs", flush=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
