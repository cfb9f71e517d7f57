"""The orchestrating process stays light: no torch, no mlflow until a real run needs them."""

from __future__ import annotations

import subprocess
import sys

from conftest import ORCHESTRATE


def test_cli_import_leaves_torch_and_mlflow_out() -> None:
    code = ("import sys, orchestrator.cli, orchestrator.sweep, orchestrator.launch, orchestrator.space, "
            "orchestrator.study, orchestrator.tracking; "
            "print(sorted(m for m in ('torch', 'mlflow', 'optuna') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_help_and_dry_run_do_not_import_torch() -> None:
    code = ("import sys; from orchestrator import cli; "
            "rc = cli.main(['sweeps/bert_memory.yaml', '--dry-run']); "
            "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH', 'MLFLOW' if 'mlflow' in sys.modules else 'NO-MLFLOW')")
    from conftest import ROOT

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip().endswith("NO-TORCH NO-MLFLOW"), out.stdout
    helped = subprocess.run([ORCHESTRATE, "--help"], capture_output=True, text=True)
    assert helped.returncode == 0 and "Exit codes" in helped.stdout


def test_schema_does_not_import_torch_or_mlflow() -> None:
    """``orchestrate schema`` answers from the spec's model alone, for an editor or CI that has no
    torch installed."""
    code = ("import sys, io, contextlib; from orchestrator import cli\n"
            "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
            "    rc = cli.main(['schema']) + cli.main(['schema', '--format', 'markdown'])\n"
            "print(rc, len(out.getvalue()) > 1000, sorted(m for m in ('torch', 'mlflow', 'optuna') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0 True []", out.stdout + out.stderr
