"""The planted KV arms on the quality model (issue 20): what the long-retrieval slice must catch, and one it
must let pass. Each arm is (expected outcome, baseline, candidate): the candidate differs from its baseline
by one knob.

  aggressive:kv-int2       KV cache quantized to 2 bits (quanto)        long retrieval must fail
  aggressive:kv-int4       KV cache quantized to 4 bits (quanto)        long retrieval must fail
  aggressive:window-<W>    sliding window of W < context tokens        long retrieval must fail
  benign:kv-hqq-int8       KV cache quantized to 8 bits (hqq)           long retrieval must pass

The window arm runs on the Mistral twin of the Llama quality model (`mistral_copy`: same weights, a config
whose attention reads `sliding_window`; Llama attention has none) and is compared with the twin without a
window, so the window is the only change. Deliberately not here: running the gate (`inferopt.gate`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from inferopt.config import HFSystem, ModelSpec
from inferopt.model.loading import resolve_model_dir
from inferopt.model.quality.mistral_copy import mistral_copy

Expect = Literal["fail", "pass"]
LONG_SLICE = "task=kv,context=long"  # the slice (metric `exact`) the planted KV arms are judged on
WINDOW_TOKENS = 128  # the window arm's size: well inside the 420-480-token long contexts


def planted_kv_arms(
    base: HFSystem, twin_dir: str | Path, window_tokens: int = WINDOW_TOKENS
) -> dict[str, tuple[Expect, HFSystem, HFSystem]]:
    """name -> (expected long-retrieval status, baseline, candidate); writes the Mistral twin of `base`'s
    model (a Llama directory, e.g. the shipped quality model) to `twin_dir`."""
    twin_model = ModelSpec(path=str(mistral_copy(resolve_model_dir(base.model), twin_dir)))
    twin = base.model_copy(update={"model": twin_model})
    return {
        "aggressive:kv-int2": ("fail", base, base.model_copy(update={"kv_cache": "quanto-int2"})),
        "aggressive:kv-int4": ("fail", base, base.model_copy(update={"kv_cache": "quanto-int4"})),
        f"aggressive:window-{window_tokens}": ("fail", twin, twin.model_copy(update={"sliding_window": window_tokens})),
        "benign:kv-hqq-int8": ("pass", base, base.model_copy(update={"kv_cache": "hqq-int8"})),
    }
