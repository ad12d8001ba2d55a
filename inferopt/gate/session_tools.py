"""The gate's tool-argument evidence from the load itself: sessions' tool-call turns, as each arm served them.

Input: the ablation's request records of both arms (`inferopt.measure.tool_turns` filled the `tool_*` fields). A
document is a turn's ask (its request id: the same ask on both arms), its value the mean over the arm's trials;
documents are paired across arms and compared with `sliced.compare` (paired bootstrap CI, margin, mde), in slices
named `sessions:task=tool[,lang=..]` — kept apart from the suite's own tool slice, not pooled: these answers come
from the arm's own served model under load with a session's history before the ask, the suite's from the model it
evaluates (often a proxy) on bare prompts; pooling would mix two models and two contexts in one mean. The slices
count in the suite's overall status like its others. Turns whose answer cannot be read as text (the fake engine)
give one `not_applicable` row with the reason, never a pass.

Deliberately not here: asking and scoring the turns (`inferopt.measure.tool_turns`), the suite (`suite_gate.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterable, Literal

import numpy as np
import pandas as pd

from inferopt.config import GateSettings
from inferopt.gate.sliced import accuracy_by_slice, compare, overall_status
from inferopt.gate.suite_gate import SuiteGate
from inferopt.records import RequestRecord

SessionToolStatus = Literal["pass", "fail", "inconclusive", "uninformative", "not_applicable", "none"]
TASK_NAME = "sessions_tool"
PREFIX = "sessions:"
_METRICS = {
    "exact": None,
    "json_valid": "tool_json_valid",
    "args_exact": "tool_args_ok",
    "numbers_exact": "tool_numbers_ok",
}


@dataclass(frozen=True)
class SessionTools:
    status: SessionToolStatus  # "none": the load asked for no tool call
    reasons: list[str]
    table: pd.DataFrame = field(default_factory=pd.DataFrame)  # rows as `sliced.compare`'s, slices prefixed
    counts: dict[str, dict[str, int]] = field(default_factory=dict)  # arm -> asked / scored / not_applicable
    samples: dict[str, pd.DataFrame] = field(default_factory=dict)  # arm -> one row per (ask, metric)


def _asked(records: Iterable[RequestRecord]) -> list[RequestRecord]:
    return [r for r in records if r.tool_ask_id and not r.warmup]


def turn_samples(records: Iterable[RequestRecord]) -> pd.DataFrame:
    """One row per (scored ask, metric), value = the mean over the arm's trials, in `sliced.py`'s samples format."""
    rows = []
    for r in _asked(records):
        if r.tool_args_ok is None:
            continue
        base = {"task_name": TASK_NAME, "doc_id": r.request_id, "id": r.request_id, "task": "tool"}
        base |= {"lang": r.tool_lang, "context": "session", "risk": "high", "distance": np.nan}
        for metric, attr in _METRICS.items():
            value = (r.tool_answer or "").strip() == r.tool_expected.strip() if attr is None else getattr(r, attr)
            rows.append(base | {"response": r.tool_answer, "metric": metric, "value": float(bool(value))})
    if not rows:
        return pd.DataFrame()
    df = pd.DataFrame(rows)
    keys = [c for c in df.columns if c not in ("value", "response")]
    first = df.groupby(keys, as_index=False, dropna=False).agg(value=("value", "mean"), response=("response", "first"))
    return first


def _counts(records: list[RequestRecord]) -> dict[str, int]:
    asked = _asked(records)
    scored = [r for r in asked if r.tool_args_ok is not None]
    return {"asked": len(asked), "scored": len(scored), "not_applicable": len(asked) - len(scored)}


def session_tool_gate(base: list[RequestRecord], cand: list[RequestRecord], gate: GateSettings) -> SessionTools:
    """Both arms' tool-call turns compared per slice (see the module docstring)."""
    counts = {"baseline": _counts(base), "candidate": _counts(cand)}
    if not any(c["asked"] for c in counts.values()):
        return SessionTools("none", [], counts=counts)
    bs, cs = turn_samples(base), turn_samples(cand)
    if bs.empty or cs.empty:
        notes = sorted({r.tool_note for r in _asked(base) + _asked(cand) if r.tool_note})
        why = "; ".join(notes) or "no turn was scored on one arm"
        row = {"slice": f"{PREFIX}task=tool", "metric": "args_exact", "n": 0, "status": "not_applicable"}
        line = f"  sessions' tool-call turns: not applicable ({why}; asked {counts})"
        return SessionTools("not_applicable", [line], pd.DataFrame([row]), counts)
    table = compare(
        bs,
        cs,
        margin=gate.quality_margin,
        slice_margins=gate.slice_margins,
        mlperf_ratio=gate.mlperf_ratio,
        alpha=gate.quality_alpha,
        samples=gate.quality_bootstrap,
    )
    table = table[~table["slice"].isin(["risk=high"])].assign(slice=lambda t: PREFIX + t["slice"])
    informative = table[table["status"] != "uninformative"]
    status: SessionToolStatus = overall_status(table) if len(informative) else "uninformative"  # type: ignore[assignment]
    samples = {"baseline": bs, "candidate": cs}
    return SessionTools(status, _lines(status, table, counts, gate), table.reset_index(drop=True), counts, samples)


def _lines(status: str, table: pd.DataFrame, counts: dict[str, dict[str, int]], gate: GateSettings) -> list[str]:
    out = [
        f"  sessions' tool-call turns (each arm's served answers, apart from the suite's tool slice): {status}; "
        + ", ".join(f"{arm} asked {c['asked']}, scored {c['scored']}" for arm, c in counts.items())
    ]
    pct = 100 * (1 - gate.quality_alpha)
    for r in table[table["metric"] == "args_exact"].itertuples():
        out.append(
            f"    {r.status}: {r.slice} args_exact {r.base_mean:.3f} -> {r.cand_mean:.3f} (diff {r.diff:+.3f}, "
            f"{pct:.0f}% CI [{r.ci_lo:+.3f}, {r.ci_hi:+.3f}], n={r.n}, mde {r.mde:.2f})"
        )
    return out


_RANK = {"pass": 0, "inconclusive": 1, "fail": 2}


def fold_session_tools(suite: SuiteGate, st: SessionTools) -> SuiteGate:
    """The suite with the sessions' tool slices added: rows, samples, reasons and status. The worse of the two
    informative statuses counts; a skipped suite stays skipped unless the sessions' slice fails (one task's
    pass is not the whole suite's)."""
    if st.status == "none":
        return suite
    status = suite.status
    if st.status in _RANK:
        if suite.status in _RANK:
            status = max(suite.status, st.status, key=_RANK.__getitem__)  # type: ignore[assignment]
        elif st.status == "fail":
            status = "fail"
    samples = suite.samples | {f"sessions_{arm}": s for arm, s in st.samples.items()}
    table = pd.concat([suite.table, st.table], ignore_index=True) if len(suite.table) else st.table
    acc = [accuracy_by_slice(s).assign(arm=arm) for arm, s in st.samples.items()]  # context "session"
    accuracy = pd.concat([suite.accuracy, *acc], ignore_index=True) if acc else suite.accuracy
    reasons = [*suite.reasons, *st.reasons]
    return replace(suite, status=status, reasons=reasons, table=table, samples=samples, accuracy=accuracy)
