"""Which MLflow runs of a spec's experiment belong to which study, and which belong to none.

A study's runs are its parent run (tags ``role=sweep``, ``study_uid=<the study's uid>``) and that
run's children (``mlflow.parentRunId``). A study deleted outside ``orchestrate delete`` (Optuna's
``optuna delete-study``, say) leaves its runs behind: the next study of the same name gets a new
uid and a new parent run, and the old runs (duplicate ``trial-000``... names, a deleted study's
best above the current one) stay in the experiment. Such runs **belong to no study**: a parent
run recorded for the same storage whose uid is not the study's that storage holds now, its
children, and trial runs whose parent run is gone. A parent recorded for another storage is not
judged (it may belong to a study there). Read only; mlflow is imported by the functions that use it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orchestrator.redact import shown
from orchestrator.urls import absolute_uri, sqlite_path


@dataclass
class RunGroup:
    """A parent run and its trial runs (``parent`` None: trial runs whose parent is gone)."""

    parent: Any | None
    trials: list[Any] = field(default_factory=list)

    @property
    def uid(self) -> str | None:
        return None if self.parent is None else self.parent.data.tags.get("study_uid")

    @property
    def runs(self) -> list[Any]:
        """Children first: a deletion cut off half-way leaves no child without its parent."""
        return [*self.trials, *([self.parent] if self.parent is not None else [])]


def _search(client: Any, experiment_id: str, filter_string: str) -> list[Any]:
    out: list[Any] = []
    token = None
    while True:
        page = client.search_runs([experiment_id], filter_string=filter_string, max_results=1000, page_token=token)
        out += list(page)
        token = page.token
        if not token:
            return out


def storage_tag(storage: str) -> str:
    """The ``storage`` tag a sweep gives its parent run for ``storage``."""
    return shown(absolute_uri(storage))


def groups(client: object, experiment_id: str, storage: str, uid: str | None) -> tuple[RunGroup | None, list[RunGroup]]:
    """The study's runs (None: no parent run for ``uid``) and the groups that belong to no study,
    in experiment ``experiment_id``; ``uid`` None: the storage holds no such study now."""
    parents = _search(client, experiment_id, "tags.role = 'sweep'")
    trials = _search(client, experiment_id, "tags.role = 'trial'")
    children: dict[str, list[Any]] = {}
    for run in trials:
        children.setdefault(run.data.tags.get("mlflow.parentRunId", ""), []).append(run)
    mine, none = None, []
    for parent in parents:
        group = RunGroup(parent, children.pop(parent.info.run_id, []))
        if uid is not None and group.uid == uid:
            mine = group
        elif parent.data.tags.get("storage") == storage_tag(storage):
            none.append(group)
    orphans = [run for runs in children.values() for run in runs]  # their parent is gone
    if orphans:
        none.append(RunGroup(None, orphans))
    return mine, none


def describe(group: RunGroup, storage: str) -> str:
    """One line on a group of runs that belongs to no study."""
    n = len(group.runs)
    if group.parent is None:
        return f"{n} trial run(s) whose parent run is gone belong to no study"
    return (f"{n} MLflow run(s) belong to no study: parent run {group.parent.info.run_id} (study_uid "
            f"{(group.uid or '?')[:8]}) and its {len(group.trials)} trial run(s), of a study no longer in "
            f"{storage_tag(storage)}")


def leftover_groups(tracking_uri: str, name: str, storage: str, uid: str | None) -> list[RunGroup]:
    """The groups of experiment ``name`` that belong to no study (nothing is created: no store or
    no experiment, none)."""
    client, experiment = open_experiment(tracking_uri, name)
    return [] if experiment is None else groups(client, experiment.experiment_id, storage, uid)[1]


def open_experiment(tracking_uri: str, name: str) -> tuple[Any, Any]:
    """MLflow's client and experiment ``name`` (None where the store or the experiment is not there:
    an SQLite file missing or empty is not opened, which would write MLflow's schema into it)."""
    uri = absolute_uri(tracking_uri)
    if (path := sqlite_path(uri)) is not None and (not path.is_file() or path.stat().st_size == 0):
        return None, None
    from mlflow.tracking import MlflowClient

    from orchestrator.store.tracking import quiet_mlflow_logs

    quiet_mlflow_logs()
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(name)
    if experiment is not None and experiment.lifecycle_stage == "deleted":
        experiment = None
    return client, experiment
