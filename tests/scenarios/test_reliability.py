"""Faults in trials and kills of the orchestrator never lose or duplicate a result.

Real orchestrator processes, real trial subprocesses (the fault-injection experiment), real
Optuna (SQLite) and MLflow (SQLite) stores; invariants are read back through their own APIs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import (ORCHESTRATE, check_records, command, load_study, orchestrate, orchestrate_popen,
                      signals_as_in_a_terminal, trial_processes, wait_for_trial, write_spec)
from procs import processes

pytestmark = pytest.mark.slow


@pytest.fixture
def project(seeded_project: Path) -> Path:
    """The project folder, its MLflow store already created (``conftest.seed_mlflow``): these
    tests are about what happens after a project's first run is set up."""
    return seeded_project


FAULT_STATUS = {
    "none": ("ok", None),
    "oom_cuda": ("oom", "CUDA out of memory"),
    "oom_mps": ("oom", "MPS backend out of memory"),
    "oom_cpu": ("oom", "DefaultCPUAllocator: can't allocate memory"),
    "allocate": ("oom", "DefaultCPUAllocator"),
    "segfault": ("crashed", "SIGSEGV"),
    "sigkill": ("crashed", "SIGKILL"),
    "hang": ("timeout", "timeout_s=12"),
    "exit": ("error", "exited with code 3"),
    "exception": ("error", "ValueError: injected failure: this is the exception's last line"),
    "nan": ("diverged", "NaN"),
    "truncated_result": ("error", "unreadable result file"),
    "garbage_result": ("error", "unreadable result file"),
}


def fault_spec(directory: Path, faults: list[str], timeout_s: float = 6, **search: object) -> Path:
    extra = "".join(f"\n          {k}: {v}" for k, v in search.items())
    return write_spec(directory, f"""
        name: faults
        experiment: experiments.faults
        device: cpu
        fixed:
          batch_size: 8
          cpu_memory_limit_gib: 2.0
        space:
          fault: [{", ".join(faults)}]
        search:
          sampler: grid{extra}
        trial:
          warmup_steps: 1
          measure_steps: 2
          min_measure_s: 0.05
          timeout_s: {timeout_s:g}
        """)


def test_every_fault_gets_its_status_and_the_sweep_goes_on(project: Path) -> None:
    # 12 s: the allocate fault (0.6 s alone) once took over 6 s beside another test's processes
    # on the 2-core CI machine and was recorded as a timeout
    spec = fault_spec(project, list(FAULT_STATUS), timeout_s=12, max_failures=50)
    proc = orchestrate([str(spec)], project)
    assert proc.returncode == 0, proc.stderr
    errors = [f for f, (status, _) in FAULT_STATUS.items() if status == "error"]
    # an error (the experiment's own fault) is not a result: the configuration runs again next time,
    # and the summary says so beside the results (a UI tour: the four were in no line of it)
    assert f"; {len(errors)} ended 'error' (not results: they run again on the next run); trial time" in proc.stdout
    records = check_records(project, "faults", n_results=len(FAULT_STATUS) - len(errors))
    attempts = [t for t in records["study"].get_trials() if "status" in t.user_attrs]
    assert sorted(t.params["fault"] for t in attempts) == sorted(FAULT_STATUS)
    for t in attempts:
        status, detail = FAULT_STATUS[t.params["fault"]]
        assert t.user_attrs["status"] == status, (t.params, t.user_attrs)
        if detail:
            assert detail in t.user_attrs["detail"], (t.params, t.user_attrs["detail"])
        # OOM and crashes reach the sampler as infeasible, with no invented objective value.
        if status in ("oom", "crashed"):
            assert t.state.name == "PRUNED" and t.values is None and t.constraints["fits_in_memory"] > 0
        elif status == "ok":
            assert t.state.name == "COMPLETE" and t.values[0] > 0
        else:
            assert t.state.name == "FAIL"
        log = Path(t.user_attrs["trial_dir"]) / "trial.log"
        assert log.exists()
        assert log.read_text().splitlines()[-1].startswith(f"orchestrate: trial ended {status}"), log.read_text()
        run = records["runs"][t.number][0]
        assert "trial.log" in {a.path for a in _artifacts(project, run.info.run_id)}
    exception = next(t for t in attempts if t.params["fault"] == "exception")
    assert "Traceback" in (Path(exception.user_attrs["trial_dir"]) / "trial.log").read_text()


def _artifacts(project: Path, run_id: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(f"sqlite:///{project}/mlruns/mlflow.db").list_artifacts(run_id)


def test_failure_budget_stops_with_exit_3_and_the_study_resumes(project: Path) -> None:
    spec = fault_spec(project, ["exception", "exit", "none", "oom_cpu"], max_failures=1)
    proc = orchestrate([str(spec)], project)
    assert proc.returncode == 3, proc.stderr
    assert "search.max_failures=1" in proc.stderr and "Traceback" not in proc.stderr
    check_records(project, "faults", n_results=0)  # two errors: no results, the budget spent
    # OOM trials do not count toward the budget; a resume (with a larger budget) finishes the grid,
    # and runs the two failed configurations once more (they fail again: still not results)
    spec = fault_spec(project, ["exception", "exit", "none", "oom_cpu"], max_failures=5)
    proc = orchestrate([str(spec)], project)
    assert proc.returncode == 0, proc.stderr
    assert "2 configuration(s) whose last trial ended 'error' will run again" in proc.stdout
    records = check_records(project, "faults", n_results=2)
    errors = [t for t in records["study"].get_trials() if t.user_attrs.get("status") == "error"]
    assert sorted(t.params["fault"] for t in errors) == ["exception", "exception", "exit", "exit"]


def test_a_spent_failure_budget_ends_the_other_slots_trials_at_once(project: Path) -> None:
    """Two CPU slots: while one runs a trial that hangs (timeout_s=60), the other's two failures
    spend the budget: the sweep ends then, the hung trial stopped and recorded interrupted (its
    configuration runs again), not waited for to its timeout."""
    from orchestrator.launch.slots import available_cores
    from orchestrator.outcome import BUDGET_DETAIL

    if len(available_cores()) < 2:
        pytest.skip("needs two cores")
    spec = fault_spec(project, ["hang", "exception", "exit"], timeout_s=60, max_failures=1)
    started = time.monotonic()
    proc = orchestrate([str(spec), "--devices", "cpu:0-0,cpu:1-1"], project)
    assert proc.returncode == 3 and "search.max_failures=1" in proc.stderr, proc.stderr
    assert time.monotonic() - started < 45, "the hung trial was waited for"
    hung = [t for t in load_study(project, "faults").get_trials() if t.params["fault"] == "hang"]
    assert [(t.user_attrs["status"], t.user_attrs["detail"]) for t in hung] == [("interrupted", BUDGET_DETAIL)]


LONG = pytest.mark.long  # the same recovery as the points kept in the suite; all five run with -m long
KILL_POINTS = ["after_ask:2", pytest.param("after_run_start:2", marks=LONG), "trial_running:2",
               pytest.param("after_tell:2", marks=LONG), pytest.param("after_finish:2", marks=LONG),
               "after_tell:3"]  # the last trial: the finished study's command writes its MLflow record


@pytest.mark.parametrize("point", KILL_POINTS)
def test_sigkill_at_any_point_then_resume_loses_nothing(project: Path, point: str) -> None:
    spec = write_spec(project, """
        name: kill
        experiment: experiments.faults
        device: cpu
        fixed: {batch_size: 4}
        space:
          hidden_size: [8, 16, 24]
        search: {sampler: grid}
        trial: {warmup_steps: 1, measure_steps: 2, min_measure_s: 0.05, timeout_s: 60}
        """)
    killed = orchestrate([str(spec)], project, env={"ORCHESTRATE_KILL_AT": point})
    assert killed.returncode == -signal.SIGKILL, (killed.returncode, killed.stderr)
    time.sleep(0.5)
    assert trial_processes(str(project / "mlruns")) == [], "a trial outlived its orchestrator"
    before = {t.number: t.user_attrs.get("metrics") for t in load_study(project, "kill").get_trials()
              if t.user_attrs.get("status") == "ok"}

    resumed = orchestrate([str(spec)], project)
    assert resumed.returncode == 0, resumed.stderr
    records = check_records(project, "kill", n_results=3)
    after = {t.number: t.user_attrs.get("metrics") for t in records["results"]}
    for number, metrics in before.items():  # nothing finished was lost or re-measured
        assert after[number] == metrics
    interrupted = [t for t in records["study"].get_trials() if t.user_attrs.get("status") == "interrupted"]
    if point.startswith(("after_ask", "after_run_start", "trial_running")):
        # killed before the result was told: the trial is ended as interrupted and its
        # configuration measured again
        (lost,) = interrupted
        assert records["runs"][lost.number][0].info.status == "KILLED"
        config = lost.params or lost.system_attrs.get("fixed_params")  # killed before suggest
        assert config in [t.params for t in records["results"]]
        assert "1 interrupted trial(s) will run again" in resumed.stdout
        assert "MLflow lacked" not in resumed.stdout  # a review: its run left RUNNING, closed with its trial
    else:
        # killed after Optuna had the result: nothing is re-run, the MLflow run is completed
        assert interrupted == []
        assert len(records["study"].get_trials()) == 3
    if point == "after_tell:3":  # the study was complete: its command repaired MLflow without a probe
        assert "nothing to run, so nothing was started" in resumed.stdout
        assert "MLflow: 1 trial(s)' records repaired from the study." in resumed.stdout
        check = command(["check", str(spec)], project)
        assert check.returncode == 0, check.stdout + check.stderr


def test_sigkill_mid_trial_with_tpe_retries_that_configuration(project: Path) -> None:
    spec = write_spec(project, """
        name: kill_tpe
        experiment: experiments.faults
        device: cpu
        fixed: {batch_size: 4}
        space:
          hidden_size: [8, 16, 24, 32, 40, 48]
        search: {sampler: tpe, n_trials: 4, seed: 1}
        trial: {warmup_steps: 1, measure_steps: 2, min_measure_s: 0.05, timeout_s: 60}
        """)
    killed = orchestrate([str(spec)], project, env={"ORCHESTRATE_KILL_AT": "trial_running:3"})
    assert killed.returncode == -signal.SIGKILL
    resumed = orchestrate([str(spec)], project)
    assert resumed.returncode == 0, resumed.stderr
    assert "1 interrupted trial(s) will run again" in resumed.stdout
    records = check_records(project, "kill_tpe", n_results=4)
    (lost,) = [t for t in records["study"].get_trials() if t.user_attrs.get("status") == "interrupted"]
    assert lost.params in [t.params for t in records["results"]]
    assert records["runs"][lost.number][0].info.status == "KILLED"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork servers run on Linux only")
def test_a_trial_whose_fork_server_is_killed_is_interrupted_and_measured_again(project: Path) -> None:
    """The slot's fork server killed (SIGKILL) in its trial's timed window: the trial dies with
    it (``watch_parent``), which says nothing of its configuration: recorded interrupted, not
    crashed, and measured again by a new server; the next command has nothing left to run. A
    trial killed by a signal itself, its server alive, stays crashed (``sigkill`` above)."""
    spec = write_spec(project, """
        name: server
        experiment: experiments.faults
        device: cpu
        fixed: {batch_size: 4}
        space:
          hidden_size: [8]
        search: {sampler: grid}
        trial: {warmup_steps: 1, measure_steps: 2, min_measure_s: 2, timeout_s: 60}
        """)
    events = project / "events.jsonl"
    proc = orchestrate_popen([str(spec)], project, env={"ORCHESTRATE_TIMELINE": str(events)})
    deadline = time.monotonic() + 90  # a loaded CI machine: start-up alone can take 20 s
    while '"event": "go"' not in (events.read_text() if events.exists() else "") and proc.poll() is None:
        assert time.monotonic() < deadline, "the trial never opened its window"
        time.sleep(0.02)
    servers = [p.pid for p in processes() if p.ppid == proc.pid and str(project / "mlruns") in p.cmdline
               and "--fork-server" in p.cmdline]
    assert len(servers) == 1, servers
    os.kill(servers[0], signal.SIGKILL)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, (out, err)
    assert "crashed" not in out and "interrupted" in out and "fork server died" in out, out
    records = check_records(project, "server", n_results=1)
    lost, again = records["study"].get_trials()
    assert lost.user_attrs["status"] == "interrupted" and "fork server died" in lost.user_attrs["detail"]
    assert lost.state.name == "FAIL" and records["runs"][lost.number][0].info.status == "KILLED"
    assert again.params == lost.params and again.user_attrs["status"] == "ok" and again.values[0] > 0
    assert "nothing to run" in orchestrate([str(spec)], project).stdout
    time.sleep(0.3)
    assert trial_processes(str(project / "mlruns"), "orchestrator.harness") == [], "a process was left behind"


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130),  # SIGTERM: the same handler; with -m long
                                          pytest.param(signal.SIGTERM, 143, marks=pytest.mark.long)])
def test_ctrl_c_and_sigterm_kill_the_trial_and_record_it_interrupted(project: Path, signum: int, code: int) -> None:
    spec = fault_spec(project, ["hang", "none"])
    proc = subprocess.Popen([ORCHESTRATE, str(spec)], cwd=project, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=signals_as_in_a_terminal)
    assert wait_for_trial(project, 120)  # a new process, not forked: its start-up alone took 20 s in CI
    time.sleep(1.0)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == code, (out, err)
    assert "Resume with: orchestrate" in err and "Traceback" not in err
    assert "the running trial(s) (#0) were killed and recorded as interrupted" in err, err
    assert len([ln for ln in err.splitlines() if ln.startswith("orchestrate:")]) == 1
    time.sleep(0.3)
    assert trial_processes(str(project / "mlruns")) == []
    records = check_records(project, "faults", n_results=0)
    (t,) = records["study"].get_trials()
    assert t.state.name == "FAIL" and t.user_attrs["status"] == "interrupted"
    assert records["runs"][t.number][0].info.status == "KILLED"
    # and the same command resumes: the interrupted configuration runs again (and times out)
    proc2 = orchestrate([str(spec)], project)
    assert proc2.returncode == 0, proc2.stderr
    assert "; 1 interrupted trial(s) will run again" in proc2.stdout.splitlines()[0], proc2.stdout  # a tour: not said
    check_records(project, "faults", n_results=2)


def test_a_second_orchestrator_on_the_same_study_refuses_naming_the_lock(project: Path) -> None:
    spec = fault_spec(project, ["hang", "none"], timeout_s=120)  # the first is still on it when the second asks
    first = subprocess.Popen([ORCHESTRATE, str(spec)], cwd=project, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, preexec_fn=signals_as_in_a_terminal)
    try:
        assert wait_for_trial(project)
        events = project.parent / f"{project.name}-second.jsonl"
        second = orchestrate([str(spec)], project, env={"ORCHESTRATE_TIMELINE": str(events)})
        assert second.returncode == 2
        assert "being run by another orchestrate" in second.stderr
        assert "optuna.db.faults.lock" in second.stderr
        assert len(second.stderr.strip().splitlines()) == 1
        # refused before its probe or a fork server imported torch beside the first one's trials
        names = [json.loads(line)["event"] for line in events.read_text().splitlines()]
        assert "cli_start" in names and "probe_start" not in names and "interpreter_spawn" not in names
    finally:
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=30)
    check_records(project, "faults")


def _group_members(pgid: int) -> list[int]:
    return [p.pid for p in processes() if p.pgid == pgid]


def test_a_trials_own_child_processes_die_with_a_killed_orchestrator(project: Path) -> None:
    spec = fault_spec(project, ["grandchild"], timeout_s=120)  # not ended by its timeout before the kill
    proc = subprocess.Popen([ORCHESTRATE, str(spec)], cwd=project, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 90  # a loaded CI machine: start-up alone can take 20 s
    pgid = None
    while time.monotonic() < deadline and pgid is None:
        for pid in trial_processes(str(project / "mlruns")):  # the trial, or a pre-started interpreter
            try:
                if len(_group_members(os.getpgid(pid))) >= 2:  # the trial and its `sleep`
                    pgid = os.getpgid(pid)
                    break
            except ProcessLookupError:
                continue
        time.sleep(0.1)
    assert pgid is not None, "the trial never started its child process"
    assert proc.poll() is None, proc.communicate()  # the kill lands on a running sweep, its trial in flight
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    deadline = time.monotonic() + 5
    while _group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _group_members(pgid) == [], "a process of the trial outlived the killed orchestrator"
