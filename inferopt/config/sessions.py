"""The `sessions:` block of a workload: multi-turn sessions with think time, tool steps and a history store.

A session is a sequence of turns; a turn's prompt is the session's history (earlier messages, the model's actual
outputs and the tools' results) plus a new message. Sessions arrive by the workload's `arrival` process; turns
within a session are closed-loop (`inferopt.measure.agentic`). Lengths of the first message and every output come
from the workload's joint `lengths`; later messages from `new_message`.

Deliberately not here: sampling (`inferopt.workload.sessions`) or running anything.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveInt, model_validator

from inferopt.config.bounds import Count, Tokens
from inferopt.config.systems import Frozen


class DelayConfig(Frozen):
    """A non-negative delay in ms with mean `mean_ms`: `constant`, `exponential`, or `lognormal` (log-space
    standard deviation `sigma`, mean kept), clipped to `max_ms`."""

    kind: Literal["constant", "exponential", "lognormal"] = "lognormal"
    mean_ms: NonNegativeFloat = Field(default=50.0, le=3_600_000.0)
    sigma: NonNegativeFloat = Field(default=0.5, le=5.0)
    max_ms: NonNegativeFloat = Field(default=60_000.0, le=3_600_000.0)


class TurnsConfig(Frozen):
    """Turns per session: uniform integers in [min, max]."""

    min: PositiveInt = Field(default=2, le=1000)
    max: PositiveInt = Field(default=4, le=1000)

    @model_validator(mode="after")
    def _order(self) -> TurnsConfig:
        if self.min > self.max:
            raise ValueError(f"turns.min must be <= turns.max ({self.min} > {self.max}); fix: lower min or raise max")
        return self


class MessageLengthConfig(Frozen):
    """Token length of a later turn's new message: lognormal around `median`, clipped to [min, max]."""

    median: Tokens = 24
    sigma: NonNegativeFloat = Field(default=0.5, le=10.0)
    min: Tokens = 1
    max: Tokens = 256

    @model_validator(mode="after")
    def _order(self) -> MessageLengthConfig:
        if self.min > self.max:
            raise ValueError(f"new_message.min must be <= max ({self.min} > {self.max}); fix: lower min or raise max")
        return self


class ToolConfig(Frozen):
    """After a turn's answer, with `probability` the agent calls the local tool service 1..`max_steps` times (uniform);
    each call sleeps a `latency` sample there and returns `result_tokens` token ids, which join the history."""

    probability: float = Field(default=0.5, ge=0.0, le=1.0)
    max_steps: PositiveInt = Field(default=1, le=16)
    latency: DelayConfig = DelayConfig()
    result_tokens: NonNegativeInt = Field(default=8, le=4096)


class HistoryConfig(Frozen):
    """Where a session's messages live between turns: a SQLite file, fresh (temporary) for every run."""

    store: Literal["sqlite"] = "sqlite"


class SessionsConfig(Frozen):
    """Multi-turn sessions (see the module docstring); `num_sessions` replaces the workload's `num_requests`."""

    num_sessions: Count = 8
    turns: TurnsConfig = TurnsConfig()
    think: DelayConfig = DelayConfig(kind="exponential", mean_ms=300.0)
    new_message: MessageLengthConfig = MessageLengthConfig()
    tools: ToolConfig = ToolConfig()
    history: HistoryConfig = HistoryConfig()
