"""Where a sweep's study and runs live: the flags, the environment, the spec, in that order; what a
printed command needs to reach them again, without their secrets; and what a store's URL says
(an SQLite file, or a server). Every ``sqlite:///`` URL is parsed and built here, and nowhere else
(``tests/test_urls.py`` checks it). A top module: the spec's rules, the stores, the reports and
the sweep all read URLs.

``--storage`` and ``--tracking-uri`` win; then ``ORCHESTRATE_STORAGE`` and
``ORCHESTRATE_TRACKING_URI`` (then MLflow's own ``MLFLOW_TRACKING_URI``), so that a team's
command lines and specs need not carry a password at all; then the spec's ``storage:`` and
``tracking_uri:``; then the defaults (SQLite files under ``mlruns/``).
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.redact import ambiguous, environment_secrets, filter_output, has_secret, pasteable, secrets_in

SQLITE = "sqlite:///"
"""An SQLite database file's URL begins so (then a relative path, or a fourth slash and an absolute one)."""
SQLITE_IN_MEMORY = "sqlite://"
DEFAULT_STORAGE = "sqlite:///mlruns/optuna.db"
DEFAULT_TRACKING_URI = "sqlite:///mlruns/mlflow.db"
STORAGE_ENV = ("ORCHESTRATE_STORAGE",)
TRACKING_ENV = ("ORCHESTRATE_TRACKING_URI", "MLFLOW_TRACKING_URI")
STORAGE_HELP = (f"Optuna storage URL (default: ${STORAGE_ENV[0]}, else the spec's storage, else {DEFAULT_STORAGE}); "
                "keep a password out of it: PGPASSWORD, ~/.pgpass")
TRACKING_HELP = (f"MLflow tracking URI (default: ${TRACKING_ENV[0]} or ${TRACKING_ENV[1]}, else the spec's "
                 f"tracking_uri, else {DEFAULT_TRACKING_URI})")
"""Every command's ``--storage`` and ``--tracking-uri`` help: the order ``overrides`` applies."""


@dataclass(frozen=True)
class Origins:
    """Where each store's URL came from: a flag, an environment variable, or None (the spec or
    the default); and the slots: ``--devices``'s value where they came from the flag (the printed
    resume commands keep it)."""

    storage: str | None = None
    tracking_uri: str | None = None
    devices: str | None = None
    flags: tuple[str, ...] = ()
    """The other flags that shape the sweep, as given (``--n-trials``, ``--stop``, ``--device``): a
    pasted resume runs the same sweep (``--retry`` is the run's own act, not carried)."""


def overrides(storage_flag: str | None, tracking_flag: str | None,
              environ: dict[str, str] | None = None) -> tuple[dict[str, Any], Origins]:
    """``load_spec``'s overrides for the two stores, and where each came from."""
    env = os.environ if environ is None else environ
    out: dict[str, Any] = {}
    origin: dict[str, str | None] = {"storage": None, "tracking_uri": None}
    for field, flag, value, names in (("storage", "--storage", storage_flag, STORAGE_ENV),
                                      ("tracking_uri", "--tracking-uri", tracking_flag, TRACKING_ENV)):
        if value is not None:
            out[flag] = ((field,), value)
            origin[field] = flag
            continue
        name = next((n for n in names if env.get(n)), None)
        if name is not None:
            out[name] = ((field,), env[name])
            origin[field] = name
    return out, Origins(storage=origin["storage"], tracking_uri=origin["tracking_uri"])


def guard(spec: Any, origins: Origins) -> None:
    """Before anything else runs: every secret this run knows is kept out of its output, and a
    password given on the command line is warned about, once."""
    filter_output(secrets_in(spec.storage) + secrets_in(spec.tracking_uri) + environment_secrets())
    for field in ("storage", "tracking_uri"):
        if ambiguous(getattr(spec, field)):  # read two ways, and most of the password printed
            from orchestrator.errors import SpecError

            given = getattr(origins, field)
            raise SpecError(f"its password holds an '@' that is not percent-encoded: SQLAlchemy ends a password at "
                            f"its first '@' and MLflow's client at its last, so it is not read as written; write "
                            f"each '@' in it as %40, or {_instead(field, given not in (None, '--storage', '--tracking-uri'))}",
                            file=given or str(spec.path), line=None if given else spec.line_of(field),
                            field=None if given else field)
    for field, flag in (("storage", "--storage"), ("tracking_uri", "--tracking-uri")):
        if getattr(origins, field) == flag and has_secret(getattr(spec, field)):
            print(f"orchestrate: warning: {flag} holds a password, which other users of this host can "
                  f"read in the process list (ps); {_instead(field)}", file=sys.stderr)
        elif getattr(origins, field) is None and has_secret(getattr(spec, field)):
            print(f"orchestrate: warning: {spec.path} holds a password in `{field}:`, readable by "
                  f"anyone who can read the file or its history; {_instead(field)}", file=sys.stderr)


def _instead(field: str, in_env: bool = False) -> str:
    """How to keep a password out of a command line or a spec (``in_env``: it is in a variable already)."""
    if field == "storage":
        return ("leave it out of the URL and give it to libpq instead (PGPASSWORD, ~/.pgpass or "
                "PGSERVICE)" + ("" if in_env else ", or pass the whole URL in ORCHESTRATE_STORAGE"))
    return ("leave it out of the URI and set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD "
            "(or MLFLOW_TRACKING_TOKEN)" + ("" if in_env else ", or pass the whole URI in ORCHESTRATE_TRACKING_URI"))


def command_flags(spec: Any, origins: Origins | None, defaults: tuple[str, str]) -> list[str]:
    """``--storage``/``--tracking-uri`` as a printed command needs them to reach the same stores:
    those the command line gave, with their secrets left out (``redact.pasteable``); none for a
    store read from the environment or the spec (the variable, or the spec, reaches it again: a
    flag without the spec's password overrode the spec's working URL, and the pasted command
    failed to authenticate). ``origins`` None: not known here, so every store but the default's."""
    flags: list[str] = []
    if spec.storage == defaults[0] and spec.tracking_uri == defaults[1]:
        return flags
    for field, flag in (("storage", "--storage"), ("tracking_uri", "--tracking-uri")):
        origin = "--" if origins is None else getattr(origins, field)
        if origin is not None and origin.startswith("--"):
            flags += [flag, pasteable(getattr(spec, field))]
    return flags


def from_environment(origins: Origins) -> list[str]:
    """The variables a printed command relies on, e.g. ``["ORCHESTRATE_STORAGE"]``."""
    return [o for o in (origins.storage, origins.tracking_uri) if o is not None and not o.startswith("--")]


# -- what a URL says ----------------------------------------------------------------------------------
def is_sqlite(url: str) -> bool:
    """Whether ``url`` is an SQLite store: a local file, no server (no heartbeats, no outages)."""
    return url.startswith("sqlite")


def is_tracking_server(url: str) -> bool:
    """Whether ``url`` is an MLflow tracking server (``http(s)://``), which serves MLflow's UI itself,
    as opposed to a database ``mlflow ui`` can serve."""
    return url.startswith(("http://", "https://"))


def server_remedy(uri: str, said: str) -> str:
    """What to do about a tracking server's refusal (``said``: its error's text), "" if nothing
    known: its Host check (MLflow 3's DNS-rebinding guard, HTTP 403) or its authentication (401)."""
    import urllib.parse

    if "Invalid Host header" in said or "DNS rebinding" in said:
        host = urllib.parse.urlsplit(uri).netloc.rsplit("@", 1)[-1]
        return (f"; the server refuses the name {host} (MLflow's --allowed-hosts): start it with "
                f"--allowed-hosts naming it (docs/scale.md)")
    if "404 != 200" in said or "HTTP 404" in said:  # a path the server does not serve (a tour's http://host:5000/mlflow)
        return ("; no MLflow API at that path (HTTP 404 Not Found): name the server itself, as "
                "http://HOST:PORT, with a path only where it serves MLflow under one")
    if "401" in said or "Unauthorized" in said or "credentials" in said.lower():
        return ("; set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN) to an "
                "account of the server")
    return ""


def database_remedy(said: str) -> str:
    """What to do about a database server's refusal (``said``: the driver's words, PostgreSQL's
    libpq), "" if nothing known."""
    if "no password supplied" in said or "password authentication failed" in said:
        return ("; give the role's password to libpq: PGPASSWORD, ~/.pgpass or a service in ~/.pg_service.conf "
                "(docs/scale.md#credentials)")
    if "does not exist" in said and "database" in said:
        return "; create it (createdb, or CREATE DATABASE as its owner) or name one that exists"
    return ""


def is_sqlite_file(url: str) -> bool:
    """Whether ``url`` is plainly an SQLite database file (not ``:memory:``, no query), told
    without SQLAlchemy (0.2-0.5 s to import)."""
    return re.fullmatch(r"sqlite:///(?!:memory:$)[^?]+", url) is not None


def sqlite_path(url: str) -> Path | None:
    """The database file of a ``sqlite:///`` URL (relative to the working directory as written),
    else None."""
    return Path(url[len(SQLITE):]) if url.startswith(SQLITE) else None


def sqlite_folder(url: str) -> Path | None:
    """The folder of an SQLite store's file (resolved), else None."""
    path = sqlite_path(url)
    return path.resolve().parent if path is not None else None


def sqlite_url(path: Path | str) -> str:
    """The URL of the SQLite database file ``path``."""
    return f"{SQLITE}{path}"


def absolute_uri(uri: str) -> str:
    """``sqlite:///mlruns/x.db`` relative to the working directory, made absolute for printing;
    any other URL as it is."""
    path = sqlite_path(uri)
    if path is not None and not path.is_absolute():
        return sqlite_url(path.resolve())
    return uri
