"""The sliced quality comparison (SPEC G1, G2): paired intervals, non-inferiority per slice, calibration."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from inferopt.gate.sliced import (
    accuracy_by_slice,
    bootstrap_mean_diff,
    calibration,
    compare,
    ece,
    overall_status,
)
from inferopt.model.quality.corpus import TASKS, eval_set, stream


def _samples(values: dict[tuple[str, str, str], np.ndarray]) -> pd.DataFrame:
    rows = []
    for (task, lang, context), vals in values.items():
        metric = {"tool": "args_exact", "mc": "acc"}.get(task, "exact")
        for i, v in enumerate(vals):
            rows.append(
                {
                    "task_name": f"inferopt_{task}",
                    "doc_id": i,
                    "id": f"{task}-{lang}-{context}-{i}",
                    "task": task,
                    "lang": lang,
                    "context": context,
                    "risk": "high" if task in ("kv", "tool") else "normal",
                    "metric": metric,
                    "value": float(v),
                }
            )
    return pd.DataFrame(rows)


CELLS = [
    ("arith", "en", "short"),
    ("arith", "zh", "short"),
    ("kv", "en", "short"),
    ("kv", "en", "long"),
    ("kv", "zh", "short"),
    ("kv", "zh", "long"),
]


def _base(n: int = 80, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {c: (rng.random(n) < 0.9).astype(float) for c in CELLS}


def test_identical_arms_pass_every_slice() -> None:
    b = _base()
    table = compare(_samples(b), _samples(b))
    assert set(table["status"]) == {"pass"} and overall_status(table) == "pass"
    assert (table["ci_lo"] == 0).all() and (table["ci_hi"] == 0).all()


def test_a_drop_on_long_context_fails_that_slice_only() -> None:
    b = _base()
    c = {k: v.copy() for k, v in b.items()}
    for cell in (("kv", "en", "long"), ("kv", "zh", "long")):
        c[cell][: int(0.5 * len(c[cell]))] = 0.0  # half the long-context answers now wrong
    table = compare(_samples(b), _samples(c)).set_index("slice")
    assert table.loc["task=kv,context=long", "status"] == "fail"
    assert table.loc["task=kv,context=short", "status"] == "pass"
    assert table.loc["task=arith", "status"] == "pass"
    assert overall_status(table.reset_index()) == "fail"


def test_a_small_noisy_difference_is_inconclusive_not_pass() -> None:
    rng = np.random.default_rng(3)
    b = {("arith", "en", "short"): (rng.random(30) < 0.8).astype(float)}
    c = {("arith", "en", "short"): (rng.random(30) < 0.8).astype(float)}  # independent: wide interval
    table = compare(_samples(b), _samples(c), margin=0.05)
    assert set(table["status"]) == {"inconclusive"}


def test_mlperf_ratio_rule() -> None:
    b = {("arith", "en", "short"): np.ones(200)}
    c = {("arith", "en", "short"): np.r_[np.zeros(4), np.ones(196)]}  # 98 % of the reference
    assert compare(_samples(b), _samples(c), margin=0.05)["status"].iloc[0] == "pass"
    assert compare(_samples(b), _samples(c), margin=0.05, mlperf_ratio=0.99)["status"].iloc[0] == "fail"


def test_bootstrap_interval_covers_the_mean() -> None:
    diff = np.r_[np.zeros(50), -np.ones(10)]
    lo, hi = bootstrap_mean_diff(diff, samples=1000)
    assert lo < diff.mean() < hi and hi <= 0


def test_ece_zero_when_calibrated_and_large_when_overconfident() -> None:
    p = np.full(1000, 0.7)
    rng = np.random.default_rng(0)
    assert ece(p, rng.random(1000) < 0.7) < 0.05
    assert ece(np.full(1000, 0.99), rng.random(1000) < 0.5) > 0.4


def test_calibration_table_flags_a_collapsed_candidate() -> None:
    rng = np.random.default_rng(1)
    n = 200
    gold = rng.integers(0, 2, n)
    p_gold_b = np.clip(rng.normal(0.85, 0.05, n), 0.5, 0.99)

    def frame(p_gold: np.ndarray) -> pd.DataFrame:
        pred = np.where(p_gold >= 0.5, gold, 1 - gold)
        return pd.DataFrame(
            {
                "task_name": "inferopt_mc",
                "id": [f"mc-{i}" for i in range(n)],
                "lang": "en",
                "metric": "acc",
                "value": (pred == gold).astype(float),
                "p_gold": p_gold,
                "p_max": np.maximum(p_gold, 1 - p_gold),
                "pred": pred,
                "gold": gold,
            }
        )

    same = calibration(frame(p_gold_b), frame(p_gold_b), samples=200)
    assert set(same["status"]) == {"pass"}
    worse = calibration(frame(p_gold_b), frame(np.full(n, 0.05)), samples=200)  # confidently wrong
    assert set(worse["status"]) == {"fail"}


def test_accuracy_by_slice_uses_each_task_primary_metric() -> None:
    s = _samples({("kv", "en", "short"): np.array([1, 1, 0, 1])})
    extra = s.assign(metric="json_valid", value=0.0)
    acc = accuracy_by_slice(pd.concat([s, extra]))
    assert acc["accuracy"].tolist() == [0.75] and acc["n"].tolist() == [4]


def test_corpus_eval_is_held_out_of_training_and_covers_every_slice() -> None:
    ev = eval_set(per_slice=10)
    cells = {(e.slice["task"], e.slice["lang"], e.slice["context"]) for e in ev}
    assert {t for t, _, _ in cells} == set(TASKS) and len(cells) == 12
    ids = {e.id for e in ev}
    train = stream(seed=5)
    assert not any(next(train).id in ids for _ in range(3000))
    assert eval_set(per_slice=10) == ev  # deterministic


@pytest.mark.parametrize("task", ["arith", "kv", "tool", "mc"])
def test_every_task_answer_is_what_the_prompt_asks(task: str) -> None:
    import json

    for e in [e for e in eval_set(per_slice=5) if e.slice["task"] == task]:
        if task == "arith":
            a, b = e.id.split("-")[2:4]
            assert int(e.answer) == int(a) + int(b)
        elif task == "kv":
            key = e.prompt.rsplit("?", 1)[1]
            assert f"{key}{e.answer}" in e.prompt.split(" ?")[0].split()
        elif task == "tool":
            call = json.loads(e.answer)
            assert call["order_id"] in e.prompt.split("->")[0].split()[-4:] + e.prompt.split()[-2:]
        else:
            assert e.choices[e.gold] == e.answer


def test_a_slice_at_the_floor_is_uninformative_not_a_pass_and_each_slice_states_its_mde() -> None:
    from inferopt.gate.sliced import compare, informative, min_detectable_drop, overall_status

    def samples(values: list[float], slice_ctx: str) -> pd.DataFrame:
        return pd.DataFrame(
            [
                {
                    "task_name": "t",
                    "id": f"{slice_ctx}{i}",
                    "task": "kv",
                    "lang": "en",
                    "context": slice_ctx,
                    "risk": "high",
                    "metric": "exact",
                    "value": v,
                }
                for i, v in enumerate(values)
            ]
        )

    base = pd.concat([samples([0.0] * 58 + [1.0] * 2, "long"), samples([1.0] * 57 + [0.0] * 3, "short")])
    table = compare(base, base.copy(), margin=0.05, samples=200).set_index("slice")
    floor, ok = table.loc["task=kv,context=long"], table.loc["task=kv,context=short"]
    assert floor["status"] == "uninformative" and ok["status"] == "pass"  # 0.03 cannot drop by 0.05
    assert 0 < ok["mde"] < 0.2 and overall_status(table.reset_index()) == "pass"
    # (1.96 + 0.84) x sqrt(2 x 0.5 x 0.5 / 100) = 0.198
    assert min_detectable_drop(0.5, 100) == pytest.approx(0.198, abs=0.002)
    assert not informative(0.5, 0.05, 0.6) and informative(0.9, 0.05, 0.1)
