"""A server database as it is met: its tables, read before a study is made in it or read from it
(none: a new database; Optuna's; or MLflow's, its tracking database on the same server named by
mistake, which is refused), and whether a failure to reach it is its absence or a mistake."""

from __future__ import annotations

from typing import Any

from orchestrator.errors import StudyError
from orchestrator.redact import shown


def table_names(url: str, connect_args: dict[str, Any] | None = None) -> list[str]:
    """The tables of the server database at ``url`` (connecting creates nothing)."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(url, connect_args=connect_args or {}, poolclass=sqlalchemy.pool.NullPool)
    try:
        with engine.connect() as con:
            return list(sqlalchemy.inspect(con).get_table_names())
    finally:
        engine.dispose()


def foreign(url: str, tables: list[str]) -> StudyError | None:
    """A server database that holds another program's tables and no Optuna study (a tour pointed
    ``--storage`` at MLflow's database, one server holding both: Optuna made its tables in it, then
    said to upgrade Optuna): the error to raise, before anything is created; else None."""
    if "studies" in tables or not {"experiments", "runs"} <= set(tables):  # a team's own tables beside the study's
        return None  # are theirs to keep (a review): only MLflow's database, named by mistake, is refused
    listed = ", ".join(sorted(tables)[:4]) + (", ..." if len(tables) > 4 else "")
    return StudyError(f"storage {shown(url)}: the database holds {len(tables)} tables of another program (MLflow's) "
                      f"({listed}) and no Optuna study: name a database of the study's own (createdb optuna), "
                      "not the tracking store's")


def unreachable(exc: BaseException) -> bool:
    """Whether a connection's failure is the server's absence, not the URL's mistake: the words of
    a lost connection (``outage.LOST``), a host name that does not resolve left out (a typo, at start)."""
    from orchestrator.store.outage import LOST

    text = str(exc).lower()
    return any(w in text for w in LOST) and "could not translate host name" not in text and \
        "name or service not known" not in text
