"""`orchestrate ui` as a person uses it: start it on a finished sweep and open the experiment page
in headless Chromium, which runs MLflow's React app; check the rendered runs table and keep a
screenshot. Skipped, with the reason, where Chromium is not installed (`.ci/run` installs it).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import ORCHESTRATE, child_runs, orchestrate
from test_report import finished_sweep, png_size

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
    from orchestrator.ui import view_state

    state = view_state(params, metrics, objective, maximize)
    assert state["selectedColumns"] == columns == state["columnOrder"]
    assert state["searchFilter"] == "tags.role = 'trial'"  # flat: MLflow nests only unfiltered, by-date views
    assert state["orderByKey"] == f"metrics.`{objective}`" and state["orderByAsc"] is order
