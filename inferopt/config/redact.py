"""Secrets out of everything we log: `redacted(data)` is a copy of a config dump (or any JSON-like value) with
every secret replaced by `REDACTED`, `secret_values(data)` the secrets themselves (to scrub them from text
that is not structured, `scrub_text`), `redacted_paths(data)` where a redacted dump holds the marker.

A secret is: every value of a `headers` or `extra_env` mapping (an OpenAI endpoint's credentials, a vLLM
server's environment), a string under a key named like a credential (`api_key`, `HF_TOKEN`, `password`,
`client_secret`, `authorization`, ...: the name's last part is or ends in key/token/secret/password/...;
numbers are never secrets), and in a command line (`extra_args`, a launched server's `command`) the value
after a flag named like one (`--api-key X`, `--hf-token=X`).

Pure functions, no I/O. Deliberately not here: deciding what to log (tasks/tracking.py, the flows).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

REDACTED = "***"
SECRET_CONTAINERS = frozenset({"headers", "extra_env"})
_SECRET_PARTS = ("key", "token", "secret", "password", "passwd", "passphrase", "credential", "credentials")
_SECRET_WORDS = frozenset({"authorization", "auth", "cookie", "bearer", "pwd", *_SECRET_PARTS})
_SPLIT = re.compile(r"[^a-z0-9]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def is_secret_name(name: str) -> bool:
    """A field, header or flag name that names a credential: its last part is, or ends in, a credential word
    (`api_key`, `X-Api-Key`, `accessToken`, `--hf-token`; not `token_id`, `tokenizer` or `token-burst`)."""
    parts = [p for p in _SPLIT.split(_CAMEL.sub("_", str(name)).lower()) if p]
    return bool(parts) and (parts[-1] in _SECRET_WORDS or parts[-1].endswith(_SECRET_PARTS))


def redact_args(args: Iterable[Any]) -> list[Any]:
    """A command line with the value of every secret-named flag replaced (`--api-key X`, `--api-key=X`)."""
    out: list[Any] = []
    hide_next = False
    for arg in args:
        text = str(arg)
        if hide_next and not text.startswith("--"):
            out.append(REDACTED)
            hide_next = False
            continue
        hide_next = False
        flag, eq, _value = text.partition("=")
        if flag.startswith("-") and is_secret_name(flag):
            out.append(f"{flag}={REDACTED}" if eq else arg)
            hide_next = not eq
        else:
            out.append(arg)
    return out


def _is_args(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and any(isinstance(v, str) and v.startswith("-") for v in value)


def redacted(data: Any) -> Any:
    """A copy of `data` (dicts, lists, tuples, scalars) with every secret replaced by REDACTED."""
    if isinstance(data, dict):
        out: dict[Any, Any] = {}
        for key, value in data.items():
            if str(key) in SECRET_CONTAINERS and isinstance(value, dict):
                out[key] = {k: REDACTED for k in value}
            elif isinstance(value, str) and (is_secret_name(key) or str(key) in SECRET_CONTAINERS):
                out[key] = REDACTED
            else:
                out[key] = redacted(value)
        return out
    if isinstance(data, (list, tuple)):
        items = [redacted(v) for v in (redact_args(data) if _is_args(data) else data)]
        return tuple(items) if isinstance(data, tuple) else items
    return data


def redacted_flat(values: dict[str, Any]) -> dict[str, Any]:
    """Redaction of a flattened mapping (dotted keys, as MLflow params are): `baseline.headers.Authorization`."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        parts = str(key).split(".")
        if any(p in SECRET_CONTAINERS for p in parts[:-1]) or (isinstance(value, str) and is_secret_name(parts[-1])):
            out[key] = REDACTED
        else:
            out[key] = redacted(value)
    return out


def secret_values(data: Any) -> set[str]:
    """The secrets in `data` (what `redacted` would hide), for scrubbing them from free text."""
    found: set[str] = set()

    def walk(x: Any, y: Any) -> None:
        if isinstance(x, dict) and isinstance(y, dict):
            for k in x:
                walk(x[k], y.get(k))
        elif isinstance(x, (list, tuple)) and isinstance(y, (list, tuple)):
            for a, b in zip(x, y, strict=False):
                walk(a, b)
        elif y == REDACTED and x != REDACTED and isinstance(x, (str, int, float)) and str(x):
            found.add(str(x))
        elif isinstance(x, str) and isinstance(y, str) and y.endswith("=" + REDACTED) and x != y:
            found.add(x[len(y) - len(REDACTED) :])

    walk(data, redacted(data))
    return found


def scrub_text(text: str, secrets: Iterable[str]) -> str:
    """`text` with every occurrence of each secret replaced by REDACTED (longest first)."""
    for s in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(s, REDACTED)
    return text


def redacted_paths(data: Any, prefix: str = "") -> list[str]:
    """Dotted paths in `data` whose value is the REDACTED marker (a redacted dump read back)."""
    if isinstance(data, dict):
        return [p for k, v in data.items() for p in redacted_paths(v, f"{prefix}{k}.")]
    if isinstance(data, (list, tuple)):
        return [p for i, v in enumerate(data) for p in redacted_paths(v, f"{prefix}{i}.")]
    return [prefix.rstrip(".")] if data == REDACTED or (isinstance(data, str) and data.endswith("=" + REDACTED)) else []
