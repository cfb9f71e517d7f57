"""Shared helpers: run the installed `orchestrate` as a user would, and read what it recorded
through Optuna's and MLflow's own APIs."""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from procs import processes, state_of
from zygote import Zygote

pytest_plugins = ["servers"]  # tests/servers.py: real PostgreSQL and mlflow server fixtures

# Three test workers share the CI machine's two cores (the tests mostly wait on their processes):
# one intra-op thread per torch process (the
# tests' trials, probes, fork servers) instead of one per core each. The suite's correctness
# checks do not depend on it (throughput is the benchmarks' business, bench/); it saves ~7% of the
# suite's time (10:53 against 11:41 and 11:43, the same machine, one evening). A value the caller
# set is kept.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# The commands run as a user's shell runs them: without PYTHONUNBUFFERED, which some shells and
# containers set (this project's did). With it, a pipe's stdout is unbuffered, and that hid a sweep
# whose trial lines waited in the buffer (`| head -1` ran on to the end, `| tee` showed nothing live).
os.environ.pop("PYTHONUNBUFFERED", None)

ROOT = Path(__file__).resolve().parents[1]


TERMINAL_SIGNALS = (signal.SIGINT, signal.SIGHUP, signal.SIGTERM)


def signals_as_in_a_terminal() -> None:
    """``preexec_fn`` for a command a test sends Ctrl-C, a hang-up or SIGTERM: it gets them as a
    shell's foreground command does, their default action and not blocked. A sweep keeps a signal
    its caller ignores ignored (``nohup``, a script's ``cmd &``), and a test run started in the
    background hands every process under it SIGINT ignored (a clean clone's CI run: both Ctrl-C
    tests found it so), under ``nohup`` SIGHUP too (a SIGHUP test then waited for its trial's
    timeout, or failed)."""
    for signum in TERMINAL_SIGNALS:
        signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, set(TERMINAL_SIGNALS))

SLOW_MODULES = frozenset({
    # Besides the modules marked `pytestmark = pytest.mark.slow` themselves (real sweeps end to
    # end), these start real trial processes, fork servers, the installed command, PostgreSQL,
    # an MLflow server, a browser, or train a model: seconds each. `pytest -m "not slow"`, the
    # fast tier the README names for the inner loop of a change, leaves them to the full suite.
    "doctor/test_doctor.py", "harness/test_backend_contract.py", "harness/test_harness.py",
    "harness/test_script.py", "harness/test_smoke.py", "harness/test_swap.py", "launch/test_slots.py",
    "project/test_bench.py", "project/test_concurrency_bench.py", "project/test_experiment_hf.py",
    "project/test_experiments.py", "project/test_scale_bench.py", "project/test_servers.py",
    "project/test_walk.py", "project/test_zygote.py", "report/test_delete.py", "report/test_device_compare.py", "report/test_report.py",
    "report/test_ui_browser.py", "scenarios/test_bad_input.py", "scenarios/test_cluster.py",
    "search/test_script_names.py", "search/test_search_targets.py", "spec/test_fuzz_specs.py",
    "spec/test_yaml_hostile.py", "store/test_agreement.py", "store/test_optuna_sql.py",
    "store/test_studyread.py", "store/test_tracking_store.py", "sweep/test_startup.py",
})


LONGEST = {
    # Modules whose tests take longest (seconds on the 2-core machine, the type check's in a fresh
    # venv): each worker starts on a share of them, so that the workers end on short tests, not
    # one of them on a minute-long test while the others wait.
    "launch/test_launch.py": 162, "scenarios/test_team.py": 154, "scenarios/test_reliability.py": 131,
    "scenarios/test_distributed.py": 101, "scenarios/test_full_disk.py": 98, "scenarios/test_escapes.py": 85,
    "project/test_types.py": 45, "scenarios/test_script.py": 67, "store/test_study.py": 64,
    "scenarios/test_user_mistakes.py": 56, "scenarios/test_lost_and_damaged.py": 52, "search/test_search.py": 51,
    "report/test_delete.py": 44,
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules of ``SLOW_MODULES`` are ``slow`` too; ``LONGEST`` start first."""
    tests = Path(__file__).parent
    module = {item: str(Path(item.path).relative_to(tests)) for item in items}
    for item in items:
        if module[item] in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)
    items[:] = long_first(items, module, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1))


def long_first(items: list[Any], module: dict[Any, str], workers: int) -> list[Any]:
    """``items`` reordered for ``workers`` (pytest-xdist's ``worksteal`` hands each worker its
    share of the list, in order, then moves what is left to the idle): the ``LONGEST`` modules
    shared out, longest first, each to the worker with the fewest seconds, and each worker's share
    starting with its long modules. A long module's tests stay together; every module's stay in order."""
    groups: dict[str, list[Any]] = {}
    for item in items:
        if module[item] in LONGEST:
            groups.setdefault(module[item], []).append(item)
    rest = iter([item for item in items if module[item] not in LONGEST])
    shares: list[list[Any]] = [[] for _ in range(workers)]
    load = [0] * workers
    for name in sorted(groups, key=lambda n: -LONGEST[n]):
        k = load.index(min(load))
        shares[k] += groups[name]
        load[k] += LONGEST[name]
    out: list[Any] = []
    pending = len(items)
    for k in range(workers):  # worksteal's first split: len(pending) // workers left, in turn
        size = pending // (workers - k)
        pending -= size
        out += shares[k] + list(itertools.islice(rest, max(0, size - len(shares[k]))))  # fewer where few are left
    return out + list(rest)


ORCHESTRATE = str(Path(sys.executable).with_name("orchestrate"))
# The tests run it as a user with the venv activated (the README's set-up): its folder first on
# PATH, so the commands it prints start with `orchestrate` (orchestrator/invocation.py);
# tests/project/test_paste.py runs it without, as `.venv/bin/orchestrate`.
if os.environ.get("PATH", "").split(os.pathsep)[0] != str(Path(ORCHESTRATE).parent):
    os.environ["PATH"] = os.pathsep.join([str(Path(ORCHESTRATE).parent), os.environ.get("PATH", "")])


_ZYGOTE = Zygote(ORCHESTRATE)


@pytest.fixture(scope="session", autouse=True)
def _zygote_ends() -> Any:
    yield
    _ZYGOTE.close()


def bench_module(name: str) -> Any:
    """``bench/<name>.py`` imported once as the module ``bench_<name>`` (the benches are scripts,
    not a package; registered before it runs, so its dataclasses can look their module up)."""
    import importlib.util

    key = f"bench_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, ROOT / "bench" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules[key] = module
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    return sys.modules[key]


def write_spec(directory: Path, text: str, name: str = "spec.yaml") -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def orchestrate(args: list[str], cwd: Path, env: dict[str, str] | None = None,
                timeout: float = 300, answer: str = "") -> subprocess.CompletedProcess[str]:
    """The installed ``orchestrate ARGS`` in ``cwd`` with ``env`` added and ``answer`` on its
    stdin, its output captured: forked from the worker's server where it can be
    (``tests/zygote.py``: the same command, without its ~2 CPU-s of imports), else a new process."""
    full = {**os.environ, **(env or {})}
    if _ZYGOTE.usable(full):
        return _ZYGOTE.run(list(args), cwd, full, timeout, answer)
    return subprocess.run([ORCHESTRATE, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=full, input=answer)


def orchestrate_popen(args: list[str], cwd: Path, env: dict[str, str] | None = None, merge_stderr: bool = False,
                      new_session: bool = False) -> Any:
    """The installed ``orchestrate ARGS`` started in ``cwd`` with ``env`` added, running beside the
    test: as ``subprocess.Popen(..., text=True, stdout=PIPE, stderr=STDOUT if merge_stderr else
    PIPE, stdin=DEVNULL, start_new_session=new_session)``; forked from the worker's server where it
    can be (``zygote.Forked``: pid, pipes, ``poll``, ``wait``, ``communicate``, signals)."""
    full = {**os.environ, **(env or {})}
    if _ZYGOTE.usable(full):
        return _ZYGOTE.popen(list(args), cwd, full, merge_stderr, new_session)
    return subprocess.Popen([ORCHESTRATE, *args], cwd=cwd, text=True, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE, env=full,
                            start_new_session=new_session)


def command(args: list[str], cwd: Path, answer: str = "") -> subprocess.CompletedProcess[str]:
    """``orchestrate ARGS`` run in this process (``orchestrator.cli.main``), in ``cwd``, with
    ``answer`` on its stdin ("" is a closed one). For commands that read or repair the stores
    (``check``, ``delete``, ``report``, ``best``) where the test is about what they say and do, not
    about the process: the worker has MLflow imported already, and an interpreter's start costs
    about 2.4 s of CPU on the 2-core machine (its imports, MLflow's most). A sweep runs as the
    installed command (``orchestrate``), never here."""
    import io
    from unittest import mock

    from orchestrator.cli import main

    out, err = io.StringIO(), io.StringIO()
    # os.environ restored after: what the command sets for itself (MLflow's pool size) stays in it
    with (contextlib.chdir(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err),
          mock.patch.object(sys, "stdin", io.StringIO(answer)), mock.patch.dict(os.environ)):
        try:
            code = main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    return subprocess.CompletedProcess([ORCHESTRATE, *args], code, out.getvalue(), err.getvalue())


def load_study(cwd: Path, name: str, storage: str | None = None):
    import optuna

    return optuna.load_study(study_name=name, storage=storage or f"sqlite:///{cwd}/mlruns/optuna.db")


def child_runs(cwd: Path, name: str, tracking: str | None = None) -> list[Any]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking or f"sqlite:///{cwd}/mlruns/mlflow.db")
    exp = client.get_experiment_by_name(name)
    return client.search_runs([exp.experiment_id], filter_string="tags.role = 'trial'", max_results=50000)


def parent_runs(cwd: Path, name: str) -> list[Any]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{cwd}/mlruns/mlflow.db")
    exp = client.get_experiment_by_name(name)
    return client.search_runs([exp.experiment_id], filter_string="tags.role = 'sweep'")


def result_trials(study: Any) -> list[Any]:
    """One trial per configuration with a final result (the newest); errors are not results."""
    from orchestrator.store.records import results_of

    return results_of(study.get_trials())


def check_records(cwd: Path, name: str, n_results: int | None = None, storage: str | None = None,
                  tracking: str | None = None) -> dict[str, Any]:
    """The invariants every sweep must keep, whatever happened to the orchestrator(s)."""
    from optuna.trial import TrialState

    from orchestrator.search.space import config_key

    study = load_study(cwd, name, storage)
    trials = study.get_trials()
    assert not [t.number for t in trials if t.state == TrialState.RUNNING], "trials left RUNNING"
    results = result_trials(study)
    keys = [config_key(t.params) for t in results]
    assert len(keys) == len(set(keys)), f"a configuration was measured twice: {sorted(keys)}"
    if n_results is not None:
        assert len(results) == n_results
    runs = child_runs(cwd, name, tracking)
    by_number: dict[int, list[Any]] = {}
    for run in runs:
        by_number.setdefault(int(run.data.tags["trial_number"]), []).append(run)
    told = [t for t in trials if t.state != TrialState.WAITING]
    assert sorted(by_number) == sorted(t.number for t in told), "Optuna trials and MLflow runs differ"
    for t in told:
        (run,) = by_number[t.number]  # exactly one MLflow run per Optuna trial
        status = t.user_attrs["status"]
        assert run.info.status in ("FINISHED", "FAILED", "KILLED"), (t.number, run.info.status)
        assert run.data.tags["status"] == status, (t.number, run.data.tags["status"], status)
        expected = {"ok": "FINISHED", "oom": "FINISHED", "swapped": "FINISHED", "skipped": "FINISHED",
                    "interrupted": "KILLED"}.get(status, "FAILED")  # results are not failures
        if "repeat_of" not in t.user_attrs:
            assert run.info.status == expected, (t.number, status, run.info.status)
        if "mlflow_run_id" in t.user_attrs:
            assert t.user_attrs["mlflow_run_id"] == run.info.run_id
    return {"study": study, "results": results, "runs": by_number}


def trial_processes(marker: str, *more: str) -> list[int]:
    """PIDs of live processes whose command line mentions ``marker`` and ``more``."""
    return [p.pid for p in processes() if marker in p.cmdline and all(m in p.cmdline for m in more)]


def left_behind(folder: Path, wait_s: float = 10.0) -> list[str]:
    """Live processes (not zombies) working in ``folder`` or under it, other than this one and its
    ancestors, once up to ``wait_s`` has passed for them to end: what a sweep run there left
    running (its trials' descendants included, ``setsid`` or not: they inherit the folder)."""
    root = str(folder.resolve())
    mine = {os.getpid(), os.getppid()}
    deadline = time.monotonic() + wait_s
    while True:
        found = [f"{p.pid} {p.cmdline}" for p in processes()
                 if p.pid not in mine and (cwd := p.cwd()) is not None and (cwd == root or cwd.startswith(root + "/"))]
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


@contextlib.contextmanager
def standing_still(*procs: Any, timeout_s: float = 180) -> Iterator[None]:
    """Wait until each sweep stands still at its ``ORCHESTRATE_STOP_AT`` point (SIGSTOP), for the
    block to change a store mid-sweep for certain; then SIGCONT, however the block ended (a sweep
    left stopped would outlive the test). A poll of the database for the first results instead
    answered in the clean-clone CI only after every trial had ended (then the fault came after the
    sweep, and a test of it could pass without testing anything)."""
    deadline = time.monotonic() + timeout_s
    try:
        for proc in procs:
            while state_of(proc.pid) != "T":
                assert proc.poll() is None and time.monotonic() < deadline, proc.communicate(timeout=60)
                time.sleep(0.05)
        yield
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)


def wait_for_trial(project: Path, timeout_s: float = 30) -> bool:
    """Wait until the sweep in ``project`` has given a trial its folder (its process is then being
    started). Not its processes: the slots' fork servers start before the study is open."""
    deadline = time.monotonic() + timeout_s
    while not list(project.glob("mlruns/.trials/*/trial-*")):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """An empty folder to run `orchestrate` in, as a user's project folder."""
    return tmp_path


@pytest.fixture(scope="session")
def mlflow_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty MLflow database, once per test worker, made as ``orchestrate`` makes a new store:
    a copy of the one this mlflow version built first on this machine (``tracking.new_store``;
    MLflow's own build runs every schema migration since MLflow 1.x, 2.4-2.7 CPU-s here; MLflow's
    own test suite copies a migrated database for the same reason)."""
    folder = tmp_path_factory.mktemp("mlflow-template")
    subprocess.run([sys.executable, "-c", "import sys; from orchestrator.store.study import create_sqlite_atomically; "
                    "from orchestrator.store.tracking import new_store; "
                    "create_sqlite_atomically('sqlite:///' + sys.argv[1], new_store)", str(folder / "mlflow.db")],
                   cwd=folder, check=True, capture_output=True, timeout=300)
    return folder / "mlflow.db"


def seed_mlflow(folder: Path, template: Path) -> Path:
    """``folder`` with ``mlruns/mlflow.db`` already created (a copy of the template), as a project
    whose MLflow store exists before its first sweep; the first-run path stays tested where
    ``project`` is used."""
    (folder / "mlruns").mkdir(exist_ok=True)
    shutil.copyfile(template, folder / "mlruns" / "mlflow.db")
    return folder


@pytest.fixture
def seeded_project(tmp_path: Path, mlflow_template: Path) -> Path:
    """``project``, with its MLflow store already created: for the tests that are about something
    else than a project's first run."""
    return seed_mlflow(tmp_path, mlflow_template)
