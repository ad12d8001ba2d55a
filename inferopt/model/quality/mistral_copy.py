"""A Mistral-architecture copy of the Llama quality model, so a sliding-window arm can be evaluated honestly.

The quality model is a `LlamaForCausalLM`; transformers' Llama attention has no sliding window (the hf engine
refuses `sliding_window` on it rather than run a silent no-op arm). Mistral's decoder is the same network
(RMSNorm, RoPE, SwiGLU MLP, grouped-query attention without biases, the same parameter names) plus a
`sliding_window` its attention mask reads. The copy has the very same weights and tokenizer and only a
Mistral `config.json`: with no window it computes the Llama's logits (tests check this), so a window arm on
it differs from the baseline by the window alone.

Deliberately not here: the window arm itself (an `HFSystem` with `sliding_window` on this directory) and
loading (`inferopt.model.loading`).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

_COPIED = ("model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json")
_DROPPED = ("architectures", "model_type", "mlp_bias", "pretraining_tp", "attention_bias", "transformers_version")


def mistral_config(llama: dict) -> dict:
    """The Llama config as a Mistral one with no window; refuses a Llama with biases (Mistral has none)."""
    if llama.get("model_type") != "llama":
        raise ValueError(f"expected a llama config, got model_type {llama.get('model_type')!r}")
    if llama.get("attention_bias") or llama.get("mlp_bias"):
        raise ValueError("a Llama with attention or MLP biases has no Mistral twin (Mistral has no biases)")
    out = {k: v for k, v in llama.items() if k not in _DROPPED}
    return {**out, "architectures": ["MistralForCausalLM"], "model_type": "mistral", "sliding_window": None}


def mistral_copy(llama_dir: str | Path, out_dir: str | Path) -> Path:
    """Write the Mistral twin of `llama_dir` into `out_dir` (weights copied, not converted) and return it."""
    src, dst = Path(llama_dir), Path(out_dir)
    dst.mkdir(parents=True, exist_ok=True)
    cfg = mistral_config(json.loads((src / "config.json").read_text()))
    (dst / "config.json").write_text(json.dumps(cfg, indent=2))
    for name in _COPIED:
        if (src / name).is_file():
            shutil.copyfile(src / name, dst / name)
    return dst
