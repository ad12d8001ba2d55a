"""A free TCP port for a local server this project starts (vLLM, nginx, MLflow, Prefect, a benchmark's server).

Deliberately not here: starting or waiting for the server (its owner does; a lost race fails its start).
"""

from __future__ import annotations

import socket

__all__ = ["free_port"]


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free on `host` a moment ago (the server binds it; a lost race fails start with the log)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
