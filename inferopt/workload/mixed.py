"""Several tenants' workloads on one arrival timeline (the seed's case: interactive chats beside offline jobs).

`merge_timeline` puts tables built from different workloads on one clock (sorted by arrival; each workload's
prefix groups kept apart). `MixedLoad` is such a mix as one load a capacity search can scale: every part's
rate times the same factor, so the mix and each part's lengths stay as declared, and `judged` names the
tenants whose requests the SLO judges (the others are served and counted, but carry no latency promise).

Deliberately not here: scaling and replaying it (`validate.capacity`), the case config (`config.case`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pandas as pd

from inferopt.config import WorkloadConfig
from inferopt.workload.build import workload_hash


def merge_timeline(tables: list[pd.DataFrame]) -> pd.DataFrame:
    """The tables on one timeline: sorted by arrival (ties by request id), prefix groups renumbered so that
    two workloads' groups never share a prefix; the merged table's content hash in `attrs`."""
    out, group_base = [], 0
    for tab in tables:
        tab = tab.copy()
        groups = tab["prefix_group"].to_numpy()
        tab["prefix_group"] = [g + group_base if g >= 0 else -1 for g in groups]
        group_base += int(groups.max()) + 1 if (groups >= 0).any() else 0
        out.append(tab)
    merged = pd.concat(out, ignore_index=True).sort_values(["arrival_offset_s", "request_id"], kind="stable")
    merged = merged.reset_index(drop=True)
    merged.attrs["content_hash"] = workload_hash(merged)
    return merged


@dataclass(frozen=True)
class MixedLoad:
    """Workloads arriving together, scaled together; the SLO judges the `judged` tenants' requests only."""

    parts: tuple[WorkloadConfig, ...]
    judged: tuple[str, ...]
    name: str = "mixed"

    def __post_init__(self) -> None:
        if not self.parts:
            raise ValueError("a mixed load needs at least one workload; fix: give its parts")
        names = [t.name for p in self.parts for t in p.tenants]
        unknown = sorted(set(self.judged) - set(names))
        if not self.judged or unknown:
            raise ValueError(
                f"mixed load {self.name!r}: judged tenants {list(self.judged)} must be non-empty tenants of its "
                f"workloads {names}; fix: name the tenants the SLO promises"
            )

    @property
    def seed(self) -> int:
        return self.parts[0].seed

    @property
    def num_requests(self) -> int:
        return sum(p.num_requests for p in self.parts)

    @property
    def timeout_s(self) -> float:
        return max(p.timeout_s for p in self.parts)

    def reseeded(self, seed: int) -> MixedLoad:
        """The same mix drawn again: every part's seed moved by the same offset (the parts stay distinct)."""
        shift = seed - self.seed
        return replace(self, parts=tuple(p.model_copy(update={"seed": p.seed + shift}) for p in self.parts))
