"""The planted diagnostic decode delay on vLLM (benchmarks/verdict_error_rates.py --engine vllm): the knob reaches
the server only through its own environment variable, and our vLLM plugin (scripts/vllm_plugin) holds (busy) the
steps that decode and in no other. vLLM's scheduler is a stub module here (vLLM is not in this virtualenv)."""

from __future__ import annotations

import runpy
import sys
import time
import types
from pathlib import Path

import pytest

from inferopt.config import ModelSpec, VLLMSystem, load_config
from inferopt.config.models import CandidateConfig
from inferopt.engines.vllm.serve import DECODE_DELAY_ENV, server_env

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "scripts/vllm_plugin/inferopt_vllm_diagnostic.py"


def _sys(**kw: object) -> VLLMSystem:
    return VLLMSystem(model=ModelSpec(path="builtin:tiny-llama"), **kw)


def test_the_delay_reaches_the_server_only_from_its_knob() -> None:
    assert DECODE_DELAY_ENV not in server_env(_sys(), base={DECODE_DELAY_ENV: "5"})  # never inherited
    assert float(server_env(_sys(diagnostic_decode_delay_ms=2.5), base={})[DECODE_DELAY_ENV]) == 2.5


def test_a_vllm_candidate_planting_the_delay_must_say_diagnostic() -> None:
    d = load_config(ROOT / "configs/candidates/vllm-chunked-prefill.yaml").model_dump()
    d["changes"] = {"diagnostic_decode_delay_ms": 3.0}
    with pytest.raises(ValueError, match="diagnostic_decode_delay_ms = 3 .*declare the candidate diagnostic"):
        CandidateConfig.model_validate(d)
    assert CandidateConfig.model_validate({**d, "diagnostic": True}).candidate_system.diagnostic_decode_delay_ms == 3


class _Req:
    def __init__(self, prompt: int, computed: int) -> None:
        self.num_prompt_tokens, self.num_computed_tokens = prompt, computed


class _Scheduler:
    def __init__(self, requests: dict[str, _Req]) -> None:
        self.requests = requests

    def update_from_output(self, scheduler_output: object, model_runner_output: object) -> str:
        return "out"


@pytest.fixture
def stub_vllm(monkeypatch: pytest.MonkeyPatch) -> type[_Scheduler]:
    cls = type("Scheduler", (_Scheduler,), {})
    mod = types.ModuleType("vllm.v1.core.sched.scheduler")
    mod.Scheduler = cls  # type: ignore[attr-defined]
    for name in ("vllm", "vllm.v1", "vllm.v1.core", "vllm.v1.core.sched"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "vllm.v1.core.sched.scheduler", mod)
    return cls


def _register() -> None:
    """What vLLM does in each process it starts: call the plugin's entry point (a fresh import each time)."""
    runpy.run_path(str(PLUGIN), run_name="inferopt_vllm_diagnostic")["register"]()


def _step(s: _Scheduler, *req_ids: str) -> float:
    out = types.SimpleNamespace(num_scheduled_tokens={r: 1 for r in req_ids})
    t0 = time.perf_counter()
    assert s.update_from_output(out, None) == "out"
    return time.perf_counter() - t0


def test_the_plugin_holds_decoding_steps_only(stub_vllm: type[_Scheduler], monkeypatch) -> None:
    monkeypatch.setenv(DECODE_DELAY_ENV, "80")
    _register()
    _register()  # vLLM may load plugins more than once: planted once
    s = stub_vllm({"pre": _Req(prompt=10, computed=10), "dec": _Req(prompt=10, computed=12)})
    assert _step(s, "pre") < 0.04  # the step that finishes a prompt (its first token) is not delayed
    assert 0.075 < _step(s, "dec") < 0.16  # a decode step is held once, not twice
    assert 0.075 < _step(s, "pre", "dec") < 0.16  # a mixed step decodes too
    assert _step(s, "gone") < 0.04  # a request the scheduler no longer holds is skipped


def test_without_the_knob_the_plugin_patches_nothing(stub_vllm: type[_Scheduler], monkeypatch) -> None:
    monkeypatch.delenv(DECODE_DELAY_ENV, raising=False)
    real = stub_vllm.update_from_output
    _register()
    monkeypatch.setenv(DECODE_DELAY_ENV, "0")
    _register()
    assert stub_vllm.update_from_output is real


def test_a_planted_delay_without_the_plugin_is_refused_at_start(tmp_path: Path) -> None:
    import asyncio

    from inferopt.engines.vllm.engine import VLLMEngine

    bare = tmp_path / "python"  # an interpreter without the plugin: this virtualenv's own
    bare.symlink_to(sys.executable)
    engine = VLLMEngine(_sys(python=str(bare), diagnostic_decode_delay_ms=5.0), log_dir=tmp_path)
    with pytest.raises(RuntimeError, match="lacks inferopt's vLLM plugin.*fix: bash scripts/setup_vllm.sh"):
        asyncio.run(engine.start())
