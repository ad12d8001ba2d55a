"""Output lengths as the load says (`workload.output_lengths`): `forced` holds every request to its target
length (the trace's or the distribution's: vLLM `ignore_eos` + `min_tokens`, our own loop on hf), `natural`
lets the model stop at EOS, so a change in verbosity is part of the effect.

Undeclared, a trace replay is forced and a synthetic load natural (`declared_default`); capacity probes
default to forced, arms that can change outputs to natural (their callers say so). A table carries its mode in
`attrs["output_lengths"]`; `run_mode` is what a run sends, given what the engine can do;
`production_output_median` is what forced lengths are held against.

Deliberately not here: which changes can change outputs (`inferopt.choose.output_lengths`), the engines'
request bodies, and the lint of forced-short or collapsed lengths (`inferopt.verdict.lint`).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd

from inferopt.config import Capabilities, WorkloadConfig
from inferopt.config.trace_rows import read_trace_rows

OutputLengths = Literal["forced", "natural"]
ATTR = "output_lengths"


def declared_default(cfg: WorkloadConfig) -> OutputLengths:
    """The workload's own mode: as declared, else forced for a trace replay and natural for a synthetic load."""
    if cfg.output_lengths is not None:
        return cfg.output_lengths
    return "forced" if cfg.trace is not None else "natural"


def mark(table: pd.DataFrame, mode: OutputLengths) -> pd.DataFrame:
    """The table, told to send `mode` (in place; returned for chaining)."""
    table.attrs[ATTR] = mode
    return table


def run_mode(table: pd.DataFrame, caps: Capabilities) -> OutputLengths:
    """What a run of `table` sends: its mode, but natural where the engine cannot force a length (the pre-run
    lint refuses a *declared* forced on such an engine, so only an undeclared default lands here)."""
    mode = table.attrs.get(ATTR, "natural")
    return "forced" if mode == "forced" and caps.forces_lengths else "natural"


PRODUCTION_ROWS = 100_000  # a trace's production lengths: its first rows, at most this many


def production_output_median(cfg: WorkloadConfig) -> float:
    """The production distribution's median output length (tokens): a synthetic load's `output_median` (before
    clipping to `output_max`), or the median over a trace's rows (all of them, not `trace.limit`'s)."""
    if cfg.trace is None:
        return float(cfg.lengths.output_median)
    whole = cfg.trace.model_copy(update={"limit": PRODUCTION_ROWS})
    rows = read_trace_rows(whole, cfg.prefix.prefix_len)
    return float(np.median([r.output_len for r in rows]))
