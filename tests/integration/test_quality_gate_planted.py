"""Planted degradations through the sliced quality gate (issue 6; SPEC G1, G2, K2, K4), on the shipped trained
model: a benign arm (int8 weights) passes every slice; an aggressive arm (2-bit weights) fails slices it hurts."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("lm_eval")
pytest.importorskip("optimum.quanto")

from inferopt.config import GateSettings, HFSystem, ModelSpec  # noqa: E402
from inferopt.gate.suite_gate import sliced_gate  # noqa: E402
from inferopt.model.builtin import shipped_dir  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shipped_dir("quality-tiny") is None, reason="the trained quality model is not shipped in this checkout"
    ),
]

BASE = HFSystem(model=ModelSpec(path="builtin:quality-tiny"), torch_threads=2)
GATE = GateSettings(quality_model="system", quality_limit=60, quality_bootstrap=1000)


def test_benign_int8_weights_pass_every_slice() -> None:
    res = sliced_gate(BASE, BASE.model_copy(update={"weight_quantization": "quanto-int8"}), GATE)
    assert res.status == "pass", res.reasons
    assert {"task=tool", "risk=high"} <= set(res.table["slice"])
    assert (res.table["ci_lo"] <= res.table["diff"]).all() and (res.table["diff"] <= res.table["ci_hi"]).all()


def test_aggressive_2bit_weights_fail_with_the_slices_named() -> None:
    res = sliced_gate(BASE, BASE.model_copy(update={"weight_quantization": "quanto-int2"}), GATE)
    assert res.status == "fail", res.reasons
    failed = set(res.table.loc[res.table["status"] == "fail", "slice"])
    assert failed, res.reasons
    assert any("fail:" in r for r in res.reasons)
