"""Registry of the models the project builds itself: one YAML file per model in this folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

BUILTIN_DIR = Path(__file__).parent


def builtin_names() -> list[str]:
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.yaml"))


def builtin_spec(name: str) -> dict[str, Any]:
    path = BUILTIN_DIR / f"{name}.yaml"
    if not path.is_file():
        raise KeyError(f"unknown builtin model {name!r}; known: {', '.join(builtin_names())}")
    return yaml.safe_load(path.read_text())
