"""What a person sees in MLflow: ``orchestrate ui``, the runs table's saved view, the parent run.

``orchestrate ui`` runs ``mlflow ui`` bound to 127.0.0.1 as a child process in a session of its
own, prints the URL, forwards Ctrl-C/SIGTERM (once: the terminal's Ctrl-C reaches this process
alone) and returns the child's exit code. The child gets the run store's URI in
``MLFLOW_BACKEND_STORE_URI``, not on its command line (which any user of the machine can read),
and none of the orchestrator's other credentials; every URI printed has its password masked.
The store is never created here: no runs yet is a one-line error. Before the server starts, each
experiment with trial runs gets a saved view (trials flat, best first; the status, throughput and
peak memory first, then the swept parameters), and the printed URL opens it. ``ParentRun`` is how ``orchestrate report`` finds the study's parent
run to log its plots and extend its description.
"""

from __future__ import annotations

import argparse
import errno
import os
import shlex
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

from orchestrator import exits
from orchestrator import metrics as M
from orchestrator.errors import OrchestratorError, UsageParser, print_error
from orchestrator.invocation import command, tool
from orchestrator.outcome import Status
from orchestrator.report import uiguard
from orchestrator.report.views import NOTE, save_views
from orchestrator.redact import child_env, first_line, has_secret, pasteable, shown
from orchestrator.spec.load import DEFAULT_STORAGE, DEFAULT_TRACKING_URI, SweepSpec
from orchestrator.store.studyrecord import StudyRecord
from orchestrator.store.tracking import quiet_mlflow_logs
from orchestrator.urls import STORAGE_HELP, TRACKING_HELP, absolute_uri, is_tracking_server

HOST = "127.0.0.1"
ARTIFACT_DIR = "report"


USAGE = "orchestrate ui [SPEC] [--port N] [--storage URL] [--tracking-uri URI]"


def build_parser() -> argparse.ArgumentParser:
    p = UsageParser(prog="orchestrate ui", usage=USAGE, description=(
        f"Start the MLflow UI bound to {HOST} on the runs of SPEC (as every sweep's Browse: line "
        "prints it; without SPEC, on this folder's mlruns/mlflow.db) and print the URL of the "
        "experiment's trials, best first; Ctrl-C stops it. Only MLflow's web server runs (no job "
        "runner). The Optuna study opens in optuna-dashboard: optuna-dashboard sqlite:///$PWD/mlruns/optuna.db"))
    p.add_argument("spec", nargs="?", metavar="SPEC", help="a sweep spec: use its tracking_uri and open its experiment")
    p.add_argument("--port", type=int, default=5000, metavar="N", help="port on 127.0.0.1 (default: 5000)")
    p.add_argument("--storage", metavar="URL", help=STORAGE_HELP + " (for the optuna-dashboard line)")
    p.add_argument("--tracking-uri", metavar="URI", help=TRACKING_HELP)
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv[1:])
    try:
        if args.spec:
            from orchestrator.spec.load import load_guarded

            spec, _ = load_guarded(args.spec, args.storage, args.tracking_uri)
            runs_lost(spec)
            return serve(spec.tracking_uri, args.port, spec.storage, spec.name, spec.objective.metrics[0],
                         str(spec.path))
        return serve(args.tracking_uri or DEFAULT_TRACKING_URI, args.port, args.storage or DEFAULT_STORAGE)
    except OrchestratorError as exc:
        return print_error(exc)


def mlflow_command(port: int) -> list[str]:
    """``mlflow ui`` on ``HOST:port``; the store comes from ``server_env``."""
    exe = shutil.which("mlflow", path=str(Path(sys.executable).parent)) or shutil.which("mlflow")
    base = [exe] if exe else [sys.executable, "-m", "mlflow"]
    return base + ["ui", "--host", HOST, "--port", str(port), "--workers", "1"]


JOBS_ENV = "MLFLOW_SERVER_ENABLE_JOB_EXECUTION"
"""MLflow 3's server starts a job runner and eight huey consumer processes for its GenAI jobs
(judges, trace rollups, issue detection) unless this is false; the runs table needs none of them."""


def server_env(uri: str, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The MLflow server's environment: ``redact.child_env`` (without the credentials only the
    orchestrator uses), the store in ``MLFLOW_BACKEND_STORE_URI`` (``mlflow ui`` reads it there),
    libpq's ``PGPASSWORD`` where the store is a PostgreSQL URL that leaves its password to it, and
    no job runner (``JOBS_ENV``; a value the user set is kept)."""
    env = os.environ if environ is None else environ
    out = {**child_env(env), "MLFLOW_BACKEND_STORE_URI": uri, JOBS_ENV: env.get(JOBS_ENV) or "false"}
    if uri.startswith("postgresql") and not has_secret(uri) and env.get("PGPASSWORD"):
        out["PGPASSWORD"] = env["PGPASSWORD"]
    return out


def runs_lost(spec: SweepSpec) -> None:
    """MLflow's SQLite file missing where the spec's study holds results (deleted, say): refused
    in one line that names what writes the runs again, not "run a sweep first"."""
    from orchestrator.store.optuna_sql import trial_counts
    from orchestrator.urls import sqlite_path

    runs, study = sqlite_path(absolute_uri(spec.tracking_uri)), sqlite_path(absolute_uri(spec.storage))
    if runs is None or runs.is_file() or study is None:
        return
    done = sum((trial_counts(study, spec.name) or {}).get(state, 0) for state in ("COMPLETE", "PRUNED", "FAIL"))
    if done:
        raise OrchestratorError(
            f"no runs in {shown(absolute_uri(spec.tracking_uri))}, but study {spec.name!r} in "
            f"{shown(absolute_uri(spec.storage))} holds {done} ended trial(s): `{command('check', spec.path, '--repair')}` "
            "writes their MLflow runs from it (so does the sweep's own command), then run this again")


def check_store(uri: str, spec: str = "SPEC") -> str:
    """The absolute URI of an existing store; the one-line error if there are no runs yet, or if
    its file is damaged (``spec``: the path ``check --repair`` is told for)."""
    from orchestrator.urls import sqlite_path

    from orchestrator.store.study import check_file

    uri = absolute_uri(uri)
    path = sqlite_path(uri)
    if path is not None and not path.is_file():
        raise OrchestratorError(f"no runs yet in {shown(uri)}; run a sweep first ({command('SPEC')})")
    check_file(uri, "tracking_uri", f"`{command('check', spec, '--repair')}`")  # a damaged file: one line
    return uri


def check_port(port: int) -> None:
    if not 0 < port < 65536:
        raise OrchestratorError(f"--port must be between 1 and 65535, got {port}")
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as MLflow's server (uvicorn) binds: a
        try:  # port left in TIME_WAIT by the last `ui`'s browser connections is free (the docs tour: refused 60 s)
            s.bind((HOST, port))
        except OSError as exc:
            why = "is in use" if exc.errno == errno.EADDRINUSE else f"cannot be opened ({exc.strerror})"
            raise OrchestratorError(f"port {port} on {HOST} {why}; choose another with --port") from None


def serve(uri: str, port: int, storage: str = DEFAULT_STORAGE, name: str | None = None,
          objective: tuple[str, str] = (M.SAMPLES_PER_S, "maximize"), spec: str = "SPEC") -> int:
    uri = check_store(uri, spec)
    if is_tracking_server(uri):  # it serves MLflow's UI itself: `mlflow ui` cannot take it as a store
        return on_server(uri, objective, name)
    check_port(port)
    from orchestrator.store.moved import moved_lines, relocate

    try:
        moved = relocate(uri)  # a moved project: the runs' files are beside the store
    except (OSError, sqlite3.Error):
        moved = []  # a store this user cannot write (another's results, read-only): browsed as it is
    for line in moved_lines(moved, uri):
        print(f"orchestrate: {line}", flush=True)
    url = f"http://{HOST}:{port}/"
    pages = views(uri, url, objective, name)
    # A session of its own: the terminal's Ctrl-C reaches this process alone, which passes it on
    # once. In the terminal's group, mlflow and its uvicorn got it from the terminal as well as
    # from us (and uvicorn from mlflow too), and uvicorn, asked twice, printed a traceback.
    asked: list[int] = []
    up: list[bool] = []
    started: list[subprocess.Popen[bytes]] = []

    def forward(signum: int, _frame: object) -> None:  # Ctrl-C, SIGTERM, a closed terminal: let mlflow stop itself
        asked.append(signum)
        for child in started:  # mlflow passes on INT and TERM; still importing, it printed INT's traceback
            if child.poll() is None:
                child.send_signal(signal.SIGTERM if signum == signal.SIGHUP or not up else signum)

    # Taken before the server starts: a signal in between was lost (where the caller ignored SIGINT)
    # or left the server running (a KeyboardInterrupt before its guard).
    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        child = subprocess.Popen(mlflow_command(port), env=server_env(uri), start_new_session=True)
    except BaseException:
        for s, handler in previous.items():
            signal.signal(s, handler)
        raise
    started.append(child)
    guard = start_guard(child.pid)  # stops the server if this process is killed outright
    try:
        if asked:  # asked while it started
            forward(asked[-1], None)
        elif answers(url, child):  # its address printed once it answers (a tour: 8 s of "connection refused")
            up.append(True)
            print_views(f"MLflow UI: {url} (runs in {shown(uri)}); Ctrl-C stops it", pages)
            print(f"Optuna study: {shlex.join([tool('optuna-dashboard'), pasteable(absolute_uri(storage))])}  "
                  f"({shlex.join([tool('pip'), 'install', 'optuna-dashboard'])})", flush=True)
        code = child.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        end_server(child, guard, gracefully=bool(asked))
    if not asked:  # it ended by itself: killed, or its port taken between our check and its start
        print(f"orchestrate ui: the MLflow server ended without being asked to (exit code {code}); its own lines above say why "
              "(a port taken meanwhile, say); run the same command to start it again", file=sys.stderr)
        return exits.FAILED
    if asked[0] == signal.SIGINT and not up:  # before it answered: Ctrl-C's line and exit code, as before it started
        raise KeyboardInterrupt
    return 0 if code in (0, -signal.SIGINT, -signal.SIGTERM) else code


def on_server(uri: str, objective: tuple[str, str], name: str | None) -> int:
    """A tracking server's runs: the comparison view saved there, and its pages printed."""
    url = uri.rstrip("/") + "/"
    print_views(f"MLflow UI: {pasteable(url)} (the tracking server serves it: nothing to start here)",
                views(uri, url, objective, name))
    return exits.OK


def views(uri: str, url: str, objective: tuple[str, str], name: str | None) -> list[tuple[str, str]]:
    """The comparison view saved on each experiment (or the one named): (name, page under ``url``)."""
    from mlflow.exceptions import MlflowException

    try:
        return save_views(uri, url, objective[0], objective[1] == "maximize", only=name)
    except MlflowException as exc:
        raise OrchestratorError(f"tracking_uri {shown(uri)}: {first_line(exc, uri)}") from None


def print_views(heading: str, pages: list[tuple[str, str]]) -> None:
    """``heading``, then each experiment's page (without a password: ``pasteable``)."""
    print(heading, flush=True)
    for exp_name, page in pages:
        print(f"  experiment {exp_name!r}: {pasteable(page)}", flush=True)


def answers(url: str, child: subprocess.Popen[bytes], limit_s: float = 300.0) -> bool:
    """Whether the server at ``url`` answers ``/health`` before its process ends (or ``limit_s``)."""
    import time
    import urllib.request

    deadline = time.monotonic() + limit_s
    while child.poll() is None and time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "health", timeout=2):
                return True
        except OSError:
            time.sleep(0.2)
    return child.poll() is None


def end_server(child: subprocess.Popen[bytes], guard: subprocess.Popen[bytes], gracefully: bool) -> None:
    """Once ``mlflow`` has exited: what is left of its group (uvicorn outlives a killed ``mlflow``)
    stopped, given the time to stop itself where it was asked to (a second signal made uvicorn print
    a traceback); then the guard told there is nothing left to stop."""
    if not (gracefully and uiguard.gone(child.pid, uiguard.GRACE_S)):
        uiguard.stop_group(child.pid)
    try:
        guard.stdin.write(uiguard.DONE)  # type: ignore[union-attr]  # a pipe: stdin=PIPE
        guard.stdin.close()  # type: ignore[union-attr]  # as above
    except BrokenPipeError:  # the guard is gone already
        pass
    guard.wait()


def start_guard(pgid: int) -> subprocess.Popen[bytes]:
    """The server's guard (``uiguard``): it stops process group ``pgid`` once this process's end of
    its pipe closes without ``DONE``, so ``kill -9`` of ``orchestrate ui`` leaves no server behind."""
    env = {k: v for k, v in os.environ.items() if k in GUARD_ENV}  # no credential: it needs none
    return subprocess.Popen([sys.executable, "-m", "orchestrator.report.uiguard", str(pgid)], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=env)


GUARD_ENV = ("PATH", "PYTHONPATH", "PYTHONHOME", "LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT")
"""What the guard's Python needs of this process's environment: nothing that may hold a secret."""


# -- the study's parent run: the report's plots and the sweep's description ---------------------

class ParentRun:
    """The study's parent run in MLflow, if the store and the run exist (never created here)."""

    def __init__(self, client: Any, run_id: str | None, why: str, uri: str = "") -> None:
        self.client, self.run_id, self.why, self.uri = client, run_id, why, uri

    @classmethod
    def find(cls, spec: SweepSpec, study: Any) -> "ParentRun":
        from orchestrator.urls import sqlite_path

        uri = absolute_uri(spec.tracking_uri)
        path = sqlite_path(uri)
        if path is not None and not path.is_file():
            return cls(None, None, f"no MLflow store at {shown(uri)}; plots not logged")
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient

        quiet_mlflow_logs()
        try:
            client = MlflowClient(tracking_uri=uri)
            exp = client.get_experiment_by_name(spec.name)
            runs = [] if exp is None else client.search_runs(
                [exp.experiment_id], filter_string=f"tags.role = 'sweep' and tags.study = '{spec.name}'",
                order_by=["attributes.start_time ASC"])
            ids = [r.info.run_id for r in runs]
            wanted = StudyRecord.of(study).parent_run_id  # set by the sweep; exact
            run_id = wanted if wanted in ids else None  # never another study's parent
            if run_id is None:
                return cls(None, None, f"no parent run for study {spec.name!r} in {shown(uri)}; plots not logged")
        except MlflowException as exc:
            return cls(None, None, f"MLflow store {shown(uri)}: {first_line(exc, uri)}; plots not logged")
        return cls(client, run_id, f"plots logged to parent run {run_id} under {ARTIFACT_DIR}/ in {shown(uri)}",
                   uri)

    def child_tags(self) -> dict[str, Any]:
        runs = self.client.search_runs([self.client.get_run(self.run_id).info.experiment_id], max_results=1,
                                       filter_string=f"tags.mlflow.parentRunId = '{self.run_id}' and tags.status = '{Status.OK}'")
        tags = runs[0].data.tags if runs else {}
        return {k: tags[k] for k in ("device_name", "torch_version") if tags.get(k)}

    def log(self, paths: list[Path], section: str) -> str:
        """Log the plots under ``report/`` and put ``section`` (which starts with a markdown
        heading) at the end of the run's description, replacing the one an earlier report put."""
        from mlflow.exceptions import MlflowException

        if self.run_id is None:
            return self.why
        if not paths:
            return f"nothing logged to parent run {self.run_id}: no plot to draw yet"
        try:
            for p in paths:
                self.client.log_artifact(self.run_id, str(p), ARTIFACT_DIR)
            note = self.client.get_run(self.run_id).data.tags.get(NOTE, "")
            head = section.lstrip().split("\n", 1)[0]
            note = note.split("\n\n" + head)[0] if head else note
            self.client.set_tag(self.run_id, NOTE, note + section)
        except MlflowException as exc:
            return f"MLflow run {self.run_id}: {first_line(exc, self.uri)}; plots not logged"
        return self.why
