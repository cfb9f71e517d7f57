"""Team mode you can trust, for real: a PostgreSQL role that must give its password, an MLflow
server behind MLflow's own basic auth, and the database and the tracking server going away in
the middle of sweeps (``orchestrator.store.outage``, ``orchestrator.redact``).

Its own PostgreSQL cluster (restarting the session's would disturb other tests), its own
``mlflow server``. Each test reads the records back through Optuna's and MLflow's own APIs and
dumps both databases to look for the secrets.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import ORCHESTRATE, left_behind, orchestrate_popen, standing_still, write_spec
from procs import processes
from servers import MlflowServer, PostgresServer, start_postgres

pytestmark = pytest.mark.slow

ROLE, PG_SECRET, ML_SECRET = "sweeper", "pg-Secr3t-8q7", "ml-Secr3t-4z2"
HIDDEN = [8, 12, 16, 20, 24, 28, 32, 36]
STALE = "stopped sending heartbeats"


@pytest.fixture(scope="module")
def pg() -> Iterator[PostgresServer]:
    yield from start_postgres({ROLE: PG_SECRET})


def with_password(url: str) -> str:
    return url.replace(f"{ROLE}@", f"{ROLE}:{PG_SECRET}@")


def spec_text(storage: str | None, tracking: str, outage_s: float = 300, min_measure_s: float = 0.4,
              hidden: list[int] = HIDDEN) -> str:
    store = f"storage: {storage}\n        " if storage else ""
    return f"""
        name: team
        experiment: experiments.faults
        device: cpu
        {store}tracking_uri: {tracking}
        fixed: {{batch_size: 8}}
        space: {{hidden_size: {hidden}}}
        search: {{sampler: grid, grace_period_s: 4, outage_s: {outage_s}}}
        trial: {{warmup_steps: 1, measure_steps: 2, min_measure_s: {min_measure_s}, timeout_s: 60}}
        """


def start(folder: Path, text: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    folder.mkdir(exist_ok=True)
    spec = write_spec(folder, text)
    return orchestrate_popen([str(spec), "--no-check", *args], folder, {"PYTHONUNBUFFERED": "1", **(env or {})})


def results(storage: str) -> list:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.load_study(study_name="team", storage=with_password(storage)).get_trials()


def measured_once(trials: list) -> dict[int, int]:
    """hidden_size -> how many trials measured it (ran a process to a result): as the orchestrator
    reads the record, so a trial another orchestrator declared dead while it was being told (FAIL,
    with its late ``ok``) is not a result (``record.settled``)."""
    from orchestrator.outcome import Status
    from orchestrator.store.record import is_attempt, status_of

    out: dict[int, int] = {}
    for t in trials:
        if status_of(t) is Status.OK and is_attempt(t):
            out[t.params["hidden_size"]] = out.get(t.params["hidden_size"], 0) + 1
    return out


def dump(url: str) -> str:
    """Every row of every table of a database, as text."""
    import psycopg2

    name = url.rsplit("/", 1)[1]
    port = int(re.search(r":(\d+)/", url).group(1))  # type: ignore[union-attr]
    conn = psycopg2.connect(host="127.0.0.1", port=port, user=ROLE, password=PG_SECRET, dbname=name)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
            text = []
            for (table,) in cur.fetchall():
                cur.execute(f'SELECT * FROM "{table}"')
                text += [repr(row) for row in cur.fetchall()]
            return "\n".join(text)
    finally:
        conn.close()


def files_text(folder: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file()
                     and p.suffix not in (".db", ".png"))


def test_secrets_appear_nowhere(tmp_path: Path, pg: PostgresServer) -> None:
    """The study's database needs its password (scram); the MLflow server needs basic auth. The
    password given on the command line, the tracking password given to MLflow's own variables:
    neither is printed, written to a file, recorded in MLflow or in Optuna, nor seen by a trial."""
    storage, backend = pg.database_for(ROLE, "study"), pg.database_for(ROLE, "runs")
    server = MlflowServer(with_password(backend), tmp_path / "mlflow", auth_password=ML_SECRET)
    tracking = server.start()
    try:
        env = {"MLFLOW_TRACKING_USERNAME": "admin", "MLFLOW_TRACKING_PASSWORD": ML_SECRET}
        run = start(tmp_path / "a", spec_text(None, tracking, hidden=HIDDEN[:2]),
                    "--storage", with_password(storage), env=env)
        seen_envs = []
        while run.poll() is None:  # the trial processes' environments, while they run (each lives past
            # its window of min_measure_s=0.4, twice this loop's pause)
            seen_envs += [b"\0".join(environ) for p in processes()
                          if "orchestrator.harness" in p.cmdline and str(tmp_path) in p.cmdline
                          and (environ := p.environ()) is not None]
            time.sleep(0.2)
        out, err = run.communicate()
        assert run.returncode == 0, out + err
        assert seen_envs and not any(s.encode() in e for e in seen_envs for s in (PG_SECRET, ML_SECRET))
        assert err.count("--storage holds a password") == 1  # said once, with how to avoid it
        # the printed commands paste without the password: libpq's PGPASSWORD supplies it
        resume = next(line for line in out.splitlines() if line.startswith("Resume:"))[len("Resume:"):].split()
        assert resume[0] == "orchestrate" and "--storage" in resume
        again = subprocess.run([ORCHESTRATE, *resume[1:]], cwd=tmp_path / "a", capture_output=True, text=True,
                               env={**os.environ, **env, "PGPASSWORD": PG_SECRET}, timeout=300)
        assert again.returncode == 0 and "2 of 2 trials done" in again.stdout, again.stderr
        without = subprocess.run([ORCHESTRATE, *resume[1:]], cwd=tmp_path / "a", capture_output=True, text=True,
                                 env={k: v for k, v in os.environ.items() if k != "PGPASSWORD"}, timeout=300)
        assert without.returncode == 2 and "no password supplied" in without.stderr  # the role really needs one
        report = subprocess.run([ORCHESTRATE, "report", "spec.yaml", "--format", "json", "--plots"],
                                cwd=tmp_path / "a", capture_output=True, text=True, timeout=300,
                                env={**os.environ, **env, "ORCHESTRATE_STORAGE": with_password(storage)})
        assert report.returncode == 0, report.stderr
        printed = out + err + again.stdout + again.stderr + without.stderr + report.stdout + report.stderr
        for secret in (PG_SECRET, ML_SECRET):
            assert secret not in printed
            assert secret not in files_text(tmp_path / "a")          # trial folders, logs, reports, plots' data
            assert secret not in files_text(server.artifacts)        # MLflow's artifacts (the spec among them)
            assert secret not in dump(storage)                       # Optuna: every attribute
            assert secret not in dump(backend)                       # MLflow: params, tags, runs
        assert "***@127.0.0.1" in out  # what was shown: the URL, masked
    finally:
        server.kill()


def test_a_database_restart_and_a_20_s_stop_cost_nothing(tmp_path: Path, pg: PostgresServer) -> None:
    """Two orchestrators (the password from PGPASSWORD); mid-sweep the database restarts, then
    stops for 20 s (5 grace periods). Both finish: exit 0, no traceback, every configuration
    measured exactly once, no live trial failed for its missed heartbeats, none left RUNNING."""
    storage, tracking = pg.database_for(ROLE, "study"), pg.database_for(ROLE, "runs")
    env = {"PGPASSWORD": PG_SECRET, "ORCHESTRATE_STOP_AT": "after_tell:1,after_tell:2"}
    text = spec_text(storage, tracking)
    procs = [start(tmp_path / f"o{i}", text, env=env) for i in range(2)]
    with standing_still(*procs):  # each has told its first result (2 of 8)
        pg.restart()
    with standing_still(*procs):  # and its second (4 of 8)
        pg.stop()
    time.sleep(20)
    pg.start()
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, out + err
        assert "Traceback" not in out + err
    trials = results(storage)
    assert measured_once(trials) == {h: 1 for h in HIDDEN}
    assert not [t.number for t in trials if STALE in (t.user_attrs.get("detail") or "")]
    assert not [t.number for t in trials if not t.state.is_finished()]


def test_a_database_down_longer_than_outage_s_exits_75_and_resumes(tmp_path: Path, pg: PostgresServer) -> None:
    storage, tracking = pg.database_for(ROLE, "study"), pg.database_for(ROLE, "runs")
    env = {"PGPASSWORD": PG_SECRET}
    text = spec_text(storage, tracking, outage_s=3)
    proc = start(tmp_path / "a", text, env={**env, "ORCHESTRATE_STOP_AT": "after_tell:2"})
    with standing_still(proc):
        pg.stop()
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        pg.start()
    assert proc.returncode == 75, out + err
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"orchestrate: the study's database postgresql+psycopg2://{ROLE}@127.0.0.1")
    assert "search.outage_s=3" in line and "run the same command to resume" in line and "Traceback" not in err
    again = start(tmp_path / "a", text, env=env)
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, out + err
    trials = results(storage)
    assert set(measured_once(trials)) == set(HIDDEN)
    assert not [t.number for t in trials if not t.state.is_finished()], (
        [(t.number, t.state.name, t.params, t.user_attrs, t.system_attrs) for t in trials], out)


def test_a_database_down_at_start_is_waited_for_and_exits_75(tmp_path: Path, pg: PostgresServer) -> None:
    """The PostgreSQL tour: the study's database stopped before the command started was refused
    as a spec error (exit 2, "cannot connect"), where the same outage mid-sweep, or a tracking
    server down at start, is waited for and exits 75 (what a requeue loop resumes on). Now a run
    waits up to search.outage_s, then exits 75 with nothing made; --dry-run says a run would wait;
    once the database is back the same command runs."""
    storage, tracking = pg.database_for(ROLE, "study"), pg.database_for(ROLE, "runs")
    env = {"PGPASSWORD": PG_SECRET}
    text = spec_text(storage, tracking, outage_s=3, hidden=HIDDEN[:2], min_measure_s=0.05)
    pg.stop()
    try:
        (tmp_path / "dry").mkdir()
        dry = subprocess.run([ORCHESTRATE, str(write_spec(tmp_path / "dry", text)), "--dry-run"], cwd=tmp_path,
                             env={**os.environ, **env}, capture_output=True, text=True, timeout=120)
        run = start(tmp_path / "a", text, env=env)
        out, err = run.communicate(timeout=120)
    finally:
        pg.start()
    assert dry.returncode == 2 and "a run would wait for it up to search.outage_s=3 s, then stop (exit 75)" in dry.stderr, (
        dry.stdout + dry.stderr)
    assert run.returncode == 75, out + err
    assert "Traceback" not in err and "cannot connect" not in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"orchestrate: the study's database postgresql+psycopg2://{ROLE}@127.0.0.1") and \
        "nothing was started" in last, err
    assert not (tmp_path / "a" / "mlruns" / ".trials").exists() or not any((tmp_path / "a" / "mlruns" / ".trials").iterdir())
    again = start(tmp_path / "a", text, env=env)
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, out + err


def test_a_study_deleted_under_a_running_sweep_is_one_line(tmp_path: Path, pg: PostgresServer) -> None:
    """The PostgreSQL tour: ``orchestrate delete`` from another folder during a sweep's start-up
    (no trial RUNNING yet, so nothing said it was in use) deleted the study, and the sweep died
    with a traceback (``KeyError: 'Record does not exist.'``) at its next write. Deleted here
    mid-sweep through Optuna itself: one line, exit 2 (the study as a whole), nothing left running."""
    import optuna

    storage, tracking = pg.database_for(ROLE, "study"), pg.database_for(ROLE, "runs")
    # Deleted while the sweep stands still after telling its first result (ORCHESTRATE_STOP_AT), then
    # let go: its next write finds the study gone. A poll of the database for that first result (as
    # before) answered in the clean-clone CI only after every trial had ended, twice.
    text = spec_text(storage, tracking, min_measure_s=0.4)
    proc = start(tmp_path / "a", text, env={"PGPASSWORD": PG_SECRET, "ORCHESTRATE_STOP_AT": "after_tell:1"})
    with standing_still(proc):
        optuna.delete_study(study_name="team", storage=with_password(storage))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and "Traceback" not in err, out + err
    assert err.strip().splitlines()[-1].startswith("orchestrate: study 'team' in postgresql+psycopg2://"), out + err
    assert "was deleted while this sweep ran" in err and "run the same command with --new-study" in err, out + err
    assert left_behind(tmp_path) == []  # waits for processes still ending (this flaked under -n 3 load)
    # the same command: MLflow holds the deleted study's runs, so a new one is started on purpose only
    # (it started over silently, where a lost SQLite file is refused)
    again = start(tmp_path / "a", text, env={"PGPASSWORD": PG_SECRET})
    out, err = again.communicate(timeout=120)
    assert again.returncode == 2 and "study 'team' is missing from postgresql+psycopg2://" in err, out + err
    assert "no study of this name in that database" in err and "--new-study" in err, err


def test_a_tracking_server_restart_costs_nothing(tmp_path: Path, pg: PostgresServer) -> None:
    """The ``mlflow server`` is killed mid-sweep and started again (the same port and store): the
    sweep exits 0 and every trial has its one run, finished, with its metrics."""
    storage, backend = pg.database_for(ROLE, "study"), pg.database_for(ROLE, "server")
    server = MlflowServer(with_password(backend), tmp_path / "mlflow")
    tracking = server.start()
    try:
        proc = start(tmp_path / "a", spec_text(storage, tracking),
                     env={"PGPASSWORD": PG_SECRET, "ORCHESTRATE_STOP_AT": "after_tell:2"})
        with standing_still(proc):
            server.kill()
        time.sleep(3)
        server.start()
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, out + err
        assert "Traceback" not in out + err
        assert "View run" not in out and "View experiment" not in out, out  # MLflow's links after each trial's line
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking)
        exp = client.get_experiment_by_name("team")
        runs = client.search_runs([exp.experiment_id], "tags.role = 'trial'")
        by_trial: dict[str, list] = {}
        for r in runs:
            by_trial.setdefault(r.data.tags["trial_number"], []).append(r)
        told = [t for t in results(storage) if t.user_attrs.get("status") == "ok"]
        assert len(told) == len(HIDDEN)
        for t in told:
            (run,) = by_trial[str(t.number)]
            assert run.info.status == "FINISHED" and run.data.metrics["samples_per_s"] > 0
    finally:
        server.kill()


def test_a_lock_lost_with_its_session_is_taken_again_and_counted(pg: PostgresServer) -> None:
    """The study's advisory lock dies with its session when the database restarts. ``ensure`` (run
    before every retried call) takes it again on a new session and counts it in ``retaken``: the
    proposer then reads the study again before its trial runs (``test_proposer.py``), since
    another orchestrator may have held the lock meanwhile."""
    import sqlalchemy

    from orchestrator.store.coordination import StudyLock

    url = with_password(pg.database_for(ROLE, "lock"))
    lock = StudyLock(url, "team")
    probe = sqlalchemy.create_engine(url, poolclass=sqlalchemy.pool.NullPool)

    def free() -> bool:  # whether another session could take the lock now
        with probe.connect() as conn:
            got = conn.execute(sqlalchemy.text("SELECT pg_try_advisory_lock(:k)"), {"k": lock._key}).scalar()
            conn.execute(sqlalchemy.text("SELECT pg_advisory_unlock_all()"))
            return bool(got)

    with lock:
        assert not free() and lock.retaken == 0
        lock.ensure()  # its session alive: nothing to do
        assert lock.retaken == 0
        pg.restart()
        assert free()  # gone with the session
        lock.ensure()
        assert lock.retaken == 1 and not free()
        pg.restart()  # again, and no call fails to say so (Optuna's pool reconnects unseen)
        assert free()
        lock.confirm()  # what the proposer asks before its trial runs
        assert lock.retaken == 2 and not free()
        lock.confirm()
        assert lock.retaken == 2
    assert free()


def test_a_lock_held_by_a_frozen_orchestrator_is_freed_by_the_server(pg: PostgresServer) -> None:
    """An orchestrator stopped (SIGSTOP, a suspended VM) inside a proposal kept its session open and
    the study's lock with it: every other orchestrator of the study waited for it for good (seen
    in the frozen case of test_distributed.py). The server now ends the lock's session once it has
    been idle for ``idle_s`` (PostgreSQL 14+'s idle_session_timeout), and the others go on; a live
    holder that sat idle so long finds the lock gone and takes it again (``confirm``)."""
    import sys

    from orchestrator.store.coordination import StudyLock

    url = with_password(pg.database_for(ROLE, "frozen"))
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\nfrom orchestrator.store.coordination import StudyLock\n"
        f"lock = StudyLock({url!r}, 'team', idle_s=2)\nlock.__enter__()\nprint('held', time.monotonic(), flush=True)\ntime.sleep(600)\n")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        said, held_at = holder.stdout.readline().split()
        assert said == "held"
        holder.send_signal(signal.SIGSTOP)
        started = float(held_at)  # the holder's own clock (CLOCK_MONOTONIC is the machine's): a test
        # stalled between its line and here would otherwise shorten the wait it measures
        other = StudyLock(url, "team", idle_s=2)
        with other:  # waits until the server ends the frozen holder's idle session
            waited = time.monotonic() - started
        assert 1.0 < waited < 30, waited
        with other:  # a live holder idle past idle_s: its lock is gone, and confirm takes it again
            time.sleep(3)
            other.confirm()
            assert other.retaken == 1
    finally:
        holder.kill()
        holder.wait()


def test_a_shared_study_tracked_in_a_local_file_is_said(tmp_path: Path, pg: PostgresServer) -> None:
    """The PostgreSQL tour: one host's spec left tracking_uri out, its runs went to its own
    mlruns/mlflow.db, and each host's check then missed the other's runs, without a word."""
    storage = pg.database_for(ROLE, "study")
    text = spec_text(storage, "sqlite:///mlruns/mlflow.db", hidden=HIDDEN[:1], min_measure_s=0.05)
    proc = start(tmp_path / "a", text, env={"PGPASSWORD": PG_SECRET})
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, out + err
    assert (f"  the study is shared through postgresql+psycopg2://{ROLE}@127.0.0.1" in out
            and f"MLflow runs go to sqlite:///{tmp_path / 'a' / 'mlruns' / 'mlflow.db'}, on this host" in out), out
