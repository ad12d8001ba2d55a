"""The node-failure scenario (SPEC V2): `replicas` engine replicas behind nginx, one killed mid-run.

`run_node_failure` starts the replicas (for vLLM, `replicas` copies of `vllm serve` with the engine's own flags),
puts nginx in front (`loadbalancer.NginxBalancer`), replays the workload open-loop through it with the `openai`
engine, and `kill_at_s` after the first measured send SIGKILLs one replica's process group (no graceful
shutdown: a node lost). It passes when no record is lost (records == sent, in memory and on disk), the kill
happened, the failure rate returned to baseline within `max_recovery_s`, and the requests sent after recovery
meet the SLOs.

Deliberately not here: the nginx config (`loadbalancer.py`), the failure arithmetic (`failover.py`), restarting
the killed replica (nothing restarts it — as with a lost node until it is replaced).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from inferopt.config import (
    AnySystem,
    OpenAISystem,
    ScenarioConfig,
    SLOConfig,
    VLLMSystem,
)
from inferopt.engines.vllm.engine import LAUNCHER, terminate_group
from inferopt.engines.vllm.serve import serve_args, server_env
from inferopt.measure.runner import RunTags
from inferopt.measure.session import MeasuredRun
from inferopt.measure.slices import headline
from inferopt.measure.slo import RequestSLO
from inferopt.model.loading import resolve_model_dir
from inferopt.records import now_s, read_records
from inferopt.transport.lifetime import tied_to_parent
from inferopt.transport.ports import free_port
from inferopt.validate.failover import failover_summary, segment_table
from inferopt.validate.judge import (
    ScenarioLoad,
    ScenarioResult,
    add_attempts,
    check_slo,
    failed_result,
    retry_wrapper,
)
from inferopt.validate.loadbalancer import (
    NginxBalancer,
    access_log_frame,
    nginx_binary,
)

ROOT = Path(__file__).resolve().parents[2]


class ProcessReplica:
    """One server process group on 127.0.0.1:`port` (started with `start_new_session`: pgid = pid)."""

    def __init__(
        self,
        name: str,
        cmd: list[str],
        port: int,
        log_path: Path,
        *,
        env: dict[str, str] | None = None,
        health_path: str = "/health",
        startup_timeout_s: float = 600.0,
    ) -> None:
        self.name, self.cmd, self.port, self.log_path, self.env = name, cmd, port, log_path, env
        self.health_path, self.startup_timeout_s = health_path, startup_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.killed_s: float | None = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                self.cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                cwd=str(ROOT),
                **tied_to_parent(),  # own process group; SIGTERM when this process dies
            )

    def wait_healthy(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + self.startup_timeout_s
        url = f"http://127.0.0.1:{self.port}{self.health_path}"
        while True:
            if self.proc.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-3000:]
                raise RuntimeError(
                    f"replica {self.name} exited with {self.proc.returncode} while starting "
                    f"(log {self.log_path}):\n{tail}"
                )
            with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2.0) as r:
                if r.status == 200:
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"replica {self.name} not healthy after {self.startup_timeout_s:g} s (log {self.log_path})"
                )
            time.sleep(0.5)

    def kill(self) -> float:
        """SIGKILL to the whole process group, now; returns when it was sent."""
        assert self.proc is not None
        self.killed_s = now_s()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        return self.killed_s

    def stop(self) -> None:
        if self.proc is not None:
            terminate_group(self.proc, grace_s=10.0)


@dataclass
class ReplicaPlan:
    """How to make replica i (log under a directory) and how the client addresses the replicas."""

    make: Callable[[int, Path], ProcessReplica]
    served_model: str
    vocab_size: int
    send_priority: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def vllm_plan(system: VLLMSystem) -> ReplicaPlan:
    """Replicas of a vLLM system: its own `vllm serve` flags, no tracing, one port each."""
    python = system.python_path(ROOT)
    if not python.exists():
        raise FileNotFoundError(f"no vLLM interpreter at {python}; fix: bash scripts/setup_vllm.sh")
    model_dir = resolve_model_dir(system.model)
    vocab = int(json.loads((Path(model_dir) / "config.json").read_text())["vocab_size"])

    def make(i: int, log_dir: Path) -> ProcessReplica:
        port = free_port()
        cmd = [str(python), str(LAUNCHER), *serve_args(system, model_dir, port)]
        return ProcessReplica(
            f"{system.name}-r{i}",
            cmd,
            port,
            log_dir / f"{system.name}-replica{i}-{port}.log",
            env=server_env(system),
            startup_timeout_s=system.startup_timeout_s,
        )

    return ReplicaPlan(
        make=make, served_model=system.name, vocab_size=vocab, send_priority=system.scheduling_policy == "priority"
    )


class KillSwitch:
    """Engine wrapper: `at_s` after the first measured request is sent, call `action` (the kill) once."""

    def __init__(self, inner: Any, at_s: float, action: Callable[[], float]) -> None:
        self.inner, self.at_s, self.action = inner, at_s, action
        self.kill_s: float | None = None
        self.first_send_s: float | None = None
        self._handle: asyncio.TimerHandle | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _fire(self) -> None:
        self.kill_s = self.action()

    def _arm(self, request: Any) -> None:
        if self.first_send_s is None and not request.request_id.startswith("warmup-"):
            self.first_send_s = now_s()
            self._handle = asyncio.get_running_loop().call_later(self.at_s, self._fire)

    def fire(self, request: Any) -> Any:
        """The load runner's send-now entry, delegated to the inner engine's `fire`."""
        self._arm(request)
        return self.inner.fire(request)

    def stream(self, request: Any) -> Any:
        self._arm(request)
        return self.inner.stream(request)

    async def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        await self.inner.stop()


def _failed(sc: ScenarioConfig, why: str) -> ScenarioResult:
    return ScenarioResult(
        sc,
        MeasuredRun(tags=RunTags(scenario=sc.name), failed=True, error=why),
        passed=False,
        reasons=[f"run failed: {why}"],
    )


def run_node_failure(
    system: AnySystem, load: ScenarioLoad, slo: SLOConfig, *, plan: ReplicaPlan | None = None
) -> ScenarioResult:
    """Run and judge one node-failure scenario.

    1. Replicas (`plan`, default `vllm_plan`: no span tracing) on free ports of 127.0.0.1, each in its own
       process group, started together and waited on until `/health` answers (tests pass their own plan).
    2. nginx in front on 127.0.0.1: round robin, failover to the next replica on connection errors, SSE
       unbuffered.
    3. The open-loop replay through nginx (the optional client retry policy applies to rejections only); the
       `KillSwitch` kills replica `kill_replica` `kill_at_s` after the first measured send.
    4. From the records and the kill time (`failover.py`): failed requests (before / in flight / after), the
       baseline failure rate, recovery time, first success after the kill, TTFT p99 before / during / after;
       from nginx's access log: which replica served each request and which were failed over."""
    sc = load.scenario
    if nginx_binary() is None:
        return _failed(
            sc, "no nginx for the load balancer; fix: bash scripts/setup_nginx.sh (apt-get install nginx-light)"
        )
    if plan is None:
        if not system.capabilities.replicable:
            return _failed(
                sc,
                f"node_failure launches replicas of a vllm system, got engine {system.engine!r}; "
                "fix: run it on an `engine: vllm` system",
            )
        try:
            plan = vllm_plan(system)
        except (FileNotFoundError, OSError, ValueError) as exc:
            return _failed(sc, str(exc))
    out = Path(load.out_dir).resolve()
    replicas = [plan.make(i, out / "replica-logs") for i in range(sc.replicas)]
    victim = replicas[sc.kill_replica]
    switch: list[KillSwitch] = []
    retry_wrap, made = retry_wrapper(sc, seed=load.workload.seed)

    def wrap(engine: Any) -> Any:
        switch.append(KillSwitch(retry_wrap(engine) if retry_wrap else engine, sc.kill_at_s, victim.kill))
        return switch[-1]

    lb_dir = out / f"nginx-{sc.name}"
    try:
        for r in replicas:
            r.start()
        for r in replicas:
            r.wait_healthy()
        with NginxBalancer([r.port for r in replicas], workdir=lb_dir) as lb:
            client = OpenAISystem(
                name=f"{plan.served_model}-lb",
                base_url=lb.url,
                served_model=plan.served_model,
                vocab_size=plan.vocab_size,
                send_priority=plan.send_priority,
            )
            run = load.run(client, wrap_engine=wrap)
    except Exception as exc:  # noqa: BLE001 - a replica or nginx that will not start fails this scenario only
        return _failed(sc, f"{type(exc).__name__}: {exc}")
    finally:
        for r in replicas:
            r.stop()
    if run.failed:
        return failed_result(sc, run)
    return _judge(
        sc,
        slo,
        run,
        load.table,
        load.records_path,
        switch[0] if switch else None,
        replicas,
        victim,
        access_log_frame(lb_dir / "access.log"),
        made,
    )


def _judge(
    sc: ScenarioConfig,
    slo: SLOConfig,
    run: MeasuredRun,
    table: pd.DataFrame,
    records_path: Path,
    ks: KillSwitch | None,
    replicas: list[ProcessReplica],
    victim: ProcessReplica,
    access: pd.DataFrame,
    made: list[Any],
) -> ScenarioResult:
    metrics = headline(run.phases, run.duration_s, RequestSLO.from_slo(slo))  # + SLO attainment and goodput
    result = ScenarioResult(sc, run, metrics=metrics)
    reasons: list[str] = []
    result.reasons = reasons
    passed = True
    on_disk = [r for r in read_records(records_path) if r.scenario == sc.name and not r.warmup]
    sent, kept = len(table), len(run.records)
    metrics.update({"sent": float(sent), "records": float(kept), "records_on_disk": float(len(on_disk))})
    held = sent == kept == len(on_disk) and len({r.request_id for r in run.records}) == sent
    passed &= held
    reasons.append(
        f"records {kept} in memory, {len(on_disk)} on disk for {sent} sent: "
        f"{'none lost' if held else 'RECORDS LOST: FAIL'}"
    )
    kill_s = ks.kill_s if ks is not None else None
    if kill_s is None:
        result.passed = False
        reasons.append(
            f"the replica was never killed: the run ended before kill_at_s={sc.kill_at_s:g} s; "
            "fix: a smaller kill_at_s or more requests"
        )
        return result
    frame = pd.DataFrame(
        [
            {
                "request_id": r.request_id,
                "intended_s": r.intended_s,
                "client_done_s": r.client_done_s,
                "outcome": r.outcome,
            }
            for r in run.records
        ]
    )
    frame = frame.merge(run.phases[["request_id", "ttft_ms"]], on="request_id", how="left")
    if len(access):
        frame = frame.merge(
            access[["request_id", "replica_port", "failed_over", "upstream_addr"]], on="request_id", how="left"
        )
    summary = failover_summary(frame, kill_s)
    metrics.update({k: (float("nan") if v is None else v) for k, v in summary.items() if k != "requests"})
    metrics["kill_at_s"] = kill_s - (ks.first_send_s or kill_s)
    segs = segment_table(frame, kill_s, summary["recovery_s"])
    for row in segs.itertuples():
        metrics[f"{row.segment}.ttft_ms_p99"] = row.ttft_ms_p99
        metrics[f"{row.segment}.failed"] = float(row.failed)
    result.tables.update({"segments": segs, "requests_by_replica": frame})
    post = frame[frame["intended_s"] >= kill_s]
    if "replica_port" in frame:
        on_victim = int(((post["replica_port"] == victim.port) & (post["outcome"] == "ok")).sum())
        failed_over = int(frame["failed_over"].fillna(False).astype(bool).sum())
        metrics.update({"served_by_killed_after_kill": float(on_victim), "failed_over_by_lb": float(failed_over)})
        reasons.append(
            f"after the kill, {int((post['outcome'] == 'ok').sum())} requests served by the survivor(s), "
            f"{on_victim} by the killed replica; nginx failed over {failed_over} request(s)"
        )
    rec = summary["recovery_s"]
    reasons.append(
        f"replica {victim.name} killed (SIGKILL to its process group) {metrics['kill_at_s']:.2f} s into "
        f"the run: {int(summary['failed_requests'])} failed requests of {sent} "
        f"({int(summary['failed_in_flight_at_kill'])} in flight at the kill, "
        f"{int(summary['failed_sent_after_kill'])} sent after it; baseline failure rate "
        f"{summary['baseline_failure_rate']:.3f})"
    )
    first_ok = summary["first_ok_after_kill_s"]
    ok_rec = rec is not None and rec <= sc.max_recovery_s
    passed &= ok_rec
    reasons.append(
        (f"time to recover {rec:.2f} s" if rec is not None else "never recovered within the run")
        + (f", first success after the kill at +{first_ok:.2f} s" if first_ok is not None else "")
        + f" ({'<=' if ok_rec else 'not within'} max_recovery_s={sc.max_recovery_s:g}): "
        + ("ok" if ok_rec else "FAIL")
    )
    p99 = {r.segment: r.ttft_ms_p99 for r in segs.itertuples()}
    reasons.append(
        f"TTFT p99 before {p99['before']:.0f} ms, during {p99['during']:.0f} ms, after {p99['after']:.0f} ms"
    )
    if rec is not None:
        after_ids = set(frame.loc[frame["intended_s"] >= kill_s + rec, "request_id"])
        after = run.phases[run.phases["request_id"].isin(after_ids)]
        if len(after):
            ok_after, lines = check_slo(headline(after, run.duration_s), slo)
            passed &= ok_after
            reasons.extend(f"after recovery: {x}" for x in lines)
    add_attempts(result, made)
    result.passed = bool(passed)
    return result
