"""A real local Prefect server for the deployment tests: `prefect server start --host 127.0.0.1 --port <free>`
with its own home (a fresh SQLite database) in a temp dir, the repo's deployments registered from
`prefect.yaml` on two process work pools, and workers started and killed per test. Every process started
here is in its own process group and is killed by its id at the end; waits are bounded."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from inferopt.transport.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
PREFECT = str(Path(sys.executable).with_name("prefect"))
SERVER_START_S = 240.0


def _stop(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=grace_s)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=grace_s)


@dataclass
class LocalPrefect:
    url: str
    env: dict[str, str]
    tmp: Path
    server: subprocess.Popen | None = None
    workers: list[subprocess.Popen] = field(default_factory=list)

    def cli(self, *args: str, timeout_s: float = 300.0) -> subprocess.CompletedProcess:
        """Run `prefect <args>` from the repo root against this server (bounded in time)."""
        return subprocess.run(
            [PREFECT, "--no-prompt", *args], cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=timeout_s
        )

    def start_worker(self, pool: str, limit: int | None = None, name: str | None = None) -> subprocess.Popen:
        args = [PREFECT, "worker", "start", "--pool", pool, "--type", "process"]
        if limit:
            args += ["--limit", str(limit)]
        if name:
            args += ["--name", name]
        log = (self.tmp / f"worker-{name or pool}-{len(self.workers)}.log").open("w")
        proc = subprocess.Popen(
            args, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.workers.append(proc)
        return proc

    def stop_workers(self) -> None:
        while self.workers:
            _stop(self.workers.pop())

    def worker_logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(self.tmp.glob("worker-*.log")))

    def close(self) -> None:
        self.stop_workers()
        if self.server is not None:
            _stop(self.server)


def start_local_prefect(tmp: Path, mlflow_uri: str, results: Path) -> LocalPrefect:
    """Start the server (waits for /api/health, at most SERVER_START_S), create the pools `local` and `arms`,
    and `prefect deploy --all` from the repo root. Raises RuntimeError with the server's log on failure."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/api"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(
        {
            "PREFECT_HOME": str(tmp / "prefect-home"),
            "PREFECT_API_URL": url,
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_LOGGING_LEVEL": "WARNING",
            "PREFECT_WORKER_QUERY_SECONDS": "2",
            "PREFECT_WORKER_HEARTBEAT_SECONDS": "10",
            "PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW": "ignore",
            "MLFLOW_TRACKING_URI": mlflow_uri,
            "MLFLOW_DISABLE_TELEMETRY": "true",
            "INFEROPT_RESULTS": str(results),
            "INFEROPT_REPO": str(ROOT),
            "OMP_WAIT_POLICY": "PASSIVE",
        }
    )
    lp = LocalPrefect(url=url, env=env, tmp=tmp)
    server_env = {k: v for k, v in env.items() if k != "PREFECT_API_URL"}
    log = (tmp / "server.log").open("w")
    lp.server = subprocess.Popen(
        [PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        cwd=tmp,
        env=server_env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + SERVER_START_S
    while True:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=5) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if lp.server.poll() is not None or time.monotonic() > deadline:
            lp.close()
            raise RuntimeError(
                f"prefect server did not become healthy in {SERVER_START_S:g} s:\n"
                + (tmp / "server.log").read_text()[-3000:]
            )
        time.sleep(1.0)
    for pool in ("local", "arms"):
        r = lp.cli("work-pool", "create", pool, "--type", "process", timeout_s=120)
        if r.returncode != 0:
            lp.close()
            raise RuntimeError(f"work-pool create {pool}: {r.stdout[-2000:]}{r.stderr[-2000:]}")
    r = lp.cli("deploy", "--all", timeout_s=240)
    if r.returncode != 0:
        lp.close()
        raise RuntimeError(f"prefect deploy --all failed:\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
    return lp
