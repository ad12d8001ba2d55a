"""The planted KV arms on the quality model (issue 20): what the long-retrieval slice must catch, and one it
must let pass. Each arm is (expected outcome, baseline, candidate): the candidate differs from its baseline
by one knob.

  aggressive:kv-int2       KV cache quantized to 2 bits (quanto)        long retrieval must fail
  aggressive:kv-int4       KV cache quantized to 4 bits (quanto)        long retrieval must fail (outlier twin)
  aggressive:window-<W>    sliding window of W < context tokens        long retrieval must fail (Mistral twin)
  benign:kv-hqq-int8       KV cache quantized to 8 bits (hqq)           long retrieval must pass (outlier twin)

Twins keep the model's function and change one property. The Mistral twin (`mistral_copy`) reads
`sliding_window` (Llama attention has none). The outlier twin (`key_outliers`) has keys with outlier channels at
KEY_OUTLIER_RATIO, as real LLMs' keys have and the trained proxy's do not: 4-bit KV is harmless on flat keys and
breaks models with outlier keys, so the 4-bit arm and the 8-bit arm it is weighed against run on that twin.
Deliberately not here: running the gate (`inferopt.gate`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from inferopt.config import HFSystem, ModelSpec
from inferopt.model.loading import resolve_model_dir
from inferopt.model.quality.key_outliers import KEY_OUTLIER_RATIO, key_outlier_copy
from inferopt.model.quality.mistral_copy import mistral_copy

Expect = Literal["fail", "pass"]
LONG_SLICE = "task=kv,context=long"  # the slice (metric `exact`) the planted KV arms are judged on
WINDOW_TOKENS = 128  # the window arm's size: well inside the 420-480-token long contexts


def planted_kv_arms(
    base: HFSystem, twin_dir: str | Path, window_tokens: int = WINDOW_TOKENS, ratio: float = KEY_OUTLIER_RATIO
) -> dict[str, tuple[Expect, HFSystem, HFSystem]]:
    """name -> (expected long-retrieval status, baseline, candidate); writes the Mistral twin and the outlier
    twin of `base`'s model (a Llama directory, e.g. the shipped quality model) under `twin_dir`."""
    src = resolve_model_dir(base.model)
    mistral = base.model_copy(update={"model": ModelSpec(path=str(mistral_copy(src, Path(twin_dir) / "mistral")))})
    outlier_dir, _ = key_outlier_copy(src, Path(twin_dir) / "key-outliers", ratio)
    outlier = base.model_copy(update={"model": ModelSpec(path=str(outlier_dir))})
    return {
        "aggressive:kv-int2": ("fail", base, base.model_copy(update={"kv_cache": "quanto-int2"})),
        "aggressive:kv-int4": ("fail", outlier, outlier.model_copy(update={"kv_cache": "quanto-int4"})),
        f"aggressive:window-{window_tokens}": (
            "fail",
            mistral,
            mistral.model_copy(update={"sliding_window": window_tokens}),
        ),
        "benign:kv-hqq-int8": ("pass", outlier, outlier.model_copy(update={"kv_cache": "hqq-int8"})),
    }
