"""Engines behind one protocol (`inferopt.engines.base.Engine`) and `make_engine(system)` to pick one.

Engine modules are imported lazily inside `make_engine`, so `import inferopt.engines` does not import
torch or transformers.

Deliberately not here: engine logic (hf.py, fake.py) and scheduling policy (scheduler.py).
"""

from __future__ import annotations

from inferopt.config import FakeSystem, HFSystem
from inferopt.engines.base import (
    Engine,
    FinishEvent,
    GenRequest,
    RequestRejected,
    TokenEvent,
)

__all__ = ["Engine", "FinishEvent", "GenRequest", "RequestRejected", "TokenEvent", "make_engine"]


def make_engine(system: HFSystem | FakeSystem) -> Engine:
    """A not-yet-started engine for `system` (dispatch on its pydantic type)."""
    if isinstance(system, HFSystem):
        from inferopt.engines.hf import HFEngine

        return HFEngine(system)
    if isinstance(system, FakeSystem):
        from inferopt.engines.fake import FakeEngine

        return FakeEngine(system)
    raise TypeError(f"no engine for {type(system).__name__}; fix: pass an HFSystem or FakeSystem")
