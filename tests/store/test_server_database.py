"""A server database as the read-only commands meet it: one that holds no study gets nothing made
in it, one that holds another program's tables (MLflow's, on the same server) is said in one line
by every command, the sweep's plan included (the PostgreSQL tour: ``report`` made Optuna's 12
tables in MLflow's database, then said to upgrade Optuna), and one that does not answer is exit
75, as a sweep's outage is, not 2 with the driver's words."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import command, orchestrate, write_spec

pytestmark = pytest.mark.slow


def tables(url: str) -> list[str]:
    from orchestrator.store.serverdb import table_names

    return sorted(table_names(url))


def test_an_empty_database_gets_nothing_and_mlflow_s_is_refused(postgres_url: str, tmp_path: Path) -> None:
    write_spec(tmp_path, """
        name: foreign
        experiment: experiments.mlp
        device: cpu
        space: {hidden_size: [8]}
        """)
    for words in (["report"], ["best"], ["check"]):
        proc = command([*words, "spec.yaml", "--storage", postgres_url], tmp_path)
        assert proc.returncode == 2 and "no study 'foreign' in postgresql+psycopg2://" in proc.stderr, proc.stderr
    assert tables(postgres_url) == []  # Optuna made its tables here before
    import sqlalchemy

    engine = sqlalchemy.create_engine(postgres_url)
    with engine.begin() as con:  # a team's own table beside where the study will be: theirs to keep (a review)
        con.execute(sqlalchemy.text("CREATE TABLE team_results (id integer)"))
    engine.dispose()
    proc = command(["report", "spec.yaml", "--storage", postgres_url], tmp_path)
    assert proc.returncode == 2 and "no study 'foreign'" in proc.stderr and tables(postgres_url) == ["team_results"]
    from mlflow.tracking import MlflowClient

    MlflowClient(tracking_uri=postgres_url).search_experiments()  # MLflow makes its own tables in it
    made = tables(postgres_url)
    assert {"experiments", "runs"} <= set(made) and "studies" not in made
    said = f"the database holds {len(made)} tables of another program (MLflow's) ("
    for words in (["report"], ["best"], ["check"]):
        proc = command([*words, "spec.yaml", "--storage", postgres_url], tmp_path)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and said in proc.stderr, proc.stderr
        assert "and no Optuna study: name a database of the study's own" in proc.stderr
    plan = orchestrate(["spec.yaml", "--dry-run", "--storage", postgres_url], tmp_path)
    assert plan.returncode == 2 and plan.stderr.startswith(f"--storage: storage: {said}"), plan.stderr
    assert tables(postgres_url) == made


def test_a_database_that_does_not_answer_is_a_store_down_for_the_readers(tmp_path: Path) -> None:
    from servers import free_port

    write_spec(tmp_path, """
        name: down
        experiment: experiments.mlp
        device: cpu
        space: {hidden_size: [8]}
        """)
    url = f"postgresql+psycopg2://nobody@127.0.0.1:{free_port()}/optuna"  # nobody listens there
    for words in (["report"], ["best"], ["check"]):
        proc = command([*words, "spec.yaml", "--storage", url], tmp_path)
        assert proc.returncode == 75 and proc.stderr.count("\n") == 1, proc.stderr
        assert proc.stderr.startswith(f"orchestrate: storage {url} does not answer (") and proc.stderr.rstrip().endswith(
            "nothing was read: run this command again once it is back"), proc.stderr
