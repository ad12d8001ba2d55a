"""The pre-run check of a candidate: everything a run will need, checked before anything starts (no model,
no Prefect, no MLflow). `check_candidate(path, overrides)` loads and validates the config (`load_config`),
then what the fields alone cannot show: every row of a replayed trace, each load's duration (a day at
most, scenarios included), the files and interpreters named (tokenizer, vLLM's `python`, the quality
model and data), and that the hardware file describes the device the system runs on. All problems come
back in one `ConfigError`, each naming the file that holds it, the field, the value and the fix.
`parse_set_items` turns the CLI's `--set FIELD=VALUE` items into overrides, with the same care.

Deliberately not here: the benchmark-cheat lint (`inferopt.verdict.lint.refuse_cheats`, run after this by
the flows), and anything that probes the machine beyond the filesystem (CUDA is asked by the engines).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from inferopt.config.bounds import MAX_SECONDS
from inferopt.config.loader import Loc, Provenance, load_with_provenance
from inferopt.config.models import AnySystem, CandidateConfig, HFSystem, ModelSpec, VLLMSystem
from inferopt.config.systems import ConfigError
from inferopt.config.trace_rows import check_replay_span, read_trace_rows
from inferopt.config.yaml_io import parse_yaml

ROOT = Path(__file__).resolve().parents[2]  # vLLM's relative `python:` resolves here (VLLMSystem.python_path)
MAX_RATE_PER_S = 1e6  # RatePerS's bound: a scenario's scaled rate must stay within it too


@dataclass(frozen=True)
class Problem:
    loc: Loc  # the field, dotted from the candidate's root
    value: Any
    problem: str
    fix: str

    def render(self, prov: Provenance) -> str:
        path, inner = prov.file_for(self.loc)
        where = prov.where(self.loc)
        name = ".".join(inner) if "--set" not in where else ".".join(self.loc)
        source = f"--set {'.'.join(self.loc)}" if "--set" in where else str(path)
        shown = repr(self.value)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        return f"{source}: field `{name}` = {shown}: {self.problem}; fix: {self.fix}"


def parse_set_items(items: Sequence[str]) -> dict[str, Any]:
    """`["a.b=3", ...]` -> {"a.b": 3} (values are YAML); a malformed item is a ConfigError naming it."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        shown = item if len(item) <= 60 else item[:57] + "..."
        if not sep or not key.strip():
            raise ConfigError(
                f"--set {shown!r}: expected FIELD=VALUE; fix: e.g. --set workload.num_requests=16 (a dotted field, "
                "'=', a YAML value)"
            )
        key = key.strip()
        if key in out:
            raise ConfigError(f"--set {key}: given twice; fix: give each field once")
        out[key] = parse_yaml(text, f"--set {key}")
    return out


def check_candidate(path: str | Path, overrides: dict[str, Any] | None = None) -> CandidateConfig:
    """The validated candidate, or one ConfigError listing every problem found (see the module docstring)."""
    cfg, prov = load_with_provenance(path, "candidate", overrides)
    _raise_problems(cfg, prov, str(path))
    return cfg


def _raise_problems(cfg: CandidateConfig, prov: Provenance, what: str) -> None:
    problems = [*_trace(cfg, prov), *_durations(cfg), *_paths(cfg), *_hardware(cfg, prov), *_forced_lengths(cfg)]
    if problems:
        lines = list(dict.fromkeys(p if isinstance(p, str) else p.render(prov) for p in problems))  # once each
        raise ConfigError(
            f"{what}: the pre-run check found {len(lines)} problem(s):\n" + "\n".join(f"  - {x}" for x in lines)
        )


TUNE_PARTS = {"system": "baseline", "workload": "workload", "slo": "slo", "hardware": "hardware"}


def check_tune(paths: dict[str, str | Path], overrides: dict[str, Any] | None = None) -> CandidateConfig:
    """The search's inputs (`flows.tune`: a system, workload, SLO and hardware file, `--set part.field=value`
    overrides with part one of TUNE_PARTS), each loaded and validated, then checked as a candidate of that
    system would be (trace rows, durations, paths, the device), since the search's recommendation runs the
    same chain. Returns them as a candidate with no change yet (not validated as one: `changes` is empty)."""
    split: dict[str, dict[str, Any]] = {k: {} for k in TUNE_PARTS}
    for dotted, value in (overrides or {}).items():
        part, _, rest = dotted.partition(".")
        if part not in TUNE_PARTS or not rest:
            raise ConfigError(
                f"--set {dotted}: not a field of the search's inputs; fix: prefix it with the file it sets, one of "
                f"{', '.join(f'{k}.' for k in TUNE_PARTS)} (e.g. --set workload.num_requests=16)"
            )
        split[part][rest] = value
    loaded, refs, done = {}, {}, set()
    for part, key in TUNE_PARTS.items():
        try:
            cfg, prov = load_with_provenance(paths[part], part, split[part])
        except ConfigError as exc:  # name the overrides as given: `--set workload.x`, not `--set x`
            msg = str(exc)
            for rest in sorted(split[part], key=len, reverse=True):
                msg = msg.replace(f"--set {rest}", f"--set {part}.{rest}")
            raise ConfigError(msg) from None
        loaded[key] = cfg
        refs[(key,)] = Path(paths[part])
        done |= {(key, *o) for o in prov.overrides}
    cfg = CandidateConfig.model_construct(**loaded, changes={})
    root = Path(paths["system"])
    _raise_problems(cfg, Provenance(root=root, refs=refs, overrides=frozenset(done)), "the search's inputs")
    return cfg


def _forced_lengths(cfg: CandidateConfig) -> Iterator[Problem]:
    """A declared `output_lengths: forced` needs systems that can force a length (an undeclared default falls
    back to natural where they cannot, and says so in the run's engine info)."""
    if cfg.workload.output_lengths != "forced":
        return
    for system in (cfg.baseline, cfg.candidate_system):
        if not system.capabilities.forces_lengths:
            yield Problem(
                ("workload", "output_lengths"),
                "forced",
                f"system '{system.name}' ({system.capabilities.engine}) cannot hold a request to its length",
                "set forced_length_params: true on the openai system if its server accepts ignore_eos / min_tokens "
                "(vLLM and SGLang do), or output_lengths: natural",
            )
            return


def _trace(cfg: CandidateConfig, prov: Provenance) -> Iterator[str]:
    """Every row of a replayed trace (the rows the replay reads), and each scenario's replay span."""
    trace = cfg.workload.trace
    if trace is None:
        return
    try:
        rows = read_trace_rows(trace, cfg.workload.prefix.prefix_len)
        for sc in cfg.validation.scenarios:
            check_replay_span(trace.path, rows, trace.time_scale / sc.rate_scale)
    except ConfigError as exc:
        holder, _ = prov.file_for(("workload", "trace", "path"))
        yield f"{exc} (the trace of `workload.trace.path` in {holder})"


def _durations(cfg: CandidateConfig) -> Iterator[Problem]:
    """A synthetic load of n requests at rate r lasts about n / r seconds: at most a day, scenarios included."""
    wl = cfg.workload
    if wl.arrival is None:
        return
    rate = wl.arrival.rate_per_s
    loads: list[tuple[Loc, float, int, float]] = [
        (("workload", "num_requests"), rate, wl.num_requests, 1.0),
        (("ablation", "num_requests"), rate, cfg.ablation.num_requests or wl.num_requests, 1.0),
    ]
    for i, sc in enumerate(cfg.validation.scenarios):
        loads.append(
            (("validation", "scenarios", str(i), "rate_scale"), rate, sc.num_requests or wl.num_requests, sc.rate_scale)
        )
    for loc, r, n, scale in loads:
        if r * scale > MAX_RATE_PER_S:
            yield Problem(
                loc,
                scale,
                f"scales the rate {r:g}/s to {r * scale:g}/s, beyond {MAX_RATE_PER_S:g}/s",
                "a smaller rate_scale or workload rate",
            )
        elif n / (r * scale) > MAX_SECONDS:
            yield Problem(
                loc if scale != 1.0 else ("workload", "arrival", "rate_per_s"),
                scale if scale != 1.0 else r,
                f"{n} requests at {r * scale:.3g}/s take ~{n / (r * scale):.3g} s, more than a day",
                "a higher rate_per_s (requests per second) or fewer requests",
            )


def _systems(cfg: CandidateConfig) -> list[tuple[Loc, AnySystem]]:
    """The baseline, and the candidate's system when it differs (its changed fields live under `changes`)."""
    cand = cfg.candidate_system
    return [(("baseline",), cfg.baseline)] + ([(("changes",), cand)] if cand != cfg.baseline else [])


def _paths(cfg: CandidateConfig) -> Iterator[Problem]:
    """Files and interpreters the run will open: tokenizers, vLLM's python, the quality model and data."""
    seen: set[tuple[str, str]] = set()
    for loc, system in _systems(cfg):
        model = system.capabilities.model  # the ModelSpec it serves (hf, vllm), else None
        tok = model.tokenizer if model is not None else None
        if tok and ("tokenizer", tok) not in seen and not Path(tok).expanduser().is_dir():
            seen.add(("tokenizer", tok))
            yield Problem(
                (*loc, "model", "tokenizer"),
                tok,
                "is not a directory",
                "point it at the tokenizer's directory (tokenizer.json), or drop it to use the model's",
            )
        if isinstance(system, VLLMSystem) and ("python", system.python) not in seen:
            seen.add(("python", system.python))
            python = system.python_path(ROOT)
            if not python.is_file() or not os.access(python, os.X_OK):
                what = "does not exist" if not python.exists() else "is not an executable file"
                yield Problem(
                    (*loc, "python"),
                    system.python,
                    f"{python} {what} (vLLM's interpreter)",
                    "bash scripts/setup_vllm.sh (CPU), or set python: to an interpreter that has vllm",
                )
    yield from _gate_paths(cfg)


def _gate_paths(cfg: CandidateConfig) -> Iterator[Problem]:
    gate = cfg.gate
    if gate.quality_model != "system":
        try:
            ModelSpec(path=gate.quality_model)  # a builtin: name it knows, or a directory with config.json
        except ValidationError as exc:
            why = exc.errors()[0]["msg"].removeprefix("Value error, ").split("; fix:")[0]
            yield Problem(
                ("gate", "quality_model"),
                gate.quality_model,
                why,
                "`system` (the arm's own model), builtin:quality-tiny, or a saved model's directory",
            )
    if gate.quality_data_dir is not None:
        d = Path(gate.quality_data_dir).expanduser()
        if not d.is_dir():
            yield Problem(
                ("gate", "quality_data_dir"),
                gate.quality_data_dir,
                "is not a directory",
                "a directory of <task>.jsonl files (relative to the working directory), or drop it",
            )
        elif not any(d.glob("*.jsonl")):
            yield Problem(
                ("gate", "quality_data_dir"),
                gate.quality_data_dir,
                "holds no <task>.jsonl file",
                "put the task files (arith.jsonl, kv.jsonl, mc.jsonl, tool.jsonl) there",
            )


def _device(system: AnySystem) -> str | None:
    """'cpu' or 'gpu' where the config says where the system runs (fake and remote systems: unknown)."""
    if isinstance(system, (HFSystem, VLLMSystem)) and system.device in ("cpu", "cuda"):
        return "gpu" if system.device == "cuda" else "cpu"
    return None


def _hardware(cfg: CandidateConfig, prov: Provenance) -> Iterator[Problem]:
    """The roofline's device must be the run's (an H200's roofs judge a CPU run as hopelessly slow)."""
    if cfg.allow_hardware_mismatch:
        return
    for loc, system in _systems(cfg):
        device = _device(system)
        if device is not None and device != cfg.hardware.kind:
            where = prov.where((*loc, "device")) or f" (in {prov.root})"
            yield Problem(
                ("hardware", "kind"),
                cfg.hardware.kind,
                f"the hardware file '{cfg.hardware.name}' describes a {cfg.hardware.kind}, but the "
                f"{'baseline' if loc == ('baseline',) else 'candidate'} system "
                f"runs on device: {'cuda' if device == 'gpu' else 'cpu'}{where}",
                f"name a hardware file of kind: {device} (e.g. configs/hardware/"
                f"{'cpu' if device == 'cpu' else 'h100-sxm'}.yaml), or set allow_hardware_mismatch: true in the "
                "candidate to project onto other hardware on purpose",
            )
            return
