"""Registry of the models the project makes itself: one YAML spec per model built at set-up (random
weights, for performance work), or one shipped directory per trained model (`quality-tiny/`: weights
trained by `inferopt.model.quality.train`, small enough to ship, so a fresh machine needs no hub)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

BUILTIN_DIR = Path(__file__).parent


def built_names() -> list[str]:
    """Models built from a YAML spec."""
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.yaml"))


def shipped_dir(name: str) -> Path | None:
    """The shipped directory of a trained builtin model, or None."""
    d = BUILTIN_DIR / name
    return d if (d / "config.json").is_file() else None


def builtin_names() -> list[str]:
    shipped = [p.parent.name for p in BUILTIN_DIR.glob("*/config.json")]
    return sorted(set(built_names()) | set(shipped))


def builtin_spec(name: str) -> dict[str, Any]:
    path = BUILTIN_DIR / f"{name}.yaml"
    if not path.is_file():
        raise KeyError(f"unknown builtin model {name!r}; known: {', '.join(builtin_names())}")
    return yaml.safe_load(path.read_text())
