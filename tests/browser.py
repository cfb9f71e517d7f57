"""Headless Chromium driven through the DevTools protocol, to see MLflow's UI as a person does:
used by tests/report/test_ui_browser.py and bench/ui_screenshot.py (the docs' screenshots). No
package needed; Debian: `apt-get install chromium`."""

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
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

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
        # its singleton socket's folder, which a stopped browser leaves behind (/tmp held 155 of
        # them), removed by close; short, as a socket's path must be (not under pytest's tmp_path)
        self._temp = tempfile.mkdtemp(prefix="chromium-")
        self.proc = subprocess.Popen(["bash", "-c", f"exec 3<&{to_browser_r} 4>&{from_browser_w}; exec {command}"],
                                     pass_fds=(to_browser_r, from_browser_w), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True,
                                     env={**os.environ, "TMPDIR": self._temp})
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
        shutil.rmtree(self._temp, ignore_errors=True)


# The runs table as the browser laid it out: per row (ag-grid splits a row between its pinned and
# its scrolled part), each cell's text, whether the cell is on the first screen (inside the
# viewport, and what the browser shows at its right end is the cell: not clipped by the grid, not
# under the assistant panel), whether its text shows whole (not cut off with an ellipsis), the run
# status mark MLflow draws in the Created cell, and the colour of the run's dot in the name cell.
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
    const text = cell.querySelector('a') || cell;
    const whole = [text, ...text.querySelectorAll('*')].every(e => e.scrollWidth <= e.clientWidth + 1)
      && text.getBoundingClientRect().right <= r.right;
    const dot = [...cell.querySelectorAll('*')].find(e => { const b = e.getBoundingClientRect();
      const bg = getComputedStyle(e).backgroundColor;
      return b.width >= 6 && b.width <= 16 && b.height >= 6 && b.height <= 16 && bg !== 'rgba(0, 0, 0, 0)'; });
    (rows[id] = rows[id] || {})[cell.getAttribute('col-id')] = {text: text.innerText.trim(), shown, mark, whole,
      color: dot ? getComputedStyle(dot).backgroundColor : null};
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


def wait_for_page(proc: subprocess.Popen, log: Path, port: int, experiment: str = "tiny_report",
                  timeout: float = 120) -> str:
    """The experiment page URL `orchestrate ui` printed, once the server answers HTTP."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"orchestrate ui exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            time.sleep(0.5)
    else:
        raise AssertionError(f"the MLflow UI did not answer on port {port} within {timeout:.0f} s:\n"
                             f"{log.read_text()[-3000:]}")
    pattern = rf"experiment '{re.escape(experiment)}': (http://127\.0\.0\.1:{port}/\S+)"
    while not (found := re.search(pattern, log.read_text())) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)  # printed once `orchestrate ui` has seen its server answer too (its own poll)
    assert found, log.read_text()
    return found.group(1)
