"""MLflow down mid-run: every tracking call is retried, then buffered under results/<run>/ and replayed in order
when MLflow is back (child runs created while down included); a refused call still raises at once; a run that
cannot start says so before anything runs; the flow's error handler never raises over the original error."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from tasks.tracking import Tracker, TrackingUnavailable
from tasks.tracking_buffer import PENDING, Backoff
from tasks.tracking_buffer import main as replay_main

FAST = Backoff(attempts=2, first_s=0.01, max_s=0.01, resync_s=0.0)


class Switch:
    """A client factory whose clients fail as a stopped REST server does while `down` (MLflow's own message)."""

    def __init__(self) -> None:
        self.down = False
        self.calls_while_down = 0

    def __call__(self, tracking_uri: str) -> "Client":
        return Client(self, MlflowClient(tracking_uri=tracking_uri))


class Client:
    def __init__(self, switch: Switch, real: MlflowClient) -> None:
        self.switch, self.real = switch, real

    def __getattr__(self, name: str):
        def call(*args, **kwargs):
            if self.switch.down:
                self.switch.calls_while_down += 1
                raise MlflowException(
                    "API request to http://127.0.0.1:5999/api/2.0/mlflow/runs/log-batch failed with exception "
                    "HTTPConnectionPool(host='127.0.0.1', port=5999): Max retries exceeded (Connection refused)"
                )
            return getattr(self.real, name)(*args, **kwargs)

        return call


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory):
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"  # one store: a new one costs ~7 s here
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", uri)
        yield uri


def test_an_outage_mid_run_loses_nothing_and_is_replayed_in_order(tmp_path: Path, store: str) -> None:
    switch = Switch()
    tr = Tracker.start("r", experiment="faults", results_root=tmp_path / "results", client_factory=switch, backoff=FAST)
    tr.params({"a": 1})
    switch.down = True  # MLflow stops in the middle of the run
    tr.params({"b": 2})
    tr.metrics({"m": 1.5}, step=3)
    child = tr.child("4-ablate", tags={"inferopt.step": "ablate"})
    assert child.startswith("pending:")
    tr.table(pd.DataFrame({"x": [1, 2]}), "t.parquet", "4-ablate")
    tr.tags({"k": "v"}, "4-ablate")
    tr.finish("4-ablate")
    queued = [json.loads(line) for line in (tr.results_dir / PENDING).read_text().splitlines()]
    assert [q["op"] for q in queued][:3] == ["log_batch", "log_batch", "create_run"]
    assert switch.calls_while_down >= 2  # retried before buffering
    switch.down = False  # back: the next call replays the queue first, then runs
    tr.metrics({"after": 1.0})
    assert not (tr.results_dir / PENDING).exists()
    tr.finish()
    c = MlflowClient(tracking_uri=store)
    parent = c.get_run(tr.parent_run_id)
    assert parent.data.params == {"a": "1", "b": "2"} and parent.info.status == "FINISHED"
    assert parent.data.metrics == {"m": 1.5, "after": 1.0}
    [kid] = c.search_runs([tr.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{tr.parent_run_id}'")
    assert kid.info.run_id == tr.outbox.resolve(child) and kid.info.status == "FINISHED"
    assert kid.data.tags["k"] == "v" and kid.data.tags["inferopt.step"] == "ablate"
    assert {a.path for a in c.list_artifacts(kid.info.run_id)} == {"t.parquet", "t.csv"}


def test_still_down_at_the_end_is_said_loudly_and_the_buffer_replays_later(
    tmp_path: Path, store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    switch = Switch()
    tr = Tracker.start("r", experiment="faults", results_root=tmp_path / "results", client_factory=switch, backoff=FAST)
    switch.down = True
    tr.json({"x": 1}, "x.json")
    tr.finish()
    err = capsys.readouterr().err
    assert "MLflow still unreachable" in err and "python -m tasks.tracking_buffer" in err
    assert MlflowClient(tracking_uri=store).get_run(tr.parent_run_id).info.status == "RUNNING"
    assert replay_main([str(tr.results_dir)]) == 0
    run = MlflowClient(tracking_uri=store).get_run(tr.parent_run_id)
    assert run.info.status == "FINISHED"
    assert [a.path for a in MlflowClient(tracking_uri=store).list_artifacts(tr.parent_run_id)] == ["x.json"]


def test_a_refused_call_raises_at_once_and_is_not_buffered(tmp_path: Path, store: str) -> None:
    tr = Tracker.start("r", experiment="faults", results_root=tmp_path / "results", backoff=FAST)
    tr.params({"a": 1})
    with pytest.raises(MlflowException, match="(?i)param"):
        tr.params({"a": 2})  # changing a logged param is refused by MLflow: a bug, not an outage
    assert not (tr.results_dir / PENDING).exists()


def test_a_run_that_cannot_reach_mlflow_stops_before_anything_runs(tmp_path: Path, store: str) -> None:
    switch = Switch()
    switch.down = True
    with pytest.raises(TrackingUnavailable, match=r"unreachable.*nothing has run; fix: start the tracking server"):
        Tracker.start("r", experiment="faults", results_root=tmp_path / "results", client_factory=switch, backoff=FAST)
    assert not (tmp_path / "results").exists()


def test_the_error_handler_never_raises_over_the_original_error(tmp_path: Path, store: str) -> None:
    tr = Tracker.start("r", experiment="faults", results_root=tmp_path / "results", backoff=FAST)

    class Broken:
        def __init__(self, **kw) -> None:
            pass

        def __getattr__(self, name):
            raise RuntimeError("tracking server returned garbage")

    tr.client_factory = Broken
    with pytest.raises(ValueError, match="the step's own error"):
        try:
            raise ValueError("the step's own error")
        except BaseException:
            tr.fail({"inferopt.verdict": "error"})
            raise
