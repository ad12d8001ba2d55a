"""A killed ablation resumes from its finished trials: every finished trial was saved whole (temp folder + rename),
the resumed ablation loads those and runs only the rest, every planned trial is accounted for once, and the
loaded trials' records are the ones the killed attempt measured."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from inferopt.ablate import ablate
from inferopt.ablate.resume import TRIALS, archive_attempt, trial_path
from inferopt.config import load_config
from inferopt.engines import make_engine
from inferopt.records import read_records

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # ~10-20 s of real load: off the fast suite, still in CI
def test_a_resumed_ablation_loads_the_finished_trials_and_reruns_only_the_rest(tmp_path: Path) -> None:
    cand = load_config(
        ROOT / "configs/candidates/fake-batching.yaml", **{"ablation.repeats": 2, "ablation.num_requests": 24}
    )
    run_dir = tmp_path / "results" / "run-1"
    first = ablate(cand, run_dir / "4-ablate")
    planned = [(t.arm, t.repeat) for t in first.order]
    assert len(planned) == len(first.trials) >= 8
    # "killed" after the first 5 trials: the later ones never finished; one was cut off mid-save
    for arm, rep in planned[5:]:
        shutil.rmtree(trial_path(run_dir / "4-ablate" / TRIALS, arm, rep))
    arm, rep = planned[5]
    (trial_path(run_dir / "4-ablate" / TRIALS, arm, rep).with_name(f"trial-{rep}.partial")).mkdir()
    kept = {(a, r): first.runs[i].records for i, (a, r) in enumerate(planned[:5])}

    archived = archive_attempt(run_dir)
    assert archived == run_dir / "attempt-1" and not (run_dir / "4-ablate").exists()
    started = []

    def counting(system):
        started.append(system.name)
        return make_engine(system)

    second = ablate(cand, run_dir / "4-ablate", engine_factory=counting, resume_from=archived / "4-ablate" / TRIALS)
    assert second.resumed == [f"{a}/trial-{r}" for a, r in planned[:5]]
    assert len(started) == len(planned) - 5  # only the unfinished trials ran again
    assert [(t.arm, t.repeat) for t in second.order] == planned and len(second.trials) == len(planned)
    for i, (a, r) in enumerate(planned[:5]):
        assert [x.request_id for x in second.runs[i].records] == [x.request_id for x in kept[(a, r)]]
        assert [x.client_done_s for x in second.runs[i].records] == [x.client_done_s for x in kept[(a, r)]]
    stream = read_records(run_dir / "4-ablate" / "requests.jsonl")  # the new stream holds every trial once
    per_trial = {(x.arm, x.trial) for x in stream}
    assert per_trial == set(planned)
    assert len(stream) == sum(len(x.records) for x in second.runs) + sum(x.warmup_declared for x in second.runs[5:])
