"""The seed's worked case as a config (SPEC E): one load of several tenants, one SLO, several serving
strategies measured on it, then one chosen.

- `tenants`: name -> a synthetic workload whose single tenant has that name, and whether the SLO judges
  it (`interactive: true`). The tenants' requests are merged onto one arrival timeline
  (`inferopt.validate.case_study.case_requests`), so e.g. short interactive chats and long offline jobs
  arrive together as they would in production.
- `strategies`: name -> either one system (`baseline` + `changes`, as a candidate writes them) or `pools`
  (pool name -> tenants + `baseline` + `changes`): a pooled deployment routed by tenant
  (`inferopt.config.pooled.PooledSystem`).

`inferopt.config.load_case(path)` is `load_config(path, kind="case")` (a file with `strategies` is detected as
a case): the same file references and the same errors. Deliberately not here: reading files (`loader.py`),
building the request table, running or deciding (`inferopt.validate.case_study`).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt, model_validator

from inferopt.config.models import (
    AnySystem,
    Frozen,
    SLOConfig,
    SystemConfig,
    WorkloadConfig,
    apply_changes,
)
from inferopt.config.pooled import Pool, PooledSystem

__all__ = ["CaseCapacity", "CaseConfig", "CasePool", "CaseStrategy", "CaseTenant"]


class CaseCapacity(Frozen):
    """How each strategy's capacity under the SLO is searched on the case's load (`validate.capacity`'s
    budget, the case's whole arrival rate scaled) and how many fresh seeds the head-to-head gets."""

    start_req_per_s: PositiveFloat | None = Field(default=None, description="None: the case's own total rate")
    max_probes: PositiveInt = 6
    rel_tol: PositiveFloat = 0.15
    requests_per_probe: PositiveInt | None = None
    min_probe_s: PositiveFloat | None = None
    max_requests_per_probe: PositiveInt = 2000
    max_halvings: NonNegativeInt = 3
    boundary_repeats: NonNegativeInt = 1
    duel_repeats: PositiveInt = Field(default=2, description="fresh seeds per side of the leader's head-to-head")

    def budget_fields(self) -> dict[str, Any]:
        """The `validate.capacity.CapacityBudget` fields."""
        return self.model_dump(exclude={"duel_repeats"})


class CaseTenant(Frozen):
    workload: WorkloadConfig
    interactive: bool = Field(default=True, description="the SLO judges this tenant's requests")


class CasePool(Frozen):
    tenants: tuple[str, ...] = ()
    default: bool = False
    baseline: SystemConfig
    changes: dict[str, Any] = Field(default_factory=dict)


class CaseStrategy(Frozen):
    """Exactly one of `baseline` (+ `changes`) or `pools`."""

    baseline: SystemConfig | None = None
    changes: dict[str, Any] = Field(default_factory=dict)
    pools: dict[str, CasePool] | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> CaseStrategy:
        if (self.baseline is None) == (self.pools is None):
            raise ValueError(
                "give exactly one of `baseline` (one system, + `changes`) or `pools` (a pooled "
                "deployment routed by tenant); fix: e.g. baseline: ../systems/vllm-tiny.yaml"
            )
        if self.pools is not None and self.changes:
            raise ValueError("`changes` goes inside each pool of a pooled strategy; fix: move it under pools.<name>")
        self.system("check")  # every change applies (raises naming the path)
        return self

    def system(self, name: str) -> AnySystem | PooledSystem:
        """The system this strategy runs, named `name`."""
        if self.baseline is not None:
            sys = apply_changes(self.baseline, self.changes) if self.changes else self.baseline
            return sys.model_copy(update={"name": name})
        assert self.pools is not None
        pools = tuple(
            Pool(
                name=pname,
                tenants=p.tenants,
                default=p.default,
                system=(apply_changes(p.baseline, p.changes) if p.changes else p.baseline).model_copy(
                    update={"name": f"{name}-{pname}"}
                ),
            )
            for pname, p in self.pools.items()
        )
        return PooledSystem(name=name, pools=pools)


class CaseConfig(Frozen):
    name: str
    description: str = ""
    tenants: dict[str, CaseTenant]
    slo: SLOConfig
    strategies: dict[str, CaseStrategy]
    capacity: CaseCapacity = Field(
        default_factory=CaseCapacity, description="the capacity search that decides the case (issue 14 item 5)"
    )
    warmup_requests: NonNegativeInt = Field(
        default=2,
        description="sent one at a time before the clock starts, not "
        "counted: the timeline's first rows; every tenant's first request arrives at 0 s, so "
        "at least one per tenant warms every pool",
    )

    @model_validator(mode="after")
    def _consistent(self) -> CaseConfig:
        for name, t in self.tenants.items():
            own = [x.name for x in t.workload.tenants]
            if own != [name]:
                raise ValueError(
                    f"tenants.{name}: its workload's tenants are {own}; fix: give that workload exactly "
                    f"one tenant named {name!r} (tenants: [{{name: {name}, priority: ...}}])"
                )
        wl_names = [t.workload.name for t in self.tenants.values()]
        if len(set(wl_names)) != len(wl_names):
            raise ValueError(
                f"the tenants' workloads share names {wl_names} (request ids would collide); fix: rename one"
            )
        if not any(t.interactive for t in self.tenants.values()):
            raise ValueError("no tenant is interactive: the SLO would judge nothing; fix: set interactive: true on one")
        if len(self.strategies) < 2:
            raise ValueError("a case compares strategies; fix: give at least two")
        for sname, st in self.strategies.items():
            sys = st.system(sname)
            if isinstance(sys, PooledSystem):
                lost = [t for t in self.tenants if sys.pool_for(t) is None]
                if lost:
                    raise ValueError(
                        f"strategies.{sname}: no pool serves tenants {lost}; fix: list them under a "
                        "pool's tenants or mark one pool default: true"
                    )
        return self

    @property
    def interactive_tenants(self) -> tuple[str, ...]:
        return tuple(n for n, t in self.tenants.items() if t.interactive)
