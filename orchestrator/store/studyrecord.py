"""A study's own record: what the orchestrator keeps in the study's user attributes.

The only module that reads or writes a study's user attributes (``record`` does a trial's).
``StudyRecord.of(study)`` reads them once (from an ``optuna.Study`` or a ``studyread.StoredStudy``);
``write_study(study, ...)`` sets them by the record's field names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from orchestrator.machine import MACHINE_ATTR

if TYPE_CHECKING:
    from orchestrator.store.studyread import StoredStudy
    from optuna import Study

FINGERPRINT_ATTR = "orchestrate.fingerprint"
UID_ATTR = "orchestrate.uid"  # tells a study from an earlier one of the same name (delete-study)
RECORDED_ATTR = "orchestrate.recorded"
"""``{"tracking_uri", "parent_run_id", "trials"}``: MLflow at ``tracking_uri`` held every one of
the study's ``trials`` trials when it was last compared (``store.agreement``). A run that opens the
study takes it away before it writes to MLflow, and sets it again once MLflow agrees at its end."""
PARENT_RUN_ATTR = "mlflow_parent_run_id"
LOAD_ATTR = "orchestrate.load"
"""``[{"at", "cores", "before", "during": {"min", "median", "max"}, "readings", "steal", "stopped"}, ...]``: the
machine's load before and during each run of the sweep (``machineload``), the last ten."""

MEASURED_WITH_ATTR = "orchestrate.measured_with"
"""``{"trial": {...}, "script_sha256"}``: the trial settings that shape a measurement, and a script
spec's file's digest, as the study's last run had them (``stores.measured_otherwise``)."""

LOST_FOLDERS_ATTR = "orchestrate.lost_folders"
"""``{trial number (text): folder}``: trial folders gone from disk whose MLflow runs hold no copy to
write them back from, recorded by ``check --repair`` (``repair.restore_folders``): ``check`` says
them once, then no longer counts them as differences (it exited 1 for good)."""

KEYS = {"fingerprint": FINGERPRINT_ATTR, "uid": UID_ATTR, "machine": MACHINE_ATTR, "recorded": RECORDED_ATTR,
        "parent_run_id": PARENT_RUN_ATTR, "load": LOAD_ATTR, "measured_with": MEASURED_WITH_ATTR,
        "lost_folders": LOST_FOLDERS_ATTR}
"""Each field of ``StudyRecord`` and the attribute that stores it."""


@dataclass(frozen=True)
class StudyRecord:
    """A study's user attributes, typed. A field is None when the study has no such attribute."""

    fingerprint: dict[str, Any] | None = None
    """What the study searches (``space.fingerprint``); a resumed spec must match it."""
    uid: str | None = None
    """Tells the study from an earlier one of the same name; names its folder and MLflow runs."""
    machine: dict[str, Any] | None = None
    """What it runs on (``machine.facts`` and the memory limit), for ``resume``."""
    recorded: dict[str, Any] | None = None
    """The mark that MLflow holds every trial (``converge.mark``); None while a run writes."""
    parent_run_id: str | None = None
    """The study's MLflow parent run."""
    load: list[dict[str, Any]] | None = None
    """The machine's load before and during each run of the sweep (``machineload.LoadLog.summary``)."""
    measured_with: dict[str, Any] | None = None
    """What shaped the last run's measurements: its trial settings and script digest."""
    lost_folders: dict[str, str] | None = None
    """Trial folders lost for good (no copy in MLflow), as ``check --repair`` recorded them."""

    @classmethod
    def of(cls, study: Study | StoredStudy) -> StudyRecord:
        """The record of ``study``, read once (each read of an ``optuna.Study``'s is a query)."""
        attrs = study.user_attrs
        return cls(**{name: attrs.get(key) for name, key in KEYS.items()})


def write_study(study: Study, **values: object) -> None:
    """Set the study's attributes ``values`` (names of ``StudyRecord``'s fields), in that order."""
    wrong = [k for k in values if k not in KEYS]
    if wrong:
        raise TypeError(f"not fields of StudyRecord: {', '.join(wrong)} (fields: {', '.join(KEYS)})")
    for name, value in values.items():
        study.set_user_attr(KEYS[name], value)
