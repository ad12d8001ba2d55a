"""Train the project's small quality model on the synthetic corpus (`corpus.py`), deterministically, on CPU.

Why it exists: no hub model can be downloaded here and a random model scores zero on everything, so a gate run
on it proves nothing (SPEC G1). This trains a ~0.8 M-parameter Llama (byte-level tokenizer, the same one the
serving model uses) until every short slice clears a threshold on a held-out dev set, or a time cap is hit,
and writes an ordinary `save_pretrained` directory plus `training.json` (steps, seconds, dev accuracy per slice
over time). `train` states the recipe and what each stage reached.

Usage: `python -m inferopt.model.quality.train --out DIR [--max-minutes 30] [--threads 2]`.

Deliberately not here: the corpus (corpus.py) and the gate's scoring (`inferopt.gate.sliced`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shlex
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from inferopt.model.build import build_byte_tokenizer
from inferopt.model.quality.corpus import (
    _EN_KEYS,
    _ZH_KEYS,
    KV_DISTANCE_FORMATS,
    KV_FORMATS,
    KV_SPACED_QUERY_FORMATS,
    LANGS,
    Example,
    _holdout,
    _slice,
    bare_distance,
    copy_task,
    eval_set,
    kv_context,
    kv_held_out,
    kv_keys,
    kv_query,
    kv_tag,
    kv_value,
    stream,
)

KV_LEVELS = (2, 3, 4, 6, 8, 12, 24)  # pairs per kv curriculum example, easiest first (`kv_format` v1)
KV_TOKEN_LEVELS = (32, 64, 128, 192, 256, 352, 480)  # v2: longest context per curriculum level, per language
KV_TRAIN_QUERIES = 3  # v2: queries per training context (only the values are trained): 3x the signal per token
KV_TRAIN_QUERIES_V3 = 6  # v3, v4: short values make a query cheap (4-7 tokens), so more of them per context

MODEL_SPEC: dict[str, Any] = {
    "vocab_size": 288,
    "hidden_size": 128,
    "intermediate_size": 384,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "max_position_embeddings": 512,
    "rope_theta": 10000.0,
    "rms_norm_eps": 1e-5,
    "initializer_range": 0.02,
    "tie_word_embeddings": True,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def slice_key(ex: Example) -> str:
    s = ex.slice
    return f"{s['task']}/{s['lang']}/{s['context']}"


def encode(tok: Any, ex: Example) -> tuple[list[int], list[int]]:
    """Token ids of <bos> prompt answer <eos>, and their labels (-100 outside the answer). A multi-query kv
    training example (task `kvm`, answer `902 ?m117`) is trained on its values' digits and <eos> only."""
    prompt = tok(ex.prompt)["input_ids"]
    answer = tok(ex.answer, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    labels = list(answer)
    if ex.slice["task"] == "kvm":
        pieces = tok.convert_ids_to_tokens(answer)
        labels = [
            t if (p in "0123456789" or t == tok.eos_token_id) else -100 for t, p in zip(answer, pieces, strict=True)
        ]
    return prompt + answer, [-100] * len(prompt) + labels


def batch_tensors(tok: Any, examples: list[Example]):
    import torch

    enc = [encode(tok, e) for e in examples]
    width = max(len(ids) for ids, _ in enc)
    ids = torch.full((len(enc), width), tok.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(enc), width), dtype=torch.long)
    labels = torch.full((len(enc), width), -100, dtype=torch.long)
    for i, (row, lab) in enumerate(enc):
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
        labels[i, : len(row)] = torch.tensor(lab)
    return ids, mask, labels


def greedy_answers(
    model: Any, tok: Any, examples: list[Example], max_new_tokens: int = 64, batch: int = 32
) -> list[str]:
    """Greedy continuations, cut at <eos> (left-padded batches)."""
    import torch

    out: list[str] = []
    for i in range(0, len(examples), batch):
        chunk = examples[i : i + batch]
        enc = tok([e.prompt for e in chunk], return_tensors="pt", padding=True)
        with torch.no_grad():
            gen = model.generate(
                **enc,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=tok.pad_token_id,
                eos_token_id=tok.eos_token_id,
            )
        for row in gen[:, enc["input_ids"].shape[1] :].tolist():
            if tok.eos_token_id in row:
                row = row[: row.index(tok.eos_token_id)]
            out.append(tok.decode(row, skip_special_tokens=True))
    return out


def _answers(model: Any, tok: Any, examples: list[Example]) -> list[str]:
    model.eval()
    out = [a.strip() for a in greedy_answers(model, tok, examples, max_new_tokens=8)]
    model.train()
    return out


def dev_accuracy(model: Any, tok: Any, dev: list[Example]) -> dict[str, float]:
    """Greedy exact match per slice; tool calls get 64 new tokens, the rest their answer length + 4."""
    tool = [e for e in dev if e.slice["task"] == "tool"]
    rest = [e for e in dev if e.slice["task"] != "tool"]
    return dict(sorted({**_dev_accuracy(model, tok, tool), **_dev_accuracy(model, tok, rest)}.items()))


def _dev_accuracy(model: Any, tok: Any, dev: list[Example]) -> dict[str, float]:
    if not dev:
        return {}
    model.eval()
    answers = greedy_answers(model, tok, dev, max_new_tokens=max(len(e.answer.encode()) for e in dev) + 4)
    model.train()
    hits: dict[str, list[bool]] = defaultdict(list)
    for ex, got in zip(dev, answers, strict=False):
        hits[slice_key(ex)].append(got.strip() == ex.answer)
    return {k: sum(v) / len(v) for k, v in sorted(hits.items())}


def kv_curriculum_example(rng: random.Random, n_pairs: int) -> Example | None:
    """Training-only key-value retrieval with `n_pairs` pairs, in the corpus's format (`a381 q902 ?q` -> `902`).

    Retrieval is an induction step (find the earlier key, copy what follows); a small model learns it far more
    readily on 2-3 pairs than on 4 or 24, so the curriculum starts there. A queried (key, value) that the
    corpus holds out for evaluation (4 or 24 pairs) is never generated."""
    lang = rng.choice(LANGS)
    chosen = rng.sample(_EN_KEYS if lang == "en" else _ZH_KEYS, n_pairs)
    values = [f"{rng.randrange(100, 1000)}" for _ in chosen]
    q = rng.randrange(n_pairs)
    if any(_holdout("kv", chosen[q], values[q], n) for n in (4, 24, n_pairs)):
        return None
    prompt = " ".join(f"{k}{v}" for k, v in zip(chosen, values, strict=False)) + f" ?{chosen[q]}"
    return Example(f"kvc-{lang}-{n_pairs}-{chosen[q]}{values[q]}", prompt, values[q], _slice("kvc", lang))


def _kv_draw(rng: random.Random, level: int) -> Example:
    """A curriculum example at `level` (index into KV_LEVELS): half at the level, half from the easier ones."""
    top = level if rng.random() < 0.5 else rng.randrange(level + 1)
    while (ex := kv_curriculum_example(rng, KV_LEVELS[top])) is None:
        pass
    return ex


def _train_value(rng: random.Random, key: str, kv_format: str = "v2") -> str:
    """A value for `key` such that (key, value) is never a held-out evaluation answer (v1, v2 or v4; v3
    holds out triples instead, see `kv_long_example`)."""
    if kv_format == "v3":
        return kv_value(rng, kv_format)
    if kv_format == "v4":
        while _holdout("kv4", key, v := kv_value(rng, kv_format)):
            pass
        return v
    while True:
        v = f"{rng.randrange(100, 1000)}"
        if not any((_holdout("kv2", key, v), _holdout("kv", key, v, 4), _holdout("kv", key, v, 24))):
            return v


def kv_long_example(
    rng: random.Random,
    lang: str,
    max_tokens: int,
    queries: int = KV_TRAIN_QUERIES,
    kv_format: str = "v2",
    bare_share: float = 0.25,
) -> Example:
    """Training-only v2/v3 retrieval: a context of 24..`max_tokens` tokens (filler + 2-12 pairs, the first at
    a uniform random distance), then `queries` queries in turn (`?k` value); with queries=1 it is an eval-form
    example (task `kvc`). v3, v4: `bare_share` of the contexts are bare pairs (2-8, no filler, the short
    slice's form: retrieval with and without filler were learned separately in stage 4)."""
    bare = kv_format in KV_SPACED_QUERY_FORMATS and rng.random() < bare_share
    n_tokens = 0 if bare else rng.randrange(24, max_tokens + 1)
    keys_all = kv_keys(lang)
    pair_tokens = len(f"{keys_all[0]}{kv_value(random.Random(0), kv_format)} ".encode())
    fit = rng.randint(2, 8) if bare else max(2, min(12, (n_tokens - 8) // pair_tokens))
    while True:
        keys = rng.sample(keys_all, rng.randint(min(fit, queries + 1), fit))
        values = [_train_value(rng, k, kv_format) for k in keys]
        if kv_format != "v3" or not kv_held_out(kv_format, keys, values):
            break
    # bare: the first query anywhere among the pairs (a fixed 4 put it last: it taught recency, not lookup)
    distance = bare_distance(rng, keys, values, kv_format) if bare else rng.randrange(4, max(5, n_tokens))
    prompt, _ = kv_context(rng, keys, values, n_tokens, distance, kv_format)
    room = (509 - len(prompt.encode())) // len((kv_query(keys[0], kv_format) + values[0]).encode())  # 512 positions
    rest = rng.sample(range(1, len(keys)), max(0, min(queries - 1, len(keys) - 1, room)))
    answer = values[0] + "".join(f"{kv_query(keys[i], kv_format)}{values[i]}" for i in rest)
    task = "kvm" if rest else "kvc"
    return Example(f"{task}-{lang}-{n_tokens}-{kv_tag(kv_format, keys, values)}", prompt, answer, _slice(task, lang))


def _kv_long_draw(
    rng: random.Random, levels: dict[str, int], kv_format: str = "v2", bare_share: float = 0.25
) -> Example:
    """A v2 curriculum example: half at its language's level length, half from the easier ones; a language
    behind the other gets 2/3 of the draws (stage 4 gave it 5/6 and the other language's short retrieval
    decayed: zh short dev 0.83 -> 0.5)."""
    behind = [lang for lang in LANGS if levels[lang] < max(levels.values())]
    ahead = [lang for lang in LANGS if lang not in behind]
    lang = (behind[0] if rng.random() < 2 / 3 else ahead[0]) if behind else rng.choice(LANGS)
    top = levels[lang] if rng.random() < 0.5 else rng.randrange(levels[lang] + 1)
    queries = KV_TRAIN_QUERIES_V3 if kv_format in KV_SPACED_QUERY_FORMATS else KV_TRAIN_QUERIES
    return kv_long_example(rng, lang, KV_TOKEN_LEVELS[top], queries, kv_format, bare_share)


def _kv_level_check(
    model: Any, tok: Any, rng: random.Random, levels: dict[str, int], n: int = 24, kv_format: str = "v2"
) -> dict[str, float]:
    """Per language: single-query accuracy on `n` contexts of 3/4 to all of the current level's length."""
    out: dict[str, float] = {}
    for lang in LANGS:
        top = KV_TOKEN_LEVELS[levels[lang]]
        dev = []
        for _ in range(n):
            ex = kv_long_example(rng, lang, top, queries=1, kv_format=kv_format)
            while len(ex.prompt.encode()) < 0.75 * top - 8:
                ex = kv_long_example(rng, lang, top, queries=1, kv_format=kv_format)
            dev.append(ex)
        got = _answers(model, tok, dev)
        out[lang] = round(sum(a == e.answer for a, e in zip(got, dev, strict=True)) / n, 3)
    return out


def _batches(pool: list[Example], batch_size: int, batch_tokens: int | None) -> list[list[Example]]:
    """Consecutive runs of a length-sorted pool: `batch_size` examples, fewer where the padded width times
    the count would pass `batch_tokens`."""
    out: list[list[Example]] = [[]]
    for ex in pool:
        width = len(ex.prompt.encode()) + len(ex.answer.encode()) + 2
        full = len(out[-1]) >= batch_size or (batch_tokens and (len(out[-1]) + 1) * width > batch_tokens)
        if out[-1] and full:
            out.append([])
        out[-1].append(ex)
    return out


def _lr(step: int, total: int, base: float, warmup: int = 30) -> float:
    if step < warmup:
        return base * (step + 1) / warmup
    frac = min(1.0, (step - warmup) / max(1, total - warmup))
    return base * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


def train(
    out_dir: str | Path,
    *,
    seed: int = 0,
    max_minutes: float = 30.0,
    threads: int = 2,
    batch_size: int = 48,
    lr: float = 1.5e-3,
    eval_every: int = 150,
    target_short_acc: float = 0.92,
    planned_steps: int = 6000,
    log: bool = True,
    init_from: str | Path | None = None,
    mix: dict[str, float] | None = None,
    kv_curriculum: float = 0.0,
    kv_format: str = "v1",
    kv_level_start: int | dict[str, int] = 0,
    kv_bare_share: float = 0.25,
    kv_patience: int = 0,
    batch_tokens: int | None = None,
    checkpoint: bool = True,
    max_steps: int | None = None,
    command: str | None = None,
) -> dict[str, Any]:
    """Train and save; returns the training record written to `training.json`.

    `init_from` continues from a saved model (a second stage; the copy curriculum is skipped and its
    `training.json` history is kept), `mix` overrides the task weights of `corpus.TRAIN_MIX` for this stage.
    `kv_curriculum` > 0 replaces that share of each batch with curriculum key-value examples (`KV_LEVELS`:
    2 pairs first, one level up each time the current level's accuracy reaches 0.8). With `kv_format` "v2"
    the curriculum is retrieval across distance (`KV_TOKEN_LEVELS`, one level per language, starting at
    `kv_level_start`; a level also advances after `kv_patience` evaluations at it when > 0) and the dev set
    is the v2 one (v3, v4: the same with one- or two-digit values). `batch_tokens` caps a batch's padded tokens (long
    batches get fewer examples). `checkpoint` writes weights and curve to `out_dir` at every evaluation;
    `max_steps` ends the stage after that many steps (a stage cut at a checkpoint's step is reproduced by
    `max_steps` = that step: evaluations draw from their own generators, so they do not change training).
    `command` (the command line, `main` passes its own) is recorded in the stage entry.

    Recipe (from trials on this machine): loss on answer tokens only; a copy curriculum first (copy + short
    retrieval until copy is learned), then the full mix; AdamW lr 1.5e-3, betas (0.9, 0.98), warm-up, cosine
    decay to 10 %, grad clip 1.0; `OMP_WAIT_POLICY=PASSIVE`. Key-value retrieval was not learned by the mix
    alone (kv short 0.10 en / 0.27 zh after two stages); `kv_curriculum=0.5` in a third stage (48 min, 1
    thread, lr 1e-3, 7878 steps) reached on the lm-eval suite kv short zh 0.93 / en 0.35, long zh 0.15 / en
    0.03, every other slice within 0.02. In en it solved 2 pairs (1.0) and 3 (0.91) but not 4 (0.57): the
    level gate averages both languages, so zh carried the level up while en lagged.

    Stage 6 (issue 20): kv v3 from stage 3's weights, `--kv-format v3 --kv-curriculum 0.5 --mix
    arith=0.3,tool=0.15,mc=0.2 --lr 1e-3 --threads 1 --batch-tokens 12288 --kv-patience 4 --eval-every 100
    --planned-steps 4000 --max-minutes 55 --seed 20` stopped itself at step 2100 (21 min): kv short 1.00 /
    1.00, long 0.95 / 1.00 (v2 had 0.23 / 0.80 and 0 / 0.02 after 56 min), but tool slices -0.03..-0.10
    (order ids with a digit repeated). Stage 7 from it: `--kv-curriculum 0.3 --mix arith=0.2,tool=0.5,mc=0.3
    --lr 3e-4 --kv-level-start 6 --eval-every 600 --max-steps 600 --planned-steps 600 --seed 21` (8 min):
    tool 1.00 on all four, kv short 1.00 / 1.00, long 0.98 / 1.00. Exact commands: `training.json`.
    kv v4 (two-digit values) trials from stage 7, not shipped (`training_trials.json`): in 25 + 16 minutes zh
    learned the second digit (dev short 1.0) and en did not (0.25-0.4)."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    tok = build_byte_tokenizer(MODEL_SPEC["vocab_size"])
    previous: dict[str, Any] = {}
    if init_from:
        model = LlamaForCausalLM.from_pretrained(init_from, dtype=torch.float32)
        prev_file = Path(init_from) / "training.json"
        previous = json.loads(prev_file.read_text()) if prev_file.is_file() else {}
    else:
        model = LlamaForCausalLM(LlamaConfig(**MODEL_SPEC))
    model.generation_config.pad_token_id, model.generation_config.eos_token_id = 0, 2
    model.generation_config.bos_token_id = 1
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.01)
    rng = random.Random(seed)
    examples_stream = stream(seed + 1, weights=mix)
    # one shared generator for the dev set (as stage 6 drew it: keeps its command reproducing its weights)
    dev = eval_set(per_slice=12, seed=seed + 777, kv_format=kv_format, others_as_v1=False)
    history: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    phase, step = ("mix" if init_from else "copy"), 0
    kv_level = 0
    start = kv_level_start if isinstance(kv_level_start, dict) else dict.fromkeys(LANGS, kv_level_start)
    levels = {lang: start[lang] for lang in LANGS}  # v2: per-language curriculum level
    evals_at = {lang: 0 for lang in LANGS}
    kv_dev_rng = random.Random(seed + 4242)
    model.train()
    pending: list[list[Example]] = []
    distance_kv = kv_format in KV_DISTANCE_FORMATS
    settings = {
        "seed": seed,
        "threads": threads,
        "batch_size": batch_size,
        "lr": lr,
        "init_from": str(init_from) if init_from else None,
        "mix": mix,
        "kv_curriculum": kv_curriculum,
        "kv_format": kv_format,
        "kv_level_start": kv_level_start,
        "kv_bare_share": kv_bare_share,
        "kv_patience": kv_patience,
        "batch_tokens": batch_tokens,
        "max_steps": max_steps,
        "command": command,
    }
    while True:
        if not pending:  # length-bucketed batches: draw 8 batches' worth, sort by length, shuffle the batches
            share = 0.6 if phase == "copy" else 0.05
            kv_share = kv_curriculum if phase == "mix" else 0.0
            pool = [
                copy_task(rng)
                if (r := rng.random()) < share
                else (_kv_long_draw(rng, levels, kv_format, kv_bare_share) if distance_kv else _kv_draw(rng, kv_level))
                if r < share + kv_share
                else next(examples_stream)
                for _ in range(8 * batch_size)
            ]
            pool.sort(key=lambda e: len(e.prompt.encode()) + len(e.answer.encode()))
            pending = _batches(pool, batch_size, batch_tokens)
            rng.shuffle(pending)
        examples = pending.pop()
        ids, mask, labels = batch_tensors(tok, examples)
        for g in opt.param_groups:
            g["lr"] = _lr(step, planned_steps, lr)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        elapsed_min = (time.perf_counter() - t0) / 60
        out_of_steps = max_steps is not None and step >= max_steps
        if step % eval_every == 0 or elapsed_min >= max_minutes or out_of_steps:
            if phase == "copy":
                copy_dev = [copy_task(random.Random(10_000 + i)) for i in range(24)]
                acc = dev_accuracy(model, tok, copy_dev)
                copy_acc = acc.get("copy/en/short", 0.0)
                entry = {
                    "step": step,
                    "minutes": round(elapsed_min, 2),
                    "loss": round(float(loss.detach()), 4),
                    "copy_acc": copy_acc,
                }
                if copy_acc >= 0.8 or step >= planned_steps // 4:
                    phase = "mix"
                    entry["phase_change"] = "mix"
            else:
                acc = dev_accuracy(model, tok, dev)
                entry = {
                    "step": step,
                    "minutes": round(elapsed_min, 2),
                    "loss": round(float(loss.detach()), 4),
                    "dev_acc": acc,
                }
                if kv_curriculum > 0 and kv_format in KV_DISTANCE_FORMATS:
                    level_acc_by_lang = _kv_level_check(model, tok, kv_dev_rng, levels, kv_format=kv_format)
                    entry["kv_level"] = {lang: KV_TOKEN_LEVELS[levels[lang]] for lang in LANGS}
                    entry["kv_level_acc"] = level_acc_by_lang
                    for lang in LANGS:
                        evals_at[lang] += 1
                        up = level_acc_by_lang[lang] >= 0.8 or (kv_patience > 0 and evals_at[lang] >= kv_patience)
                        if up and levels[lang] + 1 < len(KV_TOKEN_LEVELS):
                            levels[lang], evals_at[lang] = levels[lang] + 1, 0
                elif kv_curriculum > 0:
                    level_dev = [_kv_draw(kv_dev_rng, kv_level) for _ in range(24)]
                    level_acc = (
                        sum(a == e.answer for a, e in zip(_answers(model, tok, level_dev), level_dev, strict=False))
                        / 24
                    )
                    entry["kv_level"], entry["kv_level_acc"] = KV_LEVELS[kv_level], round(level_acc, 3)
                    if level_acc >= 0.8 and kv_level + 1 < len(KV_LEVELS):
                        kv_level += 1
            history.append(entry)
            if log:
                print(json.dumps(entry), flush=True)
            if checkpoint:  # the curve so far and these weights: a stage stopped early still leaves a model
                save_stage(out_dir, model, tok, previous, {**settings, "steps": step, "minutes": _minutes(t0)}, history)
            short = [
                v
                for k, v in entry.get("dev_acc", {}).items()
                if k.endswith("/short") or (kv_format in KV_DISTANCE_FORMATS and k.startswith("kv/"))
            ]
            if (short and min(short) >= target_short_acc) or elapsed_min >= max_minutes or out_of_steps:
                break
    return save_stage(out_dir, model, tok, previous, {**settings, "steps": step, "minutes": _minutes(t0)}, history)


def _minutes(t0: float) -> float:
    return round((time.perf_counter() - t0) / 60, 2)


def save_stage(
    out_dir: str | Path, model: Any, tok: Any, previous: dict[str, Any], stage: dict[str, Any], history: list
) -> dict[str, Any]:
    """Write the weights, the tokenizer and `training.json` (the earlier stages of `previous`, then this
    one with its curve); also the periodic checkpoint, so a stage cut short still leaves weights."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    was_training = model.training
    model.eval()
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    if was_training:
        model.train()
    # one entry per stage (a stage-1 record without "stages" counts as one stage)
    stages = [*(previous.get("stages", [previous]) if previous else []), {**stage, "history": history}]
    record = {
        "stages": stages,
        "steps": sum(st["steps"] for st in stages),
        "minutes": round(sum(st["minutes"] for st in stages), 2),
        "params": sum(p.numel() for p in model.parameters()),
        "model_spec": MODEL_SPEC,
        "history": history,
    }
    (out_dir / "training.json").write_text(json.dumps(record, indent=1))
    return record


def level_start(text: str) -> int | dict[str, int]:
    """`--kv-level-start`: one level for both languages (`6`) or one per language (`en=0,zh=6`)."""
    if "=" not in text:
        return int(text)
    levels = {k.strip(): int(v) for k, v in (part.split("=") for part in text.split(","))}
    if set(levels) != set(LANGS):
        raise argparse.ArgumentTypeError(f"--kv-level-start {text!r}: give a level for each of {LANGS}")
    return levels


def command_line(argv: list[str]) -> str:
    """This run's command as it can be typed again: the OpenMP settings and nice level it ran under, then
    `python -m inferopt.model.quality.train` and its arguments."""
    env = [f"{k}={os.environ[k]}" for k in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY") if k in os.environ]
    nice = os.nice(0)
    prefix = [*env, *(["nice", "-n", str(nice)] if nice else [])]
    return shlex.join([*prefix, "python", "-m", "inferopt.model.quality.train", *argv])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-minutes", type=float, default=30.0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=48)
    p.add_argument("--eval-every", type=int, default=150)
    p.add_argument("--planned-steps", type=int, default=6000)
    p.add_argument("--lr", type=float, default=1.5e-3)
    p.add_argument("--init-from", default=None, help="continue from this saved model (second stage)")
    p.add_argument("--mix", default=None, help="task weights for this stage, e.g. kv=0.6,arith=0.15,tool=0.1,mc=0.15")
    p.add_argument(
        "--kv-curriculum",
        type=float,
        default=0.0,
        help="share of each batch given to curriculum key-value examples (2 pairs first), e.g. 0.5",
    )
    p.add_argument("--kv-format", choices=KV_FORMATS, default="v1", help="v2-v4: retrieval across distance")
    p.add_argument(
        "--kv-level-start",
        type=level_start,
        default=0,
        help="v2: first curriculum level (KV_TOKEN_LEVELS), e.g. 6, or per language: en=0,zh=6",
    )
    p.add_argument("--kv-bare-share", type=float, default=0.25, help="v3, v4: share of bare-pair contexts")
    p.add_argument("--kv-patience", type=int, default=0, help="v2: also advance a level after this many evals")
    p.add_argument("--batch-tokens", type=int, default=None, help="cap on a batch's padded tokens")
    p.add_argument("--max-steps", type=int, default=None, help="end the stage after this many steps")
    a = p.parse_args(argv)
    mix = {k: float(v) for k, v in (kv.split("=") for kv in a.mix.split(","))} if a.mix else None
    rec = train(
        a.out,
        seed=a.seed,
        max_minutes=a.max_minutes,
        threads=a.threads,
        batch_size=a.batch_size,
        eval_every=a.eval_every,
        planned_steps=a.planned_steps,
        lr=a.lr,
        init_from=a.init_from,
        mix=mix,
        kv_curriculum=a.kv_curriculum,
        kv_format=a.kv_format,
        kv_level_start=a.kv_level_start,
        kv_bare_share=a.kv_bare_share,
        kv_patience=a.kv_patience,
        batch_tokens=a.batch_tokens,
        max_steps=a.max_steps,
        command=command_line(sys.argv[1:] if argv is None else argv),
    )
    print(
        json.dumps(
            {"steps": rec["steps"], "minutes": rec["minutes"], "final": rec["history"][-1] if rec["history"] else None}
        )
    )


if __name__ == "__main__":
    main()
