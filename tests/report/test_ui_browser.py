"""`orchestrate ui` as a person uses it: start it on a finished sweep and open the experiment page
in headless Chromium, which runs MLflow's React app; check the rendered runs table and keep a
screenshot. Skipped, with the reason, where Chromium is not installed (`.ci/run` installs it).
"""

from __future__ import annotations

import base64
import json
import os
import re
import select
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
                  "--disable-dev-shm-usage", "--remote-debugging-pipe"]
SCREEN = (1400, 900)  # the laptop screen: MLflow's sidebar and assistant panel take ~560 px of it


class Browser:
    """Headless Chromium driven through the DevTools protocol on a pipe (``--remote-debugging-pipe``:
    JSON messages ending in a NUL byte, commands on the browser's fd 3, answers on its fd 4), so
    that the test reads the page's geometry as the browser laid it out. No package needed."""

    def __init__(self, profile: Path) -> None:
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        command = " ".join([CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank"])
        self.proc = subprocess.Popen(["bash", "-c", f"exec 3<&{to_browser_r} 4>&{from_browser_w}; exec {command}"],
                                     pass_fds=(to_browser_r, from_browser_w), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer, self._id, self.session = b"", 0, None

    def send(self, method: str, params: dict[str, Any] | None = None, timeout: float = 60) -> dict[str, Any]:
        self._id += 1
        message = {"id": self._id, "method": method, "params": params or {}}
        if self.session is not None and not method.startswith(("Target.", "Browser.")):
            message["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\0", 1)
                answer = json.loads(raw)
                if answer.get("id") == self._id:
                    assert "error" not in answer, (method, answer["error"])
                    return answer["result"]
            left = deadline - time.monotonic()
            assert left > 0 and select.select([self._from_browser], [], [], left)[0], f"{method}: no answer"
            chunk = os.read(self._from_browser, 1 << 20)
            assert chunk, "the browser closed its pipe"
            self._buffer += chunk

    def open(self, url: str, width: int, height: int) -> None:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1,
                                                         "mobile": False})
        self.send("Page.navigate", {"url": url})

    def evaluate(self, expression: str) -> Any:
        return self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})["result"].get("value")

    def screenshot(self, path: Path) -> None:
        path.write_bytes(base64.b64decode(self.send("Page.captureScreenshot", {"format": "png"})["data"]))

    def close(self) -> None:
        os.close(self._to_browser)
        os.close(self._from_browser)
        stop_group(self.proc)


# The runs table as the browser laid it out: per row (ag-grid splits a row between its pinned and
# its scrolled part), each cell's text, whether the cell is on the first screen (inside the
# viewport, and what the browser shows at its right end is the cell: not clipped by the grid, not
# under the assistant panel), and the run status mark MLflow draws in the Created cell.
TABLE_JS = """(() => {
  const rows = {};
  for (const cell of document.querySelectorAll('.ag-row[row-id] .ag-cell[col-id]')) {
    const id = cell.closest('.ag-row').getAttribute('row-id');
    const r = cell.getBoundingClientRect();
    const x = r.right - 4, y = (r.top + r.bottom) / 2;
    const shown = r.width > 8 && r.left >= 0 && r.right <= innerWidth && r.bottom <= innerHeight
      && cell.contains(document.elementFromPoint(x, y));
    const svg = cell.querySelector('svg');
    const mark = svg ? [...svg.querySelectorAll('path')].map(p => p.getAttribute('d')).join('|')
      + ' ' + getComputedStyle(svg).color : null;
    (rows[id] = rows[id] || {})[cell.getAttribute('col-id')] = {text: (cell.querySelector('a') || cell).innerText.trim(), shown, mark};
  }
  return {width: innerWidth, height: innerHeight, rows: Object.values(rows)};
})()"""


def read_table(browser: Browser, n_rows: int, timeout: float = 120) -> dict[str, Any]:
    """The table once every run's row is drawn with its metrics (MLflow's app loads in steps)."""
    deadline = time.monotonic() + timeout
    while True:
        table = browser.evaluate(TABLE_JS) or {"rows": []}
        rows = [r for r in table["rows"] if r.get("attributes.`Run Name`", {}).get("text")]
        if len(rows) >= n_rows and all("tags.`status`" in r for r in rows):
            time.sleep(1)  # let the layout settle (column widths, the assistant panel)
            table = browser.evaluate(TABLE_JS)
            table["rows"] = [r for r in table["rows"] if r.get("attributes.`Run Name`", {}).get("text")]
            return table
        assert time.monotonic() < deadline, f"the runs table did not render {n_rows} rows: {table}"
        time.sleep(0.5)


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
def test_mlflow_ui_answers_on_the_first_screen(tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> None:
    """At 1400 x 900, with MLflow's sidebar and its assistant panel open (it opens itself on a
    local server's first visit), each trial's status, samples_per_s and peak memory are on the first
    screen beside its name and its swept parameter; out-of-memory trials carry the same run mark as
    measured ones (FINISHED), not MLflow's failure mark; the best trial is the first row."""
    project = finished_sweep(tmp_path_factory)
    port = free_port()
    log = tmp_path / "ui.log"
    with open(log, "w") as out:
        ui = subprocess.Popen([ORCHESTRATE, "ui", "--port", str(port)], cwd=project, stdout=out,
                              stderr=subprocess.STDOUT, start_new_session=True)
    shot = tmp_path / "mlflow_ui.png"
    try:
        url = wait_for_page(ui, log, port)
        assert url.endswith("/runs?workflowType=machine_learning&viewStateShareKey=orchestrate")
        browser = Browser(tmp_path / "chromium")
        try:
            browser.open(url, *SCREEN)
            table = read_table(browser, 6)
            browser.screenshot(shot)
        finally:
            browser.close()
    finally:
        stop_group(ui)

    runs = {r.info.run_name: r for r in child_runs(project, "tiny_report")}
    assert (table["width"], table["height"]) == SCREEN
    rows = {row["attributes.`Run Name`"]["text"]: row for row in table["rows"]}
    assert set(rows) == set(runs)  # every trial's run, flat (not folded under the parent)
    statuses = {name: run.data.tags["status"] for name, run in runs.items()}
    assert sorted(statuses.values()).count("ok") == 4 and "oom" in statuses.values()
    first_screen = ["attributes.`Run Name`", "tags.`status`", "metrics.`samples_per_s`", "metrics.`peak_memory_gib`",
                    "params.`batch_size`"]
    for name, row in rows.items():
        missing = [c for c in first_screen if not row.get(c, {}).get("shown")]
        assert not missing, f"{name}: not on the first screen: {missing}\n{row}"
        assert row["tags.`status`"]["text"] == statuses[name]
        assert row["params.`batch_size`"]["text"] == runs[name].data.params["batch_size"]
        assert runs[name].info.status == "FINISHED", (name, runs[name].info.status)
    best = max((n for n in runs if "samples_per_s" in runs[n].data.metrics), key=lambda n: runs[n].data.metrics["samples_per_s"])
    assert table["rows"][0]["attributes.`Run Name`"]["text"] == best  # best first
    assert rows[best]["metrics.`samples_per_s`"]["text"][:5] == repr(runs[best].data.metrics["samples_per_s"])[:5]
    marks = {statuses[n]: row["runDateAndNestInfo"]["mark"] for n, row in rows.items()}
    assert marks["ok"] and marks["oom"] == marks["ok"]  # no failure mark on a trial that ran out of memory
    width, height = png_size(shot)
    assert (width, height) == SCREEN and shot.stat().st_size > 50_000
    print(f"screenshot: {shot}")


def test_ui_without_runs_says_one_line(tmp_path: Path) -> None:
    proc = orchestrate(["ui", "--port", str(free_port())], tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == f"orchestrate: no runs yet in sqlite:///{tmp_path}/mlruns/mlflow.db; " \
                          "run a sweep first (orchestrate SPEC)\n"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("params, metrics, objective, maximize, columns, order", [
    ([{"batch_size": "8", "dtype": "float32", "model": "tiny"}, {"batch_size": "16", "dtype": "float32", "model": "tiny"}],
     {"samples_per_s", "peak_memory_gib", "loss", "step_time_ms_p50"}, "samples_per_s", True,
     ["tags.`status`", "metrics.`samples_per_s`", "metrics.`peak_memory_gib`", "params.`batch_size`",
      "metrics.`step_time_ms_p50`"], False),
    ([{"dtype": "float32"}, {"dtype": "bfloat16"}], {"samples_per_s", "step_time_ms_p50"}, "step_time_ms_p50", False,
     ["tags.`status`", "metrics.`step_time_ms_p50`", "metrics.`samples_per_s`", "params.`dtype`"], True),
    ([{"batch_size": "8"}], set(), "samples_per_s", True, ["tags.`status`"], False),
])
def test_saved_view_puts_the_answer_first(params, metrics, objective, maximize, columns, order) -> None:
    from orchestrator.report.ui import view_state

    state = view_state(params, metrics, objective, maximize)
    assert state["selectedColumns"] == columns
    assert state["columnOrder"] == ["attributes.`Run Name`", "runDateAndNestInfo", *columns]  # MLflow's pinned two first
    assert set(state["columnWidths"]) == set(state["columnOrder"])  # MLflow applies widths to ordered columns only
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
