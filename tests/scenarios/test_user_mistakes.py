"""A user's mistakes never cost them their study (issue #13), through the installed command.

Each test runs ``orchestrate`` as a subprocess in a temporary project folder, with real trial
processes training tiny models on the CPU and a real SQLite study and MLflow store; what was
recorded is read back through Optuna's and MLflow's own APIs:

- an experiment whose loss is a vector: the smoke step stops the sweep in seconds with the
  experiment's own file:line (exit 2); with ``--no-check`` every trial ends ``error`` (exit 3 and
  one line saying so); once the file is fixed the same command runs those configurations again,
  and the errors used none of ``n_trials``;
- every configuration out of memory: a result, exit 0, one line that says nothing fit;
- a spec path and storage URLs with spaces: the printed Resume and Report commands work pasted
  into a shell; a timed-out configuration stays a result until ``--retry timeout`` runs it
  again, and the report shows that history.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import time
from pathlib import Path

import pytest

from conftest import ORCHESTRATE, ROOT, check_records, child_runs, load_study, orchestrate, trial_processes, write_spec

pytestmark = pytest.mark.slow

FIXTURES = ROOT / "tests" / "fixtures" / "experiments"
ENV = {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "tests"), os.environ.get("PYTHONPATH")])),
       # ^ fixtures.experiments.* for the probe and the trials
       "PYTHONDONTWRITEBYTECODE": "1"}  # an experiment edited within the second is never read stale


def run(args: list[str], cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return orchestrate(args, cwd, ENV, timeout)


def paste(command: str, cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """``command`` as a user pastes it into a shell, with the installed ``orchestrate`` on PATH."""
    path = f"{Path(ORCHESTRATE).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **ENV, "PATH": path})


def line_of(path: Path, text: str) -> int:
    return next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if text in ln)


def statuses(study: object) -> dict[int, str]:
    return {t.number: t.user_attrs.get("status") for t in study.get_trials()}  # type: ignore[attr-defined]


# -- a loss that is a vector ------------------------------------------------------------------------

VECTOR_SPEC = """
    name: vector_loss
    experiment: vector_loss
    device: cpu
    space:
      batch_size: [2, 4]
    search:
      sampler: grid
      n_trials: 2
    trial:
      warmup_steps: 1
      measure_steps: 1
      min_measure_s: 0.0
      timeout_s: 120
    """


def test_a_vector_loss_is_caught_before_the_sweep_then_its_errors_are_retried_once_fixed(tmp_path: Path) -> None:
    experiment = tmp_path / "vector_loss.py"
    experiment.write_text((FIXTURES / "nonscalar_loss.py").read_text())
    spec = write_spec(tmp_path, VECTOR_SPEC)
    loss_line = line_of(experiment, "def per_sample_loss")
    error = ("ValueError: the loss function returned a tensor of shape [2], not a scalar: reduce it over the batch "
             "(.mean() or .sum())")

    # 1. The smoke step: one line with the experiment's own error and file:line, before any trial.
    started = time.monotonic()
    proc = run([str(spec)], tmp_path)
    elapsed = time.monotonic() - started
    print(proc.stderr, end="")
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == "" and proc.stderr.count("\n") == 1
    assert proc.stderr.startswith(f"{spec}:2: experiment: vector_loss failed its smoke step (one training step "
                                  f"at the smallest batch, before any trial): {error} at vector_loss.py:{loss_line} ")
    assert "skip this check with --no-check" in proc.stderr
    assert elapsed < 90, elapsed  # seconds (a torch import and one step), not a sweep of failures
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml", "vector_loss.py"]  # no study
    # the fork server started at start-up, before the smoke step's answer, is gone
    assert trial_processes(str(tmp_path / "mlruns")) == []

    # 2. Without the check every trial ends `error`: exit 3 and one line on what failed and where.
    proc = run([str(spec), "--no-check"], tmp_path)
    print(proc.stdout + proc.stderr)
    assert proc.returncode == 3, proc.stderr
    study = load_study(tmp_path, "vector_loss")
    assert statuses(study) == {0: "error", 1: "error"}
    log = Path(study.trials[0].user_attrs["trial_dir"]) / "trial.log"
    assert error in log.read_text()
    assert [ln for ln in proc.stderr.splitlines() if ln.strip()] == [
        f"orchestrate: no configuration has a feasible result: 2 trial(s) failed in this run, most often with "
        f"status error (2x; the first: {error}); its log: {log}"]
    assert "0 of 2 trials have a result" in proc.stdout

    # 3. Fixed, the same command runs both configurations again: errors are not results and used
    #    none of n_trials (2), so both complete.
    fixed = experiment.read_text().replace('reduction="none")', 'reduction="mean")  # one number')
    assert fixed != experiment.read_text()
    experiment.write_text(fixed)
    proc = run([str(spec), "--no-check"], tmp_path)
    print(proc.stdout + proc.stderr)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].endswith(
        "0 of 2 trials done; 2 configuration(s) whose last trial ended 'error' will run again")
    assert "vector_loss: 2 of 2 trials have a result (2 ok)" in proc.stdout
    records = check_records(tmp_path, "vector_loss", n_results=2)
    study = records["study"]
    assert statuses(study) == {0: "error", 1: "error", 2: "ok", 3: "ok"}
    retried = {t.user_attrs["retry_of"]: (t.params, t.user_attrs["retry_reason"]) for t in study.trials[2:]}
    assert retried == {0: ({"batch_size": 2}, "error"), 1: ({"batch_size": 4}, "error")}
    for t in study.trials[2:]:  # the history is in MLflow too
        (mlflow_run,) = records["runs"][t.number]
        assert mlflow_run.data.tags["retry_of"] == str(t.user_attrs["retry_of"])
        assert mlflow_run.data.tags["retry_reason"] == "error"

    # 4. A third run has nothing left to do: the retry happens once, and results are final.
    proc = run([str(spec), "--no-check"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].endswith("2 of 2 trials done")
    assert len(load_study(tmp_path, "vector_loss").trials) == 4


# -- nothing fits ----------------------------------------------------------------------------------

NOTHING_FITS_SPEC = """
    name: nothing_fits
    experiment: experiments.bert
    device: cpu
    fixed:
      model: tiny
      seq_len: 64
      cpu_memory_limit_gib: 0.75   # batch 512 needs about 1.3 GiB here
    space:
      batch_size: [512, 1024]
    search:
      sampler: grid
    trial:
      warmup_steps: 1
      measure_steps: 1
      min_measure_s: 0.0
      timeout_s: 120
    """


def test_a_sweep_whose_configurations_all_run_out_of_memory_is_a_result(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, NOTHING_FITS_SPEC)

    proc = run([str(spec)], tmp_path)

    print(proc.stdout + proc.stderr)
    assert proc.returncode == 0, proc.stderr
    records = check_records(tmp_path, "nothing_fits", n_results=2)
    assert statuses(records["study"]) == {0: "oom", 1: "skipped"}  # a real CPU OOM, then predicted
    assert records["study"].trials[1].user_attrs["detail"] == (  # not "(or swapped)": it ran out of memory
        "predicted out of memory: needs at least as much memory as trial 0, which ran out of memory")
    assert "DefaultCPUAllocator" in records["study"].trials[0].user_attrs["detail"]
    nothing = [ln for ln in proc.stdout.splitlines() if ln.startswith("Nothing fit")]
    assert nothing == ["Nothing fit: every configuration ran out of memory (or swapped, or was predicted to). "
                       "Under the spec's cpu_memory_limit_gib: 0.75: where even the smallest ran out before its "
                       "first step (trial.log), the cap is below what the process needs to start; raise it, or "
                       "try smaller batches, a lower precision or activation checkpointing."]
    # the HF tour's cap of 0.05 GiB ran out while building the model: "the answer for this machine" was not
    assert "no configuration has a feasible result" not in proc.stderr


# -- spaces in paths, and --retry -----------------------------------------------------------------

SPACES_SPEC = """
    name: spaces
    experiment: fixtures.experiments.hangs_when_told
    device: cpu
    space:
      batch_size: [2, 4]
    search:
      sampler: grid
    trial:
      warmup_steps: 1
      measure_steps: 1
      min_measure_s: 0.0
      timeout_s: 12   # the trial's own time: its process's imports are not counted (launch/trial.py);
                      # a tiny model's build and two steps take under a second, more on a busy 2-core machine
    storage: sqlite:///my store/optuna.db
    tracking_uri: sqlite:///my store/mlflow.db
    """


def printed(out: str, label: str) -> str:
    """The command after ``label`` in the sweep's closing lines, without the note in parentheses."""
    line = next(ln for ln in out.splitlines() if ln.startswith(label))
    return line[len(label):].strip().split("   (")[0]


def test_printed_commands_paste_with_spaces_and_retry_timeout_runs_a_timed_out_configuration_again(
        tmp_path: Path) -> None:
    project = tmp_path / "my project"
    (project / "my store").mkdir(parents=True)
    spec = write_spec(project, SPACES_SPEC, name="my spec.yaml")
    (project / "hang-4").touch()  # batch 4 hangs: killed at timeout_s

    proc = run([str(spec.name)], project)

    print(proc.stdout + proc.stderr)
    assert proc.returncode == 0, proc.stderr  # batch 2 is a feasible result
    storage, tracking = f"sqlite:///{project}/my store/optuna.db", f"sqlite:///{project}/my store/mlflow.db"
    assert statuses(load_study(project, "spaces", storage)) == {0: "ok", 1: "timeout"}
    resume, report = printed(proc.stdout, "Resume:"), printed(proc.stdout, "Report:")
    # quoted: one word each; the stores the spec names are the spec's to give again (a flag without the
    # spec's password overrode its working URL: a scale-out tour)
    assert shlex.split(resume) == ["orchestrate", "my spec.yaml"]
    assert shlex.split(report) == ["orchestrate", "report", "my spec.yaml"]
    assert "'my spec.yaml'" in resume
    browse = next(ln for ln in proc.stdout.splitlines() if ln.startswith("Browse:"))
    assert shlex.split(browse.split("(or: ", 1)[1].rstrip(")")) == ["mlflow", "ui", "--backend-store-uri", tracking]
    (project / "hang-4").unlink()

    # Resume, pasted: a timeout is a result, not run again unless asked.
    proc = paste(resume, project)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].endswith("2 of 2 trials done")
    assert len(load_study(project, "spaces", storage).trials) == 2

    # Asked: the timed-out configuration runs again, and its new result replaces the old one.
    proc = paste(resume + " --retry timeout", project)
    print(proc.stdout + proc.stderr)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].endswith("1 of 2 trials done; 1 'timeout' result(s) will run again (--retry)")
    records = check_records(project, "spaces", n_results=2, storage=storage, tracking=tracking)
    study = records["study"]
    assert statuses(study) == {0: "ok", 1: "timeout", 2: "ok"}
    assert study.trials[2].params == {"batch_size": 4}
    assert (study.trials[2].user_attrs["retry_of"], study.trials[2].user_attrs["retry_reason"]) == (1, "timeout")
    assert sorted(t.number for t in records["results"]) == [0, 2]

    # Report, pasted: the table shows the history.
    proc = paste(report, project)
    print(proc.stdout + proc.stderr)
    assert proc.returncode == 0, proc.stderr
    rows = {int(m.group(1)): ln for ln in proc.stdout.splitlines() if (m := re.match(r"\s*(\d+)  \w", ln))}
    assert sorted(rows) == [0, 1, 2]
    assert rows[1].split()[1] == "timeout" and "run again as #2 (--retry timeout), no longer a result" in rows[1]
    assert rows[2].split()[1] == "ok" and "retry of #1 (it ended timeout)" in rows[2]
    assert "Results: 2 ok;" in proc.stdout
    assert len(child_runs(project, "spaces", tracking)) == 3


def test_a_working_folder_deleted_or_not_utf8_is_one_line(tmp_path: Path) -> None:
    """The fault tour: run from a folder deleted under the shell, a ``FileNotFoundError`` traceback;
    from one named in bytes that are not UTF-8, a ``UnicodeEncodeError`` traceback once MLflow was
    given a path. Both are one line, exit 2, before anything is made."""
    spec = write_spec(tmp_path, "name: x\nexperiment: experiments.mlp\nspace:\n  batch_size: [8]\n")
    gone = tmp_path / "gone"
    gone.mkdir()
    proc = subprocess.run(["bash", "-c", f"cd {gone} && rmdir {gone} && {ORCHESTRATE} {spec}"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr == (
        "orchestrate: the folder this command runs in was deleted (or moved); cd to one that exists\n"), proc.stderr
    latin = os.path.join(os.fsencode(tmp_path), b"caf\xe9")
    os.mkdir(latin)
    proc = subprocess.run([ORCHESTRATE, str(spec)], cwd=latin, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.endswith(
        "has a name that is not UTF-8, which MLflow cannot record in its paths; run from a folder whose name is "
        "UTF-8\n"), proc.stderr
    assert os.listdir(latin) == []


def test_a_sweep_run_from_above_its_spec_s_folder_says_where_its_study_is(tmp_path: Path) -> None:
    """The spec's folder holds its study (run there before); the same spec run from the folder
    above starts a new study in that folder's ./mlruns/, as the stores are found from the folder a
    command runs in. It says so, and what resumes the other one, in its header."""
    import optuna
    from optuna.distributions import CategoricalDistribution
    from optuna.trial import create_trial

    sub = tmp_path / "sub"
    sub.mkdir()
    write_spec(sub, """
        name: above
        experiment: experiments.mlp
        device: cpu
        fixed: {hidden_size: 8, batch_size: 8}
        trial: {warmup_steps: 1, measure_steps: 2, min_measure_s: 0.05}
    """)
    (sub / "mlruns").mkdir()
    study = optuna.create_study(study_name="above", storage=f"sqlite:///{sub}/mlruns/optuna.db")
    study.add_trial(create_trial(params={"x": 1}, distributions={"x": CategoricalDistribution([1])}, value=1.0))
    proc = orchestrate(["sub/spec.yaml", "--no-check"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ("  a new study in ./mlruns/, but the spec's own folder holds study 'above' with 1 trial (sub/mlruns/); the "
            "stores (./mlruns/) are found from the folder a command runs in: cd sub && orchestrate spec.yaml "
            "(resumes that one)\n") in proc.stdout, proc.stdout
    again = orchestrate(["sub/spec.yaml"], tmp_path)  # resumed here: the line is for a new study only
    assert again.returncode == 0 and "a new study" not in again.stdout, again.stdout


def test_a_study_with_no_feasible_result_names_its_retry_and_exits_3_each_time(tmp_path: Path) -> None:
    """A script tour: every trial timed out; the sweep exited 3, its printed ``Resume:`` then exited
    0 having run nothing, and neither named ``--retry timeout`` (``best`` did). A review: the run
    that measured only what cannot fit, after a timeout, exited 0 too. One rule now (no feasible
    result, and the study holds a failure), a ``Retry:`` line and exit 3 each time."""
    spec = write_spec(tmp_path, """
        name: none_fit
        experiment: experiments.faults
        device: cpu
        fixed: {batch_size: 4, fault_step: 1}
        space: {fault: [hang, oom_cpu]}
        search: {sampler: grid}
        trial: {timeout_s: 3}
    """)
    first = run([spec.name, "--no-check", "--n-trials", "1"], tmp_path)  # the hang: timeout
    assert first.returncode == 3 and "status timeout" in first.stderr, first.stdout + first.stderr
    retry = printed(first.stdout, "Retry:")
    assert shlex.split(retry) == ["orchestrate", spec.name, "--n-trials", "1", "--retry", "timeout"], first.stdout
    assert ("(runs the 1 timeout configuration(s) again; raise trial.timeout_s first if they need longer)"
            in first.stdout), first.stdout
    said = ("orchestrate: no configuration has a feasible result, and none failed in this run; to run the ones "
            "that ended timeout again: {}\n")
    rest = run([spec.name, "--no-check"], tmp_path)  # the OOM: nothing failed in this run, nothing fits
    retry = printed(rest.stdout, "Retry:")
    assert (rest.returncode, rest.stderr) == (3, said.format(retry)), rest.stdout + rest.stderr
    again = paste(printed(rest.stdout, "Resume:"), tmp_path)  # a finished study: answered from its record
    assert again.returncode == 3 and "nothing to run, so nothing was started" in again.stdout, again.stdout + again.stderr
    assert (printed(again.stdout, "Retry:"), again.stderr) == (retry, said.format(retry))
    assert [t.user_attrs["status"] for t in load_study(tmp_path, "none_fit").trials] == ["timeout", "oom"]
