"""Nothing lost when a store cannot be written: a full disk under MLflow's store or the study (at
the first write and mid-sweep), a read-only MLflow store, both stores refusing writes. Each ends
in one line per store, exit 75, and the next run converges: the study complete, one finished
MLflow run per trial with its metrics, and ``orchestrate check`` exiting 0.

The disks are real: a small tmpfs mounted for the test (root, or CAP_SYS_ADMIN; skipped with the
reason where it cannot be mounted), filled with zeros by a thread once the study holds a result,
or bind-mounted read-only over itself. The last test makes the same failures with the fault points
(``ORCHESTRATE_FAIL_AT``), which need no mount, for CI machines that cannot mount one. The
SIGKILL between the study's tell and MLflow's finish is in test_reliability.py (``after_tell:3``).
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import check_records, child_runs, left_behind, orchestrate, orchestrate_popen, standing_still, write_spec
from orchestrator.cli import main

pytestmark = pytest.mark.slow
REPAIRED = re.compile(r"MLflow: (\d+) trial\(s\)' records repaired from the study\.")
MISSING = re.compile(r"MLflow: (\d+) trial\(s\)' records missing \(([^)]*)\)")


def spec(directory: Path, name: str, n: int = 4, min_measure_s: float = 0.05) -> Path:
    sizes = ", ".join(str(8 * (i + 1)) for i in range(n))
    return write_spec(directory, f"""
        name: {name}
        experiment: experiments.faults
        device: cpu
        fixed: {{batch_size: 4}}
        space:
          hidden_size: [{sizes}]
        search: {{sampler: grid}}
        trial: {{warmup_steps: 1, measure_steps: 2, min_measure_s: {min_measure_s:g}, timeout_s: 60}}
        """)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs at ``tmp_path/small``, unmounted (with anything mounted over it) afterwards."""
    yield from mounted(tmp_path / "small")


@pytest.fixture
def trials_disk(project: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs holding the project's trial folders (``mlruns/.trials``): the study and
    MLflow's store stay on the roomy disk."""
    yield from mounted(project / "mlruns" / ".trials")


def mounted(folder: Path) -> Iterator[Path]:
    folder.mkdir(parents=True)
    try:
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(folder)],
                              capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        pytest.skip("no mount command here; the fault points cover these failures (test_both_stores_refusing_...)")
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({proc.stderr.strip() or 'mount failed'}: needs root or "
                    "CAP_SYS_ADMIN); the fault points cover these failures (test_both_stores_refusing_...)")
    try:
        yield folder
    finally:
        while os.path.ismount(folder):
            subprocess.run(["umount", "-l", str(folder)], capture_output=True, timeout=30)


def fill(folder: Path) -> None:
    """Write zeros into ``folder`` until its file system is full (a real ENOSPC)."""
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        while True:
            os.write(fd, b"\0" * 65536)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)


def free(folder: Path) -> None:
    (folder / "filler").unlink()


def read_only(folder: Path) -> None:
    """``folder`` read-only from now on, for every file opened or created after this (a bind mount
    over itself, remounted read-only: what a file system remounted after an error looks like)."""
    subprocess.run(["mount", "--bind", str(folder), str(folder)], check=True, timeout=30)
    for _ in range(100):  # "mount point is busy" while a write is open through the new mount: retry
        if subprocess.run(["mount", "-o", "remount,bind,ro", str(folder)], capture_output=True, timeout=30).returncode == 0:
            return
        time.sleep(0.01)
    subprocess.run(["mount", "-o", "remount,bind,ro", str(folder)], check=True, timeout=30)


def mid_sweep(args: list[str], cwd: Path, action, *more, at: str = "after_tell:1") -> subprocess.CompletedProcess[str]:  # noqa: ANN001
    """``orchestrate ARGS``, with ``action(*more)`` done while it stands still at ``at`` (after its
    first result; ``ORCHESTRATE_STOP_AT``). A poll of the study for that result instead came, on a
    loaded CI machine, after all 3 trials of 0.05 s had ended (then with 1-s windows, slower and
    still timed)."""
    proc = orchestrate_popen(args, cwd, {"ORCHESTRATE_STOP_AT": at})
    with standing_still(proc):
        action(*more)
    out, err = proc.communicate(timeout=300)
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def one_line(stderr: str, *words: str) -> str:
    """The single line on stderr, which says each of ``words``; no traceback."""
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def converged(project: Path, spec_path: Path, name: str, n: int, flags: list[str], tracking: str | None = None,
              storage: str | None = None) -> None:
    """The study has ``n`` results, MLflow one finished run per trial with its throughput, nothing
    RUNNING (``check_records``), and ``orchestrate check`` says so with exit 0 (the CLI's code
    run in this process; tests/scenarios/test_distributed.py runs the installed command)."""
    records = check_records(project, name, n, storage=storage, tracking=tracking)
    for t in records["results"]:
        (run,) = records["runs"][t.number]
        assert run.info.status == "FINISHED" and run.data.metrics["samples_per_s"] > 0, run
    # the command in this process (MLflow is imported here already: seconds saved per test)
    out = io.StringIO()
    with contextlib.chdir(project), contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(["check", str(spec_path), *flags])
    assert code == 0, out.getvalue()
    assert "The study, MLflow and the trial folders agree." in out.getvalue()


def test_mlflow_store_on_a_full_disk_then_freed_converges(project: Path, small_disk: Path) -> None:
    """The issue's new user: the study on a roomy disk, MLflow's store on one that fills."""
    path = spec(project, "mlfull", 3)
    tracking = f"sqlite:///{small_disk}/mlflow.db"
    flags = ["--tracking-uri", tracking]
    fill(small_disk)  # at the first write: the store cannot even be created; nothing runs
    first = orchestrate([str(path), *flags], project)
    assert first.returncode == 75, first.stdout + first.stderr
    one_line(first.stderr, f"MLflow's store {tracking}", "the disk is full", "nothing was started")
    assert not list(project.glob("mlruns/.trials/*/trial-*")) and not list(small_disk.glob(".mlflow.db.init-*"))

    free(small_disk)  # mid-sweep: full once a trial has its result; the sweep goes on
    mid = mid_sweep([str(path), *flags], project, fill, small_disk)
    assert mid.returncode == 75, mid.stdout + mid.stderr
    one_line(mid.stderr, f"MLflow's store {tracking}", "the disk is full", "the sweep goes on")
    assert "mlfull: 3 of 3 trials have a result" in mid.stdout
    missing = MISSING.search(mid.stdout)
    assert missing and missing[2] == "the disk is full" and int(missing[1]) >= 1, mid.stdout

    free(small_disk)  # the finished study's command writes the missing records, without a probe or torch
    again = orchestrate([str(path), *flags], project)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "nothing to run, so nothing was started" in again.stdout
    assert (m := REPAIRED.search(again.stdout)) and m[1] == missing[1], again.stdout
    converged(project, path, "mlfull", 3, flags, tracking=tracking)


def test_study_on_a_full_disk_stops_at_once_then_resumes(project: Path, small_disk: Path) -> None:
    path = spec(project, "studyfull", 3)
    storage = f"sqlite:///{small_disk}/optuna.db"
    flags = ["--storage", storage]
    fill(small_disk)
    first = orchestrate([str(path), *flags], project)
    assert first.returncode == 75, first.stdout + first.stderr
    one_line(first.stderr, f"the study's store {storage}", "the disk is full", "nothing was started")
    assert not list(project.glob("mlruns/.trials/*/trial-*"))

    free(small_disk)
    mid = mid_sweep([str(path), *flags], project, fill, small_disk)
    assert mid.returncode == 75, mid.stdout + mid.stderr
    one_line(mid.stderr, f"the study's store {storage}", "the disk is full", "the sweep stopped")
    import optuna

    trials = optuna.load_study(study_name="studyfull", storage=storage).get_trials()
    # no trial started after the failed write: at most the one in flight has no result, and every
    # trial folder is a trial the study knows
    assert sum(1 for t in trials if t.state.name == "RUNNING") <= 1, [t.state for t in trials]
    folders = {int(p.name[6:]) for p in project.glob("mlruns/.trials/*/trial-*")}
    assert folders <= {t.number for t in trials} and sum(t.state.name == "COMPLETE" for t in trials) < 3

    free(small_disk)
    resumed = orchestrate([str(path), *flags], project)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    converged(project, path, "studyfull", 3, flags, storage=storage)


def test_a_study_file_moved_mid_sweep_says_so_then_put_back_resumes(project: Path) -> None:
    """The study's file moved away (or deleted) mid-sweep: SQLite refuses the next write as
    read-only (SQLITE_READONLY_DBMOVED), and the line said "the store is read-only ... run the same
    command once it can be written", which cannot help. It says the file left its path, and what to
    do: put it back (then the same command resumes and converges) or start a new study."""
    path = spec(project, "moved", 3)
    path.write_text(path.read_text().replace("min_measure_s: 0.05", "min_measure_s: 0.6"))  # moved while one runs
    study = project / "mlruns" / "optuna.db"
    # once the second trial runs (its window 0.6 s): its run is open when its result cannot be told
    run = mid_sweep([str(path)], project, os.rename, study, project / "optuna.db.moved", at="trial_running:2")
    assert run.returncode == 75, run.stdout + run.stderr
    one_line(run.stderr, "the study's store sqlite:///", "its file was deleted, moved or replaced while the sweep ran",
             "put it back and run the same command", "--new-study")
    assert "read-only" not in run.stderr and not left_behind(project)
    runs = child_runs(project, "moved")  # the trial in flight's run too: ended, not RUNNING for good
    assert runs and all(r.info.status != "RUNNING" for r in runs), [(r.info.status, r.data.tags["status"]) for r in runs]
    assert all(r.data.tags["status"] != "running" for r in runs)
    os.rename(project / "optuna.db.moved", study)
    again = orchestrate([str(path)], project)
    assert again.returncode == 0, again.stdout + again.stderr
    converged(project, path, "moved", 3, [])


def test_a_read_only_mlflow_store_mid_sweep_then_writable_converges(project: Path, small_disk: Path) -> None:
    # the bind mount goes read-only after the first result, while the sweep stands still there (a
    # poll, with 2 and 3 configurations, came after the last trial's MLflow writes on the loaded
    # 2-core machine: exit 0, nothing refused); ``read_only`` retries a remount refused as busy
    path = spec(project, "mlro", 3)
    tracking = f"sqlite:///{small_disk}/mlflow.db"
    flags = ["--tracking-uri", tracking]
    run = mid_sweep([str(path), *flags], project, read_only, small_disk)
    assert run.returncode == 75, run.stdout + run.stderr
    one_line(run.stderr, f"MLflow's store {tracking}", "the store is read-only", "the sweep goes on")
    assert (missing := MISSING.search(run.stdout)) and missing[2] == "the store is read-only", run.stdout
    subprocess.run(["umount", str(small_disk)], check=True, timeout=30)  # the read-only bind mount
    again = orchestrate([str(path), *flags], project)
    assert again.returncode == 0, again.stdout + again.stderr
    assert REPAIRED.search(again.stdout), again.stdout
    converged(project, path, "mlro", 3, flags, tracking=tracking)


def test_both_stores_refusing_writes_are_two_lines_then_the_resume_converges(seeded_project: Path) -> None:
    """The fault points, where no file system can be mounted: MLflow refuses from its 10th write
    (trial 1), the study from its 35th (trial 2 of 3), as SQLite refuses on a full disk."""
    project = seeded_project
    path = spec(project, "faults", 3)
    run = orchestrate([str(path)], project, env={"ORCHESTRATE_FAIL_AT": "mlflow_write:10,study_write:35"})
    assert run.returncode == 75, run.stdout + run.stderr
    lines = [ln for ln in run.stderr.splitlines() if ln.strip()]
    assert len(lines) == 2 and "Traceback" not in run.stderr, run.stderr
    assert "MLflow's store" in lines[0] and "the disk is full" in lines[0] and "the sweep goes on" in lines[0]
    assert "the study's store" in lines[1] and "the disk is full" in lines[1] and "the sweep stopped" in lines[1]
    assert len(child_runs(project, "faults")) < 3  # MLflow missed records

    resumed = orchestrate([str(path)], project)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert REPAIRED.search(resumed.stdout), resumed.stdout
    converged(project, path, "faults", 3, [])


def test_trial_folders_on_a_full_disk_stop_the_sweep_in_one_line_then_it_resumes(project: Path,
                                                                                  trials_disk: Path) -> None:
    """The issue's 46-line traceback: the trial folders' disk full before the first trial (its
    folder or configuration cannot be written), then again while a trial writes its result. Each
    is one line naming the folders, exit 75, no trial left RUNNING, nothing left running; the
    resume measures the trial cut off again and converges."""
    path = spec(project, "trialsfull", 3)
    fill(trials_disk)
    first = orchestrate([str(path)], project)
    assert first.returncode == 75, first.stdout + first.stderr
    line = one_line(first.stderr, f"the trial folders {trials_disk}", "the disk is full", "the sweep stopped",
                    "recorded as interrupted")
    assert "Resume with: orchestrate" in line
    trials = check_records(project, "trialsfull", 0)["study"].get_trials()  # nothing RUNNING, MLflow agrees
    assert [t.user_attrs["status"] for t in trials] == ["interrupted"]
    assert left_behind(project) == []

    free(trials_disk)  # the disk fills once the third trial runs (a 1.5-s window): it cannot write its result
    slow = path.read_text().replace("min_measure_s: 0.05", "min_measure_s: 1.5")
    path.write_text(slow)
    mid = mid_sweep([str(path)], project, fill, trials_disk, at="trial_running:3")
    assert mid.returncode == 75, mid.stdout + mid.stderr
    one_line(mid.stderr, f"the trial folders {trials_disk}", "the disk is full", "could not write its result")
    records = check_records(project, "trialsfull")
    assert [t.user_attrs["status"] for t in records["study"].get_trials()][-2:] == ["ok", "interrupted"]
    assert not list(trials_disk.glob("*/trial-*/result.json.tmp"))  # no half-written result left
    assert left_behind(project) == []

    free(trials_disk)
    path.write_text(slow.replace("min_measure_s: 1.5", "min_measure_s: 0.05"))
    resumed = orchestrate([str(path)], project)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    converged(project, path, "trialsfull", 3, [])


def test_a_file_where_the_stores_folders_belong_is_named_with_its_remedy(project: Path) -> None:
    """A stray file named ``mlruns`` is refused before anything is made, naming the file and the
    remedy (not "fix the URL": the URL is the default); a file named ``mlruns/.trials`` (where the
    trial folders go) stopped the first trial with a ``NotADirectoryError`` traceback, the trial
    and the parent run left RUNNING: now one line naming the file, exit 75, the trial recorded
    interrupted; once the file is moved aside the same command finishes the study."""
    path = spec(project, "inway", 2)
    (project / "mlruns").write_text("not a folder\n")
    refused = orchestrate([str(path)], project)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stdout + refused.stderr
    lines = refused.stderr.splitlines()
    assert len(lines) == 2 and all(f"{project / 'mlruns'} is a file, not a folder; move it aside" in ln for ln in lines), lines
    assert sorted(p.name for p in project.iterdir() if p.name != "__pycache__") == sorted(["mlruns", path.name]), list(project.iterdir())

    (project / "mlruns").unlink()
    (project / "mlruns").mkdir()
    (project / "mlruns" / ".trials").write_text("not a folder\n")
    first = orchestrate([str(path)], project)
    assert first.returncode == 75, first.stdout + first.stderr
    one_line(first.stderr, "the trial folders", "a file is where a folder belongs", f"{project / 'mlruns' / '.trials'} is a file",
             "recorded as interrupted", "Resume with: orchestrate")
    trials = check_records(project, "inway", 0)["study"].get_trials()  # nothing RUNNING, MLflow agrees
    assert [t.user_attrs["status"] for t in trials] == ["interrupted"]
    assert left_behind(project) == []

    (project / "mlruns" / ".trials").unlink()
    resumed = orchestrate([str(path)], project)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    converged(project, path, "inway", 2, [])


def test_a_read_only_working_folder_without_mlruns_is_one_line_for_the_run_and_its_dry_run(small_disk: Path) -> None:
    """The fault tour: a working folder on a read-only file system, no ``mlruns`` yet: ``--dry-run``
    said all was well, and the run died at ``Path("mlruns").mkdir`` with an ``OSError``
    traceback. With an ``mlruns`` there, it was one line already."""
    path = spec(small_disk, "ro_folder")
    read_only(small_disk)
    for flags in (["--dry-run"], []):
        proc = orchestrate([str(path), *flags], small_disk)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.splitlines()[0] == (
            f"orchestrate: storage sqlite:///mlruns/optuna.db: folder {small_disk} is not writable, so "
            f"{small_disk}/mlruns cannot be created in it (nor the trials' folders, mlruns/.trials); run from a "
            "folder you can write"), proc.stderr
    assert not (small_disk / "mlruns").exists()


def test_best_written_to_a_full_disk_leaves_no_empty_file(project: Path, small_disk: Path) -> None:
    """The fault tour: ``best -o FILE`` (and ``--export FILE``) on a full disk said so but left a
    0-byte FILE behind, exit 2: now nothing is left, and 75 says the same command works once
    there is space."""
    path = spec(project, "exported", n=1)
    assert orchestrate([str(path)], project).returncode == 0
    fill(small_disk)
    out = small_disk / "best.yaml"
    proc = orchestrate(["best", str(path), "-o", str(out)], project)
    assert proc.returncode == 75 and proc.stderr == (
        f"orchestrate: cannot write {out}: No space left on device; free some space and run the same command\n")
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler"]
    free(small_disk)
    assert orchestrate(["best", str(path), "-o", str(out)], project).returncode == 0 and "batch_size: 4" in out.read_text()
