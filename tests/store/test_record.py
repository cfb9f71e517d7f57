"""orchestrator/store/record.py and studyrecord.py against a real SQLite Optuna study: every field
of a trial's and a study's record written and read back (through Optuna, and through
``studyread``'s own SQLite reader); every ``Status``; a status this version does not know; and
``records.tell`` storing exactly the attributes, in JSON, that it stored before the record."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from orchestrator.protocol import TrialResult
from orchestrator import metrics as M
from orchestrator.outcome import (CHILD_STATUSES, INFEASIBLE, RESULT_STATUSES, RUN_AGAIN, STATUSES, Outcome, Status,
                                  classify)
from orchestrator.store.record import FIELDS, RecordValues, TrialRecord, enqueue, is_attempt, status_of, write
from orchestrator.store.studyread import read_study
from orchestrator.store.studyrecord import KEYS, StudyRecord, write_study

# One value for every field a trial can hold, as the sweep writes them (the types JSON gives back).
EVERY_FIELD: dict[str, Any] = {
    "status": Status.OK, "metrics": {M.SAMPLES_PER_S: 123.5, M.PEAK_MEMORY_GIB: 0.75, "note": None},
    "detail": "fits but swaps: ünïcode", "duration_s": 2.5, "process_peak_rss_gib": 1.25,
    "trial_dir": "/tmp/mlruns/.trials/x/trial-0000", "slot": "cuda:1", "host": "box", "gpu_index": 1,
    "gpu_uuid": "GPU-1234", "cpu_cores": "0-3", "started_at": 10.125, "slot_free_at": None, "processes": 3,
    "repeat_metrics": [{M.SAMPLES_PER_S: 1.0}, {M.SAMPLES_PER_S: 2.0}], "env": {"PYTORCH_CUDA_ALLOC_CONF": "x"},
    "mlflow_run_id": "abc123", "reason": "predicted_oom", "predicted_by": 4, "repeat_of": 2, "deferred_to": -1,
    "neighbour_of": 7, "retry_of": 1, "retry_reason": "error", "chosen_by": "the surrogate's best",
    "orchestrator": "host:1234", "worker": "w1", "remeasure_of": 2, "measurements": 3,
}


def study(tmp_path: Path, name: str = "s") -> Any:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(study_name=name, storage=f"sqlite:///{tmp_path / 'study.db'}", direction="maximize")


def stored_rows(tmp_path: Path) -> list[tuple[str, str]]:
    """Every trial user attribute as Optuna's table holds it: (key, value_json), in write order."""
    con = sqlite3.connect(tmp_path / "study.db")
    try:
        return con.execute('SELECT "key", value_json FROM trial_user_attributes ORDER BY trial_user_attribute_id').fetchall()
    finally:
        con.close()


def test_the_example_sets_every_field() -> None:
    assert set(EVERY_FIELD) == FIELDS == {f.name for f in fields(TrialRecord)} - {"status_text"}
    assert M.DURATION_S in FIELDS  # the metric's name is the attribute's


def test_the_typed_writes_name_every_field_and_nothing_else() -> None:
    """``write``'s keyword arguments (``RecordValues``, which mypy checks the writes against) are
    the record's fields: a field added to one is added to the other."""
    assert set(RecordValues.__annotations__) == FIELDS


def test_every_field_round_trips_through_a_real_study(tmp_path: Path) -> None:
    s = study(tmp_path)
    trial = s.ask()
    write(trial, **EVERY_FIELD)
    s.tell(trial, 1.0)
    expected = TrialRecord(status_text="ok", **EVERY_FIELD)
    through_optuna = TrialRecord.of(s.get_trials()[0])
    through_sqlite = TrialRecord.of(read_study(f"sqlite:///{tmp_path / 'study.db'}", "s").trials[0])
    assert through_optuna == expected and through_sqlite == expected
    assert through_optuna.status is Status.OK and through_optuna.status_text == "ok"
    # stored as the JSON every version wrote: the status as its plain string, a null as null
    rows = dict(stored_rows(tmp_path))
    assert rows["status"] == '"ok"' and rows["slot_free_at"] == "null" and rows["retry_reason"] == '"error"'
    assert list(rows) == list(EVERY_FIELD)


def test_a_trial_with_nothing_recorded_reads_as_empty(tmp_path: Path) -> None:
    s = study(tmp_path)
    trial = s.ask()
    rec = TrialRecord.of(trial)
    assert rec == TrialRecord() and rec.status is None and rec.metrics == {}
    assert rec.is_attempt and rec.process_count == 1 and status_of(trial) is None


@pytest.mark.parametrize("status", list(Status))
def test_every_status_is_stored_as_its_string_and_read_back(tmp_path: Path, status: Status) -> None:
    from optuna.trial import TrialState

    s = study(tmp_path)
    trial = s.ask()
    write(trial, status=status)
    if status is Status.OK:  # the state ``records.tell`` gives each status
        s.tell(trial, 1.0)
    else:
        s.tell(trial, state=TrialState.PRUNED if status in INFEASIBLE else TrialState.FAIL)
    [(key, value)] = stored_rows(tmp_path)
    assert (key, value) == ("status", json.dumps(status.value))
    read = s.get_trials()[0]
    assert status_of(read) is status and TrialRecord.of(read).status is status
    assert str(status) == f"{status}" == status.value and status == status.value


def test_the_vocabulary_holds_every_status_the_code_stores() -> None:
    assert [s.value for s in Status] == ["ok", "oom", "swapped", "timeout", "crashed", "error", "diverged",
                                        "interrupted", "skipped", "repeat", "deferred", "unknown"]
    for group in (STATUSES, CHILD_STATUSES, RESULT_STATUSES, RUN_AGAIN, INFEASIBLE):
        assert all(isinstance(s, Status) and s is not Status.UNKNOWN for s in group)
    # what classify returns is a Status, from a result file's plain string too
    assert classify(0, json.dumps({"status": "oom"})).status is Status.OOM
    assert classify(-9, None).status is Status.CRASHED


def test_a_status_this_version_does_not_know_reads_as_unknown_and_keeps_its_text(tmp_path: Path) -> None:
    """A study written by a newer orchestrate: its status is neither a result nor run again here,
    the summary counts it as unknown, and the report and MLflow's tag keep the stored string."""
    from orchestrator.store.records import results_of

    s = study(tmp_path)
    trial = s.ask()
    trial.suggest_categorical("batch_size", [8])
    trial.set_user_attr("status", "exploded")  # not through write: no field of this version holds it
    s.tell(trial, 1.0)
    read = s.get_trials()[0]
    rec = TrialRecord.of(read)
    assert rec.status is Status.UNKNOWN and rec.status_text == "exploded"
    assert rec.status not in RESULT_STATUSES and rec.status not in RUN_AGAIN
    assert results_of([read]) == []
    assert Status.read("exploded") is Status.UNKNOWN and Status.read(None) is None


def test_write_and_enqueue_refuse_a_name_that_is_no_field(tmp_path: Path) -> None:
    s = study(tmp_path)
    trial = s.ask()
    with pytest.raises(TypeError, match="not fields of TrialRecord: colour"):
        write(trial, status=Status.OK, colour="red")
    with pytest.raises(TypeError, match="status_text"):
        write(trial, status_text="ok")
    assert stored_rows(tmp_path) == []  # nothing half-written
    with pytest.raises(TypeError, match="not fields of StudyRecord: colour"):
        write_study(s, colour="red")


def test_enqueue_stores_the_attributes_on_the_queued_trial(tmp_path: Path) -> None:
    s = study(tmp_path)
    enqueue(s, {"batch_size": 8}, retry_of=3, retry_reason=Status.TIMEOUT, neighbour_of=1)
    enqueue(s, {"batch_size": 16})
    first, second = s.get_trials()
    assert TrialRecord.of(first) == TrialRecord(retry_of=3, retry_reason="timeout", neighbour_of=1)
    assert first.user_attrs == {"retry_of": 3, "retry_reason": "timeout", "neighbour_of": 1}
    assert second.user_attrs == {} and is_attempt(second)


def test_answered_trials_are_not_attempts(tmp_path: Path) -> None:
    s = study(tmp_path)
    for attrs in ({"repeat_of": 0, "status": Status.OK}, {"deferred_to": -1, "status": Status.DEFERRED}, {}):
        trial = s.ask()
        write(trial, **attrs)
    repeat, deferred, plain = s.get_trials()
    assert [is_attempt(t) for t in (repeat, deferred, plain)] == [False, False, True]
    assert [TrialRecord.of(t).is_attempt for t in (repeat, deferred, plain)] == [False, False, True]


def test_tell_stores_what_it_stored_before_the_record(tmp_path: Path) -> None:
    """The attributes ``records.tell`` writes, key by key and in JSON, as the code before the
    typed record wrote them (status, metrics, the loop's extra in its order, then detail)."""
    from conftest import write_spec
    from orchestrator.spec.load import load_spec
    from orchestrator.store.records import tell

    spec = load_spec(write_spec(tmp_path, """
        name: s
        experiment: experiments.mlp
        device: cpu
        space: {batch_size: [8, 16]}
        """))
    s = study(tmp_path)
    extra = {M.DURATION_S: 1.5, "trial_dir": "/t/trial-0000", "process_peak_rss_gib": None, "slot": "cpu",
             "host": "box", "started_at": 0.5, "slot_free_at": None, "mlflow_run_id": "r1"}
    ok, failed = s.ask(), s.ask()
    assert tell(s, ok, spec, Outcome(Status.OK, None, TrialResult("ok", metrics={M.SAMPLES_PER_S: 10.0})), extra) is Status.OK
    assert tell(s, failed, spec, Outcome(Status.OK, "no metric", TrialResult("ok", metrics={})), {}) is Status.ERROR
    assert stored_rows(tmp_path) == [
        ("status", '"ok"'), ("metrics", '{"samples_per_s": 10.0}'), ("duration_s", "1.5"),
        ("trial_dir", '"/t/trial-0000"'), ("process_peak_rss_gib", "null"), ("slot", '"cpu"'), ("host", '"box"'),
        ("started_at", "0.5"), ("slot_free_at", "null"), ("mlflow_run_id", '"r1"'),
        ("status", '"error"'), ("metrics", "{}"), ("detail", '"the trial did not report the objective metric(s)"')]


def test_every_field_of_a_study_round_trips(tmp_path: Path) -> None:
    s = study(tmp_path)
    assert StudyRecord.of(s) == StudyRecord()
    values = {"fingerprint": {"device": "cpu", "space": {"dtype": ["float32"]}}, "uid": "0123abcd",
              "machine": {"devices": ["cpu"], "memory_limit_gib": None}, "recorded": {"trials": 3},
              "parent_run_id": "p1", "load": [{"at": 1.0, "cores": 2, "before": 1.3, "readings": 4}],
              "measured_with": {"trial": {"warmup_steps": 3}, "script_sha256": "ab" * 32},
              "lost_folders": {"3": "/p/mlruns/.trials/s-0123abcd/trial-0003"}}
    assert set(values) == set(KEYS) == {f.name for f in fields(StudyRecord)}
    write_study(s, **values)
    assert StudyRecord.of(s) == StudyRecord(**values)
    assert StudyRecord.of(read_study(f"sqlite:///{tmp_path / 'study.db'}", "s")) == StudyRecord(**values)
    # stored under the keys every version used
    assert s.user_attrs == {"orchestrate.fingerprint": values["fingerprint"], "orchestrate.uid": "0123abcd",
                            "orchestrate.machine": values["machine"], "orchestrate.recorded": {"trials": 3},
                            "mlflow_parent_run_id": "p1", "orchestrate.load": values["load"],
                            "orchestrate.measured_with": values["measured_with"],
                            "orchestrate.lost_folders": values["lost_folders"]}
    write_study(s, recorded=None)
    assert StudyRecord.of(s).recorded is None


@pytest.mark.parametrize("late", [Status.OK, Status.OOM])
def test_a_result_whose_trial_another_orchestrator_failed_reads_as_interrupted(tmp_path: Path, late: Status) -> None:
    """The race behind a configuration measured twice in a shared study: orchestrator B declares
    A's trial dead (``recovery.fail_stale``: ``interrupted``, then FAIL) while A's ``tell`` writes
    its attributes (then its state, which the storage refuses). The trial is FAIL with A's late
    status: it is not a result (A discarded it; the configuration runs again), and reads so."""
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    from orchestrator.store.records import _tell, results_of

    s = study(tmp_path)
    trial = s.ask({"x": __import__("optuna").distributions.IntDistribution(1, 4)})
    storage, trial_id = s._storage, trial._trial_id
    storage.set_trial_user_attr(trial_id, "status", "interrupted")           # B
    write(trial, status=late, metrics={M.SAMPLES_PER_S: 9.0})               # A, in between
    storage.set_trial_state_values(trial_id, state=TrialState.FAIL)         # B
    with pytest.raises(UpdateFinishedTrialError):                           # A's state: refused,
        _tell(s, trial, TrialState.COMPLETE, [9.0])                         # as its loop expects
    read = s.get_trials()[0]
    assert TrialRecord.of(read).status_text == late.value                    # as stored ...
    assert status_of(read) is Status.INTERRUPTED is TrialRecord.of(read).status  # ... not a result
    assert results_of([read]) == []
    [stored] = read_study(f"sqlite:///{tmp_path / 'study.db'}", "s").trials
    assert status_of(stored) is Status.INTERRUPTED
