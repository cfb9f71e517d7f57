"""MLflow records: one experiment per spec name, one parent run per study, one child per trial.

A thin wrapper over ``MlflowClient`` (no fluent API, no global state). mlflow is imported when
a ``Tracker`` is made, never by ``--help`` or ``--dry-run``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from orchestrator.errors import StudyError, first_line
from orchestrator.redact import shown
from orchestrator.urls import SQLITE_IN_MEMORY, absolute_uri, is_sqlite, server_remedy, sqlite_folder, sqlite_path
from orchestrator.store.runs import (COLOR_TAG, MLFLOW_STATUS, child_runs, metric_batch, param_text, run_color,
                                     run_name)

if TYPE_CHECKING:
    from orchestrator.store.outage import Outage


def quiet_mlflow_logs() -> None:
    """MLflow and alembic log table creation at INFO on a new store: noise for a user. With a
    tracking server, MLflow prints "View run ... at: URL" and "View experiment ..." on stdout as
    each run ends, two lines after every trial's own (unless the user asked for them)."""
    import logging
    import os

    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    for name in ("mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)


def artifact_root(tracking_uri: str, experiment: str) -> str | None:
    """Artifacts beside a local SQLite store (``mlruns/<experiment>/...``); None = MLflow's choice."""
    folder = sqlite_folder(tracking_uri)
    return (folder / experiment).as_uri() if folder is not None else None


def template_path() -> Path:
    """Where the empty MLflow store of this mlflow version is kept (``$XDG_CACHE_HOME/orchestrate``)."""
    import os

    import mlflow

    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "orchestrate" / f"mlflow-{mlflow.__version__}-empty.db"


def new_store(url: str) -> None:
    """Create an empty MLflow SQLite store at ``url`` (a temporary path: ``create_sqlite_atomically``).

    MLflow builds a new store by running every one of its schema migrations, 3-7 s on a small CPU,
    which every new project paid before its first trial. The first store built with an mlflow
    version is kept as a template (``template_path``); later ones are a copy of it, with the one
    row that depends on where it was made (the Default experiment's artifact location, which
    MLflow sets from the working directory) written as MLflow would have. Any doubt about the
    template (missing, unreadable, another schema): MLflow builds the store itself."""
    import shutil
    import sqlite3

    from mlflow.tracking import MlflowClient

    from orchestrator.store.writefault import cause

    target = sqlite_path(url)
    assert target is not None
    template = template_path()
    try:
        source = open(template, "rb")
    except OSError:
        source = None  # no template yet: MLflow builds the store below
    try:
        if source is not None:
            with source, open(target, "wb") as copy:  # a full disk fails here: no migrations on it
                shutil.copyfileobj(source, copy)
            con = sqlite3.connect(target)
            try:
                with con:
                    (version,) = con.execute("SELECT version_num FROM alembic_version").fetchone()
                    now = int(time.time() * 1000)
                    con.execute("UPDATE experiments SET artifact_location = ?, creation_time = ?, "
                                "last_update_time = ? WHERE experiment_id = 0",
                                (str(Path("mlruns").resolve() / "0"), now, now))
            finally:
                con.close()
            if version == _schema_head():
                return
    except (OSError, sqlite3.Error, TypeError) as exc:
        if cause(exc) is not None:
            raise  # the store's disk, not the template: MLflow's migrations would fail on it too
    target.unlink(missing_ok=True)
    MlflowClient(url).search_experiments(max_results=1)  # MLflow builds it: every migration
    try:
        template.parent.mkdir(parents=True, exist_ok=True)
        tmp = template.with_name(f".{template.name}.{time.monotonic_ns()}")
        shutil.copyfile(target, tmp)
        tmp.replace(template)
    except OSError:
        pass  # no cache to keep it in: the next new store is built again


def _schema_head() -> str | None:
    """The newest schema migration this mlflow knows (what a store it builds ends at)."""
    from alembic.script import ScriptDirectory
    from mlflow.store.db.utils import _get_alembic_config

    try:
        return ScriptDirectory.from_config(_get_alembic_config(SQLITE_IN_MEMORY)).get_current_head()
    except Exception:  # noqa: BLE001 - no answer: never trust the template
        return None


def restore_command(uri: str, experiment_id: str) -> str:
    """The command that restores a deleted experiment, as pasted in a shell: MLflow's CLI reads
    the store from ``MLFLOW_TRACKING_URI`` (its password left out: ``redact.pasteable``)."""
    import shlex

    from orchestrator.invocation import tool
    from orchestrator.redact import pasteable

    return (f"MLFLOW_TRACKING_URI={shlex.quote(pasteable(uri))} "
            + shlex.join([tool("mlflow"), "experiments", "restore", "--experiment-id", str(experiment_id)]))


class Tracker:
    def __init__(self, tracking_uri: str, experiment: str, outage: Outage | None = None, swept: tuple[str, ...] = ()) -> None:
        """``outage``: an ``outage.Outage`` guard for a tracking server or server database (every
        client call waits out a lost connection); a local SQLite store needs none. ``swept``: the
        searched parameters, whose values name each trial's run (``runs.run_name``)."""
        self.swept = swept
        self.moved: list[tuple[str, str, int]] = []
        """The store's experiments whose files were recorded in the folder this one was moved or
        copied from, now pointed here (``moved.relocate``: name, old folder, runs)."""
        import mlflow  # noqa: F401 - heavy; imported only for real runs
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient

        from orchestrator.store.moved import artifacts_elsewhere, relocate
        from orchestrator.store.outage import RetryingClient
        from orchestrator.store.study import create_sqlite_atomically
        from orchestrator.store.writefault import WriteGuard, named, quiet_write_failures, unwritable

        quiet_mlflow_logs()
        quiet_write_failures()
        self.uri = absolute_uri(tracking_uri)
        store = named("MLflow's store", self.uri)
        try:
            try:
                create_sqlite_atomically(self.uri, new_store)
            except Exception as exc:  # noqa: BLE001 - a full disk is one line; anything else as before
                if (refused := unwritable(store, exc, sqlite_folder(self.uri))) is None:
                    raise
                raise refused from None
            if outage is not None and not is_sqlite(self.uri):
                from orchestrator.store.outage import create, mlflow_pool, quiet_lost_connections, shorten_mlflow_retries

                shorten_mlflow_retries()
                mlflow_pool()
                quiet_lost_connections()
                self.client = RetryingClient(create(outage, MlflowClient, tracking_uri=self.uri), outage)
            else:
                guard = WriteGuard(store, "mlflow_write", sqlite_folder(self.uri))
                self.client = RetryingClient(guard.call(MlflowClient, tracking_uri=self.uri), guard)
            exp = self.client.get_experiment_by_name(experiment)
            if exp is None:
                exp_id = self.client.create_experiment(experiment, artifact_location=artifact_root(self.uri, experiment))
            elif exp.lifecycle_stage == "deleted":
                raise StudyError(f"MLflow experiment {experiment!r} in {shown(self.uri)} is deleted; restore it "
                                 f"({restore_command(self.uri, exp.experiment_id)}) or rename the spec")
            else:
                exp_id = exp.experiment_id
                if artifacts_elsewhere(self.uri, experiment, exp.artifact_location) is not None:
                    try:  # the project folder was moved or copied: its runs' files are here now
                        self.moved = relocate(self.uri)
                    except Exception as exc:  # noqa: BLE001 - a full disk is one line; anything else as before
                        if (refused := unwritable(store, exc, sqlite_folder(self.uri))) is None:
                            raise
                        raise refused from None
        except MlflowException as exc:
            said = first_line(exc, typed=False).split(". Response body: '<")[0]  # not a page's HTML, cut off
            raise StudyError(f"tracking_uri {shown(self.uri)}: cannot open the MLflow store: {said}"
                             f"{server_remedy(self.uri, said)}") from None
        self.experiment_id = exp_id
        self.parent_id: str | None = None

    # -- the study's parent run ---------------------------------------------------------------
    def open_parent(self, study: str, storage: str, spec_path: Path, uid: str) -> str:
        """Find the study's parent run (resume) or create it; mark it RUNNING. ``uid`` is the
        study's own id, so a study deleted and created again under the same name gets a new
        parent run instead of writing over the old one's children."""
        runs = self.client.search_runs(
            [self.experiment_id], filter_string=f"tags.role = 'sweep' and tags.study_uid = '{uid}'",
            max_results=1, order_by=["attributes.start_time ASC"])
        if runs:
            self.parent_id = runs[0].info.run_id
            self.client.update_run(self.parent_id, status="RUNNING")
        else:
            run = self.client.create_run(self.experiment_id, run_name=study,
                                         tags={"role": "sweep", "study": study, "storage": shown(storage),
                                               "study_uid": uid})
            self.parent_id = run.info.run_id
        self._log_spec(spec_path)
        return self.parent_id

    def _log_spec(self, spec_path: Path) -> None:
        """The spec as an artifact of the parent run; a copy without its secrets where it holds
        any (a password in its ``storage:``, say): MLflow's readers are not all the spec's."""
        import tempfile

        from orchestrator.redact import scrub

        text = spec_path.read_text(errors="replace")
        if scrub(text) == text:
            self.client.log_artifact(self.parent_id, str(spec_path))
            return
        with tempfile.TemporaryDirectory() as folder:
            copy = Path(folder) / spec_path.name
            copy.write_text(scrub(text))
            self.client.log_artifact(self.parent_id, str(copy))

    def close_parent(self, status: str, description: str, metrics: dict[str, float]) -> None:
        """Every orchestrator on a shared study closes the one parent run as it ends, at times at
        the same instant: the note goes in a batch, whose tag insert MLflow retries when another
        writer inserted it first (``set_tag`` would fail on the duplicate key)."""
        assert self.parent_id is not None
        from mlflow.entities import RunTag

        self.client.log_batch(self.parent_id, metrics=metric_batch(metrics),
                              tags=[RunTag("mlflow.note.content", description)])
        self.client.set_terminated(self.parent_id, status)

    # -- one child run per trial --------------------------------------------------------------
    def start_trial(self, number: int, params: dict[str, Any], tags: dict[str, str]) -> str:
        assert self.parent_id is not None
        from mlflow.entities import Param

        run = self.client.create_run(
            self.experiment_id, run_name=run_name(number, params, self.swept),
            tags={"mlflow.parentRunId": self.parent_id, "role": "trial", "trial_number": str(number),
                  "status": "running", **tags})
        self.client.log_batch(run.info.run_id, params=[Param(k, param_text(v)) for k, v in sorted(params.items())])
        return run.info.run_id

    def finish_trial(self, run_id: str, status: str, metrics: dict[str, float], tags: Mapping[str, object],
                     files: list[tuple[Path, str | None]]) -> None:
        """Idempotent: a resume may call it again for a trial whose orchestrator died midway."""
        from mlflow.entities import RunTag

        all_tags = {"status": status, COLOR_TAG: run_color(status), **tags}
        self.client.log_batch(run_id, metrics=metric_batch(metrics),  # one round trip for both
                              tags=[RunTag(k, str(v)[:5000]) for k, v in all_tags.items()])
        from orchestrator.store.logcopy import bounded

        for path, folder in files:
            if path.exists():
                with bounded(path) as copy:  # a long log's copy: its start and its end
                    self.client.log_artifact(run_id, str(copy), artifact_path=folder)
        self.client.set_terminated(run_id, MLFLOW_STATUS.get(status, "FAILED"))

    def trial_runs(self) -> dict[int, list[Any]]:
        """Child runs of the parent, by Optuna trial number."""
        return child_runs(self.client, self.experiment_id, self.parent_id)


class RunRef:
    """A trial's MLflow run, created by the writer thread: ``run_id`` once it exists."""

    def __init__(self, number: int) -> None:
        import threading

        self.number = number
        self.run_id: str | None = None
        self.done = threading.Event()
        self.on_created: Callable[[str], None] | None = None


class AsyncTracker:
    """MLflow off the sweep's critical path: trial runs are created and finished by one writer
    thread, in the order asked (an ordered queue), while the next trial starts. ``flush`` drains the
    queue before the orchestrator exits; if it is killed first, the next start repairs what is
    missing (``recovery``: a told trial without a finished run is finished from Optuna's record,
    a trial without a run gets one)."""

    def __init__(self, tracker: Tracker) -> None:
        import queue
        import threading

        self.sync = tracker
        self.queue: "queue.Queue[Any]" = queue.Queue()
        self.failed: list[str] = []
        self.down: Exception | None = None
        """Set when the tracking store stayed unreachable past ``search.outage_s`` (``StoreDown``):
        the sweep loop raises it."""
        self.refused: Exception | None = None
        """The first write the store refused (``writefault.StoreUnwritable``: a full disk, say).
        The sweep goes on, and the writer writes nothing more (a store locked past its timeout
        would cost that timeout per record): the records stay in the study, the sweep's end tries
        once more (``converge.settle``), and the next run writes what is still missing."""
        self.missing: set[int] = set()
        """Trials with a record MLflow did not take in this run."""
        self._told = False
        self._thread = threading.Thread(target=self._work, name="mlflow-writer", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        from orchestrator.timeline import event

        while True:
            job = self.queue.get()
            if job is None:
                self.queue.task_done()
                return
            kind, ref, args = job
            try:
                if kind == "barrier":
                    ref.set()
                elif self.refused is not None:  # not tried again before the sweep's end (converge.settle)
                    self.missing.add(ref.number)
                elif kind == "start":
                    ref.run_id = self.sync.start_trial(*args)
                    event("mlflow_started", ref.number)
                    if ref.on_created is not None:
                        ref.on_created(ref.run_id)
                elif ref.run_id is not None:
                    self.sync.finish_trial(ref.run_id, *args)
                    event("mlflow_finished", ref.number)
            except Exception as exc:  # noqa: BLE001 - a lost record is repaired on the next start
                from orchestrator.store.outage import StoreDown
                from orchestrator.store.writefault import StoreUnwritable

                if isinstance(exc, StoreDown):
                    self.down = exc
                elif isinstance(exc, StoreUnwritable) and self.refused is None:
                    self.refused = exc
                self.missing.add(ref.number)
                self.failed.append(f"trial {ref.number}: {first_line(exc)}")
            finally:
                if kind == "start":
                    ref.done.set()
                self.queue.task_done()

    def notice(self) -> str | None:
        """Once, after the store first refused a write: the line that says so (the sweep loop
        prints it), else None."""
        if self.refused is None or self._told:
            return None
        self._told = True
        return (f"orchestrate: {self.refused}; the sweep goes on: each result is kept in the study, "
                "and the next run of this command writes MLflow's missing records from it")

    def start_trial(self, number: int, params: dict[str, Any], tags: dict[str, str],
                    on_created: Callable[[str], None] | None = None) -> RunRef:
        """Queue the trial's run; ``on_created(run_id)`` is called by the writer once it exists."""
        ref = RunRef(number)
        ref.on_created = on_created
        self.queue.put(("start", ref, (number, params, tags)))
        return ref

    def finish_trial(self, ref: RunRef, status: str, metrics: dict[str, float], tags: Mapping[str, object],
                     files: list[tuple[Path, str | None]]) -> None:
        self.queue.put(("finish", ref, (status, metrics, tags, files)))

    @staticmethod
    def run_id(ref: RunRef, timeout_s: float = 30.0, wait: bool = True) -> str | None:
        """The run's id once the writer created it; ``wait=False``: None if not yet (the sweep's
        record of a trial never waits for MLflow: ``start_trial``'s ``on_created`` links them)."""
        if wait:
            ref.done.wait(timeout_s)
        return ref.run_id

    def flush(self, timeout_s: float = 300.0) -> bool:
        """Wait until every queued record is written; False if it took longer than ``timeout_s``."""
        import threading

        done = threading.Event()
        self.queue.put(("barrier", done, ()))
        return done.wait(timeout_s)

    def close(self, timeout_s: float = 300.0) -> bool:
        ok = self.flush(timeout_s)
        self.queue.put(None)
        return ok
