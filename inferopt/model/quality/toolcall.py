"""The quality suite's tool-call format as one definition: asking for a call, parsing an answer, scoring its arguments.

A tool call is one JSON object, `{"name":"refund","order_id":"4821","amount":35.20}` or
`{"name":"cancel","order_id":"4821"}`, asked for by the suite's prompt (`refund order 4821 amount 35.20 ->`,
`inferopt.model.quality.corpus.tool`). `tool_ask(key)` draws one held-out (eval-split) short ask seeded by `key`
(a session turn's request id: the same ask on every arm and trial); `score_tool_call` is what the suite's
`process_gen` and the session runner both score with (exact text, JSON validity, arguments exact, the high-risk
numbers exact); `valid_call` says whether parsed arguments are a call the tool service can take.

Deliberately not here: lm-eval wiring (`inferopt/gate/tasks/utils.py`), running turns (`inferopt.measure`).
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from typing import Any

from inferopt.model.quality.corpus import LANGS, tool

TOOL_ANSWER_TOKENS = 64  # the suite's `max_gen_toks` for the tool task (inferopt/gate/tasks/inferopt_tool.yaml)
_REQUIRED = {"refund": ("order_id", "amount"), "cancel": ("order_id",)}


@dataclass(frozen=True)
class ToolAsk:
    """One asked-for tool call: the suite's prompt, the expected answer (text and parsed) and its language."""

    id: str
    lang: str
    prompt: str
    expected: str
    args: dict[str, Any]


@dataclass(frozen=True)
class ToolScore:
    exact: bool  # the answer's text is the expected text
    json_valid: bool  # the answer is one JSON object
    args_ok: bool  # its arguments (name included) equal the expected ones
    numbers_ok: bool  # order id and amount exactly (the high-risk numbers)
    args: dict[str, Any] | None  # the parsed answer (None: not a JSON object)


def tool_ask(key: str) -> ToolAsk:
    """A held-out short tool ask drawn from `key`'s hash (stable across runs, arms and machines)."""
    rng = random.Random(int(hashlib.sha256(f"tool-ask/{key}".encode()).hexdigest()[:12], 16))
    lang = LANGS[rng.randrange(len(LANGS))]
    while (ex := tool(rng, lang, "eval", long=False)) is None:
        continue
    return ToolAsk(ex.id, lang, ex.prompt, ex.answer, parse_tool_call(ex.answer) or {})


def parse_tool_call(text: str) -> dict[str, Any] | None:
    """The parsed tool call, or None when the text is not a JSON object."""
    try:
        obj = json.loads(text)
    except (json.JSONDecodeError, TypeError):
        return None
    return obj if isinstance(obj, dict) else None


def score_tool_call(answer: str, expected: str) -> ToolScore:
    """The suite's tool metrics of one answer (stripped) against the expected call."""
    got = answer.strip()
    want, have = parse_tool_call(expected), parse_tool_call(got)
    both = have is not None and want is not None
    return ToolScore(
        exact=got == expected.strip(),
        json_valid=have is not None,
        args_ok=both and have == want,
        numbers_ok=both and have.get("order_id") == want.get("order_id") and have.get("amount") == want.get("amount"),
        args=have,
    )


def valid_call(args: dict[str, Any] | None) -> bool:
    """A call the tool service can take: a known tool name with its required arguments (right or not)."""
    if not isinstance(args, dict) or args.get("name") not in _REQUIRED:
        return False
    if not isinstance(args.get("order_id"), str):
        return False
    return all(k in args for k in _REQUIRED[str(args["name"])]) and (
        args["name"] != "refund" or (isinstance(args["amount"], (int, float)) and not isinstance(args["amount"], bool))
    )
