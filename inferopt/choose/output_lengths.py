"""Which output-length mode an arm pair runs with: `natural` when the candidate's changes can change outputs
(a change in verbosity is then part of the effect), else the workload's own (`inferopt.workload.output_lengths`).

Deliberately not here: the modes themselves, sending them, and linting them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from inferopt.choose.remedies import remedies_for_changes
from inferopt.config import CandidateConfig, WorkloadConfig


def can_change_outputs(changes: Mapping[str, Any]) -> bool:
    """True when a changed field's remedy can change outputs, or a changed field is not in the catalogue."""
    remedies, unmatched = remedies_for_changes(changes)
    return any(r.changes_outputs for r in remedies) or bool(unmatched)


def arm_workload(candidate: CandidateConfig) -> WorkloadConfig:
    """The workload the candidate's arms replay: `output_lengths: natural` when undeclared and the changes can
    change outputs; otherwise the workload as given (declared modes always win)."""
    wl = candidate.workload
    if wl.output_lengths is None and can_change_outputs(candidate.changes):
        return wl.model_copy(update={"output_lengths": "natural"})
    return wl
