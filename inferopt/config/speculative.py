"""The hf engine's speculative-decoding option (SPEC K5): which draft model proposes tokens and how many per round.

`HFSystem.speculative` holds one of these (None = plain greedy decoding). Three kinds of draft, all greedy:
- `layers:N` — the target's own first N decoder layers with its embeddings, final norm and LM head (weights shared,
  nothing copied): a layer-truncated "early exit" draft that needs no second checkpoint;
- `builtin:<name>` — a builtin model (`inferopt/model/builtin/`);
- a model directory (config.json + weights) whose tokenizer and vocabulary match the target's.

Deliberately not here: building the draft or running it (`inferopt.engines.hf.speculative`).
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, field_validator

from inferopt.model.builtin import builtin_names

LAYERS_RE = re.compile(r"^layers:(\d+)$")


class SpeculativeDecoding(BaseModel):
    """Draft-then-verify decoding at batch 1 (the engine serves one request at a time while it is on)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    draft_model: str = Field(description="layers:N (the target's first N layers), builtin:<name>, or a model directory")
    num_draft_tokens: PositiveInt = Field(default=4, le=32, description="k: tokens the draft proposes per round")

    @field_validator("draft_model")
    @classmethod
    def _draft(cls, value: str) -> str:
        m = LAYERS_RE.match(value)
        if m:
            if int(m.group(1)) < 1:
                raise ValueError(
                    "draft_model layers:0 has no layers; fix: layers:1 or more (fewer than the target has)"
                )
            return value
        if value.startswith("builtin:"):
            if value.removeprefix("builtin:") not in builtin_names():
                raise ValueError(
                    f"draft_model {value!r}: unknown builtin; fix: one of "
                    + ", ".join(f"builtin:{n}" for n in builtin_names())
                    + ", or layers:N"
                )
            return value
        if not (Path(value).expanduser() / "config.json").is_file():
            raise ValueError(
                f"draft_model {value!r} is neither layers:N, builtin:<name> nor a model directory (no "
                "config.json there); fix: e.g. layers:2 (the target's first 2 layers as the draft)"
            )
        return str(Path(value).expanduser())

    @property
    def truncated_layers(self) -> int | None:
        """N for a `layers:N` draft, else None."""
        m = LAYERS_RE.match(self.draft_model)
        return int(m.group(1)) if m else None
