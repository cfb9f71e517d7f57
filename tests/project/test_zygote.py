"""The tests' forked ``orchestrate`` (``tests/zygote.py``) answers as the installed command does:
the same exit code and output, the environment and stdin given, ``PYTHONPATH`` applied, a
timeout that kills it, and nothing of it left running; started beside the test (``popen``), it
is a ``Popen`` of its own: its pid and session, its pipes, Ctrl-C's exit and the same output."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

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


HANG = """
    name: hang
    experiment: experiments.faults
    device: cpu
    fixed: {batch_size: 8}
    space: {fault: [hang]}
    search: {sampler: grid}
    trial: {warmup_steps: 1, measure_steps: 2, min_measure_s: 0.0, timeout_s: 120}
    """


def test_a_command_started_beside_the_test_is_a_popen_of_its_own(zygote: Zygote, tmp_path: Path) -> None:
    """The same output on merged pipes as the installed command's (a spec error, written through
    as with PYTHONUNBUFFERED); a sweep in a session of its own, its pid sent SIGTERM: the exit code
    and the line the installed command gives (SIGINT is not used: a CI runner in the background
    hands its processes SIGINT ignored, the server and its children too); ``communicate``'s
    timeout, then the rest read on the next call; nothing left behind."""
    write_spec(tmp_path, BROKEN, "broken.yaml")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    assert zygote.usable(env)
    real = subprocess.run([ORCHESTRATE, "broken.yaml", "--dry-run"], cwd=tmp_path, text=True, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    forked = zygote.popen(["broken.yaml", "--dry-run"], tmp_path, env, merge_stderr=True)
    assert forked.communicate(timeout=120) == (real.stdout, None) and forked.returncode == real.returncode == 2

    endings = []
    for way in ("installed", "forked"):
        folder = tmp_path / way
        folder.mkdir()
        spec = write_spec(folder, HANG)
        if way == "installed":
            proc: Any = subprocess.Popen([ORCHESTRATE, str(spec)], cwd=folder, text=True, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, env=env, start_new_session=True)
        else:
            proc = zygote.popen([str(spec)], folder, env, new_session=True)
            assert os.getpgid(proc.pid) == proc.pid  # its own session and group
        deadline = time.monotonic() + 60
        while not list(folder.glob("mlruns/.trials/*/trial-0000/config.json")) and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(subprocess.TimeoutExpired):
            proc.communicate(timeout=0.5)  # the trial hangs: nothing ends yet
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        endings.append((proc.returncode, err.replace(way, "WAY").strip().splitlines()[-1]))
        assert left_behind(folder, wait_s=15) == []
    assert endings[0] == endings[1] and endings[0][0] == 143 and "SIGTERM" in endings[0][1], endings
