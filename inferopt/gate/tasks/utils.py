"""lm-eval hooks for the inferopt quality suite: the dataset loader and per-document metrics.

`load` reads `<data_dir>/<task>.jsonl` (default: `data/` beside this file, generated from
`inferopt.model.quality.corpus`; on a GPU point `data_dir` at real task data with the same columns:
id, prompt, answer, slice{task, lang, context, risk}, choices, gold). Paths are anchored here, not to the
working directory. `process_gen` scores generate-until answers (exact match after stripping; for tool
calls also JSON validity and argument exactness, `inferopt.model.quality.toolcall`); multiple-choice log-likelihoods
are scored by lm-eval itself and calibrated by `inferopt.gate.sliced`.

Deliberately not here: statistics across documents (slices, CIs) — lm-eval's own stderr is analytic and
unsliced; `inferopt.gate.sliced` computes the paired per-slice intervals from the logged samples.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from inferopt.model.quality.toolcall import score_tool_call

HERE = Path(__file__).resolve().parent


def load(task: str, data_dir: str | None = None, **_: Any):
    import datasets

    base = Path(data_dir or os.environ.get("INFEROPT_QUALITY_DATA") or HERE / "data")
    path = base / f"{task}.jsonl"
    if not path.is_file():
        raise FileNotFoundError(
            f"quality data {path} not found; fix: run `python -m inferopt.model.quality.corpus` or set "
            "INFEROPT_QUALITY_DATA to a directory with <task>.jsonl files"
        )
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    for r in rows:
        r.setdefault("choices", [])
        r.setdefault("gold", -1)
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})


def process_gen(doc: dict[str, Any], results: list[str]) -> dict[str, float]:
    got = (results[0] if results else "").strip()
    out = {"exact": float(got == doc["answer"].strip())}
    if doc["slice"]["task"] == "tool":  # the one definition the session runner scores with too
        score = score_tool_call(got, doc["answer"])
        out["json_valid"] = float(score.json_valid)
        out["args_exact"] = float(score.args_ok)
        out["numbers_exact"] = float(score.numbers_ok)  # the high-risk numbers: order id and (refunds) amount
    return out
