"""`orchestrate delete SPEC` on real stores: a study, its MLflow runs and its trial folders go,
after a question (or `--yes`); `check` flags the runs a study deleted another way left, and
`delete --leftovers` removes only those. SQLite, and a PostgreSQL study with an MLflow server."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import command, orchestrate, write_spec

SPEC = """
    name: gone
    experiment: experiments.mlp
    device: cpu
    fixed:
      hidden_size: 16
      num_layers: 1
    space:
      batch_size: [8]
    search:
      sampler: grid
    trial:
      warmup_steps: 1
      measure_steps: 2
      min_measure_s: 0.05
    """


def run(args: list[str], cwd: Path, answer: str | None = None, env: dict[str, str] | None = None) -> Any:
    """The installed command with ``answer`` on its stdin (None: stdin closed)."""
    return orchestrate(args, cwd, env, answer=answer or "")


def active_runs(tracking: str, name: str) -> list[Any]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking)
    exp = client.get_experiment_by_name(name)
    return [] if exp is None else client.search_runs([exp.experiment_id], max_results=1000)


def study_names(storage: str) -> list[str]:
    import optuna

    return [s.study_name for s in optuna.get_all_study_summaries(storage)]


@pytest.mark.slow
def test_check_flags_runs_of_no_study_and_delete_removes_them(project: Path) -> None:
    """The newcomer's path: the study deleted with Optuna's own command, the spec run again: the
    old runs stay beside the new ones; `check` says so, `delete --leftovers` removes them (asked
    first), `delete` then removes the rest."""
    import optuna

    spec = write_spec(project, SPEC)
    storage, tracking = f"sqlite:///{project}/mlruns/optuna.db", f"sqlite:///{project}/mlruns/mlflow.db"
    assert orchestrate([str(spec)], project).returncode == 0
    old_folders = set((project / "mlruns" / ".trials").iterdir())
    optuna.delete_study(study_name="gone", storage=storage)
    assert orchestrate([str(spec)], project).returncode == 0
    assert len(active_runs(tracking, "gone")) == 4  # two parents, two trial runs

    found = command(["check", str(spec)], project)
    assert found.returncode == 1
    (line,) = [ln for ln in found.stdout.splitlines() if "belong to no study" in ln]
    assert "2 MLflow run(s) belong to no study: parent run" in line and "its 1 trial run(s)" in line
    assert line.endswith(f"delete them: orchestrate delete {spec} --leftovers")
    assert "1 difference(s)." in found.stdout and "Repair:" not in found.stdout

    closed = command(["delete", str(spec), "--leftovers"], project)
    assert closed.returncode == 2 and "no answer (stdin is closed); nothing deleted" in closed.stderr
    declined = command(["delete", str(spec), "--leftovers"], project, answer="n\n")
    assert declined.returncode == 0 and declined.stdout.rstrip().endswith("Nothing deleted.")
    assert len(active_runs(tracking, "gone")) == 4
    said = command(["delete", str(spec), "--leftovers"], project, answer="y\n")
    assert said.returncode == 0, said.stderr
    assert "2 MLflow run(s) there that belong to no study" in said.stdout and "the study (" not in said.stdout
    assert len(active_runs(tracking, "gone")) == 2 and study_names(storage) == ["gone"]
    assert not any(f.exists() for f in old_folders)  # the deleted study's trial folders went with its runs
    agree = command(["check", str(spec)], project)
    assert agree.returncode == 0, agree.stdout

    gone = command(["delete", str(spec), "--yes"], project)
    assert gone.returncode == 0, gone.stderr
    assert "  the study (1 trial(s)) in" in gone.stdout and "its 2 MLflow run(s)" in gone.stdout
    assert active_runs(tracking, "gone") == [] and study_names(storage) == []
    assert list((project / "mlruns" / ".trials").iterdir()) == []
    again = command(["delete", str(spec), "--yes"], project)
    assert again.returncode == 0 and again.stdout.startswith("orchestrate delete: nothing to delete")
    assert orchestrate([str(spec)], project).returncode == 0  # the experiment stayed: the spec runs again


def test_delete_on_an_emptied_study_file_says_to_restore_it_first(project: Path) -> None:
    """A study file emptied (lost, say): its runs and folders are the study's results, and the
    sweep's own line says to restore the file. `delete` lists them as runs of no study, and now
    also says so before it asks (or, with --yes, deletes)."""
    spec = write_spec(project, SPEC)
    assert orchestrate([str(spec)], project).returncode == 0
    runs = project / "mlruns" / "mlflow.db"
    kept = runs.read_bytes()
    runs.write_bytes(b"")  # MLflow's file emptied: said, and not written (MLflow would make its schema there)
    declined = command(["delete", str(spec)], project, answer="n\n")
    assert declined.returncode == 0 and f"(MLflow's file {runs} is empty: it holds no run to delete" in declined.stdout
    assert "The experiment" not in declined.stdout and runs.stat().st_size == 0, declined.stdout
    runs.write_bytes(kept)
    db = project / "mlruns" / "optuna.db"
    db.write_bytes(b"")
    declined = command(["delete", str(spec)], project, answer="n\n")
    assert declined.returncode == 0 and declined.stdout.rstrip().endswith("Nothing deleted.")
    assert f"(The study's file {db} is empty: if it was lost or moved, not deleted on purpose, restore it " \
           "instead of deleting these: they are its results.)" in declined.stdout
    assert "  2 MLflow run(s) there whose study is not in its file (below)" in declined.stdout, declined.stdout
    assert "deleted another way" not in declined.stdout and list((project / "mlruns" / ".trials").iterdir())
    db.write_bytes(b"not a database\n" * 20)  # overwritten: one line with what to do, nothing deleted
    junk = command(["delete", str(spec), "--yes"], project)
    assert junk.returncode == 2 and junk.stdout == "" and len(junk.stderr.strip().splitlines()) == 1, junk.stderr
    assert f"{db} is not an SQLite database; restore it from a backup, or move it aside" in junk.stderr
    assert list((project / "mlruns" / ".trials").iterdir())
    db.unlink()
    gone = command(["delete", str(spec), "--yes"], project)
    assert gone.returncode == 0 and f"(The study's file {db} does not exist: if it was lost" in gone.stdout
    assert list((project / "mlruns" / ".trials").iterdir()) == []  # --yes: deleted, as asked


def test_a_study_being_run_is_not_deleted(project: Path) -> None:
    import optuna

    from orchestrator.store.study import study_lock

    spec = write_spec(project, SPEC)
    (project / "mlruns").mkdir()
    storage = f"sqlite:///{project}/mlruns/optuna.db"
    optuna.create_study(study_name="gone", storage=storage).set_user_attr("orchestrate.uid", "abc")
    with study_lock(storage, "gone"):
        proc = run(["delete", str(spec), "--yes"], project)
        repair = run(["check", str(spec), "--repair"], project)
    assert proc.returncode == 2 and "is being run by another orchestrate" in proc.stderr
    # a tour: the way forward was a sweep's, "or run several at once on a PostgreSQL study"
    assert proc.stderr.rstrip().endswith("delete changes a study only while no sweep runs it: run it again once "
                                         "that one has ended"), proc.stderr
    assert repair.returncode == 2 and repair.stderr.count("\n") == 1 and repair.stderr.rstrip().endswith(
        "check --repair changes a study only while no sweep runs it: run it again once that one has ended"), repair.stderr
    assert study_names(storage) == ["gone"]


@pytest.mark.slow
def test_a_postgresql_study_and_an_mlflow_server(project: Path, postgres: Any, mlflow_server: str) -> None:
    """A study in PostgreSQL (its password in the URL), runs on an MLflow server: all of it goes,
    and the password is never printed."""
    password = "dEl-pw-9q"
    storage = postgres.new_database_with_password("delete_study", password)
    spec = write_spec(project, SPEC.replace("name: gone", "name: gone_pg"))
    flags = ["--storage", storage, "--tracking-uri", mlflow_server]
    swept = orchestrate([str(spec), *flags], project)
    assert swept.returncode == 0, swept.stderr
    assert len(active_runs(mlflow_server, "gone_pg")) == 2
    proc = run(["delete", str(spec), *flags], project, answer="y\n")
    assert proc.returncode == 0, proc.stderr
    assert password not in proc.stdout + proc.stderr and storage.replace(password, "***") in proc.stdout
    assert active_runs(mlflow_server, "gone_pg") == [] and "gone_pg" not in study_names(storage)
    assert list((project / "mlruns" / ".trials").iterdir()) == []


@pytest.mark.parametrize("name, made", [
    # a trial with a fresh heartbeat: an orchestrator runs the study (perhaps on another host)
    ("live", "storage = optuna.storages.RDBStorage(sys.argv[1], heartbeat_interval=1, grace_period=2)\n"
             "study = optuna.create_study(study_name='live', storage=storage)\n"
             "trial = study.ask(); storage.record_heartbeat(trial._trial_id)\n"),
    # a scale-out tour: between one trial's result and the next trial's first heartbeat, a live
    # orchestrator looked idle, and `delete --yes` took the study from under it (it then stopped, 8
    # of its 12 trials never run): a RUNNING trial started within the grace period counts
    ("asked", "study = optuna.create_study(study_name='asked', storage=sys.argv[1])\nstudy.ask()\n"),
])
def test_a_server_study_being_run_is_not_deleted(project: Path, postgres_url: str, name: str, made: str) -> None:
    code = ("import sys, warnings, optuna; warnings.simplefilter('ignore')\n" + made
            + "study.set_user_attr('orchestrate.uid', 'u-' + study.study_name)\n")
    subprocess.run([sys.executable, "-c", code, postgres_url], check=True, timeout=60)
    spec = write_spec(project, SPEC.replace("name: gone", f"name: {name}"))
    proc = run(["delete", str(spec), "--storage", postgres_url, "--yes"], project)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "is being run now (1 trial(s) started or with a heartbeat in the last 60 s)" in proc.stderr
    assert name in study_names(postgres_url)


def test_a_role_without_privileges_is_told_the_servers_words_not_optunas_guess(project: Path, postgres: Any) -> None:
    """A scale-out tour: ``report``/``best``/``check``/``delete`` as a role that may not read the
    study's tables said Optuna's "An exception is raised during the commit ... e.g. exceeding max
    length"; the server's "permission denied" was under it."""
    url = postgres.new_database("noprivs")
    code = ("import sys, warnings, optuna; warnings.simplefilter('ignore')\n"
            "study = optuna.create_study(study_name='guarded', storage=sys.argv[1])\n"
            "study.set_user_attr('orchestrate.uid', 'u3')\n")
    subprocess.run([sys.executable, "-c", code, url], check=True, timeout=60)
    role = f"reader_{url.rsplit('_', 1)[1]}"
    postgres.create_role(role)
    spec = write_spec(project, SPEC.replace("name: gone", "name: guarded"))
    as_role = url.replace(f"//{postgres.user}@", f"//{role}@")
    for verb in ("report", "best"):
        proc = run([verb, str(spec), "--storage", as_role], project)
        assert proc.returncode == 2 and "permission denied" in proc.stderr, (verb, proc.stderr)
        assert "exceeding max length" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_a_study_run_from_two_folders_of_one_host_loses_both_folders_trial_folders(tmp_path: Path) -> None:
    """A scale-out tour: two orchestrators of one host in two folders (one per GPU, say) each kept
    their trials' folders under their own ``mlruns/.trials``; ``delete`` took the first trial's
    folder and left the other folder's behind."""
    stores = tmp_path / "stores"
    stores.mkdir()
    flags = ["--storage", f"sqlite:///{stores}/optuna.db", "--tracking-uri", f"sqlite:///{stores}/mlflow.db"]
    for name, n in (("a", "1"), ("b", "2")):
        (tmp_path / name).mkdir()
        spec = write_spec(tmp_path / name, SPEC.replace("batch_size: [8]", "batch_size: [8, 16]"))
        swept = run([str(spec), *flags, "--n-trials", n], tmp_path / name)
        assert swept.returncode == 0, swept.stdout + swept.stderr
    trials = [p for name in ("a", "b") for p in (tmp_path / name / "mlruns" / ".trials").glob("*/trial-*")]
    assert len(trials) == 2, trials  # one trial in each folder
    proc = run(["delete", str(tmp_path / "a" / "spec.yaml"), *flags, "--yes"], tmp_path / "a")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not any(p.exists() for p in trials), proc.stdout
