"""The smoke step (issue #13, item 3): ``python -m orchestrator.harness.smoke`` in a real
subprocess, on the CPU, against real broken experiments (``tests/fixtures/experiments/``) and a
working one: a failure is one ``SMOKE`` line with the experiment's own error and its own
file:line, found in seconds; a working experiment trains one step."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "experiments"


def smoke(experiment: str, params: dict[str, Any], device: str = "cpu", cwd: Path = ROOT,
          timeout: float = 120) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """Run the entry point as the orchestrator will: a fresh interpreter, the fixtures importable
    through PYTHONPATH (as for a trial subprocess), one JSON argument."""
    request = json.dumps({"experiment": experiment, "params": params, "device": device})
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests"), "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run([sys.executable, "-m", "orchestrator.harness.smoke", request], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("SMOKE ")]
    assert len(lines) == 1, (proc.stdout, proc.stderr)
    return proc, json.loads(lines[0][len("SMOKE "):])


def line_of(path: Path, text: str) -> int:
    """The 1-based line of the first line of ``path`` containing ``text`` (so the test follows
    the fixture if it is edited)."""
    return next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if text in ln)


BROKEN = [
    # (module, expected error line, the fixture line it must point at, function, phase)
    ("nonscalar_loss", "ValueError: the loss function returned a tensor of shape [2], not a scalar: reduce it over "
     "the batch (.mean() or .sum())", "def per_sample_loss", "per_sample_loss", "warmup"),
    ("build_fails", "KeyError: 'depth'", 'params["depth"]', "build", "build"),
    ("shape_mismatch", "RuntimeError: mat1 and mat2 shapes cannot be multiplied (2x32 and 64x4)",
     "return self.fc2(hidden)", "forward", "warmup"),
]


@pytest.mark.parametrize("module, error, line_text, function, phase", BROKEN, ids=[b[0] for b in BROKEN])
def test_a_broken_experiment_is_one_line_with_its_own_error_and_file_line(
        module: str, error: str, line_text: str, function: str, phase: str, tmp_path: Path) -> None:
    # One of them from outside the project folder: then `where` is an absolute path.
    outside = module == "shape_mismatch"
    proc, result = smoke(f"fixtures.experiments.{module}", {"batch_size": 2}, cwd=tmp_path if outside else ROOT)

    assert proc.returncode == 1
    assert result["ok"] is False
    assert result["error"] == error
    path = FIXTURES / f"{module}.py"
    shown = path if outside else path.relative_to(ROOT)
    assert result["where"] == f"{shown}:{line_of(path, line_text)}"
    assert result["function"] == function
    assert result["phase"] == phase
    assert result["oom"] is False
    assert "Traceback" in proc.stderr  # the full story stays available for a log
    if module == "nonscalar_loss":
        # No frame of the experiment is on the stack when the harness refuses the loss (torch's backward()
        # did, before: it takes a shape [1], a per-sample loss at batch 1): `where` is the loss function's
        # def line, and the note says so.
        assert "orchestrator/harness/train.py" in result["frame"]
        assert "the loss is a scalar" in result["note"]
    else:
        assert "note" not in result


def test_a_missing_module_fails_at_import() -> None:
    _, result = smoke("fixtures.experiments.no_such_module", {"batch_size": 2})

    assert result["ok"] is False
    assert result["error"] == "ModuleNotFoundError: No module named 'fixtures.experiments.no_such_module'"
    assert result["phase"] == "import"
    assert result["where"] is None


def test_a_working_experiment_trains_one_step_without_its_memory_cap() -> None:
    """experiments.mlp with a tiny batch: one step, a finite loss near ln(10) (10 classes). The
    1 MiB memory cap would fail the step if it were applied; the smoke step leaves caps out."""
    proc, result = smoke("experiments.mlp", {"batch_size": 4, "hidden_size": 32, "num_layers": 1,
                                             "grad_accum_steps": 4, "cpu_memory_limit_gib": 0.001})

    assert proc.returncode == 0, proc.stderr
    assert result["ok"] is True and result["device"] == "cpu" and result["finite"] is True
    assert 1.0 < result["loss"] < 4.0
    assert result["seconds"] < 60


@pytest.mark.parametrize("argument", ["", "not json", '{"params": {}}', '{"experiment": 3}'])
def test_a_malformed_argument_is_a_usage_line_and_exit_2(argument: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "orchestrator.harness.smoke", argument], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)

    assert proc.returncode == 2
    assert proc.stderr.startswith("usage: python -m orchestrator.harness.smoke")
    assert "SMOKE" not in proc.stdout


SMOKE_PARAMS = [
    # (space and fixed of a spec, what the smoke step runs: the first configuration, a batch of at
    # most 2, one micro-batch per step, no memory caps, no compile)
    ("space: {batch_size: [64, 8, 32], dtype: [bfloat16, float32]}\nfixed: {cpu_memory_limit_gib: 0.5, compile: true}",
     {"batch_size": 2, "dtype": "bfloat16", "device": "cpu"}),
    ("space: {batch_size: [8, 1]}", {"batch_size": 1, "device": "cpu"}),
    ("space: {batch_size: {low: 16, high: 256, step: 16}, lr: {low: 1.0e-4, high: 1.0e-2, log: true}}\n"
     "search: {n_trials: 3}", {"batch_size": 2, "lr": 1e-4, "device": "cpu"}),
    ("space: {effective_batch_size: [64, 128], batch_size: [32, 16]}",
     {"effective_batch_size": 64, "batch_size": 2, "grad_accum_steps": 1, "device": "cpu"}),
    ("space: {memory_fraction: [0.5, 0.9], batch_size: [4]}\nfixed: {cpu_memory_limit_gib: 2}",
     {"batch_size": 2, "device": "cpu"}),  # memory_fraction is not read on the CPU: not in the plan
]


@pytest.mark.parametrize("body, expected", SMOKE_PARAMS,
                         ids=["choices", "batch-of-1", "ranges", "effective-batch", "caps"])
def test_the_smoke_step_runs_the_first_configuration_small_and_without_caps(
        body: str, expected: dict[str, Any], tmp_path: Path) -> None:
    """``checks.smoke_params``: what the CLI hands the probe (no torch in this process)."""
    from orchestrator.sweep.checks import smoke_params
    from orchestrator.search.space import make_plan
    from orchestrator.spec.load import load_spec

    path = tmp_path / "spec.yaml"
    path.write_text(f"name: s\nexperiment: experiments.mlp\ndevice: cpu\n{body}\n")
    spec = load_spec(path)

    assert smoke_params(spec, make_plan(spec, "cpu")) == expected


def test_a_per_sample_loss_at_batch_1_is_refused_too() -> None:
    """An experiment tour: at batch 1 a per-sample loss has shape [1], which backward() takes; the
    smoke step (the smallest batch) passed, the batch-1 trial ranked best, and batch 8 failed."""
    _, result = smoke("fixtures.experiments.nonscalar_loss", {"batch_size": 1})
    assert result["ok"] is False and result["error"] == (
        "ValueError: the loss function returned a tensor of shape [1], not a scalar: reduce it over the batch "
        "(.mean() or .sum())")
