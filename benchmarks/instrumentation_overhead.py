"""What does HFEngine's machinery (queue, worker thread, timestamps, asyncio hand-off) cost per token?

Same model object, same prompts, same thread count, interleaved A/B repeats:
  (a) bare:   `greedy_generate` — the forward loop alone. TPOT = (T(n tokens) − T(1 token)) / (n − 1),
              wall-clock around two calls on the same prompt (the bare loop itself holds no clock);
  (b) engine: HFEngine at batch size 1, one request at a time through `stream()`; TPOT from the engine's
              own `token_s`: (last − first) / (n − 1).
The two arms alternate request by request (which goes first alternates too), so each engine request has a
bare neighbour measured under the same machine conditions. The LAST line printed is one JSON object:
bare_tpot_ms / engine_tpot_ms = median of per-request TPOT of each arm; overhead_pct = median over those
adjacent pairs of (engine − bare) / bare. The paired estimate is the headline because on a shared box the
machine's speed drifts by ±20 % within seconds, which swamps a ratio of two unpaired medians; that ratio is
printed in the table too.

Usage: python benchmarks/instrumentation_overhead.py [--threads 1] [--model builtin:tiny-llama] [--device auto]

Deliberately not here: batching effects, throughput, client-side latency (the load runner measures those).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import torch

from inferopt.config import BatchingKnobs, HFSystem, ModelSpec
from inferopt.engines.base import FinishEvent, GenRequest
from inferopt.engines.hf.engine import HFEngine
from inferopt.engines.hf.loop import greedy_generate, left_pad, pad_token_id_of
from inferopt.model.loading import load_model, resolve_device


def _prompts(n: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [[1] + torch.randint(3, min(vocab, 259), (length - 1,), generator=g).tolist() for _ in range(n)]


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def bare_tpot_ms(model, prompt: list[int], new_tokens: int, device: str) -> float:
    ids, mask = left_pad([prompt], pad_token_id_of(model), device)
    _sync(device)
    t0 = time.perf_counter()
    greedy_generate(model, ids, mask, 1)
    _sync(device)
    t1 = time.perf_counter()
    out = greedy_generate(model, ids, mask, new_tokens)
    _sync(device)
    t2 = time.perf_counter()
    assert len(out[0]) == new_tokens
    return ((t2 - t1) - (t1 - t0)) / (new_tokens - 1) * 1000.0


async def engine_tpot_ms(engine: HFEngine, prompt: list[int], new_tokens: int, rid: str) -> float:
    n = 0
    server = None
    async for ev in engine.stream(GenRequest(rid, prompt, new_tokens)):
        if isinstance(ev, FinishEvent):
            server = ev.server
        else:
            n += len(ev.token_ids)
    assert n == new_tokens == len(server.token_s) and server.batch_size_at_admit == 1
    return (server.token_s[-1] - server.token_s[0]) / (new_tokens - 1) * 1000.0


async def main_async(args: argparse.Namespace) -> dict[str, float]:
    torch.set_num_threads(args.threads)
    spec = ModelSpec(path=args.model)
    device = resolve_device(args.device)
    loaded = load_model(spec, dtype=args.dtype, attn_implementation=args.attn, device=device)
    system = HFSystem(
        model=spec,
        dtype=args.dtype,
        attn_implementation=args.attn,
        torch_threads=args.threads,
        device=device,
        stop_at_eos=False,
        batching=BatchingKnobs(max_batch_size=1, batch_wait_ms=0.0),
    )
    engine = HFEngine(system, preloaded=loaded, handoff=args.handoff)
    await engine.start()  # also warms up
    prompts = _prompts(args.prompts, args.prompt_len, loaded.model.config.vocab_size, args.seed)
    bare: list[float] = []
    eng: list[float] = []
    try:
        for p in prompts[:2]:  # extra warm-up of both arms, discarded
            bare_tpot_ms(loaded.model, p, 8, device)
            await engine_tpot_ms(engine, p, 8, "warmup")
        for r in range(args.repeats):
            for i, p in enumerate(prompts):
                if (r + i) % 2 == 0:  # alternate which arm goes first
                    bare.append(bare_tpot_ms(loaded.model, p, args.new_tokens, device))
                    eng.append(await engine_tpot_ms(engine, p, args.new_tokens, f"r{r}p{i}"))
                else:
                    eng.append(await engine_tpot_ms(engine, p, args.new_tokens, f"r{r}p{i}"))
                    bare.append(bare_tpot_ms(loaded.model, p, args.new_tokens, device))
    finally:
        await engine.stop()

    def q(xs: list[float], f: float) -> float:
        return statistics.quantiles(xs, n=10)[int(f * 10) - 1] if len(xs) >= 2 else xs[0]

    info = engine.info()
    print(
        f"model={args.model} device={info['device']} dtype={info['dtype']} attn={info['attn_implementation']} "
        f"threads={info['torch_threads']} handoff={info['event_handoff']} torch={info['torch_version']} "
        f"transformers={info['transformers_version']}"
    )
    print(
        f"{args.repeats} repeats x {len(prompts)} prompts x {args.new_tokens} new tokens, prompt_len={args.prompt_len}"
    )
    print(f"{'arm':<8}{'n':>5}{'p10 ms':>10}{'median ms':>11}{'p90 ms':>10}")
    for name, xs in (("bare", bare), ("engine", eng)):
        print(f"{name:<8}{len(xs):>5}{q(xs, 0.1):>10.3f}{statistics.median(xs):>11.3f}{q(xs, 0.9):>10.3f}")
    b, e = statistics.median(bare), statistics.median(eng)
    pairs = np.array([(y - x) / x * 100.0 for x, y in zip(bare, eng, strict=False)])
    paired = float(np.median(pairs))
    boot = np.median(np.random.default_rng(0).choice(pairs, size=(2000, len(pairs))), axis=1)
    lo, hi = np.percentile(boot, [2.5, 97.5])
    print(
        f"ratio of medians: {(e - b) / b * 100.0:+.2f} % ({(e - b) * 1000:+.1f} us/token); "
        f"median of {len(pairs)} paired overheads: {paired:+.2f} % (95 % bootstrap CI {lo:+.2f} .. {hi:+.2f})"
    )
    # overhead_pct is the paired figure (robust to drift); the unpaired ratio and the CI travel with it so the
    # line never reads as more certain than it is.
    return {
        "bare_tpot_ms": round(b, 4),
        "engine_tpot_ms": round(e, 4),
        "overhead_pct": round(paired, 2),
        "overhead_pct_ci95": [round(float(lo), 2), round(float(hi), 2)],
        "ratio_of_medians_pct": round((e - b) / b * 100.0, 2),
        "pairs": len(pairs),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="builtin:tiny-llama", help="a ModelSpec path (model directory or builtin:NAME)")
    ap.add_argument("--device", default="auto", choices=["cpu", "cuda", "auto"])
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--attn", default="sdpa", choices=["eager", "sdpa"])
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (recorded)")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--handoff",
        default="auto",
        choices=["auto", "eventfd", "call_soon_threadsafe"],
        help="how HFEngine's worker wakes the event loop",
    )
    args = ap.parse_args(argv)
    result = asyncio.run(main_async(args))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
