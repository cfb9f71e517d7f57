"""A trial's life as named states (``job.Job``) and the stop policy, driven by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.protocol import TrialResult
from orchestrator.sweep.job import Job, State
from orchestrator.launch import Launched
from orchestrator.outcome import Outcome
from orchestrator.spec.model import SearchSettings
from orchestrator.search.stoppolicy import StopPolicy


class Handle:
    """A process the test decides for: ``has_result`` / ``exited`` are set by hand."""

    def __init__(self, status: str, value: float = 100.0) -> None:
        self.status, self.value = status, value
        self.has_result = self.exited = False

    def launched(self) -> Launched:
        metrics = {"samples_per_s": self.value} if self.status == "ok" else {}
        return Launched(Outcome(self.status, None, TrialResult(self.status, metrics=metrics)), 0, 1.0, None,
                        Path("trial.log"))

    def poll(self) -> None:
        pass


def job(repeats: int = 1) -> Job:
    return Job(trial=None, sampled={}, params={}, config={}, env={}, trial_dir=Path("/t"), slot=0, run_ref=None,
               repeats=repeats)


def starter(statuses: list[str]) -> tuple[Any, list[Handle], list[Path]]:
    handles: list[Handle] = []
    folders: list[Path] = []

    def start(j: Job, folder: Path) -> Handle:
        handles.append(Handle(statuses[len(handles)]))
        folders.append(folder)
        return handles[-1]
    return start, handles, folders


def test_a_job_waits_for_its_slot_then_runs_then_finishes() -> None:
    j, (start, handles, _) = job(), starter(["ok"])
    assert j.advance(idle=False, start=start) is State.PROPOSED and not handles
    assert j.advance(idle=True, start=start) is State.RUNNING and len(handles) == 1
    assert j.advance(idle=False, start=start) is State.RUNNING
    handles[0].has_result = True
    assert j.advance(idle=False, start=start) is State.FINISHED
    assert [r.outcome.status for r in j.runs] == ["ok"]


def test_repeats_run_one_after_another_in_their_own_folders() -> None:
    j, (start, handles, folders) = job(repeats=3), starter(["ok", "ok", "ok"])
    j.advance(idle=True, start=start)
    handles[0].has_result = True
    assert j.advance(idle=False, start=start) is State.REPEATING   # the next waits for the exit ...
    handles[0].exited = True
    assert j.advance(idle=False, start=start) is State.REPEATING   # ... and the idle slot
    assert j.advance(idle=True, start=start) is State.RUNNING and len(handles) == 2
    handles[1].has_result = handles[1].exited = True
    j.advance(idle=True, start=start)
    handles[2].has_result = True
    assert j.advance(idle=True, start=start) is State.FINISHED
    assert folders == [Path("/t"), Path("/t/repeat-2"), Path("/t/repeat-3")]
    assert len(j.runs) == 3 and j.combined(["samples_per_s"]).outcome.status == "ok"


def test_a_repeat_that_fails_ends_the_job() -> None:
    j, (start, handles, _) = job(repeats=3), starter(["ok", "oom"])
    j.advance(idle=True, start=start)
    handles[0].has_result = handles[0].exited = True
    j.advance(idle=True, start=start)
    handles[1].has_result = True
    assert j.advance(idle=True, start=start) is State.FINISHED
    assert j.combined(["samples_per_s"]).outcome.status == "oom"


@pytest.mark.parametrize("statuses, results, repeats, want", [
    ([], 0, 1, State.INTERRUPTED),            # never started
    (["ok"], 0, 1, State.INTERRUPTED),        # running, no result
    (["oom"], 1, 1, State.FINISHED),          # it ended by itself: its result stands
    (["ok"], 1, 2, State.INTERRUPTED),        # an ok that needed another repeat
    (["ok"], 1, 1, State.FINISHED),
])
def test_ctrl_c_keeps_final_results_and_interrupts_the_rest(statuses: list[str], results: int, repeats: int,
                                                           want: State) -> None:
    j, (start, handles, _) = job(repeats), starter(statuses)
    if statuses:
        j.advance(idle=True, start=start)
        for h in handles[:results]:
            h.has_result = True
    assert j.settle() is want


def test_stopped_between_repeats_no_process_starts() -> None:
    j, (start, handles, _) = job(repeats=2), starter(["ok", "ok"])
    j.advance(idle=True, start=start)
    handles[0].has_result = handles[0].exited = True
    j.advance(idle=False, start=start)
    assert j.advance(idle=True, start=start, stopping=True) is State.FINISHED and len(handles) == 1
    assert [r.outcome.status for r in j.runs] == ["ok", "interrupted"]


def test_the_policy_counts_failures_patience_and_time() -> None:
    policy = StopPolicy(SearchSettings(max_failures=1, patience=2, timeout_min=1.0), 0.0, None, Path("/w"))
    assert policy.proposing(10.0)
    policy.record(Outcome("error", "boom"), 5.0, Path("/w/t0/trial.log"))
    policy.record(Outcome("crashed", "killed", signal="SIGKILL"), 5.0, Path("/w/t1/trial.log"))  # a memory kill
    assert policy.failures.count == 1 and policy.budget_error is None and policy.proposing(10.0)
    policy.record(Outcome("timeout", "slow"), 5.0, Path("/w/t2/trial.log"))
    assert policy.budget_error is not None and not policy.proposing(10.0)
    assert policy.failures.by_status == {"error": 1, "timeout": 1}
    patient = StopPolicy(SearchSettings(patience=2), 0.0, 5.0, Path("/w"))
    patient.record(Outcome("ok"), 5.0, Path("x"))
    assert patient.proposing(0.0)
    patient.record(Outcome("ok"), 5.0, Path("x"))
    assert not patient.proposing(0.0) and "search.patience" in patient.stopped_because
    timed = StopPolicy(SearchSettings(timeout_min=1.0), 0.0, None, Path("/w"))
    assert timed.proposing(59.0) and not timed.proposing(61.0)
    assert timed.stopped_because == "search.timeout_min=1 reached"


def test_the_closing_line_keeps_a_library_s_remedy_after_its_complaint() -> None:
    """A script tour: LightningCLI's error (every trial failed on the ``config.yaml`` the smoke step
    left) says what to do after 200 characters; the closing line cut it there."""
    lightning = ("RuntimeError: SaveConfigCallback expected /tmp/s3/config.yaml to NOT exist. Aborting to avoid "
                 "overwriting results of a previous run. You can delete the previous config file, set "
                 "`LightningCLI(save_config_callback=None)` to disable config saving, or set "
                 "`LightningCLI(save_config_kwargs={\"overwrite\": True})` to overwrite the config file.")
    policy = StopPolicy(SearchSettings(), 0.0, None, Path("/w"))
    policy.record(Outcome("error", lightning + " at cli.py:43"), None, Path("/w/t0/trial.log"))
    policy.record(Outcome("error", "later"), None, Path("/w/t1/trial.log"))
    assert policy.failures.examples == {"error": (lightning + " at cli.py:43", "/w/t0/trial.log")}
    policy.record(Outcome("timeout", "x " * 400), None, Path("/w/t2/trial.log"))
    assert policy.failures.examples["timeout"][0] == "x " * 299 + "x…"  # cut at a word, 600 in all
