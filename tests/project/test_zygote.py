"""The tests' forked ``orchestrate`` (``tests/zygote.py``) answers as the installed command does:
the same exit code and output, the environment and stdin given, ``PYTHONPATH`` applied, a
timeout that kills it, and nothing of it left running."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from conftest import ORCHESTRATE, ROOT, left_behind, write_spec
from zygote import Zygote

MINE = """
    name: mine
    experiment: mine_exp
    device: cpu
    space:
      batch_size: [8, 16]
    """

BROKEN = """
    name: broken
    experiment: experiments.mlp
    device: cpu
    space:
      batch_size: [8, -1]
    objective: {metric: throughput}
    """


@pytest.fixture(scope="module")
def zygote() -> Zygote:
    z = Zygote(ORCHESTRATE)
    assert z.usable(dict(os.environ))
    yield z
    z.close()


def installed(args: list[str], cwd: Path, env: dict[str, str], answer: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([ORCHESTRATE, *args], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env=env, input=answer)


def test_forked_commands_answer_as_the_installed_one(zygote: Zygote, tmp_path: Path) -> None:
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "mine_exp.py").write_text((ROOT / "experiments" / "mlp.py").read_text())
    write_spec(tmp_path, MINE, "mine.yaml")
    write_spec(tmp_path, BROKEN, "broken.yaml")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "lib"), "PYTHONDONTWRITEBYTECODE": "1"}
    assert zygote.usable(env)
    cases = [(["mine.yaml", "--dry-run"], ""), (["broken.yaml", "--dry-run"], ""), (["best", "mine.yaml"], ""),
             (["delete", "mine.yaml"], "n\n"), (["--version"], "")]
    for args, answer in cases:
        real = installed(args, tmp_path, env, answer)
        forked = zygote.run(args, tmp_path, env, 120, answer)
        assert (forked.returncode, forked.stdout, forked.stderr) == (real.returncode, real.stdout, real.stderr), args
    assert "mine_exp" in installed(["mine.yaml", "--dry-run"], tmp_path, env).stdout  # found on PYTHONPATH
    assert not (tmp_path / "lib" / "__pycache__").exists()  # PYTHONDONTWRITEBYTECODE applied
    codes = {tuple(a): zygote.run(a, tmp_path, env, 120, s).returncode for a, s in cases}
    assert codes[("broken.yaml", "--dry-run")] == 2 and codes[("mine.yaml", "--dry-run")] == 0


def test_a_startup_variable_it_cannot_apply_sends_the_caller_to_a_new_process(zygote: Zygote) -> None:
    assert not zygote.usable({**os.environ, "PYTHONHASHSEED": "7" if os.environ.get("PYTHONHASHSEED") != "7" else "8"})
    assert zygote.usable({**os.environ, "PYTHONPATH": "/nowhere"})


def test_a_timeout_kills_the_forked_command_and_leaves_nothing(zygote: Zygote, tmp_path: Path) -> None:
    spec = write_spec(tmp_path, """
        name: slow
        experiment: experiments.mlp
        device: cpu
        space:
          batch_size: [8]
        trial:
          warmup_steps: 1
          measure_steps: 2
          min_measure_s: 30
        """)
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        zygote.run([str(spec)], tmp_path, dict(os.environ), 8)
    assert time.monotonic() - started < 40
    assert zygote.usable(dict(os.environ))  # the server lives on
    assert left_behind(tmp_path, wait_s=15) == []
