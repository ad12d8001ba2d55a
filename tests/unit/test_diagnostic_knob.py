"""The planted diagnostic decode delay (benchmarks/verdict_error_rates.py --engine hf) is refused in a candidate
that does not declare itself diagnostic, with the field and the fix, and allowed in one that does."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferopt.config import load_config
from inferopt.config.models import CandidateConfig

ROOT = Path(__file__).resolve().parents[2]


def _cand(**update: object) -> dict:
    d = load_config(ROOT / "configs/candidates/batching.yaml").model_dump()
    d.update(update)
    return d


def test_a_candidate_planting_the_delay_must_say_diagnostic() -> None:
    with pytest.raises(ValueError, match=r"changes: diagnostic_decode_delay_ms = 5 .*fix: remove it, or declare"):
        CandidateConfig.model_validate(_cand(changes={"diagnostic_decode_delay_ms": 5.0}))
    base = _cand()
    base["baseline"]["diagnostic_decode_delay_ms"] = 2.0
    with pytest.raises(ValueError, match="baseline: diagnostic_decode_delay_ms = 2"):
        CandidateConfig.model_validate(base)
    ok = CandidateConfig.model_validate(_cand(changes={"diagnostic_decode_delay_ms": 5.0}, diagnostic=True))
    assert ok.candidate_system.diagnostic_decode_delay_ms == 5.0
    assert not load_config(ROOT / "configs/candidates/batching.yaml").diagnostic  # shipped candidates are not


def test_the_delay_is_refused_with_speculative_decoding() -> None:
    d = _cand(changes={"diagnostic_decode_delay_ms": 5.0}, diagnostic=True)
    d["baseline"]["speculative"] = {"draft_model": "layers:1", "num_draft_tokens": 3}
    with pytest.raises(ValueError, match="not to speculative decoding"):
        CandidateConfig.model_validate(d)
