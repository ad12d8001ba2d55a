"""Run the quality suite with lm-eval, as its users run it, and return one tidy row per document.

In memory (`run_in_memory`): an already-loaded model object goes to `HFLM(pretrained=model)`, so quantized weights
or a KV-cache variant are evaluated exactly as they are served in-process. Served (`run_served`): lm-eval's
`local-completions` against an OpenAI-compatible endpoint (vLLM arms), with token ids and prompt log-probabilities
(`echo` + `logprobs`) so log-likelihood tasks match the in-memory path; each task runs on its own, and a task the
endpoint cannot serve (no prompt log-probabilities, no tokenizer, a refused request) is listed in
`SuiteResult.skipped` with the reason while the other tasks still count — never silently dropped. Both return
`SuiteResult`: lm-eval's own aggregate results (logged as-is) plus `samples`, one row per (document, metric)
with the document's slice and the model's answer — the input of `sliced.py`.

Deliberately not here: statistics (sliced.py), model loading and quantization (engines / ablation arms),
launching servers (served.py).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import math
import os
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

TASK_DIR = Path(__file__).resolve().parent / "tasks"
SUITE = ("inferopt_arith", "inferopt_kv", "inferopt_tool", "inferopt_mc")
LOGLIKELIHOOD_TASKS = frozenset(
    {"inferopt_mc"}
)  # scored from the choices' log-likelihoods (output_type multiple_choice)


@dataclass
class SuiteResult:
    results: dict[str, Any]  # lm-eval's `results` (per task aggregates, analytic stderr)
    samples: pd.DataFrame  # doc_id, id, task, lang, context, risk, metric, value, response (+ mc columns)
    skipped: dict[str, str] = field(default_factory=dict)  # task -> why it could not run (served only)


def _offline_env() -> None:
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
            base = {
                "task_name": task,
                "doc_id": s["doc_id"],
                "id": doc["id"],
                "task": sl["task"],
                "lang": sl["lang"],
                "context": sl["context"],
                "risk": sl["risk"],
                "distance": float(sl["distance"]) if sl.get("distance") not in (None, "") else float("nan"),
            }
            extra: dict[str, Any] = {"response": None}
            if doc.get("choices"):
                lls = [float(r[0]) if isinstance(r, (list, tuple)) else float(r) for r in s["filtered_resps"]]
                m = max(lls)
                ps = [math.exp(x - m) for x in lls]
                z = sum(ps)
                ps = [p / z for p in ps]
                gold = int(doc["gold"])
                pred = int(max(range(len(ps)), key=ps.__getitem__))
                extra = {"p_gold": ps[gold], "p_max": max(ps), "pred": pred, "gold": gold, "response": str(pred)}
            elif s.get("filtered_resps"):
                first = s["filtered_resps"][0]
                extra["response"] = str(first[0] if isinstance(first, (list, tuple)) else first)
            for metric in ("exact", "json_valid", "args_exact", "numbers_exact", "acc"):
                if metric in s:
                    rows.append({**base, **extra, "metric": metric, "value": float(s[metric])})
    return pd.DataFrame(rows)


def _task_manager(data_dir: str | None) -> Any:
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=str(TASK_DIR), metadata={"data_dir": data_dir} if data_dir else None)


def _evaluate(lm: Any, tasks: tuple[str, ...], limit: int | None, data_dir: str | None, tm: Any = None) -> SuiteResult:
    _offline_env()
    from lm_eval import simple_evaluate

    tm = tm or _task_manager(data_dir)
    # lm-eval's progress bars (stderr) would drown the flow's own lines: keep them, show them only on failure
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            out = simple_evaluate(
                model=lm,
                tasks=list(tasks),
                task_manager=tm,
                log_samples=True,
                limit=limit,
                num_fewshot=0,
                bootstrap_iters=0,
                random_seed=0,
                numpy_random_seed=0,
                torch_random_seed=0,
            )
    except Exception:
        sys.stderr.write(captured.getvalue()[-4000:])
        raise
    return SuiteResult(results=out["results"], samples=samples_frame(out["samples"]))


def run_in_memory(
    model: Any,
    tokenizer: Any,
    *,
    tasks: tuple[str, ...] = SUITE,
    batch_size: int = 32,
    limit: int | None = None,
    data_dir: str | None = None,
) -> SuiteResult:
    """Evaluate a loaded model object (as served in-process: quantized, other dtype, other attention)."""
    _offline_env()
    from lm_eval.models.huggingface import HFLM

    lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size, add_bos_token=True, max_length=512)
    return _evaluate(lm, tasks, limit, data_dir)


def _post_json(url: str, body: dict[str, Any], timeout_s: float = 60.0) -> dict[str, Any]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout_s) as r:
        return json.loads(r.read().decode())


def prompt_logprobs_check(base_url: str, served_model: str, prompt_ids: list[int]) -> str | None:
    """None when `/v1/completions` returns a log-probability for every prompt token (`echo` + `logprobs`,
    what lm-eval's `local-completions` scores choices with); otherwise why not."""
    body = {"model": served_model, "prompt": prompt_ids, "max_tokens": 1, "logprobs": 1, "echo": True, "temperature": 0}
    try:
        out = _post_json(f"{base_url.rstrip('/')}/v1/completions", body)
        lps = out["choices"][0]["logprobs"]["token_logprobs"]
    except urllib.error.HTTPError as exc:
        return f"the endpoint refused echo+logprobs (HTTP {exc.code}: {exc.read()[:200].decode('utf-8', 'replace')})"
    except (OSError, KeyError, IndexError, TypeError, ValueError) as exc:
        return f"no prompt log-probabilities from echo+logprobs ({type(exc).__name__}: {exc})"
    scored = [x for x in lps[1 : len(prompt_ids)] if x is not None]
    if len(lps) < len(prompt_ids) or len(scored) < len(prompt_ids) - 1:
        return (
            f"echo+logprobs returned {len(scored)} log-probabilities for a {len(prompt_ids)}-token prompt "
            "(multiple choice needs one per prompt token)"
        )
    return None


def run_served(
    base_url: str,
    served_model: str,
    tokenizer_dir: str | None,
    *,
    tasks: tuple[str, ...] = SUITE,
    limit: int | None = None,
    data_dir: str | None = None,
    concurrency: int = 4,
    max_length: int = 512,
) -> SuiteResult:
    """Evaluate an OpenAI-compatible server (e.g. a vLLM arm) with lm-eval's `local-completions`, task by task.

    `tokenizer_dir`: the served model's tokenizer (prompts go as token ids, scored exactly like the
    in-memory path); None = the server's own tokenizer if it offers one (`/tokenizer_info` + `/tokenize`;
    lm-eval asks it without special tokens, so no BOS: comparable between two such arms, not with the
    in-memory path), else text prompts (the server adds its BOS) and no log-likelihood tasks — vLLM 0.32
    offers no `/tokenizer_info` unless started with `--enable-tokenizer-info-endpoint`. Tasks that cannot
    run are in `skipped` with the reason."""
    _offline_env()
    from lm_eval.models.openai_completions import LocalCompletionsAPI
    from lm_eval.utils import check_remote_tokenizer_support

    url = f"{base_url.rstrip('/')}/v1/completions"
    if tokenizer_dir is not None:
        backend = "huggingface"
    else:
        backend = "remote" if check_remote_tokenizer_support(url) else "none"
    lm = LocalCompletionsAPI(
        base_url=url,
        model=served_model,
        tokenizer=tokenizer_dir,
        tokenizer_backend=backend,
        tokenized_requests=backend != "none",
        add_bos_token=True,
        num_concurrent=concurrency,
        max_length=max_length,
    )
    skipped: dict[str, str] = {}
    want_ll = [t for t in tasks if t in LOGLIKELIHOOD_TASKS]
    if want_ll:
        if backend == "none":
            why = (
                "no tokenizer (none configured, and the endpoint offers no remote tokenizer: /tokenizer_info + "
                "/tokenize; vLLM needs --enable-tokenizer-info-endpoint): choices cannot be scored token by token"
            )
        else:
            why = prompt_logprobs_check(base_url, served_model, list(lm.tok_encode("larger: 1 2 -> 2")))
        if why:
            skipped.update({t: why for t in want_ll})
    tm = _task_manager(data_dir)
    results: dict[str, Any] = {}
    frames: list[pd.DataFrame] = []
    for task in (t for t in tasks if t not in skipped):
        try:
            res = _evaluate(lm, (task,), limit, data_dir, tm)
        except Exception as exc:  # noqa: BLE001 - one task the endpoint cannot serve is recorded, the rest still run
            skipped[task] = f"{type(exc).__name__}: {str(exc)[:300]}"
            continue
        results.update(res.results)
        frames.append(res.samples)
    samples = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return SuiteResult(results=results, samples=samples, skipped=skipped)
