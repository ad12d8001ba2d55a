"""The bad-input corpus: each case is a small, valid file set (one of `BASES`) with one thing broken, and the
file and field its refusal must name. `materialize(case, root)` writes it under `root` and returns the
candidate's path and `--set` items. Used by `test_bad_inputs.py` and `benchmarks/bad_inputs.py`.

Every base plants secrets (a header, an env value, a trace column); no message may echo them.
"""

from __future__ import annotations

import copy
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

SECRETS = ("SECRET-HEADER-7f3a", "SECRET-ENV-91c2", "SECRET-TRACE-44be")
SET = "--set"  # expect_file for a problem in a --set item

_SLO = {"name": "s", "ttft_p99_ms": 200, "tpot_p95_ms": 20, "e2e_p99_ms": 1000}
_CPU = {
    "name": "cpu",
    "kind": "cpu",
    "peak_flops_per_s": {"float32": 1.0e11},
    "mem_bandwidth_bytes_per_s": 1.0e10,
    "memory_bytes": 2.0e10,
    "tdp_w": 65,
    "price_per_hour_usd": 0.1,
}
_GPU = {**_CPU, "name": "h200", "kind": "gpu", "peak_flops_per_s": {"bfloat16": 9.9e14}}
_WORKLOAD = {
    "name": "w",
    "seed": 3,
    "num_requests": 40,
    "arrival": {"kind": "poisson", "rate_per_s": 50.0},
    "lengths": {"input_median": 32, "output_median": 8, "output_max": 24},
    "timeout_s": 5,
}
_TRACE_WORKLOAD = {"name": "tw", "trace": {"path": "trace.jsonl"}, "timeout_s": 5}
_TRACE_ROWS = [
    {"timestamp": 100.0 + 0.05 * i, "input_len": 10 + i, "output_len": 2 + i % 5, "note": SECRETS[2]} for i in range(12)
]


def _candidate(changes: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "bad-input-base",
        "baseline": "system.yaml",
        "changes": changes,
        "target_metrics": ["ttft_ms_p99"],
        "workload": "workload.yaml",
        "slo": "slo.yaml",
        "hardware": "hardware.yaml",
        "ablation": {"repeats": 2, "bootstrap_samples": 500},
    }


def _jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


_FAKE = {"engine": "fake", "name": "f", "decode_step_ms": 1.5, "batching": {"max_batch_size": 1, "batch_wait_ms": 0}}
_HF = {"engine": "hf", "name": "h", "model": {"path": "builtin:tiny-llama"}, "attn_implementation": "eager"}
_VLLM = {
    "engine": "vllm",
    "name": "v",
    "model": {"path": "builtin:tiny-llama"},
    "python": sys.executable,
    "extra_env": {"HF_TOKEN": SECRETS[1]},
}
_OPENAI = {
    "engine": "openai",
    "name": "o",
    "base_url": "http://127.0.0.1:8000",
    "served_model": "m",
    "vocab_size": 288,
    "headers": {"Authorization": f"Bearer {SECRETS[0]}"},
}
_COMMON = {"workload.yaml": _WORKLOAD, "slo.yaml": _SLO, "hardware.yaml": _CPU}
BASES: dict[str, dict[str, Any]] = {
    "fake": {"candidate.yaml": _candidate({"batching.max_batch_size": 4}), "system.yaml": _FAKE, **_COMMON},
    "hf": {"candidate.yaml": _candidate({"attn_implementation": "sdpa"}), "system.yaml": _HF, **_COMMON},
    "vllm": {"candidate.yaml": _candidate({"max_num_seqs": 8}), "system.yaml": _VLLM, **_COMMON},
    "openai": {"candidate.yaml": _candidate({"temperature": 0.5}), "system.yaml": _OPENAI, **_COMMON},
    "trace": {
        "candidate.yaml": _candidate({"batching.max_batch_size": 4}),
        "system.yaml": _FAKE,
        **_COMMON,
        "workload.yaml": _TRACE_WORKLOAD,
        "trace.jsonl": _jsonl(_TRACE_ROWS),
    },
}


@dataclass(frozen=True)
class Edit:
    """op: set (a field of a YAML file; path is a tuple of keys), delete, text (replace the whole file with
    text or bytes), rm (no such file), dir (a directory in its place)."""

    op: str
    file: str
    path: tuple[str, ...] = ()
    value: Any = None


@dataclass(frozen=True)
class Case:
    id: str
    group: str
    base: str
    edits: tuple[Edit, ...]
    set_items: tuple[str, ...]
    expect_file: str  # relative to the case directory, or SET
    expect_field: str  # must appear in the message

    @property
    def candidate(self) -> str:
        return "candidate.yaml"


def S(file: str, dotted: str | tuple[str, ...], value: Any) -> Edit:
    return Edit("set", file, tuple(dotted.split(".")) if isinstance(dotted, str) else dotted, value)


def D(file: str, dotted: str) -> Edit:
    return Edit("delete", file, tuple(dotted.split(".")))


def T(file: str, content: str | bytes) -> Edit:
    return Edit("text", file, value=content)


def RM(file: str) -> Edit:
    return Edit("rm", file)


def DIR(file: str) -> Edit:
    return Edit("dir", file)


CASES: list[Case] = []


def case(
    id: str, group: str, *edits: Edit, base: str = "fake", sets: tuple[str, ...] = (), file: str, field: str
) -> None:
    assert all(c.id != id for c in CASES), id
    CASES.append(Case(id, group, base, edits, sets, file, field))


def _set(data: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        data = data.setdefault(key, {})
    data[path[-1]] = value


def _delete(data: dict[str, Any], path: tuple[str, ...]) -> None:
    for key in path[:-1]:
        data = data[key]
    del data[path[-1]]


def materialize(c: Case, root: Path) -> tuple[Path, tuple[str, ...]]:
    """Write the case's files under `root` (created); returns (candidate path, --set items)."""
    root.mkdir(parents=True, exist_ok=True)
    files: dict[str, Any] = copy.deepcopy(BASES[c.base])
    special: dict[str, Edit] = {}
    for e in c.edits:
        if e.op == "set":
            _set(files[e.file], e.path, e.value)
        elif e.op == "delete":
            _delete(files[e.file], e.path)
        else:
            special[e.file] = e
            files.pop(e.file, None)
    for name, content in files.items():
        text = content if isinstance(content, str) else yaml.safe_dump(content, sort_keys=False)
        text = text.replace("{root}", str(root))  # a path inside the case directory
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    for name, e in special.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        if e.op == "dir":
            p.mkdir()
        elif e.op == "text":
            (p.write_bytes if isinstance(e.value, bytes) else p.write_text)(e.value)
    return root / c.candidate, c.set_items


# ------------------------------------------------------------------ the corpus
C, W, Y, H, SY = "candidate.yaml", "workload.yaml", "slo.yaml", "hardware.yaml", "system.yaml"
TR = "trace.jsonl"
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{n}: &{n} [" + ", ".join([f"*{p}"] * 9) + "]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True)
)
INF, NAN = float("inf"), float("nan")


def _yaml_cases() -> None:
    """The files themselves: syntax, duplicates, aliases, encodings, shapes."""
    good = yaml.safe_dump(BASES["fake"][C], sort_keys=False)
    case("yaml-dup-top", "yaml", T(C, good + "name: again\n"), file=C, field="name")
    case(
        "yaml-dup-nested",
        "yaml",
        T(C, good.replace("repeats: 2", "repeats: 2\n  repeats: 20")),
        file=C,
        field="repeats",
    )
    wl = yaml.safe_dump(_WORKLOAD, sort_keys=False)
    case("yaml-dup-in-workload", "yaml", T(W, wl + "num_requests: 4000\n"), file=W, field="num_requests")
    sy = yaml.safe_dump(_FAKE, sort_keys=False)
    case("yaml-dup-in-system", "yaml", T(SY, sy + "decode_step_ms: 9\n"), file=SY, field="decode_step_ms")
    hw = yaml.safe_dump(_CPU, sort_keys=False)
    case("yaml-dup-in-hardware", "yaml", T(H, hw + "kind: gpu\n"), file=H, field="kind")
    case("yaml-alias-bomb", "yaml", T(C, good + BOMB), file=C, field="line")
    case("yaml-alias-bomb-in-workload", "yaml", T(W, wl + BOMB), file=W, field="line")
    case("yaml-alias-bomb-in-slo", "yaml", T(Y, "ttft_p99_ms: 1\n" + BOMB), file=Y, field="line")
    case("yaml-recursive-alias", "yaml", T(C, good + "description: &r [*r]\n"), file=C, field="line")
    case("yaml-deep-nesting", "yaml", T(C, good + "description: " + "[" * 300 + "]" * 300 + "\n"), file=C, field="line")
    case("yaml-tab-indent", "yaml", T(C, good.replace("  repeats", "\trepeats")), file=C, field="line")
    case("yaml-unclosed-quote", "yaml", T(C, good + 'description: "open\n'), file=C, field="line")
    case(
        "yaml-bad-indent",
        "yaml",
        T(C, good.replace("  repeats: 2", "   repeats: 2\n  bootstrap: 1")),
        file=C,
        field="line",
    )
    case("yaml-latin1", "yaml", T(C, (good + "description: caf\xe9\n").encode("latin-1")), file=C, field="line")
    case("yaml-latin1-in-system", "yaml", T(SY, (sy + "name: caf\xe9\n").encode("latin-1")), file=SY, field="line")
    case("yaml-utf16", "yaml", T(C, good.encode("utf-16")), file=C, field="line")
    case("yaml-nul-byte", "yaml", T(C, good + "description: a\x00b\n"), file=C, field="line")
    case("yaml-empty-candidate", "yaml", T(C, ""), file=C, field="fields")
    case("yaml-comment-only", "yaml", T(C, "# nothing\n"), file=C, field="fields")
    case("yaml-list-top", "yaml", T(C, "- a\n- b\n"), file=C, field="fields")
    case("yaml-scalar-top", "yaml", T(C, "just text\n"), file=C, field="fields")
    case("yaml-two-documents", "yaml", T(C, good + "---\nname: b\n"), file=C, field="line")
    case(
        "yaml-python-tag",
        "yaml",
        T(C, good + "description: !!python/object/apply:os.system [ls]\n"),
        file=C,
        field="line",
    )
    case("yaml-unhashable-key", "yaml", T(C, good + "? [a, b]\n: 1\n"), file=C, field="line")
    case("yaml-huge-file", "yaml", T(C, good + "description: " + "x" * (1 << 20) + "\n"), file=C, field="file")
    case("yaml-candidate-is-dir", "yaml", DIR(C), file=C, field="file")
    case("yaml-candidate-missing", "yaml", RM(C), file=C, field="file")
    case("yaml-undefined-alias", "yaml", T(C, good + "description: *nope\n"), file=C, field="line")
    case("yaml-empty-workload", "yaml", T(W, ""), file=W, field="workload")
    case("yaml-list-system", "yaml", T(SY, "- engine: fake\n"), file=SY, field="baseline")


def _candidate_cases() -> None:
    case("cand-missing-baseline", "candidate", D(C, "baseline"), file=C, field="baseline")
    case("cand-missing-changes", "candidate", D(C, "changes"), file=C, field="changes")
    case("cand-empty-changes", "candidate", S(C, "changes", {}), file=C, field="changes")
    case("cand-change-unknown-field", "candidate", S(C, "changes", {"decode_stp_ms": 2}), file=C, field="decode_stp_ms")
    case("cand-change-noop", "candidate", S(C, "changes", {"decode_step_ms": 1.5}), file=C, field="decode_step_ms")
    case(
        "cand-change-overlap",
        "candidate",
        S(C, "changes", {"batching": {"max_batch_size": 4}, "batching.max_batch_size": 8}),
        file=C,
        field="batching",
    )
    case(
        "cand-change-moves-two",
        "candidate",
        S(C, "changes", {"batching": {"max_batch_size": 8}}),
        file=C,
        field="changes.batching",
    )
    case("cand-change-bad-value", "candidate", S(C, "changes", {"decode_step_ms": -3}), file=C, field="decode_step_ms")
    case("cand-change-inf", "candidate", S(C, "changes", {"decode_step_ms": INF}), file=C, field="decode_step_ms")
    case("cand-typo-field", "candidate", S(C, "targe_metrics", ["ttft_ms_p99"]), file=C, field="targe_metrics")
    case("cand-target-misspelled", "candidate", S(C, "target_metrics", ["tpot_ms_p5O"]), file=C, field="target_metrics")
    case("cand-target-unknown", "candidate", S(C, "target_metrics", ["latency"]), file=C, field="target_metrics")
    case("cand-target-empty", "candidate", S(C, "target_metrics", []), file=C, field="target_metrics")
    case(
        "cand-target-twice",
        "candidate",
        S(C, "target_metrics", ["ttft_ms_p99", "ttft_ms_p99"]),
        file=C,
        field="target_metrics",
    )
    case("cand-target-number", "candidate", S(C, "target_metrics", [5]), file=C, field="target_metrics")
    case("cand-missing-name", "candidate", D(C, "name"), file=C, field="name")
    case("cand-name-list", "candidate", S(C, "name", ["a"]), file=C, field="name")
    case("cand-repeats-one", "candidate", S(C, "ablation.repeats", 1), file=C, field="repeats")
    case("cand-repeats-zero", "candidate", S(C, "ablation.repeats", 0), file=C, field="repeats")
    case("cand-repeats-huge", "candidate", S(C, "ablation.repeats", 10**6), file=C, field="repeats")
    case("cand-repeats-text", "candidate", S(C, "ablation.repeats", "three"), file=C, field="repeats")
    case("cand-repeats-float", "candidate", S(C, "ablation.repeats", 2.5), file=C, field="repeats")
    case("cand-alpha-big", "candidate", S(C, "ablation.alpha", 0.7), file=C, field="alpha")
    case("cand-alpha-nan", "candidate", S(C, "ablation.alpha", NAN), file=C, field="alpha")
    case("cand-alpha-denormal", "candidate", S(C, "ablation.alpha", 1e-300), file=C, field="alpha")
    case("cand-min-repeats-alone", "candidate", S(C, "ablation.min_repeats", 3), file=C, field="min_repeats")
    case(
        "cand-min-repeats-one",
        "candidate",
        S(C, "ablation.min_repeats", 1),
        S(C, "ablation.max_repeats", 4),
        file=C,
        field="min_repeats",
    )
    case(
        "cand-max-below-min",
        "candidate",
        S(C, "ablation.min_repeats", 5),
        S(C, "ablation.max_repeats", 3),
        file=C,
        field="max_repeats",
    )
    case("cand-ablation-seed-negative", "candidate", S(C, "ablation.seed", -1), file=C, field="seed")
    case("cand-ablation-test-unknown", "candidate", S(C, "ablation.test", "wilcoxon"), file=C, field="test")
    case(
        "cand-dispatch-timeout-inf",
        "candidate",
        S(C, "ablation.dispatch_timeout_s", INF),
        file=C,
        field="dispatch_timeout_s",
    )
    case("cand-ablation-requests-zero", "candidate", S(C, "ablation.num_requests", 0), file=C, field="num_requests")
    case(
        "cand-bootstrap-huge", "candidate", S(C, "ablation.bootstrap_samples", 10**9), file=C, field="bootstrap_samples"
    )
    case(
        "cand-extra-arm-two-paths",
        "candidate",
        S(C, "ablation.extra_arms", [{"decode_step_ms": 2, "context_ms": 1}]),
        file=C,
        field="extra_arms",
    )
    case(
        "cand-extra-arm-unknown",
        "candidate",
        S(C, "ablation.extra_arms", [{"decod_step_ms": 2}]),
        file=C,
        field="extra_arms",
    )
    case("cand-ablation-typo", "candidate", S(C, "ablation.repeets", 3), file=C, field="repeets")
    case("cand-lint-allow-no-reason", "candidate", S(C, "lint.allow", ["no_queueing"]), file=C, field="lint")
    case(
        "cand-lint-allow-unknown",
        "candidate",
        S(C, "lint", {"allow": ["cheating"], "reason": "x"}),
        file=C,
        field="allow",
    )
    case("cand-warmup-negative", "candidate", S(C, "measure.warmup_requests", -1), file=C, field="warmup_requests")
    case("cand-quality-margin", "candidate", S(C, "gate.quality_margin", 2), file=C, field="quality_margin")
    case(
        "cand-quality-model-missing",
        "candidate",
        S(C, "gate.quality_model", "/no/such/model"),
        file=C,
        field="quality_model",
    )
    case(
        "cand-quality-model-builtin",
        "candidate",
        S(C, "gate.quality_model", "builtin:nope"),
        file=C,
        field="quality_model",
    )
    case(
        "cand-quality-data-missing",
        "candidate",
        S(C, "gate.quality_data_dir", "/no/such/dir"),
        file=C,
        field="quality_data_dir",
    )
    case(
        "cand-quality-data-empty",
        "candidate",
        DIR("empty"),
        S(C, "gate.quality_data_dir", "{root}/empty"),
        file=C,
        field="quality_data_dir",
    )
    case(
        "cand-quality-data-file",
        "candidate",
        T("data.txt", "x"),
        S(C, "gate.quality_data_dir", "{root}/data.txt"),
        file=C,
        field="quality_data_dir",
    )
    case("cand-held-prompts-zero", "candidate", S(C, "gate.held_prompts", 0), file=C, field="held_prompts")
    case("cand-gate-seed-negative", "candidate", S(C, "gate.seed", -5), file=C, field="seed")
    case("cand-mlperf-ratio", "candidate", S(C, "gate.mlperf_ratio", 1.5), file=C, field="mlperf_ratio")
    case("cand-kl-inf", "candidate", S(C, "gate.max_mean_kl", INF), file=C, field="max_mean_kl")
    steady = {"name": "steady", "kind": "steady"}
    burst = {"name": "burst", "kind": "burst"}
    sc = "validation.scenarios"
    case("cand-scenario-dup", "candidate", S(C, sc, [steady, steady, burst]), file=C, field="scenarios")
    case("cand-scenario-kind", "candidate", S(C, sc, [{"name": "x", "kind": "spike"}, burst]), file=C, field="kind")
    case(
        "cand-scenario-misplaced",
        "candidate",
        S(C, sc, [{**steady, "admission_limit": 4}, burst]),
        file=C,
        field="admission_limit",
    )
    case(
        "cand-scenario-kill-replica",
        "candidate",
        S(C, sc, [{"name": "nf", "kind": "node_failure", "replicas": 2, "kill_replica": 2}, burst]),
        file=C,
        field="kill_replica",
    )
    case(
        "cand-scenario-rate-inf",
        "candidate",
        S(C, sc, [{**steady, "rate_scale": INF}, burst]),
        file=C,
        field="rate_scale",
    )
    case(
        "cand-scenario-rate-tiny",
        "candidate",
        S(C, sc, [{**steady, "rate_scale": 1e-8}, burst]),
        file=C,
        field="rate_scale",
    )
    case(
        "cand-scenario-rate-overflow",
        "candidate",
        S(W, "arrival.rate_per_s", 9e5),
        S(C, sc, [{**steady, "rate_scale": 4}, burst]),
        file=C,
        field="rate_scale",
    )
    case(
        "cand-scenario-burst-denormal",
        "candidate",
        S(C, sc, [{**burst, "burstiness": 1e-300}]),
        file=C,
        field="burstiness",
    )
    case(
        "cand-scenario-kill-at",
        "candidate",
        S(C, sc, [{"name": "nf", "kind": "node_failure", "kill_at_s": 1e9}, burst]),
        file=C,
        field="kill_at_s",
    )
    case(
        "cand-scenario-retry-inf",
        "candidate",
        S(C, sc, [{**steady, "retry": {"max_backoff_s": INF}}, burst]),
        file=C,
        field="max_backoff_s",
    )
    case(
        "cand-scenario-retry-budget",
        "candidate",
        S(C, sc, [{**steady, "retry": {"budget_s": 1e300}}, burst]),
        file=C,
        field="budget_s",
    )
    case(
        "cand-scenario-requests-zero",
        "candidate",
        S(C, sc, [{**steady, "num_requests": 0}, burst]),
        file=C,
        field="num_requests",
    )
    case(
        "cand-fairness-share",
        "candidate",
        S(C, "validation.fairness.min_share_ratio", 0),
        file=C,
        field="min_share_ratio",
    )
    case(
        "cand-mismatch-flag-text",
        "candidate",
        S(C, "allow_hardware_mismatch", "please"),
        file=C,
        field="allow_hardware_mismatch",
    )
    case("cand-cheat-single-request", "candidate", S(W, "num_requests", 1), file=C, field="num_requests")
    case(
        "cand-cheat-fixed-outputs",
        "candidate",
        S(W, "lengths", {"output_sigma": 0, "output_median": 8}),
        file=C,
        field="output_sigma",
    )
    case("cand-baseline-number", "candidate", S(C, "baseline", 5), file=C, field="baseline")
    case("cand-baseline-missing-file", "candidate", S(C, "baseline", "nope.yaml"), file=C, field="baseline")
    case(
        "cand-baseline-dir", "candidate", DIR("sysdir.yaml"), S(C, "baseline", "sysdir.yaml"), file=C, field="baseline"
    )
    case("cand-baseline-self", "candidate", S(C, "baseline", "candidate.yaml"), file=C, field="baseline")


def _system_cases() -> None:
    case("sys-engine-unknown", "system", S(SY, "engine", "fak"), file=SY, field="engine")
    case("sys-engine-missing", "system", D(SY, "engine"), file=SY, field="engine")
    for value, tag in (
        (-1, "negative"),
        (INF, "inf"),
        (NAN, "nan"),
        (1e-300, "denormal"),
        (1e9, "huge"),
        ("fast", "text"),
    ):
        case(f"sys-decode-step-{tag}", "system", S(SY, "decode_step_ms", value), file=SY, field="decode_step_ms")
    case("sys-jitter-huge", "system", S(SY, "jitter_cv", 1e6), file=SY, field="jitter_cv")
    case("sys-error-rate", "system", S(SY, "error_rate", 1.5), file=SY, field="error_rate")
    case("sys-seed-negative", "system", S(SY, "seed", -1), file=SY, field="seed")
    case("sys-seed-huge", "system", S(SY, "seed", 2**70), file=SY, field="seed")
    case("sys-vocab-zero", "system", S(SY, "vocab_size", 0), file=SY, field="vocab_size")
    case("sys-batch-zero", "system", S(SY, "batching.max_batch_size", 0), file=SY, field="max_batch_size")
    case("sys-batch-huge", "system", S(SY, "batching.max_batch_size", 10**7), file=SY, field="max_batch_size")
    case("sys-batch-wait-inf", "system", S(SY, "batching.batch_wait_ms", INF), file=SY, field="batch_wait_ms")
    case("sys-queue-negative", "system", S(SY, "batching.max_queue", -1), file=SY, field="max_queue")
    case("sys-policy-unknown", "system", S(SY, "batching.policy", "dynamic"), file=SY, field="policy")
    case("sys-typo", "system", S(SY, "decode_step_mss", 2), file=SY, field="decode_step_mss")
    case("sys-batching-typo", "system", S(SY, "batching.max_batchsize", 2), file=SY, field="max_batchsize")
    case("sys-batching-list", "system", S(SY, "batching", [1, 2]), file=SY, field="batching")
    # hf
    case("hf-model-missing", "system", S(SY, "model.path", "no-such-model"), base="hf", file=SY, field="model.path")
    case("hf-model-builtin", "system", S(SY, "model.path", "builtin:huge"), base="hf", file=SY, field="model.path")
    case("hf-model-missing-key", "system", S(SY, "model", {}), base="hf", file=SY, field="model.path")
    case(
        "hf-tokenizer-missing",
        "system",
        S(SY, "model.tokenizer", "no-tokenizer"),
        base="hf",
        file=SY,
        field="tokenizer",
    )
    case("hf-dtype", "system", S(SY, "dtype", "float8"), base="hf", file=SY, field="dtype")
    case("hf-device", "system", S(SY, "device", "tpu"), base="hf", file=SY, field="device")
    case("hf-threads-zero", "system", S(SY, "torch_threads", 0), base="hf", file=SY, field="torch_threads")
    case("hf-threads-huge", "system", S(SY, "torch_threads", 10**5), base="hf", file=SY, field="torch_threads")
    case(
        "hf-speculative-batch",
        "system",
        S(SY, "speculative", {"draft_model": "layers:1"}),
        S(SY, "batching.max_batch_size", 4),
        base="hf",
        file=SY,
        field="speculative",
    )
    case(
        "hf-speculative-draft",
        "system",
        S(SY, "speculative", {"draft_model": "tiny"}),
        base="hf",
        file=SY,
        field="draft_model",
    )
    case(
        "hf-speculative-k",
        "system",
        S(SY, "speculative", {"draft_model": "layers:1", "num_draft_tokens": 100}),
        base="hf",
        file=SY,
        field="num_draft_tokens",
    )
    case("hf-double-quant", "system", S(SY, "bnb_double_quant", True), base="hf", file=SY, field="bnb_double_quant")
    case("hf-kv-residual", "system", S(SY, "kv_residual_length", 64), base="hf", file=SY, field="kv_residual_length")
    case("hf-sliding-zero", "system", S(SY, "sliding_window", 0), base="hf", file=SY, field="sliding_window")
    case(
        "hf-weight-quant",
        "system",
        S(SY, "weight_quantization", "int3"),
        base="hf",
        file=SY,
        field="weight_quantization",
    )
    # vllm
    case("vllm-python-missing", "system", S(SY, "python", "/no/such/python"), base="vllm", file=SY, field="python")
    case("vllm-python-dir", "system", S(SY, "python", "/tmp"), base="vllm", file=SY, field="python")
    case(
        "vllm-python-not-exec",
        "system",
        T("plain.txt", "x"),
        S(SY, "python", "{root}/plain.txt"),
        base="vllm",
        file=SY,
        field="python",
    )
    case(
        "vllm-gpu-util",
        "system",
        S(SY, "gpu_memory_utilization", 1.5),
        base="vllm",
        file=SY,
        field="gpu_memory_utilization",
    )
    case("vllm-startup-inf", "system", S(SY, "startup_timeout_s", INF), base="vllm", file=SY, field="startup_timeout_s")
    case(
        "vllm-startup-denormal",
        "system",
        S(SY, "startup_timeout_s", 1e-300),
        base="vllm",
        file=SY,
        field="startup_timeout_s",
    )
    case("vllm-max-len-zero", "system", S(SY, "max_model_len", 0), base="vllm", file=SY, field="max_model_len")
    case("vllm-kv-dtype", "system", S(SY, "kv_cache_dtype", "int4"), base="vllm", file=SY, field="kv_cache_dtype")
    case(
        "vllm-env-not-text",
        "system",
        S(SY, "extra_env", {"HF_TOKEN": {"a": 1}}),
        base="vllm",
        file=SY,
        field="extra_env",
    )
    case("vllm-args-not-list", "system", S(SY, "extra_args", 7), base="vllm", file=SY, field="extra_args")
    case("vllm-device", "system", S(SY, "device", "gpu"), base="vllm", file=SY, field="device")
    # openai
    case("openai-url", "system", S(SY, "base_url", "localhost:8000"), base="openai", file=SY, field="base_url")
    case(
        "openai-metrics-url",
        "system",
        S(SY, "metrics_url", "ftp://x/metrics"),
        base="openai",
        file=SY,
        field="metrics_url",
    )
    case(
        "openai-header-number",
        "system",
        S(SY, "headers", {"Authorization": 12345}),
        base="openai",
        file=SY,
        field="headers",
    )
    case("openai-headers-list", "system", S(SY, "headers", ["Bearer x"]), base="openai", file=SY, field="headers")
    case("openai-vocab-missing", "system", D(SY, "vocab_size"), base="openai", file=SY, field="vocab_size")
    case("openai-temperature", "system", S(SY, "temperature", -1), base="openai", file=SY, field="temperature")
    case("openai-api", "system", S(SY, "api", "chats"), base="openai", file=SY, field="api")
    case("openai-model-missing", "system", D(SY, "served_model"), base="openai", file=SY, field="served_model")


def _workload_cases() -> None:
    case("wl-both-sources", "workload", S(W, "trace", {"path": "t.jsonl"}), file=W, field="arrival")
    case("wl-no-source", "workload", D(W, "arrival"), file=W, field="arrival")
    rate = "arrival.rate_per_s"
    for value, tag in (
        (-1, "negative"),
        (0, "zero"),
        (INF, "inf"),
        (NAN, "nan"),
        (1e-300, "denormal"),
        (1e7, "huge"),
        ("fast", "text"),
    ):
        case(f"wl-rate-{tag}", "workload", S(W, rate, value), file=W, field="rate_per_s")
    case("wl-rate-day-long", "workload", S(W, rate, 1e-5), file=W, field="rate_per_s")
    case("wl-arrival-kind", "workload", S(W, "arrival.kind", "uniform"), file=W, field="kind")
    case(
        "wl-gamma-burst-zero",
        "workload",
        S(W, "arrival", {"kind": "gamma", "rate_per_s": 5, "burstiness": 0}),
        file=W,
        field="burstiness",
    )
    case(
        "wl-gamma-burst-huge",
        "workload",
        S(W, "arrival", {"kind": "gamma", "rate_per_s": 5, "burstiness": 1e6}),
        file=W,
        field="burstiness",
    )
    for value, tag in ((0, "zero"), (10**9, "huge"), (2.5, "fraction"), ("many", "text")):
        case(f"wl-requests-{tag}", "workload", S(W, "num_requests", value), file=W, field="num_requests")
    for value, tag in ((INF, "inf"), (1e300, "huge"), (0, "zero"), (1e-300, "denormal"), (-5, "negative")):
        case(f"wl-timeout-{tag}", "workload", S(W, "timeout_s", value), file=W, field="timeout_s")
    case("wl-seed-negative", "workload", S(W, "seed", -1), file=W, field="seed")
    case("wl-lengths-min-max", "workload", S(W, "lengths.input_min", 600), file=W, field="input_min")
    case("wl-lengths-median-zero", "workload", S(W, "lengths.output_median", 0), file=W, field="output_median")
    case("wl-lengths-correlation", "workload", S(W, "lengths.correlation", 2), file=W, field="correlation")
    case("wl-lengths-sigma-nan", "workload", S(W, "lengths.input_sigma", NAN), file=W, field="input_sigma")
    case("wl-lengths-max-huge", "workload", S(W, "lengths.input_max", 2**40), file=W, field="input_max")
    case("wl-prefix-share", "workload", S(W, "prefix", {"share_fraction": 1.5}), file=W, field="share_fraction")
    case("wl-prefix-len-zero", "workload", S(W, "prefix", {"prefix_len": 0}), file=W, field="prefix_len")
    case("wl-tenants-empty", "workload", S(W, "tenants", []), file=W, field="tenants")
    case("wl-tenants-dup", "workload", S(W, "tenants", [{"name": "a"}, {"name": "a"}]), file=W, field="tenants")
    case("wl-tenant-weight", "workload", S(W, "tenants", [{"name": "a", "weight": 0}]), file=W, field="weight")
    case("wl-tenant-no-name", "workload", S(W, "tenants", [{"weight": 1}]), file=W, field="name")
    case("wl-typo", "workload", S(W, "num_request", 5), file=W, field="num_request")
    case("wl-sessions-turns", "workload", S(W, "sessions", {"turns": {"min": 5, "max": 2}}), file=W, field="turns")
    tools = {"tools": {"probability": 1.5}}
    case("wl-sessions-tool-probability", "workload", S(W, "sessions", tools), file=W, field="probability")
    think = {"think": {"kind": "weibull"}}
    case("wl-sessions-think-kind", "workload", S(W, "sessions", think), file=W, field="kind")
    case("wl-sessions-store", "workload", S(W, "sessions", {"history": {"store": "redis"}}), file=W, field="store")
    case("wl-file-missing", "workload", RM(W), file=C, field="workload")
    case("wl-ref-dir", "workload", DIR("wdir.yaml"), S(C, "workload", "wdir.yaml"), file=C, field="workload")
    case("wl-ref-not-yaml", "workload", S(C, "workload", "workload.txt"), file=C, field="workload")


def _trace_cases() -> None:
    b = {"base": "trace"}
    case("tr-time-scale-zero", "trace", S(W, "trace.time_scale", 0), **b, file=W, field="time_scale")
    case("tr-time-scale-inf", "trace", S(W, "trace.time_scale", INF), **b, file=W, field="time_scale")
    case("tr-time-scale-huge", "trace", S(W, "trace.time_scale", 1e6), **b, file=W, field="time_scale")
    case("tr-format", "trace", S(W, "trace.format", "parquet"), **b, file=W, field="format")
    case("tr-limit-zero", "trace", S(W, "trace.limit", 0), **b, file=W, field="limit")
    case("tr-file-missing", "trace", RM(TR), **b, file=TR, field="trace.path")
    case("tr-file-dir", "trace", DIR(TR), **b, file=TR, field="trace.path")
    case(
        "tr-suffix",
        "trace",
        S(W, "trace.path", "trace.txt"),
        T("trace.txt", "x"),
        **b,
        file="trace.txt",
        field="trace.format",
    )
    case("tr-empty", "trace", T(TR, ""), **b, file=TR, field="rows")
    case("tr-blank-lines", "trace", T(TR, "\n\n  \n"), **b, file=TR, field="rows")
    row = {"timestamp": 100.0, "input_len": 10, "output_len": 4, "note": SECRETS[2]}

    def bad(id: str, field: str, **change: Any) -> None:
        r = {k: v for k, v in {**row, **change}.items() if v is not ...}
        case(id, "trace", T(TR, _jsonl([*_TRACE_ROWS[:3], r])), **b, file=TR, field=field)

    bad("tr-input-negative", "input_len", input_len=-3)
    bad("tr-input-zero", "input_len", input_len=0)
    bad("tr-input-fraction", "input_len", input_len=3.5)
    bad("tr-input-text", "input_len", input_len="ten")
    bad("tr-input-huge", "input_len", input_len=1e300)
    bad("tr-input-bool", "input_len", input_len=True)
    bad("tr-output-negative", "output_len", output_len=-1)
    bad("tr-output-zero", "output_len", output_len=0)
    bad("tr-output-missing", "output_len", output_len=...)
    bad("tr-output-list", "output_len", output_len=[4])
    bad("tr-timestamp-missing", "timestamp", timestamp=...)
    bad("tr-timestamp-text", "timestamp", timestamp="soon")
    bad("tr-timestamp-nan", "timestamp", timestamp=NAN)
    bad("tr-timestamp-inf", "timestamp", timestamp=INF)
    bad("tr-timestamp-stray-epoch", "timestamp", timestamp=1.7e9)
    bad("tr-no-input", "input_len", input_len=...)
    bad("tr-prompt-empty", "prompt", input_len=..., prompt="")
    bad("tr-prompt-number", "prompt", input_len=..., prompt=42)
    bad("tr-tenant-empty", "tenant", tenant="")
    bad("tr-tenant-list", "tenant", tenant=["a"])
    bad("tr-priority-fraction", "priority", priority=1.5)
    bad("tr-prefix-group", "prefix_group", prefix_group=-3)
    bad("tr-prefix-len", "prefix_len", prefix_group=0, prefix_len=-1)
    ms = [{**r, "timestamp": 1.7e12 + 1000.0 * i} for i, r in enumerate(_TRACE_ROWS)]
    case(
        "tr-timestamps-in-ms",
        "trace",
        T(TR, _jsonl(ms)),
        S(W, "trace.time_scale", 1.0),
        **b,
        file=TR,
        field="timestamp",
    )
    head = _jsonl(_TRACE_ROWS[:2])
    case(
        "tr-bad-json",
        "trace",
        T(TR, head + '{"timestamp": 1, "note": "' + SECRETS[2] + '"\n'),
        **b,
        file=TR,
        field="line",
    )
    case("tr-json-array", "trace", T(TR, head + "[1, 2, 3]\n"), **b, file=TR, field="line")
    case(
        "tr-latin1",
        "trace",
        T(TR, (head + '{"timestamp": 1, "prompt": "caf\xe9"}\n').encode("latin-1")),
        **b,
        file=TR,
        field="line",
    )
    case("tr-long-number", "trace", T(TR, head + '{"timestamp": 1' + "0" * 5000 + "}\n"), **b, file=TR, field="line")
    case("tr-deep-json", "trace", T(TR, head + "[" * 100000 + "]" * 100000 + "\n"), **b, file=TR, field="line")
    csv_ok = "timestamp,input_len,output_len,note\n" + "".join(f"{i * 0.1},{5 + i},3,{SECRETS[2]}\n" for i in range(5))
    csv_b = {"base": "trace"}
    cw = S(W, "trace.path", "trace.csv")
    case(
        "tr-csv-no-timestamp",
        "trace",
        cw,
        T("trace.csv", csv_ok.replace("timestamp,", "time,", 1)),
        **csv_b,
        file="trace.csv",
        field="timestamp",
    )
    case(
        "tr-csv-extra-cells",
        "trace",
        cw,
        T("trace.csv", csv_ok + "1.0,5,3,x,y\n"),
        **csv_b,
        file="trace.csv",
        field="row",
    )
    case(
        "tr-csv-bad-number",
        "trace",
        cw,
        T("trace.csv", csv_ok + "1.0,five,3,x\n"),
        **csv_b,
        file="trace.csv",
        field="input_len",
    )
    case(
        "tr-csv-dup-header",
        "trace",
        cw,
        T("trace.csv", csv_ok.replace(",note", ",input_len", 1)),
        **csv_b,
        file="trace.csv",
        field="header",
    )
    case(
        "tr-csv-nul",
        "trace",
        cw,
        T("trace.csv", csv_ok + "1.0,5\x00,3,x\n"),
        **csv_b,
        file="trace.csv",
        field="input_len",
    )
    case(
        "tr-csv-header-only",
        "trace",
        cw,
        T("trace.csv", "timestamp,input_len,output_len\n"),
        **csv_b,
        file="trace.csv",
        field="rows",
    )
    case(
        "tr-scenario-slow",
        "trace",
        S(C, "validation.scenarios", [{"name": "burst", "kind": "burst", "rate_scale": 1e-3}]),
        T(TR, _jsonl([{**r, "timestamp": 100.0 * i} for i, r in enumerate(_TRACE_ROWS)])),
        **b,
        file=TR,
        field="timestamp",
    )


_AZURE_OK = "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(
    f"2023-11-16 18:15:{46 + i}.6805900,{30 + i},{4 + i % 3}\n" for i in range(6)
)
_BURST_OK = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n" + "".join(
    f"{5 + i},ChatGPT,{40 + i},{6 + i},{46 + 2 * i},Conversation log\n" for i in range(6)
)
_MOON_OK = [
    {"timestamp": 100 * i, "input_length": 600 + i, "output_length": 4, "hash_ids": [0, 10 + i]} for i in range(6)
]
_SESS_OK = "timestamp,session_id,turn,input_len,output_len\n" + "".join(
    f"{i * 0.5},s{i // 3},{i % 3},{20 + 10 * (i % 3)},4\n" for i in range(6)
)


def _format_cases() -> None:
    """One broken row or mapping per public trace format (azure, burstgpt, mooncake, sessions, own columns)."""
    b = {"base": "trace"}

    def fmt(id: str, name: str, content: str, field: str, *edits: Edit) -> None:
        case(id, "trace", S(W, "trace.path", name), T(name, content), *edits, **b, file=name, field=field)

    az, bu, mo, se = "azure.csv", "burstgpt.csv", "mooncake.jsonl", "sessions.csv"
    fmt("tf-azure-timestamp", az, _AZURE_OK + "yesterday noon,30,4\n", "TIMESTAMP")
    fmt("tf-azure-negative", az, _AZURE_OK + "2023-11-16 18:16:00,-30,4\n", "ContextTokens")
    fmt("tf-azure-as-seconds", az, _AZURE_OK, "timestamp_unit", S(W, "trace.timestamp_unit", "s"))
    fmt("tf-burstgpt-negative", bu, _BURST_OK + "20,GPT-4,12,-5,7,API log\n", "Response tokens")
    fmt("tf-burstgpt-failed", bu, _BURST_OK + "20,GPT-4,12,0,12,API log\n", "Response tokens")
    fmt("tf-burstgpt-timestamp", bu, _BURST_OK + "noon,GPT-4,12,5,17,API log\n", "Timestamp")
    moon = _jsonl(_MOON_OK)
    for id, hashes in (
        ("tf-mooncake-hash-text", "blocks"),
        ("tf-mooncake-hash-neg", [0, -1]),
        ("tf-mooncake-hash-many", list(range(9))),
    ):
        row = {"timestamp": 900, "input_length": 40, "output_length": 4, "hash_ids": hashes}
        fmt(id, mo, moon + _jsonl([row]), "hash_ids")
    fmt("tf-mooncake-negative", mo, moon + _jsonl([{**_MOON_OK[0], "output_length": -2}]), "output_length")
    fmt("tf-mooncake-timestamp", mo, moon + _jsonl([{**_MOON_OK[0], "timestamp": "later"}]), "timestamp")
    fmt("tf-sessions-no-turn", se, _SESS_OK + "9,s9,,20,4\n", "turn")
    fmt("tf-sessions-dup-turn", se, _SESS_OK + "9,s0,1,20,4\n", "turn")
    cols = {"timestamp": "at_ms", "input_len": "n_in", "output_len": "n_out"}
    own = "at_ms,n_in,n_out\n" + "".join(f"{100 * i},{10 + i},3\n" for i in range(6))
    mapped = (S(W, "trace.columns", cols), S(W, "trace.timestamp_unit", "ms"))
    fmt("tf-own-ok-but-unmapped", "own.csv", own, "timestamp")
    fmt("tf-own-missing-mapped", "own.csv", own + "700,,3\n", "n_in", *mapped)
    fmt(
        "tf-own-map-not-in-header",
        "own.csv",
        own,
        "columns.output_len",
        S(W, "trace.columns", {**cols, "output_len": "gen"}),
        mapped[1],
    )
    own_file = (S(W, "trace.path", "own.csv"), T("own.csv", own))
    unknown = S(W, "trace.columns", {"timestamps": "at_ms"})
    case("tf-own-map-unknown-field", "trace", *own_file, unknown, **b, file=W, field="timestamps")
    case("tf-format-unknown-name", "trace", *own_file, S(W, "trace.format", "splitwise"), **b, file=W, field="format")
    fmt(
        "tf-jsonl-map-no-row",
        "m.jsonl",
        _jsonl(_TRACE_ROWS),
        "columns.tenant",
        S(W, "trace.columns", {"tenant": "user"}),
    )


def _slo_cases() -> None:
    case("slo-ttft-missing", "slo", D(Y, "ttft_p99_ms"), file=Y, field="ttft_p99_ms")
    for value, tag in ((-1, "negative"), (0, "zero"), (INF, "inf"), ("fast", "text"), (1e-300, "denormal")):
        case(f"slo-ttft-{tag}", "slo", S(Y, "ttft_p99_ms", value), file=Y, field="ttft_p99_ms")
    case("slo-p50-above-p99", "slo", S(Y, "ttft_p50_ms", 500), file=Y, field="ttft_p50_ms")
    case("slo-ttft-above-e2e", "slo", S(Y, "ttft_p99_ms", 5000), file=Y, field="e2e_p99_ms")
    case("slo-tpot-above-e2e", "slo", S(Y, "tpot_p95_ms", 2000), file=Y, field="tpot_p95_ms")
    case("slo-error-rate", "slo", S(Y, "max_error_rate", 2), file=Y, field="max_error_rate")
    case("slo-timeout-rate", "slo", S(Y, "max_timeout_rate", -0.1), file=Y, field="max_timeout_rate")
    case("slo-typo", "slo", S(Y, "tpot_p99_ms", 20), file=Y, field="tpot_p99_ms")
    case("slo-file-missing", "slo", RM(Y), file=C, field="slo")
    case("slo-file-list", "slo", T(Y, "- 1\n"), file=Y, field="slo")


def _hardware_cases() -> None:
    case("hw-gpu-for-cpu-run", "hardware", T(H, yaml.safe_dump(_GPU)), base="hf", file=H, field="kind")
    case(
        "hw-cpu-for-gpu-run",
        "hardware",
        S(SY, "device", "cuda"),
        base="hf",
        file=H,
        field="kind",
    )
    case("hw-gpu-for-vllm-cpu", "hardware", T(H, yaml.safe_dump(_GPU)), base="vllm", file=H, field="kind")
    case("hw-change-to-cuda", "hardware", S(C, "changes", {"device": "cuda"}), base="hf", file=H, field="kind")
    case("hw-kind", "hardware", S(H, "kind", "tpu"), file=H, field="kind")
    case("hw-flops-missing", "hardware", D(H, "peak_flops_per_s"), file=H, field="peak_flops_per_s")
    case("hw-flops-negative", "hardware", S(H, "peak_flops_per_s", {"float32": -1}), file=H, field="peak_flops_per_s")
    case("hw-flops-inf", "hardware", S(H, "peak_flops_per_s", {"float32": INF}), file=H, field="peak_flops_per_s")
    case("hw-flops-huge", "hardware", S(H, "peak_flops_per_s", {"float32": 1e300}), file=H, field="peak_flops_per_s")
    case(
        "hw-bandwidth-zero", "hardware", S(H, "mem_bandwidth_bytes_per_s", 0), file=H, field="mem_bandwidth_bytes_per_s"
    )
    case("hw-memory-nan", "hardware", S(H, "memory_bytes", NAN), file=H, field="memory_bytes")
    case("hw-tdp-huge", "hardware", S(H, "tdp_w", 1e30), file=H, field="tdp_w")
    case("hw-price-negative", "hardware", S(H, "price_per_hour_usd", -1), file=H, field="price_per_hour_usd")
    case("hw-name-missing", "hardware", D(H, "name"), file=H, field="name")
    case("hw-file-missing", "hardware", RM(H), file=C, field="hardware")
    case("hw-measure-text", "hardware", S(H, "measure_at_runtime", "sometimes"), file=H, field="measure_at_runtime")


def _set_cases() -> None:
    def s(id: str, *items: str, field: str, base: str = "fake") -> None:
        case(id, "set", base=base, sets=items, file=SET, field=field)

    s("set-no-equals", "workload.num_requests", field="num_requests")
    s("set-bare-word", "x", field="x")
    s("set-empty-key", "=3", field="=3")
    s("set-bad-yaml", "workload.num_requests=[", field="num_requests")
    s("set-bad-yaml-quote", 'description="open', field="description")
    s("set-zero", "workload.num_requests=0", field="num_requests")
    s("set-inf", "workload.timeout_s=.inf", field="timeout_s")
    s("set-denormal-rate", "workload.arrival.rate_per_s=1e-300", field="rate_per_s")
    s("set-unknown-section", "nosuch.field=1", field="nosuch")
    s("set-unknown-field", "workload.nosuch=1", field="nosuch")
    s("set-through-scalar", "name.sub=1", field="name")
    s("set-double-dot", "workload..num_requests=1", field="workload..num_requests")
    s("set-twice", "workload.num_requests=10", "workload.num_requests=20", field="num_requests")
    s("set-alias-bomb", "description=" + BOMB.replace("\n", ", ").join("{}"), field="description")
    s("set-seed-negative", "baseline.seed=-1", field="seed")
    s("set-repeats-one", "ablation.repeats=1", field="repeats")
    s("set-slo-contradiction", "slo.ttft_p50_ms=1e9", field="ttft_p50_ms")
    s("set-target-unknown", "target_metrics=[ttft]", field="target_metrics")
    s("set-hardware-path", "hardware=nope.yaml", field="hardware")
    s("set-headers-on-fake", "baseline.headers={Authorization: x}", field="headers")
    s("set-device-mismatch", "baseline.device=cuda", field="device", base="hf")
    s("set-python-missing", "baseline.python=/no/python", field="python", base="vllm")


for _add in (
    _yaml_cases,
    _candidate_cases,
    _system_cases,
    _workload_cases,
    _trace_cases,
    _format_cases,
    _slo_cases,
    _hardware_cases,
    _set_cases,
):
    _add()
