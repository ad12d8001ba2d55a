"""Output drift between baseline and candidate, the spine's quality check (G1 in miniature):

1. served-output agreement: the same requests served by both arms in the ablation — how many came back
   token-for-token identical, and the share of positions that agree (catches engine-level numeric
   drift, e.g. padding in batches, not only model changes);
2. next-token drift on held prompts: the baseline's greedy continuation is teacher-forced through both
   models as each arm loads them (dtype, attention kernel); mean KL(p_base || p_cand) per position and
   top-1 agreement.

A random-weight model makes these numbers a numeric-equivalence check, not a quality measure: sliced task
accuracy with confidence intervals needs the trained quality model (separate work).

Deliberately not here: task evaluation (lm-eval) and pass/fail thresholds (`inferopt.gate`).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from inferopt.config import AnySystem, GateSettings
from inferopt.model.loading import load_system_model
from inferopt.records import RequestRecord


def served_agreement(records_a: list[RequestRecord], records_b: list[RequestRecord]) -> dict[str, Any]:
    """Compare outputs of requests (by id) that finished ok in both arms' first trial."""

    def first_trial(records: list[RequestRecord]) -> dict[str, list[int]]:
        by_id: dict[str, list[int]] = {}
        trials = defaultdict(list)
        for r in records:
            if r.outcome == "ok" and not r.warmup:
                trials[r.trial].append(r)
        if not trials:
            return by_id
        for r in trials[min(trials)]:
            by_id[r.request_id] = list(r.output_token_ids)
        return by_id

    a, b = first_trial(records_a), first_trial(records_b)
    if any(-1 in ids for ids in (*a.values(), *b.values())):
        # an HTTP engine without returned ids records -1 placeholders: there is nothing to compare
        return {"status": "skipped", "reason": "the engine did not return output token ids (placeholders only)", "n": 0}
    common = sorted(set(a) & set(b))
    if not common:
        return {"status": "skipped", "reason": "no request finished ok in both arms", "n": 0}
    exact, pos_agree, first_div = [], [], []
    for rid in common:
        x, y = a[rid], b[rid]
        n = min(len(x), len(y))
        eq = [x[i] == y[i] for i in range(n)]
        exact.append(x == y)
        pos_agree.append(float(np.mean(eq)) if n else float(len(x) == len(y)))
        first_div.append(next((i for i, e in enumerate(eq) if not e), n if len(x) == len(y) else n))
    return {
        "status": "measured",
        "n": len(common),
        "exact_match_rate": float(np.mean(exact)),
        "token_agreement": float(np.mean(pos_agree)),
        "first_divergence_median": float(np.median(first_div)),
    }


def next_token_drift(base: AnySystem, cand: AnySystem, gate: GateSettings) -> dict[str, Any]:
    """Teacher-forced next-token KL and top-1 agreement on `gate.held_prompts` seeded prompts (arms that
    hold their model in this process; others are skipped with the reason)."""
    if not (base.capabilities.in_process_model and cand.capabilities.in_process_model):
        return {
            "status": "skipped",
            "reason": f"next-token drift loads hf models in-process; this is {base.engine}/{cand.engine} "
            "(the fake engine has no model; served arms are compared on their outputs)",
        }
    import torch

    from inferopt.engines.hf.loop import greedy_generate  # lazy: imports torch and transformers

    prev_threads = torch.get_num_threads()
    torch.set_num_threads(base.capabilities.cpu_threads)
    try:
        lb = load_system_model(base)
        lc = load_system_model(cand)
        vocab = int(lb.model.config.vocab_size)
        rng = np.random.default_rng(gate.seed)
        prompts = torch.tensor(rng.integers(3, vocab, size=(gate.held_prompts, gate.prompt_len)), device=lb.device)
        prompts = torch.cat([torch.ones_like(prompts[:, :1]), prompts], dim=1)  # <bos>
        mask = torch.ones_like(prompts)
        cont = torch.tensor(greedy_generate(lb.model, prompts, mask, gate.continuation_len), device=lb.device)
        full = torch.cat([prompts, cont], dim=1)
        start = prompts.shape[1] - 1  # the logits that predict the continuation
        with torch.no_grad():
            logp_b = torch.log_softmax(lb.model(full).logits[:, start:-1].float(), dim=-1)
            logp_c = torch.log_softmax(
                lc.model(full.to(lc.device)).logits[:, start:-1].float().to(logp_b.device), dim=-1
            )
        kl = (logp_b.exp() * (logp_b - logp_c)).sum(-1)  # KL(base || cand) per position
        top1 = (logp_b.argmax(-1) == logp_c.argmax(-1)).float()
        return {
            "status": "measured",
            "prompts": int(gate.held_prompts),
            "positions": int(kl.numel()),
            "mean_kl": float(kl.mean()),
            "max_kl": float(kl.max()),
            "top1_agreement": float(top1.mean()),
        }
    finally:
        torch.set_num_threads(prev_threads)
