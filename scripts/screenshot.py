#!/usr/bin/env python
"""Screenshots of a run's HTML report and of its MLflow run page, taken with headless Chromium (Debian
`chromium`; `bash scripts/setup_chromium.sh` installs it).

    .venv/bin/python scripts/screenshot.py                      # the newest results/<run_id>/ with a report
    .venv/bin/python scripts/screenshot.py <run_id> --out shots/ [--no-mlflow]

Writes `report.png` (the top of the report: verdict and reasons, 1400×3000), `report_full.png` (the whole report),
`mlflow_run.png` (the run page: status, tags, metrics, parameters), and `mlflow_artifacts.png` (the run's artifacts with
report.html selected: MLflow's own HTML preview of the logged report). For the MLflow pages it starts `mlflow server` on
127.0.0.1 on a free port against the project's tracking store, waits for /health, and stops it afterwards. Each PNG is
checked to be non-blank (enough pixels away from the background colour). The last stdout line is one JSON object; exit
status 1 when a screenshot is missing or blank, 3 when Chromium is not installed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from inferopt.report.html import build_report  # noqa: E402
from inferopt.report.rundir import load_run_dir  # noqa: E402
from inferopt.transport.ports import free_port  # noqa: E402

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def chromium_binary() -> str | None:
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def screenshot(
    url: str,
    out: Path,
    width: int = 1400,
    height: int = 3000,
    budget_ms: int = 0,
    timeout_s: float = 120.0,
    stop_ms: int = 0,
) -> Path:
    """One headless Chromium screenshot of `url` into `out` (PNG)."""
    binary = chromium_binary()
    if binary is None:
        raise FileNotFoundError("chromium is not installed: bash scripts/setup_chromium.sh")
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists():
        out.unlink()
    cmd = [
        binary,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        f"--window-size={width},{height}",
        f"--screenshot={out}",
    ]
    if budget_ms:  # a JS app: let it run; --timeout stops a page whose requests never settle (MLflow polls)
        cmd += [f"--virtual-time-budget={budget_ms}", f"--timeout={budget_ms + 15000}"]
    elif stop_ms:
        cmd.append(f"--timeout={stop_ms}")
    cmd.append(url)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # chromium's own session: its zygote and renderers too
        proc.communicate()
        raise TimeoutError(f"chromium took over {timeout_s:.0f} s on {url}") from None
    if not out.exists():
        raise RuntimeError(f"chromium wrote no screenshot (exit {proc.returncode}): {err[-1500:]}")
    return out


def blankness(png: Path) -> dict[str, float]:
    """How much of the image differs from its most common colour, and how many colours it has."""
    from PIL import Image

    im = Image.open(png).convert("RGB")
    small = im.resize((im.width // 4, im.height // 4))
    colours = small.getcolors(maxcolors=1 << 20) or []
    total = small.width * small.height
    top = max(colours)[0] if colours else total
    return {"width": im.width, "height": im.height, "non_background_share": 1.0 - top / total, "colours": len(colours)}


def non_blank(stats: dict[str, float], min_share: float = 0.02, min_colours: int = 16) -> bool:
    return stats["non_background_share"] >= min_share and stats["colours"] >= min_colours


def crop_to_content(png: Path) -> None:
    """Cut the empty background below the page's content (a tall window leaves a long blank tail)."""
    import numpy as np
    from PIL import Image

    im = Image.open(png).convert("RGB")
    a = np.asarray(im).astype(int)
    background = a[-1, -1]
    rows = np.where((np.abs(a - background).sum(axis=2) > 24).any(axis=1))[0]
    if len(rows):
        im.crop((0, 0, im.width, min(im.height, int(rows.max()) + 24))).save(png)


def tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{ROOT / 'mlflow.db'}"


class MlflowServer:
    """`mlflow server` on 127.0.0.1:<free port> against a tracking store; a context manager that stops it."""

    def __init__(self, uri: str, startup_timeout_s: float = 120.0) -> None:
        self.uri, self.timeout = uri, startup_timeout_s
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.log = Path(os.environ.get("TMPDIR", "/tmp")) / f"inferopt-mlflow-ui-{self.port}.log"

    def __enter__(self) -> "MlflowServer":
        env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "mlflow",
                    "server",
                    "--backend-store-uri",
                    self.uri,
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--workers",
                    "1",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited ({self.proc.returncode}): {self.log.read_text()[-1500:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.5)
        self.__exit__(None, None, None)
        raise TimeoutError(f"mlflow server not healthy within {self.timeout:.0f} s: {self.log.read_text()[-1500:]}")

    def __exit__(self, *exc: object) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)  # its own session: the server and its worker only
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=15)


def resolve_run_dir(run: str | None, results_root: Path) -> Path:
    if run:
        p = Path(run)
        return p if p.is_dir() else results_root / run
    reports = sorted(results_root.glob("*/report.html"), key=lambda p: p.stat().st_mtime)
    if not reports:
        raise FileNotFoundError(f"no results/<run_id>/report.html under {results_root}: run the flow first")
    return reports[-1].parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", nargs="?", help="MLflow run id or results/<run_id> (default: the newest report)")
    parser.add_argument("--out", default=None, help="directory for the PNGs (default: results/<run_id>/screenshots)")
    parser.add_argument("--results-root", default=os.environ.get("INFEROPT_RESULTS", str(ROOT / "results")))
    parser.add_argument("--no-mlflow", action="store_true", help="only the report, no MLflow server")
    parser.add_argument("--budget-ms", type=int, default=10000, help="virtual time for MLflow's JS app to render")
    args = parser.parse_args(argv)
    if chromium_binary() is None:
        print("chromium is not installed: run `bash scripts/setup_chromium.sh` (Debian, as root)", file=sys.stderr)
        print(json.dumps({"ok": False, "error": "chromium not installed"}))
        return 3
    run_dir = resolve_run_dir(args.run, Path(args.results_root)).resolve()
    report = run_dir / "report.html"
    if not report.exists():  # an older run: build its report from the directory
        report.write_text(build_report(load_run_dir(run_dir)), encoding="utf-8")
    out = Path(args.out) if args.out else run_dir / "screenshots"
    shots: dict[str, Path] = {}
    seconds: dict[str, float] = {}
    errors: list[str] = []
    t0 = time.monotonic()
    shots["report"] = screenshot(report.as_uri(), out / "report.png")
    shots["report_full"] = screenshot(report.as_uri(), out / "report_full.png", height=20000)
    crop_to_content(shots["report_full"])
    mlflow_info: dict[str, str] = {}
    if not args.no_mlflow:
        from mlflow.tracking import MlflowClient

        uri = tracking_uri()
        exp_id = MlflowClient(tracking_uri=uri).get_run(run_dir.name).info.experiment_id
        t_server = time.monotonic()
        with MlflowServer(uri) as server:
            seconds["mlflow_server_start"] = round(time.monotonic() - t_server, 1)
            page = f"{server.url}/#/experiments/{exp_id}/runs/{run_dir.name}"
            mlflow_info = {"url": page, "tracking_uri": uri}
            # the first page load after the server starts can hang under virtual time (seen on every fresh
            # server here): one throwaway load, and one retry per page
            try:
                screenshot(server.url, out / "warmup.png", height=600, timeout_s=60, stop_ms=20000)
            except Exception:  # noqa: BLE001 - only a warm-up
                pass
            (out / "warmup.png").unlink(missing_ok=True)
            for name, url in (("mlflow_run", page), ("mlflow_artifacts", f"{page}/artifacts/report.html")):
                t_shot = time.monotonic()
                for attempt in (1, 2):
                    try:
                        shots[name] = screenshot(
                            url, out / f"{name}.png", height=1600, budget_ms=args.budget_ms, timeout_s=90
                        )
                        seconds[name] = round(time.monotonic() - t_shot, 1)
                        break
                    except Exception as exc:  # noqa: BLE001 - reported in the JSON line, exit status 1
                        if attempt == 2:
                            errors.append(f"{name}: {type(exc).__name__}: {exc}")
    stats = {name: blankness(p) for name, p in shots.items()}
    blank = [name for name, s in stats.items() if not non_blank(s)]
    ok = not errors and not blank
    for name, p in shots.items():
        print(
            f"{name}: {p}  {stats[name]['width']}x{stats[name]['height']}, "
            f"{stats[name]['non_background_share']:.1%} non-background{'  BLANK' if name in blank else ''}"
        )
    for e in errors:
        print(f"ERROR {e}", file=sys.stderr)
    print(
        json.dumps(
            {
                "ok": ok,
                "run_id": run_dir.name,
                "screenshots": {k: str(v) for k, v in shots.items()},
                "stats": stats,
                "blank": blank,
                "errors": errors,
                "mlflow": mlflow_info,
                "seconds": seconds,
                "wall_s": round(time.monotonic() - t0, 1),
            }
        )
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
