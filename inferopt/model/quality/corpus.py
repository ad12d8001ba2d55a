"""A seeded synthetic multi-task corpus with the slices of SPEC G2, for the project's own quality model.

Four tasks, each in English and Chinese (two scripts, same task), so a change that hurts one slice shows:
  arith `17+25 ->` -> `42`; mc `larger: 37 52 ->` choices [`37`, `52`] (log-likelihood, calibration);
  tool  `refund order 4821 amount 35.20 ->` -> its JSON call; `long` adds unrelated order history first;
  kv    `a381 q902 m117 w555 ?q` -> `902` (4 pairs). v1 long: 24 pairs, the queried one in the first quarter.
        v2 long (`kv_format="v2"`, issue 20): 420-480 tokens of uppercase filler with 8 pairs, the queried
        key at a stratified distance from the query (7 buckets of 64 tokens), kept in the slice's `distance`.
        v3: one-digit values, query ` ? q` (`kv_value`, `kv_query`). v4: two digits (` ? q` -> `90`, exact
        match): the second is a decode step, which reads the (maybe quantized) KV cache; v3's was prefill.
Every example has a stable `id` and a `slice` {task, lang, context, risk[, distance]}. Evaluation examples
come from a fixed seed and are held out of training by construction (`_holdout` on the operands / key and
value / order id). The data in the tree follows the shipped weights' format (`shipped_kv_format`).
Not here: training (`inferopt.model.quality.train`), lm-eval tasks (`inferopt/gate/tasks/`), scoring (`sliced`).
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator, Literal

from inferopt.model.builtin import shipped_dir

Split = Literal["train", "eval"]
TASKS = ("arith", "kv", "tool", "mc")
TASK_DATA_DIR = Path(__file__).resolve().parents[2] / "gate" / "tasks" / "data"  # the shipped lm-eval task data
LANGS = ("en", "zh")

_EN_KEYS = list("abcdefghijklmnopqrstuvwxyz")
_ZH_KEYS = list("甲乙丙丁戊己庚辛壬癸子丑寅卯辰巳午未申酉戌亥金木水火")
_WORDS = {
    "en": {
        "plus": "+",
        "eq": "=",
        "refund": "refund order",
        "cancel": "cancel order",
        "amount": "amount",
        "larger": "larger:",
        "smaller": "smaller:",
        "shipped": "shipped",
        "order": "order",
    },
    "zh": {
        "plus": "加",
        "eq": "等于",
        "refund": "退款 订单",
        "cancel": "取消 订单",
        "amount": "金额",
        "larger": "较大:",
        "smaller": "较小:",
        "shipped": "已发货",
        "order": "订单",
    },
}


@dataclass(frozen=True)
class Example:
    id: str
    prompt: str
    answer: str  # the gold continuation (generate-until tasks)
    slice: dict[str, str]
    choices: list[str] = field(default_factory=list)  # multiple choice only
    gold: int = -1  # index into choices

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False, separators=(",", ":"))


def _holdout(*parts: object) -> bool:
    """True for the ~1/8 of items reserved for evaluation (stable across runs and machines)."""
    digest = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return digest[0] % 8 == 0


def _accept(split: Split, *parts: object) -> bool:
    return _holdout(*parts) == (split == "eval")


def _slice(task: str, lang: str, context: str = "short", risk: str = "normal") -> dict[str, str]:
    return {"task": task, "lang": lang, "context": context, "risk": risk}


def arith(rng: random.Random, lang: str, split: Split) -> Example | None:
    a, b = rng.randrange(100), rng.randrange(100)
    if not _accept(split, "arith", a, b):
        return None
    w = _WORDS[lang]
    # every prompt ends with " ->" (a trial with `17+25=` read the `=` as a key-value pair and failed en arith)
    prompt = f"{a}+{b} ->" if lang == "en" else f"{a}{w['plus']}{b} ->"
    return Example(f"arith-{lang}-{a}-{b}", prompt, str(a + b), _slice("arith", lang))


def kv(rng: random.Random, lang: str, split: Split, long: bool) -> Example | None:
    keys = _EN_KEYS if lang == "en" else _ZH_KEYS
    n = 24 if long else 4
    chosen = rng.sample(keys, n)
    values = [f"{rng.randrange(100, 1000)}" for _ in chosen]
    q = rng.randrange(n // 4) if long else rng.randrange(n)
    if not _accept(split, "kv", chosen[q], values[q], n):
        return None
    # the value right after its key and the query ending with the key: retrieval is then plain induction
    # (copy what followed the earlier occurrence of the current token); `a=381` made it a two-step lookup
    # that the small model did not learn in 45 CPU-minutes
    ctx = " ".join(f"{k}{v}" for k, v in zip(chosen, values, strict=False))
    prompt = f"{ctx} ?{chosen[q]}"
    return Example(
        f"kv-{lang}-{'long' if long else 'short'}-{chosen[q]}{values[q]}-{n}-{rng.randrange(1 << 30)}",
        prompt,
        values[q],
        {**_slice("kv", lang, "long" if long else "short", "high"), "distance": str(kv_distance(prompt, chosen[q]))},
    )


KV_FORMATS = ("v1", "v2", "v3", "v4")
KV_DISTANCE_FORMATS = ("v2", "v3", "v4")  # filler between the pairs, the queried one at a stratified distance
KV_SPACED_QUERY_FORMATS = ("v3", "v4")  # ` ? q` queries, any of the short slice's pairs asked
KV_LONG_TOKENS = (420, 481)  # v2 long prompt tokens (bytes + <bos>): 512 positions less 8 generated (lm-eval
# truncates a prompt to max_length - max_gen_toks from the left) with room to spare
KV_LONG_PAIRS = 8  # v2 long: pairs in the context, the queried one at a controlled distance from the query
KV_DISTANCE_BUCKET = 64  # tokens per distance bucket (the `distance` slice and its eval stratification)
KV_LONG_BUCKETS = 7  # distances 0-447 in the long cell
_FILLER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"  # disjoint from every key byte and from the digits of the values


def prompt_tokens(text: str) -> int:
    """Tokens of a prompt under the quality model's byte tokenizer (<bos> + one per UTF-8 byte)."""
    return 1 + len(text.encode())


def kv_distance(prompt: str, key: str) -> int:
    """Tokens from the queried key's last byte in the context to the query's last byte (the prompt's end)."""
    raw, kb = prompt.encode(), key.encode()
    return len(raw) - (raw.index(b" " + kb) + len(kb) + 1 if not raw.startswith(kb) else len(kb))


def _filler(rng: random.Random, n_bytes: int) -> list[str]:
    """Uppercase filler words (2-5 letters) whose space-joined length is exactly `n_bytes` (0 -> none)."""
    words: list[str] = []
    left = n_bytes
    while left > 0:
        w = left if left <= 6 else rng.randrange(2, 6)
        words.append("".join(rng.choice(_FILLER) for _ in range(w)))
        left -= w + 1
    return words


def kv_query(key: str, kv_format: str = "v2") -> str:
    """The query that ends a prompt: ` ?q` (v2); v3 ` ? q`, so it ends with the very bigram (space, key)
    that precedes the value in the context (the Chinese keys' three bytes already matched on more than one
    token, and Chinese retrieval was learned first in every stage)."""
    return f" ? {key}" if kv_format in KV_SPACED_QUERY_FORMATS else f" ?{key}"


def bare_distance(rng: random.Random, keys: list[str], values: list[str], kv_format: str) -> int:
    """A distance that puts the queried pair at a uniformly random place among bare pairs (no filler)."""
    pair_tokens = len(f" {keys[0]}{values[0]}".encode())  # every pair is as long (one-character keys)
    return rng.randrange(len(keys)) * pair_tokens + len(kv_query(keys[0], kv_format).encode()) + len(values[0])


def kv_context(
    rng: random.Random, keys: list[str], values: list[str], n_tokens: int, distance: int, kv_format: str = "v2"
) -> tuple[str, int]:
    """A context of ~`n_tokens` tokens: filler words with the pairs `keys[i]values[i]` spread at random, the
    first pair placed so that its key sits about `distance` tokens before the end of the query (`kv_query`).
    Returns (prompt, the exact distance)."""
    pairs = [f"{k}{v}" for k, v in zip(keys, values, strict=True)]
    query = kv_query(keys[0], kv_format)
    fixed = sum(len(x.encode()) + 1 for x in pairs) + len(query.encode())
    units = _filler(rng, max(0, n_tokens - 1 - fixed))
    for pair in pairs[1:]:
        units.insert(rng.randrange(len(units) + 1), pair)
    tail, best = 0, (1 << 30, len(units))  # tail: bytes after the insertion point, before the query
    for i in range(len(units), -1, -1):
        if i < len(units):
            tail += len(units[i].encode()) + 1
        d = tail + len(query.encode()) + len(values[0])
        if abs(d - distance) < best[0]:
            best = (abs(d - distance), i)
    units.insert(best[1], pairs[0])
    prompt = " ".join(units) + query
    return prompt, kv_distance(prompt, keys[0])


def kv_keys(lang: str) -> list[str]:
    """Single-token keys in English (one letter), one character (3 UTF-8 bytes) in Chinese. Two-letter English
    keys (`qx902 ... ?qx`, ending the query with the same token pair as in the context) were tried on the
    shipped model: 0.0-0.2 at 64 tokens after 660 steps, where one letter had 0.35 to start from."""
    return _ZH_KEYS if lang == "zh" else _EN_KEYS


def kv_value(rng: random.Random, kv_format: str = "v2") -> str:
    """A value: three digits (v1, v2), one (v3) or two (v4, 00-99). With three, the shipped model found the
    first digit after a one-letter key (0.9 en, v1 short) but lost its place for the next two (0.4 for all
    three): each further digit is another lookup keyed on two tokens; one digit is a single induction step,
    but it is computed in the prefill pass; v4's second digit is the one decode step that reads the cache."""
    if kv_format == "v3":
        return str(rng.randrange(10))
    return f"{rng.randrange(100):02d}" if kv_format == "v4" else f"{rng.randrange(100, 1000)}"


def kv_held_out(kv_format: str, keys: list[str], values: list[str]) -> bool:
    """Whether the query of `keys[0]` (value `values[0]`) is reserved for evaluation. v2 holds out (key,
    value); v3's one-digit values leave only 260 such pairs in English, so it holds out (key, value, the
    next pair's key) instead: training never asks an evaluation triple. v4 (2,600 pairs in English) holds
    out (key, value) again."""
    if kv_format == "v4":
        return _holdout("kv4", keys[0], values[0])
    if kv_format == "v3":
        return _holdout("kv3", keys[0], values[0], keys[1])
    return _holdout("kv2", keys[0], values[0])


def kv_tag(kv_format: str, keys: list[str], values: list[str]) -> str:
    """The id's part that `kv_held_out` decides on: `q902` (v2) or `q7m` (v3: key, value, next key)."""
    return f"{keys[0]}{values[0]}{keys[1] if kv_format == 'v3' else ''}"


def kv_v2(
    rng: random.Random, lang: str, split: Split, long: bool, bucket: int | None = None, kv_format: str = "v2"
) -> Example | None:
    """Key-value retrieval across distance. Short: 4 pairs, nothing else (v1's form with v2 keys). Long:
    ~420-480 tokens of filler with `KV_LONG_PAIRS` pairs, the queried pair `bucket`*64 + U[0, 64) tokens
    before the query (a random bucket when None). The slice carries the measured `distance` in tokens.
    `kv_format` v3: one-digit values (`kv_value`), v4 two-digit ones."""
    n_pairs = KV_LONG_PAIRS if long else 4
    keys = rng.sample(kv_keys(lang), n_pairs)
    values = [kv_value(rng, kv_format) for _ in keys]
    n_tokens = rng.randrange(*KV_LONG_TOKENS) if long else 0
    b = rng.randrange(KV_LONG_BUCKETS) if bucket is None else bucket
    if long:
        target = b * KV_DISTANCE_BUCKET + rng.randrange(KV_DISTANCE_BUCKET)
    else:  # v2: 0-63 puts the queried pair first (the bare context is shorter); v3, v4 ask any of the 4
        spaced = kv_format in KV_SPACED_QUERY_FORMATS
        target = bare_distance(rng, keys, values, kv_format) if spaced else rng.randrange(64)
    if kv_held_out(kv_format, keys, values) != (split == "eval"):
        return None
    distance = min(max(target, 8), n_tokens - 24) if long else target
    prompt, dist = kv_context(rng, keys, values, n_tokens, distance, kv_format)
    ctx = "long" if long else "short"
    return Example(
        f"kv-{lang}-{ctx}-{kv_tag(kv_format, keys, values)}-d{dist}-{rng.randrange(1 << 30)}",
        prompt,
        values[0],
        {**_slice("kv", lang, ctx, "high"), "distance": str(dist)},
    )


def _amount(rng: random.Random) -> str:
    return f"{rng.randrange(1, 100)}.{rng.randrange(100):02d}"


def tool(rng: random.Random, lang: str, split: Split, long: bool) -> Example | None:
    w = _WORDS[lang]
    order = str(rng.randrange(1000, 10000))
    if not _accept(split, "tool", order):
        return None
    history = ""
    if long:
        others = [str(rng.randrange(1000, 10000)) for _ in range(8)]
        history = " ".join(f"{w['order']} {o} {w['shipped']}." for o in others) + " "
    if rng.random() < 0.7:
        amount = _amount(rng)
        prompt = f"{history}{w['refund']} {order} {w['amount']} {amount}"
        answer = json.dumps({"name": "refund", "order_id": order, "amount": float(amount)}, separators=(",", ":"))
        # keep the amount's written form (35.20, not 35.2): exact amounts are the high-risk slice
        answer = answer.replace(f'"amount":{float(amount)!r}', f'"amount":{amount}')
    else:
        prompt = f"{history}{w['cancel']} {order}"
        answer = json.dumps({"name": "cancel", "order_id": order}, separators=(",", ":"))
    return Example(
        f"tool-{lang}-{'long' if long else 'short'}-{order}-{rng.randrange(1 << 30)}",
        prompt + " ->",
        answer,
        _slice("tool", lang, "long" if long else "short", "high"),
    )


def mc(rng: random.Random, lang: str, split: Split) -> Example | None:
    a, b = rng.sample(range(10, 100), 2)
    which = "larger" if rng.random() < 0.5 else "smaller"
    if not _accept(split, "mc", a, b, which):
        return None
    gold_value = max(a, b) if which == "larger" else min(a, b)
    choices = [str(a), str(b)]
    prompt = f"{_WORDS[lang][which]} {a} {b} ->"
    return Example(
        f"mc-{lang}-{which}-{a}-{b}",
        prompt,
        str(gold_value),
        _slice("mc", lang),
        choices,
        choices.index(str(gold_value)),
    )


def copy_task(rng: random.Random) -> Example:
    """Training-only warm-up (the copy curriculum): copy a short string of letters and digits."""
    n = rng.randrange(3, 12)
    s = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(n))
    return Example(f"copy-{s}", f"copy {s} ->", s, _slice("copy", "en"))


def one(
    rng: random.Random, task: str, lang: str, split: Split, long: bool = False, kv_format: str = "v1"
) -> Example | None:
    if task == "arith":
        return arith(rng, lang, split)
    if task == "kv":
        if kv_format in KV_DISTANCE_FORMATS:
            return kv_v2(rng, lang, split, long, kv_format=kv_format)
        return kv(rng, lang, split, long)
    if task == "tool":
        return tool(rng, lang, split, long)
    if task == "mc":
        return mc(rng, lang, split)
    raise ValueError(f"unknown task {task!r}; fix: one of {TASKS}")


TRAIN_MIX = {"arith": 0.3, "kv": 0.35, "tool": 0.15, "mc": 0.2}  # tool-call copying is learned fastest


def stream(
    seed: int, split: Split = "train", long_share: float = 0.3, weights: dict[str, float] | None = None
) -> Iterator[Example]:
    """An endless seeded mix of every task and language (training draws from this; `TRAIN_MIX` weights
    unless `weights` are given)."""
    rng = random.Random(seed)
    mix = weights or TRAIN_MIX
    names, weights_ = list(mix), list(mix.values())
    while True:
        task, lang = rng.choices(names, weights_)[0], rng.choice(LANGS)
        ex = one(rng, task, lang, split, long=task in ("kv", "tool") and rng.random() < long_share)
        if ex is not None:
            yield ex


def _eval_one(rng: random.Random, task: str, lang: str, long: bool, kv_format: str, i: int) -> Example | None:
    if task == "kv" and long and kv_format in KV_DISTANCE_FORMATS:  # distance buckets in turn: all equally often
        bucket = i % KV_LONG_BUCKETS
        ex = kv_v2(rng, lang, "eval", True, bucket=bucket, kv_format=kv_format)
        # v4: a pair placed across a bucket's edge is drawn again (v2, v3 kept it; their data stays as shipped)
        landed = ex is None or int(ex.slice["distance"]) // KV_DISTANCE_BUCKET == bucket or kv_format != "v4"
        return ex if landed else None
    return one(rng, task, lang, "eval", long, kv_format)


def _cell(rng: random.Random, task: str, lang: str, long: bool, kv_format: str, per_slice: int) -> list[Example]:
    seen: dict[str, Example] = {}
    while len(seen) < per_slice:
        ex = _eval_one(rng, task, lang, long, kv_format, len(seen))
        if ex is not None and ex.id not in seen:
            seen[ex.id] = ex
    return list(seen.values())


def eval_set(
    per_slice: int = 60, seed: int = 20261130, kv_format: str = "v1", others_as_v1: bool = True
) -> list[Example]:
    """The fixed evaluation set: `per_slice` held-out examples for every (task, lang, context) cell
    (`kv_format` v2-v4: the long kv cell has the queried pair at stratified distances). v3, v4 with
    `others_as_v1`: the kv cells come from their own generator and the shared one is advanced as v1's
    kv cells would, so every other task's documents stay those of v1 (compared document for document)."""
    rng = random.Random(seed)
    kv_rng = random.Random(f"{seed}-kv-{kv_format}")
    out: list[Example] = []
    for task in TASKS:
        for lang in LANGS:
            for long in (False, True) if task in ("kv", "tool") else (False,):
                if task == "kv" and kv_format in KV_SPACED_QUERY_FORMATS and others_as_v1:
                    _cell(rng, task, lang, long, "v1", per_slice)
                    out += _cell(kv_rng, task, lang, long, kv_format, per_slice)
                else:
                    out += _cell(rng, task, lang, long, kv_format, per_slice)
    return out


def write_jsonl(examples: list[Example], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(e.to_json() + "\n" for e in examples), encoding="utf-8")
    return path


def shipped_kv_format() -> str:
    """The kv format the shipped weights were trained for: the last stage's `kv_format` in the shipped
    `training.json` ("v1" for stages from before v2, or when no model is shipped)."""
    d = shipped_dir("quality-tiny")
    record = json.loads((d / "training.json").read_text()) if d and (d / "training.json").is_file() else {}
    stages = record.get("stages") or [{}]
    return str(stages[-1].get("kv_format", "v1"))


def write_task_files(
    data_dir: str | Path, per_slice: int = 60, seed: int = 20261130, kv_format: str = "v1"
) -> dict[str, Path]:
    """The lm-eval data: one `<task>.jsonl` per task from `eval_set` (deterministic: same bytes every time).
    `kv_format` must be the one the shipped weights were trained for (`training.json`'s last stage)."""
    by_task: dict[str, list[Example]] = {}
    for ex in eval_set(per_slice, seed, kv_format):
        by_task.setdefault(ex.slice["task"], []).append(ex)
    return {t: write_jsonl(rows, Path(data_dir) / f"{t}.jsonl") for t, rows in by_task.items()}


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="write the quality suite's evaluation JSONL files")
    ap.add_argument("--data-dir", default=str(TASK_DATA_DIR))
    ap.add_argument("--per-slice", type=int, default=60)
    ap.add_argument(
        "--kv-format", choices=KV_FORMATS, default=None, help="default: the shipped weights' (training.json)"
    )
    args = ap.parse_args()
    for task, path in write_task_files(
        args.data_dir, args.per_slice, kv_format=args.kv_format or shipped_kv_format()
    ).items():
        print(task, path)
