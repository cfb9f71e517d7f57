"""Every SQL query the orchestrator runs against Optuna's own tables, one function each.

Two kinds of reader need them:

- read-only SQLite readers that must not pay for importing Optuna and SQLAlchemy (``studyread``
  for ``report``, ``best`` and a finished study's summary; ``trial_counts`` for ``--dry-run`` and
  the start-up's smoke-step check): these take a standard-library ``sqlite3`` connection or path;
- what Optuna's API cannot ask, on a server database through the study's SQLAlchemy engine: RUNNING
  trials that never had a heartbeat (``recovery``), and the heartbeats of the RUNNING trials by the
  server's clock (``report/check``).

The tables are those Optuna 5.0.0 creates (``optuna/storages/_rdb/models.py``, alembic revision
``v3.2.0.a``, ``SCHEMAS``; pyproject pins ``optuna>=5,<6``). ``tests/store/test_optuna_sql.py``
runs each query against a study the installed Optuna wrote, on SQLite and, where the query is
used there, PostgreSQL; ``tests/project/test_optuna_door.py`` keeps such SQL out of every other
module. Importing this module imports no more than ``sqlite3``.
"""

from __future__ import annotations

import sqlite3
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

SCHEMAS = ("v3.2.0.a",)
"""Optuna's alembic revisions whose tables these queries read (Optuna 5.0's)."""


# -- SQLite, with the standard library (no Optuna, no SQLAlchemy) ------------------------------------

def trial_counts(path: Path, study_name: str) -> dict[str, int] | None:
    """How many trials study ``study_name`` in the SQLite file at ``path`` holds in each state
    (``{"COMPLETE": 3, "WAITING": 1}``), read without creating or changing anything and without
    waiting more than a second for a lock: ``{}`` when there is no such file or study, None when
    the file cannot be read (not a database, no Optuna tables, locked)."""
    if not path.is_file():
        return {}
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1)
        try:
            rows = con.execute(
                "SELECT t.state, count(*) FROM trials t JOIN studies s ON s.study_id = t.study_id "
                "WHERE s.study_name = ? GROUP BY t.state", (study_name,)).fetchall()
        finally:
            con.close()
    except sqlite3.Error:
        return None
    return {state: n for state, n in rows}


def table_names(con: sqlite3.Connection) -> set[str]:
    """The tables in the file (Optuna's, when it made them: ``studies`` among them)."""
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def schema_revision(con: sqlite3.Connection) -> str | None:
    """The alembic revision Optuna stamped the file with (compare with ``SCHEMAS``), None if none."""
    row = con.execute("SELECT version_num FROM alembic_version").fetchone()
    return None if row is None else row[0]


def study_id_of(con: sqlite3.Connection, study_name: str) -> int | None:
    """The id of study ``study_name``, None when there is none."""
    row = con.execute("SELECT study_id FROM studies WHERE study_name = ?", (study_name,)).fetchone()
    return None if row is None else row[0]


def directions(con: sqlite3.Connection, study_id: int) -> list[str]:
    """The study's directions by objective, as stored (``MAXIMIZE``, ``MINIMIZE``, ``NOT_SET``)."""
    rows = con.execute("SELECT direction FROM study_directions WHERE study_id = ? ORDER BY objective", (study_id,))
    return [d for (d,) in rows]


def study_user_attributes(con: sqlite3.Connection, study_id: int) -> list[tuple[str, str]]:
    """The study's user attributes as ``(key, value_json)``, in the order they were first set."""
    return con.execute('SELECT "key", value_json FROM study_user_attributes WHERE study_id = ? '
                       "ORDER BY study_user_attribute_id", (study_id,)).fetchall()


def trials(con: sqlite3.Connection, study_id: int) -> list[tuple[int, int, str, str | None, str | None]]:
    """The study's trials as ``(trial_id, number, state, datetime_start, datetime_complete)``, in
    the order they were made; the state by name (``RUNNING``, ``COMPLETE``, ...), times as ISO text."""
    return con.execute("SELECT trial_id, number, state, datetime_start, datetime_complete FROM trials "
                       "WHERE study_id = ? ORDER BY trial_id", (study_id,)).fetchall()


def trial_params(con: sqlite3.Connection, study_id: int) -> list[tuple[int, str, float, str]]:
    """Every parameter of the study's trials as ``(trial_id, name, internal value,
    distribution_json)``, in the order suggested."""
    return con.execute(
        "SELECT x.trial_id, x.param_name, x.param_value, x.distribution_json FROM trial_params x "
        "JOIN trials t ON t.trial_id = x.trial_id WHERE t.study_id = ? ORDER BY x.param_id", (study_id,)).fetchall()


def trial_values(con: sqlite3.Connection, study_id: int) -> list[tuple[int, int, float | None, str]]:
    """Every objective value of the study's trials as ``(trial_id, objective, value,
    value_type)``; an infinite value is NULL with ``value_type`` ``INF_POS``/``INF_NEG``."""
    return con.execute(
        "SELECT x.trial_id, x.objective, x.value, x.value_type FROM trial_values x "
        "JOIN trials t ON t.trial_id = x.trial_id WHERE t.study_id = ?", (study_id,)).fetchall()


def trial_user_attributes(con: sqlite3.Connection, study_id: int) -> list[tuple[int, str, str]]:
    """Every user attribute of the study's trials as ``(trial_id, key, value_json)``, in the order set."""
    return con.execute(
        'SELECT x.trial_id, x."key", x.value_json FROM trial_user_attributes x '
        "JOIN trials t ON t.trial_id = x.trial_id WHERE t.study_id = ? ORDER BY x.trial_user_attribute_id",
        (study_id,)).fetchall()


def trial_system_attributes(con: sqlite3.Connection, study_id: int) -> list[tuple[int, str, str]]:
    """Every system attribute of the study's trials (constraints, a queued trial's
    ``fixed_params``) as ``(trial_id, key, value_json)``, in the order set."""
    return con.execute(
        'SELECT x.trial_id, x."key", x.value_json FROM trial_system_attributes x '
        "JOIN trials t ON t.trial_id = x.trial_id WHERE t.study_id = ? ORDER BY x.trial_system_attribute_id",
        (study_id,)).fetchall()


# -- any RDB storage, through SQLAlchemy ---------------------------------------------------------------

def silent_trial_ids(engine: Engine, study_id: int) -> set[int]:
    """Storage ids of the study's RUNNING trials without a row in Optuna's heartbeat table (asked
    by an orchestrator that died before its first beat: Optuna's own stale check skips them)."""
    import sqlalchemy

    with engine.connect() as conn:
        rows = conn.execute(sqlalchemy.text(
            "SELECT t.trial_id FROM trials t LEFT JOIN trial_heartbeats h ON h.trial_id = t.trial_id "
            "WHERE t.study_id = :s AND t.state = 'RUNNING' AND h.trial_id IS NULL"), {"s": study_id})
        return {r[0] for r in rows}


def running_heartbeats(engine: Any, study_name: str) -> tuple[datetime, list[tuple[int, Any, Any]]]:
    """The server's clock now (naive, in the session's time zone: UTC for Optuna's heartbeats),
    and the RUNNING trials of study ``study_name`` as ``(number, last heartbeat or None,
    datetime_start)``, in one connection."""
    import sqlalchemy

    with engine.connect() as conn:
        server_now = conn.execute(sqlalchemy.text("SELECT CURRENT_TIMESTAMP")).scalar().replace(tzinfo=None)
        rows = conn.execute(sqlalchemy.text(
            "SELECT t.number, h.heartbeat, t.datetime_start FROM trials t "
            "JOIN studies s ON s.study_id = t.study_id LEFT JOIN trial_heartbeats h ON h.trial_id = t.trial_id "
            "WHERE s.study_name = :n AND t.state = 'RUNNING'"), {"n": study_name}).fetchall()
    return server_now, [tuple(r) for r in rows]


def live_trials(storage: str, study_name: str, grace_s: float) -> set[int]:
    """RUNNING trials of a server database's study with a heartbeat less than ``grace_s`` old (by
    the server's clock, as Optuna's heartbeats), or, without one yet, a start (by this clock, as
    Optuna's start times: a trial just asked for has not beaten yet). Raises ``StudyError``."""
    import datetime as dt

    import sqlalchemy

    from orchestrator.errors import StudyError, first_line
    from orchestrator.redact import shown

    grace = dt.timedelta(seconds=grace_s)
    args = {"options": "-c timezone=UTC"} if storage.startswith("postgresql") else {}
    engine = sqlalchemy.create_engine(storage, connect_args=args, poolclass=sqlalchemy.pool.NullPool)
    try:
        server_now, rows = running_heartbeats(engine, study_name)
    except Exception as exc:  # noqa: BLE001 - one line, as every store error
        raise StudyError(f"storage {shown(storage)}: {first_line(exc, typed=False)}") from None
    finally:
        engine.dispose()
    now = dt.datetime.now()
    return {n for n, beat, start in rows
            if (server_now - beat < grace if beat is not None else start is not None and now - start < grace)}
