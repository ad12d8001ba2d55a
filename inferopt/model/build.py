"""Build the project's own small models (weights + tokenizer) deterministically from a YAML spec.

The output is an ordinary `save_pretrained` directory, so the code that loads it (`inferopt.model.loading`)
is exactly the code that loads a real model directory on a GPU. Nothing here downloads anything.

Usage: `python -m inferopt.model.build [--name tiny-llama] [--quiet]` (idempotent: a directory whose
spec hash matches is reused).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from inferopt.model.builtin import built_names, builtin_spec

SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>")


def cache_root() -> Path:
    """Where built models live: $INFEROPT_CACHE, else `<repo>/.cache` beside the package."""
    env = os.environ.get("INFEROPT_CACHE")
    return Path(env) if env else Path(__file__).resolve().parents[2] / ".cache"


def builtin_dir(name: str) -> Path:
    return cache_root() / "models" / name


def _spec_hash(spec: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def build_byte_tokenizer(vocab_size: int):
    """A byte-level tokenizer: ids 0..2 are <pad> <bos> <eos>, 3..258 the 256 bytes, the rest unused
    fillers so the vocabulary (and lm_head) stays a multiple of 32. Adds <bos>; pads on the left."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for ch in alphabet:
        vocab[ch] = len(vocab)
    n_fill = vocab_size - len(vocab)
    if n_fill < 0:
        raise ValueError(f"vocab_size {vocab_size} < {len(vocab)} needed for a byte-level tokenizer")
    for i in range(n_fill):
        vocab[f"<extra_{i}>"] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", 1)]
    )
    tok.add_special_tokens(list(SPECIAL_TOKENS) + [f"<extra_{i}>" for i in range(n_fill)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", padding_side="left"
    )


def build_model_dir(name: str, out_dir: Path | None = None, force: bool = False) -> Path:
    """Build builtin model `name` into `out_dir` (default: the cache) unless an identical build exists."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()

    spec = builtin_spec(name)
    out_dir = Path(out_dir) if out_dir else builtin_dir(name)
    stamp = out_dir / "inferopt_build.json"
    digest = _spec_hash(spec)
    if not force and stamp.is_file() and json.loads(stamp.read_text()).get("spec_hash") == digest:
        return out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    cfg = LlamaConfig(**spec["llama"])
    for dim in (cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size, cfg.num_key_value_heads * cfg.head_dim):
        if dim % 32:
            raise ValueError(f"{name}: Linear dimension {dim} is not a multiple of 32 (bitsandbytes 4-bit needs it)")
    torch.manual_seed(int(spec.get("seed", 0)))
    model = LlamaForCausalLM(cfg).eval()
    model.generation_config.pad_token_id = cfg.pad_token_id
    model.generation_config.bos_token_id = cfg.bos_token_id
    model.generation_config.eos_token_id = cfg.eos_token_id
    model.save_pretrained(out_dir)
    build_byte_tokenizer(cfg.vocab_size).save_pretrained(out_dir)
    stamp.write_text(
        json.dumps({"name": name, "spec_hash": digest, "params": sum(p.numel() for p in model.parameters())})
    )
    return out_dir


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", action="append", help="builtin model(s) to build (default: all)")
    parser.add_argument("--force", action="store_true")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    for name in args.name or built_names():
        path = build_model_dir(name, force=args.force)
        if not args.quiet:
            print(f"{name}: {path}")


if __name__ == "__main__":
    main()
