"""Evaluate one arm *as served*: the quality suite through lm-eval's `local-completions` against the arm's own
server.

- vLLM arms: `vllm serve` is launched with the arm's own knobs (dtype, KV-cache dtype, chunked prefill and step
  budget, prefix caching, quantization, speculative decoding, ...) by the engine's own launcher (`VLLMEngine`),
  serving the quality model — the proxy (`gate.quality_model`) or, with `quality_model: system`, the arm's own
  model — on 127.0.0.1; the suite runs against it and the server is stopped afterwards, whatever happened.
  `quality_system` says what it changes on the arm, and why.
- OpenAI arms (an external endpoint, nothing launched): the configured URL as it is; only meaningful for
  `quality_model: system`, which `suite_gate` decides.

Deliberately not here: which path an arm takes and the comparison (`suite_gate.py`), lm-eval wiring
(`lmeval.py`), the server's flags and process handling (`inferopt.engines.vllm`).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from inferopt.config import GateSettings, ModelSpec, OpenAISystem, VLLMSystem
from inferopt.engines.vllm.engine import VLLMEngine
from inferopt.gate.lmeval import SUITE, SuiteResult, run_served
from inferopt.model.loading import resolve_model_dir

# lm-eval requests in flight (at most the arm's max_num_seqs): the server batches them (240 docs in 63 s, 2 busy cores)
EVAL_CONCURRENCY = 16


def model_context_len(model_dir: str | Path) -> int | None:
    """The model's own context length from its config.json (`max_position_embeddings`), if it says."""
    try:
        cfg = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    value = cfg.get("max_position_embeddings")
    return int(value) if value else None


def quality_system(
    system: VLLMSystem, gate: GateSettings, model_dir: str | Path | None = None
) -> tuple[VLLMSystem, list[str]]:
    """The arm as the suite serves it and what was changed, in words. Pure given `model_dir` (the evaluated
    model's directory; resolved from the config when None).

    Changed (all else is the arm's): the model (the proxy unless `system`); `max_model_len` clamped to the
    model's own context (vLLM refuses a longer one); no span tracing (these requests are not measured); no
    admission limit (a rejected request would lose a document, and admission does not change outputs)."""
    notes: list[str] = []
    update: dict[str, Any] = {"tracing": False, "max_num_queued_reqs": None, "name": f"{system.name}-quality"}
    model = system.model if gate.quality_model == "system" else ModelSpec(path=gate.quality_model)
    update["model"] = model
    ctx = model_context_len(model_dir if model_dir is not None else resolve_model_dir(model))
    if ctx is not None and (system.max_model_len is None or system.max_model_len > ctx):
        update["max_model_len"] = ctx
        if system.max_model_len is not None:
            notes.append(f"max_model_len {system.max_model_len} -> {ctx} (the evaluated model's context)")
    if system.max_num_queued_reqs is not None:
        notes.append("admission limit off (it only rejects, never changes an output)")
    return system.model_copy(update=update), notes


async def _serve_and_run(
    system: VLLMSystem, gate: GateSettings, tokenizer_dir: str, tasks: tuple[str, ...] = SUITE
) -> tuple[SuiteResult, dict[str, Any]]:
    engine = VLLMEngine(system)
    try:
        await engine.start()
        # lm-eval runs its own event loop for concurrent requests: give it a thread of its own
        result = await asyncio.to_thread(
            run_served,
            engine.base_url,
            system.name,
            tokenizer_dir,
            tasks=tasks,
            limit=gate.quality_limit,
            data_dir=gate.quality_data_dir,
            concurrency=min(EVAL_CONCURRENCY, system.max_num_seqs or EVAL_CONCURRENCY),
            max_length=system.max_model_len or 512,
        )
        return result, engine.info()
    finally:
        await engine.stop()


def run_vllm_served(system: VLLMSystem, gate: GateSettings, tasks: tuple[str, ...] = SUITE) -> tuple[SuiteResult, str]:
    """Launch the arm's server on the quality model, run the suite, stop it. Returns the result and a
    description of what was evaluated (for the gate's output). Raises when the server does not start."""
    model = system.model if gate.quality_model == "system" else ModelSpec(path=gate.quality_model)
    model_dir = resolve_model_dir(model)
    qsys, notes = quality_system(system, gate, model_dir)
    tokenizer_dir = str(Path(model.tokenizer) if model.tokenizer else model_dir)
    result, info = asyncio.run(_serve_and_run(qsys, gate, tokenizer_dir, tasks))
    what = (
        f"served: vllm serve {model.path} with the arm's knobs on 127.0.0.1 (vLLM {info.get('vllm_version')}, "
        f"lm-eval local-completions)" + (f"; {'; '.join(notes)}" if notes else "")
    )
    return result, what


def run_openai_served(
    system: OpenAISystem, gate: GateSettings, tasks: tuple[str, ...] = SUITE
) -> tuple[SuiteResult, str]:
    """The suite against an external endpoint as configured (its own model; no tokenizer is known here, so
    the endpoint's `/tokenize` is used when it has one)."""
    if system.api != "completions":
        raise ValueError(f"the quality suite needs /v1/completions; system {system.name!r} has api: {system.api}")
    result = run_served(
        system.base_url,
        system.served_model,
        None,
        tasks=tasks,
        limit=gate.quality_limit,
        data_dir=gate.quality_data_dir,
        concurrency=EVAL_CONCURRENCY,
    )
    return result, f"served: {system.base_url} ({system.served_model}, its own model; lm-eval local-completions)"
