"""Session turns that lead to a tool call: the model is asked for the call, its answer is parsed and scored.

A turn with planned tool steps gets a suite-format ask (`inferopt.model.quality.toolcall.tool_ask`, seeded by the
request id: the same ask on every arm and trial). With a text codec (the served model's tokenizer) the turn's new
message ends with the ask's prompt (random filler first, so the planned message length is kept when it is longer),
its output budget is at least the suite's (`TOOL_ANSWER_TOKENS`) and it stops at EOS (an answer must be free to
end); the answer (up to EOS) is scored as the suite scores it, into the record's `tool_*` fields. The tool service
is called with the model's parsed arguments when they are a valid call, else with the expected ones
(`tool_args_source` says which). Without a codec (the fake engine's tokens are no model's text; an endpoint with
no local tokenizer) or when the output ids are placeholders, the turn stays as planned, the service gets the
expected arguments and `tool_note` says why the answer is not applicable — never scored as right or wrong.

Deliberately not here: the statistics over turns and arms (`inferopt.gate.session_tools`), the suite itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inferopt.model.codec import TextCodec, codec_for
from inferopt.model.loading import resolve_model_dir
from inferopt.model.quality.toolcall import TOOL_ANSWER_TOKENS, ToolAsk, score_tool_call, tool_ask, valid_call
from inferopt.records import RequestRecord


@dataclass(frozen=True)
class ToolTurns:
    """How a run's tool-call turns are asked: with `codec` in words, else not at all (`reason` says why)."""

    codec: TextCodec | None = None
    reason: str = "no text codec given"

    def ask(self, row: dict[str, Any], planned: bool) -> ToolAsk | None:
        """The turn's ask when it plans tool steps, else None."""
        return tool_ask(str(row["request_id"])) if planned else None

    def message(self, ask: ToolAsk | None, new_ids: list[int]) -> tuple[list[int], int | None]:
        """(the new message's ids, the output budget floor or None): the ask's prompt at the message's end."""
        if ask is None or self.codec is None:
            return new_ids, None
        prompt = self.codec.encode(ask.prompt)
        return new_ids[: max(0, len(new_ids) - len(prompt))] + prompt, TOOL_ANSWER_TOKENS

    def score(self, rec: RequestRecord, ask: ToolAsk) -> dict[str, Any]:
        """Fill `rec`'s tool fields from its output; returns the arguments to call the tool service with."""
        rec.tool_ask_id, rec.tool_lang, rec.tool_expected = ask.id, ask.lang, ask.expected
        rec.tool_args_source = "expected"
        note = self._not_applicable(rec)
        if note:
            rec.tool_note = note
            return dict(ask.args)
        assert self.codec is not None  # _not_applicable says so otherwise
        rec.tool_answer = self.codec.answer(list(rec.output_token_ids))
        s = score_tool_call(rec.tool_answer, ask.expected)
        rec.tool_json_valid, rec.tool_args_ok, rec.tool_numbers_ok = s.json_valid, s.args_ok, s.numbers_ok
        if valid_call(s.args):
            rec.tool_args_source = "model"
            return dict(s.args or {})
        return dict(ask.args)

    def _not_applicable(self, rec: RequestRecord) -> str:
        if self.codec is None:
            return f"not applicable: {self.reason}"
        if rec.outcome != "ok":
            return f"not applicable: the turn's outcome is {rec.outcome}"
        if any(t < 0 for t in rec.output_token_ids):
            return "not applicable: the engine returned no token ids (placeholders), so no text to read"
        return ""


NO_TOOL_TURNS = ToolTurns()  # a runner given no codec: tool turns are not asked in words


def tool_turns_for(system: Any) -> ToolTurns:
    """How `system`'s tool-call turns are asked: in words with its model's tokenizer when it serves a local model
    whose tokens are real (`capabilities.model`; a pooled system whose pools share one), else not (with why)."""
    caps = system.capabilities
    if caps.scripted_timings:
        return ToolTurns(None, f"the {caps.engine} engine's tokens are scripted, no model's text")
    models = [caps.model] if caps.model is not None else [p.capabilities.model for p in caps.pools]
    if not models or any(m is None for m in models) or len({m.path for m in models}) != 1:
        return ToolTurns(None, f"no local model whose tokenizer reads the {caps.engine} engine's output ids")
    codec, why = codec_for(resolve_model_dir(models[0]), models[0].tokenizer)
    return ToolTurns(codec, why)
