"""The `pooled` engine: several engines behind one `Engine`, each request routed to its tenant's pool
(`PooledSystem.pool_for`). One load runner drives it, so every pool sees its tenants' requests on the one
arrival timeline of the workload, and the records of all pools come back as one run.

- `start()`: starts every pool concurrently; if one fails, the others are stopped and the error is raised.
- `stream()`: the pool's own stream; a tenant no pool serves is an error naming the tenants that are routed.
- `server_metrics()`: the pools' flat metrics summed key by key (counters, histogram sums and counts, running
  and waiting gauges of the deployment as a whole); usage fractions (`*_perc`) are the fullest pool's.
- `server_timings(ids)`: each pool is asked for the ids it served (engines without server timings give none).
- `stop()`: stops every pool, even if one stop fails.

Deliberately not here: the routing rule (`inferopt.config.pooled`) or any engine's own logic.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from inferopt.config import AnySystem
from inferopt.config.pooled import PooledSystem
from inferopt.engines.base import Engine, EngineBase, FinishEvent, GenRequest, SentEvent, TokenEvent
from inferopt.records import ServerTimings

__all__ = ["PooledEngine"]


class PooledEngine(EngineBase):
    """Routes each request to its tenant's pool (see module docstring); `make_engine` makes each pool's engine."""

    def __init__(self, system: PooledSystem, make_engine: Callable[[AnySystem], Engine]) -> None:
        self.system = system
        self.engines: dict[str, Engine] = {p.name: make_engine(p.system) for p in system.pools}
        self._served_by: dict[str, str] = {}  # request id -> pool name

    def _route(self, request: GenRequest) -> str:
        pool = self.system.pool_for(request.tenant)
        if pool is None:
            routed = sorted(t for p in self.system.pools for t in p.tenants)
            raise RuntimeError(
                f"pooled engine {self.system.name!r}: no pool serves tenant {request.tenant!r} "
                f"(routed tenants: {routed}); fix: list it under a pool's tenants or mark a pool default"
            )
        return pool

    async def start(self) -> None:
        results = await asyncio.gather(*(e.start() for e in self.engines.values()), return_exceptions=True)
        failed = [(name, r) for name, r in zip(self.engines, results, strict=False) if isinstance(r, BaseException)]
        if failed:
            await self.stop()
            name, exc = failed[0]
            raise RuntimeError(f"pool {name!r} did not start: {type(exc).__name__}: {exc}") from exc

    async def stop(self) -> None:
        await asyncio.gather(*(e.stop() for e in self.engines.values()), return_exceptions=True)

    def info(self) -> dict[str, Any]:
        return {
            "engine": "pooled",
            "name": self.system.name,
            "routing": {p.name: {"tenants": list(p.tenants), "default": p.default} for p in self.system.pools},
            "pools": {name: e.info() for name, e in self.engines.items()},
        }

    def prepare(self, requests: list[GenRequest]) -> None:
        by_pool: dict[str, list[GenRequest]] = {}
        for r in requests:
            pool = self.system.pool_for(r.tenant)
            if pool is not None:
                by_pool.setdefault(pool, []).append(r)
        for name, reqs in by_pool.items():
            self.engines[name].prepare(reqs)

    async def stream(self, request: GenRequest) -> AsyncIterator[SentEvent | TokenEvent | FinishEvent]:
        pool = self._route(request)
        self._served_by[request.request_id] = pool
        async for event in self.engines[pool].stream(request):
            yield event

    async def server_metrics(self) -> dict[str, float]:
        per_pool = await asyncio.gather(*(e.server_metrics() for e in self.engines.values()))
        total: dict[str, float] = {}
        for metrics in per_pool:
            for key, value in metrics.items():
                if key.endswith("_perc"):  # a usage fraction: the fullest pool's, not a sum
                    total[key] = max(total.get(key, 0.0), float(value))
                else:
                    total[key] = total.get(key, 0.0) + float(value)
        return total

    async def server_timings(self, request_ids: list[str]) -> dict[str, ServerTimings]:
        wanted: dict[str, list[str]] = {}
        for rid in request_ids:
            pool = self._served_by.get(rid)
            if pool is not None:
                wanted.setdefault(pool, []).append(rid)
        out: dict[str, ServerTimings] = {}
        for name, ids in wanted.items():
            out.update(await self.engines[name].server_timings(ids) or {})  # None: that pool has none
        return out
