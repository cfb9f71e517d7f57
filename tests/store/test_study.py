"""A study that cannot be used as asked gets one clear line and a way forward: a spec edited
after its study started, a corrupt database, a file that is not a database."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import command, load_study, orchestrate, write_spec

pytestmark = pytest.mark.slow

SPEC = """
    name: edited
    experiment: experiments.faults
    device: cpu
    fixed: {batch_size: 4}
    space:
      hidden_size: [8, 16]
    search: {sampler: grid}
    trial: {warmup_steps: 1, measure_steps: 2, min_measure_s: 0.02, timeout_s: 60}
    """


EDITS = [
    (("hidden_size: [8, 16]", "hidden_size: [8, 16, 32]"), "space: stored"),
    (("fixed: {batch_size: 4}", "fixed: {batch_size: 8}"), "fixed: stored"),
    (("search: {sampler: grid}", "search: {sampler: grid}\nobjective: {metric: samples_per_s, direction: minimize}"),
     "objective"),  # "objective: stored ..." before the probe; "objective directions" after it
    # a tour: a memory budget added to a started study was taken; the old trials kept their feasibility and
    # the best reported broke the budget
    (("search: {sampler: grid}", "search: {sampler: grid}\nobjective: {metric: samples_per_s, constraints: "
      "{peak_memory_gib: {max: 0.01}}}"), "constraints: stored {}, spec {\"peak_memory_gib\": {\"max\": 0.01}}"),
]


def test_a_spec_edited_after_its_study_started_is_refused(project: Path) -> None:
    """Each edit, one at a time, to the spec of one finished study (one sweep for the three)."""
    spec = write_spec(project, SPEC)
    assert orchestrate([str(spec)], project).returncode == 0
    original = spec.read_text()
    for edit, what in EDITS:
        spec.write_text(original.replace(*edit))
        proc = orchestrate([str(spec)], project)
        assert proc.returncode == 2, (what, proc.stdout, proc.stderr)
        err = proc.stderr.strip()
        assert len(err.splitlines()) == 1 and "Traceback" not in err
        assert "created from a different spec" in err and what in err
        assert "give this spec a new `name:`" in err and f"start over, delete the old study with its MLflow runs and trial folders: orchestrate delete {spec}" in err
        assert len(load_study(project, "edited").get_trials()) == 2  # nothing mixed in
        dry = orchestrate([str(spec), "--dry-run"], project)  # a tour: "a run resumes it", exit 0
        assert dry.returncode == 2 and "created from a different spec" in dry.stderr and what in dry.stderr, dry


def test_a_study_with_no_result_yet_takes_the_spec_as_it_is_now(project: Path) -> None:
    """A script tour: every trial said "set samples_per_step in the spec"; the spec given one was
    then refused as "created from a different spec", the study holding no result to protect."""
    spec = write_spec(project, SPEC.replace("fixed: {batch_size: 4}", "fixed: {batch_size: 4, fault: exception}"))
    first = orchestrate([str(spec)], project)
    assert first.returncode != 2 and "0 of 2 trials have a result" in first.stdout, first.stdout + first.stderr
    spec.write_text(spec.read_text().replace("fault: exception", "fault: none"))
    dry = orchestrate([str(spec), "--dry-run"], project)
    assert dry.returncode == 0 and "the study exists with 2 trials and no result yet: a run takes the spec as it " \
        "is now (fixed: stored" in dry.stdout, dry.stdout + dry.stderr
    proc = orchestrate([str(spec)], project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "orchestrate: study 'edited' has no result yet: it takes the spec as it is now (fixed: stored" in proc.stderr
    assert "2 of 2 trials have a result (2 ok); trial time" in proc.stdout, proc.stdout  # the errors measured since


def test_a_study_with_no_result_refuses_values_optuna_would_refuse_and_runs_no_configuration_the_edit_removed(
        project: Path) -> None:
    """A tour: a study whose only trials ended ``error`` (or were cut off), then its spec edited.
    A list's values changed: the edit was taken, and every run after it ended in Optuna's traceback
    ("CategoricalDistribution does not support dynamic value space", or "'16' not in (32, 64)" for
    the configuration queued again), each leaving a trial RUNNING. A dimension made fixed: the
    configurations queued again named one the spec no longer holds ("runs #0 again")."""
    spec = write_spec(project, SPEC.replace("fixed: {batch_size: 4}", "fixed: {batch_size: 4, fault: exception}"))
    assert "0 of 2 trials have a result" in orchestrate([str(spec)], project).stdout
    original = spec.read_text()
    spec.write_text(original.replace("hidden_size: [8, 16]", "hidden_size: [16, 32]").replace("exception", "none"))
    for args in ([str(spec)], [str(spec), "--dry-run"]):
        proc = orchestrate(args, project)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert "; space: stored {\"hidden_size\": [8, 16]}, spec {\"hidden_size\": [16, 32]}; trial 0 was given " \
               "hidden_size from [8, 16], and Optuna keeps a parameter's values for the study's life). To keep both, " \
               "give this spec a new `name:`" in proc.stderr, (args, proc.stderr)
    report = command(["report", str(spec)], project)  # read with the spec it ran, said
    assert report.returncode == 0 and "read with the spec it ran" in report.stderr, report.stderr
    assert re.search(r"\n   0  error +8 ", report.stdout), report.stdout
    assert [t.state.name for t in load_study(project, "edited").get_trials()] == ["FAIL", "FAIL"]  # untouched
    spec.write_text(original.replace("fault: exception", "fault: none, hidden_size: 8").replace(
        "hidden_size: [8, 16]", "lr: [0.001, 0.01]"))
    proc = orchestrate([str(spec)], project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 of 2 trials done\n  not run again: hidden_size=8; hidden_size=16 (2 configurations cut off or failed " \
           "before the spec's edit, which the spec no longer holds)" in proc.stdout, proc.stdout
    assert "edited: 2 of 2 trials have a result (2 ok); trial time" in proc.stdout, proc.stdout  # no "2 ended 'error'"
    assert "will run again" not in proc.stdout and "runs #" not in proc.stdout, proc.stdout
    assert sorted(t.params["lr"] for t in load_study(project, "edited").get_trials() if t.state.name == "COMPLETE") \
        == [0.001, 0.01]
    report = command(["report", str(spec)], project).stdout  # said "runs again on the next run"
    assert "runs again" not in report and report.count("; not run again: the spec no longer holds its configuration"
                                                       ) == 2, report


def test_a_file_that_is_not_a_database_is_refused_untouched(project: Path) -> None:
    (project / "mlruns").mkdir()
    junk = project / "mlruns" / "optuna.db"
    junk.write_bytes(b"these are not the bytes of an SQLite database\n" * 10)
    spec = write_spec(project, SPEC)
    proc = orchestrate([str(spec)], project)
    assert proc.returncode == 2, proc.stderr
    assert "is not an SQLite database" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    # the spec names no storage: the store's own line, not a spec line and field the file lacks
    assert proc.stderr.startswith("orchestrate: storage sqlite:///mlruns/optuna.db: mlruns/optuna.db is not"), proc.stderr
    assert junk.read_bytes().startswith(b"these are not")
    spec.write_text(spec.read_text() + "storage: sqlite:///mlruns/optuna.db\n")  # named: its line
    proc = orchestrate([str(spec)], project)
    assert proc.returncode == 2 and proc.stderr.startswith(f"{spec}:9: storage: mlruns/optuna.db is not"), proc.stderr


def test_a_corrupt_database_gets_a_way_forward(project: Path) -> None:
    spec = write_spec(project, SPEC)
    assert orchestrate([str(spec)], project).returncode == 0
    db = project / "mlruns" / "optuna.db"
    data = bytearray(db.read_bytes())
    data[100:4096] = b"\xff" * (4096 - 100)  # keep the header, wreck the schema page
    db.write_bytes(bytes(data))
    proc = orchestrate([str(spec)], project)
    assert proc.returncode == 2, proc.stderr
    err = proc.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "corrupt" in err and "move it aside" in err


def test_a_study_deleted_and_started_again_gets_its_own_mlflow_records(project: Path) -> None:
    import optuna

    from conftest import child_runs, parent_runs

    spec = write_spec(project, SPEC)
    assert orchestrate([str(spec)], project).returncode == 0
    (old_parent,) = parent_runs(project, "edited")
    old_children = {r.info.run_id: r.data.tags["status"] for r in child_runs(project, "edited")}
    optuna.delete_study(study_name="edited", storage=f"sqlite:///{project}/mlruns/optuna.db")
    assert orchestrate([str(spec)], project).returncode == 0  # deleted on purpose: not refused
    parents = parent_runs(project, "edited")
    assert len(parents) == 2 and old_parent.info.run_id in {p.info.run_id for p in parents}
    children = child_runs(project, "edited")
    assert len(children) == 4
    for run in children:  # the first study's runs are untouched
        if run.info.run_id in old_children:
            assert run.data.tags["status"] == old_children[run.info.run_id]
            assert run.data.tags["mlflow.parentRunId"] == old_parent.info.run_id
    assert len(list((project / "mlruns" / ".trials").glob("edited-*"))) == 2


def test_a_lost_or_emptied_study_file_is_not_replaced_silently(project: Path) -> None:
    """The issue's 0-byte optuna.db, taken as a new study: every trial measured again. Now refused
    in one line that says what was found, the file missing too; ``--new-study`` starts one."""
    from conftest import child_runs

    spec = write_spec(project, SPEC)
    assert orchestrate([str(spec)], project).returncode == 0
    db = project / "mlruns" / "optuna.db"
    for why, lose in (("the file is empty", lambda: db.write_bytes(b"")), ("the file does not exist", db.unlink)):
        lose()
        refused = orchestrate([str(spec)], project)
        assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        assert f"study 'edited' is missing from sqlite:///{db} ({why})" in refused.stderr
        assert "holds 2 trial run(s)" in refused.stderr and "holds 2 trial folder(s)" in refused.stderr
        assert "--new-study" in refused.stderr and not (db.exists() and db.stat().st_size)  # nothing made
    fresh = project / "fresh"  # a new, empty tracking location: the folders alone say what was left
    fresh.mkdir()
    refused = orchestrate([str(spec), "--tracking-uri", f"sqlite:///{fresh}/mlflow.db"], project)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "holds 2 trial folder(s)" in refused.stderr and "trial run(s)" not in refused.stderr
    assert list(fresh.iterdir()) == [] and not db.exists()  # the tour's 900 KB mlflow.db made before the refusal
    assert orchestrate([str(spec), "--new-study"], project).returncode == 0
    assert len(child_runs(project, "edited")) == 4  # the earlier runs kept beside the new study's
