"""`orchestrate ui` as a person uses it: start it on a finished sweep and open the experiment page
in headless Chromium, which runs MLflow's React app; check the rendered runs table and keep a
screenshot. Skipped, with the reason, where Chromium is not installed (`.ci/run` installs it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from conftest import ORCHESTRATE, child_runs, orchestrate
from report.test_report import finished_sweep, png_size

CHROMIUM = shutil.which("chromium")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--virtual-time-budget=15000", "--window-size=1600,1000"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_group(proc: subprocess.Popen) -> None:
    """End a process we started in its own session, and everything it started."""
    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def wait_for_page(proc: subprocess.Popen, log: Path, port: int, timeout: float = 120) -> str:
    """The experiment page URL `orchestrate ui` printed, once the server answers HTTP."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"orchestrate ui exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            time.sleep(0.5)
    else:
        pytest.fail(f"the MLflow UI did not answer on port {port} within {timeout:.0f} s:\n{log.read_text()[-3000:]}")
    found = re.search(rf"experiment 'tiny_report': (http://127\.0\.0\.1:{port}/\S+)", log.read_text())
    assert found, log.read_text()
    return found.group(1)


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install chromium; "
                                             ".ci/run installs it)")
def test_mlflow_ui_shows_the_runs_with_status_and_metrics(tmp_path_factory: pytest.TempPathFactory,
                                                          tmp_path: Path) -> None:
    project = finished_sweep(tmp_path_factory)
    port = free_port()
    log = tmp_path / "ui.log"
    with open(log, "w") as out:
        ui = subprocess.Popen([ORCHESTRATE, "ui", "--port", str(port)], cwd=project, stdout=out,
                              stderr=subprocess.STDOUT, start_new_session=True)
    try:
        url = wait_for_page(ui, log, port)
        assert url.endswith("/runs?workflowType=machine_learning&viewStateShareKey=orchestrate")
        shot = tmp_path / "mlflow_ui.png"
        browser = subprocess.Popen([CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium'}",
                                    f"--screenshot={shot}", "--dump-dom", url], stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL, text=True, start_new_session=True)
        try:
            dom, _ = browser.communicate(timeout=120)
        finally:
            stop_group(browser)
    finally:
        stop_group(ui)

    runs = child_runs(project, "tiny_report")
    assert len(runs) == 6
    for run in runs:  # every trial's run, flat (not folded under the parent), with its status
        assert f">{run.info.run_name}<" in dom, run.info.run_name
    statuses = [r.data.tags["status"] for r in runs]
    assert statuses.count("ok") == 4 and "oom" in statuses
    for status in set(statuses):  # the status tag is a column
        assert dom.count(f">{status}<") >= statuses.count(status), status
    for metric in ("samples_per_s", "peak_memory_gib", "step_time_ms_p50"):
        assert metric in dom, metric
    best = max((r for r in runs if "samples_per_s" in r.data.metrics), key=lambda r: r.data.metrics["samples_per_s"])
    assert repr(best.data.metrics["samples_per_s"])[:6] in dom  # a metric value, as the table renders it
    width, height = png_size(shot)
    assert (width, height) == (1600, 1000) and shot.stat().st_size > 50_000
    print(f"screenshot: {shot}")


def test_ui_without_runs_says_one_line(tmp_path: Path) -> None:
    proc = orchestrate(["ui", "--port", str(free_port())], tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == f"orchestrate: no runs yet in sqlite:///{tmp_path}/mlruns/mlflow.db; " \
                          "run a sweep first (orchestrate SPEC)\n"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("params, metrics, objective, maximize, columns, order", [
    ([{"batch_size": "8", "dtype": "float32", "model": "tiny"}, {"batch_size": "16", "dtype": "float32", "model": "tiny"}],
     {"samples_per_s", "peak_memory_gib", "loss"}, "samples_per_s", True,
     ["tags.`status`", "params.`batch_size`", "metrics.`samples_per_s`", "metrics.`peak_memory_gib`"], False),
    ([{"dtype": "float32"}, {"dtype": "bfloat16"}], {"samples_per_s", "step_time_ms_p50"}, "step_time_ms_p50", False,
     ["tags.`status`", "params.`dtype`", "metrics.`step_time_ms_p50`", "metrics.`samples_per_s`"], True),
    ([{"batch_size": "8"}], set(), "samples_per_s", True, ["tags.`status`"], False),
])
def test_saved_view_shows_the_swept_parameters_and_headline_metrics(params, metrics, objective, maximize,
                                                                   columns, order) -> None:
    from orchestrator.report.ui import view_state

    state = view_state(params, metrics, objective, maximize)
    assert state["selectedColumns"] == columns == state["columnOrder"]
    assert state["searchFilter"] == "tags.role = 'trial'"  # flat: MLflow nests only unfiltered, by-date views
    assert state["orderByKey"] == f"metrics.`{objective}`" and state["orderByAsc"] is order


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


def descendants(pid: int) -> list[int]:
    """Every live process started (directly or not) by ``pid`` (Linux /proc)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = [], [pid]
    while frontier:
        children = [p for p, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


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
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                environ = Path(f"/proc/{pid}/environ").read_bytes()
            except OSError:  # gone since
                continue
            assert password.encode() not in cmdline, cmdline
            assert b"token-4f9a" not in environ and b"pgpassword-7c1e" not in environ, pid
    finally:
        stop_group(ui)
    printed = log.read_text()
    assert password not in printed and f"(runs in {tracking.replace(password, '***')})" in printed
