"""`orchestrate ui` as a person uses it: start it on a finished sweep and open the experiment page
in headless Chromium, which runs MLflow's React app; check the rendered runs table and keep a
screenshot. Skipped, with the reason, where Chromium is not installed (`.ci/run` installs it).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from browser import CHROMIUM, SCREEN, Browser, free_port, read_table, stop_group, wait_for_page
from conftest import ORCHESTRATE, child_runs, orchestrate, signals_as_in_a_terminal
from procs import alive, descendants, process
from report.test_report import finished_sweep, png_size


@pytest.mark.slow
def start_ui(project: Path, tmp_path: Path, sigint_ignored: bool = False) -> tuple[subprocess.Popen[bytes], int, Path]:
    """``orchestrate ui`` on a free port in ``project``, in a session of its own (as a terminal's
    foreground group), its output to ``tmp_path/ui.log``; ``sigint_ignored``: started with SIGINT
    ignored, as a shell's background job is (CI's own runs)."""
    port = free_port()
    log = tmp_path / "ui.log"
    def signals() -> None:
        signals_as_in_a_terminal()
        if sigint_ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)

    with open(log, "w") as out:
        ui = subprocess.Popen([ORCHESTRATE, "ui", "--port", str(port)], cwd=project, stdout=out,
                              stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=signals)
    return ui, port, log


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install chromium; "
                                             ".ci/run installs it)")
def test_mlflow_ui_answers_on_the_first_screen(tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> None:
    """At 1400 x 900, with MLflow's sidebar and its assistant panel open (it opens itself on a
    local server's first visit), each trial's configuration is whole on the first screen (its name
    holds every swept value, not cut off), with its status, samples_per_s, its spread and peak
    memory; out-of-memory trials carry the same run mark as measured ones (FINISHED), not MLflow's
    failure mark, and a dot of another colour; the best trial is the first row; the experiment's
    description says what the names and colours mean."""
    project = finished_sweep(tmp_path_factory)
    ui, port, log = start_ui(project, tmp_path)
    shot = tmp_path / "mlflow_ui.png"
    try:
        url = wait_for_page(ui, log, port)
        assert url.endswith("/runs?workflowType=machine_learning&viewStateShareKey=orchestrate")
        # read while they run (an ended process's command line is empty)
        commands = [p.cmdline for pid in descendants(ui.pid) if (p := process(pid)) and p.cmdline]
        browser = Browser(tmp_path / "chromium")
        try:
            browser.open(url, *SCREEN)
            table = read_table(browser, 6)
            page = browser.evaluate("document.body.innerText")
            browser.screenshot(shot)
        finally:
            browser.close()
    finally:
        stop_group(ui)

    commands = [c for c in commands if "orchestrator.report.uiguard" not in c]  # the server's guard (uiguard)
    assert len(commands) <= 2, commands  # `mlflow ui` and its uvicorn: no job runner, no huey consumers
    assert not any("huey" in c or "_job_runner" in c for c in commands), commands
    runs = {r.info.run_name: r for r in child_runs(project, "tiny_report")}
    assert (table["width"], table["height"]) == SCREEN
    rows = {row["attributes.`Run Name`"]["text"]: row for row in table["rows"]}
    assert set(rows) == set(runs)  # every trial's run, flat (not folded under the parent)
    statuses = {name: run.data.tags["status"] for name, run in runs.items()}
    assert sorted(statuses.values()).count("ok") == 4 and "oom" in statuses.values()
    first_screen = ["attributes.`Run Name`", "tags.`status`", "metrics.`samples_per_s`", "metrics.`throughput_ci95`",
                    "metrics.`peak_memory_gib`"]
    for name, row in rows.items():
        missing = [c for c in first_screen if not row.get(c, {}).get("shown")]
        assert not missing, f"{name}: not on the first screen: {missing}\n{row}"
        assert row["attributes.`Run Name`"]["whole"], f"{name}: cut off\n{row}"
        params = runs[name].data.params
        assert name == f"#{runs[name].data.tags['trial_number']} bs={params['batch_size']} dtype={params['dtype']}"
        assert row["tags.`status`"]["text"] == statuses[name]
        assert runs[name].info.status == "FINISHED", (name, runs[name].info.status)
    best = max((n for n in runs if "samples_per_s" in runs[n].data.metrics), key=lambda n: runs[n].data.metrics["samples_per_s"])
    assert table["rows"][0]["attributes.`Run Name`"]["text"] == best  # best first
    assert rows[best]["metrics.`samples_per_s`"]["text"][:5] == repr(runs[best].data.metrics["samples_per_s"])[:5]
    marks = {statuses[n]: row["runDateAndNestInfo"]["mark"] for n, row in rows.items()}
    assert marks["ok"] and marks["oom"] == marks["ok"]  # no failure mark on a trial that ran out of memory
    colours = {s: {row["attributes.`Run Name`"]["color"] for n, row in rows.items() if statuses[n] == s}
               for s in ("ok", "oom")}
    assert colours == {"ok": {"rgb(26, 127, 55)"}, "oom": {"rgb(232, 89, 12)"}}  # runs.RUN_COLORS, told apart
    assert "Run names: the trial's number, then its swept values (bs = batch_size)" in page
    width, height = png_size(shot)
    assert (width, height) == SCREEN and shot.stat().st_size > 50_000
    print(f"screenshot: {shot}")


def test_ui_without_runs_says_one_line(tmp_path: Path) -> None:
    proc = orchestrate(["ui", "--port", str(free_port())], tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == f"orchestrate: no runs yet in sqlite:///{tmp_path}/mlruns/mlflow.db; " \
                          "run a sweep first (orchestrate SPEC)\n"
    assert list(tmp_path.iterdir()) == []


def test_ui_where_mlflow_lost_its_runs_names_the_repair(tmp_path_factory: pytest.TempPathFactory,
                                                        tmp_path: Path) -> None:
    """MLflow's file deleted while the study holds results: "no runs yet ... run a sweep first
    (orchestrate SPEC)" printed a placeholder and sent a user to run again what had run. It names
    the repair that writes the runs from the study, which then makes the store the ui serves."""
    project = tmp_path / "p"
    shutil.copytree(finished_sweep(tmp_path_factory), project)
    (project / "mlruns" / "mlflow.db").unlink()
    proc = orchestrate(["ui", "spec.yaml", "--port", str(free_port())], project)
    assert proc.returncode == 2 and proc.stdout == ""
    line = proc.stderr.strip()
    assert "\n" not in line and "Traceback" not in line, proc.stderr
    assert line.startswith(f"orchestrate: no runs in sqlite:///{project}/mlruns/mlflow.db, but study 'tiny_report' in ")
    assert "holds 6 ended trial(s): `orchestrate check spec.yaml --repair` writes their MLflow runs" in line, line
    assert not (project / "mlruns" / "mlflow.db").exists()  # nothing made
    repaired = orchestrate(["check", "spec.yaml", "--repair"], project)
    assert repaired.returncode == 0 and len(child_runs(project, "tiny_report")) == 6, repaired.stdout + repaired.stderr


@pytest.mark.parametrize("params, metrics, objective, maximize, columns, order", [
    ([{"batch_size": "8", "dtype": "float32", "model": "tiny"}, {"batch_size": "16", "dtype": "float32", "model": "tiny"}],
     {"samples_per_s", "peak_memory_gib", "loss", "step_time_ms_p50"}, "samples_per_s", True,
     ["tags.`status`", "metrics.`samples_per_s`", "metrics.`peak_memory_gib`", "params.`batch_size`",
      "metrics.`step_time_ms_p50`"], False),
    ([{"dtype": "float32"}, {"dtype": "bfloat16"}], {"samples_per_s", "step_time_ms_p50"}, "step_time_ms_p50", False,
     ["tags.`status`", "metrics.`step_time_ms_p50`", "metrics.`samples_per_s`", "params.`dtype`"], True),
    ([{"batch_size": "8"}], set(), "samples_per_s", True, ["tags.`status`"], False),
    ([{"batch_size": "8"}, {"batch_size": "16"}], {"samples_per_s", "throughput_cv", "peak_memory_gib"}, "samples_per_s",
     True, ["tags.`status`", "metrics.`samples_per_s`", "metrics.`throughput_cv`", "metrics.`peak_memory_gib`",
            "params.`batch_size`"], False),  # the spread beside the throughput
    ([{"batch_size": "8"}, {"batch_size": "16"}], {"samples_per_s", "throughput_cv", "throughput_ci95"},
     "samples_per_s", True, ["tags.`status`", "metrics.`samples_per_s`", "metrics.`throughput_ci95`",
                             "params.`batch_size`", "metrics.`throughput_cv`"], False),
])
def test_saved_view_puts_the_answer_first(params, metrics, objective, maximize, columns, order) -> None:
    from orchestrator.report.views import view_state

    state = view_state(params, metrics, objective, maximize)
    assert state["selectedColumns"] == columns
    assert state["columnOrder"] == ["attributes.`Run Name`", "runDateAndNestInfo", *columns]  # MLflow's pinned two first
    assert set(state["columnWidths"]) == set(state["columnOrder"])  # MLflow applies widths to ordered columns only
    assert state["searchFilter"] == "tags.role = 'trial'"  # flat: MLflow nests only unfiltered, by-date views
    assert state["orderByKey"] == f"metrics.`{objective}`" and state["orderByAsc"] is order


def test_a_columns_width_fits_its_longest_value_so_float16_and_float32_read_apart() -> None:
    """A tour's screenshots: "bflo...", "float..." (float16 and float32 alike) and "diverg..." where
    the widths came from the headers alone."""
    from orchestrator.report.views import view_state

    params = [{"dtype": d, "batch_size": "8" if d == "float32" else "16"} for d in ("float32", "float16", "bfloat16")]
    widths = view_state(params, {"samples_per_s"}, statuses=["ok", "interrupted"])["columnWidths"]
    assert widths["params.`dtype`"] >= 7 * len("bfloat16") + 16 > widths["params.`batch_size`"] - 60
    assert widths["tags.`status`"] >= 7 * len("interrupted") + 16
    assert view_state(params, {"samples_per_s"})["columnWidths"]["tags.`status`"] == 70  # "skipped" fits


@pytest.mark.parametrize("uri, environ, kept, dropped", [
    ("postgresql+psycopg2://runs:s3cret@db/mlflow", {"PGPASSWORD": "pgpw", "MLFLOW_TRACKING_TOKEN": "tok", "HOME": "/h"},
     {"HOME": "/h"}, ("PGPASSWORD", "MLFLOW_TRACKING_TOKEN")),
    ("postgresql+psycopg2://runs@db/mlflow", {"PGPASSWORD": "pgpw", "ORCHESTRATE_STORAGE": "postgresql://o:pw@db/o"},
     {"PGPASSWORD": "pgpw"}, ("ORCHESTRATE_STORAGE",)),  # the password is libpq's to supply: it stays
    ("sqlite:////p/mlruns/mlflow.db", {"PGPASSWORD": "pgpw", "MLFLOW_BACKEND_STORE_URI": "postgresql://a:b@c/d"},
     {}, ("PGPASSWORD",)),
])
def test_server_env_holds_the_store_and_no_other_credential(uri: str, environ: dict[str, str], kept: dict[str, str],
                                                            dropped: tuple[str, ...]) -> None:
    from orchestrator.report.ui import mlflow_command, server_env

    env = server_env(uri, environ)
    assert env["MLFLOW_BACKEND_STORE_URI"] == uri  # replaces one the caller's environment had
    assert env.items() >= kept.items() and not set(dropped) & set(env)
    assert uri not in mlflow_command(5000)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads /proc")
def test_ui_keeps_the_stores_password_off_every_command_line(tmp_path: Path, postgres: Any) -> None:
    """``orchestrate ui`` on a PostgreSQL run store whose URL holds a password: the MLflow server it
    starts serves that store, reading the URL from its environment; no process it started has the
    password on its command line (``ps`` shows those to every user), none has the orchestrator's
    other credentials, and what it prints masks the password."""
    from mlflow.tracking import MlflowClient

    password = "pa55-w0rd"
    tracking = postgres.new_database_with_password("ui_runs", password)
    MlflowClient(tracking).create_experiment("kept_in_postgres")  # also builds MLflow's tables
    port = free_port()
    log = tmp_path / "ui.log"
    env = {**os.environ, "MLFLOW_TRACKING_TOKEN": "token-4f9a", "PGPASSWORD": "pgpassword-7c1e"}
    with open(log, "w") as out:
        ui = subprocess.Popen([ORCHESTRATE, "ui", "--tracking-uri", tracking, "--port", str(port)], cwd=tmp_path,
                              stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert ui.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/2.0/mlflow/experiments/search"
                                            "?max_results=100", timeout=2) as r:
                    names = [e["name"] for e in json.loads(r.read())["experiments"]]
                    break
            except OSError:
                time.sleep(0.5)
        assert "kept_in_postgres" in names  # it serves the store the URL names
        started = descendants(ui.pid)
        assert started
        for pid in started:
            if (proc := process(pid)) is None or (environ := proc.environ()) is None:  # gone since
                continue
            assert password not in proc.cmdline, proc.cmdline
            assert not any(b"token-4f9a" in e or b"pgpassword-7c1e" in e for e in environ), pid
    finally:
        stop_group(ui)
    printed = log.read_text()
    assert password not in printed and f"(runs in {tracking.replace(password, '***')})" in printed


@pytest.mark.slow
@pytest.mark.parametrize("how", ["ctrl-c", "ctrl-c-early", "sighup", "sigkill", "server-killed"])  # SIGTERM: SIGHUP's
def test_ui_stops_quietly_and_its_server_with_it(how: str, tmp_path_factory: pytest.TempPathFactory,
                                                  tmp_path: Path) -> None:
    """The tour's Ctrl-C in the terminal (SIGINT to the whole foreground group) printed uvicorn's
    40-line traceback: its server was asked twice, by the terminal and again through us. Ctrl-C
    ends it quietly (exit 0); a closed terminal's SIGHUP to ``orchestrate ui`` alone (passed on as
    SIGTERM, as SIGTERM itself is) stops its server too: no process it started outlives it. Nor
    after ``kill -9`` of ``orchestrate ui``, which can pass nothing on: its server went on serving
    the port until its guard (``uiguard``) stopped it, gracefully, once the pipe between them closed.
    Nor where the server's ``mlflow`` process is killed: its uvicorn went on serving the port and
    ``orchestrate ui`` exited 247 without a word; it stops the rest of the server and says so.
    Ctrl-C while MLflow still imports (a tour) exited 0 with MLflow's 50-line traceback: it is the
    one line and exit code 130 of a Ctrl-C before the server was started."""
    project = finished_sweep(tmp_path_factory)
    # early: a Ctrl-C between the server's start and the handler that passes it on was lost where the
    # caller ignored SIGINT (CI's background job: its first run failed here), so it is started that way
    ui, port, log = start_ui(project, tmp_path, sigint_ignored=how == "ctrl-c-early")
    server: list[int] = []
    try:
        if how == "ctrl-c-early":  # once its server's process runs, seconds before it answers
            # not at its first child: MLflow's import runs `uname -p` (platform.processor) before the
            # handler is taken, and a Ctrl-C the caller ignores is lost there by design (CI's red run)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                server = descendants(ui.pid)
                if any("mlflow" in (p.cmdline if (p := process(pid)) else "") for pid in server):
                    break
                time.sleep(0.02)
            os.killpg(ui.pid, signal.SIGINT)
        else:
            # its address is printed once it answers (a newcomer's tour: "connection refused" for the 8 s
            # between the two)
            deadline = time.monotonic() + 180
            while "MLflow UI: " not in log.read_text() and ui.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as answer:  # at once
                assert answer.status == 200, log.read_text()
            wait_for_page(ui, log, port)
            server = descendants(ui.pid)
            assert server
            if how == "ctrl-c":
                os.killpg(ui.pid, signal.SIGINT)  # as the terminal sends it: to every process of the group
            elif how == "server-killed":
                (mlflow,) = [pid for pid in server if (p := process(pid)) and "mlflow ui" in p.cmdline]
                os.kill(mlflow, signal.SIGKILL)
            else:
                os.kill(ui.pid, signal.SIGHUP if how == "sighup" else signal.SIGKILL)
        code = ui.wait(timeout=60)
        deadline = time.monotonic() + 30  # after SIGKILL the guard stops the server: SIGTERM, as above
        while (left := [pid for pid in server if alive(pid)]) and how == "sigkill" and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        stop_group(ui)
        for pid in server:  # a server the test failed to stop is not left running
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    printed = log.read_text()
    assert code == {"sigkill": -signal.SIGKILL, "server-killed": 3, "ctrl-c-early": 130}.get(how, 0), printed[-3000:]
    assert left == []
    assert not any(word in printed for word in ("Traceback", "KeyboardInterrupt", "CancelledError")), printed[-3000:]
    if how == "ctrl-c-early":  # it never answered
        assert "MLflow UI: " not in printed and "orchestrate ui: interrupted (Ctrl-C); nothing was run" in printed
        return
    assert "Shutting down" in printed  # uvicorn's own graceful stop
    ended = "orchestrate ui: the MLflow server ended without being asked to (exit code -9)"
    assert (ended in printed) is (how == "server-killed"), printed[-3000:]


def test_ui_help_says_what_the_sweeps_print() -> None:
    """Every sweep prints `orchestrate ui SPEC`; the help shows that form first, as the command's
    own usage lists it."""
    from orchestrator.cli import USAGE

    helped = subprocess.run([ORCHESTRATE, "ui", "--help"], capture_output=True, text=True)
    assert helped.returncode == 0
    assert helped.stdout.startswith("usage: orchestrate ui [SPEC] [--port N] [--storage URL] [--tracking-uri URI]\n")
    assert "orchestrate ui [SPEC] [--port N]" in USAGE and "no job runner" in helped.stdout.replace("\n", " ")


def test_ui_on_a_tracking_server_saves_the_view_there_and_starts_nothing(project: Path, mlflow_server: str) -> None:
    """A scale-out tour: ``orchestrate ui --tracking-uri http://...`` (the sweep's own Browse line)
    started ``mlflow ui`` with the server's URL as its store, which printed a traceback and exit 3."""
    from mlflow.tracking import MlflowClient

    from conftest import command

    client = MlflowClient(mlflow_server)
    exp = client.create_experiment("on_server")
    client.create_run(exp, run_name="#0 bs=8", tags={"role": "trial", "status": "ok"})
    proc = command(["ui", "--tracking-uri", mlflow_server], project)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    assert proc.stdout.startswith(f"MLflow UI: {mlflow_server.rstrip('/')}/ (the tracking server serves it"), proc.stdout
    assert f"experiment 'on_server': {mlflow_server.rstrip('/')}/#/experiments/{exp}/runs?" in proc.stdout, proc.stdout
    assert "tags.role = 'trial'" in client.get_experiment(exp).tags["mlflow.sharedViewState.orchestrate"]  # the view
