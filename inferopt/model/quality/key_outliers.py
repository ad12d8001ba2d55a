"""Give a Llama-layout model's keys the outlier channels real LLMs' keys have, without changing its outputs.

Real LLMs' keys carry a few channels far larger than the rest (KIVI, KVQuant; 8-100x on Qwen2-7B), and that is
what breaks per-token low-bit KV quantizers: the outlier sets each group's range and the other channels lose
their precision. The quality proxy's keys are flat (largest channel 2-5x the median), so KV quantizers see an
easier cache than a real model would give them. `plant_key_outliers` scales one rotary pair (channels j and
j + head_dim/2, which RoPE rotates together) of every KV head's key projection by s and the matching query
channels of the heads that share it by 1/s: every q.k, so every attention score and output, is unchanged.

Deliberately not here: shipping a planted model (the planted arms write the twin when they run,
`inferopt.model.quality.planted`; by hand: `python -m inferopt.model.quality.key_outliers --out DIR`).
"""

from __future__ import annotations

import argparse
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferopt.config import ModelSpec
from inferopt.model.loading import resolve_model_dir
from inferopt.model.quality.corpus import TASK_DATA_DIR

# The planted twin's ratio (largest key pair's mean |k| over the median channel's): the geometric middle of the
# 8-100x reported for real LLMs' keys (Qwen2-7B, whose per-token INT4 KV collapses); the trained proxy's are 2-5x.
# Set after `benchmarks/kv_outlier_sweep.py` measured 0, 10, 20, 28 and 40 (README: the planted KV arms).
KEY_OUTLIER_RATIO = 28.0


@dataclass(frozen=True)
class PlantedPair:
    layer: int
    kv_head: int
    channel: int  # the pair is (channel, channel + head_dim // 2)
    scale: float


def head_dim(cfg: Any) -> int:
    """Per-head width: the config's `head_dim`, else hidden size over heads (older Mistral configs)."""
    return int(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)


def key_abs_mean(model: Any, prompts: list[Any]) -> Any:
    """Mean |k| per (layer, kv head, channel) before RoPE, over every position of `prompts` (input-id tensors)."""
    import torch

    cfg = model.config
    sums: dict[int, Any] = {}
    count = [0]

    def hook(layer: int):
        def record(_mod: Any, _inp: Any, out: Any) -> None:
            flat = out.detach().reshape(-1, out.shape[-1]).abs()
            sums[layer] = sums.get(layer, 0) + flat.sum(0)
            if layer == 0:
                count[0] += flat.shape[0]

        return record

    handles = [lyr.self_attn.k_proj.register_forward_hook(hook(i)) for i, lyr in enumerate(model.model.layers)]
    try:
        with torch.no_grad():
            for ids in prompts:
                model(ids)
    finally:
        for h in handles:
            h.remove()
    per_layer = [sums[i] / count[0] for i in range(len(model.model.layers))]
    return torch.stack(per_layer).reshape(len(per_layer), cfg.num_key_value_heads, head_dim(cfg))


def plant_key_outliers(model: Any, abs_mean: Any, ratio: float) -> list[PlantedPair]:
    """In place: in every KV head, the rotary pair with the largest mean |k| is rescaled so that its mean |k| is
    `ratio` times the head's median channel; the query channels that read it are divided by the same factor."""
    import torch

    cfg = model.config
    if ratio <= 0:
        raise ValueError(f"ratio: {ratio}; fix: a positive ratio (real LLMs' keys: 8-100)")
    if cfg.model_type not in ("llama", "mistral") or hasattr(model.model.layers[0].self_attn, "k_norm"):
        raise ValueError(
            f"{cfg.model_type}: the rescaling keeps outputs only where q and k go straight from their projections "
            "into rotate-half RoPE (llama, mistral); fix: a Llama- or Mistral-layout model"
        )
    d, groups = head_dim(cfg), cfg.num_attention_heads // cfg.num_key_value_heads
    planted = []
    with torch.no_grad():
        for n, layer in enumerate(model.model.layers):
            for h in range(cfg.num_key_value_heads):
                a = abs_mean[n, h]
                pair = (a[: d // 2] + a[d // 2 :]) / 2
                j = int(pair.argmax())
                s = ratio * float(a.median()) / float(pair[j])
                for c in (j, j + d // 2):
                    layer.self_attn.k_proj.weight[h * d + c] *= s
                    if layer.self_attn.k_proj.bias is not None:
                        layer.self_attn.k_proj.bias[h * d + c] *= s
                    for g in range(groups):
                        row = (h * groups + g) * d + c
                        layer.self_attn.q_proj.weight[row] /= s
                        if layer.self_attn.q_proj.bias is not None:
                            layer.self_attn.q_proj.bias[row] /= s
                planted.append(PlantedPair(n, h, j, round(s, 4)))
    return planted


def max_over_median(abs_mean: Any) -> list[list[float]]:
    """Per (layer, kv head): the largest channel's mean |k| over the median channel's."""
    return (abs_mean.amax(-1) / abs_mean.median(-1).values).tolist()


def key_outlier_copy(
    model_dir: str | Path, out_dir: str | Path, ratio: float, data_dir: str | Path | None = None, prompts: int = 40
) -> tuple[Path, dict[str, Any]]:
    """Write `model_dir` with key outliers at `ratio` to `out_dir` (|k| measured on the first `prompts` kv
    documents of `data_dir`, default the shipped task data); returns (out_dir, what was planted)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src, dst = Path(model_dir), Path(out_dir)
    model, tok = AutoModelForCausalLM.from_pretrained(src).eval(), AutoTokenizer.from_pretrained(src)
    docs = [
        json.loads(x)
        for x in (Path(data_dir or TASK_DATA_DIR) / "kv.jsonl").read_text(encoding="utf-8").splitlines()
        if x
    ]
    ids = [tok(d["prompt"], return_tensors="pt")["input_ids"] for d in docs[:prompts]]
    before = key_abs_mean(model, ids)
    planted = plant_key_outliers(model, before, ratio)
    model.save_pretrained(dst)
    tok.save_pretrained(dst)
    for f in src.glob("*.json"):  # training records travel with the weights
        if not (dst / f.name).exists():
            shutil.copy(f, dst)
    record = {"ratio_before": max_over_median(before), "ratio_after": max_over_median(key_abs_mean(model, ids))}
    return dst, record | {"planted": [vars(p) for p in planted]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="builtin:quality-tiny")
    ap.add_argument("--out", required=True, help="where the planted copy is written")
    ap.add_argument("--ratio", type=float, default=KEY_OUTLIER_RATIO, help="outlier pair's |k| over the median's")
    ap.add_argument("--data-dir", default=None, help="task data whose kv prompts measure |k| (default: shipped)")
    args = ap.parse_args()
    out, record = key_outlier_copy(resolve_model_dir(ModelSpec(path=args.model)), args.out, args.ratio, args.data_dir)
    print(json.dumps(record | {"out": str(out)}))


if __name__ == "__main__":
    main()
