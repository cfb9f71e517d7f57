"""Nothing outlives a sweep, and every way a sweep can be stopped is recorded: a trial's grandchild
that calls ``setsid`` ends with its trial (timed out, finished, or its orchestrator killed); SIGHUP
from a terminal that closed and a reader that closed the output pipe stop the sweep as SIGTERM
does; Ctrl-C during ``check`` and ``check --repair`` is one line.

Real processes and real signals: the fault-injection experiment's ``daemon`` faults start a real
``sleep`` in a session of its own through a process that exits (an orphan, out of the trial's
process group); the terminal is a real pseudo-terminal, closed; the pipe is a real pipe, closed
after the first line. After each, no process works in the project's folder (``left_behind``).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import ORCHESTRATE, check_records, command, left_behind, orchestrate, signals_as_in_a_terminal, write_spec
from procs import processes

pytestmark = pytest.mark.slow


def spec(project: Path, name: str, faults: list[str], timeout_s: float = 3, min_measure_s: float = 0.05) -> Path:
    return write_spec(project, f"""
        name: {name}
        experiment: experiments.faults
        device: cpu
        fixed: {{batch_size: 4}}
        space:
          fault: [{", ".join(faults)}]
        search: {{sampler: grid}}
        trial: {{warmup_steps: 1, measure_steps: 2, min_measure_s: {min_measure_s}, timeout_s: {timeout_s}}}
        """)


def sleepers(project: Path) -> list[int]:
    """The ``daemon`` faults' grandchildren now running (they work in the project's folder)."""
    root = str(project.resolve())
    return [p.pid for p in processes() if p.cmdline == "sleep 600" and (p.cwd() or "").startswith(root)]


@pytest.mark.parametrize("fork", ["1", pytest.param("0", marks=pytest.mark.long)],
                         ids=["fork-server", "interpreter-per-trial"])
def test_a_setsid_grandchild_ends_with_its_trial_finished_or_timed_out(seeded_project: Path, fork: str) -> None:
    """The issue's escape: before, both grandchildren were still running after the sweep."""
    project = seeded_project
    path = spec(project, "daemons", ["daemon", "daemon_hang"])
    proc = orchestrate([str(path)], project, env={"ORCHESTRATE_FORK": fork})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = check_records(project, "daemons", 2)["study"].get_trials()
    assert {t.params["fault"]: t.user_attrs["status"] for t in trials} == {"daemon": "ok", "daemon_hang": "timeout"}
    assert left_behind(project) == []


@pytest.mark.parametrize("how", ["SIGKILL", pytest.param("SIGTERM", marks=pytest.mark.long)])
def test_a_setsid_grandchild_ends_when_its_orchestrator_is_killed_or_stopped(seeded_project: Path, how: str) -> None:
    """SIGKILL: nobody records anything, and the trial's watchdog (PR_SET_PDEATHSIG) ends its
    descendants; SIGTERM: the sweep records the trial as interrupted, and the launcher ends them."""
    project = seeded_project
    path = spec(project, "killed", ["daemon_hang"], timeout_s=120)
    proc = subprocess.Popen([ORCHESTRATE, str(path)], cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 120
    while not sleepers(project):
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(getattr(signal, how))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == (-signal.SIGKILL if how == "SIGKILL" else 143), out + err
    assert left_behind(project) == []
    if how == "SIGTERM":
        assert err.strip().splitlines()[-1].startswith("orchestrate: stopped by SIGTERM")
        check_records(project, "killed", 0)


def test_a_closed_terminal_stops_the_sweep_as_sigterm_does(seeded_project: Path) -> None:
    """A real pseudo-terminal as stdin, stdout and stderr, closed during trial 1; then SIGHUP, as
    the kernel sends a session's processes when their terminal hangs up. Before: exit 129 from
    Python's default action, the MLflow parent run and the trial left RUNNING."""
    project = seeded_project
    path = spec(project, "hangup", ["none", "hang"], timeout_s=60)
    master, slave = os.openpty()
    events = project / "events.jsonl"
    proc = subprocess.Popen([ORCHESTRATE, str(path)], cwd=project, stdin=slave, stdout=slave, stderr=slave,
                            start_new_session=True, preexec_fn=signals_as_in_a_terminal,
                            env={**os.environ, "ORCHESTRATE_TIMELINE": str(events)})
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + 120
    while b"#0 " not in seen and time.monotonic() < deadline:
        try:
            seen += os.read(master, 4096)
        except OSError:
            break
    while '"event": "start", "trial": 1' not in (events.read_text() if events.exists() else ""):
        assert proc.poll() is None and time.monotonic() < deadline, "trial 1 (hang) never started"
        time.sleep(0.02)
    os.close(master)
    proc.send_signal(signal.SIGHUP)
    assert proc.wait(timeout=60) == 129
    records = check_records(project, "hangup", 1)  # nothing RUNNING; MLflow agrees with the study
    assert [t.user_attrs["status"] for t in records["study"].get_trials()] == ["ok", "interrupted"]
    assert _parent_status(project, "hangup") == "KILLED"
    assert left_behind(project) == []


@pytest.mark.parametrize("signum", [signal.SIGHUP, pytest.param(signal.SIGINT, marks=pytest.mark.long)],
                         ids=["nohup-SIGHUP", "background-SIGINT"])
def test_a_signal_the_caller_ignores_stays_ignored(seeded_project: Path, signum: int) -> None:
    """``nohup orchestrate ...`` starts with SIGHUP ignored, and a shell script's ``orchestrate ...
    &`` with SIGINT ignored: the signal, sent while a trial is in its window, leaves the sweep
    running to its end (before, the sweep's own handler replaced the ignored one and stopped it)."""
    project = seeded_project
    path = write_spec(project, """
        name: ignored
        experiment: experiments.faults
        device: cpu
        fixed: {batch_size: 4}
        space:
          fault_step: [0, 1]
        search: {sampler: grid}
        trial: {warmup_steps: 1, measure_steps: 2, min_measure_s: 1.5, timeout_s: 60}
        """)
    proc = subprocess.Popen([ORCHESTRATE, str(path)], cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=lambda: signal.signal(signum, signal.SIG_IGN))
    assert proc.stdout is not None
    header = proc.stdout.readline()  # printed once the stores are open, before the first trial
    assert header.startswith("orchestrate: ignored on cpu"), header
    time.sleep(1.0)  # trial 0 is in its 1.5-s window
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, header + out + err
    assert "stopped by" not in err
    records = check_records(project, "ignored", 2)
    assert [t.user_attrs["status"] for t in records["study"].get_trials()] == ["ok", "ok"]
    assert left_behind(project) == []


def test_the_stop_line_names_the_trials_it_killed_or_that_none_ran() -> None:
    """A Ctrl-C between the stores opening and the first trial once said "the running trial(s) were
    killed" with none running (the live case is in ``test_reliability.py``)."""
    from orchestrator.sweep.output import stopped_line

    assert stopped_line(signal.SIGINT, []) == "orchestrate: stopped by Ctrl-C; no trial was running."
    assert stopped_line(signal.SIGTERM, [3, 4]) == ("orchestrate: stopped by SIGTERM; the running trial(s) (#3, #4) "
                                                    "were killed and recorded as interrupted.")


def test_a_reader_that_leaves_the_pipe_stops_the_sweep_in_one_line(seeded_project: Path) -> None:
    """``orchestrate spec | head -1``: the issue's exit 141 with the trial left RUNNING. Run as a
    user runs it, without ``PYTHONUNBUFFERED`` (``conftest.py`` removes it): Python block-buffers a
    pipe's stdout, and the trial lines once waited there while the sweep ran on to its end (exit 0,
    after the hang's 60 s)."""
    project = seeded_project
    path = spec(project, "piped", ["none", "hang"], timeout_s=60, min_measure_s=0.5)
    run = subprocess.run(["bash", "-c", f"{ORCHESTRATE} {path} | head -1; echo ${{PIPESTATUS[0]}} > rc"], cwd=project,
                         capture_output=True, text=True, timeout=300)
    assert run.stdout.startswith("orchestrate: piped on cpu") and len(run.stdout.splitlines()) == 1
    assert (project / "rc").read_text().strip() == "141"
    lines = [ln for ln in run.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("orchestrate: stopped by a closed pipe"), run.stderr
    records = check_records(project, "piped")
    assert all(t.state.name != "RUNNING" for t in records["study"].get_trials())
    assert _parent_status(project, "piped") == "KILLED"
    assert left_behind(project) == []


def _signal_masks(pid: int) -> str:
    """The process's blocked and ignored signals, as /proc says (for the failure message)."""
    try:
        return " ".join(ln for ln in Path(f"/proc/{pid}/status").read_text().splitlines() if ln.startswith(("SigBlk", "SigIgn")))
    except OSError:
        return "gone"


def test_ctrl_c_during_check_and_repair_is_one_line_and_repair_converges_after_it(seeded_project: Path) -> None:
    project = seeded_project
    path = spec(project, "checked", ["none", "none"])
    path.write_text(path.read_text().replace("fault: [none, none]", "hidden_size: [8, 16, 24]"))
    assert orchestrate([str(path)], project).returncode == 0
    (project / "mlruns" / "mlflow.db").unlink()  # --repair has three trials' records to write
    timing = project.parent / f"{project.name}_timing"  # a copy to time a whole repair in, uninterrupted
    shutil.copytree(project, timing)
    started = time.monotonic()
    assert orchestrate(["check", str(timing / path.name), "--repair"], timing).returncode == 0
    whole = time.monotonic() - started  # check alone reads SQLite and ends in 0.15 s: too soon to hit
    assert not (project / "mlruns" / "mlflow.db").exists()  # the copy was repaired, not the project
    interrupted, seen = 0, []
    for args, share in ((["check", str(path)], 0.1), (["check", str(path), "--repair"], 0.3),
                        (["check", str(path), "--repair"], 0.6)):
        events = project.parent / f"{project.name}_events_{len(seen)}.jsonl"
        proc = subprocess.Popen([ORCHESTRATE, *args], cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, preexec_fn=signals_as_in_a_terminal,
                                env={**os.environ, "ORCHESTRATE_TIMELINE": str(events)})
        # Python's own start-up (site, the console script's import) answers a Ctrl-C with its
        # KeyboardInterrupt traceback, as any Python command does: the signal waits for the
        # command's code ("cli_start"), which a loaded machine reached after the fixed share
        deadline = time.monotonic() + 60
        while not (events.exists() and "cli_start" in events.read_text()) and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(share * whole)  # fixed 1-2 s came after a repair's end on a loaded machine
        masks = _signal_masks(proc.pid)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        lines = [ln for ln in err.splitlines() if ln.strip()]
        seen.append((args[1:], proc.returncode, lines, masks))
        assert "Traceback" not in err and len(lines) <= 1, (args, share, err)
        if proc.returncode == 130:  # else it had finished first
            interrupted += 1
            assert lines[0].startswith(f"orchestrate {' '.join(a for a in args if a.startswith(('c', '--')))}: "
                                       "interrupted (Ctrl-C)"), lines
    # the first repair's signal comes before a whole repair's time is up; what it repaired before it
    # stays, so the second may have less left than 0.6 of it and end first (seen under 4 workers)
    assert interrupted >= 1 and seen[1][1] == 130, (whole, seen)
    repaired = command(["check", str(path), "--repair"], project)
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert "The study, MLflow and the trial folders agree." in repaired.stdout
    assert command(["check", str(path)], project).returncode == 0
    assert left_behind(project) == []


def _parent_status(project: Path, name: str) -> str:
    from conftest import parent_runs

    (parent,) = parent_runs(project, name)
    return parent.info.status


def test_a_trial_quiet_for_long_gets_a_line(seeded_project: Path) -> None:
    """The issue's hung trial, silent until its timeout (15 minutes by default): a line once it has
    run ``QUIET_S`` (2 s here) without a result, naming its phase and its log."""
    project = seeded_project
    path = spec(project, "quiet", ["hang"], timeout_s=8)
    proc = orchestrate([str(path)], project, env={"ORCHESTRATE_QUIET_S": "2"})
    assert proc.returncode == 3, proc.stdout + proc.stderr  # the one trial timed out: nothing feasible
    quiet = [ln for ln in proc.stderr.splitlines() if "without a result" in ln]
    assert len(quiet) == 1, proc.stderr  # again only after 5 x 2 s, past the 8 s timeout
    assert quiet[0].startswith("orchestrate: trial #0 has run ") and "it is killed at trial.timeout_s=8 s" in quiet[0]
    assert "its log: " in quiet[0] and "trial-0000/trial.log" in quiet[0]
    assert left_behind(project) == []


def test_sigterm_or_sighup_before_the_sweep_starts_is_one_line_and_leaves_nothing(project: Path) -> None:
    """While the probe imports the experiment (here, a module that sleeps at its import), before
    the sweep's own handlers: SIGTERM and SIGHUP were the default action, a silent exit 143 or 129;
    now, as Ctrl-C there, one line, the fork server and the probe ended, no store made."""
    (project / "slow_import.py").write_text(
        "import os, pathlib, time\npathlib.Path('importing').write_text(str(os.getpid()))\ntime.sleep(120)\n"
        "def build(params, device): ...\n")
    path = write_spec(project, "name: early\nexperiment: slow_import\ndevice: cpu\nspace:\n  batch_size: [4, 8]\n")
    for signum, code, times in ((signal.SIGTERM, 143, 2), (signal.SIGHUP, 129, 1)):  # two: still one line
        marker = project / "importing"
        marker.unlink(missing_ok=True)
        proc = subprocess.Popen([ORCHESTRATE, str(path)], cwd=project, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, preexec_fn=signals_as_in_a_terminal)
        deadline = time.monotonic() + 60
        while not (marker.exists() and marker.read_text()) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert marker.exists(), proc.communicate(timeout=30)
        for _ in range(times):
            proc.send_signal(signum)
            time.sleep(0.01)
        said = proc.stderr.readline()  # type: ignore[union-attr]
        if times > 1:  # a sender's signal that comes after the line does not kill it on its way out
            proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
        name = signal.Signals(signum).name
        assert (proc.returncode, out, said + err) == (code, "", f"orchestrate: stopped by {name} before the sweep "
                                                                "started; nothing was run\n")
        assert left_behind(project) == []  # the probe that was importing too
        assert not (project / "mlruns" / "optuna.db").exists() and not (project / "mlruns" / "mlflow.db").exists()


def test_a_closed_or_full_output_is_no_traceback_and_the_sweep_finishes(seeded_project: Path) -> None:
    """The fault tour: ``orchestrate SPEC >&-`` died on its first print (``'NoneType' object has
    no attribute 'write'``) with MLflow's parent run left RUNNING; ``> /dev/full`` (a log on a full
    disk) stopped the sweep as "SIGHUP (its terminal closed)", exit 129; ``report > /dev/full`` was
    an ``OSError`` traceback."""
    project = seeded_project
    path = spec(project, "outputs", ["none"])
    closed = subprocess.run(["bash", "-c", f"{ORCHESTRATE} {path} >&- 2>&- <&-"], cwd=project, capture_output=True,
                            text=True, timeout=300)
    assert closed.returncode == 0 and check_records(project, "outputs")["results"]
    assert _parent_status(project, "outputs") == "FINISHED"
    again = spec(project, "outputs_full", ["none"])
    full = subprocess.run(["bash", "-c", f"{ORCHESTRATE} {again} > /dev/full"], cwd=project,
                          capture_output=True, text=True, timeout=300)
    assert full.returncode == 0 and full.stderr.splitlines()[-1] == (
        "orchestrate: its output could not be written (No space left on device); the sweep goes on, its results "
        "are in the stores (orchestrate report)"), full.stderr
    assert check_records(project, "outputs_full")["results"] and _parent_status(project, "outputs_full") == "FINISHED"
    report = subprocess.run(["bash", "-c", f"{ORCHESTRATE} report {path} > /dev/full"], cwd=project,
                            capture_output=True, text=True, timeout=300)
    assert report.returncode == 75 and report.stderr == (
        "orchestrate: its output could not be written (No space left on device); free the disk it goes to and run "
        "the command again\n"), report.stderr
    assert left_behind(project) == []
