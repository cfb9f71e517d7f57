"""An SQLite store's file looked at before it is opened (``sqlitefile``): real files, damaged the
ways a full disk, a copy cut short or another program damage them."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from orchestrator.store.sqlitefile import damage, is_empty
from orchestrator.store.writefault import aside


def database(path: Path, rows: int = 300) -> Path:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (x BLOB)")
    con.executemany("INSERT INTO t VALUES (?)", [(os.urandom(1000),)] * rows)
    con.commit()
    con.close()
    return path


def truncated(path: Path) -> None:
    os.truncate(path, 4096)


def text(path: Path) -> None:
    path.write_text("hello, this is not a database\n" * 10)


def schema_overwritten(path: Path) -> None:
    with open(path, "r+b") as f:
        f.seek(100)  # past the header: page 1 holds the schema
        f.write(b"\xff" * 3000)


def short(path: Path) -> None:
    os.truncate(path, 40)


CASES = [
    ("valid", lambda p: None, None),
    ("empty", lambda p: os.truncate(p, 0), None),
    ("text", text, "is not an SQLite database"),
    ("truncated to 4 KB", truncated, "is truncated: 4,096 bytes, its header says"),
    ("shorter than a header", short, "is truncated: 40 bytes, shorter than an SQLite header"),
    ("schema overwritten", schema_overwritten, "is damaged (database disk image is malformed)"),
]


@pytest.mark.parametrize("name, spoil, expected", CASES, ids=[c[0] for c in CASES])
def test_each_damage_is_named_and_a_sound_or_empty_file_is_not(tmp_path: Path, name: str, spoil, expected) -> None:  # noqa: ANN001
    path = database(tmp_path / "x.db")
    spoil(path)
    found = damage(path)
    if expected is None:
        assert found is None
    else:
        assert found is not None and found.startswith(expected), found
    assert path.exists()  # looked at, never changed or created


def test_a_missing_file_is_no_damage_and_nothing_is_created(tmp_path: Path) -> None:
    assert damage(tmp_path / "none.db") is None and not (tmp_path / "none.db").exists()
    assert is_empty(tmp_path / "none.db")


def test_the_remedy_quotes_a_path_with_spaces(tmp_path: Path) -> None:
    assert aside(Path("/a b/mlflow.db")) == "mv '/a b/mlflow.db' '/a b/mlflow.db.corrupt'"


def test_a_write_to_a_file_no_longer_at_its_path_is_named_moved_not_read_only(tmp_path: Path) -> None:
    """SQLite's SQLITE_READONLY_DBMOVED (1032): its message says "readonly database", which the
    words alone would take for a read-only store; the code says the file left its path."""
    from orchestrator.store.writefault import MOVED, READ_ONLY, cause

    con = sqlite3.connect(tmp_path / "s.db")
    con.execute("CREATE TABLE t (a)")
    con.commit()
    (tmp_path / "s.db").rename(tmp_path / "elsewhere.db")
    with pytest.raises(sqlite3.OperationalError) as caught:
        con.execute("INSERT INTO t VALUES (1)")
        con.commit()
    con.close()
    assert "readonly database" in str(caught.value)
    assert cause(caught.value) == MOVED != READ_ONLY
