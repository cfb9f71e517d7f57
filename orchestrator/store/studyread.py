"""Read a study without changing it: its attributes and trials, for the commands that only show it.

``read_study(url, name)`` answers ``report``, ``best`` and a finished study's summary. For a
``sqlite:///`` storage it reads Optuna's tables itself, read-only, with the standard library's
``sqlite3`` (Optuna, SQLAlchemy and alembic cost a second or more to import and to check the
schema, longer than the rest of such a command), through the queries of ``optuna_sql``. It knows
the schema Optuna 5 writes (alembic revision ``v3.2.0.a``, ``SCHEMAS``); a file of another
revision, and every other URL (PostgreSQL, MySQL), is read through ``optuna.load_study`` as before.
Either way the caller gets a ``StoredStudy`` whose trials read as Optuna's ``FrozenTrial`` does
for the fields the orchestrator uses (``number``, ``state.name``, ``state.is_finished()``,
``params``, ``values``, ``user_attrs``, ``system_attrs``, ``constraints``, ``datetime_start``,
``datetime_complete``); compare states by ``state.name``, not with Optuna's enum. The study itself is read once, into a ``StoredStudy``
(``name``, ``directions``, ``user_attrs``, ``trials``).

How Optuna stores a trial, and so how it is read back here (optuna/storages/_rdb/storage.py,
``_build_frozen_trial_from_trial_model``): a parameter's ``param_value`` is its internal float,
made external by its ``distribution_json`` (an int distribution: ``int(value)``; a categorical
one: the index into its ``choices``); an objective value is ``trial_values.value`` unless its
``value_type`` is ``INF_POS``/``INF_NEG``; attributes are JSON in ``value_json``; a constraint is
the system attribute ``constraints:NAME`` that ``Trial.set_constraint(NAME, value)`` writes (older
Optuna: one list under ``constraints``). A file or study that is not there is ``None``, never an
empty study.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import sqlite3
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.errors import StudyError
from orchestrator.redact import first_line, shown
from orchestrator.store import optuna_sql as sql
from orchestrator.store.optuna_sql import SCHEMAS
from orchestrator.urls import sqlite_path, sqlite_url

if TYPE_CHECKING:
    from optuna import Study

    from orchestrator.spec.model import SweepSpec

CONSTRAINTS_KEY = "constraints"  # optuna.study._constrained_optimization._CONSTRAINTS_KEY
INT_DISTRIBUTIONS = ("IntDistribution", "IntUniformDistribution", "IntLogUniformDistribution")


class TrialState(enum.Enum):
    """Optuna's trial states, by the names its ``trials.state`` column holds: the names, values
    and ``is_finished`` of ``optuna.trial.TrialState`` (a test holds them equal). Not Optuna's own
    enum: importing it imports all of Optuna, about 0.5 s here, which would make reading a study
    several times slower (measured: 0.15-0.26 s without, 0.93-1.30 s with, on the 2-core machine)."""

    RUNNING = 0
    COMPLETE = 1
    PRUNED = 2
    FAIL = 3
    WAITING = 4

    def is_finished(self) -> bool:
        return self not in (TrialState.RUNNING, TrialState.WAITING)


@dataclass(frozen=True)
class StoredTrial:
    """One trial as stored: the read side of Optuna's ``FrozenTrial``."""

    number: int
    state: TrialState
    params: dict[str, Any]
    """External values (an int, a float, or the categorical choice itself), in the order suggested."""
    values: list[float] | None
    """The objective values, by objective; None unless the trial was told values."""
    user_attrs: dict[str, Any]
    system_attrs: dict[str, Any]
    datetime_start: datetime | None = None
    datetime_complete: datetime | None = None
    distributions: dict[str, str] = dataclasses.field(default_factory=dict)
    """Each parameter's distribution as Optuna stored it (JSON): ``parse_distribution`` reads it."""

    @property
    def constraints(self) -> dict[str, float]:
        """Each constraint's value by name (feasible when every one is <= 0), as Optuna reads them."""
        out = {str(i): c for i, c in enumerate(self.system_attrs.get(CONSTRAINTS_KEY) or ())}
        prefix = CONSTRAINTS_KEY + ":"
        out.update({k[len(prefix):]: v for k, v in self.system_attrs.items() if k.startswith(prefix)})
        return out


@dataclass(frozen=True)
class StoredStudy:
    """A study read once: what ``report``, ``best`` and a finished sweep's summary need."""

    name: str
    directions: tuple[str, ...]
    """``maximize``/``minimize`` per objective (``not_set`` before the study's first use)."""
    user_attrs: dict[str, Any]
    """The orchestrator's own: ``orchestrate.fingerprint``, ``orchestrate.uid``, ``mlflow_parent_run_id``."""
    trials: list[Any]
    """Every trial, by number: ``StoredTrial``s, or Optuna's ``FrozenTrial``s when read through Optuna."""

    def get_trials(self, deepcopy: bool = False) -> list[Any]:
        """The trials, as ``optuna.Study.get_trials`` gives them (for code written against a study)."""
        return list(self.trials)


def beside_spec(spec: SweepSpec, *words: str) -> str | None:
    """Where a command runs outside its spec's folder with the default SQLite study, which is
    found from the folder a command runs in (``./mlruns/``), and the spec's own folder holds a
    study of its name: what to run there instead (``orchestrate WORDS SPEC``), else None. A tour:
    ``orchestrate report tour/one.yaml`` from the folder above said "run `orchestrate
    tour/one.yaml` first", which starts the sweep over in a new study."""
    from orchestrator.invocation import command_in
    from orchestrator.store.optuna_sql import trial_counts
    from orchestrator.urls import DEFAULT_STORAGE

    if spec.storage != DEFAULT_STORAGE:
        return None
    folder = Path(spec.path).resolve().parent
    if folder == Path.cwd().resolve():
        return None
    n = sum((trial_counts(folder / "mlruns" / "optuna.db", spec.name) or {}).values())  # counted, not read
    if not n:
        return None
    where = os.path.relpath(folder)
    return (f"the spec's own folder holds study {spec.name!r} with {n} trial{'' if n == 1 else 's'} "
            f"({os.path.join(where, 'mlruns', '')}); the stores (./mlruns/) are found from the folder a command "
            f"runs in: {command_in(where, *words, Path(spec.path).name)}")


def read_study(url: str, name: str) -> StoredStudy | None:
    """Study ``name`` in storage ``url`` (absolute or relative ``sqlite:///``), or None when there
    is none. An SQLite file is only read (a missing file or table stays missing); through Optuna,
    its storage creates its tables in an empty database, as ``optuna.load_study`` does. A storage
    that cannot be read is a ``StudyError`` that names the URL without its password."""
    path = sqlite_path(url)
    if path is not None:
        try:
            return _read_sqlite(path, name)
        except _OtherSchema:
            pass  # an older or newer Optuna's tables: Optuna reads them (or says what to do)
    return _read_through_optuna(url, name)


def _read_sqlite(path: Path, name: str) -> StoredStudy | None:
    """Study ``name`` from the SQLite file at ``path``, in one read transaction (a sweep writing
    at the same time is seen before or after each of its commits, never half-way)."""
    url = sqlite_url(path)
    con = _connect(path, url)
    if con is None:
        return None
    try:
        con.execute("BEGIN")  # one snapshot for every table below
        study_id = _study_id(con, name, url)
        if study_id is None:
            return None
        return StoredStudy(name, tuple(d.lower() for d in sql.directions(con, study_id)),
                           {k: json.loads(v) for k, v in sql.study_user_attributes(con, study_id)}, _trials(con, study_id))
    except sqlite3.Error as exc:
        from orchestrator.store.writefault import corrupt, damaged_remedy

        remedy = f"; {damaged_remedy(path, 'storage')}" if corrupt(exc) else ""  # as the sweep says it
        raise StudyError(f"storage {shown(url)}: {first_line(exc, url)}{remedy}") from None
    finally:
        con.close()


def from_optuna(study: Study) -> StoredStudy:
    """An ``optuna.Study`` read once into a ``StoredStudy`` (its trials stay ``FrozenTrial``s)."""
    return StoredStudy(study.study_name, tuple(d.name.lower() for d in study.directions), dict(study.user_attrs),
                       study.get_trials(deepcopy=False))


# -- SQLite ----------------------------------------------------------------------------------------

class _OtherSchema(Exception):
    """The file holds Optuna tables of a revision this module does not read."""


def _connect(path: Path, url: str) -> sqlite3.Connection | None:
    """A read-only connection, or None when there is no such file (nothing is created)."""
    if not path.is_file():
        return None
    try:
        con = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True, timeout=10, isolation_level=None)
    except sqlite3.Error as exc:
        raise StudyError(f"storage {shown(url)}: {first_line(exc, url)}") from None
    return con


def _study_id(con: sqlite3.Connection, name: str, url: str) -> int | None:
    """The study's id; None when the file has no Optuna tables or no such study. Raises
    ``_OtherSchema`` for tables of another Optuna revision."""
    try:
        tables = sql.table_names(con)
    except sqlite3.DatabaseError as exc:  # not a database at all
        raise StudyError(f"storage {shown(url)}: {first_line(exc, url)}") from None
    if "studies" not in tables:
        return None
    revision = sql.schema_revision(con) if "alembic_version" in tables else None
    if revision not in SCHEMAS:
        raise _OtherSchema(revision)
    return sql.study_id_of(con, name)


def _trials(con: sqlite3.Connection, study_id: int) -> list[StoredTrial]:
    """Every trial of the study with its parameters, values and attributes: one query per table."""
    rows = sql.trials(con, study_id)
    params: dict[int, dict[str, Any]] = {r[0]: {} for r in rows}
    values: dict[int, dict[int, float]] = {}
    user: dict[int, dict[str, Any]] = {r[0]: {} for r in rows}
    system: dict[int, dict[str, Any]] = {r[0]: {} for r in rows}
    dists: dict[int, dict[str, str]] = {r[0]: {} for r in rows}
    decode = _Decoder()
    for trial_id, name, value, dist in sql.trial_params(con, study_id):
        params[trial_id][name] = decode(value, dist)
        dists[trial_id][name] = dist
    for trial_id, objective, stored, kind in sql.trial_values(con, study_id):
        values.setdefault(trial_id, {})[objective] = _value(stored, kind)
    for read, into in ((sql.trial_user_attributes, user), (sql.trial_system_attributes, system)):
        for trial_id, key, value_json in read(con, study_id):
            into[trial_id][key] = json.loads(value_json)
    return [StoredTrial(number, TrialState[state], params[tid],
                        [v for _, v in sorted(values[tid].items())] if tid in values else None,
                        user[tid], system[tid], _when(start), _when(end), dists[tid])
            for tid, number, state, start, end in rows]


class _Decoder:
    """A parameter's external value from its internal float and distribution (parsed once each)."""

    def __init__(self) -> None:
        self.seen: dict[str, tuple[str, tuple[Any, ...] | None]] = {}

    def __call__(self, value: float, distribution_json: str) -> object:
        if distribution_json not in self.seen:
            self.seen[distribution_json] = parse_distribution(distribution_json)[:2]
        kind, choices = self.seen[distribution_json]
        if kind == "categorical":
            return choices[int(value)]  # type: ignore[index]  # a categorical distribution lists its choices
        return int(value) if kind == "int" else value


def parse_distribution(text: str) -> tuple[str, tuple[Any, ...] | None, bool]:
    """A stored distribution's kind (``categorical``, ``int``, ``float``), choices and ``log``."""
    d = json.loads(text)
    if "name" in d:  # {"name": "IntDistribution", "attributes": {...}} (what Optuna writes)
        kind = ("categorical" if d["name"] == "CategoricalDistribution" else
                "int" if d["name"] in INT_DISTRIBUTIONS else "float")
        attributes = d["attributes"]
    else:  # the abbreviated form: {"type": "categorical", "choices": [...]}
        kind, attributes = d["type"], d
    choices = attributes.get("choices")
    log = attributes.get("log", "LogUniform" in d.get("name", ""))  # Optuna 2's LogUniformDistribution
    return kind, tuple(choices) if choices is not None else None, bool(log)


def _value(value: float | None, kind: str) -> float:
    if kind == "INF_POS":
        return float("inf")
    if kind == "INF_NEG":
        return float("-inf")
    return value  # type: ignore[return-value]  # FINITE: never NULL


def _when(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)


# -- every other storage: through Optuna ------------------------------------------------------------

def _read_through_optuna(url: str, name: str) -> StoredStudy | None:
    """A server database's study through Optuna, where it holds Optuna's tables: one without any is
    no study, and one of another program's is said (Optuna made its tables in either: a tour's
    ``report`` left 12 in MLflow's database)."""
    import optuna

    from orchestrator.store.serverdb import foreign, table_names

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        if sqlite_path(url) is None:
            tables = table_names(url)
            if (other := foreign(url, tables)) is not None:
                raise other
            if "studies" not in tables:  # no Optuna tables: no study, and none made by reading
                return None
        return from_optuna(optuna.load_study(study_name=name, storage=url))
    except StudyError:
        raise
    except KeyError:
        return None
    except Exception as exc:  # noqa: BLE001 - a driver or schema error: one line, not a traceback
        from orchestrator.store.outage import StoreDown
        from orchestrator.store.serverdb import unreachable
        from orchestrator.urls import database_remedy

        said: BaseException = exc
        if type(exc).__name__ == "StorageInternalError":  # its text guesses "invalid data in the commit"
            said = exc.__cause__ or exc.__context__ or exc  # "permission denied for table version_info"
        if unreachable(said):  # the tour: exit 2 and the driver's words, where a sweep waits for it
            raise StoreDown(f"storage {shown(url)} does not answer ({first_line(said, url)})",
                            "nothing was read: run this command again once it is back") from None
        line = first_line(said, url)
        raise StudyError(f"storage {shown(url)}: {line}{database_remedy(line)}") from None

