"""Faults injected for real, each bounded in time, shared by tests/faults/ and benchmarks/faults.py: the MLflow
endpoint cut mid-run and back (a TCP forwarder in front of a real `mlflow server`), a disk that fills (ENOSPC
from the record writer), an engine call that never returns, a process SIGKILLed with its servers running, the
optimize flow SIGKILLed mid-ablation and resumed with --resume. Each returns an `Outcome`: survived (the
run's data all there, the failure loud where it must stop), records lost, processes orphaned, the detail.

Deliberately not here: assertions (the tests make them), the summary line (the benchmark prints it).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from mlflow.tracking import MlflowClient

from inferopt.config import ConstantArrivals, FakeSystem, WorkloadConfig
from inferopt.measure.runner import RunTags
from inferopt.measure.session import run_system
from inferopt.records import RecordSink, RecordWriteError, read_records
from inferopt.workload import build_workload
from tasks.tracking import Tracker
from tasks.tracking_buffer import Backoff

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Outcome:
    name: str
    survived: bool
    records_lost: int
    orphans: int
    detail: str
    seconds: float = 0.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def alive(pids: list[int]) -> list[int]:
    out = []
    for p in pids:
        try:
            if psutil.Process(p).status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def wait_gone(pids: list[int], within_s: float) -> list[int]:
    deadline = time.monotonic() + within_s
    while (left := alive(pids)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def kill_all(pids: list[int]) -> None:
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


# ---------------------------------------------------------------------------------------------- MLflow outage


def start_mlflow(store: Path, port: int, timeout_s: float = 90.0) -> subprocess.Popen:
    """`mlflow server` on 127.0.0.1:`port` (SQLite store, artifacts served by it), healthy within `timeout_s`."""
    cmd = [
        str(Path(sys.executable).with_name("mlflow")),
        "server",
        "--backend-store-uri",
        f"sqlite:///{store / 'mlflow.db'}",
        "--artifacts-destination",
        str(store / "artifacts"),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
    ]
    log = (store / f"server-{int(time.time() * 1000)}.log").open("wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited with {proc.returncode}; see {log.name}") from None
            time.sleep(0.3)
    stop_mlflow(proc)
    raise RuntimeError(f"mlflow server not up within {timeout_s} s")


def stop_mlflow(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # as a crash would: no graceful shutdown
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


class Cut:
    """A TCP forwarder 127.0.0.1:`port` -> 127.0.0.1:`upstream`: the tracking endpoint a run talks to. `down()`
    closes the listener and every open connection (clients get connection refused, as from a stopped server);
    `up()` listens again on the same port. The server behind it keeps running: an MLflow server takes ~50 s to
    start on this loaded box, and a network outage is what a client sees of a stopped server."""

    def __init__(self, upstream: int) -> None:
        self.upstream, self.port = upstream, free_port()
        self.conns: list[socket.socket] = []
        self.listener: socket.socket | None = None
        self.up()

    def up(self) -> None:
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("127.0.0.1", self.port))
        ls.listen(64)
        self.listener = ls
        threading.Thread(target=self._accept, args=(ls,), daemon=True).start()

    def down(self) -> None:
        ls, self.listener = self.listener, None
        if ls is not None:
            with contextlib.suppress(OSError):
                ls.shutdown(socket.SHUT_RDWR)  # wakes the accept() that close() alone would leave listening
            ls.close()
        for c in self.conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
            c.close()
        self.conns.clear()

    def _accept(self, ls: socket.socket) -> None:
        while True:
            try:
                client, _ = ls.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.upstream))
            self.conns += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


def mlflow_outage(tmp: Path, outage_s: float = 20.0) -> Outcome:
    """A run logs while its MLflow endpoint is down for `outage_s`, then back: every param, metric step, child
    run, tag and artifact logged during the outage must be in MLflow at the end."""
    t0 = time.monotonic()
    store, port = tmp / "mlflow-server", free_port()
    store.mkdir(parents=True)
    server = start_mlflow(store, port)
    cut = Cut(port)
    uri = f"http://127.0.0.1:{cut.port}"
    old = os.environ.get("MLFLOW_TRACKING_URI")
    os.environ["MLFLOW_TRACKING_URI"] = uri
    try:
        tr = Tracker.start(
            "outage", experiment="faults", results_root=tmp / "results", backoff=Backoff(2, 0.2, 0.5, 1.0)
        )
        tr.params({"before": 1})
        cut.down()
        steps, down_until = 0, time.monotonic() + outage_s
        child = tr.child("4-ablate")
        tr.params({"during": 2}, "4-ablate")
        while time.monotonic() < down_until:
            tr.metrics({"progress": float(steps)}, "4-ablate", step=steps)
            steps += 1
            time.sleep(0.5)
        tr.json({"steps": steps}, "during.json", "4-ablate")
        tr.finish("4-ablate")
        buffered = len(tr.outbox.pending())
        cut.up()
        tr.metrics({"after": 1.0})
        tr.finish()
        c = MlflowClient(tracking_uri=uri)
        kid = tr.outbox.resolve(child) or ""
        history = {m.step for m in c.get_metric_history(kid, "progress")} if kid else set()
        lost = (steps - len(history)) + (0 if kid and c.get_run(kid).data.params.get("during") == "2" else 1)
        lost += 0 if kid and [a.path for a in c.list_artifacts(kid)] == ["during.json"] else 1
        parent = c.get_run(tr.parent_run_id)
        lost += 0 if parent.data.params.get("before") == "1" and "after" in parent.data.metrics else 1
        ok = (
            lost == 0 and buffered > 0 and parent.info.status == "FINISHED" and c.get_run(kid).info.status == "FINISHED"
        )
        detail = (
            f"{steps} metric steps, a child run and an artifact logged during a {outage_s:.0f} s outage "
            f"({buffered} calls buffered, replayed when it was back)"
        )
        return Outcome("mlflow_outage", ok, lost, 0, detail, time.monotonic() - t0)
    finally:
        cut.down()
        stop_mlflow(server)
        if old is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = old


# ---------------------------------------------------------------------------------------------- disk full


def enospc_after(n_ok: int):
    """`os.write` that fills the disk after `n_ok` writes: the next writes half its bytes, then ENOSPC."""
    state = {"calls": 0}

    def write(fd: int, data: bytes) -> int:
        state["calls"] += 1
        if state["calls"] <= n_ok:
            return os.write(fd, data)
        if state["calls"] == n_ok + 1:
            return os.write(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    return write


def disk_full(tmp: Path, fill_after: int = 40) -> Outcome:
    """A run whose disk fills after `fill_after` records: it must stop loudly (RecordWriteError), and the file
    must hold exactly the records written before, no torn line."""
    t0 = time.monotonic()
    path = tmp / "disk-full" / "requests.jsonl"
    table = build_workload(WorkloadConfig(name="d", num_requests=2000, arrival=ConstantArrivals(rate_per_s=200)))
    loud = ""
    try:
        run_system(
            FakeSystem(decode_step_ms=0.5),
            table,
            RunTags(arm="x"),
            timeout_s=5,
            records_path=path,
            open_sink=lambda p: RecordSink(p, write_bytes=enospc_after(fill_after)),
        )
    except RecordWriteError as exc:
        loud = str(exc)
    lines = path.read_text().splitlines(keepends=True)
    complete = sum(1 for line in lines if line.endswith("\n"))
    kept = len(read_records(path))
    ok = bool(loud) and kept == fill_after == complete == len(lines) and time.monotonic() - t0 < 10
    detail = f"stopped loudly: … {loud[loud.find('Kept:') :][:70]}…" if loud else "NOT stopped: went on without records"
    return Outcome("disk_full", ok, fill_after - kept, 0, detail, time.monotonic() - t0)


# ---------------------------------------------------------------------------------------------- hung engine


class Wrapped:
    """An engine with some of its methods replaced (the rest delegated to `inner`)."""

    def __init__(self, inner: Any, **replaced: Any) -> None:
        self.inner, self.replaced = inner, replaced

    def __getattr__(self, name: str) -> Any:
        return self.replaced.get(name) or getattr(self.inner, name)


def scrape_hangs_after_the_load(inner: Any) -> Wrapped:
    """The engine's `/metrics` scrape after the load never answers (a wedged server)."""
    calls = {"n": 0}

    async def server_metrics() -> dict[str, float]:
        calls["n"] += 1
        if calls["n"] > 1:
            await asyncio.sleep(3600)
        return await inner.server_metrics()

    return Wrapped(inner, server_metrics=server_metrics)


def hung_engine(tmp: Path, deadline_s: float = 3.0) -> Outcome:
    """An engine call that never returns: the run-level deadline must fail the trial (RunDeadline) within
    bounded time, with every finished request's record on disk."""
    t0 = time.monotonic()
    path = tmp / "hung" / "requests.jsonl"
    table = build_workload(WorkloadConfig(name="h", num_requests=20, arrival=ConstantArrivals(rate_per_s=40)))
    run = run_system(
        FakeSystem(),
        table,
        RunTags(arm="x"),
        timeout_s=1.0,
        records_path=path,
        wrap_engine=scrape_hangs_after_the_load,
        deadline_s=deadline_s,
    )
    took_s = time.monotonic() - t0
    kept = len(read_records(path))
    ok = run.failed and (run.error or "").startswith("RunDeadline") and took_s < deadline_s + 7 and kept == len(table)
    detail = f"trial failed after {took_s:.1f} s: {(run.error or 'not failed').splitlines()[0][:80]}"
    return Outcome("hung_engine", ok, len(table) - kept, 0, detail, took_s)


# ---------------------------------------------------------------------------------------------- parent death

REPLICA = """
import sys, time
from pathlib import Path
from inferopt.validate.node_failure import ProcessReplica
r = ProcessReplica("r", [sys.executable, "-c", "import time; time.sleep(120)"], 1, Path(sys.argv[1]))
r.start()
print(r.proc.pid, flush=True)
time.sleep(120)
"""

LAUNCHER = """
import os, subprocess, sys, time
sys.path.insert(0, "inferopt/engines/vllm")
import launch  # the vLLM launcher's watchdog, as it runs before vLLM starts
launch._watch_parent(os.getppid(), poll_s=0.1, grace_s=1.0)
stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"
worker = subprocess.Popen([sys.executable, "-c", stubborn])
print(os.getpid(), worker.pid, flush=True)
time.sleep(120)
"""

FLOW = """
import subprocess, sys, time
from inferopt.transport.lifetime import tied_to_parent
cmd = [sys.executable, "-c", sys.argv[1]]
server = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, **tied_to_parent())
print(server.stdout.readline().strip(), flush=True)
time.sleep(120)
"""


def parent_sigkill(tmp: Path, script: str, name: str, within_s: float = 8.0) -> Outcome:
    """A process that launched a server (as our launchers do) is SIGKILLed: the server must be gone."""
    t0 = time.monotonic()
    args = [sys.executable, "-c", script, str(tmp / f"{name}.log")]
    parent = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    pids = [int(x) for x in parent.stdout.readline().split()]
    parent.kill()
    parent.wait(timeout=10)
    left = wait_gone(pids, within_s)
    kill_all(left)
    detail = f"{len(pids)} launched processes; {len(left)} outlived their SIGKILLed parent"
    return Outcome(name, bool(pids) and not left, 0, len(left), detail, time.monotonic() - t0)


def servers_die_with_parent(tmp: Path) -> Outcome:
    return parent_sigkill(tmp, REPLICA, "sigkill_server_parent")


def vllm_group_dies_with_flow(tmp: Path) -> Outcome:
    """The flow (which launched the vLLM launcher tied to itself) is SIGKILLed: the launcher and the worker it
    spawned (which ignores SIGTERM) must be gone."""
    t0 = time.monotonic()
    flow = subprocess.Popen([sys.executable, "-c", FLOW, LAUNCHER], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    pids = [int(x) for x in flow.stdout.readline().split()]
    flow.kill()
    flow.wait(timeout=10)
    left = wait_gone(pids, 8.0)
    kill_all(left)
    detail = f"vLLM launcher + a worker that ignores SIGTERM; {len(left)} outlived the SIGKILLed flow"
    return Outcome("sigkill_vllm_launcher_group", bool(pids) and not left, 0, len(left), detail, time.monotonic() - t0)


# ---------------------------------------------------------------------------------------------- kill + resume

CANDIDATE = (
    "configs/candidates/fake-batching.yaml",
    "--set",
    "ablation.repeats=2",
    "--set",
    "ablation.num_requests=24",
)


def _saved_trials(step_dir: Path) -> set[tuple[str, int]]:
    """(arm, repeat) of every trial saved whole: `trial-<k>/run.json`, not a `trial-<k>.partial/` still being
    written (a trial is written there and renamed; polled mid-write, the glob sees both)."""
    saved = set()
    for p in step_dir.glob("trials/*/trial-*/run.json"):
        m = re.fullmatch(r"trial-(\d+)", p.parent.name)
        if m:
            saved.add((p.parent.parent.name, int(m.group(1))))
    return saved


def _optimize(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "flows.optimize", *CANDIDATE, *args]
    return subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, cwd=ROOT, env=env)


def kill_and_resume(tmp: Path, after_trials: int = 3, timeout_s: float = 400.0) -> Outcome:
    """The optimize flow SIGKILLed once `after_trials` ablation trials are saved, then `--resume <run id>`: the
    resumed run must finish with every planned trial, load (not rerun) the saved ones with all their records,
    and mark what the killed process left RUNNING as KILLED first."""
    t0 = time.monotonic()
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    env = {**os.environ, "INFEROPT_RESULTS": str(tmp / "results"), "MLFLOW_TRACKING_URI": uri}
    first = _optimize([], env, tmp / "first.log")
    run_id, deadline = "", time.monotonic() + timeout_s
    while time.monotonic() < deadline and first.poll() is None:
        m = re.search(r"\[optimize\] MLflow run (\w+)", (tmp / "first.log").read_text())
        run_id = m.group(1) if m else ""
        if run_id and len(_saved_trials(tmp / "results" / run_id / "4-ablate")) >= after_trials:
            break
        time.sleep(0.2)
    kids = [c.pid for c in psutil.Process(first.pid).children(recursive=True)] if first.poll() is None else []
    first.kill()  # SIGKILL mid-ablation: nothing of ours runs after this
    first.wait(timeout=30)
    orphans = wait_gone(kids, 10.0)
    orphan_cmds = []
    for p in orphans:
        try:
            orphan_cmds.append(" ".join(psutil.Process(p).cmdline())[:120])
        except psutil.NoSuchProcess:
            pass
    kill_all(orphans)
    if not run_id:
        return Outcome("sigkill_ablation_resume", False, 0, len(orphans), "the flow never reached the ablation")
    saved = _saved_trials(tmp / "results" / run_id / "4-ablate")
    killed_records = {
        (arm, rep): read_records(
            tmp / "results" / run_id / "4-ablate" / "trials" / arm / f"trial-{rep}" / "requests.jsonl"
        )
        for arm, rep in saved
    }
    second = _optimize(["--resume", run_id], env, tmp / "resume.log")
    rc = second.wait(timeout=max(30.0, deadline - time.monotonic()))
    c = MlflowClient(tracking_uri=uri)
    run = c.get_run(run_id)
    kids_runs = c.search_runs([run.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{run_id}'")
    killed = [r for r in kids_runs if r.info.status == "KILLED" and "inferopt.killed_reason" in r.data.tags]
    ablates = [r for r in kids_runs if r.data.tags.get("inferopt.child") == "4-ablate" and r.info.status == "FINISHED"]
    resumed_tag = ablates[0].data.tags.get("inferopt.ablate.resumed_trials") if ablates else None
    final_dir = tmp / "results" / run_id / "4-ablate"
    stream = read_records(final_dir / "requests.jsonl") if (final_dir / "requests.jsonl").exists() else []
    have = {(r.arm, r.trial, r.request_id) for r in stream}
    lost = sum(1 for (a, t), recs in killed_records.items() for r in recs if (a, t, r.request_id) not in have)
    planned = len(_saved_trials(final_dir))
    ok = (
        rc == 0
        and run.info.status == "FINISHED"
        and run.data.tags.get("inferopt.resumed") == "1"
        and resumed_tag == str(len(saved))
        and planned == 10
        and bool(killed)
        and lost == 0
        and not orphans
    )
    detail = (
        f"killed after {len(saved)} trials; resume rc {rc}, {resumed_tag} trials loaded, {planned}/10 trials at the "
        f"end, {len(killed)} runs of the killed attempt marked KILLED, verdict {run.data.tags.get('inferopt.verdict')}"
    ) + (f"; orphaned: {orphan_cmds}" if orphan_cmds else "")
    return Outcome("sigkill_ablation_resume", ok, lost, len(orphans), detail, time.monotonic() - t0)


SCENARIOS = {
    "mlflow_outage": mlflow_outage,
    "disk_full": disk_full,
    "hung_engine": hung_engine,
    "sigkill_server_parent": servers_die_with_parent,
    "sigkill_vllm_launcher_group": vllm_group_dies_with_flow,
    "sigkill_ablation_resume": kill_and_resume,
}
