"""Credentials in storage URLs and tracking URIs: never shown, never recorded.

A password can reach orchestrate in a URL's user part (``postgresql://sweeper:PASSWORD@db/optuna``,
``https://user:PASSWORD@mlflow.example``) or in a query parameter (``?password=...``,
``?token=...``). Everything this tool prints, logs or records goes through ``shown`` (the URL
with ``***`` in place of each secret); the commands it prints for pasting use ``pasteable`` (the
secrets removed, so libpq's ``PGPASSWORD``, ``~/.pgpass`` and ``PGSERVICE``, or MLflow's
``MLFLOW_TRACKING_PASSWORD``/``MLFLOW_TRACKING_TOKEN``, supply them). ``OutputFilter`` is the
backstop: once the secrets of a run are known, any of them written to stdout or stderr (a
library's message, a traceback) comes out as ``***``.

The user part is split the way SQLAlchemy's ``make_url`` splits it (the password runs to the last
``@`` of the authority), so whatever SQLAlchemy would send as the password is what is masked.
Pure functions; nothing here imports a database driver.
"""

from __future__ import annotations

import io
import os
import re
import sys
from typing import Any, Iterable, Mapping, TextIO
from urllib.parse import unquote

from orchestrator import errors

MASK = "***"
SECRET_QUERY_KEYS = frozenset({"password", "passwd", "pwd", "sslpassword", "token", "access_token",
                               "api_key", "apikey", "secret", "client_secret"})
"""Query parameters whose value is a credential (libpq's ``password``/``sslpassword``, tokens)."""
SECRET_ENV = ("PGPASSWORD", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN",
              "MLFLOW_TRACKING_CLIENT_CERT_PATH", "DATABRICKS_TOKEN")
"""Credentials by name: what the orchestrator's own connections read, and no trial process needs."""
URL_ENV = ("ORCHESTRATE_STORAGE", "ORCHESTRATE_TRACKING_URI", "MLFLOW_TRACKING_URI", "MLFLOW_BACKEND_STORE_URI")
"""Variables that may hold a URL with a password in it."""

_USERINFO = re.compile(r"^(?P<head>[A-Za-z][\w+.-]*://)(?P<user>[^:/?#]*):(?P<password>[^@]*)@")
"""The user part as SQLAlchemy's ``make_url`` reads it: a user may hold an '@' (Azure's
``user@server``), and the password runs to the next '@'."""


def ambiguous(url: str) -> bool:
    """Whether ``url`` has a password and another ``@`` before its query: one in the password, not
    percent-encoded (``%40``). SQLAlchemy ends the password at the first ``@``, urllib (MLflow's
    client) at the last, and a tour's ``sweeper:Kx3@sp/ec:ial#9%@db`` printed 12 of its 16
    characters; ``urls.guard`` refuses such a URL, and ``shown`` masks to the last ``@`` meanwhile.
    An ``@`` in the query (``?sslcert=/home/a@corp/c.pem``) is the query's."""
    m = _USERINFO.match(url)
    return m is not None and "@" in url[m.end():].partition("?")[0]


def _split(url: str) -> tuple[str, str | None, str, str | None]:
    """(before the password, the password or None, after it up to the query, the query or None)."""
    m = _USERINFO.match(url)
    if m is None:
        head, sep, query = url.partition("?")
        return head, None, "", query if sep else None
    password = m.group("password")
    rest, sep, query = url[m.end():].partition("?")
    if "@" in rest:  # ambiguous: the password may run to the last "@" before the query, all of it masked
        more, rest = rest.rsplit("@", 1)
        password += "@" + more
    return m.group("head") + m.group("user"), password, "@" + rest, query if sep else None


def _query_items(query: str) -> list[tuple[str, str | None]]:
    out: list[tuple[str, str | None]] = []
    for item in query.split("&"):
        key, sep, value = item.partition("=")
        out.append((key, value if sep else None))
    return out


def _is_secret_key(key: str) -> bool:
    return unquote(key).lower() in SECRET_QUERY_KEYS


def _rebuild(head: str, password: str | None, rest: str, query: str | None, *, drop: bool) -> str:
    if password is not None:
        head = head if drop else f"{head}:{MASK}"
    url = head + rest
    if query is None:
        return url
    items = [(k, v) for k, v in _query_items(query) if not (drop and _is_secret_key(k))]
    text = "&".join(k if v is None else f"{k}={MASK if _is_secret_key(k) else v}" for k, v in items)
    return f"{url}?{text}" if text else url


def shown(url: str) -> str:
    """``url`` as it may be printed, logged or recorded: each secret replaced by ``***``."""
    head, password, rest, query = _split(url)
    return _rebuild(head, password, rest, query, drop=False)


def pasteable(url: str) -> str:
    """``url`` for a command a user pastes: the secrets left out (the password comes from
    ``PGPASSWORD``, ``~/.pgpass``, ``PGSERVICE`` or MLflow's variables instead)."""
    head, password, rest, query = _split(url)
    return _rebuild(head, password, rest, query, drop=True)


def secrets_in(url: str) -> list[str]:
    """The secret parts of ``url``, as written and percent-decoded (for ``OutputFilter``)."""
    head, password, rest, query = _split(url)
    found = [password] if password else []
    if password and "@" in password:  # each part SQLAlchemy or urllib may send (a short one: every word)
        found += [part for part in password.split("@") if len(part) >= 3]
    for key, value in _query_items(query or ""):
        if value and _is_secret_key(key):
            found.append(value)
    return sorted({form for s in found for form in (s, unquote(s)) if form}, key=len, reverse=True)


def has_secret(url: str) -> bool:
    return bool(secrets_in(url))


def first_line(exc: BaseException, url: str) -> str:
    """An error's first line (``errors.first_line``, without its type) for a one-line message
    about ``url``, with ``url``'s secrets in it masked (a driver or library may quote the URL it was given)."""
    text = errors.first_line(exc, typed=False)
    for secret in secrets_in(url):
        text = text.replace(secret, MASK)
    return text


def environment_secrets(environ: dict[str, str] | None = None) -> list[str]:
    """Secrets held by this process's environment: the credential variables' values, and the
    secret parts of URLs in the URL variables."""
    env = os.environ if environ is None else environ
    found = [env[k] for k in SECRET_ENV if env.get(k)]
    for k in URL_ENV:
        if env.get(k):
            found += secrets_in(env[k])
    return [s for s in found if len(s) >= 3]  # a one- or two-letter "secret" would mask every word


def child_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a trial process (or the probe, or the UI's server) inherits: this one
    without the credentials, which only the orchestrator's own connections use."""
    env = dict(os.environ if environ is None else environ)
    for k in SECRET_ENV + ("ORCHESTRATE_STORAGE", "ORCHESTRATE_TRACKING_URI"):
        env.pop(k, None)
    for k in ("MLFLOW_TRACKING_URI", "MLFLOW_BACKEND_STORE_URI"):
        if k in env and has_secret(env[k]):
            env[k] = shown(env[k])
    return env


class OutputFilter(io.TextIOBase):
    """A text stream that writes through to ``stream`` with every secret replaced by ``***``."""

    def __init__(self, stream: TextIO, secrets: Iterable[str]) -> None:
        super().__init__()
        self.stream = stream
        self.secrets = sorted(set(secrets), key=len, reverse=True)

    def add(self, secrets: Iterable[str]) -> None:
        self.secrets = sorted(set(self.secrets) | set(secrets), key=len, reverse=True)

    def write(self, text: str) -> int:
        for s in self.secrets:
            if s in text:
                text = text.replace(s, MASK)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]  # a property over TextIO's attribute
        return getattr(self.stream, "encoding", "utf-8")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


_KNOWN: set[str] = set()
"""This process's secrets, once ``filter_output`` was told them (for ``scrub``)."""


def scrub(text: str) -> str:
    """``text`` with every secret this process knows replaced by ``***`` (a file before it is
    recorded, say)."""
    for s in sorted(_KNOWN, key=len, reverse=True):
        text = text.replace(s, MASK)
    return text


def filter_output(secrets: Iterable[str]) -> None:
    """From now on, ``secrets`` never reach this process's stdout or stderr (see the module), and
    ``scrub`` knows them."""
    secrets = [s for s in secrets if s]
    if not secrets:
        return
    _KNOWN.update(secrets)
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if isinstance(stream, OutputFilter):
            stream.add(secrets)
        else:
            setattr(sys, name, OutputFilter(stream, secrets))
