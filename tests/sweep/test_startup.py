"""A sweep's start-up (``orchestrator/sweep/startup.py``, ``sweep/checks.py``'s ``Probe``; issue #29): the slot's fork
server answers the experiment probe, as a probe process of its own would, and then serves the
trials, so a command imports torch once. Real fork servers, real probe processes, real
experiments on the CPU (working and broken ones: ``tests/fixtures/experiments/``)."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT
from orchestrator.sweep import checks
from orchestrator.errors import SpecError
from orchestrator.launch import ForkServer, StopFlag
from orchestrator.search.space import make_plan
from orchestrator.spec.load import load_spec
from orchestrator import tempfolder, trialdir
from orchestrator.sweep.startup import PROBE_FOLDER, Startup, probe_folder

FIXTURES = ROOT / "tests" / "fixtures" / "experiments"
DIES = '''"""Dies while it is imported, after saying why."""
import os
import sys

print("the license server is unreachable", file=sys.stderr, flush=True)
os._exit(3)
'''


def spec_for(folder: Path, experiment: str, device: str = "cpu", fixed: str = "{batch_size: 4}") -> Any:
    path = folder / f"{experiment.replace('.', '_')}.yaml"
    path.write_text(textwrap.dedent(f"""\
        name: startup
        experiment: {experiment}
        device: {device}
        fixed: {fixed}
        space:
          hidden_size: [8, 16]
        search: {{sampler: grid}}
        trial: {{warmup_steps: 1, measure_steps: 1, min_measure_s: 0.0, timeout_s: 120}}
        """))
    return load_spec(path)


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> str:
    """PYTHONPATH for the probes: the broken fixtures, a module that dies at import, the repo."""
    folder = tmp_path_factory.mktemp("modules")
    (folder / "dies.py").write_text(DIES)
    return os.pathsep.join(map(str, (FIXTURES, folder, ROOT)))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, paths: str) -> Any:
    """One fork server (it imported ``experiments.faults``) for every forked probe below: a probe
    imports the experiment it is asked about itself."""
    srv = ForkServer("experiments.faults", {"PYTHONPATH": paths}, tmp_path_factory.mktemp("server") / "server.log")
    yield srv
    srv.discard()


def both_ways(spec: Any, server: Any, smoke: dict[str, Any] | None, paths: str) -> list[tuple[Any, Any]]:
    """(probe answer or the SpecError's text, smoke answer) by a probe process and by the fork server."""
    out = []
    for srv in (None, server):
        probe = checks.start_probe(spec, smoke, env={"PYTHONPATH": paths}, server=srv,
                             folder=probe_folder() if srv is not None else None)
        try:
            try:
                answer: Any = probe.result()
            except SpecError as exc:
                out.append((str(exc), None))
                continue
            out.append((answer, probe.smoke() if smoke is not None else None))
        finally:
            probe.close()
        if srv is not None:
            assert not probe.folder.exists(), "the forked probe's files were left behind"
        assert (probe.temp_dir is None) == (smoke is None)  # the smoke step's multiprocessing folder
        assert probe.temp_dir is None or not os.path.exists(probe.temp_dir), "it was left behind"
    return out


SAME = ("ok", "device", "finite", "error", "where", "function", "phase", "oom")
"""What a smoke answer says, less its duration (and the loss: not every fixture seeds its weights)."""


CASES = [  # (experiment, smoke parameters, what both ways answer)
    ("experiments.faults", {"batch_size": 2, "hidden_size": 8, "fault": "none"}, "ok"),
    ("shape_mismatch", {"batch_size": 2}, "RuntimeError: mat1 and mat2 shapes cannot be multiplied"),
    ("dies", None, "checking the experiment module failed: the license server is unreachable"),
    ("experiments.nosuch", None, "no module named 'experiments.nosuch'"),
]


@pytest.mark.parametrize(("experiment", "smoke", "expected"), CASES, ids=[c[0] for c in CASES])
def test_the_fork_server_answers_the_probe_as_a_probe_process_does(
        experiment: str, smoke: dict[str, Any] | None, expected: str, server: Any, paths: str,
        tmp_path: Path) -> None:
    spec = spec_for(tmp_path, experiment, fixed="{batch_size: 4}" if experiment == "experiments.faults" else "{}")
    (alone, alone_smoke), (forked, forked_smoke) = both_ways(spec, server, smoke, paths)
    assert forked == alone, (alone, forked)
    if expected == "ok":
        assert alone["ok"] and alone["device"] == "cpu" and alone_smoke["ok"]
    elif smoke is not None:  # the probe passes; the smoke step names the experiment's own line
        assert alone["ok"] and expected in alone_smoke["error"]
        assert forked_smoke["where"].endswith(f"/shape_mismatch.py:{_line_of('shape_mismatch', 'return self.fc2')}")
    else:
        assert expected in alone
    if smoke is not None:
        assert {k: forked_smoke.get(k) for k in SAME} == {k: alone_smoke.get(k) for k in SAME}
    assert not server.reap(), "a probe took its server down"


def _line_of(module: str, text: str) -> int:
    lines = (FIXTURES / f"{module}.py").read_text().splitlines()
    return next(i for i, ln in enumerate(lines, 1) if text in ln)


def test_a_wrong_guess_of_the_device_starts_the_servers_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``device: auto`` guessed as cuda (nvidia-smi present, say) on a machine whose torch finds
    only the CPU: the server started for the guess answers (probe and smoke step), then the runner
    is made again for the CPU, and the guessed one's server is gone. (A right guess keeps the
    server that answered for the trials: ``test_e2e``, one import in a whole sweep.)"""
    monkeypatch.chdir(tmp_path)
    spec = spec_for(tmp_path, "experiments.faults", device="auto")
    start = Startup(spec, make_plan(spec, "cuda"), {"batch_size": 2, "hidden_size": 8}, False, StopFlag())
    try:
        assert start.runner is not None, "no fork server answered"
        (server,) = start.runner.launchers[0].spares
        found = start.probe.result()
        assert found["device"] == "cpu" and start.probe.smoke()["ok"]
        assert not start.probe.folder.exists()
        slots, runner = start.ready(make_plan(spec, found["device"]))
        assert [s.name for s in slots] == ["cpu"] and server.reap()
        assert [s.env for s in runner.launchers[0].spares] == [{}]  # the CPU's own server, importing
    finally:
        start.close_runner()


def test_the_probe_folders_of_killed_orchestrators_are_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A SIGKILL during start-up leaves the forked probe's folder (outside the project); the next
    start removes those whose orchestrator is gone, and no other."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import subprocess
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # TMPDIR read again
    monkeypatch.setattr(tempfolder, "_swept", False)  # as in a new orchestrator
    gone = subprocess.Popen(["true"])  # a pid that was an orchestrate's, and is gone
    gone.wait()
    left = tmp_path / f"{PROBE_FOLDER}{gone.pid}-abc"
    alive = tmp_path / f"{PROBE_FOLDER}{os.getppid()}-def"
    other = tmp_path / f"{PROBE_FOLDER}notapid"
    for folder in (left, alive, other):
        folder.mkdir()
        (folder / "server.log").write_text("")
    # and the trials' multiprocessing folders; multiprocessing's own (no pid in the name) are not touched
    trials_left, python_own = tmp_path / f"pymp-{gone.pid}-abcdefgh", tmp_path / "pymp-ab_c1234"
    for folder in (trials_left, python_own):
        folder.mkdir()
        (folder / "listener-x").write_text("")
    mine = probe_folder()
    assert mine.parent == tmp_path and mine.name.startswith(f"{PROBE_FOLDER}{os.getpid()}-")
    assert not left.exists() and alive.exists() and other.exists()
    assert not trials_left.exists() and python_own.exists()
    made = Path(trialdir.multiprocessing_folder())
    assert made.parent == tmp_path and made.name.startswith(f"pymp-{os.getpid()}-")


def test_the_first_trials_processes_are_forked_once_the_probe_has_its_device(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The slots' first trial processes are prepared once the probe has answered, not beside it:
    the host's driver initialises CUDA for one process at a time (``docs/gpu/contexts_probe.py``),
    and the probe's initialisation, which the smoke step and the stores wait for, would queue
    behind theirs. (``ORCHESTRATE_TEST_PREPARE_CPU``: the CPU prepares too, to run the path.)"""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ORCHESTRATE_TEST_PREPARE_CPU", "1")
    spec = spec_for(tmp_path, "experiments.faults", device="cpu")
    start = Startup(spec, make_plan(spec, "cpu"), {"batch_size": 2, "hidden_size": 8}, False, StopFlag())
    try:
        assert start.runner is not None, "no fork server answered"
        (launcher,) = start.runner.launchers
        assert launcher.prepared == [] and not start.prepared  # the probe alone, first
        found = start.probe.result()
        start.probe_answered("cuda")  # another device than the guess: its own servers come later (ready)
        assert launcher.prepared == []
        start.probe_answered(found["device"])
        (first,) = launcher.prepared
        assert start.prepared and first.prepared and first.device == "cpu"
        assert start.probe.smoke()["ok"]
        slots, runner = start.ready(make_plan(spec, found["device"]))
        assert runner is start.runner and launcher.prepared == [first]  # kept, not asked for twice
    finally:
        start.close_runner()
