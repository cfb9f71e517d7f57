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
    old, new, copy = tmp_path / "project", tmp_path / "renamed", tmp_path / "copy"
    first_run(old)
    shutil.copytree(old, copy)
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

    # the copy, made before the move: its repair points MLflow at its own folder, and its sweep
    # writes nothing into the folder it was copied from (here: the renamed one's files are untouched)
    before = sorted(p.relative_to(new) for p in new.rglob("*"))
    kept = locations(new)
    rc, out, err = command(["check", "spec.yaml", "--repair"], copy)
    assert rc == 0, out + err
    assert (f"orchestrate check: MLflow's experiment '{NAME}' kept its files in {old / 'mlruns'} (this folder "
            f"was moved or copied from there): it and its 3 run(s) now keep them in {copy / 'mlruns'}") in out, out
    assert "agree" in out, out
    proc = orchestrate(["spec.yaml"], copy)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "moved or copied" not in proc.stdout and not old.exists(), proc.stdout  # said once, by the repair
    check_records(copy, NAME, n_results=3)
    assert sorted(p.relative_to(new) for p in new.rglob("*")) == before and locations(new) == kept
