"""Proposals from the cause (issue 14): from the located cause and the per-slice causes, the levers of the
baseline's own engine that serve it (`remedies.CATALOGUE`), each with its declared search space
(`config.knob_spaces`) as concrete points — one system per value, each checked by the system's validation.

A lever whose remedy does not target a located cause is not proposed (listed in `not_proposed` with why);
`control` adds one such lever as a declared control arm, which must show no gain. An empty result says why
(no cause located, an engine with no knob space of ours, no lever of it serving the cause, every value
refused) instead of raising; an unknown cause or control lever is refused before anything runs.

Deliberately not here: evaluating the points (by capacity under the SLO, `validate.capacity`), ranking them,
and the search flow.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from inferopt.choose.remedies import CATALOGUE, Remedy
from inferopt.config import AnySystem
from inferopt.config.knob_spaces import KNOB_SPACES, KnobSpace, current_value, points
from inferopt.locate.bottleneck import CAUSES

_REMEDIES = {r.name: r for r in CATALOGUE}


@dataclass(frozen=True)
class Proposal:
    """One lever for the baseline: the field, the values to try (and the systems they make), why."""

    remedy: str
    field: str
    cause: str  # the located cause it serves; "" for a control arm
    baseline_value: Any
    values: tuple[Any, ...]
    systems: tuple[AnySystem, ...]  # one per value, in order
    dropped: tuple[tuple[Any, str], ...]  # values the system refused, with its reason
    effect: str
    changes_outputs: bool  # then the quality gate is mandatory (G1)
    control: bool = False


@dataclass(frozen=True)
class Proposals:
    cause: str
    slice_causes: tuple[str, ...]
    proposals: tuple[Proposal, ...]
    not_proposed: tuple[tuple[str, str], ...]  # (field, why not)
    message: str

    def table(self) -> pd.DataFrame:
        """One row per point: remedy, field, the cause it serves, the baseline's value and the new one."""
        rows = [
            {
                "remedy": p.remedy,
                "field": p.field,
                "cause": p.cause,
                "control": p.control,
                "baseline_value": repr(p.baseline_value),
                "value": repr(v),
                "changes_outputs": p.changes_outputs,
            }
            for p in self.proposals
            for v in p.values
        ]
        return pd.DataFrame(rows)


def _remedy(space: KnobSpace) -> Remedy:
    if space.remedy not in _REMEDIES:
        raise ValueError(f"knob space {space.field!r} names remedy {space.remedy!r}, not in the remedy catalogue")
    return _REMEDIES[space.remedy]


def _proposal(
    system: AnySystem, space: KnobSpace, cause: str, control: bool, cpu_flags: frozenset[str] | None
) -> Proposal:
    remedy = _remedy(space)
    kept, dropped = points(system, space, cpu_flags)
    return Proposal(
        remedy=remedy.name,
        field=space.field,
        cause=cause,
        baseline_value=current_value(system, space.field),
        values=tuple(v for v, _ in kept),
        systems=tuple(s for _, s in kept),
        dropped=dropped,
        effect=remedy.effect,
        changes_outputs=remedy.changes_outputs,
        control=control,
    )


def propose(
    system: AnySystem,
    cause: str,
    slice_causes: Sequence[str] = (),
    *,
    control: str | None = None,
    spaces: Sequence[KnobSpace] | None = None,
    cpu_flags: frozenset[str] | None = None,
) -> Proposals:
    """The levers of `system`'s engine that serve `cause` (then each of `slice_causes`), with their points.
    `spaces`: search these instead of the engine's declared knob spaces (a user's own, e.g. one knob);
    `cpu_flags`: the host CPU's features a space may need (default: this host's, `knob_spaces.host_cpu_flags`)."""
    for c in (cause, *slice_causes):
        if c not in CAUSES:
            raise ValueError(f"unknown cause {c!r}; one of {', '.join(CAUSES)}")
    spaces = KNOB_SPACES.get(system.engine, ()) if spaces is None else tuple(spaces)
    if control is not None and control not in {s.remedy for s in spaces}:
        levers = ", ".join(sorted({s.remedy for s in spaces})) or "none"
        raise ValueError(f"control arm {control!r}: not a lever of the {system.engine} engine; its levers: {levers}")
    causes = tuple(dict.fromkeys(c for c in (cause, *slice_causes) if c != "none"))
    made: list[Proposal] = []
    skipped: list[tuple[str, str]] = []
    for space in spaces:
        remedy = _remedy(space)
        served = next((c for c in causes if c in remedy.targets), None)
        if served is None and control != remedy.name:
            skipped.append((space.field, f"{remedy.name} serves {'/'.join(remedy.targets)}, not {_names(causes)}"))
            continue
        p = _proposal(system, space, served or "", served is None, cpu_flags)
        if p.values:
            made.append(p)
        else:
            skipped.append((space.field, "every value refused: " + "; ".join(f"{v!r}: {w}" for v, w in p.dropped)))
    real = [p for p in made if not p.control]
    return Proposals(cause, tuple(slice_causes), tuple(made), tuple(skipped), _message(system, causes, spaces, real))


def _names(causes: Sequence[str]) -> str:
    return "/".join(causes) or "no located cause"


def _message(system: AnySystem, causes: tuple[str, ...], spaces: Sequence[KnobSpace], real: list[Proposal]) -> str:
    if not causes:
        return "no bottleneck located: nothing to propose (a change would treat nothing measured)"
    if not spaces:
        return (
            f"the {system.engine} engine declares no knob space: an endpoint we do not launch has its server's "
            "knobs; fix: tune the server itself, or a vllm/hf system config of it"
        )
    if not real:
        return f"no lever of the {system.engine} engine serves {_names(causes)}: nothing to propose for it"
    n_points = sum(len(p.values) for p in real)
    levers = ", ".join(f"{p.field} ({p.remedy})" for p in real)
    return f"{len(real)} levers, {n_points} points for {_names(causes)}: {levers}"
