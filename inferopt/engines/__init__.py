"""Engines behind one protocol (`inferopt.engines.base.Engine`), `make_engine(system)` to pick one, and
`unavailable_reason(system)`: what an engine's options need that this machine lacks (each engine's own check).

The hf engine's module is imported inside `make_engine`, so `import inferopt.engines` does not import
torch or transformers.

Deliberately not here: engine logic (hf/, vllm/, fake.py, openai.py, pooled.py) and scheduling policy
(scheduler.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from inferopt.config import AnySystem, FakeSystem, HFSystem, OpenAISystem, VLLMSystem
from inferopt.config.pooled import PooledSystem
from inferopt.engines.base import (
    Engine,
    EngineBase,
    FinishEvent,
    GenRequest,
    RequestRejected,
    TokenEvent,
)
from inferopt.engines.fake import FakeEngine
from inferopt.engines.hf import availability as hf_availability
from inferopt.engines.openai import OpenAIEngine
from inferopt.engines.pooled import PooledEngine
from inferopt.engines.vllm import availability as vllm_availability
from inferopt.engines.vllm.engine import VLLMEngine

__all__ = [
    "Engine",
    "EngineBase",
    "EngineFactory",
    "FinishEvent",
    "GenRequest",
    "RequestRejected",
    "TokenEvent",
    "make_engine",
    "unavailable_reason",
]

EngineFactory = Callable[[Any], Engine]  # a system -> a not-yet-started engine (`make_engine`, or a test's fake)


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
        f"no engine for {type(system).__name__}; "
        "fix: pass one of HFSystem, FakeSystem, VLLMSystem, OpenAISystem, PooledSystem"
    )


def unavailable_reason(system: AnySystem) -> str | None:
    """Why `system` cannot run on this machine (its engine's own check, nothing loaded or launched), or None
    when nothing known stands in its way (engines without such needs: fake, openai, pooled)."""
    if isinstance(system, HFSystem):
        return hf_availability.unavailable_reason(system)
    if isinstance(system, VLLMSystem):
        return vllm_availability.unavailable_reason(system)
    return None
