"""Run the quality suite with lm-eval, as its users run it, and return one tidy row per document.

In-memory (`run_in_memory`): an already-loaded model object goes to `HFLM(pretrained=model)`, so quantized
weights or a KV-cache variant are evaluated exactly as they are served in-process. Served
(`run_served`): lm-eval's `local-completions` against an OpenAI-compatible endpoint (vLLM arms), with token
ids and prompt log-probabilities so log-likelihood tasks match the in-memory path.

Both return `SuiteResult`: lm-eval's own aggregate results (logged as-is) plus `samples`, one row per
(document, metric) with the document's slice — the input of the paired per-slice statistics in `sliced.py`.

Deliberately not here: statistics (sliced.py), model loading and quantization (engines / ablation arms).
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

TASK_DIR = Path(__file__).resolve().parent / "tasks"
SUITE = ("inferopt_arith", "inferopt_kv", "inferopt_tool", "inferopt_mc")


@dataclass
class SuiteResult:
    results: dict[str, Any]     # lm-eval's `results` (per task aggregates, analytic stderr)
    samples: pd.DataFrame       # doc_id, id, task, lang, context, risk, metric, value (+ mc columns)


def _offline_env() -> None:
    import logging

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    logging.getLogger("lm_eval").setLevel(logging.ERROR)


def samples_frame(samples: dict[str, list[dict[str, Any]]]) -> pd.DataFrame:
    """lm-eval's logged samples -> long table: one row per (document, metric). Multiple-choice rows also
    carry the softmax of the choice log-likelihoods (`p_gold`, `p_max`, `pred`) for calibration."""
    rows = []
    for task, docs in samples.items():
        for s in docs:
            doc = s["doc"]
            sl = doc["slice"]
            base = {"task_name": task, "doc_id": s["doc_id"], "id": doc["id"], "task": sl["task"], "lang": sl["lang"],
                    "context": sl["context"], "risk": sl["risk"]}
            extra: dict[str, Any] = {}
            if doc.get("choices"):
                lls = [float(r[0]) if isinstance(r, (list, tuple)) else float(r) for r in s["filtered_resps"]]
                m = max(lls)
                ps = [math.exp(x - m) for x in lls]
                z = sum(ps)
                ps = [p / z for p in ps]
                gold = int(doc["gold"])
                extra = {"p_gold": ps[gold], "p_max": max(ps), "pred": int(max(range(len(ps)), key=ps.__getitem__)),
                         "gold": gold}
            for metric in ("exact", "json_valid", "args_exact", "numbers_exact", "acc"):
                if metric in s:
                    rows.append({**base, **extra, "metric": metric, "value": float(s[metric])})
    return pd.DataFrame(rows)


def _evaluate(lm: Any, tasks: tuple[str, ...], limit: int | None, data_dir: str | None) -> SuiteResult:
    _offline_env()
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    metadata = {"data_dir": data_dir} if data_dir else None
    tm = TaskManager(include_path=str(TASK_DIR), metadata=metadata)
    # lm-eval's progress bars (stderr) would drown the flow's own lines: keep them, show them only on failure
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            out = simple_evaluate(model=lm, tasks=list(tasks), task_manager=tm, log_samples=True, limit=limit,
                                  num_fewshot=0, bootstrap_iters=0, random_seed=0, numpy_random_seed=0,
                                  torch_random_seed=0)
    except Exception:
        sys.stderr.write(captured.getvalue()[-4000:])
        raise
    return SuiteResult(results=out["results"], samples=samples_frame(out["samples"]))


def run_in_memory(model: Any, tokenizer: Any, *, tasks: tuple[str, ...] = SUITE, batch_size: int = 32,
                  limit: int | None = None, data_dir: str | None = None) -> SuiteResult:
    """Evaluate a loaded model object (as served in-process: quantized, other dtype, other attention)."""
    _offline_env()
    from lm_eval.models.huggingface import HFLM

    lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size, add_bos_token=True, max_length=512)
    return _evaluate(lm, tasks, limit, data_dir)


def run_served(base_url: str, served_model: str, tokenizer_dir: str, *, tasks: tuple[str, ...] = SUITE,
               limit: int | None = None, data_dir: str | None = None, concurrency: int = 4) -> SuiteResult:
    """Evaluate an OpenAI-compatible server (e.g. a vLLM arm) with lm-eval's `local-completions`."""
    _offline_env()
    from lm_eval.models.openai_completions import LocalCompletionsAPI

    lm = LocalCompletionsAPI(base_url=f"{base_url.rstrip('/')}/v1/completions", model=served_model,
                             tokenizer=tokenizer_dir, tokenizer_backend="huggingface", tokenized_requests=True,
                             add_bos_token=True, num_concurrent=concurrency, max_length=512)
    return _evaluate(lm, tasks, limit, data_dir)
