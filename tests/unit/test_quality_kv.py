"""Key-value retrieval across distance (issue 20): the v2 task data, its training examples, the distance
slice, and the Mistral twin that lets a sliding-window arm run on the Llama quality model."""

from __future__ import annotations

import collections
import json
import random
from pathlib import Path

import pandas as pd
import pytest

from inferopt.gate.sliced import distance_table, retrieval_by_distance
from inferopt.model.quality.corpus import (
    KV_DISTANCE_BUCKET,
    KV_LONG_BUCKETS,
    KV_LONG_TOKENS,
    _holdout,
    eval_set,
    kv_distance,
    kv_held_out,
    kv_v2,
    prompt_tokens,
    shipped_kv_format,
    write_task_files,
)
from inferopt.model.quality.mistral_copy import mistral_config
from inferopt.model.quality.train import KV_TOKEN_LEVELS, _batches, kv_long_example

DATA = Path(__file__).resolve().parents[2] / "inferopt" / "gate" / "tasks" / "data"


def _kv(kv_format: str = "v2", per_slice: int = 14) -> list:
    return [e for e in eval_set(per_slice=per_slice, kv_format=kv_format) if e.slice["task"] == "kv"]


@pytest.mark.parametrize("kv_format", ["v2", "v3", "v4"])
def test_long_kv_fits_the_served_context_and_spreads_distance_over_every_bucket(kv_format: str) -> None:
    long = [e for e in _kv(kv_format) if e.slice["context"] == "long"]
    lengths = [prompt_tokens(e.prompt) for e in long]
    # at least 384 tokens of context, and room for the 8 generated tokens lm-eval reserves in 512
    assert min(lengths) >= max(384, KV_LONG_TOKENS[0]) and max(lengths) <= 512 - 8
    for lang in ("en", "zh"):
        buckets = collections.Counter(
            int(e.slice["distance"]) // KV_DISTANCE_BUCKET for e in long if e.slice["lang"] == lang
        )
        assert sorted(buckets) == list(range(KV_LONG_BUCKETS)) and max(buckets.values()) - min(buckets.values()) <= 1


@pytest.mark.parametrize("kv_format", ["v2", "v3", "v4"])
def test_distance_is_where_the_queried_key_sits_and_the_key_is_unique(kv_format: str) -> None:
    for e in _kv(kv_format):
        key = e.prompt.rsplit("?", 1)[1].strip()  # v3, v4 ask ` ? q`, v2 ` ?q`
        assert len(e.answer) == {"v3": 1, "v4": 2}.get(kv_format, 3) and e.answer.isdigit()
        raw, d = e.prompt.encode(), int(e.slice["distance"])
        assert d == kv_distance(e.prompt, key)
        end = len(raw) - 1 - d  # the queried key's last byte in the context, then its value
        assert raw[end + 1 - len(key.encode()) : end + 1] == key.encode()
        assert raw[end + 1 : end + 1 + len(e.answer)].decode() == e.answer
        context = e.prompt.rsplit(" ?", 1)[0]
        assert context.count(key) == 1
    short = [e for e in _kv(kv_format) if e.slice["context"] == "short"]
    assert all(int(e.slice["distance"]) < KV_DISTANCE_BUCKET for e in short)


def test_the_shipped_data_is_what_the_shipped_weights_were_trained_for(tmp_path: Path) -> None:
    """The task data in the tree is byte-identical to what the corpus writes for the shipped weights' format."""
    written = write_task_files(tmp_path, kv_format=shipped_kv_format())
    for task, path in written.items():
        assert path.read_text(encoding="utf-8") == (DATA / f"{task}.jsonl").read_text(encoding="utf-8"), task
    v1 = _kv("v1")  # v1 records its distances too (prompts unchanged): 0-63 short, 64-191 long
    assert all(int(e.slice["distance"]) == kv_distance(e.prompt, e.prompt.rsplit("?", 1)[1]) for e in v1)


def test_training_kv_never_queries_a_held_out_pair_and_trains_only_values() -> None:
    from inferopt.model.build import build_byte_tokenizer
    from inferopt.model.quality.train import encode

    tok = build_byte_tokenizer(288)
    rng = random.Random(3)
    for i in range(300):
        lang = ("en", "zh")[i % 2]
        ex = kv_long_example(rng, lang, KV_TOKEN_LEVELS[i % len(KV_TOKEN_LEVELS)])
        assert prompt_tokens(ex.prompt + ex.answer) <= 512 - 1
        queried = [(ex.prompt.rsplit("?", 1)[1], ex.answer.split(" ")[0])]
        queried += [(q[:-3], q[-3:]) for q in ex.answer.split(" ?")[1:]]
        for key, value in queried:
            assert f" {key}{value}" in " " + ex.prompt.rsplit(" ?", 1)[0]
            assert not (_holdout("kv2", key, value) or _holdout("kv", key, value, 4) or _holdout("kv", key, value, 24))
        ids, labels = encode(tok, ex)
        trained = tok.decode([t for t in labels if t != -100])
        assert trained == "".join(v for _, v in queried) + "<eos>"


def test_v3_training_never_asks_a_held_out_triple_first_and_trains_one_digit_values() -> None:
    from inferopt.model.build import build_byte_tokenizer
    from inferopt.model.quality.train import encode

    tok = build_byte_tokenizer(288)
    rng = random.Random(4)
    bare = 0
    for i in range(300):
        lang = ("en", "zh")[i % 2]
        ex = kv_long_example(rng, lang, KV_TOKEN_LEVELS[i % len(KV_TOKEN_LEVELS)], queries=6, kv_format="v3")
        assert prompt_tokens(ex.prompt + ex.answer) <= 512 - 1
        context, key = ex.prompt.rsplit(" ? ", 1)
        pairs = [p for p in context.split(" ") if p[-1:].isdigit()]  # filler is uppercase letters only
        bare += len(pairs) == len(context.split(" "))
        asked = [(key, ex.answer.split(" ")[0])] + [(q[:-1], q[-1]) for q in ex.answer.split(" ? ")[1:]]
        assert all(f"{k}{v}" in pairs for k, v in asked) and len(ex.answer.split(" ")[0]) == 1
        k0, v0, k1 = ex.id.split("-")[3]  # the first query's (key, value, next key): never an evaluation triple
        assert (k0, v0) == asked[0] and f"{k1}" in context and not kv_held_out("v3", [k0, k1], [v0])
        ids, labels = encode(tok, ex)
        assert tok.decode([t for t in labels if t != -100]) == "".join(v for _, v in asked) + "<eos>"
    assert 40 < bare < 120  # about a quarter are bare pairs, the short slice's form


def test_v4_training_never_asks_a_held_out_pair_and_trains_both_digits() -> None:
    from inferopt.model.build import build_byte_tokenizer
    from inferopt.model.quality.train import encode

    tok = build_byte_tokenizer(288)
    rng = random.Random(5)
    for i in range(300):
        lang = ("en", "zh")[i % 2]
        ex = kv_long_example(rng, lang, KV_TOKEN_LEVELS[i % len(KV_TOKEN_LEVELS)], queries=6, kv_format="v4")
        assert prompt_tokens(ex.prompt + ex.answer) <= 512 - 1
        context, key = ex.prompt.rsplit(" ? ", 1)
        pairs = [p for p in context.split(" ") if p[-1:].isdigit()]
        asked = [(key, ex.answer.split(" ")[0])] + [(q[:-2], q[-2:]) for q in ex.answer.split(" ? ")[1:]]
        assert all(f"{k}{v}" in pairs and len(v) == 2 and v.isdigit() for k, v in asked), ex
        assert not any(_holdout("kv4", k, v) for k, v in asked)
        ids, labels = encode(tok, ex)
        assert tok.decode([t for t in labels if t != -100]) == "".join(v for _, v in asked) + "<eos>"


def test_v4_values_are_two_tokens_so_the_second_is_decoded_from_the_cache() -> None:
    from inferopt.model.build import build_byte_tokenizer

    tok = build_byte_tokenizer(288)
    kv4 = _kv("v4", per_slice=30)
    assert all(len(tok(e.answer, add_special_tokens=False)["input_ids"]) == 2 for e in kv4)
    assert all(_holdout("kv4", e.prompt.rsplit("?", 1)[1].strip(), e.answer) for e in kv4)
    assert len({e.answer for e in kv4}) > 50  # 00-99, not a handful of values


def test_eval_pairs_are_held_out_by_construction() -> None:
    rng = random.Random(0)
    for _ in range(200):
        ex = kv_v2(rng, "en", "train", long=rng.random() < 0.5)
        if ex is not None:
            assert not _holdout("kv2", ex.prompt.rsplit("?", 1)[1], ex.answer)
    assert all(_holdout("kv2", e.prompt.rsplit("?", 1)[1], e.answer) for e in _kv())
    for e in _kv("v3"):
        k0, v0, k1 = e.id.split("-")[3]
        assert (k0, v0) == (e.prompt.rsplit("?", 1)[1].strip(), e.answer) and kv_held_out("v3", [k0, k1], [v0])
    rng = random.Random(1)
    train = [x for _ in range(300) if (x := kv_v2(rng, "zh", "train", long=False, kv_format="v3")) is not None]
    tags = [x.id.split("-")[3] for x in train]
    assert train and not any(kv_held_out("v3", [t[0], t[2]], [t[1]]) for t in tags)


def test_token_capped_batches_keep_every_example_in_order() -> None:
    pool = _kv()
    pool.sort(key=lambda e: len(e.prompt.encode()))
    batches = _batches(pool, 16, 4096)
    assert [e for b in batches for e in b] == pool
    for b in batches:
        width = max(len(e.prompt.encode()) + len(e.answer.encode()) + 2 for e in b)
        assert len(b) <= 16 and (len(b) == 1 or len(b) * width <= 4096)


def _kv_samples(dist_acc: list[tuple[int, float]], lang: str = "en") -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"task": "kv", "lang": lang, "metric": "exact", "distance": float(d), "value": v, "id": f"{lang}{i}"}
            for i, (d, v) in enumerate(dist_acc)
        ]
        + [{"task": "arith", "lang": lang, "metric": "exact", "distance": float("nan"), "value": 1.0, "id": "a"}]
    )


def test_retrieval_by_distance_buckets_per_language_and_pooled() -> None:
    s = pd.concat([_kv_samples([(5, 1.0), (60, 0.0), (64, 1.0), (130, 0.0)]), _kv_samples([(10, 1.0)], "zh")])
    t = retrieval_by_distance(s).set_index(["lang", "bucket_lo"])
    assert t.loc[("en", 0), "accuracy"] == 0.5 and t.loc[("en", 0), "n"] == 2
    assert t.loc[("en", 64), "bucket_hi"] == 127 and t.loc[("en", 128), "accuracy"] == 0.0
    assert t.loc[("all", 0), "n"] == 3 and t.loc[("all", 0), "accuracy"] == pytest.approx(2 / 3)
    assert retrieval_by_distance(s.drop(columns=["distance"])).empty  # v1 data: no distances, no table


def test_distance_table_shows_where_a_candidate_forgets() -> None:
    base = _kv_samples([(d, 1.0) for d in range(0, 448, 16)])
    cand = _kv_samples([(d, 1.0 if d < 128 else 0.0) for d in range(0, 448, 16)])
    t = distance_table(base, cand)
    en = t[t["lang"] == "en"].set_index("bucket_lo")
    assert (en["base_acc"] == 1.0).all()
    assert en.loc[64, "cand_acc"] == 1.0 and en.loc[128, "cand_acc"] == 0.0 and en.loc[384, "cand_acc"] == 0.0


def test_mistral_twin_config_keeps_every_dimension_and_has_no_window() -> None:
    llama = json.loads(
        (Path(__file__).resolve().parents[2] / "inferopt/model/builtin/quality-tiny/config.json").read_text()
    )
    m = mistral_config(llama)
    assert m["model_type"] == "mistral" and m["architectures"] == ["MistralForCausalLM"] and m["sliding_window"] is None
    for k in ("hidden_size", "num_hidden_layers", "num_key_value_heads", "head_dim", "rope_parameters", "vocab_size"):
        assert m[k] == llama[k]
    with pytest.raises(ValueError, match="biases"):
        mistral_config({**llama, "attention_bias": True})


def test_mistral_twin_computes_the_llamas_logits_and_a_window_changes_only_far_positions(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM

    from inferopt.model.quality.mistral_copy import mistral_copy

    src = Path(__file__).resolve().parents[2] / "inferopt/model/builtin/quality-tiny"
    twin = mistral_copy(src, tmp_path / "twin")
    llama = AutoModelForCausalLM.from_pretrained(src).eval()
    plain = AutoModelForCausalLM.from_pretrained(twin).eval()
    window = AutoModelForCausalLM.from_pretrained(twin, sliding_window=32).eval()
    assert type(plain).__name__ == "MistralForCausalLM"
    x = torch.randint(3, 250, (1, 96), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        a, b, c = llama(x).logits, plain(x).logits, window(x).logits
    assert torch.equal(a, b)
    assert torch.allclose(a[:, :32], c[:, :32]) and not torch.allclose(a[:, 64:], c[:, 64:], atol=1e-3)


def test_the_language_behind_gets_two_thirds_of_the_curriculum_not_all() -> None:
    from inferopt.model.quality.train import _kv_long_draw

    rng = random.Random(1)
    langs = collections.Counter(_kv_long_draw(rng, {"en": 0, "zh": 1}).slice["lang"] for _ in range(600))
    assert 0.6 < langs["en"] / 600 < 0.73
    even = collections.Counter(_kv_long_draw(rng, {"en": 2, "zh": 2}).slice["lang"] for _ in range(600))
    assert 0.42 < even["en"] / 600 < 0.58


@pytest.mark.parametrize("kv_format", ["v3", "v4"])
def test_v3_v4_data_keep_every_other_tasks_documents_of_v1(kv_format: str) -> None:
    """Only the kv documents change with the kv format: the other slices compare document for document."""
    v1, v3 = eval_set(per_slice=14, kv_format="v1"), eval_set(per_slice=14, kv_format=kv_format)
    assert [e for e in v1 if e.slice["task"] != "kv"] == [e for e in v3 if e.slice["task"] != "kv"]
    kv1, kv3 = [e for e in v1 if e.slice["task"] == "kv"], [e for e in v3 if e.slice["task"] == "kv"]
    assert len(kv1) == len(kv3) and all(e.answer.isdigit() for e in kv3)


def test_the_trainer_records_its_command_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from inferopt.model.quality.train import command_line

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    cmd = command_line(["--out", "a dir", "--kv-format", "v4"])
    assert cmd.startswith("OMP_NUM_THREADS=1 ") and "OMP_WAIT_POLICY" not in cmd
    assert cmd.endswith("python -m inferopt.model.quality.train --out 'a dir' --kv-format v4")


def test_level_start_per_language_and_the_bare_share() -> None:
    import argparse

    from inferopt.model.quality.train import level_start

    assert level_start("6") == 6 and level_start("en=0,zh=6") == {"en": 0, "zh": 6}
    with pytest.raises(argparse.ArgumentTypeError, match="each of"):
        level_start("en=2")
    rng = random.Random(6)
    for share, lo, hi in ((0.25, 30, 70), (0.75, 130, 170)):
        bare = 0
        for _ in range(200):
            ex = kv_long_example(rng, "en", 480, queries=6, kv_format="v4", bare_share=share)
            bare += not any(c.isupper() for c in ex.prompt)  # filler is uppercase
        assert lo < bare < hi, (share, bare)
