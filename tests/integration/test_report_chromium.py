"""The main command on the fake engine writes report.html, logs it to the MLflow parent run and prints its
path; headless Chromium renders it to a non-blank PNG (slow: a whole flow run). The MLflow run page is
screenshotted by `scripts/screenshot.py` (it starts an MLflow server; not repeated here to keep CI lean)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _screenshot_module():
    spec = importlib.util.spec_from_file_location("inferopt_screenshot", ROOT / "scripts" / "screenshot.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


shot = _screenshot_module()


@pytest.mark.slow
@pytest.mark.skipif(
    shot.chromium_binary() is None,
    reason="headless Chromium not installed: bash scripts/setup_chromium.sh (Debian, as root)",
)
def test_flow_report_renders_in_chromium(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
        "INFEROPT_RESULTS": str(tmp_path / "results"),
        "PYTHONUNBUFFERED": "1",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "flows.optimize", "configs/candidates/fake-batching.yaml"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # progress: one line per step with the elapsed time
    for i, step in enumerate(("measure", "locate", "choose", "ablate", "validate", "gate"), start=1):
        assert re.search(rf"^\[optimize \+\d+\.\d s\] step {i}/6 {step}", proc.stdout, flags=re.M), step
    printed = re.search(r"^Report: (.+report\.html)$", proc.stdout, flags=re.M)
    assert printed, proc.stdout[-2000:]
    report = Path(printed.group(1))
    report = report if report.is_absolute() else ROOT / report
    assert report.exists() and report.parent.parent == tmp_path / "results"
    html = report.read_text()
    assert "VERDICT:" in html and all(f'id="{k}"' in html for k in ("measure", "locate", "ablate", "validate", "gate"))

    from mlflow.tracking import MlflowClient

    run_id = report.parent.name
    assert "report.html" in {
        a.path for a in MlflowClient(tracking_uri=env["MLFLOW_TRACKING_URI"]).list_artifacts(run_id)
    }

    png = shot.screenshot(report.as_uri(), tmp_path / "report.png", width=1400, height=3000)
    stats = shot.blankness(png)
    assert (stats["width"], stats["height"]) == (1400, 3000)
    assert shot.non_blank(stats), stats
    # and it is the report, not an error page: the verdict banner's colour is in the top of the page
    from PIL import Image

    top = Image.open(png).convert("RGB").crop((0, 0, 1400, 400))
    banner = {(0x1F, 0x8A, 0x4C), (0xC0, 0x39, 0x2B), (0xC7, 0x7C, 0x0E)}  # accept / reject / inconclusive
    assert banner & {c for _, c in top.getcolors(maxcolors=1 << 20)}, "no verdict banner at the top"
