"""Credentials in URLs: masked for showing, dropped for pasting, split as SQLAlchemy splits them."""

from __future__ import annotations

import io

import pytest

from orchestrator.redact import (OutputFilter, child_env, environment_secrets, pasteable, secrets_in,
                                 shown)

CASES = [
    # url, shown, pasteable
    ("postgresql+psycopg2://sweeper:s3cr%40t@127.0.0.1:5432/optuna",
     "postgresql+psycopg2://sweeper:***@127.0.0.1:5432/optuna",
     "postgresql+psycopg2://sweeper@127.0.0.1:5432/optuna"),
    ("postgresql://sweeper:pa:ss/w@host/db?sslmode=require&password=x2y",
     "postgresql://sweeper:***@host/db?sslmode=require&password=***",
     "postgresql://sweeper@host/db?sslmode=require"),
    ("postgresql://sweeper@host/db", "postgresql://sweeper@host/db", "postgresql://sweeper@host/db"),
    ("postgresql:///optuna?service=team", "postgresql:///optuna?service=team", "postgresql:///optuna?service=team"),
    ("sqlite:///mlruns/optuna.db", "sqlite:///mlruns/optuna.db", "sqlite:///mlruns/optuna.db"),
    ("sqlite:////abs/path/with:colon@x.db", "sqlite:////abs/path/with:colon@x.db", "sqlite:////abs/path/with:colon@x.db"),
    ("https://bob:tok@mlflow.example:5000", "https://bob:***@mlflow.example:5000", "https://bob@mlflow.example:5000"),
    ("http://h:5000/?token=abc&x=1", "http://h:5000/?token=***&x=1", "http://h:5000/?x=1"),
    ("http://h:5000/?Access_Token=abc", "http://h:5000/?Access_Token=***", "http://h:5000/"),
    ("postgresql://:pw@h/db", "postgresql://:***@h/db", "postgresql://@h/db"),
    # an '@' in a password, not percent-encoded: SQLAlchemy ends it at the first, urllib at the last;
    # a tour's showed "sweeper2:***@sp/ec:ial#9%@127.0.0.1": all of it masked now (urls.guard refuses it)
    ("postgresql+psycopg2://sweeper2:Kx3@sp/ec:ial#9%@127.0.0.1:55439/optuna",
     "postgresql+psycopg2://sweeper2:***@127.0.0.1:55439/optuna", "postgresql+psycopg2://sweeper2@127.0.0.1:55439/optuna"),
    ("http://mlfuser:Mlf9@secretPW77@127.0.0.1:55500", "http://mlfuser:***@127.0.0.1:55500",
     "http://mlfuser@127.0.0.1:55500"),
    # a review: Azure's user@server names (SQLAlchemy's user part holds an '@'): printed whole before
    ("postgresql://myadmin@myserver:s3cret@srv.postgres.database.azure.com/db",
     "postgresql://myadmin@myserver:***@srv.postgres.database.azure.com/db",
     "postgresql://myadmin@myserver@srv.postgres.database.azure.com/db"),
    # an '@' in the query is the query's: not the password's, and the query's secrets still masked
    ("postgresql://u:pw@h/db?sslcert=/home/a@corp/c.pem&password=zzz",
     "postgresql://u:***@h/db?sslcert=/home/a@corp/c.pem&password=***", "postgresql://u@h/db?sslcert=/home/a@corp/c.pem"),
    ("https://u:tok@mlflow.example/x?email=a@b.com", "https://u:***@mlflow.example/x?email=a@b.com",
     "https://u@mlflow.example/x?email=a@b.com"),
]


@pytest.mark.parametrize("url, want_shown, want_pasteable", CASES)
def test_urls_are_masked_for_showing_and_stripped_for_pasting(url: str, want_shown: str,
                                                              want_pasteable: str) -> None:
    assert shown(url) == want_shown
    assert pasteable(url) == want_pasteable
    for secret in secrets_in(url):
        assert secret not in shown(url) and secret not in pasteable(url)


@pytest.mark.parametrize("url", [c[0] for c in CASES if c[0].startswith(("postgresql", "sqlite"))])
def test_the_password_masked_is_the_one_sqlalchemy_would_send(url: str) -> None:
    from sqlalchemy.engine import make_url

    password = make_url(url).password
    if password is None:
        assert shown(url) == url
    else:
        assert password in secrets_in(url)
        assert make_url(pasteable(url)).password is None


def test_secrets_are_found_percent_encoded_and_decoded() -> None:
    assert secrets_in("postgresql://u:p%2Fw%40d@h/db") == ["p%2Fw%40d", "p/w@d"]


def test_trial_processes_inherit_no_credentials() -> None:
    env = {"PATH": "/bin", "PGPASSWORD": "hunter22", "MLFLOW_TRACKING_TOKEN": "tok123",
           "MLFLOW_TRACKING_PASSWORD": "pw1234", "ORCHESTRATE_STORAGE": "postgresql://u:zz9@h/db",
           "MLFLOW_TRACKING_URI": "http://u:mlpw@h:5000", "CUDA_VISIBLE_DEVICES": "0"}
    out = child_env(env)
    assert out == {"PATH": "/bin", "MLFLOW_TRACKING_URI": "http://u:***@h:5000", "CUDA_VISIBLE_DEVICES": "0"}
    assert sorted(environment_secrets(env)) == sorted(["hunter22", "tok123", "pw1234", "zz9", "mlpw"])


def test_the_output_filter_masks_every_secret_it_was_given() -> None:
    sink = io.StringIO()
    out = OutputFilter(sink, ["s3cr@t", "s3cr%40t"])
    out.write("connect postgresql://u:s3cr%40t@h/db failed: password s3cr@t rejected\n")
    out.add(["tok9"])
    out.write("token tok9\n")
    assert sink.getvalue() == "connect postgresql://u:***@h/db failed: password *** rejected\ntoken ***\n"


def test_only_an_at_sign_before_the_query_makes_a_url_ambiguous() -> None:
    from orchestrator.redact import ambiguous

    assert ambiguous("postgresql://u:Kx3@sp/ec@h/db") and ambiguous("http://u:a@b@h:5000")
    assert not ambiguous("postgresql://u:pw@h/db?sslcert=/home/a@corp/c.pem")
    assert not ambiguous("postgresql://myadmin@myserver:pw@h/db") and not ambiguous("sqlite:////p/with:colon@x.db")
