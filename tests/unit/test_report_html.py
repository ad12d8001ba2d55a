"""The HTML report on a small synthetic run: verdict first, the six steps in order, self-contained (no
external URL, no script), missing parts said, unknown tables and columns rendered, text escaped."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from inferopt.report.html import build_report
from inferopt.report.rundir import load_run_dir

STEP_DIRS = ("1-measure", "2-locate", "3-choose", "4-ablate", "5-validate", "6-gate")


def _png() -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(2, 1))
    ax.plot([0, 1], [0, 1])
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def _phases(n: int = 30) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame(
        {
            "outcome": ["ok"] * (n - 2) + ["timeout", "rejected"],
            "ttft_ms": rng.gamma(2.0, 20.0, n),
            "tpot_ms": rng.gamma(4.0, 1.0, n),
            "e2e_ms": rng.gamma(3.0, 50.0, n),
            "input_bucket": rng.choice(["short", "medium", "long"], n),
            "output_bucket": rng.choice(["short", "long"], n),
            "concurrency_bucket": rng.choice(["<=1", "(1,2]", "(2,4]"], n),
            "cache_hit": rng.choice(["miss", "hit"], n),
        }
    )


def _summary() -> pd.DataFrame:
    rows = []
    for dim, value in (("all", "all"), ("input_bucket", "short"), ("input_bucket", "long")):
        rows.append(
            {
                "arm": "baseline",
                "slice_dim": dim,
                "slice_value": value,
                "metric": "requests",
                "stat": "count",
                "value": 10.0,
                "unit": "req",
            }
        )
        for metric in ("ttft_ms", "tpot_ms", "e2e_ms"):
            for i, stat in enumerate(("p50", "p95", "p99")):
                rows.append(
                    {
                        "arm": "baseline",
                        "slice_dim": dim,
                        "slice_value": value,
                        "metric": metric,
                        "stat": stat,
                        "value": 10.0 * (i + 1),
                        "unit": "ms",
                    }
                )
    return pd.DataFrame(rows)


def make_run(root: Path, *, steps: tuple[str, ...] = STEP_DIRS, verdict: bool = True) -> Path:
    """A results/<run_id>/ directory shaped like the flow's, with a few rows per table."""
    run = root / "0123456789abcdef"
    run.mkdir(parents=True)
    (run / "candidate.resolved.json").write_text(
        json.dumps(
            {
                "name": "synthetic-candidate",
                "changes": {"batching.max_batch_size": 8},
                "target_metrics": ["ttft_ms_p99"],
            }
        )
    )
    if verdict:
        (run / "verdict.json").write_text(
            json.dumps(
                {
                    "decision": "reject",
                    "warnings": ["the change does not serve the located cause <script>alert(1)</script>"],
                    "reasons": [
                        "REJECT because: validate[burst] failed",
                        "locate: dominant cause 'queueing'",
                        "validate[burst]: fail",
                        "  TTFT p99 912 ms <= 600 ms: FAIL",
                    ],
                    "evidence": {
                        "measure": {
                            "headline": {
                                "ttft_ms_p99": 900.0,
                                "tpot_ms_p95": 12.0,
                                "output_tok_per_s": 55.0,
                                "ok_rate": 0.95,
                            }
                        },
                        "locate": {"cause": "queueing", "confidence": 0.9},
                        "choose": {"matches": True},
                        "gate": {"quality": "pass", "cost": "pass"},
                    },
                }
            )
        )
        (run / "lint.json").write_text(json.dumps({"status": "clean", "findings": [], "allow": []}))
    png = _png()
    for name in steps:
        (run / name).mkdir()
    if "1-measure" in steps:
        _phases().to_parquet(run / "1-measure" / "phases.parquet")
        _summary().to_parquet(run / "1-measure" / "summary.parquet")
        (run / "1-measure" / "phase_stack_input_bucket.png").write_bytes(png)
        (run / "1-measure" / "measure.json").write_text(json.dumps({"decomposition": {"adds_up": True}}))
        pd.DataFrame({"request_id": ["a", "b"]}).to_parquet(run / "1-measure" / "requests.parquet")
    if "2-locate" in steps:
        (run / "2-locate" / "bottleneck.json").write_text(
            json.dumps(
                {
                    "cause": "queueing",
                    "confidence": 0.9,
                    "rule": "queue wait is 90% of TTFT",
                    "evidence": [{"check": "queue.share", "value": 0.9, "threshold": 0.5, "fired": True}],
                }
            )
        )
        (run / "2-locate" / "roofline.png").write_bytes(png)
        pd.DataFrame({"phase": ["prefill", "decode"], "ai_flop_per_byte": [50.0, 1.0]}).to_parquet(
            run / "2-locate" / "roofline.parquet"
        )
    if "3-choose" in steps:
        (run / "3-choose" / "choice.json").write_text(
            json.dumps({"cause": "queueing", "matches": True, "warning": None})
        )
    if "4-ablate" in steps:
        pd.DataFrame(
            {
                "arm": ["aa", "candidate"],
                "metric": ["ttft_ms_p99"] * 2,
                "ratio": [1.01, 0.5],
                "ratio_lo": [0.9, 0.4],
                "ratio_hi": [1.1, 0.6],
                "significant": [False, True],
                "direction": ["none", "better"],
            }
        ).to_parquet(run / "4-ablate" / "effects.parquet")
        (run / "4-ablate" / "effects_forest.png").write_bytes(png)
        (run / "4-ablate" / "arm_verdicts.json").write_text(
            json.dumps({"candidate": {"role": "candidate", "verdict": "improves", "reasons": ["ttft_ms_p99 x0.5"]}})
        )
    if "5-validate" in steps:
        pd.DataFrame(
            {
                "scenario": ["steady", "burst"],
                "kind": ["steady", "burst"],
                "passed": [True, False],
                "ttft_ms_p99": [300.0, 912.0],
                "reasons": ["ok", "TTFT p99 912 ms <= 600 ms: FAIL"],
            }
        ).to_parquet(run / "5-validate" / "scenarios.parquet")
        # a table another step adds later, with a column the report has never heard of
        pd.DataFrame({"tenant": ["a", "b"], "jain_index_brand_new": [0.97, 0.97], "starved": [False, True]}).to_csv(
            run / "5-validate" / "fairness.csv", index=False
        )
    if "6-gate" in steps:
        (run / "6-gate" / "gate.json").write_text(
            json.dumps(
                {
                    "quality": {"status": "pass", "reasons": ["all slices non-inferior"]},
                    "cost": {"status": "pass", "reasons": ["cheaper"]},
                }
            )
        )
        pd.DataFrame(
            {
                "slice": ["task=kv", "task=arith"],
                "metric": ["exact", "exact"],
                "n": [20, 20],
                "diff": [-0.01, 0.0],
                "ci_lo": [-0.04, -0.02],
                "ci_hi": [0.02, 0.02],
                "margin": [0.05, 0.05],
                "status": ["non-inferior", "non-inferior"],
            }
        ).to_parquet(run / "6-gate" / "quality_slices.parquet")
    return run


def _external_refs(html: str) -> list[str]:
    return re.findall(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//[^"'\s>]*""", html, flags=re.I)


def test_report_has_verdict_first_then_six_steps_and_is_self_contained(tmp_path: Path) -> None:
    html = build_report(load_run_dir(make_run(tmp_path)))
    anchors = [
        'id="verdict"',
        'id="measure"',
        'id="locate"',
        'id="choose"',
        'id="ablate"',
        'id="validate"',
        'id="gate"',
    ]
    positions = [html.find(a) for a in anchors]
    assert all(p > 0 for p in positions), dict(zip(anchors, positions, strict=False))
    assert positions == sorted(positions), "sections out of order"
    assert "VERDICT: REJECT" in html and "TTFT p99 912 ms &lt;= 600 ms: FAIL" in html
    # self-contained: no external URL, no script, no stylesheet link; every image inline
    assert _external_refs(html) == []
    assert "<script" not in html.lower() and "<link" not in html.lower()
    imgs = re.findall(r"<img[^>]*src=\"([^\"]*)\"", html)
    assert len(imgs) >= 5 and all(src.startswith("data:image/png;base64,") for src in imgs)
    # the CDFs per slice and the quality forest are made from the tables
    assert "latency CDFs per slice" in html and "quality per slice" in html
    # a table the report has never seen, with its new column, shows up in its step
    assert "jain_index_brand_new" in html and html.find("jain_index_brand_new") > html.find('id="validate"')
    # text from the run is escaped, never markup
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    # bulk per-request tables are counted, not dumped
    assert "requests.parquet (2 rows)" in html


def test_missing_steps_and_verdict_are_said(tmp_path: Path) -> None:
    run = make_run(tmp_path, steps=("1-measure", "2-locate"), verdict=False)
    html = build_report(load_run_dir(run))
    assert "NO VERDICT" in html
    for key in ("choose", "ablate", "validate", "gate"):
        section = html[html.find(f'id="{key}"') :]
        assert "Not in this run" in section[:600], key
    assert (
        'id="measure"' in html and "Not in this run" not in html[html.find('id="measure"') : html.find('id="locate"')]
    )


def test_validate_without_scenarios_says_so(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    (run / "5-validate" / "scenarios.parquet").unlink()
    html = build_report(load_run_dir(run))
    assert "No scenarios table" in html


@pytest.mark.parametrize(
    "values, expected",
    [
        (["(2,4]", "<=1", "(16,32]", "(1,2]"], ["<=1", "(1,2]", "(2,4]", "(16,32]"]),
        (["long", "short", "medium"], ["short", "medium", "long"]),
    ],
)
def test_slices_in_reading_order(values: list[str], expected: list[str]) -> None:
    from inferopt.report.figures import slice_sort_key

    assert sorted(values, key=slice_sort_key) == expected


def test_progress_lines_have_elapsed_time(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("prefect")
    from tasks.report import Progress

    p = Progress(total=2)
    p.step("measure")
    p.step("locate")
    p.done()
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 3
    assert re.match(r"\[optimize \+\d+\.\d s\] step 1/2 measure$", lines[0])
    assert re.match(r"\[optimize \+\d+\.\d s\] step 2/2 locate \(measure took \d+\.\d s\)$", lines[1])
    assert lines[2].endswith("done (locate took 0.0 s)")


def test_gate_shows_the_retrieval_distance_curve_when_logged(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    before = build_report(load_run_dir(run))
    assert "retrieval by key-to-query distance" not in before
    pd.DataFrame(
        {
            "lang": ["all", "all", "en", "en"],
            "bucket_lo": [0, 64, 0, 64],
            "bucket_hi": [63, 127, 63, 127],
            "n": [10, 10, 5, 5],
            "base_acc": [1.0, 0.9, 1.0, 0.8],
            "cand_acc": [1.0, 0.1, 1.0, 0.0],
        }
    ).to_parquet(run / "6-gate" / "quality_distance.parquet")
    html = build_report(load_run_dir(run))
    gate = html[html.find('id="gate"') :]
    assert "retrieval by key-to-query distance (from quality_distance)" in gate
    assert "kv retrieval accuracy by key-to-query distance" in gate
    assert len(re.findall(r"<img", gate)) > len(re.findall(r"<img", before[before.find('id="gate"') :]))


def test_the_glance_shows_the_prefix_cache_from_the_engine_counters_beside_our_records() -> None:
    from inferopt.report.html import _cache_text

    head = {"engine_cache_hit_rate": 0.7196, "cached_token_share": 0.7196, "cache_hit_request_share": 0.5}
    text = _cache_text(head)
    assert "engine counters 0.72 of prompt tokens hit" in text and "records 0.72" in text and "0.5 of requests" in text
    assert "no engine counters" in _cache_text({"cached_token_share": 0.3, "cache_hit_request_share": 0.4})
    assert _cache_text({"ttft_ms_p99": 10.0}) == ""  # no prefix cache measured: nothing claimed
