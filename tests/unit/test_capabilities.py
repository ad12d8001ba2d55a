"""Every system declares its capabilities (`system.capabilities`), one test per engine kind on the values the
steps rely on; the optional engine methods have defaults on `EngineBase`; and no code outside
`inferopt/engines/` and `inferopt/config/` tests a system's class."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import pytest

from inferopt.config import (
    BatchingKnobs,
    FakeSystem,
    HFSystem,
    KVBudget,
    ModelSpec,
    OpenAISystem,
    Speculation,
    VLLMSystem,
)
from inferopt.config.pooled import Pool, PooledSystem
from inferopt.config.speculative import SpeculativeDecoding
from inferopt.engines import EngineBase, GenRequest, unavailable_reason

ROOT = Path(__file__).resolve().parents[2]
TINY = ModelSpec(path="builtin:tiny-llama")


def test_hf_declares_an_in_process_model_with_its_queue_and_threads() -> None:
    system = HFSystem(
        model=TINY,
        torch_threads=3,
        stop_at_eos=False,
        batching=BatchingKnobs(max_batch_size=1, max_queue=7),
        speculative=SpeculativeDecoding(draft_model="layers:1", num_draft_tokens=5),
    )
    caps = system.capabilities
    assert (caps.engine, caps.queue_bound, caps.queue_bound_knob, caps.max_running) == (
        "hf",
        7,
        "batching.max_queue",
        1,
    )
    assert caps.quality_eval == "in-memory" and caps.in_process_model and caps.op_profile
    assert caps.cpu_threads == 3 and caps.stops_at_eos is False and caps.verbatim_args == ()
    assert not caps.launches_processes and not caps.scripted_timings and not caps.replicable
    assert caps.kv_budget is None and caps.prefix_cache is False and caps.prefix_cache_reset is None
    assert caps.speculative == Speculation(draft_tokens=5, method="layers:1", stats_from="records")
    assert caps.model == TINY and caps.vocab_size is None and caps.pools == ()
    assert {"dtype", "attn_implementation", "batching", "kv_cache", "speculative"} <= set(caps.knobs)
    assert not {"engine", "name", "model"} & set(caps.knobs)
    assert HFSystem(model=TINY).capabilities.speculative is None
    assert HFSystem(model=TINY).capabilities.stops_at_eos is True


def test_fake_declares_scripted_timings_and_no_text() -> None:
    caps = FakeSystem(vocab_size=99, cached_prefix_fraction=0.5, batching=BatchingKnobs(max_batch_size=6)).capabilities
    assert (caps.engine, caps.queue_bound, caps.queue_bound_knob, caps.max_running) == (
        "fake",
        None,
        "batching.max_queue",
        6,
    )
    assert caps.scripted_timings and caps.quality_eval is None and not caps.in_process_model
    assert caps.vocab_size == 99 and caps.model is None and caps.cpu_threads == 1
    assert caps.prefix_cache is True and caps.prefix_cache_reset == "engine restart"
    assert not caps.launches_processes and not caps.op_profile and caps.stops_at_eos is None
    assert "decode_step_ms" in caps.knobs and "seed" not in caps.knobs
    plain = FakeSystem().capabilities
    assert plain.prefix_cache is False and plain.prefix_cache_reset is None


def test_vllm_declares_a_served_process_with_a_reserved_kv_budget() -> None:
    system = VLLMSystem(
        model=TINY,
        max_num_queued_reqs=12,
        extra_args=("--foo",),
        extra_env={"VLLM_X": "1"},
        speculative_config={"method": "ngram", "num_speculative_tokens": 3},
    )
    caps = system.capabilities
    assert (caps.engine, caps.queue_bound, caps.queue_bound_knob, caps.max_running) == (
        "vllm",
        12,
        "max_num_queued_reqs",
        256,  # vLLM's default max_num_seqs
    )
    assert caps.kv_budget == KVBudget(
        configured_bytes=1 << 30, memory_fraction=0.9, block_size_tokens=128, max_model_len=2048
    )
    assert caps.launches_processes and caps.replicable and caps.quality_eval == "served"
    assert caps.prefix_cache is True and caps.prefix_cache_reset == "POST /reset_prefix_cache"
    assert caps.verbatim_args == ("--foo", "VLLM_X=1") and caps.stops_at_eos is None
    assert caps.speculative == Speculation(draft_tokens=3, method="ngram", stats_from="server counters")
    assert not caps.in_process_model and not caps.op_profile and not caps.scripted_timings and caps.cpu_threads == 1
    assert caps.model == TINY and caps.vocab_size is None
    assert {"max_num_seqs", "kv_cache_dtype", "speculative_config"} <= set(caps.knobs)
    assert not {"python", "tracing", "model"} & set(caps.knobs)
    gpu = VLLMSystem(
        model=TINY, device="cuda", max_num_seqs=8, kv_cache_memory_bytes=None, gpu_memory_utilization=0.5
    ).capabilities
    assert gpu.max_running == 8 and gpu.kv_budget.configured_bytes is None
    assert gpu.kv_budget.memory_fraction == 0.5 and gpu.kv_budget.block_size_tokens == 16
    assert VLLMSystem(model=TINY, enable_prefix_caching=False).capabilities.prefix_cache is False
    assert VLLMSystem(model=TINY, speculative_config={"method": "eagle"}).capabilities.speculative.draft_tokens is None


def test_openai_declares_an_endpoint_it_cannot_configure() -> None:
    system = OpenAISystem(base_url="http://127.0.0.1:9", served_model="m", vocab_size=42)
    caps = system.capabilities
    assert caps.engine == "openai" and caps.quality_eval == "endpoint"
    assert caps.queue_bound is None and caps.queue_bound_knob is None and system.with_queue_bound(4) is None
    assert caps.max_running is None and caps.kv_budget is None and caps.prefix_cache is None
    assert caps.vocab_size == 42 and caps.model is None
    assert not (caps.launches_processes or caps.replicable or caps.in_process_model or caps.op_profile)
    assert "temperature" in caps.knobs and "base_url" not in caps.knobs


def test_pooled_declares_its_pools_and_their_processes() -> None:
    vllm = VLLMSystem(model=TINY)
    pooled = PooledSystem(
        pools=(
            Pool(name="chat", tenants=("chat",), system=FakeSystem()),
            Pool(name="jobs", default=True, system=vllm),
        )
    )
    caps = pooled.capabilities
    assert caps.engine == "pooled" and caps.pools == (FakeSystem(), vllm)
    assert caps.launches_processes and caps.prefix_cache is True  # a vLLM pool
    assert caps.queue_bound_knob is None and pooled.with_queue_bound(3) is None
    assert caps.quality_eval is None and caps.vocab_size is None and caps.knobs == ()
    fakes = PooledSystem(pools=(Pool(name="a", default=True, system=FakeSystem()),)).capabilities
    assert not fakes.launches_processes and not fakes.scripted_timings


@pytest.mark.parametrize(
    "system",
    [HFSystem(model=TINY), FakeSystem(), VLLMSystem(model=TINY)],
    ids=lambda s: s.engine,
)
def test_queue_bound_is_set_where_a_knob_is_declared(system) -> None:
    bounded = system.with_queue_bound(5)
    assert type(bounded) is type(system) and bounded.capabilities.queue_bound == 5
    assert bounded.with_queue_bound(None).capabilities.queue_bound is None
    assert bounded.model_copy(update={"name": system.name}) == bounded  # everything else unchanged
    assert system.with_queue_bound(None) == system


def test_engine_availability_is_each_engines_own_check() -> None:
    assert unavailable_reason(FakeSystem()) is None
    assert unavailable_reason(OpenAISystem(base_url="http://x", served_model="m", vocab_size=5)) is None
    why = unavailable_reason(VLLMSystem(model=TINY, python="/nonexistent/bin/python"))
    assert why and "vLLM's interpreter" in why
    why = unavailable_reason(HFSystem(model=TINY, attn_implementation="flash_attention_2", device="cpu"))
    assert why and "GPU-only" in why


def test_optional_engine_methods_have_defaults() -> None:
    class Bare(EngineBase):
        async def stream(self, request):
            yield request.request_id

    async def run() -> tuple[list[str], object]:
        engine = Bare()
        req = GenRequest(request_id="r1", prompt_token_ids=[1], max_new_tokens=1)
        assert engine.prepare([req]) is None
        got = [e async for e in engine.fire(req)]  # the default fire is the request's stream
        return got, await engine.server_timings(["r1"])

    got, timings = asyncio.run(run())
    assert got == ["r1"] and timings is None  # None: no per-request server timings


def _system_isinstance_lines(source: str) -> list[int]:
    """Lines of `isinstance(x, <...System>)` calls (a class or a tuple of them) in Python source."""
    hits = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance":
            if len(node.args) == 2 and "System" in ast.unparse(node.args[1]):
                hits.append(node.lineno)
    return hits


def test_no_system_class_checks_outside_engines_and_config() -> None:
    allowed = (ROOT / "inferopt" / "engines", ROOT / "inferopt" / "config")
    files = [p for d in ("inferopt", "tasks", "flows") for p in sorted((ROOT / d).rglob("*.py"))]
    assert len(files) > 50  # the tree was found
    hits = [
        f"{p.relative_to(ROOT)}:{line}"
        for p in files
        if not any(p.is_relative_to(a) for a in allowed)
        for line in _system_isinstance_lines(p.read_text())
    ]
    assert hits == [], f"ask system.capabilities instead of testing the class: {hits}"


def test_the_class_check_finder_finds_them() -> None:
    source = "def f(s, n):\n    isinstance(n, int)\n    return isinstance(s, (HFSystem, VLLMSystem))\n"
    assert _system_isinstance_lines(source) == [3]
    assert _system_isinstance_lines("isinstance(s, config.FakeSystem)\n") == [1]
