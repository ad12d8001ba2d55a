"""Engines behind one protocol (`inferopt.engines.base.Engine`) and `make_engine(system)` to pick one.

The hf engine's module is imported inside `make_engine`, so `import inferopt.engines` does not import
torch or transformers.

Deliberately not here: engine logic (hf.py, fake.py, vllm.py, openai.py) and scheduling policy (scheduler.py).
"""

from __future__ import annotations

from inferopt.config import AnySystem, FakeSystem, HFSystem, OpenAISystem, VLLMSystem
from inferopt.config.pooled import PooledSystem
from inferopt.engines.base import (
    Engine,
    FinishEvent,
    GenRequest,
    RequestRejected,
    TokenEvent,
)
from inferopt.engines.fake import FakeEngine
from inferopt.engines.openai import OpenAIEngine
from inferopt.engines.pooled import PooledEngine
from inferopt.engines.vllm.engine import VLLMEngine

__all__ = ["Engine", "FinishEvent", "GenRequest", "RequestRejected", "TokenEvent", "make_engine"]


def make_engine(system: AnySystem) -> Engine:
    """A not-yet-started engine for `system` (dispatch on its pydantic type)."""
    if isinstance(system, HFSystem):
        from inferopt.engines.hf.engine import HFEngine  # lazy: imports torch and transformers

        return HFEngine(system)
    if isinstance(system, FakeSystem):
        return FakeEngine(system)
    if isinstance(system, VLLMSystem):
        return VLLMEngine(system)
    if isinstance(system, OpenAISystem):
        return OpenAIEngine(system)
    if isinstance(system, PooledSystem):
        return PooledEngine(system, make_engine)
    raise TypeError(
        f"no engine for {type(system).__name__}; fix: pass one of HFSystem, FakeSystem, VLLMSystem, OpenAISystem, PooledSystem"
    )
