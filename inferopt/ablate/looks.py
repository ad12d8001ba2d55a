"""The sequential design's looks (`inferopt.ablate.run`): when an arm is decided, why the run stopped, and the
table of every look's target effects.

An arm is decided when every target moved beyond noise, or when the harm family found a regression beyond
tolerance. Deliberately not here: the tests themselves (`ablate.compare`) and the alpha per look
(`AblationSettings.alpha_per_look`).
"""

from __future__ import annotations

import pandas as pd


def _all_targets_significant(effects: pd.DataFrame, targets: tuple[str, ...]) -> bool:
    sub = effects[effects["metric"].isin(targets)]
    return len(sub) == len(set(targets)) and bool(sub["significant"].all())


def _harmed(effects: pd.DataFrame) -> list[str]:
    """The metrics the harm family found worse beyond tolerance at this look."""
    return effects.loc[effects["harm"].astype(bool), "metric"].tolist() if "harm" in effects else []


def arm_decided(effects: pd.DataFrame, targets: tuple[str, ...]) -> bool:
    """An arm needs no more repeats when every target moved beyond noise, or when a regression beyond tolerance
    was found (its verdict fails on harm whatever further repeats say of the targets). Either is a rejection
    at this look's alpha / K, so stopping on it keeps the Bonferroni bound."""
    return _all_targets_significant(effects, targets) or bool(_harmed(effects))


def decided_reason(effects: dict[str, pd.DataFrame], targets: tuple[str, ...]) -> str:
    """Why the run stopped when every tested arm (`effects`, by name) is decided: naming the arms settled by harm."""
    harmed = {n: h for n, e in effects.items() if not _all_targets_significant(e, targets) and (h := _harmed(e))}
    if not harmed:
        return "every tested arm has every target metric beyond noise"
    which = "; ".join(f"{n}: {', '.join(h)}" for n, h in harmed.items())
    return f"every tested arm is decided: every target beyond noise, or a regression beyond tolerance ({which})"


def looks_table(
    look: int,
    repeats: int,
    alpha: float,
    effects: dict[str, pd.DataFrame],
    decided: dict[str, bool],
    targets: tuple[str, ...],
    stop: bool,
) -> list[dict]:
    """One row per (arm, target metric) at this look: its effect, and whether it settled the arm and the run."""
    rows = []
    for name, eff in effects.items():
        for r in eff[eff["metric"].isin(targets)].itertuples():
            rows.append(
                {
                    "look": look,
                    "repeats": repeats,
                    "alpha": alpha,
                    "arm": name,
                    "metric": r.metric,
                    "diff": r.diff,
                    "diff_lo": r.diff_lo,
                    "diff_hi": r.diff_hi,
                    "ratio": r.ratio,
                    "p_value": r.p_value,
                    "significant": bool(r.significant),
                    "in_stopping_rule": name in decided,
                    "arm_decided": decided.get(name),
                    "stop": stop,
                }
            )
    return rows
