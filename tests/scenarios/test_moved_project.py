"""A project folder moved or copied between runs (``mv project project2``, ``cp -r``): the local
stores recorded absolute paths (each trial's folder, MLflow's artifact locations). Before, the
resumed sweep wrote its runs' files into the old folder (made again where it was gone, or into
the original a copy came from) and ``check`` called every trial folder missing. Now ``check``
says what moved in one line, and the sweep, ``check --repair`` and ``ui`` point MLflow here.

Real sweeps in real folders, moved for real (``store.moved``)."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from conftest import check_records, orchestrate, write_spec
from conftest import command as in_process

pytestmark = pytest.mark.slow

NAME = "moved"


def first_run(folder: Path) -> Path:
    folder.mkdir()
    path = write_spec(folder, f"""
        name: {NAME}
        experiment: experiments.faults
        device: cpu
        fixed: {{batch_size: 4}}
        space:
          hidden_size: [8, 16, 24]
        search: {{sampler: grid}}
        trial: {{warmup_steps: 1, measure_steps: 2, min_measure_s: 0.05, timeout_s: 60}}
        """)
    proc = orchestrate([str(path), "--n-trials", "2"], folder)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return path


def command(args: list[str], cwd: Path) -> tuple[int, str, str]:
    proc = in_process(args, cwd)
    return proc.returncode, proc.stdout, proc.stderr


def locations(folder: Path) -> list[str]:
    """Every artifact location the folder's MLflow store holds for the study's experiment."""
    con = sqlite3.connect(folder / "mlruns" / "mlflow.db")
    try:
        (exp_id, location), = con.execute("SELECT experiment_id, artifact_location FROM experiments WHERE name = ?",
                                          (NAME,)).fetchall()
        return [location] + [u for (u,) in con.execute("SELECT artifact_uri FROM runs WHERE experiment_id = ?",
                                                       (exp_id,))]
    finally:
        con.close()


def test_a_moved_project_is_checked_in_one_line_and_resumes_there_and_a_copy_leaves_its_original_alone(
        tmp_path: Path) -> None:
    old, new, copy, copy2 = tmp_path / "project", tmp_path / "renamed", tmp_path / "copy", tmp_path / "copy2"
    first_run(old)
    shutil.copytree(old, copy)
    shutil.copytree(old, copy2)
    old.rename(new)

    rc, out, err = command(["check", "spec.yaml"], new)
    assert rc == 1, out + err
    assert f"keeps its runs' files in {old / 'mlruns'}, not beside its store (was this folder moved" in out, out
    assert "1 difference(s). Repair:" in out and "missing" not in out, out  # its trial folders were found here

    proc = orchestrate(["spec.yaml"], new)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (f"orchestrate: MLflow's experiment '{NAME}' kept its files in {old / 'mlruns'} (this folder was moved "
            f"or copied from there): it and its 3 run(s) now keep them in {new / 'mlruns'}") in proc.stdout, proc.stdout
    assert not old.exists(), "the resumed sweep wrote into the folder the project was moved from"
    assert all(loc.startswith((new / "mlruns" / NAME).as_uri() + "/") or loc == (new / "mlruns" / NAME).as_uri()
               for loc in locations(new)), locations(new)
    check_records(new, NAME, n_results=3)
    rc, out, err = command(["check", "spec.yaml"], new)
    assert rc == 0 and "agree" in out, out + err

    from mlflow.tracking import MlflowClient

    from conftest import child_runs

    client = MlflowClient(f"sqlite:///{new / 'mlruns' / 'mlflow.db'}")
    for run in child_runs(new, NAME):  # the first run's files too, where MLflow now looks
        assert {"trial.log", "result.json"} <= {Path(f.path).name for f in client.list_artifacts(run.info.run_id)}

    # the copies, made before the move: a finished study's command (nothing to run) and check
    # --repair point MLflow at their own folders and write nothing into the one they came from
    before = sorted(p.relative_to(new) for p in new.rglob("*"))
    kept = locations(new)
    moved = "MLflow's experiment '{}' kept its files in {} (this folder was moved or copied from there): it and its " \
            "3 run(s) now keep them in {}"
    proc = orchestrate(["spec.yaml", "--n-trials", "2"], copy)  # done: answered from the study's record
    assert proc.returncode == 0 and "nothing to run" in proc.stdout, proc.stdout + proc.stderr
    assert "orchestrate: " + moved.format(NAME, old / "mlruns", copy / "mlruns") in proc.stdout, proc.stdout
    rc, out, err = command(["check", "spec.yaml"], copy)
    assert rc == 0 and "agree" in out, out + err
    rc, out, err = command(["check", "spec.yaml", "--repair"], copy2)
    assert rc == 0 and "agree" in out, out + err
    assert "orchestrate check: " + moved.format(NAME, old / "mlruns", copy2 / "mlruns") in out, out
    assert not old.exists() and sorted(p.relative_to(new) for p in new.rglob("*")) == before and locations(new) == kept

    # a copy of the project as it is now, its original still there (the fault tour): check compares the
    # copy's own trial folders, and delete in the copy deletes the copy's, not the original's too
    third = new.parent / "third"
    shutil.copytree(new, third, symlinks=True)
    folders = sorted((third / "mlruns" / ".trials").glob("*/trial-*"))
    shutil.rmtree(folders[0])
    rc, out, err = command(["check", "spec.yaml"], third)
    assert rc == 1 and f"its folder {folders[0]} is missing" in out, out + err  # it said "agree", reading the original's
    rc, out, err = command(["check", "spec.yaml", "--repair"], third)
    assert rc == 0 and "1 trial folder(s) written back" in out and folders[0].is_dir(), out + err
    rc, out, err = command(["delete", "spec.yaml", "--yes"], third)
    assert rc == 0 and str(new) not in out, out + err
    assert sorted(p.relative_to(new) for p in new.rglob("*")) == before, "delete in a copy took the original's files"
