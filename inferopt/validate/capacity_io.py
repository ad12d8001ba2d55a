"""A capacity search's result as one plain JSON file beside its probes, so it can travel (issue 14, dispatch).

A Prefect worker on another node runs a point's capacity search into its own directory and ships the directory;
the process that runs the search reads the result back from wherever it landed. Each probe's `records_path`
is written relative to the directory it lies under and resolved against the directory it is read from, so the
simulator's calibration (which reads the probes' records) works on the copy. No pickles.

Deliberately not here: running the search (`validate.capacity`) or moving the files (tasks/dispatch.py).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from inferopt.validate.capacity import CapacityResult, Probe

FILENAME = "capacity.json"
_FORMAT = 1


def _relative(path: str, root: Path) -> str:
    p = Path(path)
    try:
        return p.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:  # not under the point's directory: kept as it was (it does not travel)
        return path


def _probe_dict(p: Probe, root: Path) -> dict[str, Any]:
    d = asdict(p)
    d["records_path"] = _relative(p.records_path, root)
    d["reasons"] = list(p.reasons)
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in d.items()}


def _probe(d: dict[str, Any], root: Path) -> Probe:
    known = {f.name for f in fields(Probe)}
    data = {k: v for k, v in d.items() if k in known}
    for f in fields(Probe):  # JSON has no NaN: a missing float metric was NaN
        if f.name in data and data[f.name] is None and f.type in ("float", float):
            data[f.name] = math.nan
    rel = Path(data["records_path"])
    data["records_path"] = str(rel if rel.is_absolute() else root / rel)
    data["reasons"] = tuple(data.get("reasons", ()))
    return Probe(**data)


def save_capacity(result: CapacityResult, root: str | Path) -> Path:
    """Write `result` to `<root>/capacity.json` (probes' records paths relative to `root`); returns the path."""
    root = Path(root)
    data = {
        "format": _FORMAT,
        "status": result.status,
        "req_per_s": None if math.isnan(result.req_per_s) else result.req_per_s,
        "lo_req_per_s": result.lo_req_per_s,
        "hi_req_per_s": result.hi_req_per_s,
        "message": result.message,
        "probes": [_probe_dict(p, root) for p in result.probes],
        "repeats": [_probe_dict(p, root) for p in result.repeats],
        "saturated_req_per_s": result.saturated_req_per_s,
        "slo_bounds_ms": result.slo_bounds_ms,
    }
    path = root / FILENAME
    path.write_text(json.dumps(data, indent=1, allow_nan=False))
    return path


def load_capacity(root: str | Path) -> CapacityResult:
    """The result `save_capacity` wrote under `root` (here, or a copy of that directory on another machine);
    ValueError naming the file when it is missing or not this format."""
    root = Path(root)
    path = root / FILENAME
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a capacity result ({type(exc).__name__}: {exc})") from None
    if data.get("format") != _FORMAT:
        raise ValueError(f"{path}: capacity result format {data.get('format')!r}, this code reads {_FORMAT}")
    rate = data["req_per_s"]
    return CapacityResult(
        status=data["status"],
        req_per_s=math.nan if rate is None else float(rate),
        lo_req_per_s=data["lo_req_per_s"],
        hi_req_per_s=data["hi_req_per_s"],
        message=data["message"],
        probes=tuple(_probe(p, root) for p in data["probes"]),
        repeats=tuple(_probe(p, root) for p in data["repeats"]),
        saturated_req_per_s=data["saturated_req_per_s"],
        slo_bounds_ms=dict(data["slo_bounds_ms"]),
    )
