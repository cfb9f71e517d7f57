"""Stores and folders damaged or lost between runs, as a new user damages them: an MLflow file
truncated to 4 KB or overwritten with text, a study file truncated, a study whose name reads like
a driver's error, trial folders deleted by hand or by the trial itself, MLflow runs deleted by
hand. Each is one line that names the file and what to do (exit 2 where the user must act), and
the way forward converges: MLflow rebuilt from the study, the same runs restored.

Real files, damaged for real; the commands run as the installed ``orchestrate`` (the sweeps) or
``orchestrator.cli.main`` in this process (``check``: MLflow is imported here already).
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import pytest

from conftest import check_records, child_runs, left_behind, load_study, orchestrate, write_spec
from conftest import command as in_process

pytestmark = pytest.mark.slow


def spec(project: Path, name: str, extra: str = "", sizes: str = "8, 16, 24") -> Path:
    return write_spec(project, f"""
        name: {name}
        experiment: experiments.faults
        device: cpu
        fixed: {{batch_size: 4{extra}}}
        space:
          hidden_size: [{sizes}]
        search: {{sampler: grid}}
        trial: {{warmup_steps: 1, measure_steps: 2, min_measure_s: 0.05, timeout_s: 60}}
        """)


def command(project: Path, *args: str) -> tuple[int, str, str]:
    """``orchestrate ARGS`` in this process, in ``project``: exit code, stdout, stderr."""
    proc = in_process(list(args), project)
    return proc.returncode, proc.stdout, proc.stderr


def one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def run_ids(project: Path, name: str) -> list[str]:
    return sorted(r.info.run_id for r in child_runs(project, name))


@pytest.fixture
def finished(project: Path) -> Path:
    """A finished 3-trial study in ``project`` (its MLflow store made by the sweep itself)."""
    path = spec(project, "damaged")
    proc = orchestrate([str(path)], project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return path


def test_a_damaged_mlflow_file_is_one_line_and_moved_aside_it_is_rebuilt_from_the_study(project: Path,
                                                                                      finished: Path) -> None:
    """The issue's tracebacks (sweep, check, --repair) for an MLflow file truncated to 4 KB or
    replaced by text; then the remedy the line gives, and MLflow runs deleted by hand restored."""
    db = project / "mlruns" / "mlflow.db"
    good = db.read_bytes()
    for name, damage in (("truncated to 4 KB", lambda: os.truncate(db, 4096)),
                         ("text", lambda: db.write_text("this is not a database\n" * 20))):
        db.write_bytes(good)
        damage()
        sweep = orchestrate([str(finished)], project)
        assert sweep.returncode == 2, (name, sweep.stdout + sweep.stderr)
        line = one_line(sweep.stderr)
        # the spec names no tracking_uri: the store's own line, not a spec line the file lacks
        assert line.startswith("orchestrate: tracking_uri sqlite:///mlruns/mlflow.db: mlruns/mlflow.db "), line
        assert "mv mlruns/mlflow.db mlruns/mlflow.db.corrupt" in line and "rebuilds MLflow's records" in line
        for args in (["check", str(finished)], ["check", str(finished), "--repair"]):
            code, out, err = command(project, *args)
            assert code == 2 and out == "", (name, args, out, err)
            line = one_line(err)
            assert "mlruns/mlflow.db" in line and "move it aside" in line and "--repair" in line, line
    db.write_bytes(good)
    with open(db, "r+b") as f:  # the fault tour: 20 KB of garbage mid-file, which check, --repair and the
        f.seek(len(good) // 2 // 4096 * 4096)  # sweep read as a store that agreed (report then wrote into it)
        f.write(random.Random(0).randbytes(20 * 1024))
    for args in (["check", str(finished)], ["check", str(finished), "--repair"]):
        code, out, err = command(project, *args)
        line = one_line(err)
        assert code == 2 and "mlruns/mlflow.db is damaged (" in line and "mv mlruns/mlflow.db" in line, (args, out, err)
    shutil.move(db, db.with_name("mlflow.db.corrupt"))  # the line's remedy
    code, out, err = command(project, "check", str(finished), "--repair")
    assert code == 0 and "The study, MLflow and the trial folders agree." in out, out + err
    runs = child_runs(project, "damaged")  # one finished run per trial, rebuilt (the study's
    assert sorted(int(r.data.tags["trial_number"]) for r in runs) == [0, 1, 2]  # mlflow_run_id names the old file's)
    assert all(r.info.status == "FINISHED" and r.data.metrics["samples_per_s"] > 0 for r in runs)

    from mlflow.tracking import MlflowClient

    before = run_ids(project, "damaged")
    client = MlflowClient(f"sqlite:///{db}")
    for run_id in before[:2]:  # runs the repair wrote, deleted by hand: restored, not written anew
        client.delete_run(run_id)
    code, out, err = command(project, "check", str(finished), "--repair")
    assert code == 0 and "2 trial(s)' MLflow records written from the study" in out, out + err
    assert run_ids(project, "damaged") == before
    assert left_behind(project) == []


def test_a_damaged_study_file_is_one_line_in_every_command(project: Path, finished: Path) -> None:
    import sqlite3

    db = project / "mlruns" / "optuna.db"
    good = db.read_bytes()
    con = sqlite3.connect(db)  # a table's page wrecked, the schema intact: the sweep said what to do, but
    page = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 'trial_params'").fetchone()[0]
    size = con.execute("PRAGMA page_size").fetchone()[0]  # check, report, best and delete said only
    con.close()  # SQLite's words ("database disk image is malformed")
    with open(db, "r+b") as f:
        f.seek((page - 1) * size)
        f.write(b"\xff" * size)
    for args in (["check", str(finished)], ["report", str(finished)], ["best", str(finished)],
                 ["delete", str(finished), "--yes"]):
        proc = orchestrate(args, project)
        line = one_line(proc.stderr)
        assert proc.returncode == 2 and "malformed" in line and "restore it from a backup, or move it aside" in line, \
            (args, proc.stdout, line)
    assert len(list((project / "mlruns" / ".trials").glob("*/trial-*"))) == 3  # nothing deleted
    db.write_bytes(good)
    os.truncate(db, 4096)
    for args in ([str(finished)], [str(finished), "--dry-run"], ["report", str(finished)], ["best", str(finished)],
                 ["check", str(finished)], ["delete", str(finished), "--yes"]):
        proc = orchestrate(args, project)
        assert proc.returncode == 2, (args, proc.stdout + proc.stderr)
        line = one_line(proc.stderr)
        assert "mlruns/optuna.db is truncated: 4,096 bytes" in line and "--new-study" in line, line
    assert db.stat().st_size == 4096  # untouched


def test_a_lost_or_emptied_study_file_is_the_sweep_s_line_in_every_command(project: Path, finished: Path) -> None:
    """The tour's ``--dry-run`` that passed, and ``check``, ``report`` and ``best`` that said to
    run the sweep first, which then refused: each now says the sweep's line (restore the file, or
    ``--new-study``), and changes nothing."""
    db = project / "mlruns" / "optuna.db"
    for why, lose in (("the file is empty", lambda: db.write_bytes(b"")), ("the file does not exist", db.unlink)):
        lose()
        sweep = orchestrate([str(finished)], project)
        assert sweep.returncode == 2, sweep.stdout + sweep.stderr
        line = one_line(sweep.stderr)
        assert f"study 'damaged' is missing from sqlite:///{db} ({why})" in line and "--new-study" in line, line
        for args in ([str(finished), "--dry-run"], ["check", str(finished)], ["check", str(finished), "--repair"],
                     ["report", str(finished)], ["best", str(finished)]):
            code, out, err = command(project, *args)
            assert (code, out, one_line(err)) == (2, "", line), (args, out, err)
        code, out, err = command(project, str(finished), "--dry-run", "--new-study")
        assert code == 0 and out.startswith(f"Plan for {finished}"), err
        assert not (db.exists() and db.stat().st_size)  # nothing made
    assert len(run_ids(project, "damaged")) == 3


def test_trial_folders_deleted_by_hand_or_by_the_trial_are_differences(project: Path, finished: Path) -> None:
    """The issue's check that said "agree" with 0 of 2 folders, and the "its log: ..." line that
    pointed at nothing."""
    trials = sorted((project / "mlruns" / ".trials").glob("damaged-*/trial-*"))
    shutil.rmtree(trials[0])
    shutil.rmtree(trials[2])
    code, out, err = command(project, "check", str(finished))
    assert code == 1, out + err
    assert f"trial 0: its folder {trials[0]} is missing" in out and f"trial 2: its folder {trials[2]} is missing" in out
    assert "2 difference(s). Repair: orchestrate check" in out  # from the copies each trial's run logged
    kept = {name: (trials[1] / name).read_bytes() for name in ("config.json", "result.json")}
    killed = trials[0].with_name(f".{trials[0].name}.restoring")  # what a repair killed midway leaves
    killed.mkdir()
    (killed / "config.json").write_text("{")
    code, out, err = command(project, "check", str(finished), "--repair")
    assert code == 0 and err == "", out + err  # MLflow's download bars are not printed
    assert "orchestrate check: 2 trial folder(s) written back from their MLflow runs' copies" in out, out
    assert out.startswith("orchestrate check: MLflow held every trial's records: none written\n"), out  # not "0 trial(s)'"
    assert "The study, MLflow and the trial folders agree." in out
    for folder in (trials[0], trials[2]):
        assert sorted(p.name for p in folder.iterdir()) == ["config.json", "result.json", "trial.log"]
        assert folder.stat().st_mode == trials[1].stat().st_mode  # as the sweep made it, not a temporary folder's 0700
        assert json.loads((folder / "result.json").read_text())["status"] == "ok"
    assert {name: (trials[1] / name).read_bytes() for name in kept} == kept  # a folder on disk is not touched
    import sqlite3  # trial 1's record naming no run, as a loaded machine leaves it (its run made after it ended):
    # check said "agree" here, and --repair wrote nothing back, in two of four full runs of the suite
    with sqlite3.connect(project / "mlruns" / "optuna.db") as con:
        con.execute("DELETE FROM trial_user_attributes WHERE key = 'mlflow_run_id' "
                    "AND trial_id = (SELECT trial_id FROM trials WHERE number = 1)")
    (trials[1] / "result.json").unlink()  # one file of a folder that is there: "agree" before
    code, out, err = command(project, "check", str(finished))
    assert code == 1 and f"trial 1: its folder {trials[1]} lacks result.json (deleted from disk, or damaged; its MLflow " \
           "run keeps the copies it logged, which --repair writes back)" in out, out + err
    code, out, err = command(project, "check", str(finished), "--repair")
    assert code == 0 and "1 trial folder(s) given back the files deleted from them" in out, out + err
    assert "none written" in out and "agree" in out  # MLflow's records were not written again for it
    assert {name: (trials[1] / name).read_bytes() for name in kept} == kept
    (trials[1] / "config.json").write_text('{"params": [1, 2')  # damaged (the fault tour: "agree")
    code, out, err = command(project, "check", str(finished))
    assert code == 1 and f"its folder {trials[1]} lacks config.json (deleted from disk, or damaged;" in out, out + err
    code, out, err = command(project, "check", str(finished), "--repair")
    assert code == 0 and {name: (trials[1] / name).read_bytes() for name in kept} == kept, out + err
    assert not [p for p in trials[0].parent.iterdir() if p.name.startswith(".")]  # no download left beside them
    copies = [p.parent for p in (project / "mlruns").glob("*/*/artifacts/config.json")
              if p.read_bytes() == kept["config.json"]]  # trial 1's run's copies
    assert len(copies) == 1, copies
    shutil.rmtree(trials[1])
    shutil.rmtree(copies[0])  # its run's copies gone too
    code, out, err = command(project, "check", str(finished))
    assert code == 1 and "Traceback" not in err, out + err
    assert f"trial 1: its folder {trials[1]} is missing (its configuration, log and result are gone from disk, " \
           "and its MLflow run holds no copy of them)" in out and "Repair: orchestrate check" not in out, out
    # nothing can write it back, and check exited 1 for good: --repair records the loss, once
    for said in ("orchestrate check: 1 trial folder(s) gone from disk with no copy in MLflow to write back (trial(s) "
                 "1): recorded as lost for good, their results kept in the study; check no longer counts them", None):
        code, out, err = command(project, "check", str(finished), "--repair")
        assert code == 0 and "agree" in out and (said in out if said else "recorded as lost" not in out), out + err
        assert "(trial folder(s) of trial(s) 1 lost for good, with no copy in MLflow, as check --repair recorded: " \
               "not compared; their results stay in the study)" in out, out
    assert command(project, "check", str(finished))[0] == 0

    path = spec(project, "cleaner", ", fault: delete_folder", "8")
    proc = orchestrate([str(path)], project)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "its trial folder was deleted while it ran" in proc.stdout
    last = proc.stderr.strip().splitlines()[-1]
    assert "its log" in last and "is gone (its folder was deleted)" in last, last
    code, out, err = command(project, "check", str(path))
    assert code == 1 and "trial 0: its folder" in out and "is missing" in out, out + err


def test_a_study_named_like_a_full_disk_resumes(seeded_project: Path) -> None:
    """The issue's study named ``diskfull``: its second run read Optuna's DuplicatedStudyError,
    whose SQL parameters hold the name, as a full disk (exit 75 on a roomy disk)."""
    project = seeded_project
    path = spec(project, "diskfull", sizes="8, 16")
    first = orchestrate([str(path), "--n-trials", "1"], project)
    assert first.returncode == 0, first.stdout + first.stderr
    resumed = orchestrate([str(path)], project)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "1 of 2 trials done" in resumed.stdout
    check_records(project, "diskfull", 2)


def test_an_unreachable_tracking_server_is_said_at_once_and_no_study_is_claimed(project: Path) -> None:
    """The issue's 5 silent minutes, then "the study is saved" where no study file was made:
    nobody listens on the port; the wait is said at the first failed call, the end says that
    nothing was started, and no study was created."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path = spec(project, "unreachable", sizes="8")
    path.write_text(path.read_text().replace("search: {sampler: grid}", "search: {sampler: grid, outage_s: 3}"))
    proc = orchestrate([str(path), "--tracking-uri", f"http://127.0.0.1:{port}"], project)
    assert proc.returncode == 75, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 2 and "Traceback" not in proc.stderr, lines
    assert lines[0].startswith(f"orchestrate: the tracking store http://127.0.0.1:{port} is unreachable (")
    assert "retrying for up to search.outage_s=3 s" in lines[0]
    assert "more than search.outage_s=3" in lines[1] and lines[1].endswith("nothing was started: run the same "
                                                                            "command once it is back")
    assert "study is saved" not in proc.stderr and not (project / "mlruns" / "optuna.db").exists()
    assert left_behind(project) == []


def test_a_resume_says_what_it_wrote_to_mlflow_from_the_study(project: Path) -> None:
    """The PostgreSQL tour: a resume after the tracking server had been away wrote 5 trials' runs
    and said nothing of it. The header says it now (here MLflow's file is lost instead)."""
    path = spec(project, "rewritten", sizes="8, 16")
    first = orchestrate([str(path), "--n-trials", "1"], project)
    assert first.returncode == 0, first.stdout + first.stderr
    (project / "mlruns" / "mlflow.db").unlink()
    again = orchestrate([str(path)], project)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "\n  MLflow lacked the records of 1 trial(s) the study holds (its store was away, or the last run was " \
           "stopped before it wrote them): written from the study\n" in again.stdout, again.stdout
    assert sorted(int(r.data.tags["trial_number"]) for r in child_runs(project, "rewritten")) == [0, 1]


def test_a_file_where_a_trial_folder_belongs_is_one_line_and_its_trial_runs_again(project: Path) -> None:
    """The fault tour: a file named as the next trial's folder ended the sweep in a FileExistsError
    traceback, the trial left RUNNING and the parent run with it."""
    path = spec(project, "blocked", sizes="8, 16")
    assert orchestrate([str(path), "--n-trials", "1"], project).returncode == 0
    [folder] = (project / "mlruns" / ".trials").glob("blocked-*")
    (folder / "trial-0001").write_text("not a folder")
    proc = orchestrate([str(path)], project)
    assert proc.returncode == 75 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "a file is where a folder belongs" in lines[0] and "trial-0001 is a file" in lines[0], lines
    assert not [t for t in load_study(project, "blocked").trials if t.state.name == "RUNNING"]
    (folder / "trial-0001").unlink()
    again = orchestrate([str(path)], project)
    assert again.returncode == 0, again.stdout + again.stderr
    check_records(project, "blocked", n_results=2)
