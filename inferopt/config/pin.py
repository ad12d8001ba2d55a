"""Pinning a reviewed configuration: the content hash of a resolved config dump, and the check that what is about
to run is what was reviewed.

`config_sha256(data)` hashes the canonical JSON of a dump (sorted keys, no whitespace), so the same content has
the same hash however it was written. `check_pinned(data, pinned, overrides)` raises ConfigError when the hash
differs from the one pinned at review, or when an override would set an executable field (`python`,
`extra_args`, `extra_env`: an interpreter, a command line, an environment) to anything but a secret the
reviewed dump held redacted. Pure functions, no I/O. Deliberately not here: where the pin is stored
(flows/nightly.py tags the accepted MLflow run).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from inferopt.config.redact import REDACTED
from inferopt.config.systems import ConfigError

EXECUTABLE_FIELDS = frozenset({"python", "extra_args", "extra_env"})


def config_sha256(data: Any) -> str:
    """Hex SHA-256 of the canonical JSON of `data` (a config dump as read back from JSON)."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def leaf_paths(value: Any, prefix: str) -> list[tuple[str, Any]]:
    """(dotted path, value) of every leaf under `value` placed at `prefix` (dicts and lists walked)."""
    if isinstance(value, dict) and value:
        return [p for k, v in value.items() for p in leaf_paths(v, f"{prefix}.{k}")]
    if isinstance(value, (list, tuple)) and value and any(isinstance(v, (dict, list)) for v in value):
        return [p for i, v in enumerate(value) for p in leaf_paths(v, f"{prefix}.{i}")]
    return [(prefix, value)]


def _at(data: Any, dotted: str) -> Any:
    node = data
    for part in dotted.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def executable_overrides(reviewed: Any, overrides: dict[str, Any] | None) -> list[str]:
    """Dotted paths that `overrides` would set on an executable field, except filling a secret that `reviewed`
    holds as the redaction marker (an `extra_env` token put back at run time)."""
    bad = []
    for dotted, value in (overrides or {}).items():
        for path, leaf in leaf_paths(value, dotted):
            if not EXECUTABLE_FIELDS.intersection(path.split(".")):
                continue
            if _at(reviewed, path) == REDACTED and isinstance(leaf, str):
                continue
            bad.append(path)
    return bad


def check_pinned(data: Any, pinned_sha256: str | None, overrides: dict[str, Any] | None, where: str) -> str:
    """The hash of `data` when it is the pinned one and `overrides` touch no executable field; else ConfigError
    naming `where` (the file or run it came from), the field and the fix."""
    actual = config_sha256(data)
    if not pinned_sha256:
        raise ConfigError(
            f"{where}: no pinned content hash (accepted before pinning, or the tag was removed); "
            "fix: review it and promote it again with --accept, which pins its sha256"
        )
    if actual != pinned_sha256:
        raise ConfigError(
            f"{where}: content sha256 {actual[:12]}… differs from the one pinned when it was accepted "
            f"({pinned_sha256[:12]}…): it changed after review; fix: review the run again and re-promote it"
        )
    bad = executable_overrides(data, overrides)
    if bad:
        raise ConfigError(
            f"{where}: overrides {bad} set executable fields ({', '.join(sorted(EXECUTABLE_FIELDS))}) that are "
            "not in the reviewed config; fix: put them in a candidate, run and review it, and promote that run"
        )
    return actual
