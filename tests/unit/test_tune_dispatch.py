"""Points of the search run elsewhere (issue 14 item 3, `flows.tune --dispatch workers`): the search hands them
to an injected runner in waves — the baseline alone, every grid in one wave, a sampled lever `parallel` at a time —
and gets the same points it finds inline; a point whose run did not come back is a failed point and the search
goes on; a capacity result survives the trip as files (`validate.capacity_io`) with its probes' records."""

from __future__ import annotations

import math
import shutil

import pytest
from test_tune import HW, SLO, fake, point, workload

from inferopt.choose.points import PointJob
from inferopt.choose.sampler import select_points, select_points_batched
from inferopt.choose.search import TuneBudget, custom_space, tune
from inferopt.records import read_records
from inferopt.validate.capacity import CapacityBudget, CapacityResult, capacity
from inferopt.validate.capacity_io import load_capacity, save_capacity

CAPACITY = CapacityBudget(max_probes=4, rel_tol=0.3)  # coarse: these tests check where points run, not how far
LOAD = workload(160.0, n=24)


class Recorder:
    """A runner that runs every job's capacity search here, as a worker would, and keeps the waves it got."""

    def __init__(self, lost: set[str] = frozenset()):
        self.waves: list[list[PointJob]] = []
        self.lost = lost

    def measure(self, job: PointJob, remote) -> None:
        """What the worker does: the point's capacity search into its own directory, result beside it."""
        save_capacity(capacity(job.system, LOAD, SLO, remote, budget=CAPACITY, arm=job.label), remote)

    def __call__(self, jobs):
        self.waves.append(list(jobs))
        out = []
        for j in jobs:
            if j.label in self.lost:  # the worker died: what tasks/dispatch_points.py returns
                out.append(CapacityResult("failed", math.nan, None, None, "dispatch: flow run x ended CRASHED", ()))
                continue
            remote = j.out_dir.parent.parent / "on-a-worker" / j.out_dir.name
            self.measure(j, remote)
            shutil.copytree(remote, j.out_dir)  # what the fetch does: the directory travels
            shutil.rmtree(remote)
            out.append(load_capacity(j.out_dir))
        return out


class Replayer(Recorder):
    """A runner whose workers measured what an earlier inline search (`inline`, run into `inline_dir`) measured:
    each job's directory is that point's (its probes' records, its `capacity.json`), so the ranking sees the same
    capacities. Two live searches of one system differ by the box's noise (a coarse bracket can read "winner"
    once, "tie" the next), which is not what dispatch is asked to keep."""

    def __init__(self, inline, inline_dir):
        super().__init__()
        self.inline, self.inline_dir = inline, inline_dir

    def measure(self, job: PointJob, remote) -> None:
        here = self.inline_dir / "points" / job.out_dir.name  # the inline point's; its records lie under it
        save_capacity(self.inline.points[job.index].capacity, here)  # their paths written relative to it
        shutil.copytree(here, remote)


def _search(tmp_path, runner=None, parallel=1, max_trials=5):
    space = [custom_space(fake(1, 5.0, "fake-b1"), "batching.max_batch_size", [2, 4, 8])]
    budget = TuneBudget(max_trials=max_trials, capacity=CAPACITY, confirm_repeats=0)
    kw = {"budget": budget, "spaces": space, "warmup_requests": 0, "run_points": runner, "parallel": parallel}
    return tune(fake(1, 5.0, "fake-b1"), LOAD, SLO, HW, tmp_path, **kw)


@pytest.mark.slow  # still run in CI; off the fast suite (~5 min): ~22 s here (one live search; the other replays it)
def test_points_go_to_the_runner_in_waves_and_come_back_the_same(tmp_path):
    inline = _search(tmp_path / "inline")
    runner = Replayer(inline, tmp_path / "inline")
    spread = _search(tmp_path / "workers", runner, parallel=3)
    assert [[j.label for j in w] for w in runner.waves] == [
        ["baseline"],
        ["batching.max_batch_size-2", "batching.max_batch_size-4", "batching.max_batch_size-8"],  # the grid at once
    ]
    assert runner.waves[0][0].change is None and runner.waves[1][2].change == {"batching.max_batch_size": 8}
    assert [p.label for p in spread.points] == [p.label for p in inline.points]
    assert [p.index for p in spread.points] == [0, 1, 2, 3]
    assert spread.decision == inline.decision and spread.recommended.label == inline.recommended.label
    # the probes' records came with the files: the simulator can read them where they landed
    probe = spread.points[1].capacity.probes[0]
    assert str(tmp_path / "workers") in probe.records_path and read_records(probe.records_path)


@pytest.mark.slow  # still run in CI; off the fast suite (~5 min): ~12 s here
def test_a_sampled_lever_runs_parallel_points_at_a_time(tmp_path):
    runner = Recorder()
    r = _search(tmp_path, runner, parallel=2, max_trials=3)  # the baseline + 2 of the 3 batch sizes
    assert [len(w) for w in runner.waves] == [1, 2]
    assert len({p.value for p in r.points[1:]}) == 2 and {p.chosen_by for p in r.points[1:]} <= {"tpe", "grid"}


@pytest.mark.slow  # still run in CI; off the fast suite (~5 min): ~13 s here
def test_levers_are_searched_side_by_side_in_one_wave(tmp_path):
    base = fake(1, 5.0, "fake-b1")
    spaces = [
        custom_space(base, "batching.max_batch_size", [2, 4, 8]),
        custom_space(base, "batching.batch_wait_ms", [5.0, 10.0]),
    ]
    budget = TuneBudget(max_trials=3, capacity=CAPACITY, confirm_repeats=0)  # one point per lever
    runner = Recorder()
    tune(base, LOAD, SLO, HW, tmp_path, budget=budget, spaces=spaces, warmup_requests=0, run_points=runner, parallel=2)
    assert [len(w) for w in runner.waves] == [1, 2]
    assert {next(iter(j.change)) for j in runner.waves[1]} == {"batching.max_batch_size", "batching.batch_wait_ms"}


@pytest.mark.slow  # still run in CI; off the fast suite (~5 min): ~12 s here
def test_a_point_that_did_not_come_back_is_failed_and_the_search_goes_on(tmp_path):
    r = _search(tmp_path, Recorder(lost={"batching.max_batch_size-4"}), parallel=3)
    lost = {p.label: p for p in r.points}["batching.max_batch_size=4"]
    assert len(r.points) == 4 and lost.capacity.status == "failed" and "dispatch" in lost.capacity.message
    assert r.recommended is not None and r.recommended is not lost, r.message


def test_parallel_below_one_is_refused(tmp_path):
    with pytest.raises(ValueError, match="parallel=0"):
        _search(tmp_path, Recorder(), parallel=0)


def test_waves_of_one_are_the_sequential_sampler():
    def run(width):
        seen = []

        def many(todo):
            seen.append([i for i, _ in todo])
            return [point(i, 100.0 * (i + 1), 110.0 * (i + 1)) for i, _ in todo]

        picked = select_points_batched((2, 4, 8, 16, 32), 3, many, seed=3, width=width)
        return seen, [p.index for p in picked]

    seq = []
    ref = select_points((2, 4, 8, 16, 32), 3, lambda i, how: seq.append(i) or point(i, 100.0 * (i + 1), 1.0), 3)
    waves, picked = run(1)
    assert [i for w in waves for i in w] == seq == [p.index for p in ref] and all(len(w) == 1 for w in waves)
    waves, picked = run(3)
    assert len(waves[0]) == 3 and len(set(picked)) == 3  # one wave of three distinct values


def test_a_capacity_result_round_trips_through_its_file(tmp_path):
    cap = capacity(fake(1, 5.0, "fake-b1"), LOAD, SLO, tmp_path / "a", budget=CAPACITY)
    save_capacity(cap, tmp_path / "a")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    back = load_capacity(tmp_path / "b")
    assert back.table().drop(columns="records_path").equals(cap.table().drop(columns="records_path"))
    assert (back.status, back.req_per_s, back.message) == (cap.status, cap.req_per_s, cap.message)
    assert all(p.records_path.startswith(str(tmp_path / "b")) for p in back.probes)
    with pytest.raises(ValueError, match="not a capacity result"):
        load_capacity(tmp_path)
