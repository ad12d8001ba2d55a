"""Can a KV-cache arm change a decoded answer at all? (issue 20: the planted 4-bit KV arm.)

For the long kv documents of the quality model's task data, each arm prefills the prompt and decodes `--tokens`
tokens greedily; the last decode step is compared with the full-precision cache's: KL divergence (nats), argmax
agreement, exact answers (a decode step reads the cache as stored, the prefill pass does not). Last line:
{arm: {"kl_mean", "kl_max", "argmax_agree", "exact", "n"}}. `--prefix-margin` measures the headroom instead:
the document (all but the query's last token) is prefilled into the arm's cache, so the query token reads it
quantized (the prefix-cached case), and the answer's logit margin (right token - best other) is compared with
the full-precision cache's: {arm: {"margin_p10", "margin_p50", "shift_p50", "shift_p90", "shift_max",
"flipped", "n"}}.

Usage: python benchmarks/kv_decode_sensitivity.py --model DIR --data-dir D [--arms quanto-int4,...] [--limit N]
       [--prefix-margin]
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def long_kv_docs(data_dir: str, limit: int) -> list[dict]:
    rows = [json.loads(x) for x in (Path(data_dir) / "kv.jsonl").read_text(encoding="utf-8").splitlines() if x]
    return [r for r in rows if r["slice"]["context"] == "long"][:limit]


def last_step(model_dir: str, kv_cache: str, docs: list[dict], tokens: int):
    """(log-softmax of the last decode step per document, the decoded answers) under one KV setting."""
    import torch

    from inferopt.config import HFSystem, ModelSpec
    from inferopt.model.loading import load_system_model

    loaded = load_system_model(HFSystem(model=ModelSpec(path=model_dir), kv_cache=kv_cache))
    steps, answers = [], []
    for d in docs:  # one document at a time: no padding, the same batch make-up for every arm
        enc = loaded.tokenizer(d["prompt"], return_tensors="pt")
        with torch.no_grad():
            out = loaded.model.generate(
                **enc, max_new_tokens=tokens, do_sample=False, output_scores=True, return_dict_in_generate=True
            )
        steps.append(torch.log_softmax(out.scores[-1][0].float(), -1))
        answers.append(loaded.tokenizer.decode(out.sequences[0, enc["input_ids"].shape[1] :]).strip())
    return torch.stack(steps), answers


def prefix_margins(loaded, kv_cache: str, docs: list[dict]):
    """The answer's first-token logit margin per document when the query's last token reads the document from
    `kv_cache` (prefilled in a first call, as a prefix cache would hold it); `loaded`: the model, loaded once."""
    import torch

    from inferopt.engines.hf.loop import make_cache

    margins = []
    for d in docs:
        ids = loaded.tokenizer(d["prompt"], return_tensors="pt")["input_ids"]
        right = loaded.tokenizer(d["answer"], add_special_tokens=False)["input_ids"][0]
        cache = make_cache(loaded.model, kv_cache)
        with torch.no_grad():
            loaded.model(ids[:, :-1], past_key_values=cache, use_cache=True)
            logits = loaded.model(ids[:, -1:], past_key_values=cache, use_cache=True).logits[0, -1].float()
        others = torch.cat([logits[:right], logits[right + 1 :]])
        margins.append(float(logits[right] - others.max()))
    return torch.tensor(margins)


def margin_row(ref, m) -> dict:
    shift = (m - ref).abs()
    q = lambda t, p: round(float(t.quantile(p)), 3)  # noqa: E731
    return {
        "margin_p10": q(m, 0.1),
        "margin_p50": q(m, 0.5),
        "shift_p50": q(shift, 0.5),
        "shift_p90": q(shift, 0.9),
        "shift_max": round(float(shift.max()), 3),
        "flipped": int(((m > 0) != (ref > 0)).sum()),
        "n": len(m),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--arms", default="quanto-int4,quanto-int2,hqq-int8")
    ap.add_argument("--tokens", type=int, default=2, help="decode steps; the last one is compared")
    ap.add_argument("--limit", type=int, default=120)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--prefix-margin", action="store_true", help="the answer's margin over a prefilled cache")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    docs = long_kv_docs(args.data_dir, args.limit)
    if args.prefix_margin:
        from inferopt.config import HFSystem, ModelSpec
        from inferopt.model.loading import load_system_model

        loaded = load_system_model(HFSystem(model=ModelSpec(path=args.model)))  # the arms differ in the cache only
        ref = prefix_margins(loaded, "dynamic", docs)
        rows = {"dynamic": margin_row(ref, ref)}
        rows |= {arm: margin_row(ref, prefix_margins(loaded, arm, docs)) for arm in args.arms.split(",")}
        for arm, row in rows.items():
            print(arm, row, flush=True)
        print(json.dumps(rows))
        return
    ref, ref_answers = last_step(args.model, "dynamic", docs, args.tokens)
    out = {}
    for arm in ["dynamic", *args.arms.split(",")]:
        lp, answers = (ref, ref_answers) if arm == "dynamic" else last_step(args.model, arm, docs, args.tokens)
        kl = (ref.exp() * (ref - lp)).sum(-1)
        out[arm] = {
            "kl_mean": round(float(kl.mean()), 5),
            "kl_max": round(float(kl.max()), 5),
            "argmax_agree": round(float((lp.argmax(-1) == ref.argmax(-1)).float().mean()), 3),
            "exact": round(sum(a == d["answer"] for a, d in zip(answers, docs, strict=True)) / len(docs), 3),
            "n": len(docs),
        }
        print(arm, out[arm], flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
