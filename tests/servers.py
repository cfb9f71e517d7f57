"""Real servers for the scale-out tests: a PostgreSQL server started from this machine's own
binaries, and an `mlflow server` with a PostgreSQL backend store that serves artifacts over HTTP.

Fixtures (register with ``pytest_plugins = ["servers"]`` in tests/conftest.py):

- ``postgres`` (session, about 1 s to start): a throwaway PostgreSQL cluster in a temporary
  folder (on /dev/shm where it is roomy), listening on 127.0.0.1 and a free port, trust
  authentication, tuned for tests (no fsync). Its ``new_database()`` returns the SQLAlchemy URL
  of a fresh, empty database; ``new_database_with_password()`` one owned by a role with a password.
- ``postgres_url`` (per test): ``postgres.new_database()``.
- ``mlflow_server`` (module, about 8 s to start): ``mlflow server --serve-artifacts`` on its own
  database of ``postgres``; the fixture's value is its ``http://127.0.0.1:PORT`` URI (a ``str``,
  with ``artifacts_dir``, ``backend_store_uri``, ``log_path`` and ``startup_s`` attached).

The PostgreSQL binaries are looked for in ``$ORCHESTRATE_PG_BIN``, next to ``pg_ctl`` on PATH,
in ``pg_config --bindir`` and in the usual package folders (Debian/Ubuntu, RHEL, Homebrew). Where
there are none the tests that use these fixtures are skipped with the reason, except when the
environment variable ``CI`` is ``true``: there the fixture fails, so a CI run cannot pass while
silently skipping them. PostgreSQL refuses to run as root; as root the cluster belongs to, and
runs as, the unprivileged user ``nobody`` (``runuser`` or ``setpriv``).
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import pwd
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import pytest

MLFLOW = str(Path(sys.executable).with_name("mlflow"))
SERVER_USER_AS_ROOT = "nobody"
START_ATTEMPTS = 5  # a free port can be taken between choosing it and binding it
SHM_MIN_FREE = 1 << 30  # a session's cluster grows to a few hundred MB

# Settings for a test cluster. max_connections: every process holds a SQLAlchemy pool per store
# (Optuna's RDBStorage, MLflow's), each bounded by QueuePool's 5 + 10 overflow, so 6 processes
# with two stores each may open 180 in the worst case. Measured: 6 such processes (Optuna with a
# heartbeat thread, MLflow direct and over HTTP) peaked at 28 connections, the server's included.
SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "max_connections": "200",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "timezone": "'UTC'",  # Optuna's heartbeats are `timestamp without time zone` (see the tests)
    "log_timezone": "'UTC'",
    "lc_messages": "'C'",
}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def unavailable(reason: str) -> NoReturn:
    """Skip the test, or fail it where CI must not pass without it."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: these tests must run in CI, not be skipped)", pytrace=False)
    pytest.skip(reason)


def find_pg_bin() -> Path | None:
    """The folder holding initdb and pg_ctl, or None."""
    candidates: list[str] = []
    if os.environ.get("ORCHESTRATE_PG_BIN"):
        candidates.append(os.environ["ORCHESTRATE_PG_BIN"])
    if shutil.which("pg_ctl"):
        candidates.append(str(Path(shutil.which("pg_ctl")).resolve().parent))
    if shutil.which("pg_config"):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            candidates.append(subprocess.run(["pg_config", "--bindir"], capture_output=True,
                                             text=True, timeout=10).stdout.strip())

    def newest_first(pattern: str) -> list[str]:
        def version(path: str) -> tuple[int, ...]:
            return tuple(int(n) for n in re.findall(r"\d+", path)) or (0,)
        return sorted(glob.glob(pattern), key=version, reverse=True)

    for pattern in ("/usr/lib/postgresql/*/bin", "/usr/pgsql-*/bin", "/opt/homebrew/opt/postgresql@*/bin",
                    "/usr/local/opt/postgresql@*/bin", "/usr/local/pgsql/bin"):
        candidates += newest_first(pattern)
    for folder in candidates:
        if folder and all(os.access(Path(folder) / tool, os.X_OK) for tool in ("initdb", "pg_ctl", "postgres")):
            return Path(folder)
    return None


def as_server_user(user: pwd.struct_passwd | None) -> list[str]:
    """The command prefix that runs a PostgreSQL tool as ``user`` (None: as ourselves)."""
    if user is None:
        return []
    if shutil.which("runuser"):
        return ["runuser", "-u", user.pw_name, "--"]
    if shutil.which("setpriv"):
        return ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups", "--"]
    unavailable("running as root, and neither runuser nor setpriv is here to start PostgreSQL "
                f"as {user.pw_name!r} (PostgreSQL refuses to run as root)")


def cluster_parent() -> str:
    """Where the cluster's folder goes: /dev/shm where it is a roomy tmpfs (creating a database
    there took 0.05 s against 0.5 s on this machine's busy disk), else the temporary folder. Every
    user must be able to pass through it: pytest's own basetemp (mode 0700) will not do."""
    candidates = [tempfile.gettempdir(), "/tmp"]
    with contextlib.suppress(OSError):
        shm = os.statvfs("/dev/shm")
        if shm.f_bavail * shm.f_frsize >= SHM_MIN_FREE:
            candidates.insert(0, "/dev/shm")
    for root in candidates:
        path = Path(root).resolve()
        if path.is_dir() and all(os.stat(p).st_mode & stat.S_IXOTH for p in (path, *path.parents)):
            return str(path)
    raise RuntimeError(f"no temporary folder that {SERVER_USER_AS_ROOT!r} can enter (tried {candidates})")


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"({path} unreadable)"


@dataclass
class PostgresServer:
    """A running throwaway cluster: trust authentication on 127.0.0.1:``port`` for ``user``."""

    bin_dir: Path
    root: Path
    port: int
    user: str
    prefix: list[str]
    startup_s: float = 0.0
    _numbers: Iterator[int] = field(default_factory=itertools.count)

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def log_path(self) -> Path:
        return self.root / "server.log"

    def url(self, database: str) -> str:
        """The SQLAlchemy URL of ``database`` on this server."""
        return f"postgresql+psycopg2://{self.user}@127.0.0.1:{self.port}/{database}"

    def connect(self, database: str = "postgres"):
        import psycopg2

        return psycopg2.connect(host="127.0.0.1", port=self.port, user=self.user, dbname=database)

    def new_database(self, prefix: str = "test") -> str:
        """Create a fresh, empty database and return its SQLAlchemy URL."""
        name = f"{re.sub(r'[^a-z0-9_]', '_', prefix.lower())[:40]}_{next(self._numbers)}"
        conn = self.connect()
        try:
            conn.autocommit = True  # CREATE DATABASE cannot run in a transaction
            with conn.cursor() as cur:
                cur.execute(f'CREATE DATABASE "{name}"')
        finally:
            conn.close()
        return self.url(name)

    def new_database_with_password(self, prefix: str, password: str) -> str:
        """A fresh database owned by a new role of its own name that has ``password``; its URL with
        the password in it. The cluster trusts 127.0.0.1, so the password is accepted unchecked:
        what a test of it exercises is where the password is shown, not libpq's authentication."""
        name = self.new_database(prefix).rsplit("/", 1)[1]
        conn = self.connect()
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(f'CREATE ROLE "{name}" LOGIN PASSWORD %s', (password,))
                cur.execute(f'ALTER DATABASE "{name}" OWNER TO "{name}"')
        finally:
            conn.close()
        return f"postgresql+psycopg2://{name}:{password}@127.0.0.1:{self.port}/{name}"

    def create_role(self, role: str) -> None:
        """A login role of no privilege but its own."""
        self.execute(f'CREATE ROLE "{role}" LOGIN')

    def execute(self, statement: str, *args: object) -> None:
        """One statement as the cluster's superuser, outside a transaction."""
        conn = self.connect()
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(statement, args or None)
        finally:
            conn.close()

    def database_for(self, role: str, prefix: str) -> str:
        """A fresh database owned by ``role``; its URL without a password."""
        name = self.new_database(prefix).rsplit("/", 1)[1]
        self.execute(f'ALTER DATABASE "{name}" OWNER TO "{role}"')
        return f"postgresql+psycopg2://{role}@127.0.0.1:{self.port}/{name}"

    def restart(self) -> None:
        """``pg_ctl restart -m fast``: every session is ended, the server is back within a second."""
        done = self.pg_ctl("-m", "fast", "-w", "-l", str(self.log_path), "restart")
        assert done.returncode == 0, done.stdout + done.stderr

    def stop(self) -> None:
        done = self.pg_ctl("-m", "fast", "-w", "stop")
        assert done.returncode == 0, done.stdout + done.stderr

    def start(self) -> None:
        done = self.pg_ctl("-l", str(self.log_path), "-w", "-t", "60", "start")
        assert done.returncode == 0, done.stdout + done.stderr

    def pg_ctl(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self.prefix, str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), *args],
                              capture_output=True, text=True, timeout=timeout, cwd=self.root, env=server_env())


def server_env() -> dict[str, str]:
    """Our environment without the PG* variables that would point the tools elsewhere."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PG")}


def start_postgres(password_roles: dict[str, str] | None = None) -> Iterator[PostgresServer]:
    """``password_roles``: login roles (name -> password) that must authenticate with their password
    (scram-sha-256); everyone else is trusted on 127.0.0.1, as in every other test cluster."""
    started = time.perf_counter()
    bin_dir = find_pg_bin()
    if bin_dir is None:
        unavailable("PostgreSQL server binaries (initdb, pg_ctl, postgres) not found: install PostgreSQL "
                    "(Debian: apt-get install postgresql) or set ORCHESTRATE_PG_BIN to their folder")
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        unavailable("psycopg2 is not installed (pip install -e '.[test]')")
    run_as = pwd.getpwnam(SERVER_USER_AS_ROOT) if os.geteuid() == 0 else None
    prefix = as_server_user(run_as)
    root = Path(tempfile.mkdtemp(prefix="orchestrate-pg-", dir=cluster_parent()))
    if run_as is not None:
        os.chown(root, run_as.pw_uid, run_as.pw_gid)
    user = run_as.pw_name if run_as else pwd.getpwuid(os.geteuid()).pw_name
    server = PostgresServer(bin_dir=bin_dir, root=root, port=0, user=user, prefix=prefix)
    try:
        init = subprocess.run([*prefix, str(bin_dir / "initdb"), "-D", str(server.data_dir), "--username", user,
                               "--auth", "trust", "--encoding", "UTF8", "--no-locale", "--no-sync"],
                              capture_output=True, text=True, timeout=120, cwd=root, env=server_env())
        if init.returncode != 0:
            raise RuntimeError(f"initdb failed ({init.returncode}):\n{init.stdout}\n{init.stderr}")
        checked = "".join(f"host all {role} 127.0.0.1/32 scram-sha-256\n" for role in (password_roles or {}))
        (server.data_dir / "pg_hba.conf").write_text(
            f"local all all trust\n{checked}host all all 127.0.0.1/32 trust\n")
        with open(server.data_dir / "postgresql.conf", "a") as conf:
            conf.write("\n# orchestrate tests\ninclude = 'tests.conf'\n")
        for _ in range(START_ATTEMPTS):
            server.port = free_port()
            settings = {**SETTINGS, "port": str(server.port), "unix_socket_directories": f"'{root}'"}
            (server.data_dir / "tests.conf").write_text("".join(f"{k} = {v}\n" for k, v in settings.items()))
            if run_as is not None:
                os.chown(server.data_dir / "tests.conf", run_as.pw_uid, run_as.pw_gid)
            start = server.pg_ctl("-l", str(server.log_path), "-w", "-t", "60", "start")
            if start.returncode == 0:
                break
            if "could not bind" not in tail(server.log_path):
                raise RuntimeError(f"pg_ctl start failed:\n{start.stdout}{start.stderr}\n{tail(server.log_path)}")
            server.log_path.unlink(missing_ok=True)  # the port was taken meanwhile: try another
        else:
            raise RuntimeError(f"PostgreSQL found no free port in {START_ATTEMPTS} attempts")
        server.startup_s = time.perf_counter() - started
        for role, password in (password_roles or {}).items():
            conn = server.connect()
            try:
                conn.autocommit = True
                with conn.cursor() as cur:
                    cur.execute(f'CREATE ROLE "{role}" LOGIN CREATEDB PASSWORD %s', (password,))
            finally:
                conn.close()
        yield server
    finally:
        if (server.data_dir / "postmaster.pid").exists():
            server.pg_ctl("-m", "immediate", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL server for the whole session; ``postgres.new_database()`` per test."""
    yield from start_postgres()


@pytest.fixture
def postgres_url(postgres: PostgresServer, request: pytest.FixtureRequest) -> str:
    """The SQLAlchemy URL of a fresh database, named after the test."""
    return postgres.new_database(request.node.name)


class MlflowServerURI(str):
    """The server's ``http://127.0.0.1:PORT``, with what a test may need to look behind it."""

    artifacts_dir: Path
    backend_store_uri: str
    log_path: Path
    startup_s: float


def wait_for_health(uri: str, proc: subprocess.Popen[bytes], timeout: float) -> bool:
    """True once GET /health answers 200; False if the process exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(f"{uri}/health", timeout=2) as resp:
                if resp.status == 200:
                    return True
        time.sleep(0.1)
    raise RuntimeError(f"mlflow server at {uri} did not answer /health within {timeout:.0f} s")


def stop_process_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process group: the CLI, uvicorn and its workers. A graceful stop buys a
    throwaway server nothing (what it stored is committed) and took 2-10 s on a busy machine."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


class MlflowServer:
    """One ``mlflow server`` that a test may kill and start again on the same port and store."""

    def __init__(self, backend: str, root: Path, auth_password: str | None = None) -> None:
        """``auth_password``: run MLflow's own basic-auth app (``mlflow[auth]``), with its user store
        in ``root`` and user ``admin`` having this password."""
        self.backend, self.root, self.auth_password = backend, root, auth_password
        self.artifacts = root / "artifacts"
        self.artifacts.mkdir(parents=True, exist_ok=True)
        self.port: int | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = root / "server.log"
        self.starts = 0

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _env(self) -> dict[str, str]:
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",  # no GenAI job runner process
               "PYTHONUNBUFFERED": "1"}
        if self.auth_password is not None:
            config = self.root / "auth.ini"
            config.write_text(f"[mlflow]\ndefault_permission = READ\ndatabase_uri = sqlite:///{self.root}/auth.db\n"
                              "admin_username = admin\n"
                              "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n")
            env.update(MLFLOW_AUTH_CONFIG_PATH=str(config), MLFLOW_AUTH_ADMIN_PASSWORD=self.auth_password,
                       MLFLOW_FLASK_SERVER_SECRET_KEY="test-csrf-key")  # the auth app refuses to start without one
        return env

    def start(self) -> str:
        """Start it (again, on the port it had), wait until /health answers; its URI."""
        for attempt in range(START_ATTEMPTS):
            port = self.port or free_port()
            self.starts += 1
            self.log_path = self.root / f"server-{self.starts}.log"
            command = [MLFLOW, "server", "--backend-store-uri", self.backend, "--serve-artifacts",
                       "--artifacts-destination", str(self.artifacts), "--host", "127.0.0.1", "--port", str(port),
                       "--workers", "1"]
            if self.auth_password is not None:
                command += ["--app-name", "basic-auth"]
            with open(self.log_path, "wb") as log:
                self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=self.root,
                                             env=self._env(), start_new_session=True)
            try:
                if wait_for_health(f"http://127.0.0.1:{port}", self.proc, timeout=120):
                    self.port = port
                    return self.uri
            except BaseException:
                self.kill()
                raise
            self.kill()
            if self.port is not None or "address already in use" not in self.log_path.read_text(errors="replace").lower():
                raise RuntimeError(f"mlflow server exited before answering /health:\n{tail(self.log_path)}")
        raise RuntimeError(f"mlflow server found no free port in {START_ATTEMPTS} attempts")

    def kill(self) -> None:
        if self.proc is not None:
            stop_process_group(self.proc)
            self.proc = None


def start_mlflow_server(postgres: PostgresServer, root: Path) -> Iterator[MlflowServerURI]:
    started = time.perf_counter()
    server = MlflowServer(postgres.new_database("mlflow"), root)
    value = MlflowServerURI(server.start())
    value.artifacts_dir, value.backend_store_uri, value.log_path = server.artifacts, server.backend, server.log_path
    value.startup_s = time.perf_counter() - started
    try:
        yield value
    finally:
        server.kill()


@pytest.fixture(scope="module")
def mlflow_server(postgres: PostgresServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServerURI]:
    """An ``mlflow server`` per test module (it takes about 8 s to start, and an idle one still
    uses a tenth of a core, which the rest of a session on 2 cores needs): PostgreSQL backend
    store, artifacts proxied over HTTP into a folder the clients are never told about."""
    yield from start_mlflow_server(postgres, tmp_path_factory.mktemp("mlflow-server"))
