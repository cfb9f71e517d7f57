"""`orchestrate report` and `orchestrate best` on real sweeps, read back through Optuna and MLflow.

One small sweep (6 trials of the tiny BERT on the CPU, two of which run out of memory under a
1 GiB limit) is run once per session and shared with the browser test; a second, two-trial
multi-objective sweep is run half, reported, then finished with `--export`. A report draws plots
(and opens MLflow) only with `--plots` or `--out`; without, neither it nor `best` imports torch,
MLflow or (on SQLite) Optuna. A password in a storage or tracking URL is never printed.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import struct
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from conftest import command, load_study, orchestrate, parent_runs, write_spec

SPEC = """
    name: tiny_report
    experiment: experiments.bert
    device: auto
    fixed:
      model: tiny
      seq_len: 32
      cpu_memory_limit_gib: 1.0
    space:
      batch_size: [8, 16, 4096]
      dtype: [float32, bfloat16]
      mps_high_watermark_ratio: [1.0, 1.7]
    search:
      sampler: grid
    trial:
      warmup_steps: 1
      measure_steps: 3
      min_measure_s: 0.2
      timeout_s: 120
    """
PLOTS = ["throughput.png", "memory.png", "oom_map.png", "history.png"]


def finished_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project folder holding the finished sweep; run once per session, shared by test modules."""
    project = tmp_path_factory.getbasetemp() / "finished_sweep"
    if (project / "done").exists():
        return project
    project.mkdir(exist_ok=True)
    spec = write_spec(project, SPEC)
    proc = orchestrate([str(spec)], project)
    assert proc.returncode == 0, proc.stderr
    (project / "done").write_text(proc.stdout)
    return project


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return finished_sweep(tmp_path_factory)


@pytest.fixture(scope="module")
def text_report(project: Path) -> Any:
    proc = command(["report", "spec.yaml", "--plots"], project)
    assert proc.returncode == 0, proc.stderr
    return proc


def results(project: Path, name: str = "tiny_report") -> list[Any]:
    from orchestrator.store.records import result_trials

    return result_trials(load_study(project, name))


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


@pytest.mark.slow
def test_report_prints_every_trial_with_its_status_and_the_best(project: Path, text_report: Any) -> None:
    out = text_report.stdout
    trials = results(project)
    assert len(trials) == 6
    for t in trials:
        row = next(ln for ln in out.splitlines() if ln.startswith(f"{t.number:>4d}  "))
        assert row.split()[1] == t.user_attrs["status"]
        assert str(t.params["batch_size"]) in row and t.params["dtype"] in row
        if t.user_attrs["status"] == "ok":
            assert f"{t.user_attrs['metrics']['samples_per_s']:,.1f}" in row
    counts = Counter(t.user_attrs["status"] for t in trials)
    assert counts["ok"] == 4 and counts["oom"] >= 1  # batch 4096 runs out of memory (or is predicted to)
    order = ("ok", "oom", "swapped", "skipped", "timeout", "crashed", "error", "diverged")
    assert "Results: " + ", ".join(f"{counts[s]} {s}" for s in order if counts[s]) + ";" in out
    best = max((t for t in trials if t.user_attrs["status"] == "ok"), key=lambda t: t.values[0])
    assert f"Best: trial {best.number}: " in out
    assert f"Plots:   {project / 'mlruns' / 'reports' / 'tiny_report'}/" in out
    assert "plots logged to parent run" in out


@pytest.mark.slow
def test_report_json_matches_optuna(project: Path, text_report: Any) -> None:
    proc = orchestrate(["report", "spec.yaml", "--format", "json", "--out", "plots"], project)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)  # the whole of stdout is one JSON document
    trials = results(project)
    counts = Counter(t.user_attrs["status"] for t in trials)
    assert {k: v for k, v in doc["counts"].items() if v} == dict(counts)
    assert set(doc["counts"]) == {"ok", "oom", "swapped", "skipped", "timeout", "crashed", "diverged"}
    assert doc["comparison"] is None  # the device is not swept, and no --compare
    assert [r["number"] for r in doc["trials"]] == [t.number for t in trials]
    assert [r["status"] for r in doc["trials"]] == [t.user_attrs["status"] for t in trials]
    best = max((t for t in trials if t.values), key=lambda t: t.values[0])
    assert doc["best"]["number"] == best.number and doc["best"]["values"] == best.values
    assert doc["pareto"] is None
    assert doc["total_time_s"] == pytest.approx(sum(t.user_attrs["duration_s"] for t in trials), abs=1e-2)
    assert doc["plots_dir"] == str(project / "plots")
    assert sorted(Path(p).name for p in doc["plots"]) == sorted(PLOTS)


@pytest.mark.slow
def test_plots_are_readable_pngs(project: Path, text_report: Any) -> None:
    folder = project / "mlruns" / "reports" / "tiny_report"
    assert sorted(p.name for p in folder.iterdir()) == sorted(PLOTS)
    for name in PLOTS:
        width, height = png_size(folder / name)
        assert width >= 600 and height >= 400, (name, width, height)
        assert (folder / name).stat().st_size > 20_000, name  # not an empty canvas


@pytest.mark.slow
def test_the_data_behind_each_plot_is_the_study(project: Path) -> None:
    from orchestrator.report.plotdata import choose_layout, history_series, memory_series, oom_grid, throughput_series

    trials = results(project)
    by_config = {(t.params["batch_size"], t.params["dtype"]): t for t in trials}
    layout = choose_layout(trials)
    assert (layout.x, layout.groups, layout.folded, layout.rows) == ("batch_size", ("dtype",), (), "dtype")

    for series, metric in ((throughput_series(trials), "samples_per_s"), (memory_series(trials), "peak_memory_gib")):
        assert sorted(series) == ["bfloat16", "float32"]
        for dtype, points in series.items():
            assert [x for x, _, _ in points] == [8, 16, 4096]
            for batch, value, status in points:
                t = by_config[(batch, dtype)]
                assert status == t.user_attrs["status"]
                assert value == (t.user_attrs["metrics"][metric] if status == "ok" else None)
        assert [s for _, _, s in series["float32"]] == ["ok", "ok", "oom"]  # the first 4096 trial really ran

    grid = oom_grid(trials)
    assert grid["xs"] == [8, 16, 4096] and grid["rows"] == ["float32", "bfloat16"]
    for r, dtype in enumerate(grid["rows"]):
        for c, batch in enumerate(grid["xs"]):
            t = by_config[(batch, dtype)]
            if t.user_attrs["status"] == "ok":
                assert grid["values"][r][c] == t.values[0] and grid["notes"][r][c] == ""
            else:
                assert grid["values"][r][c] is None
                assert grid["notes"][r][c] == {"oom": "OOM", "skipped": "skipped"}[t.user_attrs["status"]]

    history = history_series(trials, "maximize")
    assert [n for n, *_ in history] == sorted(t.number for t in trials)
    running = None
    for number, value, best, status, again in history:
        t = next(t for t in trials if t.number == number)
        assert value == (t.values[0] if t.values else None) and status == t.user_attrs["status"] and not again
        if value is not None:
            running = value if running is None else max(running, value)
        assert best == running


@pytest.mark.slow
def test_plots_are_logged_on_the_parent_run(project: Path, text_report: Any) -> None:
    from mlflow.tracking import MlflowClient

    (parent,) = parent_runs(project, "tiny_report")
    client = MlflowClient(f"sqlite:///{project}/mlruns/mlflow.db")
    logged = sorted(Path(a.path).name for a in client.list_artifacts(parent.info.run_id, "report"))
    assert logged == sorted(PLOTS)
    note = client.get_run(parent.info.run_id).data.tags["mlflow.note.content"]
    assert "Best:" in note and note.count("#### Top configurations") == 1  # once, however often report runs
    assert "| trial | batch_size | dtype | samples/s | peak GiB |" in note


@pytest.mark.slow
def test_best_writes_the_best_trials_parameters_as_yaml(project: Path) -> None:
    import yaml

    from orchestrator.search.space import make_plan, trial_params
    from orchestrator.spec.load import load_spec

    proc = command(["best", "spec.yaml", "-o", "out/best.yaml"], project)
    assert proc.returncode == 0, proc.stderr
    best = max((t for t in results(project) if t.values), key=lambda t: t.values[0])
    text = (project / "out" / "best.yaml").read_text()
    loaded = yaml.safe_load(text)
    assert loaded == trial_params(make_plan(load_spec(project / "spec.yaml"), "cpu"), best.params)
    assert loaded.items() >= best.params.items()
    assert loaded["model"] == "tiny" and loaded["device"] == "cpu" and loaded["cpu_memory_limit_gib"] == 1.0
    assert text.startswith(f"# tiny_report trial {best.number}: {best.values[0]:,.1f} samples/s, peak ")
    assert proc.stdout.strip().startswith("Best configuration written to out/best.yaml: tiny_report trial")

    plain = orchestrate(["best", "spec.yaml"], project)  # no -o: the YAML on stdout, the summary on stderr
    assert plain.returncode == 0 and yaml.safe_load(plain.stdout) == loaded
    assert f"tiny_report trial {best.number}" in plain.stderr


MODULES = ("import sys; from orchestrator.cli import main; code = main(sys.argv[1:]); "
           "print('MODULES', code, ' '.join(sorted({m.split('.')[0] for m in sys.modules} "
           "& {'torch', 'mlflow', 'optuna', 'matplotlib'})), file=sys.stderr)")


@pytest.mark.slow
@pytest.mark.parametrize("args", [["best", "spec.yaml"], ["report", "spec.yaml", "--format", "json"],
                                  ["report", "spec.yaml", "--format", "text"]], ids=lambda a: " ".join(a[:1] + a[2:]))
def test_best_and_report_import_no_torch_mlflow_optuna_or_matplotlib(project: Path, args: list[str]) -> None:
    """The commands as the installed ``orchestrate`` runs them (``orchestrator.cli.main``), in a
    fresh interpreter, then what it had imported: a report without plots needs none of them."""
    proc = subprocess.run([sys.executable, "-c", MODULES, *args], cwd=project, capture_output=True, text=True,
                          timeout=120)
    tag, code, *modules = proc.stderr.strip().splitlines()[-1].split(" ")
    assert tag == "MODULES" and code == "0", proc.stderr
    assert modules == [], modules
    trials = results(project)
    if args[0] == "best":
        best = max((t for t in trials if t.values), key=lambda t: t.values[0])
        assert proc.stdout.startswith(f"# tiny_report trial {best.number}: ")
    elif "json" in args:
        doc = json.loads(proc.stdout)
        assert [r["number"] for r in doc["trials"]] == [t.number for t in trials]
        assert (doc["plots"], doc["plots_dir"], doc["mlflow"]) == ([], None, None)
        assert doc["storage"] == f"sqlite:///{project}/mlruns/optuna.db"
    else:
        assert "Results: 4 ok, " in proc.stdout
        assert proc.stdout.rstrip().endswith("Plots:   drawn in mlruns/reports/tiny_report/ and logged on the "
                                             "study's MLflow parent run by: orchestrate report spec.yaml --plots")


def test_report_and_best_on_a_missing_study_say_one_line_and_create_nothing(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, SPEC)
    for name in ("report", "best"):
        proc = orchestrate([name, str(spec)], tmp_path)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.count("\n") == 1 and proc.stdout == ""
        assert f"no study 'tiny_report' in sqlite:///{tmp_path}/mlruns/optuna.db; run `orchestrate {spec}` first" \
            in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]


@pytest.mark.parametrize("edit, what", [
    (("      batch_size: [8, 16, 4096]\n", "      batch_size: [8, 16, 32, 4096]\n"), "space: stored"),
    (("      model: tiny\n", "      model: small\n"), "fixed: stored"),
    (("    search:\n", "    objective: {metric: step_time_ms_p50, direction: minimize}\n    search:\n"), "objective: stored"),
], ids=["space", "fixed", "objective"])
def test_report_and_best_read_a_study_with_the_spec_it_ran_where_the_spec_was_edited_since(
        project: Path, edit: tuple, what: str) -> None:
    """A report tour: the objective changed to a step time ranked the stored samples/s as if they were
    step times (the slowest trial first, and ``best`` wrote it); a changed fixed value was written
    beside trials that ran with the old one; added values read "6 of 3 trials". Then report and
    best refused each edit as the sweep does, with "delete the old study" as a way on, to a user
    who wanted to see the results before running the edited spec. They now read the study with
    the spec it ran (its stored fingerprint), said in one line: as the unedited spec reads it."""
    write_spec(project, SPEC.replace(*edit), name="edited.yaml")
    for name in ("report", "best"):
        proc = command([name, "edited.yaml"], project)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        said = proc.stderr.splitlines()[0]
        assert said.startswith(f"orchestrate: the spec was edited since study 'tiny_report' ran ({what}") and \
            said.endswith("): read with the spec it ran; to run the edited spec, give it a new `name:`"), said
        assert proc.stdout.replace("edited.yaml", "spec.yaml") == command([name, "spec.yaml"], project).stdout
    sweep = command(["edited.yaml", "--dry-run"], project)  # running it is still refused, the same way
    assert sweep.returncode == 2 and f"was created from a different spec ({what}" in sweep.stderr, sweep.stderr


def test_a_study_whose_spec_cannot_be_rebuilt_refuses_an_edited_spec_as_before(tmp_path: Path) -> None:
    """Where the stored fingerprint does not rebuild to itself (one an older version wrote without a
    part), ``report`` on an edited spec refuses as the sweep does rather than guess."""
    import optuna

    from orchestrator.report.asran import read_as_ran
    from orchestrator.spec.load import load_spec
    from orchestrator.store.studyread import read_study

    spec = load_spec(write_spec(tmp_path, SPEC))
    url = f"sqlite:///{tmp_path}/optuna.db"
    study = optuna.create_study(study_name="tiny_report", storage=url)
    study.set_user_attr("orchestrate.fingerprint", {"experiment": "experiments.bert", "device": "cpu", "space": {}})
    study.add_trial(optuna.trial.create_trial(value=1.0))
    with pytest.raises(Exception) as refused:
        read_as_ran(spec, read_study(url, "tiny_report"))
    assert "was created from a different spec (fixed: stored null, spec {" in str(refused.value)


@pytest.mark.slow
def test_plots_that_cannot_be_written_are_one_line_and_leave_no_half_written_file(project: Path,
                                                                                   tmp_path: Path) -> None:
    """A path under a file, a real read-only mount, a real full tmpfs (skipped where nothing can
    be mounted): one line naming the folder, exit 2 where another folder is needed, 75 where
    freeing space is enough."""
    (tmp_path / "afile").write_text("")
    cases = [(tmp_path / "afile" / "plots", 2, "Not a directory")]
    mounts = []
    read_only, small = tmp_path / "ro", tmp_path / "small"
    read_only.mkdir()
    small.mkdir()
    try:
        if subprocess.run(["mount", "--bind", str(read_only), str(read_only)], capture_output=True).returncode == 0:
            mounts.append(read_only)
            if subprocess.run(["mount", "-o", "remount,bind,ro", str(read_only)], capture_output=True).returncode == 0:
                cases.append((read_only / "plots", 2, "Read-only file system"))
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(small)],
                          capture_output=True).returncode == 0:
            mounts.append(small)
            fd = os.open(small / "filler", os.O_WRONLY | os.O_CREAT)
            try:
                while True:
                    os.write(fd, b"\0" * 4096)
            except OSError:
                pass
            finally:
                os.close(fd)
            cases.append((small / "plots", 75, "No space left on device"))
        for folder, code, words in cases:
            proc = command(["report", "spec.yaml", "--out", str(folder)], project)
            lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
            assert proc.returncode == code and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
            assert lines[0].startswith(f"orchestrate: cannot write the plots in {folder}: {words}"), lines
            assert not folder.is_dir() or not list(folder.glob("*.png"))  # no half-written plot
    finally:
        for m in mounts:
            subprocess.run(["umount", "-l", str(m)], capture_output=True)
    if len(cases) < 3:  # said, not passed in silence: only the path under a file ran
        pytest.skip("cannot mount here (needs root or CAP_SYS_ADMIN): the read-only and full-disk cases did not run")


def test_report_usage_error_is_one_line(tmp_path: Path) -> None:
    proc = command(["report", "spec.yaml", "--format", "xml"], tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "invalid choice: 'xml'" in proc.stderr


MULTI = SPEC.replace("tiny_report", "tiny_pareto").replace("[8, 16, 4096]", "[8, 16]") \
    .replace("[float32, bfloat16]", "[float32]").replace("    search:", """    objective:
      metrics: {samples_per_s: maximize, peak_memory_gib: minimize}
    search:""")


@pytest.mark.slow
def test_half_finished_then_multi_objective_study(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, MULTI)
    assert orchestrate([str(spec), "--n-trials", "1"], tmp_path).returncode == 0
    half = command(["report", str(spec)], tmp_path)
    assert half.returncode == 0, half.stderr
    assert "tiny_pareto: 1 of 2 trials have a result" in half.stdout and "Pareto front:" in half.stdout

    done = orchestrate([str(spec), "--export", "best.yaml"], tmp_path)  # the run's own --export
    assert done.returncode == 0, done.stderr
    assert "Best configuration written to best.yaml: tiny_pareto trial" in done.stdout
    proc = command(["report", str(spec), "--format", "json", "--plots"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    from orchestrator.spec.load import load_spec
    from orchestrator.store.records import best_trials

    front = best_trials(load_study(tmp_path, "tiny_pareto"), load_spec(spec))
    assert [r["number"] for r in doc["pareto"]] == [t.number for t in front] and front
    assert "pareto.png" in [Path(p).name for p in doc["plots"]]
    width, height = png_size(tmp_path / "mlruns" / "reports" / "tiny_pareto" / "pareto.png")
    assert width >= 600 and height >= 400


# -- the pure data functions on statuses a small CPU sweep does not produce ----------------------

def fake(number: int, batch: int, dtype: str, status: str, sps: float | None = None) -> Any:
    from optuna.distributions import CategoricalDistribution
    from optuna.trial import TrialState, create_trial

    params = {"batch_size": batch, "dtype": dtype}
    dists = {"batch_size": CategoricalDistribution([8, 64, 512]), "dtype": CategoricalDistribution(["float32", "bfloat16"])}
    attrs = {"status": status, "metrics": {"samples_per_s": sps, "peak_memory_gib": 1.0} if sps else {}}
    if sps is not None:
        t = create_trial(params=params, distributions=dists, value=sps, user_attrs=attrs)
    else:
        from orchestrator.outcome import INFEASIBLE  # the state records.tell gives each status

        t = create_trial(params=params, distributions=dists, state=TrialState.PRUNED if status in INFEASIBLE
                         else TrialState.FAIL, user_attrs=attrs)
    t.number = number
    return t


@pytest.mark.parametrize("statuses, note", [
    (["oom"], "OOM"),
    (["skipped"], "skipped"),
    (["crashed"], "failed"),
    (["timeout", "oom"], "OOM"),  # the out-of-memory is what the map is about
    (["ok", "oom"], "1/2 OOM"),
    (["ok", "skipped"], "1/2 OOM"),
    (["ok", "error"], ""),
    (["swapped"], "swaps"),         # fits only by swapping: beyond the boundary, like an OOM
    (["swapped", "oom"], "OOM"),
    (["ok", "swapped"], "1/2 OOM"),
])
def test_boundary_map_cell_notes(statuses: list[str], note: str) -> None:
    from orchestrator.report.plotdata import oom_grid, throughput_series

    cell = [fake(i, 512, "float32", s, 100.0 + i if s == "ok" else None) for i, s in enumerate(statuses)]
    trials = [fake(10, 8, "float32", "ok", 50.0), fake(11, 8, "bfloat16", "ok", 60.0)] + cell
    grid = oom_grid(trials)
    assert grid["xs"] == [8, 512] and grid["rows"] == ["float32", "bfloat16"]
    assert grid["notes"][0][1] == note and grid["notes"][1][1] == "not run"  # was "none", read as "nothing fits"
    point = throughput_series(trials)["float32"][-1]  # the point stands for the fastest, else the worst failure
    ok = [t for t in cell if t.user_attrs["status"] == "ok"]
    if ok:
        assert point == (512, ok[0].values[0], "ok") and grid["values"][0][1] == ok[0].values[0]
    else:
        assert point == (512, None, {"OOM": "oom", "skipped": "skipped", "failed": "crashed", "swaps": "swapped"}[note])
        assert grid["values"][0][1] is None


def test_a_running_trial_no_sweep_runs_is_said_cut_off_as_check_says(tmp_path: Path) -> None:
    """A tour: after a SIGKILL, ``report`` said "running" with no note, where ``check`` said "RUNNING
    in the study, but no orchestrator is running it (cut off)": a user reads a sweep still going."""
    import fcntl

    import optuna

    spec = write_spec(tmp_path, SPEC)
    (tmp_path / "mlruns").mkdir()
    study = optuna.create_study(study_name="tiny_report", storage=f"sqlite:///{tmp_path}/mlruns/optuna.db",
                                directions=["maximize"])
    study.add_trial(fake(0, 8, "float32", "ok", 50.0))
    study.ask()  # trial 1: RUNNING, its orchestrator killed
    proc = command(["report", str(spec)], tmp_path)
    row = next(ln for ln in proc.stdout.splitlines() if re.match(r"^\s+1  running", ln))
    assert row.endswith("cut off: no orchestrator is running it; the next run records it interrupted and runs it "
                        "again"), row
    from orchestrator.store.study import _lock_path

    with open(_lock_path(tmp_path / "mlruns" / "optuna.db", "tiny_report"), "w") as held:  # a sweep runs it
        fcntl.flock(held, fcntl.LOCK_EX)
        proc = command(["report", str(spec)], tmp_path)
    row = next(ln for ln in proc.stdout.splitlines() if re.match(r"^\s+1  running", ln))
    assert "cut off" not in row, row


def test_interrupted_and_repeated_trials_are_shown_but_not_counted(tmp_path: Path) -> None:
    """A study as a killed and resumed sweep leaves it, read without an MLflow store."""
    import optuna
    from optuna.trial import TrialState

    spec = write_spec(tmp_path, SPEC)
    (tmp_path / "mlruns").mkdir()
    study = optuna.create_study(study_name="tiny_report", storage=f"sqlite:///{tmp_path}/mlruns/optuna.db",
                                directions=["maximize"])
    lost = fake(1, 64, "float32", "interrupted")
    repeat = fake(2, 8, "float32", "ok", 50.0)
    repeat.user_attrs["repeat_of"] = 0
    retried = fake(3, 64, "float32", "ok", 80.0)
    retried.user_attrs.update(retry_of=1, retry_reason="interrupted")
    for t in (fake(0, 8, "float32", "ok", 50.0), lost, repeat, retried, fake(4, 512, "float32", "oom")):
        study.add_trial(t)
    assert [t.state for t in study.trials][1] == TrialState.FAIL
    # an earlier report's plots that this one does not draw (another --compare, a device comparison) are
    # removed from the report's own folder; a file it never draws is left, and so is a folder given by --out
    own, given = tmp_path / "mlruns" / "reports" / "tiny_report", tmp_path / "given"
    for folder in (own, given):
        folder.mkdir(parents=True)
        for name in ("compare_dtype.png", "devices.png", "mine.png"):
            (folder / name).write_bytes(b"\x89PNG")

    proc = command(["report", str(spec), "--plots"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = {int(ln.split()[0]): ln for ln in proc.stdout.splitlines() if re.match(r"^\s+\d+  [a-z]", ln)}
    assert sorted(rows) == [0, 1, 2, 3, 4]
    # a tour: "run again as #3; not a result; its configuration runs again", where it had run again
    assert "interrupted" in rows[1] and rows[1].endswith("run again as #3; not a result"), rows[1]
    assert "retry of #1 (it ended interrupted)" in rows[3]
    assert "repeat of #0, not a result" in rows[2]
    assert "Results: 2 ok, 1 oom;" in proc.stdout
    assert "2 trial(s) interrupted, running or repeated are shown above but are not results" in proc.stdout
    assert "Best: trial 3: batch_size=64 dtype=float32 -> 80.0 samples/s" in proc.stdout
    assert f"MLflow:  no MLflow store at sqlite:///{tmp_path}/mlruns/mlflow.db; plots not logged" in proc.stdout
    assert not (tmp_path / "mlruns" / "mlflow.db").exists()
    assert sorted(p.name for p in own.iterdir()) == sorted(PLOTS + ["mine.png"])
    assert command(["report", str(spec), "--out", str(given)], tmp_path).returncode == 0
    assert sorted(p.name for p in given.iterdir()) == sorted(PLOTS + ["compare_dtype.png", "devices.png", "mine.png"])


def test_durations_read_as_seconds_and_minutes_only_from_two_minutes_on() -> None:
    """The report said "trial time 0 s (0.0 min)" and "44 s (0.7 min)"."""
    from orchestrator.report.summary import fmt_seconds

    assert [fmt_seconds(s) for s in (0, 3.14, 44.4, 119.6, 312)] == ["0.0 s", "3.1 s", "44 s", "120 s", "312 s (5.2 min)"]


@pytest.mark.contract
def test_contract_swapped_and_fallback_trials_show_their_figures(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A trial that fitted only by swapping and one whose ops fell back from MPS to the CPU, as the
    sweep records them (status, metrics, the result file's info): neither can happen on this machine."""
    import optuna

    from orchestrator import metrics as M

    spec = write_spec(tmp_path, SPEC)
    (tmp_path / "mlruns").mkdir()
    study = optuna.create_study(study_name="tiny_report", storage=f"sqlite:///{tmp_path}/mlruns/optuna.db",
                                directions=["maximize"])
    figures = {M.SWAP_OUT_GIB: 2.1851, M.SWAP_IN_GIB: 10.688, M.WARMUP_SWAP_OUT_GIB: 0.0, M.WARMUP_SWAP_IN_GIB: 0.0,
               M.SWAP_USED_GIB: 0.5416, M.SWAP_USED_BEFORE_GIB: 9.4628}
    swapped = fake(1, 512, "float32", "swapped")
    swapped.user_attrs["metrics"] = {"samples_per_s": 8.0, "peak_memory_gib": 30.1, **figures}
    swapped.user_attrs["detail"] = "fits but swaps: 2.19 GiB swapped out, 10.69 GiB in during the timed window, at 8.0 samples/s"
    fell = fake(2, 64, "float32", "ok", 30.6)
    fell.user_attrs["metrics"][M.MPS_FALLBACK_OPS] = 2.0
    folder = tmp_path / "trial-0002"
    folder.mkdir()
    (folder / "result.json").write_text(json.dumps({"status": "ok", "info": {
        "mps_fallback_ops": ["aten::_linalg_solve_ex.result", "aten::bitwise_and.Tensor_out"]}}))
    fell.user_attrs["trial_dir"] = str(folder)
    warm = fake(3, 8, "float32", "ok", 40.0)
    warm.user_attrs["metrics"].update({**figures, M.SWAP_OUT_GIB: 0.0, M.SWAP_IN_GIB: 0.0, M.WARMUP_SWAP_OUT_GIB: 1.5})
    for t in (fake(0, 8, "bfloat16", "ok", 50.0), swapped, fell, warm):
        study.add_trial(t)

    proc = command(["report", str(spec)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = {int(ln.split()[0]): ln for ln in proc.stdout.splitlines() if re.match(r"^\s+\d+  [a-z]", ln)}
    assert rows[1].split()[1:5] == ["swapped", "512", "float32", "8.0"]  # the throughput it had while swapping
    assert rows[1].endswith("fits but swaps: 2.19 GiB out, 10.69 GiB in during the window; swap in use 0.54 GiB "
                            "(9.46 before the trial)")
    assert rows[2].endswith("MPS fell back to the CPU for aten::_linalg_solve_ex.result, aten::bitwise_and.Tensor_out")
    assert rows[3].endswith("swapped 1.50 GiB out during warm-up, not in the window")
    assert "Results: 3 ok, 1 swapped;" in proc.stdout
    assert ("Fits but swaps: 1 trial(s) (#1) fitted only by swapping during the timed window: recorded as swapped, "
            "infeasible like an OOM and a memory boundary for skipping (search.allow_swap: true accepts them)") in proc.stdout
    assert ("MPS fallbacks: ops that ran on the CPU instead (slower; PYTORCH_ENABLE_MPS_FALLBACK=1): "
            "aten::_linalg_solve_ex.result (#2); aten::bitwise_and.Tensor_out (#2)") in proc.stdout
    from orchestrator.report import command as report

    out = io.StringIO()
    monkeypatch.chdir(tmp_path)
    with contextlib.redirect_stdout(out):  # the same command in this process: no second interpreter start
        assert report.main(["report", str(spec), "--format", "json"]) == 0
    doc = json.loads(out.getvalue())
    assert doc["counts"]["swapped"] == 1
    by = {r["number"]: r for r in doc["trials"]}
    assert by[2]["mps_fallback_ops"] == ["aten::_linalg_solve_ex.result", "aten::bitwise_and.Tensor_out"]
    assert by[1]["metrics"][M.SWAP_OUT_GIB] == 2.1851 and by[0]["mps_fallback_ops"] is None


@pytest.mark.slow
def test_a_password_in_the_storage_or_tracking_url_is_never_printed(tmp_path: Path, postgres: Any) -> None:
    """A study in PostgreSQL behind a role with a password, reported with the URLs on the command
    line as a user passes them: each line that names a store masks the password, and each command
    printed for pasting leaves it out (libpq's PGPASSWORD or ~/.pgpass supplies it there)."""
    import optuna

    password = "pa55-w0rd"
    storage, tracking, empty = (postgres.new_database_with_password(f"report_{what}", password)
                                for what in ("study", "runs", "empty"))
    spec = write_spec(tmp_path, SPEC)
    study = optuna.create_study(study_name="tiny_report", storage=storage, directions=["maximize"])
    for t in (fake(0, 8, "float32", "ok", 50.0), fake(1, 64, "float32", "ok", 80.0), fake(2, 512, "float32", "oom")):
        study.add_trial(t)
    masked, pasted = (lambda url: url.replace(password, "***")), (lambda url: url.replace(":" + password, ""))
    stores = ["--storage", storage, "--tracking-uri", tracking]
    flags = f"--storage {pasted(storage)} --tracking-uri {pasted(tracking)}"

    missing = orchestrate(["report", str(spec), "--storage", empty, "--tracking-uri", tracking], tmp_path)
    as_json = orchestrate(["report", str(spec), "--format", "json", *stores], tmp_path)
    text = orchestrate(["report", str(spec), *stores], tmp_path)
    plots = orchestrate(["report", str(spec), "--plots", *stores], tmp_path)  # MLflow opens the runs' store
    best = orchestrate(["best", str(spec), *stores], tmp_path)
    for proc in (missing, as_json, text, plots, best):
        assert password not in proc.stdout + proc.stderr, proc.args
    assert [p.returncode for p in (missing, as_json, text, plots, best)] == [2, 0, 0, 0, 0], plots.stderr
    *warnings, error = missing.stderr.splitlines()  # each flag with a password is warned about, once
    assert [w.split(" holds")[0] for w in warnings] == ["orchestrate: warning: --storage",
                                                         "orchestrate: warning: --tracking-uri"]
    assert error == (f"orchestrate: no study 'tiny_report' in {masked(empty)}; run `orchestrate {spec} "
                     f"--storage {pasted(empty)} --tracking-uri {pasted(tracking)}` first")
    assert json.loads(as_json.stdout)["storage"] == masked(storage)
    assert f"Study: {masked(storage)} (study 'tiny_report')\n" in text.stdout
    assert text.stdout.rstrip().endswith(f"MLflow parent run by: orchestrate report {spec} {flags} --plots")
    assert (f"MLflow:  no parent run for study 'tiny_report' in {masked(tracking)}; plots not logged"
            in plots.stdout)
    assert best.stdout.splitlines()[0].endswith(f"; orchestrate best {spec} {flags}")


def test_a_compiled_trial_s_row_shows_its_compile_time_apart_from_its_start_up_and_window() -> None:
    from orchestrator.report.document import _ok_note

    row = {"metrics": {"samples_per_s": 2500.0, "compile_s": 28.14, "startup_s": 31.02, "measure_s": 2.004}}
    assert _ok_note(row) == "compiled in 28.1 s of its 31.0 s start-up, window 2.00 s"
    assert _ok_note({"metrics": {"samples_per_s": 2500.0, "startup_s": 1.2}}) == ""


def test_errors_and_timeouts_alone_say_what_runs_them_again(tmp_path: Path) -> None:
    """The tour's study of timeouts only: `best` said to run the sweep's command, which had nothing
    to run (a timeout is a result); it names `--retry timeout` now, and exits 3, not the 2 of a
    mistyped command. A study of errors only: the report's count said "interrupted, running or
    repeated" of them."""
    import optuna

    spec = write_spec(tmp_path, SPEC)
    (tmp_path / "mlruns").mkdir()
    study = optuna.create_study(study_name="tiny_report", storage=f"sqlite:///{tmp_path}/mlruns/optuna.db",
                                directions=["maximize"])
    for t in (fake(0, 8, "float32", "timeout"), fake(1, 8, "bfloat16", "error")):
        study.add_trial(t)
    best = command(["best", str(spec)], tmp_path)  # exit 3, as a sweep that left nothing feasible (2: a bad spec)
    assert best.returncode == 3 and best.stdout == "", best.stdout + best.stderr
    assert best.stderr.splitlines() == [
        f"orchestrate: study 'tiny_report' has no feasible measured trial yet; run `orchestrate {spec} --retry timeout` "
        f"(or see `orchestrate report {spec}`)"], best.stderr
    report = command(["report", str(spec)], tmp_path)
    assert "Results: 1 timeout; trial time " in report.stdout, report.stdout
    assert "1 trial(s) interrupted, running, repeated or ended 'error' are shown above" in report.stdout, report.stdout
    assert "(a configuration whose trial ended 'error' runs again on the next run)" in report.stdout


def test_commands_run_outside_the_spec_s_folder_name_the_study_beside_it(project: Path) -> None:
    """A report tour: ``orchestrate report tour17/one.yaml`` from the folder above said "run
    `orchestrate tour17/one.yaml` first", which starts a new study there (the stores are found from
    the folder a command runs in). report, best, check and the plan now say where the study is,
    and the command that reads it; nothing is created."""
    above = project.parent
    for words in (["report"], ["best"], ["check"]):
        proc = command([*words, f"{project.name}/spec.yaml"], above)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stdout + proc.stderr
        assert (f"no study 'tiny_report' in sqlite:///{above}/mlruns/optuna.db; the spec's own folder holds study "
                f"'tiny_report' with ") in proc.stderr, proc.stderr
        assert proc.stderr.rstrip().endswith(f"trials ({project.name}/mlruns/); the stores (./mlruns/) are found from "
                                             f"the folder a command runs in: cd {project.name} && orchestrate "
                                             f"{words[0]} spec.yaml"), proc.stderr
    dry = orchestrate([f"{project.name}/spec.yaml", "--dry-run"], above)
    assert dry.returncode == 0 and "the study does not exist yet here, but the spec's own folder holds study" in \
        dry.stdout and f"cd {project.name} && orchestrate spec.yaml" in dry.stdout, dry.stdout + dry.stderr
    assert not (above / "mlruns").exists()


def test_report_json_is_strict_json_where_a_trial_diverged(tmp_path: Path) -> None:
    """A report tour: a diverged trial's loss came out as ``"loss": NaN``, which JavaScript's
    ``JSON.parse`` and any strict parser refuse. Not a number is null."""
    import optuna

    spec = write_spec(tmp_path, SPEC)
    (tmp_path / "mlruns").mkdir()
    study = optuna.create_study(study_name="tiny_report", storage=f"sqlite:///{tmp_path}/mlruns/optuna.db",
                                directions=["maximize"])
    diverged = fake(1, 64, "float32", "diverged")
    diverged.user_attrs["metrics"] = {"loss": float("nan"), "samples_per_s": float("inf")}
    for t in (fake(0, 8, "float32", "ok", 100.0), diverged):
        study.add_trial(t)
    proc = command(["report", str(spec), "--format", "json"], tmp_path)
    assert proc.returncode == 0, proc.stderr

    def refuse(name: str) -> None:
        raise AssertionError(f"{name} in the JSON")

    doc = json.loads(proc.stdout, parse_constant=refuse)
    (row,) = [r for r in doc["trials"] if r["number"] == 1]
    assert row["status"] == "diverged" and row["metrics"]["loss"] is None, row


def test_a_front_s_one_best_is_the_same_in_the_sweep_s_summary_mlflow_and_report(tmp_path: Path) -> None:
    """The HF tour's Pareto sweep ended "Best: trial 0 ... 39.7 samples/s", and wrote that to the
    parent run, while ``report`` and ``best`` named trial 6 (77.5 samples/s): the summary took the
    front's first member, the others its best on the first objective."""
    from optuna.distributions import CategoricalDistribution
    from optuna.trial import create_trial

    from orchestrator.report.closing import closed_with, summary
    from orchestrator.report.document import best_lines
    from orchestrator.spec.load import load_spec
    from orchestrator.urls import Origins

    spec = load_spec(write_spec(tmp_path, MULTI))
    dist = {"batch_size": CategoricalDistribution([8, 16])}
    front = []
    for number, (batch, sps, gib) in enumerate([(8, 39.7, 0.31), (16, 77.5, 0.52)]):
        t = create_trial(params={"batch_size": batch}, distributions=dist, values=[sps, gib],
                         user_attrs={"status": "ok", "metrics": {"samples_per_s": sps, "peak_memory_gib": gib}})
        t.number = number
        front.append(t)
    said = summary(spec, front, front, 2, 10.0, 12.0, None, False, Origins())
    [line] = [ln for ln in said if ln.startswith("Best on")]
    assert line == "Best on samples_per_s among the front: trial 1: batch_size=16 -> 77.5 samples/s, peak 0.52 GiB"
    assert line in best_lines(spec, front)  # report's
    _, described, metrics = closed_with(spec, front, front, 10.0, 2, None, "FINISHED")
    assert metrics["best_samples_per_s"] == 77.5 and "Best: batch_size=16 ->" in described, described


def test_plots_with_none_to_draw_are_not_said_to_be_logged() -> None:
    """The HF tour: one trial, an error; ``report --plots`` printed "Plots: ... (none: no trials
    yet)" and "MLflow: plots logged to parent run ...", whose ``report/`` stayed empty."""
    from orchestrator.report.ui import ParentRun

    said = ParentRun(None, "f887a539", "plots logged to parent run f887a539 under report/ in sqlite:///x").log([], "")
    assert said == "nothing logged to parent run f887a539: no plot to draw yet"


@pytest.mark.slow
def test_a_damaged_mlflow_db_is_one_line_for_plots_and_the_ui(project: Path, tmp_path: Path) -> None:
    """The fault tour: plain ``report`` and ``check`` said a truncated ``mlflow.db`` in one line,
    but ``report --plots`` and ``ui`` were SQLAlchemy tracebacks (``database disk image is
    malformed``), exit 1."""
    import shutil

    shutil.copytree(project / "mlruns", tmp_path / "mlruns", ignore=shutil.ignore_patterns("reports"))
    shutil.copy(project / "spec.yaml", tmp_path / "spec.yaml")
    db = tmp_path / "mlruns" / "mlflow.db"
    os.truncate(db, 8192)
    for args in (["report", "spec.yaml", "--plots"], ["ui", "spec.yaml", "--port", "5079"]):
        proc = command(args, tmp_path)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert "mlflow.db is truncated: 8,192 bytes" in proc.stderr and "check spec.yaml --repair" in proc.stderr
    assert not (tmp_path / "mlruns" / "reports").exists()


def test_a_study_made_while_report_reads_mlflow_is_read_not_called_lost(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The fault tour: ``report`` in a loop beside a new sweep said "study 'slow' is missing from
    ... (the file is empty), but an earlier study of this name left its runs": it found no file,
    then read MLflow for seconds, by which time the sweep had made the study and its first runs."""
    import optuna

    from orchestrator.report import command as report_command
    from orchestrator.spec.load import load_spec
    from orchestrator.store import lost

    monkeypatch.chdir(tmp_path)
    spec = load_spec(write_spec(tmp_path, SPEC))
    (tmp_path / "mlruns").mkdir()

    def sweep_starting(*_: Any) -> list[str]:  # as MLflow is read, the sweep makes its study
        optuna.create_study(study_name="tiny_report", storage="sqlite:///mlruns/optuna.db")
        return ["MLflow experiment 'tiny_report' holds 2 trial run(s)"]

    monkeypatch.setattr(lost, "found_runs", sweep_starting)
    study = report_command.open_study(spec)
    assert study is not None and study.trials == []


def test_the_printed_resume_keeps_the_flags_that_shape_the_sweep(tmp_path: Path) -> None:
    """The fault tour: a sweep run with ``--n-trials 7`` that stopped on a full disk said
    "Resume with: orchestrate slow.yaml": pasted, it ran the spec's budget on the spec's device."""
    from orchestrator.report.closing import resume_flags, summary
    from orchestrator.spec.load import load_spec
    from orchestrator.urls import Origins

    spec = load_spec(write_spec(tmp_path, SPEC))
    origins = Origins(devices="cpu:0-1", flags=("--n-trials", "7", "--stop", "auto", "--device", "cpu"))
    assert resume_flags(spec, origins) == ["--devices", "cpu:0-1", "--n-trials", "7", "--stop", "auto",
                                           "--device", "cpu"]
    said = summary(spec, [], [], 7, 0.0, 1.0, "no configuration left is likely to beat the best", True, origins)
    [go_on] = [ln for ln in said if ln.startswith("Go on anyway:")]
    assert go_on.split("   (")[0].endswith("spec.yaml --devices cpu:0-1 --n-trials 7 --device cpu --stop budget"), go_on


@pytest.mark.slow
def test_the_report_says_why_the_last_run_stopped(project: Path, tmp_path: Path) -> None:
    """A busy machine's tour: a sweep that stopped "unsure of the answer: ... chance 21%" printed
    it once; ``report`` showed the best and the noise, but not that caveat. The run keeps it with
    its load record, and the report says it."""
    import shutil

    import optuna

    shutil.copytree(project / "mlruns", tmp_path / "mlruns", ignore=shutil.ignore_patterns("reports"))
    shutil.copy(project / "spec.yaml", tmp_path / "spec.yaml")
    study = optuna.load_study(study_name="tiny_report", storage=f"sqlite:///{tmp_path}/mlruns/optuna.db")
    runs = study.user_attrs.get("orchestrate.load") or [{}]
    stopped = "unsure of the answer: trial 7 and trial 5 are 8.1% apart, measured once each"
    study.set_user_attr("orchestrate.load", [*runs[:-1], {**runs[-1], "stopped": stopped}])
    proc = command(["report", "spec.yaml"], tmp_path)
    assert proc.returncode == 0 and f"Stopped (the last run): {stopped}." in proc.stdout, proc.stdout + proc.stderr


# -- the plots' figures, on studies made in-process: what each draws, read from its artists --------

def made(number: int, params: dict[str, Any], status: str, sps: float | None = None, mem: float = 1.0,
         value: float | None = None) -> Any:
    """A result trial with any parameters; ``value`` the objective where it is not the throughput."""
    from optuna.distributions import CategoricalDistribution
    from optuna.trial import TrialState, create_trial

    from orchestrator.outcome import INFEASIBLE

    dists = {k: CategoricalDistribution([v]) for k, v in params.items()}
    attrs = {"status": status, "metrics": {"samples_per_s": sps, "peak_memory_gib": mem} if sps is not None else {}}
    if sps is not None:
        t = create_trial(params=params, distributions=dists, value=sps if value is None else value, user_attrs=attrs)
    else:
        t = create_trial(params=params, distributions=dists, user_attrs=attrs,
                         state=TrialState.PRUNED if status in INFEASIBLE else TrialState.FAIL)
    t.number = number
    return t


def context(objective: tuple = (("samples_per_s", "maximize"),), limit: Any = None,
            subtitle: str = "t: experiments.mlp on cpu; 4 trials", best: int | None = None) -> Any:
    from orchestrator.report.plotdata import PlotContext

    return PlotContext(subtitle, objective, None, limit, best=best)


@pytest.fixture
def figures(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Each plot's figure by file name, laid out and drawn as ``_save`` would, but kept, not saved."""
    import matplotlib.pyplot as plt

    from orchestrator.report import plots

    kept: dict[str, Any] = {}

    def keep(fig: Any, path: Path) -> Path:
        fig.tight_layout()
        fig.canvas.draw()
        kept[path.name] = fig
        return path

    monkeypatch.setattr(plots, "_save", keep)
    yield kept
    plt.close("all")


def marks(ax: Any, what: str) -> list[tuple[float, float]]:
    """The (x, y) of the failures' markers (``failed``: those of 120 points) or the best's star (gid ``best``)."""
    return [tuple(xy) for c in ax.collections for xy in c.get_offsets()
            if (c.get_gid() == "best" if what == "best" else list(c.get_sizes()[:1]) == [120])]


def legend(ax: Any) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()]


def ticks(ax: Any) -> list[str]:
    lo, hi = sorted(ax.get_xlim())
    return [t.get_text() for t in ax.get_xticklabels() if lo <= t.get_position()[0] <= hi]


def test_a_ranged_space_s_plots_bin_the_boundary_map_and_leave_the_ticks_to_matplotlib(figures: dict,
                                                                                         tmp_path: Path) -> None:
    """The tour's cont25 (lr log 0.001-0.1, batch_size 8-512, 25 random trials): the boundary map
    was 25 x 25 cells of "not run" under 17-digit lr labels, unsorted, and throughput.png had a tick
    at each batch size sampled, run together."""
    import random

    from orchestrator.report.plotdata import oom_grid
    from orchestrator.report.plots import write_plots

    rng = random.Random(3)
    trials = [made(i, {"lr": 10 ** rng.uniform(-3, -1), "batch_size": rng.randint(8, 512)}, "ok", 1000.0 + i)
              for i in range(25)]
    grid = oom_grid(trials)
    assert grid is not None and len(grid["xs"]) <= 12 and len(grid["rows"]) <= 12
    assert all(len(text) <= 16 for text in grid["rows"] + grid["x_labels"]), grid["rows"]  # 0.00112–0.00193
    assert [lo for lo, _ in grid["xs"]] == sorted(lo for lo, _ in grid["xs"])
    assert [float(r.split("\u2013")[0]) for r in grid["rows"]] == sorted(float(r.split("\u2013")[0]) for r in grid["rows"])
    assert sum(v is not None for row in grid["values"] for v in row) <= 25
    write_plots(trials, context(), tmp_path)
    shown = ticks(figures["throughput.png"].axes[0])
    assert 2 <= len(shown) <= 12 and all(len(t) <= 6 for t in shown), shown
    # a knob of more than 12 values that are not numbers cannot be binned: no map, and none said drawn
    named = [made(i, {"batch_size": 8 * (1 + i % 2), "model": f"m{i}"}, "ok", 100.0 + i) for i in range(14)]
    assert oom_grid(named) is None
    assert [p.name for p in write_plots(named, context(), tmp_path)] == ["throughput.png", "memory.png", "history.png"]


def test_history_of_a_minimized_objective_marks_trials_without_a_value_above_the_measured(figures: dict,
                                                                                           tmp_path: Path) -> None:
    """The tour's minim (step_time_ms_p50, minimize): out-of-memory, crashed and skipped trials
    were drawn at 0, below every measured step time, where the best would be."""
    from orchestrator.report.plots import plot_history

    trials = [made(0, {"batch_size": 8}, "ok", 100.0, value=0.35), made(1, {"batch_size": 64}, "oom"),
              made(2, {"batch_size": 512}, "crashed"), made(3, {"batch_size": 16}, "ok", 50.0, value=0.6)]
    plot_history(trials, context((("step_time_ms_p50", "minimize"),), best=0), tmp_path / "history.png")
    ax = figures["history.png"].axes[0]
    failed = marks(ax, "failed")
    assert len(failed) == 2 and all(y > 0.6 for _, y in failed), failed
    assert marks(ax, "best") == [(0.0, 0.35)] and "best: trial 0" in legend(ax)
    plot_history(trials, context(), tmp_path / "maximized.png")  # higher is better: on the floor
    assert all(y == 0 for _, y in marks(figures["maximized.png"].axes[0], "failed"))


def test_history_draws_every_measurement_and_the_best_as_known_after_each_trial(figures: dict,
                                                                                 tmp_path: Path) -> None:
    """A tour: the auto search measured trials 0 (705.7) and 3 (755.3) again later; the history,
    drawn from each configuration's newest trial, left them out and its best so far read 568
    through trials 1-4. Every measurement is drawn (one measured again later hollow), and the best
    so far is each configuration's newest value known then."""
    from orchestrator.report.plotdata import history_series
    from orchestrator.report.plots import plot_history

    trials = [made(0, {"batch_size": 8}, "ok", 705.7), made(1, {"batch_size": 16}, "ok", 568.0),
              made(2, {"batch_size": 64}, "oom"), made(3, {"batch_size": 32}, "ok", 755.3),
              made(4, {"batch_size": 32}, "ok", 700.0), made(5, {"batch_size": 8}, "ok", 690.0)]
    assert [(n, b, again) for n, _, b, _, again in history_series(trials, "maximize")] == [
        (0, 705.7, True), (1, 705.7, False), (2, 705.7, False), (3, 755.3, True), (4, 705.7, False), (5, 700.0, False)]
    plot_history(trials, context(best=4), tmp_path / "history.png")
    ax = figures["history.png"].axes[0]
    assert "measured again later" in legend(ax) and "measured trial" in legend(ax)


def test_the_memory_plot_puts_only_what_did_not_fit_on_the_limit_and_says_a_limit_far_above(figures: dict,
                                                                                             tmp_path: Path) -> None:
    """The tour's mixed and minim: crashes and timeouts sat on the memory limit as if they had
    reached it; four: on the CPU, "device memory: 23.5 GiB" set the scale and every measured line lay
    flat at 0.24 GiB."""
    from orchestrator.report.plotdata import MemoryLimit
    from orchestrator.report.plots import plot_lines

    trials = [made(0, {"batch_size": 8}, "ok", 100.0, mem=0.5), made(1, {"batch_size": 64}, "ok", 150.0, mem=1.0),
              made(2, {"batch_size": 512}, "oom"), made(3, {"batch_size": 256}, "crashed")]
    plot_lines(trials, context(limit=MemoryLimit(2.0, "limit: cpu_memory_limit_gib 2 GiB (RLIMIT_DATA)", set=True)),
               tmp_path / "set.png", "peak_memory_gib")
    ax = figures["set.png"].axes[0]
    assert sorted(marks(ax, "failed")) == [(256.0, 0.0), (512.0, 2.0)]  # crashed on the floor, OOM on the limit
    assert any(list(line.get_ydata()) == [2.0, 2.0] for line in ax.lines)  # the limit a spec sets is drawn
    plot_lines(trials, context(limit=MemoryLimit(23.5, "device memory: 23.5 GiB")), tmp_path / "device.png",
               "peak_memory_gib")
    ax = figures["device.png"].axes[0]
    assert ax.get_ylim()[1] < 2 and not any(23.5 in list(line.get_ydata()) for line in ax.lines)
    assert "device memory: 23.5 GiB (24x the highest peak: not drawn)" in legend(ax)
    assert all(y < 2 for _, y in marks(ax, "failed"))


def test_one_trial_and_all_failed_studies_draw_no_empty_scale_or_legend_entry(figures: dict, tmp_path: Path) -> None:
    """The tour's one (one trial): the history's x axis ran -0.04..0.04, the best-so-far step was
    invisible and the subtitle said "1 trials"; allfail and alloom: the history's y axis ran
    -0.04..0.04, the legend listed "measured trial" and "best so far" with nothing drawn, the map's
    colour bar ran -0.1..0.1 samples/s, and a group with no measured point had a legend line."""
    from orchestrator.report.plots import plot_history, plot_lines, plot_oom_map

    from orchestrator.report.command import plot_context
    from orchestrator.spec.load import load_spec

    rep = {"device": "cpu", "device_name": None, "torch_version": None, "results": 1, "pareto": None}
    assert plot_context(load_spec(write_spec(tmp_path, SPEC)), rep, {}).subtitle.endswith(" on cpu; 1 trial")
    one = [made(0, {"batch_size": 16}, "ok", 2400.0)]
    plot_history(one, context(best=0), tmp_path / "one.png")
    ax = figures["one.png"].axes[0]
    assert ticks(ax) == ["0"] and marks(ax, "best") == [(0.0, 2400.0)]
    failed = [made(0, {"batch_size": 8, "fault": "oom_cpu"}, "oom"), made(1, {"batch_size": 8, "fault": "segfault"}, "crashed"),
              made(2, {"batch_size": 16, "fault": "oom_cpu"}, "skipped"), made(3, {"batch_size": 16, "fault": "none"}, "ok", 50.0)]
    plot_history(failed[:3], context(), tmp_path / "history.png")
    ax = figures["history.png"].axes[0]
    assert not {"measured trial", "best so far (maximize)"} & set(legend(ax)) and list(ax.get_yticks()) == []
    plot_oom_map(failed[:3], context(), tmp_path / "oom_map.png")
    assert len(figures["oom_map.png"].axes) == 1  # no colour bar
    plot_lines(failed, context(), tmp_path / "throughput.png", "samples_per_s")
    assert [t for t in legend(figures["throughput.png"].axes[0]) if t.startswith("fault=")] == ["fault=none"]


def test_the_best_configuration_is_a_star_on_the_throughput_plot_and_an_outlined_cell_on_the_map(
        figures: dict, tmp_path: Path) -> None:
    """No plot said which configuration the report calls best; the plots then picked it again
    themselves: they star the report's pick (``document.pick_best``)."""
    from orchestrator.report.command import plot_context
    from orchestrator.report.document import pick_best
    from orchestrator.report.plotdata import oom_grid
    from orchestrator.report.plots import write_plots
    from orchestrator.spec.load import load_spec
    from orchestrator.store.records import rank

    trials = [fake(0, 8, "float32", "ok", 100.0), fake(1, 64, "float32", "ok", 300.0), fake(2, 8, "bfloat16", "ok", 150.0),
              fake(3, 64, "bfloat16", "ok", 250.0), fake(4, 512, "float32", "oom")]
    assert oom_grid(trials, best=1)["best"] == (0, 1)  # float32 (first row), batch 64 (second column)
    spec = load_spec(write_spec(tmp_path, SPEC))
    rep = {"device": "cpu", "device_name": None, "torch_version": None, "results": 5, "pareto": None}
    ctx = plot_context(spec, rep, {}, pick_best(spec, rank(trials, spec)).number)  # the report's own pick
    assert ctx.best == 1
    write_plots(trials, ctx, tmp_path)
    ax = figures["throughput.png"].axes[0]
    assert marks(ax, "best") == [(64.0, 300.0)] and "best: trial 1" in legend(ax)
    (outline,) = [p for p in figures["oom_map.png"].axes[0].patches if p.get_gid() == "best"]
    assert outline.get_xy() == (0.5, -0.5) and "the best, trial 1" in figures["oom_map.png"].axes[0].get_xlabel()


def test_long_parameter_names_and_values_keep_the_legend_on_the_image(figures: dict, tmp_path: Path) -> None:
    """The tour's script/long.yaml: legend entries of 130 characters ran off the image's left edge
    (throughput) and right edge (memory)."""
    from orchestrator.report.plotdata import MemoryLimit
    from orchestrator.report.plots import write_plots

    width, augment = "network_hidden_layer_width_in_units_for_the_student_model", "data_augmentation_pipeline_variant_identifier"
    values = ["random-resized-crop-then-horizontal-flip-then-colour-jitter-strong", "none"]
    trials = [made(i, {"batch_size": b, width: w, augment: a}, "ok", 1000.0 * (i + 1), mem=0.25)
              for i, (b, w, a) in enumerate((b, w, a) for b in (32, 256) for w in (8, 16) for a in values)]
    write_plots(trials, context(limit=MemoryLimit(23.5, "device memory: 23.5 GiB")), tmp_path)
    for name in ("throughput.png", "memory.png"):
        fig = figures[name]
        box = fig.axes[0].get_legend().get_window_extent()
        assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1, (name, box, fig.bbox)
        texts = legend(fig.axes[0])
        assert "8, random-resized-crop-the\u2026" in texts and "16, none" in texts, texts
        assert width in fig.axes[0].get_legend().get_title().get_text().replace("\n", " ")


def test_a_comparison_of_many_configurations_keeps_each_speedup_readable(figures: dict, tmp_path: Path) -> None:
    """A tour's ``--compare`` of 24 configurations: the speedups above neighbouring bars ran into each
    other, the tallest ran off the top, and a speedup of 0.0042 read "0.00x"."""
    from optuna.distributions import CategoricalDistribution
    from optuna.trial import create_trial

    from orchestrator.report.compare import comparison
    from orchestrator.report.plots import plot_comparison, speedup_text

    assert [speedup_text(s) for s in (40.04, 1.254, 0.168, 0.0042)] == ["40.0x", "1.25x", "0.17x", "0.0042x"]
    trials = []
    for params in ({"device": d, "batch_size": b, "hidden_size": h} for b in (8, 16, 32, 64, 128, 256)
                   for h in (64, 128, 256, 512) for d in ("cpu", "cuda")):
        sps = params["batch_size"] * params["hidden_size"] / 10 * (40 if params["device"] == "cuda" else 1)
        t = create_trial(params=params, distributions={k: CategoricalDistribution([v]) for k, v in params.items()},
                         value=sps, user_attrs={"status": "ok", "metrics": {"samples_per_s": sps}})
        t.number = len(trials)
        trials.append(t)
    plot_comparison(comparison(trials, "device", "cpu"), context(), tmp_path / "devices.png")
    ax = figures["devices.png"].axes[0]
    notes = [t for t in ax.texts if t.get_text().endswith("x")]
    assert len(notes) == 24 and {t.get_rotation() for t in notes} == {90.0}
    top = max(t.xy[1] for t in notes)
    assert ax.get_ylim()[1] >= 10 * top * 0.99  # room above the tallest bar for its upright note


def test_no_feasible_result_because_of_a_constraint_says_which_and_how_near(tmp_path: Path) -> None:
    """A tour: a 0.1-GiB budget over trials that peaked at 0.24 GiB read "No configuration has a
    feasible measured result yet", and ``best`` said to run the finished sweep again."""
    from types import SimpleNamespace

    from optuna.trial import TrialState

    from orchestrator.report.document import best_lines
    from orchestrator.spec.load import load_spec
    from orchestrator.store.records import constraints_missed

    spec = load_spec(write_spec(tmp_path, SPEC.rstrip() + "\n    objective:\n      metric: samples_per_s\n"
                                "      constraints:\n        peak_memory_gib: {max: 0.1}\n        samples_per_s: {min: 10}\n"))

    def trial(number: int, peak: float, violations: dict[str, float]) -> Any:
        return SimpleNamespace(number=number, state=TrialState.COMPLETE, values=[100.0 + number],
                               params={"batch_size": 8 * (number + 1)}, constraints=violations,
                               user_attrs={"status": "ok", "metrics": {"peak_memory_gib": peak, "samples_per_s": 100.0 + number}})

    results = [trial(0, 0.31, {"fits": -1.0, "peak_memory_gib": 0.21, "samples_per_s": -90.0}),
               trial(1, 0.237, {"fits": -1.0, "peak_memory_gib": 0.137, "samples_per_s": -91.0})]
    missed = constraints_missed(spec, results)
    assert missed == ("no measured configuration meets the constraints: peak_memory_gib <= 0.1 (lowest measured "
                      "0.237, trial 1); samples_per_s >= 10 (highest measured 101, trial 1)"), missed
    assert best_lines(spec, [], results=results)[1] == f"None: {missed}."
    from orchestrator.errors import NothingFeasible
    from orchestrator.report.command import best_yaml

    study = SimpleNamespace(get_trials=lambda deepcopy: results, user_attrs={})  # 2 of its 12 configurations
    with pytest.raises(NothingFeasible) as err:  # a review: told to start another study with 10 left to measure
        best_yaml(spec, study)
    assert str(err.value).startswith(f"study 'tiny_report': {missed} yet; run `orchestrate ")
    results[1].constraints["peak_memory_gib"] = -0.01  # one fits: a best, nothing to say
    assert constraints_missed(spec, results) is None
    assert best_lines(spec, [])[1] == "No configuration has a feasible measured result yet."


def test_a_study_holding_more_than_n_trials_asks_says_so() -> None:
    """A tour lowered ``search.n_trials`` to 3 on a study of 6 results: "6 of 3 trials done"."""
    from orchestrator.report.summary import of_target

    assert [of_target(6, 3), of_target(3, 6), of_target(6, 6), of_target(2, "?")] == [
        "6 (search.n_trials: 3)", "3 of 6", "6 of 6", "2 of ?"]


def test_series_that_coincide_each_show(figures: dict, tmp_path: Path) -> None:
    """A tour: three widths of one peak memory drew one visible line for three legend entries."""
    from orchestrator.report.plots import write_plots

    trials = [made(i, {"batch_size": b, "width": w}, "ok", 100.0 * b, mem=0.24)
              for i, (b, w) in enumerate((b, w) for w in (8, 32, 128) for b in (16, 64))]
    write_plots(trials, context(), tmp_path)
    lines = [ln for ln in figures["memory.png"].axes[0].get_lines() if ln.get_label().startswith("width=")]
    assert len(lines) == 3 and len({ln.get_marker() for ln in lines}) == 3
    sizes = [ln.get_markersize() for ln in lines]
    assert sizes == sorted(sizes, reverse=True) and [ln.get_zorder() for ln in lines] == sorted(ln.get_zorder() for ln in lines)
