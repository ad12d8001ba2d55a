"""Greedy speculative decoding at batch 1, our own draft-then-verify loop (SPEC K5), used by the hf engine when
`HFSystem.speculative` is set, and `speculative_generate`, the bare loop for tests and benchmarks.

`SpeculativeDecoder` says what one round does; greedy outputs are the target's own, token for token. Why our
loop and not `model.generate(assistant_model=draft)`: transformers 5.24's assisted generation has no
acceptance counter, adapts k by default, and runs the draft's prefill and a whole round before the first
token, which would charge draft work to TTFT. This loop emits the first token from the target's prefill,
stamps each round's tokens when its verify forward returns (they really come in bursts), and times draft and
verify forwards apart (the cost ratio c of Leviathan et al.'s prediction). Drafts: `layers:N`, the target's
first N decoder layers sharing its weights (`truncated_draft`), or a model with the same vocabulary.

Deliberately not here: queues, threads and request timestamps (`inferopt.engines.hf.engine`), the acceptance
math (`inferopt.ablate.speculative_math`), sampling (greedy only), batches > 1, quantized KV caches (they cannot
be cropped back after a rejection).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from inferopt.config import ModelSpec
from inferopt.engines.base import FinishEvent, TokenEvent
from inferopt.engines.hf.loop import make_cache
from inferopt.model.loading import load_model
from inferopt.records import now_s


def _decoder_layers(model: Any) -> nn.ModuleList:
    layers = getattr(model.get_decoder(), "layers", None)
    if not isinstance(layers, nn.ModuleList):
        raise ValueError(
            f"speculative.draft_model layers:N: {type(model).__name__} has no decoder `layers` list to "
            "truncate; fix: use a separate draft model (builtin:<name> or a model directory)"
        )
    return layers


def truncated_draft(target: Any, n_layers: int) -> Any:
    """A draft model made of the target's first `n_layers` decoder layers, embeddings, final norm and LM head.
    Parameters and buffers are shared with the target (no weights copied); the module tree and config are new."""
    total = len(_decoder_layers(target))
    if not 1 <= n_layers < total:
        raise ValueError(
            f"speculative.draft_model layers:{n_layers}: the target has {total} layers; fix: "
            f"layers:1 .. layers:{total - 1}"
        )
    memo: dict[int, Any] = {id(t): t for t in (*target.parameters(), *target.buffers())}
    draft = copy.deepcopy(target, memo)
    dec = draft.get_decoder()
    dec.layers = nn.ModuleList(list(dec.layers)[:n_layers])
    draft.config.num_hidden_layers = n_layers
    if isinstance(getattr(draft.config, "layer_types", None), list):
        draft.config.layer_types = draft.config.layer_types[:n_layers]
    return draft.eval()


def load_draft(target: Any, spec: Any, system: Any) -> Any:
    """The draft for `spec` (a `SpeculativeDecoding`): a truncated view of `target`, or a model loaded with
    `system`'s dtype, attention and device. Raises ValueError when the vocabularies differ."""
    n = spec.truncated_layers
    if n is not None:
        return truncated_draft(target, n)
    loaded = load_model(
        ModelSpec(path=spec.draft_model),
        dtype=system.dtype,
        attn_implementation=system.attn_implementation,
        device=system.device,
    )
    tv, dv = target.config.vocab_size, loaded.model.config.vocab_size
    if tv != dv:
        raise ValueError(
            f"speculative.draft_model {spec.draft_model!r} has vocab_size {dv}, the target {tv}: its tokens "
            "would mean other things; fix: a draft trained with the target's tokenizer, or layers:N"
        )
    return loaded.model.eval()


@dataclass
class SpecStats:
    """Per-request draft statistics. Lists hold one entry per verify round."""

    drafted: list[int] = field(default_factory=list)  # tokens the draft proposed
    accepted: list[int] = field(default_factory=list)  # of those, accepted by the target
    draft_s: float = 0.0  # time in the draft's single-token decode forwards
    draft_forwards: int = 0
    draft_prefill_s: float = 0.0  # the draft's first forward over the prompt (its prefill)
    verify_s: float = 0.0  # time in the target's verify forwards
    verify_forwards: int = 0


class SpeculativeDecoder:
    """Incremental greedy speculative decoding of one prompt: `prefill()` once, then `round()` until done.

    `prefill()` returns the target's first token; `round()` returns the 1..k+1 tokens the round releases.
    Callers stop on EOS / length themselves (a round may overshoot; extra tokens are theirs to drop).

    One round: the draft proposes k tokens greedily (k one-token forwards; the round's first forward also feeds
    whatever the draft's cache has not seen yet), the target runs ONE forward over [last token, d1..dk] and
    keeps the longest prefix where its own argmax equals the proposal, plus its own next token (a correction,
    or a bonus when all k were accepted). Both KV caches are cropped back to the kept tokens, so outputs are
    the target's greedy outputs (up to floating-point differences between a k+1-token forward and one-token
    forwards, which the tests check do not flip a token on the builtin models). The same forward calls as
    `inferopt.engines.hf.loop` (`cache=`, `position_ids`, `logits_to_keep`)."""

    def __init__(
        self, target: Any, draft: Any, prompt_ids: list[int], num_draft_tokens: int, device: str | torch.device = "cpu"
    ) -> None:
        if not prompt_ids:
            raise ValueError("speculative decoding needs a non-empty prompt")
        self.target, self.draft, self.k, self.device = target, draft, int(num_draft_tokens), device
        self.tokens: list[int] = list(prompt_ids)  # prompt + every released token
        self.t_cache = make_cache(target)
        self.d_cache = make_cache(draft)
        self.t_len = 0  # tokens in the target's cache
        self.d_len = 0  # tokens in the draft's cache
        self.stats = SpecStats()
        quanto = any(
            "quanto" in str(getattr(getattr(m.config, "quantization_config", None), "quant_method", "") or "").lower()
            for m in (target, draft)
        )
        self._mode = torch.no_grad if quanto else torch.inference_mode  # quanto weights refuse inference_mode

    def _forward(self, model: Any, cache: Any, start: int, ids: list[int], keep: int) -> tuple[Any, torch.Tensor]:
        x = torch.tensor([ids], dtype=torch.long, device=self.device)
        pos = torch.arange(start, start + len(ids), dtype=torch.long, device=self.device).unsqueeze(0)
        out = model(input_ids=x, position_ids=pos, cache=cache, use_cache=True, logits_to_keep=keep)
        return out.cache, out.logits[0, -keep:, :].argmax(dim=-1)

    def prefill(self) -> int:
        with self._mode():
            self.t_cache, nxt = self._forward(self.target, self.t_cache, 0, self.tokens, 1)
            tok = int(nxt.tolist()[-1])
        self.t_len = len(self.tokens)
        self.tokens.append(tok)
        return tok

    def round(self) -> list[int]:
        with self._mode():
            return self._round()

    def _round(self) -> list[int]:
        k, st = self.k, self.stats
        proposal: list[int] = []
        feed = self.tokens[self.d_len :]
        for _ in range(k):
            t0 = time.perf_counter()
            self.d_cache, nxt = self._forward(self.draft, self.d_cache, self.d_len, feed, 1)
            d = int(nxt.tolist()[-1])
            dt = time.perf_counter() - t0
            if len(feed) > 2:  # catching up over the prompt: the draft's prefill, not a decode step
                st.draft_prefill_s += dt
            else:
                st.draft_s += dt
                st.draft_forwards += 1
            self.d_len += len(feed)
            proposal.append(d)
            feed = [d]
        # the target's cache holds every token but the last released one: verify [last, d1..dk] in one forward
        t0 = time.perf_counter()
        verify = [self.tokens[-1], *proposal]
        self.t_cache, best = self._forward(self.target, self.t_cache, self.t_len, verify, k + 1)
        best_ids = best.tolist()
        st.verify_s += time.perf_counter() - t0
        st.verify_forwards += 1
        n = 0
        while n < k and proposal[n] == best_ids[n]:
            n += 1
        new = [*proposal[:n], int(best_ids[n])]
        if k - n:
            self.t_cache.crop(-(k - n))  # drop the rejected proposals' KV (5.24: a negative count removes)
        self.t_len += 1 + n
        keep = min(len(self.tokens) + n, self.d_len)  # the draft saw tokens + proposal[:k-1]
        if self.d_len - keep:
            self.d_cache.crop(-(self.d_len - keep))
        self.d_len = keep
        self.tokens.extend(new)
        st.drafted.append(k)
        st.accepted.append(n)
        return new


def speculative_generate(
    target: Any,
    draft: Any,
    prompt_ids: list[int],
    max_new_tokens: int,
    num_draft_tokens: int,
    eos_token_id: int | None = None,
    device: str = "cpu",
) -> tuple[list[int], SpecStats]:
    """The bare loop: greedy tokens for one prompt (stopping after EOS, which is included) and the draft stats."""
    if max_new_tokens <= 0:
        return [], SpecStats()
    dec = SpeculativeDecoder(target, draft, prompt_ids, num_draft_tokens, device)
    out = [dec.prefill()]
    while out[-1] != eos_token_id and len(out) < max_new_tokens:
        for tok in dec.round():
            out.append(tok)
            if tok == eos_token_id or len(out) >= max_new_tokens:
                break
    return out, dec.stats


def released_tokens(dec: SpeculativeDecoder, max_new_tokens: int, eos_token_id: int | None) -> Iterator[list[int]]:
    """The tokens each target forward releases: the prefill's first token, then each round's, cut after EOS or at
    `max_new_tokens` (a round may find more; they are dropped, not sent)."""
    n = 0
    toks = [dec.prefill()]
    while True:
        out: list[int] = []
        for tok in toks:
            out.append(tok)
            n += 1
            if tok == eos_token_id or n >= max_new_tokens:
                yield out
                return
        yield out
        toks = dec.round()


@dataclass
class SpecCounters:
    """Engine-wide running totals (Prometheus-style counters: callers take differences between two reads)."""

    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    full_rounds: int = 0
    draft_s: float = 0.0
    draft_forwards: int = 0
    verify_s: float = 0.0
    verify_forwards: int = 0

    def add(self, st: SpecStats) -> None:
        self.rounds += len(st.accepted)
        self.drafted += sum(st.drafted)
        self.accepted += sum(st.accepted)
        self.full_rounds += sum(a == d for a, d in zip(st.accepted, st.drafted, strict=False))
        self.draft_s += st.draft_s
        self.draft_forwards += st.draft_forwards
        self.verify_s += st.verify_s
        self.verify_forwards += st.verify_forwards

    def as_metrics(self) -> dict[str, float]:
        return {f"spec_{k}": float(v) for k, v in vars(self).items()}


def prepare_draft(target: Any, system: Any, device: str) -> tuple[Any, dict[str, Any]]:
    """The engine's draft for `system.speculative`, warmed up (one prefill + one round, not recorded), and what
    `info()` says about it."""
    spec = system.speculative
    draft = load_draft(target, spec, system)
    speculative_generate(target, draft, [1, 3, 4, 5], 2, spec.num_draft_tokens, device=device)
    return draft, {
        "draft_model": spec.draft_model,
        "num_draft_tokens": spec.num_draft_tokens,
        "draft_layers": len(_decoder_layers(draft)),
        "target_layers": len(_decoder_layers(target)),
        "loop": "inferopt draft-verify (greedy, batch 1)",
        "warmup": "one prefill of 4 tokens + one round at start(), not recorded",
    }


def serve_speculative(engine: Any, slot: Any) -> None:
    """`HFEngine._run_batch` when `speculative` is on (its batches then hold one request): draft-then-verify
    rounds for `slot`'s request, each round's tokens sent as one chunk stamped when its verify forward returned,
    the per-round draft counts on the request's timings, the totals on `engine.spec_counters`. A part of the
    engine kept here so that engine.py stays about batches; it uses the engine's own finish and post hooks."""
    req, tm = slot.request, slot.timings
    t = now_s()
    tm.context_ready_s = tm.prefill_start_s = t
    if req.max_new_tokens <= 0:
        tm.prefill_end_s = t
        engine._finish(slot, "length", t)
        engine._post([(slot.queue, FinishEvent(tm))])
        return
    dec = SpeculativeDecoder(
        engine.model, engine.draft, req.prompt_token_ids, engine.system.speculative.num_draft_tokens, engine._device
    )
    tm.spec_drafted, tm.spec_accepted = dec.stats.drafted, dec.stats.accepted  # filled in place, round by round
    eos = engine._eos if engine.system.stop_at_eos and not req.force_length else None
    counted = False
    try:
        for i, toks in enumerate(released_tokens(dec, req.max_new_tokens, eos)):
            t = now_s()
            if i == 0:
                tm.prefill_end_s = t
            elif engine._stopping:
                raise RuntimeError("engine stopped mid-request")
            if slot.cancelled:
                engine._finish(slot, "cancelled", t)
                return
            tm.token_s.extend([t] * len(toks))
            slot.emitted += len(toks)
            engine.tokens_generated += len(toks)
            items = [(slot.queue, TokenEvent(tuple(toks), t))]
            reason = "eos" if toks[-1] == eos else ("length" if slot.emitted >= req.max_new_tokens else None)
            if reason is not None:
                engine._finish(slot, reason, t)
                _account(engine, dec)  # before the finish is seen: a scrape after it includes this request
                counted = True
                items.append((slot.queue, FinishEvent(tm)))
            engine._post(items)
    finally:
        if not counted:
            _account(engine, dec)


def _account(engine: Any, dec: SpeculativeDecoder) -> None:
    """One finished request into the engine's draft counters. Its KV bytes are not metered: `HFEngine.kv`
    notes plain batches only (the `_note_kv` hook this once looked up never existed on the engine)."""
    engine.spec_counters.add(dec.stats)
