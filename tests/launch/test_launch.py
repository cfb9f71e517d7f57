"""Pre-started trial interpreters (``orchestrator.launch``): real processes, real torch on the CPU.

The rules under test: a trial is given to a pre-started interpreter only when the interpreter's
environment equals the trial's (allocators read their settings once); the next trial of a slot
gets its configuration only after the previous process has exited; no interpreter computes
during a timed window; and nothing touches the device before its configuration arrives. Each
holds for both kinds of spare: a fork server (Linux: one import, a forked process per trial) and
an interpreter per trial (macOS, or ``ORCHESTRATE_FORK=0``)."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.harness.forkserver import OOM_SCORE_ADJ
from orchestrator.harness.prepared import PREPARE_FAILED
from orchestrator.protocol import TrialSteps, config_of
from orchestrator.launch import (ForkServer, Forked, Host, Interpreter, SlotLauncher, TrialProcess, cpu_seconds, launch_trial,
                                 wait_for_activity)

pytestmark = pytest.mark.slow
LINUX = sys.platform.startswith("linux")


@pytest.fixture(params=[pytest.param(True, id="fork-server", marks=pytest.mark.skipif(not LINUX, reason="Linux only")),
                        pytest.param(False, id="interpreter-per-trial")])
def fork(request: pytest.FixtureRequest) -> bool:
    return request.param

CONFIG = config_of({"experiment": "experiments.mlp", "not_applied": {},
                   "params": {"device": "cpu", "batch_size": 8, "in_features": 8, "hidden_size": 16, "num_layers": 1},
                   "trial": {"warmup_steps": 1, "measure_steps": 3, "min_measure_s": 0.3}})


def run_to_end(launcher: SlotLauncher, number: int, trial_dir: Path, env: dict[str, str]) -> dict:
    while not launcher.idle:
        wait_for_activity([launcher])
        launcher.tick()
    run = launcher.start(replace(CONFIG, trial_number=number), trial_dir, env, 120, [env])
    while not run.exited:
        wait_for_activity([launcher])
        launcher.tick()
    launched = run.launched()
    assert launched.outcome.status == "ok", launched.outcome.detail
    result = json.loads((trial_dir / "result.json").read_text())
    result["_run"] = run
    return result


def test_a_prestarted_interpreter_is_used_only_for_the_environment_it_was_started_with(
        tmp_path: Path, fork: bool) -> None:
    launcher = SlotLauncher("experiments.mlp", {}, None, tmp_path, None, prestart=1, fork=fork)
    try:
        first = run_to_end(launcher, 0, tmp_path / "t0", {})  # cold; leaves one spare with env {}
        assert len(launcher.spares) == 1 and launcher.spares[0].env == {}
        same = run_to_end(launcher, 1, tmp_path / "t1", {})
        tl = same["timeline"]
        assert tl["imports_done"] < tl["config_received"], "the trial did not get the pre-started interpreter"
        other = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
        spare = launcher.spares[0]
        assert spare.env == {}
        changed = run_to_end(launcher, 2, tmp_path / "t2", other)
        assert launcher.discarded == 1 and spare.returncode is not None, "the mismatched spare was not discarded"
        assert changed["provenance"]["pytorch_env"] == other, "the trial did not run with its own environment"
        assert first["provenance"]["pytorch_env"] == {} and same["provenance"]["pytorch_env"] == {}
        # a fresh process: started after the previous trial had its result
        assert changed["timeline"]["main"] > same["timeline"]["result_written"]
    finally:
        launcher.close()


def test_a_prestarted_interpreter_touches_no_device_and_idles_through_the_window(tmp_path: Path, fork: bool) -> None:
    launcher = SlotLauncher("experiments.mlp", {}, None, tmp_path, None, prestart=2, fork=fork)
    try:
        run_to_end(launcher, 0, tmp_path / "t0", {})
        spares = list(launcher.spares)
        assert len(spares) == (1 if fork else 2) and all(s.ready for s in spares)  # a server per environment
        for s in spares:  # idle: blocked on its pipe, no CPU used over a second
            before = cpu_seconds(s.pid)
            time.sleep(1.0)
            assert cpu_seconds(s.pid) - before < 0.02
        result = run_to_end(launcher, 1, tmp_path / "t1", {})
        tl = result["timeline"]
        # the device is first touched after the configuration arrived (allocators unread till then)
        assert tl["imports_done"] < tl["config_received"] <= tl["device"]
        run = result["_run"]
        assert run.spare_cpu_in_window is not None and run.spare_cpu_in_window < 0.05, run.spare_cpu_in_window
        assert tl["go"] <= tl["window_start"]
    finally:
        launcher.close()


def test_the_window_waits_until_the_slots_interpreters_are_idle(tmp_path: Path, fork: bool) -> None:
    """A trial that starts cold spawns its slot's next interpreters; its window opens only once
    they have finished importing (``go`` after every ``ready``)."""
    launcher = SlotLauncher("experiments.mlp", {}, None, tmp_path, None, prestart=2, fork=fork)
    readies: list[float] = []
    try:
        run = launcher.start(replace(CONFIG, trial_number=0), tmp_path / "t0", {}, 120, [{}])
        launcher.tick()  # spares start at the first tick with no window running on the host
        spares = list(launcher.spares)
        assert len(spares) == (1 if fork else 2)
        while not run.exited:
            wait_for_activity([launcher])
            launcher.tick()
            readies += [time.time() for s in spares if s.ready and not getattr(s, "_seen", False)
                        and not setattr(s, "_seen", True)]
        tl = json.loads((tmp_path / "t0" / "result.json").read_text())["timeline"]
        assert len(readies) == len(spares)
        assert tl["go"] >= max(readies) - 0.1, "the window opened while an interpreter was still importing"
    finally:
        launcher.close()


def test_a_window_waits_for_interpreters_importing_on_another_slot(tmp_path: Path, fork: bool) -> None:
    """Slots of one host share the rule: slot 0's window opens only once slot 1's new
    interpreters have imported (an import beside a window slows launch-bound trials)."""
    host = Host()
    first = SlotLauncher("experiments.mlp", {}, None, tmp_path, None, prestart=0, host=host, fork=fork)
    other = SlotLauncher("experiments.mlp", {}, None, tmp_path, None, prestart=0, host=host, fork=fork)
    try:
        run = first.start(replace(CONFIG, trial_number=0), tmp_path / "t0", {}, 120, [{}])
        other.pending = [{}, {}]
        readies: dict[int, float] = {}
        while not run.exited:
            wait_for_activity([first, other])
            first.tick()
            other.tick()
            readies.update({s.pid: time.time() for s in other.spares if s.ready and s.pid not in readies})
        tl = json.loads((tmp_path / "t0" / "result.json").read_text())["timeline"]
        assert len(other.spares) == 2 and len(readies) == 2
        assert tl["go"] >= max(readies.values()) - 0.1, "a window opened while another slot imported"
    finally:
        first.close()
        other.close()


def test_the_next_trial_gets_its_configuration_only_after_the_previous_process_exited(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fork: bool) -> None:
    monkeypatch.setenv("ORCHESTRATE_TEST_EXIT_DELAY_S", "1.0")  # each process lingers after its result
    launcher = SlotLauncher("experiments.mlp", {}, None, tmp_path, None, prestart=1, fork=fork)
    try:
        first = run_to_end(launcher, 0, tmp_path / "t0", {})
        second = run_to_end(launcher, 1, tmp_path / "t1", {})
        run0, run1 = first["_run"], second["_run"]
        assert run0.exited_at >= first["timeline"]["result_written"] + 0.9
        assert run1.slot_free_at == run0.exited_at
        assert second["timeline"]["config_received"] >= run0.exited_at
        assert second["timeline"]["device"] >= run0.exited_at
    finally:
        launcher.close()


def test_launch_trial_still_runs_one_cold_trial(tmp_path: Path) -> None:
    launched = launch_trial(CONFIG, tmp_path / "cold", {}, 120)
    assert launched.outcome.status == "ok" and launched.peak_rss_gib and launched.duration_s > 0
    assert list((tmp_path / "cold").iterdir())


@pytest.mark.skipif(not LINUX, reason="the fork server runs on Linux only")
def test_forked_trials_are_processes_of_their_own_and_die_with_their_server(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each trial of a fork server is a new process in a session of its own (the launcher kills
    its group), reaped by the server, which reports its peak RSS; a server that stops answering
    (stopped, deadlocked) is killed once a trial it holds is past its timeout and
    ``UNANSWERED_S`` (the trial a timeout, not RUNNING for ever), and the slot starts another; a
    trial whose server is killed in its window dies too, and is recorded interrupted (its
    measurement lost, not its configuration's fault: run again), not crashed."""
    from orchestrator.launch import forked, trial

    monkeypatch.setattr(forked, "UNANSWERED_S", 1.0)
    monkeypatch.setattr(trial, "IMPORT_GRACE_S", 1.0)  # how long a trial not yet forked waits for its server
    launcher = SlotLauncher("experiments.mlp", {}, None, tmp_path, None, prestart=1, fork=True)
    try:
        run_to_end(launcher, 0, tmp_path / "t0", {})  # cold: starts the server
        [server] = launcher.spares
        assert isinstance(server, ForkServer)
        pids = set()
        for n in (1, 2):
            result = run_to_end(launcher, n, tmp_path / f"t{n}", {})
            run = result["_run"]
            assert isinstance(run.interp, Forked) and run.interp.pid not in pids | {server.pid}
            pids.add(run.interp.pid)
            assert run.launched().peak_rss_gib > 0.05  # torch is loaded in it: real figures from wait4
            assert result["timeline"]["imports_done"] < result["timeline"]["forked"]
        assert launcher.spares == [server] and server.returncode is None  # one import for all of them
        os.kill(server.pid, signal.SIGSTOP)  # it forks nothing more, and says nothing
        started = time.monotonic()
        run = launcher.start(replace(CONFIG, trial_number=3), tmp_path / "t3", {}, 1.0, [{}])
        while not run.exited and time.monotonic() - started < 30:
            wait_for_activity([launcher], 0.2)
            launcher.tick()
        assert run.exited and run.launched().outcome.status == "timeout", run.phase
        assert server.reap() and time.monotonic() - started < 10  # killed, not left stopped
        run_to_end(launcher, 4, tmp_path / "t4", {})  # on a new server
        [server] = launcher.spares
        run = launcher.start(replace(CONFIG, trial_number=5, trial=replace(CONFIG.trial, min_measure_s=60)),
                             tmp_path / "t5", {}, 120, [{}])
        while run.interp.pid is None or not run.in_window:  # given go: its timed window runs
            wait_for_activity([launcher])
            launcher.tick()
        child = run.interp.pid
        assert os.getpgid(child) == child and os.getsid(child) == child
        adj = {pid: int(Path(f"/proc/{pid}/oom_score_adj").read_text()) for pid in (child, server.pid, os.getpid())}
        assert adj[child] == OOM_SCORE_ADJ and adj[server.pid] == adj[os.getpid()]  # the OOM killer takes the trial first
        os.kill(server.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while not run.exited and time.monotonic() < deadline:
            wait_for_activity([launcher])
            launcher.tick()
        outcome = run.launched().outcome
        assert run.exited and outcome.status == "interrupted" and outcome.signal is None, outcome
        assert "fork server died" in (outcome.detail or ""), outcome.detail
        time.sleep(0.5)
        assert not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split(") ")[1][:1]
    finally:
        launcher.close()


def test_a_trials_timeout_does_not_count_the_wait_for_imports(tmp_path: Path, fork: bool,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The first trial of a slot waits for its fork server (or its own interpreter) to import; on a
    busy machine that took longer than a short ``timeout_s`` and the trial was failed as a timeout
    before it ran. Here the import takes 4 s and the timeout is 3 s: the trial must run and fit."""
    (tmp_path / "slowimport.py").write_text(
        "import time\ntime.sleep(4)\nfrom experiments.mlp import PARAMS, build  # noqa: F401\n")
    root = Path(__file__).resolve().parents[2]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), str(root), os.environ.get("PYTHONPATH", "")]))
    launcher = SlotLauncher("slowimport", {}, None, tmp_path, None, prestart=1, fork=fork)
    try:
        config = replace(CONFIG, experiment="slowimport", trial_number=0)
        run = launcher.start(config, tmp_path / "t0", {}, 3.0, [{}])
        while not run.exited:
            wait_for_activity([launcher])
            launcher.tick()
        launched = run.launched()
        assert launched.outcome.status == "ok", launched.outcome.detail
        assert run.import_wait(time.monotonic()) >= 3.5, "the import was not waited for"
    finally:
        launcher.close()


def test_a_prewarmed_fork_server_serves_the_first_trial_before_the_study_folder_is_known(
        tmp_path: Path, fork: bool) -> None:
    """Start-up (``ProcessRunner.prewarm``): before the study is open the slot has no folder for
    spares' logs; a fork server starts anyway (its own output dropped) and runs the first trial,
    whose log is its own. A ``--serve`` interpreter's log becomes its trial's, so without the fork
    server nothing starts early."""
    launcher = SlotLauncher("experiments.mlp", {}, None, None, None, prestart=1, fork=fork)
    try:
        launcher.prewarm({})
        assert len(launcher.spares) == (1 if fork else 0)
        launcher.spare_dir = tmp_path  # the study is open
        result = run_to_end(launcher, 0, tmp_path / "t0", {})
        assert (tmp_path / "t0" / "trial.log").is_file()
        if fork:
            (server,) = launcher.spares
            assert isinstance(server, ForkServer) and str(server.log_path) == os.devnull
            assert result["timeline"]["imports_done"] < result["timeline"]["forked"], "not the prewarmed server"
    finally:
        launcher.close()


@pytest.mark.parametrize("kind", [Interpreter, Forked])
def test_both_kinds_of_trial_process_declare_and_implement_one_protocol(kind: type) -> None:
    """``ProcessRun`` holds a pre-started interpreter or a forked trial through one type."""
    assert TrialProcess in kind.__mro__
    assert not getattr(kind, "__abstractmethods__", None), kind.__abstractmethods__
    members = ("ready", "at_window", "result_ready", "returncode", "rusage", "running_since", "read_status",
               "reap", "send", "kill", "close", "log_path", "status_fd", "pid", "env", "server_died")
    declared = set(TrialProcess.__annotations__) | {n for n in vars(TrialProcess) if not n.startswith("_")}
    assert set(members) <= declared, set(members) - declared


AHEAD_EXPERIMENT = '''
import os, sys
from experiments.mlp import PARAMS, build as _build


def preload(fixed):
    with open(fixed["marker"], "a") as f:
        f.write(f"{os.getpid()}\\n")
    if fixed.get("fail"):
        raise RuntimeError("the hook fails: the trial imports on its own")
    import aheadmodels  # noqa: F401 - stands for a model's modules, which a library imports lazily


def build(params, device):
    workload = _build({k: v for k, v in params.items() if k not in ("marker", "fail")}, device)
    workload.info.update(ahead="aheadmodels" in sys.modules, preload_env=os.environ.get("ORCHESTRATE_PRELOAD"))
    return workload
'''


@pytest.mark.parametrize("fail", [False, True], ids=["hook", "failing-hook"])
def test_the_experiments_preload_hook_runs_once_per_spare_with_the_fixed_parameters(
        tmp_path: Path, fork: bool, fail: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """``preload(fixed)`` runs in the fork server (or the pre-started interpreter), before the
    configuration: the trials find its imports done; a hook that fails leaves the trial to import
    on its own; the parameters are not in the trials' environment."""
    (tmp_path / "aheadexp.py").write_text(AHEAD_EXPERIMENT)
    (tmp_path / "aheadmodels.py").write_text("")
    root = Path(__file__).resolve().parents[2]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), str(root), os.environ.get("PYTHONPATH", "")]))
    marker = tmp_path / "hook_ran"
    fixed = {"marker": str(marker), **({"fail": True} if fail else {})}
    launcher = SlotLauncher("aheadexp", {}, None, tmp_path, None, prestart=1, fork=fork, fixed=fixed)
    try:
        launcher.prewarm({})
        launcher.pending = [{}] if not fork else []
        launcher.tick()
        infos, pids = [], []
        for n in range(2):
            config = replace(CONFIG, experiment="aheadexp", trial_number=n,
                             params={**CONFIG.params, **fixed})
            while not launcher.idle:
                wait_for_activity([launcher])
                launcher.tick()
            run = launcher.start(config, tmp_path / f"t{n}", {}, 120, [{}])
            while not run.exited:
                wait_for_activity([launcher])
                launcher.tick()
            assert run.launched().outcome.status == "ok", run.launched().outcome.detail
            infos.append(json.loads((tmp_path / f"t{n}" / "result.json").read_text())["info"])
            pids.append(run.interp.pid)
        hooks = marker.read_text().split()
        assert all(info["preload_env"] is None for info in infos)
        if fail:
            assert not any(info["ahead"] for info in infos)  # nothing imported ahead: the trials did it
        else:
            assert all(info["ahead"] for info in infos)
        if fork:  # one server, one hook, for both trials, which it forked after
            assert len(hooks) == 1 and hooks[0] not in map(str, pids)
        else:  # each trial's interpreter ran it while pre-started, before its configuration came
            assert set(map(str, pids)) <= set(hooks)
    finally:
        launcher.close()


@pytest.mark.skipif(not LINUX, reason="the fork server runs on Linux only")
def test_the_next_trial_s_process_is_prepared_while_the_previous_one_exits(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue #40 item 2: once a trial has its result, its slot's next process is forked and its
    device initialised (``SparePool.prepare_next``) while the old process exits; the next
    configuration still goes out only once that process has exited, and the trial's output is
    its own log."""
    monkeypatch.setenv("ORCHESTRATE_TEST_EXIT_DELAY_S", "1.0")  # each process lingers after its result
    launcher = SlotLauncher("experiments.mlp", {}, None, tmp_path, None, prestart=1, fork=True)
    try:
        launcher.prewarm({})
        launcher.prepare("cpu")  # start-up: the first trial's process, before any trial is known
        wait_prepared(launcher)  # in a sweep the probe's answer comes after the server's imports too
        first = run_to_end(launcher, 0, tmp_path / "t0", {})
        second = run_to_end(launcher, 1, tmp_path / "t1", {})
        run0, run1 = first["_run"], second["_run"]
        for result in (first, second):
            tl = result["timeline"]
            assert tl["forked"] <= tl["prepared"] <= tl["config_received"] <= tl["device"]
        tl = second["timeline"]
        assert tl["forked"] < run0.exited_at - 0.5, "not prepared while the previous process exited"
        assert tl["config_received"] >= run0.exited_at and run1.slot_free_at == run0.exited_at
        assert isinstance(run1.interp, Forked) and run1.interp.prepared and run1.interp.prepared_s is not None
        assert (tmp_path / "t1" / "trial.log").is_file() and launcher.pool.prepared_unused == 0
        assert len(launcher.prepared) == 1  # the third's, in case there is one
    finally:
        launcher.close()


@pytest.mark.skipif(not LINUX, reason="the fork server runs on Linux only")
def test_what_a_child_says_before_its_server_says_it_forked_it_is_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A forked child shares its server's status pipe and may speak before the server's ``FORKED``
    line (here the server waits 1 s after each fork): a prepared process's ``ready`` and a trial's
    ``at its window`` are kept for it (``ForkServer.early``). Dropped, the prepared process was
    never ready, the slot waited ``PREPARE_GRACE_S`` (30 s) and killed it (the suite saw this once
    under load), and a trial at its window would never have been let go."""
    monkeypatch.setenv("ORCHESTRATE_TEST_FORKED_DELAY_S", "1.0")
    launcher = SlotLauncher("experiments.mlp", {}, None, tmp_path, None, prestart=1, fork=True)
    try:
        launcher.prewarm({})
        launcher.prepare("cpu")
        started = time.monotonic()
        wait_prepared(launcher)
        launcher.prepare_device = None  # the second trial's process is forked for it, not prepared
        first = run_to_end(launcher, 0, tmp_path / "t0", {})
        second = run_to_end(launcher, 1, tmp_path / "t1", {})  # its word at its window came first
        assert "prepared" in first["timeline"] and "prepared" not in second["timeline"]
        assert launcher.pool.prepared_unused == 0
        assert time.monotonic() - started < 20, "the slot waited for a word it had been told"
    finally:
        launcher.close()


@pytest.mark.skipif(not LINUX, reason="the fork server runs on Linux only")
def test_the_next_process_is_prepared_once_the_window_is_over_before_the_result(tmp_path: Path) -> None:
    """A trial says ``measured`` once its timed window is over and its figures are read; its
    slot's next process is prepared from then on, while the trial writes its result (here a
    second, ``slow_figures``), not only once the result is in."""
    experiment = "tests.fixtures.experiments.slow_figures"
    launcher = SlotLauncher(experiment, {}, None, tmp_path, None, prestart=1, fork=True)
    config = replace(CONFIG, experiment=experiment, params={"device": "cpu", "batch_size": 8})
    try:
        launcher.prewarm({})
        launcher.prepare("cpu")
        wait_prepared(launcher)
        run = launcher.start(replace(config, trial_number=0), tmp_path / "t0", {}, 120, [{}])
        said_measured_first = None
        while not run.exited:
            wait_for_activity([launcher])
            launcher.tick()
            if said_measured_first is None and run.interp.measured:
                said_measured_first = not run.has_result
        assert run.launched().outcome.status == "ok", run.launched().outcome.detail
        written = (tmp_path / "t0" / "result.json").stat().st_mtime  # the file, once encoded and written
        while not launcher.idle:  # as the sweep does: its prepared process ready (or gone)
            wait_for_activity([launcher])
            launcher.tick()
        run1 = launcher.start(replace(config, trial_number=1), tmp_path / "t1", {}, 120, [{}])
        while not run1.exited:
            wait_for_activity([launcher])
            launcher.tick()
        tl = json.loads((tmp_path / "t1" / "result.json").read_text())["timeline"]
        assert said_measured_first, "no 'measured' before the result"
        assert isinstance(run1.interp, Forked) and run1.interp.prepared
        assert tl["forked"] < written - 0.5, (tl["forked"], written)  # prepared while the result was written
    finally:
        launcher.close()


@pytest.mark.skipif(not LINUX, reason="the fork server runs on Linux only")
def test_a_prepared_process_is_used_only_for_its_environment_and_device(tmp_path: Path) -> None:
    """A prepared process initialised its device under its server's environment: a trial that
    needs another environment, or another device, gets a process of its own and the prepared one
    is killed. One that cannot initialise its device exits before it says ready, and its trial is
    forked afresh: what the trial then meets is its own (here: no CUDA on this machine)."""
    launcher = SlotLauncher("experiments.mlp", {}, None, tmp_path, None, prestart=1, fork=True)
    try:
        launcher.prewarm({})
        launcher.prepare("cpu")
        (ready,) = launcher.prepared
        wait_prepared(launcher)
        other = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
        result = run_to_end(launcher, 0, tmp_path / "t0", other)
        assert "prepared" not in result["timeline"] and result["provenance"]["pytorch_env"] == other
        assert launcher.pool.prepared_unused == 1 and result["_run"].interp is not ready
        deadline = time.monotonic() + 10
        while not ready.reap() and time.monotonic() < deadline:
            wait_for_activity([launcher], 0.1)
            launcher.tick()
        assert ready.returncode is not None, "the unused prepared process was left running"
    finally:
        launcher.close()
    if torch_has_cuda():
        return
    launcher = SlotLauncher("experiments.mlp", {}, None, tmp_path, None, prestart=1, fork=True)
    try:
        launcher.prewarm({})
        launcher.prepare("cuda")  # this machine has none: the prepared process cannot initialise it
        (failing,) = launcher.prepared
        wait_prepared(launcher)
        assert failing.returncode == PREPARE_FAILED and not failing.ready and launcher.idle
        config = replace(CONFIG, trial_number=1, params={**CONFIG.params, "device": "cuda"})
        run = launcher.start(config, tmp_path / "t1", {}, 120, [{}])
        while not run.exited:
            wait_for_activity([launcher])
            launcher.tick()
        outcome = run.launched().outcome
        assert outcome.status == "error" and "CUDA" in outcome.detail, outcome.detail
        assert run.interp is not failing and not run.interp.prepared
    finally:
        launcher.close()


def wait_prepared(launcher: SlotLauncher) -> None:
    """Until the slot's prepared process is ready or gone (its server imports first)."""
    deadline = time.monotonic() + 120
    while any(not p.ready and p.returncode is None for p in launcher.prepared) and time.monotonic() < deadline:
        wait_for_activity([launcher], 0.1)
        launcher.tick()


def test_a_slot_waits_for_its_prepared_process_but_not_for_long(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``SparePool.settled``: the slot waits for the process prepared for its next trial (one forked
    for the trial instead would wait for the same server), at most ``IMPORT_GRACE_S`` for its
    server to fork it and ``PREPARE_GRACE_S`` for it to be ready; then it is killed."""
    from orchestrator.launch import spares

    launcher = SlotLauncher("experiments.mlp", {}, None, tmp_path, None, prestart=1, fork=True)
    try:
        launcher.prewarm({})
        launcher.prepare("cpu")
        (ready,) = launcher.prepared
        assert ready.pid is None and not launcher.idle  # asked for, the server still importing
        monkeypatch.setattr(spares, "IMPORT_GRACE_S", 0.0)
        ready.kill = lambda: None  # (this test process stands in for it below)
        assert launcher.idle and launcher.prepared == [] and launcher.pool.prepared_unused == 1
        launcher.pool.prepared = ready
        ready.forked(os.getpid())  # as if forked, never ready: waited for ...
        assert not launcher.idle
        monkeypatch.setattr(spares, "PREPARE_GRACE_S", 0.0)
        assert launcher.idle and launcher.prepared == [] and launcher.pool.prepared_unused == 2  # ... not for long
    finally:
        launcher.close()


@pytest.mark.skipif(not LINUX, reason="the fork server runs on Linux only")
def test_a_trial_started_while_its_prepared_process_is_not_ready_gets_one_forked_for_it(tmp_path: Path) -> None:
    """The slot said idle while its server had not forked the prepared process yet; by the time
    the trial starts the process exists but is not ready: the trial is forked for itself (a
    sweep's repeat met this), and the process prepared in vain is killed."""
    launcher = SlotLauncher("experiments.mlp", {}, None, tmp_path, None, prestart=1, fork=True)
    try:
        launcher.prewarm({})
        launcher.prepare("cpu")
        (early,) = launcher.prepared
        early.ready = False
        early.forked(os.getpid())  # the server's word came meanwhile: forked, not ready
        early.kill = lambda: None  # (this test process stands in for it)
        run = launcher.start(replace(CONFIG, trial_number=0), tmp_path / "t0", {}, 120, [{}])  # no assert
        while not run.exited:
            wait_for_activity([launcher])
            launcher.tick()
        assert run.launched().outcome.status == "ok" and run.interp is not early
        assert "prepared" not in json.loads((tmp_path / "t0" / "result.json").read_text())["timeline"]
        assert launcher.pool.prepared_unused == 1
    finally:
        launcher.close()


def torch_has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def test_the_end_kills_every_slot_s_trial_before_it_waits_for_any(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The end of a sweep with trials in flight on several slots (the verdict, Ctrl-C): every trial
    is killed first, then all are reaped together, so a host waits once for its dying processes (a
    CUDA process takes 0.3-1 s to die), not once a slot. Two real trials, each in its window."""
    from orchestrator.launch import ProcessRunner, StopFlag
    from orchestrator.launch.process import is_alive
    from orchestrator.launch.slots import Slot

    runner = ProcessRunner([Slot("cpu:0"), Slot("cpu:1")], "experiments.mlp", tmp_path, StopFlag(), prestart=0)
    calls: list[tuple[str, int]] = []
    for i, launcher in enumerate(runner.launchers):
        kill, reaped = launcher.kill_running, launcher.reaped
        monkeypatch.setattr(launcher, "kill_running", lambda kill=kill, i=i: (calls.append(("kill", i)), kill())[1])
        monkeypatch.setattr(launcher, "reaped", lambda reaped=reaped, i=i: (calls.append(("reaped", i)), reaped())[1])
    long = replace(CONFIG, trial=TrialSteps(warmup_steps=1, measure_steps=100_000, min_measure_s=60.0))
    runs = [runner.start(i, replace(long, trial_number=i), tmp_path / f"t{i}", {}, 120, [{}]) for i in range(2)]
    deadline = time.monotonic() + 60
    while not all(r.in_window for r in runs) and time.monotonic() < deadline:
        runner.wait(0.05)
    assert all(r.in_window for r in runs), [r.phase for r in runs]
    pids = [r.interp.pid for r in runs]
    runner.close()
    first_wait = next(n for n, (what, _) in enumerate(calls) if what == "reaped")
    assert sorted(calls[:first_wait]) == [("kill", 0), ("kill", 1)], calls  # both killed before any wait
    assert all(r.exited and r.interp.returncode is not None and r.interp.returncode < 0 for r in runs)
    assert not any(pid is not None and is_alive(pid) for pid in pids)


@pytest.mark.skipif(not LINUX, reason="the fork server runs on Linux only")
def test_the_end_kills_and_reaps_the_processes_prepared_for_next_trials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fork servers on two slots, each with a process prepared for its next trial (on CUDA it holds
    a context); one slot runs a trial in its window. The end of the sweep kills and reaps both the
    trial and the other slot's prepared process before it returns: the next command finds the
    device free."""
    from orchestrator.launch import ProcessRunner, StopFlag
    from orchestrator.launch.process import is_alive
    from orchestrator.launch.slots import Slot

    monkeypatch.setenv("ORCHESTRATE_TEST_PREPARE_CPU", "1")  # a CPU has nothing to prepare; prepare anyway
    runner = ProcessRunner([Slot("cpu:0"), Slot("cpu:1")], "experiments.mlp", tmp_path, StopFlag(), prestart=1)
    runner.prewarm({})
    runner.prepare("cpu")
    for launcher in runner.launchers:
        wait_prepared(launcher)
    waiting = runner.launchers[1].prepared
    assert len(waiting) == 1 and waiting[0].ready and waiting[0].pid is not None
    long = replace(CONFIG, trial=TrialSteps(warmup_steps=1, measure_steps=100_000, min_measure_s=60.0))
    run = runner.start(0, replace(long, trial_number=0), tmp_path / "t0", {}, 120, [{}])
    deadline = time.monotonic() + 60
    while not run.in_window and time.monotonic() < deadline:
        runner.wait(0.05)
    assert run.in_window, run.phase
    pids = [run.interp.pid, waiting[0].pid]
    runner.close()
    assert run.exited and waiting[0].returncode is not None  # both reaped by their servers, and said so
    assert not any(pid is not None and is_alive(pid) for pid in pids)


def test_a_slot_forks_its_next_process_as_its_trial_starts_only_beside_other_cuda_slots(tmp_path: Path) -> None:
    """``SlotLauncher.early``: on a host of several CUDA slots the next trial's process is forked as
    the trial starts, its driver alone initialised; one slot alone, or CPU slots, prepare once the
    window is over, as before."""
    host = Host()
    one = SlotLauncher("experiments.mlp", {}, None, tmp_path, None, prestart=0, host=Host())
    pair = [SlotLauncher("experiments.mlp", {}, None, tmp_path, None, prestart=0, host=host) for _ in range(2)]
    for launcher in [one, *pair]:
        assert not launcher.early  # no device known yet: nothing is prepared
        launcher.prepare_device = "cuda"
    assert not one.early and all(launcher.early for launcher in pair)
    pair[0].prepare_device = "cpu"
    assert not pair[0].early


@pytest.mark.skipif(not LINUX, reason="the fork server runs on Linux only")
def test_a_process_forked_beside_its_slot_s_trial_starts_only_its_driver_and_runs_the_next_trial(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue #41 item 2, the path on the CPU (``early`` forced: a CPU has no driver to start). As
    slot 0's trial starts, its next process is forked from the server with ``context`` false; the
    host's gate does not wait for it (it takes no memory of the device), the window-end prepare
    is not asked again; once the window is over, no other window running, it makes its context
    and says ready again; and the next trial runs in it: forked before the first trial's window
    ended. Nothing is left running after the end."""
    from orchestrator.launch import ProcessRunner, StopFlag
    from orchestrator.launch.process import is_alive
    from orchestrator.launch.slots import Slot

    monkeypatch.setenv("ORCHESTRATE_TEST_PREPARE_CPU", "1")
    monkeypatch.setattr(SlotLauncher, "early", property(lambda self: self.prepare_device is not None))
    runner = ProcessRunner([Slot("cpu:0"), Slot("cpu:1")], "experiments.mlp", tmp_path, StopFlag(), prestart=1)
    launcher = runner.launchers[0]
    pids: list[int | None] = []
    try:
        runner.prewarm({})
        runner.prepare("cpu")
        for each in runner.launchers:
            wait_prepared(each)
        first = run_to_end(launcher, 0, tmp_path / "t0", {})
        run0 = first["_run"]
        (early,) = launcher.prepared
        assert isinstance(early, Forked) and run0.prepared_next and run0.context_next
        assert isinstance(run0.interp, Forked) and run0.interp.context  # start-up's: a context
        second = run_to_end(launcher, 1, tmp_path / "t1", {})
        run1 = second["_run"]
        assert run1.interp is early and early.context and launcher.pool.prepared_unused == 0
        tl0, tl1 = first["timeline"], second["timeline"]
        assert tl1["forked"] <= tl1["prepared"] <= tl1["context"] <= tl1["config_received"]
        assert tl1["context"] >= tl0["window_end"]  # its context once the window was over
        assert tl1["forked"] < tl0["window_end"], (tl1["forked"], tl0["window_end"])  # beside the first trial
        pids = [run0.interp.pid, run1.interp.pid, *(p.pid for p in launcher.prepared)]
    finally:
        runner.close()
    assert pids and not any(pid is not None and is_alive(pid) for pid in pids)


@pytest.mark.skipif(not LINUX, reason="the fork server runs on Linux only")
def test_the_end_tells_every_slot_s_fork_server_to_leave_before_it_waits_for_any(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fork servers on three slots: the end tells each to leave and kills it, then waits for all
    together (four CPU slots closed in 0.07-0.09 s against 0.12-0.15 s one after another). Every
    server is reaped and its pipe closed before the end returns."""
    from orchestrator.launch import ProcessRunner, StopFlag
    from orchestrator.launch.process import is_alive
    from orchestrator.launch.slots import Slot

    runner = ProcessRunner([Slot(f"cpu:{i}") for i in range(3)], "experiments.mlp", tmp_path, StopFlag(), prestart=1)
    runner.prewarm({})
    servers = [s for launcher in runner.launchers for s in launcher.pool.spares]
    assert len(servers) == 3 and all(s.pid is not None and is_alive(s.pid) for s in servers)
    calls: list[tuple[str, int]] = []
    for i, launcher in enumerate(runner.launchers):
        leave, gone = launcher.pool.leave, launcher.pool.gone
        monkeypatch.setattr(launcher.pool, "leave", lambda leave=leave, i=i: (calls.append(("leave", i)), leave())[1])
        monkeypatch.setattr(launcher.pool, "gone", lambda gone=gone, i=i: (calls.append(("gone", i)), gone())[1])
    runner.close()
    first_wait = next(n for n, (what, _) in enumerate(calls) if what == "gone")
    assert sorted(calls[:first_wait]) == [("leave", 0), ("leave", 1), ("leave", 2)], calls  # all told before any wait
    assert all(s.returncode is not None and s.status_fd is None for s in servers)
    assert not any(is_alive(s.pid) for s in servers if s.pid is not None)
    assert all(launcher.pool.spares == [] for launcher in runner.launchers)


@pytest.mark.skipif(not LINUX, reason="the fork server runs on Linux only")
def test_the_next_trial_knows_when_the_slot_was_freed_when_the_server_said_the_exit_last(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A forked trial's exit comes through its fork server's pipe: ``tick`` polls the run, then the
    server, so the sweep could see the run exited before the run had noted when. The next trial's
    ``slot_free_at`` was then None (``test_slots.py`` failed once so under a full suite). The time
    is now kept where the exit is heard (``TrialProcess.exited_at``). Here the server alone is heard
    between the trial's result and its exit (0.5 s later, on purpose)."""
    from orchestrator.launch import ProcessRunner, StopFlag
    from orchestrator.launch.slots import Slot

    monkeypatch.setenv("ORCHESTRATE_TEST_EXIT_DELAY_S", "0.5")
    runner = ProcessRunner([Slot("cpu:0")], "experiments.mlp", tmp_path, StopFlag(), prestart=1)
    try:
        runner.prewarm({})
        launcher = runner.launchers[0]
        first = runner.start(0, replace(CONFIG, trial_number=0), tmp_path / "t0", {}, 120, [{}])
        deadline = time.monotonic() + 60
        while not first.has_result and time.monotonic() < deadline:
            wait_for_activity([launcher], 0.1)
            launcher.tick()
        assert first.has_result and not first.exited
        while not first.exited and time.monotonic() < deadline:
            wait_for_activity([launcher], 0.1)
            launcher.pool.poll()
        heard = time.time()
        assert first.exited and first.exited_at is not None and first.exited_at <= heard
        second = runner.start(0, replace(CONFIG, trial_number=1), tmp_path / "t1", {}, 120, [{}])
        assert second.slot_free_at == first.exited_at
    finally:
        runner.close()


def test_a_result_read_late_keeps_the_trials_own_duration(tmp_path: Path) -> None:
    """A scale-out tour: the loop held 25 s by a database's outage read its trials' results late,
    and they were recorded at 29.3 s where their processes took 6 s."""
    launcher = SlotLauncher("experiments.mlp", {}, None, tmp_path, None, prestart=0, fork=False)
    try:
        run = launcher.start(replace(CONFIG, trial_number=0), tmp_path / "t0", {}, 120, [{}])
        while not run.exited:
            wait_for_activity([launcher])
            launcher.tick()
        prompt = run.launched().duration_s
        time.sleep(0.6)  # the loop busy elsewhere
        late = run.launched()
        assert late.outcome.status == "ok" and late.duration_s <= prompt + 0.2, (prompt, late.duration_s)
        # a UI tour: an ok trial's log was empty, a killed one's said nothing of its end; once, however read
        assert (tmp_path / "t0" / "trial.log").read_text().splitlines()[-1:] == ["orchestrate: trial ended ok"]
    finally:
        launcher.close()
