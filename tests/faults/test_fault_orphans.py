"""Parent death leaves no server behind: a process SIGKILLed while its servers run takes them with it — a server
launched the way every launcher here does (`tied_to_parent`: own process group + parent-death signal), and the
vLLM launcher with a worker of its own that ignores SIGTERM (the launcher's guard stops the whole group)."""

from __future__ import annotations

from pathlib import Path

import faultkit


def test_a_launched_server_dies_with_its_sigkilled_parent(tmp_path: Path) -> None:
    out = faultkit.servers_die_with_parent(tmp_path)
    assert out.survived and out.orphans == 0, out.detail


def test_the_vllm_launcher_and_its_workers_die_with_the_sigkilled_flow(tmp_path: Path) -> None:
    out = faultkit.vllm_group_dies_with_flow(tmp_path)
    assert out.survived and out.orphans == 0, out.detail
