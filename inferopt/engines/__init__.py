"""Engines behind one protocol (`inferopt.engines.base.Engine`) and `make_engine(system)` to pick one.

Engine modules are imported lazily inside `make_engine`, so `import inferopt.engines` does not import
torch or transformers.

Deliberately not here: engine logic (`hf/`, `fake.py`, `vllm/`, `openai.py`, `pooled.py`) and scheduling policy
(`scheduler.py`).
"""

from __future__ import annotations

from inferopt.config import AnySystem, FakeSystem, HFSystem, OpenAISystem, VLLMSystem
from inferopt.engines.base import (
    Engine,
    FinishEvent,
    GenRequest,
    RequestRejected,
    TokenEvent,
)

__all__ = ["Engine", "FinishEvent", "GenRequest", "RequestRejected", "TokenEvent", "make_engine"]


def make_engine(system: AnySystem) -> Engine:
    """A not-yet-started engine for `system` (dispatch on its pydantic type)."""
    if isinstance(system, HFSystem):
        from inferopt.engines.hf.engine import HFEngine

        return HFEngine(system)
    if isinstance(system, FakeSystem):
        from inferopt.engines.fake import FakeEngine

        return FakeEngine(system)
    if isinstance(system, VLLMSystem):
        from inferopt.engines.vllm.engine import VLLMEngine

        return VLLMEngine(system)
    if isinstance(system, OpenAISystem):
        from inferopt.engines.openai import OpenAIEngine

        return OpenAIEngine(system)
    from inferopt.config.pooled import PooledSystem

    if isinstance(system, PooledSystem):
        from inferopt.engines.pooled import PooledEngine

        return PooledEngine(system)
    raise TypeError(
        f"no engine for {type(system).__name__}; "
        "fix: pass one of HFSystem, FakeSystem, VLLMSystem, OpenAISystem, PooledSystem"
    )
