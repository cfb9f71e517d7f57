"""What a store's URL says (``orchestrator/urls.py``), and that ``sqlite:///`` is parsed and built
there alone."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from conftest import ROOT, orchestrate, write_spec
from orchestrator.urls import (absolute_uri, is_sqlite, is_sqlite_file, sqlite_folder, sqlite_path,
                               sqlite_url)


@pytest.mark.parametrize("url, path, sqlite, file", [
    ("sqlite:///mlruns/optuna.db", Path("mlruns/optuna.db"), True, True),
    ("sqlite:////abs/optuna.db", Path("/abs/optuna.db"), True, True),
    ("sqlite:///:memory:", Path(":memory:"), True, False),
    ("sqlite:///x.db?mode=ro", Path("x.db?mode=ro"), True, False),
    ("sqlite://", None, True, False),
    ("postgresql://u@host/db", None, False, False),
    ("https://mlflow.example", None, False, False),
])
def test_what_a_url_says(url: str, path: Path | None, sqlite: bool, file: bool) -> None:
    assert (sqlite_path(url), is_sqlite(url), is_sqlite_file(url)) == (path, sqlite, file)


def test_relative_sqlite_urls_are_made_absolute_and_others_kept(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert absolute_uri("sqlite:///mlruns/x.db") == f"sqlite:///{tmp_path.resolve()}/mlruns/x.db"
    assert absolute_uri("sqlite:////abs/x.db") == "sqlite:////abs/x.db"
    assert absolute_uri("postgresql://h/db") == "postgresql://h/db"
    assert sqlite_folder("sqlite:///mlruns/x.db") == tmp_path.resolve() / "mlruns"
    assert sqlite_folder("postgresql://h/db") is None
    assert sqlite_url(tmp_path / "a.db") == f"sqlite:///{tmp_path}/a.db"
    assert sqlite_path(sqlite_url(tmp_path / "a.db")) == tmp_path / "a.db"


def _parsing(tree: ast.Module) -> list[tuple[int, str]]:
    """String literals of ``tree`` that parse or build an SQLite URL: one that holds ``sqlite:``
    and no white space (a URL, a prefix or a pattern, not a sentence of a message, a help text or
    a docstring; an f-string's literal parts count), or the argument of a ``startswith`` that
    begins with ``sqlite``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if "sqlite:" in node.value and not any(ch.isspace() for ch in node.value):
                found.append((node.lineno, node.value))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "startswith"
              and node.args and isinstance(node.args[0], ast.Constant) and str(node.args[0].value).startswith("sqlite")):
            found.append((node.lineno, f"startswith({node.args[0].value!r})"))
    return found


def test_the_check_finds_parsing_and_leaves_sentences() -> None:
    code = ('x = url[len("sqlite:///"):]\ny = f"sqlite:///{path}"\nok = url.startswith("sqlite")\n'
            'help = "the default is sqlite:///mlruns/optuna.db, a file"\n')
    assert sorted(line for line, _ in _parsing(ast.parse(code))) == [1, 2, 3]


def test_sqlite_urls_are_parsed_in_urls_py_alone() -> None:
    found = {str(p.relative_to(ROOT)): hits for p in sorted((ROOT / "orchestrator").rglob("*.py"))
             if (hits := _parsing(ast.parse(p.read_text(), str(p))))}
    assert "orchestrator/urls.py" in found  # the check sees the one place that does it
    del found["orchestrator/urls.py"]
    assert found == {}


def test_a_tracking_servers_refusal_gets_its_remedy() -> None:
    """The MLflow client's words in a scale-out tour (a 403 from the Host check, a 401 from basic auth)."""
    from orchestrator.urls import server_remedy

    host = ("API request to endpoint /api/2.0/mlflow/experiments/get-by-name failed with error code 403 != 200. "
            "Response body: 'Invalid Host header - possible DNS rebinding attack detected'")
    assert server_remedy("http://u:pw@vm:5000", host) == ("; the server refuses the name vm:5000 (MLflow's "
                                                          "--allowed-hosts): start it with --allowed-hosts naming "
                                                          "it (docs/scale.md)")
    auth = "API request to endpoint ... failed with error code 401 != 200. Response body: 'You are not authenticated.'"
    assert server_remedy("http://vm:5000", auth).startswith("; set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD")
    assert server_remedy("http://vm:5000", "Connection refused") == ""


def test_a_database_servers_refusal_gets_its_remedy() -> None:
    """libpq's words in a scale-out tour: no password, a wrong one, a database that is not there."""
    from orchestrator.urls import database_remedy

    for said in ('OperationalError: connection to server at "127.0.0.1", port 55439 failed: fe_sendauth: no password '
                 "supplied", 'FATAL:  password authentication failed for user "sweeper"'):
        assert database_remedy(said).startswith("; give the role's password to libpq: PGPASSWORD, ~/.pgpass"), said
    assert database_remedy('FATAL:  database "nosuchdb" does not exist').startswith("; create it")
    assert database_remedy("could not translate host name") == ""


def test_a_password_with_an_unencoded_at_sign_is_refused_naming_where_it_came_from(tmp_path: Path) -> None:
    """The PostgreSQL tour: ``--tracking-uri http://mlfuser:Mlf9@secretPW77@host`` ran (urllib takes
    the last '@'), and every line printed ``mlfuser:***@secretPW77@host``; in the study's URL,
    12 of 16 characters showed. Refused before anything runs, naming the flag, the variable or the
    spec's line, and no part of the password printed."""
    spec = write_spec(tmp_path, """
        name: at_sign
        experiment: experiments.mlp
        device: cpu
        space: {hidden_size: [8]}
        """)
    secret = "Kx3@sp/ec:ial#9%"
    for args, env, where in (
            (["--storage", f"postgresql+psycopg2://sweeper:{secret}@127.0.0.1:1/optuna"], {}, "--storage: "),
            ([], {"ORCHESTRATE_TRACKING_URI": f"http://mlfuser:{secret}@127.0.0.1:1"}, "ORCHESTRATE_TRACKING_URI: ")):
        for command in (["spec.yaml", "--dry-run"], ["report", "spec.yaml"]):
            proc = orchestrate([*command, *args], tmp_path, env=env)
            assert proc.returncode == 2 and proc.stderr.startswith(where), proc.stderr
            assert "its password holds an '@' that is not percent-encoded" in proc.stderr and "%40" in proc.stderr
            assert "Kx3" not in proc.stdout + proc.stderr and "ial#9" not in proc.stdout + proc.stderr
    spec.write_text(spec.read_text() + f"storage: postgresql+psycopg2://sweeper:{secret}@127.0.0.1:1/optuna\n")
    proc = orchestrate(["spec.yaml", "--dry-run"], tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("spec.yaml:5: storage: its password holds an '@'"), proc.stderr
    assert "Kx3" not in proc.stderr and "ial#9" not in proc.stderr
