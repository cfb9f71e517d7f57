"""Every command the tool prints runs as printed, pasted into a shell in the same folder, for a
user who followed the README without activating the venv: `.venv/bin/orchestrate` is typed, and
`orchestrate` is not on PATH (the newcomer's exit 127). The folder is a clean one holding the spec
and `.venv` (a link to this venv)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import write_spec

pytestmark = pytest.mark.slow

SPEC = """
    name: pasted
    experiment: experiments.mlp
    device: cpu
    fixed:
      hidden_size: 16
      num_layers: 1
    space:
      batch_size: [8, 16]
    search:
      sampler: grid
    trial:
      warmup_steps: 1
      measure_steps: 2
      min_measure_s: 0.05
    """
VENV_BIN = Path(sys.executable).parent


def shell(line: str, cwd: Path, answer: str = "", timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``line`` run by bash in ``cwd``, as pasted, without the venv on PATH."""
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if Path(p) != VENV_BIN)
    return subprocess.run(["bash", "-c", line], cwd=cwd, capture_output=True, text=True, input=answer,
                          timeout=timeout, env={**os.environ, "PATH": path})


def printed(text: str, label: str) -> str:
    """The command after ``label`` (``Resume:``), without the note that may follow it."""
    line = next(ln for ln in text.splitlines() if ln.startswith(label))
    return line[len(label):].strip().split("   (")[0]


def test_every_printed_command_pastes(tmp_path: Path) -> None:
    (tmp_path / ".venv").symlink_to(VENV_BIN.parent)
    spec = write_spec(tmp_path, SPEC)
    assert shell("orchestrate --help", tmp_path).returncode == 127  # as for the newcomer: not on PATH
    first = shell(".venv/bin/orchestrate spec.yaml", tmp_path)
    assert first.returncode == 0, first.stderr
    resume, report = printed(first.stdout, "Resume:"), printed(first.stdout, "Report:")
    browse = printed(first.stdout, "Browse:")
    mlflow_ui = re.search(r"\(or: (.*)\)$", next(ln for ln in first.stdout.splitlines() if ln.startswith("Browse:")))
    assert resume == ".venv/bin/orchestrate spec.yaml" and report == ".venv/bin/orchestrate report spec.yaml"
    assert browse == ".venv/bin/orchestrate ui spec.yaml"

    again = shell(resume, tmp_path)
    assert again.returncode == 0 and "2 of 2 trials have a result" in again.stdout, again.stderr
    shown = shell(report, tmp_path)
    assert shown.returncode == 0 and "batch_size" in shown.stdout, shown.stderr
    assert mlflow_ui is not None and mlflow_ui.group(1).startswith(".venv/bin/mlflow ui --backend-store-uri sqlite:///")
    assert shell(f"type -P {mlflow_ui.group(1).split()[0]}", tmp_path).returncode == 0  # found, executable
    browse_pastes(browse, tmp_path)

    # check's repair line, after a run is changed by hand
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    run = client.search_runs([client.get_experiment_by_name("pasted").experiment_id], "tags.role = 'trial'")[0]
    client.set_terminated(run.info.run_id, "RUNNING")
    found = shell(".venv/bin/orchestrate check spec.yaml", tmp_path)
    assert found.returncode == 1
    repair = found.stdout.strip().splitlines()[-1].split("Repair: ")[1]
    assert repair == ".venv/bin/orchestrate check spec.yaml --repair"
    assert shell(repair, tmp_path).returncode == 0

    # the edited spec's advice: delete, pasted (and answered), then the spec runs anew
    spec.write_text(spec.read_text().replace("hidden_size: 16", "hidden_size: 24"))
    refused = shell(".venv/bin/orchestrate spec.yaml", tmp_path)
    assert refused.returncode == 2
    delete = refused.stderr.strip().split("trial folders: ")[1]
    assert delete == ".venv/bin/orchestrate delete spec.yaml"
    deleted = shell(delete, tmp_path, answer="y\n")
    assert deleted.returncode == 0 and "Deleted study 'pasted'" in deleted.stdout, deleted.stdout + deleted.stderr
    anew = shell(resume, tmp_path)
    assert anew.returncode == 0 and "2 of 2 trials have a result" in anew.stdout, anew.stderr


def browse_pastes(line: str, cwd: Path) -> None:
    """``orchestrate ui SPEC`` as printed: its server answers (or the default port is taken by
    another program on this machine, which it says in one line: it ran either way)."""
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if Path(p) != VENV_BIN)
    log = cwd / "ui.log"
    with open(log, "w") as out:
        proc: Any = subprocess.Popen(["bash", "-c", f"exec {line}"], cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                     env={**os.environ, "PATH": path}, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            text = log.read_text()
            if "experiment 'pasted': http://127.0.0.1:5000/" in text or "port 5000 on 127.0.0.1 is in use" in text:
                break
            assert proc.poll() is None, text
            time.sleep(0.5)
        else:
            pytest.fail(log.read_text())
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
