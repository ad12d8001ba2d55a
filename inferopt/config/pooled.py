"""A pooled deployment as one system: several engine pools, each serving the requests of its tenants
(e.g. an interactive pool and an offline pool, SPEC E "pooled + chunked prefill").

`PooledSystem.pool_for(tenant)` is the routing rule: a request goes to the pool that lists its tenant, or
to the pool marked `default` when none does; with no default pool an unlisted tenant is an error.

It is deliberately not a member of the `SystemConfig` union a candidate's `baseline` is validated against:
the ablation and the locate step reason about one engine's knobs, which a router over several engines does
not have. The case study (`inferopt.validate.case_study`) builds one and hands it to `run_system`.

Deliberately not here: routing at run time (`inferopt.engines.pooled`) or launching anything.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from inferopt.config.capabilities import Capabilities
from inferopt.config.systems import Frozen, SystemConfig

__all__ = ["Pool", "PooledSystem"]


class Pool(Frozen):
    """One pool: an engine and the tenants it serves."""

    name: str
    tenants: tuple[str, ...] = Field(default=(), description="the tenants routed here")
    default: bool = Field(default=False, description="also takes every tenant no pool lists")
    system: SystemConfig


class PooledSystem(Frozen):
    engine: Literal["pooled"] = "pooled"
    name: str = "pooled"
    pools: tuple[Pool, ...]

    @model_validator(mode="after")
    def _routable(self) -> PooledSystem:
        if not self.pools:
            raise ValueError("pools is empty; fix: give at least one pool with its tenants")
        names = [p.name for p in self.pools]
        if len(set(names)) != len(names):
            raise ValueError(f"pool names must be unique, got {names}; fix: rename one")
        seen: dict[str, str] = {}
        for p in self.pools:
            for t in p.tenants:
                if t in seen:
                    raise ValueError(
                        f"tenant {t!r} is listed by pools {seen[t]!r} and {p.name!r}; fix: route it to one"
                    )
                seen[t] = p.name
        defaults = [p.name for p in self.pools if p.default]
        if len(defaults) > 1:
            raise ValueError(f"pools {defaults} are all marked default; fix: mark at most one")
        for p in self.pools:
            if not p.tenants and not p.default:
                raise ValueError(
                    f"pool {p.name!r} lists no tenants and is not the default: it would get no request; "
                    "fix: list its tenants or set default: true"
                )
        return self

    @property
    def capabilities(self) -> Capabilities:
        """A router's own: nothing per engine (its pools declare theirs, in `pools`), processes if a pool has."""
        caps = [p.system.capabilities for p in self.pools]
        caches = {c.prefix_cache for c in caps}
        return Capabilities(
            engine="pooled",
            queue_bound=None,
            queue_bound_knob=None,  # each pool has its own bound
            max_running=None,
            kv_budget=None,
            prefix_cache=True if True in caches else (None if None in caches else False),
            prefix_cache_reset=None,
            launches_processes=any(c.launches_processes for c in caps),
            replicable=False,
            quality_eval=None,
            scripted_timings=False,
            op_profile=False,
            cpu_threads=1,
            in_process_model=False,
            stops_at_eos=None,
            verbatim_args=(),
            speculative=None,
            model=None,
            vocab_size=None,
            pools=tuple(p.system for p in self.pools),
            knobs=(),
            forces_lengths=all(c.forces_lengths for c in caps),
        )

    def with_queue_bound(self, limit: int | None) -> None:
        """None: a pooled deployment has one bound per pool, not one to set."""
        return None

    def pool_for(self, tenant: str) -> str | None:
        """The name of the pool that serves `tenant` (None: no pool does)."""
        for p in self.pools:
            if tenant in p.tenants:
                return p.name
        return next((p.name for p in self.pools if p.default), None)
