"""The scale-out fixtures give real servers: a PostgreSQL server that several processes share
through Optuna's RDBStorage (with heartbeats that fail a dead orchestrator's trial), and an
MLflow tracking server that stores runs in PostgreSQL and takes artifacts over HTTP. Also
prints per-call latencies on these servers (run with -s to see them)."""

from __future__ import annotations

import json
import os
import pwd
import signal
import statistics
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    import servers

# tests/conftest.py registers the same plugin; pytest loads a plugin once, so the fixtures (and
# their session-scoped servers) are the same ones. `import servers` only inside tests, after
# pytest has loaded it as a plugin (an earlier import would bypass its assertion rewriting).
pytest_plugins = ["servers"]


@pytest.fixture(autouse=True)
def no_run_links(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """MLflow prints a "View run" link per finished run to an HTTP server; not in test output."""
    monkeypatch.setenv("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    yield


def optuna_quiet():
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


# --- the fixtures themselves ------------------------------------------------------------------


def test_postgres_is_a_local_tuned_server_with_fresh_databases(postgres: servers.PostgresServer) -> None:
    import sqlalchemy

    import servers

    first, second = postgres.new_database("a"), postgres.new_database("a")
    assert first != second and first.startswith(f"postgresql+psycopg2://{postgres.user}@127.0.0.1:{postgres.port}/")
    engine = sqlalchemy.create_engine(first)
    try:
        with engine.connect() as conn:
            show = {name: conn.execute(sqlalchemy.text(f"SHOW {name}")).scalar_one()
                    for name in ("fsync", "synchronous_commit", "full_page_writes", "listen_addresses",
                                 "max_connections", "TimeZone", "data_directory")}
            tables = conn.execute(sqlalchemy.text(
                "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'")).scalar_one()
            server_addr = conn.execute(sqlalchemy.text("SELECT host(inet_server_addr())")).scalar_one()
    finally:
        engine.dispose()
    assert (show["fsync"], show["synchronous_commit"], show["full_page_writes"]) == ("off", "off", "off")
    assert show["listen_addresses"] == "127.0.0.1" and server_addr == "127.0.0.1"
    assert int(show["max_connections"]) >= 100 and show["TimeZone"] == "UTC"
    assert tables == 0  # a fresh database
    data_owner = pwd.getpwuid(os.stat(show["data_directory"]).st_uid).pw_name
    assert data_owner == (servers.SERVER_USER_AS_ROOT if os.geteuid() == 0 else postgres.user)
    assert Path(show["data_directory"]).is_relative_to(postgres.root)
    print(f"\npostgres fixture start-up: {postgres.startup_s:.2f} s (port {postgres.port}, "
          f"binaries {postgres.bin_dir})")


@pytest.mark.parametrize("ci, outcome", [("true", pytest.fail.Exception), ("", pytest.skip.Exception),
                                          ("false", pytest.skip.Exception)])
def test_missing_binaries_skip_except_in_ci(monkeypatch: pytest.MonkeyPatch, ci: str, outcome: type) -> None:
    import servers

    monkeypatch.setenv("CI", ci)
    monkeypatch.setattr(servers, "find_pg_bin", lambda: None)
    with pytest.raises(outcome, match="PostgreSQL server binaries .* not found"):
        next(servers.start_postgres())


# --- Optuna on PostgreSQL ---------------------------------------------------------------------

ORCHESTRATOR = textwrap.dedent(r"""
    import json, sys
    import optuna
    from mlflow.tracking import MlflowClient

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage_url, study_name, tracking_uri, experiment_id = sys.argv[1:5]
    worker, n = int(sys.argv[5]), int(sys.argv[6])
    study = optuna.load_study(study_name=study_name, storage=storage_url,
                              sampler=optuna.samplers.RandomSampler(seed=worker))
    client = MlflowClient(tracking_uri=tracking_uri)
    print("ready", flush=True)
    sys.stdin.readline()  # the parent starts every worker at once
    told = []
    for _ in range(n):
        trial = study.ask()
        x = trial.suggest_float("x", -10.0, 10.0)
        trial.set_user_attr("worker", worker)
        run = client.create_run(experiment_id, tags={"trial_number": str(trial.number)})
        client.log_metric(run.info.run_id, "y", x * x)
        client.set_terminated(run.info.run_id)
        study.tell(trial, x * x)
        told.append([trial.number, x * x])
    print(json.dumps(told), flush=True)
    """)


def test_three_processes_share_one_study_and_one_tracking_server(
        postgres_url: str, mlflow_server: servers.MlflowServerURI) -> None:
    optuna = optuna_quiet()
    from mlflow.tracking import MlflowClient

    n_workers, n_trials = 3, 4
    # The parent creates the schema and the study first: Optuna's create_all on an empty
    # PostgreSQL database is not safe from several processes at once (CREATE TABLE races).
    optuna.create_study(study_name="shared", storage=postgres_url)
    client = MlflowClient(tracking_uri=mlflow_server)
    experiment_id = client.create_experiment(f"shared-{time.time_ns()}")  # the server outlives the test
    workers = [subprocess.Popen([sys.executable, "-c", ORCHESTRATOR, postgres_url, "shared", mlflow_server,
                                 experiment_id, str(i), str(n_trials)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for i in range(n_workers)]
    try:
        for w in workers:
            assert w.stdout.readline().strip() == "ready", w.stderr.read()
        for w in workers:
            w.stdin.write("go\n")
            w.stdin.flush()
        outputs = [w.communicate(timeout=120) for w in workers]
    finally:
        for w in workers:
            w.kill()
    assert [w.returncode for w in workers] == [0] * n_workers, [err[-2000:] for _, err in outputs]
    told = {worker: json.loads(out.strip().splitlines()[-1]) for worker, (out, _) in enumerate(outputs)}

    trials = optuna.load_study(study_name="shared", storage=postgres_url).get_trials()
    assert len(trials) == n_workers * n_trials
    assert sorted(t.number for t in trials) == list(range(n_workers * n_trials))  # unique, none lost
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    by_number = {t.number: t for t in trials}
    for worker, pairs in told.items():
        assert len(pairs) == n_trials
        for number, value in pairs:
            assert by_number[number].user_attrs["worker"] == worker and by_number[number].value == value
    runs = client.search_runs([experiment_id], max_results=1000)
    assert sorted(int(r.data.tags["trial_number"]) for r in runs) == list(range(n_workers * n_trials))
    assert {r.info.status for r in runs} == {"FINISHED"}
    assert {int(r.data.tags["trial_number"]): r.data.metrics["y"] for r in runs} == \
        {t.number: t.value for t in trials}


HEARTBEATING_ORCHESTRATOR = textwrap.dedent(r"""
    import sys, threading, time, warnings
    import optuna

    warnings.simplefilter("ignore")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.RDBStorage(sys.argv[1], heartbeat_interval=1, grace_period=2)
    study = optuna.load_study(study_name=sys.argv[2], storage=storage)
    trial = study.ask()
    storage.record_heartbeat(trial._trial_id)

    def beat():
        while True:
            time.sleep(1)
            storage.record_heartbeat(trial._trial_id)

    threading.Thread(target=beat, daemon=True).start()
    print(trial.number, flush=True)
    threading.Event().wait()  # until killed
    """)


def test_a_dead_orchestrators_trial_goes_stale_and_a_live_ones_does_not(postgres_url: str) -> None:
    optuna = optuna_quiet()
    from optuna.trial import TrialState

    with pytest.warns(optuna.exceptions.ExperimentalWarning, match="heartbeat_interval"):
        storage = optuna.storages.RDBStorage(postgres_url, heartbeat_interval=1, grace_period=2)
    study = optuna.create_study(study_name="hb", storage=storage)
    doomed = subprocess.Popen([sys.executable, "-c", HEARTBEATING_ORCHESTRATOR, postgres_url, "hb"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stop = threading.Event()
    try:
        dead_number = int(doomed.stdout.readline() or -1)
        assert dead_number >= 0, doomed.stderr.read()
        # Under ask/tell Optuna records no heartbeat itself, and says so on every ask.
        with pytest.warns(UserWarning, match="Heartbeat of storage is supposed to be used with Study.optimize"):
            live, silent = study.ask(), study.ask()
        storage.record_heartbeat(live._trial_id)

        def beat() -> None:
            while not stop.wait(1.0):
                storage.record_heartbeat(live._trial_id)

        threading.Thread(target=beat, daemon=True).start()
        doomed.send_signal(signal.SIGKILL)  # the orchestrator dies: its heartbeat stops
        doomed.wait(timeout=10)
        killed_at = time.monotonic()

        def states() -> dict[int, TrialState]:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                optuna.storages.fail_stale_trials(study)
            return {t.number: t.state for t in study.get_trials()}

        failed_after = None
        while time.monotonic() - killed_at < 15:
            now = states()
            assert now[live.number] == TrialState.RUNNING  # its heartbeat continues
            if failed_after is None and now[dead_number] == TrialState.FAIL:
                failed_after = time.monotonic() - killed_at
            if failed_after is not None and time.monotonic() - killed_at > 4:  # well past the grace period
                break
            time.sleep(0.25)
        assert failed_after is not None, "the dead orchestrator's trial was never failed"
        assert failed_after <= 4.5
        print(f"\nheartbeat stale: the dead orchestrator's trial failed {failed_after:.1f} s after the kill")
        # A RUNNING trial that never got a heartbeat row is never stale, however old it is.
        assert now[silent.number] == TrialState.RUNNING
        study.tell(live, 1.0)
    finally:
        stop.set()
        doomed.kill()
    assert study.get_trials()[live.number].state == TrialState.COMPLETE


def test_heartbeat_age_is_read_in_each_sessions_time_zone(postgres_url: str) -> None:
    """Optuna stores heartbeats as `timestamp without time zone` from the session's now(): a
    client whose session time zone differs (PGTZ, or `options=-c timezone=...`) writes wall
    times the others misread. Pinning every client's session to UTC removes the difference."""
    optuna = optuna_quiet()
    from optuna.trial import TrialState

    def storage(timezone: str | None):
        kwargs = {"connect_args": {"options": f"-c timezone={timezone}"}} if timezone else {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.storages.RDBStorage(postgres_url, heartbeat_interval=1, grace_period=2,
                                              engine_kwargs=kwargs)

    checker = storage(None)  # the server's default: UTC
    study = optuna.create_study(study_name="tz", storage=checker)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        five_hours_behind, pinned = study.ask(), study.ask()
        storage("Etc/GMT+5").record_heartbeat(five_hours_behind._trial_id)  # POSIX sign: UTC-5
        storage("UTC").record_heartbeat(pinned._trial_id)
        optuna.storages.fail_stale_trials(study)
    states = {t.number: t.state for t in study.get_trials()}
    assert states[five_hours_behind.number] == TrialState.FAIL  # a live heartbeat, read as 5 h old
    assert states[pinned.number] == TrialState.RUNNING


# --- MLflow -------------------------------------------------------------------------------------


def test_the_tracking_server_takes_runs_and_artifacts_over_http(
        mlflow_server: servers.MlflowServerURI, tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=mlflow_server)
    experiment_id = client.create_experiment(f"http-{time.time_ns()}")
    location = client.get_experiment(experiment_id).artifact_location
    assert location.startswith("mlflow-artifacts:/"), location  # not a path the client could write
    run_id = client.create_run(experiment_id).info.run_id
    client.log_param(run_id, "batch_size", 64)
    client.log_metric(run_id, "samples_per_s", 123.5)
    upload = tmp_path / "upload"
    upload.mkdir()
    (upload / "result.json").write_text('{"samples_per_s": 123.5}')
    client.log_artifact(run_id, str(upload / "result.json"), artifact_path="trial")
    client.set_terminated(run_id)
    (upload / "result.json").unlink()  # the only copy left is the server's

    reader = MlflowClient(tracking_uri=mlflow_server)
    run = reader.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params == {"batch_size": "64"} and run.data.metrics == {"samples_per_s": 123.5}
    assert [f.path for f in reader.list_artifacts(run_id, "trial")] == ["trial/result.json"]
    download = tmp_path / "download"
    download.mkdir()
    got = Path(reader.download_artifacts(run_id, "trial/result.json", dst_path=str(download)))
    assert got.is_relative_to(download) and got.read_text() == '{"samples_per_s": 123.5}'
    # where the server put it (the server is shared by the session: other tests' runs are there too)
    stored = [p for p in mlflow_server.artifacts_dir.rglob("result.json") if run_id in p.parts]
    assert len(stored) == 1 and stored[0].read_text() == '{"samples_per_s": 123.5}'
    print(f"\nmlflow_server fixture start-up: {mlflow_server.startup_s:.2f} s ({mlflow_server})")


def test_a_client_can_use_the_postgresql_store_directly(postgres_url: str, tmp_path: Path) -> None:
    import sqlalchemy
    from mlflow.tracking import MlflowClient

    writer = MlflowClient(tracking_uri=postgres_url)  # creates MLflow's tables in the empty database
    experiment_id = writer.create_experiment("direct", artifact_location=tmp_path.as_uri())
    run_id = writer.create_run(experiment_id).info.run_id
    writer.log_param(run_id, "dtype", "bfloat16")
    writer.log_metric(run_id, "peak_memory_gib", 1.25)
    writer.set_terminated(run_id, status="FAILED")

    run = MlflowClient(tracking_uri=postgres_url).get_run(run_id)
    assert (run.info.status, run.data.params, run.data.metrics) == \
        ("FAILED", {"dtype": "bfloat16"}, {"peak_memory_gib": 1.25})
    engine = sqlalchemy.create_engine(postgres_url)
    try:
        with engine.connect() as conn:  # the run is a row in PostgreSQL, not in some other store
            assert conn.execute(sqlalchemy.text("SELECT run_uuid FROM runs")).scalars().all() == [run_id]
    finally:
        engine.dispose()


# --- latency --------------------------------------------------------------------------------------


def per_call_ms(fn: Callable[[int], None], n: int, warmup: int = 3) -> tuple[float, float]:
    """Median and 90th percentile of ``fn``'s wall time in milliseconds, after a warm-up."""
    for i in range(warmup):
        fn(i)
    times = []
    for i in range(n):
        start = time.perf_counter()
        fn(warmup + i)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), statistics.quantiles(times, n=10)[-1]


def test_per_call_latency(postgres: servers.PostgresServer, mlflow_server: servers.MlflowServerURI,
                          tmp_path: Path) -> None:
    optuna = optuna_quiet()
    from mlflow.entities import Metric, Param, RunTag
    from mlflow.tracking import MlflowClient

    study = optuna.create_study(study_name="latency", storage=postgres.new_database("latency_optuna"),
                                sampler=optuna.samplers.RandomSampler(seed=0))

    def ask_tell(_: int) -> None:
        trial = study.ask()
        study.tell(trial, trial.suggest_float("x", -1.0, 1.0))

    def run_once(client: MlflowClient, experiment_id: str) -> Callable[[int], None]:
        def once(i: int) -> None:
            run_id = client.create_run(experiment_id, tags={"trial_number": str(i)}).info.run_id
            now = int(time.time() * 1000)
            client.log_batch(run_id, metrics=[Metric(f"m{k}", float(k), now, 0) for k in range(8)],
                             params=[Param(f"p{k}", str(k)) for k in range(8)], tags=[RunTag("status", "ok")])
            client.set_terminated(run_id)
        return once

    over_http = MlflowClient(tracking_uri=mlflow_server)
    direct = MlflowClient(tracking_uri=postgres.new_database("latency_mlflow"))
    http_experiment = over_http.create_experiment(f"latency-{time.time_ns()}")
    direct_experiment = direct.create_experiment("latency", artifact_location=tmp_path.as_uri())

    n_optuna, n_runs = 50, 20
    figures = {
        "optuna ask+suggest+tell (RandomSampler)": per_call_ms(ask_tell, n_optuna),
        "mlflow create_run+log_batch+set_terminated, HTTP server": per_call_ms(
            run_once(over_http, http_experiment), n_runs),
        "mlflow create_run+log_batch+set_terminated, postgresql direct": per_call_ms(
            run_once(direct, direct_experiment), n_runs),
    }
    print()
    for what, (median, p90) in figures.items():
        print(f"{what:64s} median {median:6.1f} ms  p90 {p90:6.1f} ms")

    assert len(study.get_trials(states=[optuna.trial.TrialState.COMPLETE])) == n_optuna + 3
    for client, experiment_id in ((over_http, http_experiment), (direct, direct_experiment)):
        runs = client.search_runs([experiment_id], max_results=1000)
        assert len(runs) == n_runs + 3 and {r.info.status for r in runs} == {"FINISHED"}
        assert all(len(r.data.metrics) == 8 and len(r.data.params) == 8 for r in runs)
    assert all(median < 1000 for median, _ in figures.values()), figures  # a real, local server
