"""What a run checks before it starts, for the run and --dry-run alike (sweep/preflight.py, hub.py):
misspelled names read from the experiment's source without torch, store folders and servers, a
Hugging Face model's config, every failure at once, each on its line, no password shown."""

from __future__ import annotations

import http.server
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from conftest import orchestrate, write_spec
from servers import free_port
from orchestrator.errors import SpecError, each_error
from orchestrator.spec.load import load_spec
from orchestrator.urls import Origins
from orchestrator.sweep import preflight as pf


def errors(spec_path: Path, origins: Origins = Origins(), **kwargs: Any) -> list[str]:
    spec = load_spec(spec_path)
    try:
        pf.preflight(spec, origins, **kwargs)
    except SpecError as exc:
        return [str(e).replace(f"{spec_path}:", "") for e in each_error(exc)]
    return []


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


MISSPELLED = """
    name: typos
    experiment: experiments.mlp
    fixed:
      hiden_size: 32
    space:
      batch_size: [8, 16]
      num_layer: [1, 2]
    storage: sqlite:///nowhere/optuna.db
    tracking_uri: sqlite:///elsewhere/mlflow.db
    """


def test_dry_run_says_every_failure_at_once_without_torch(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, MISSPELLED)
    code = ("import sys; from orchestrator import cli; rc = cli.main([sys.argv[1], '--dry-run']); "
            "print(rc, 'torch' in sys.modules, 'mlflow' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code, str(spec)], cwd=tmp_path, capture_output=True, text=True)
    assert proc.stdout.strip() == "2 False False", proc.stdout + proc.stderr
    lines = proc.stderr.splitlines()
    assert [line.split(": ", 2)[:2] for line in lines] == [
        [f"{spec}:4", "fixed.hiden_size"], [f"{spec}:7", "space.num_layer"],
        [f"{spec}:8", "storage"], [f"{spec}:9", "tracking_uri"]], proc.stderr
    assert "did you mean 'hidden_size'?" in lines[0] and "did you mean 'num_layers'?" in lines[1]
    assert f"folder {tmp_path}/nowhere does not exist" in lines[2] and f"folder {tmp_path}/elsewhere" in lines[3]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]


def test_the_run_refuses_them_before_the_probe(tmp_path: Path) -> None:
    """The same lines from the real run, before torch is imported anywhere (no probe, no fork
    server: nothing is written)."""
    spec = write_spec(tmp_path, MISSPELLED)
    proc = orchestrate([str(spec)], tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 4, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]


def test_dry_run_refuses_device_slots_as_the_run_does(tmp_path: Path) -> None:
    """The tour's ``--devices cuda:0 --dry-run`` on a CPU spec: a plan and exit 0, where the run
    refuses. Now the same line from both (the slots resolved for the device the plan is for)."""
    spec = write_spec(tmp_path, "name: d\nexperiment: experiments.mlp\ndevice: cpu\nfixed: {hidden_size: 8}\n"
                      "space:\n  batch_size: [8]\ntrial: {warmup_steps: 1, measure_steps: 1, min_measure_s: 0.01}\n")
    said = "--devices: devices: devices lists GPUs but the trials run on cpu"
    run = orchestrate([str(spec), "--devices", "cuda:0"], tmp_path)
    assert run.returncode == 2 and run.stderr.strip() == said, run.stderr
    code = ("import sys; from orchestrator import cli; rc = cli.main(sys.argv[1:]); "
            "print(rc, 'torch' in sys.modules, 'mlflow' in sys.modules)")
    for flags, line in ((["--devices", "cuda:0"], said),
                        (["--devices", "cpu:0,cpu:0-1"], "--devices: devices: cpu:0-1 shares cores with another slot")):
        proc = subprocess.run([sys.executable, "-c", code, str(spec), *flags, "--dry-run"], cwd=tmp_path,
                              capture_output=True, text=True)
        assert proc.stdout.strip() == "2 False False" and proc.stderr.startswith(line), proc.stdout + proc.stderr
        assert len(proc.stderr.splitlines()) == 1
    assert errors(spec) == []  # the run's own preflight leaves them to the probe's device


def test_a_module_that_builds_params_in_code_is_left_to_the_probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "built.py").write_text("PARAMS = dict(width=8)\ndef build(params, device): ...\n")
    spec = write_spec(tmp_path, "name: b\nexperiment: built\nfixed:\n  wdth: 3\n")
    assert errors(spec) == []  # not read from the source: the probe imports it and says so


def test_the_default_folder_is_made_and_a_flag_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    spec = write_spec(tmp_path, "name: d\nexperiment: experiments.mlp\n")
    assert errors(spec) == []  # mlruns/ does not exist yet: the run creates it
    loaded = load_spec(spec, {"--storage": (("storage",), "sqlite:///no/such/x.db")})
    with pytest.raises(SpecError) as caught:
        pf.preflight(loaded, Origins(storage="--storage"))
    assert str(caught.value) == (f"--storage: storage: folder {tmp_path}/no/such does not exist; create it or fix "
                                 "the URL, got 'sqlite:///no/such/x.db'")


def test_a_damaged_default_store_is_its_own_line_beside_the_spec_s_errors(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """No line of the spec names the default stores: their damage is said as the store's own
    line (not on line 1, field ``storage``), and every other error is still said with it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mlruns").mkdir()
    for name in ("optuna.db", "mlflow.db"):
        (tmp_path / "mlruns" / name).write_text("hello\n")
    spec = write_spec(tmp_path, "name: d\nexperiment: experiments.mlp\nspace:\n  bogus_knob: [1, 2]\n")
    found = errors(spec)
    assert found[0].startswith("orchestrate: storage sqlite:///mlruns/optuna.db: mlruns/optuna.db is not an SQLite")
    assert found[1].startswith("orchestrate: tracking_uri sqlite:///mlruns/mlflow.db: mlruns/mlflow.db is not an")
    assert len(found) == 3 and found[2].startswith("4: space.bogus_knob: unknown parameter"), found


def test_a_database_server_answers_or_is_one_line_without_its_password(tmp_path: Path, postgres: Any) -> None:
    good = postgres.new_database("preflight")
    spec = write_spec(tmp_path, f"name: p\nexperiment: experiments.mlp\nstorage: {good}\n")
    assert errors(spec) == []
    # a database that does not exist: one line, exit 2, without its password (waiting cannot mend it)
    bad = f"postgresql+psycopg2://{postgres.user}:s3cret-pw@127.0.0.1:{postgres.port}/nosuchdb"
    spec = write_spec(tmp_path, f"name: p\nexperiment: experiments.mlp\nstorage: '{bad}'\n")
    (line,) = errors(spec)
    assert line.startswith("3: storage: cannot connect (") and "nosuchdb" in line and "s3cret-pw" not in line
    assert line.endswith(f"got '{bad.replace('s3cret-pw', '***')}'")
    assert "; create it (createdb, or CREATE DATABASE as its owner) or name one that exists" in line  # a tour
    # a server that does not answer: a run waits for it (search.outage_s, then 75); --dry-run says so
    down = f"postgresql+psycopg2://sweeper:s3cret-pw@127.0.0.1:{closed_port()}/optuna"
    spec = write_spec(tmp_path, f"name: p\nexperiment: experiments.mlp\nstorage: '{down}'\n")
    assert errors(spec) == []
    (line,) = errors(spec, tracking_server=True)
    assert line.startswith("3: storage: the server does not answer within 5 s (") and "s3cret-pw" not in line
    assert "a run would wait for it up to search.outage_s=300 s, then stop (exit 75)" in line


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield s.getsockname()[1]


def test_a_tracking_server_that_does_not_answer_is_said_within_the_timeout(
        tmp_path: Path, silent_server: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pf, "REACH_TIMEOUT_S", 1.0)
    spec = write_spec(tmp_path, f"name: t\nexperiment: experiments.mlp\ntracking_uri: http://u:pw@127.0.0.1:{silent_server}\n")
    started = time.monotonic()
    (line,) = errors(spec, tracking_server=True)
    assert time.monotonic() - started < 4
    assert line.startswith("3: tracking_uri: the tracking server does not answer within 1 s")
    assert "search.outage_s=300 s" in line and ":pw@" not in line
    assert errors(spec) == []  # the run itself waits for a tracking server (search.outage_s)
    spec = write_spec(tmp_path, f"name: t\nexperiment: experiments.mlp\ntracking_uri: http://127.0.0.1:{closed_port()}\n")
    (line,) = errors(spec, tracking_server=True)
    assert "Connection refused" in line


@pytest.mark.slow
def test_a_real_tracking_server_answers(tmp_path: Path, mlflow_server: str) -> None:
    spec = write_spec(tmp_path, f"name: t\nexperiment: experiments.mlp\ntracking_uri: {mlflow_server}\n")
    assert errors(spec, tracking_server=True) == []


class Hub(http.server.BaseHTTPRequestHandler):
    """A stand-in for the Hugging Face hub: ``tiny-org/tiny`` exists, anything else is a 401 (the
    hub's answer for a repository that is missing or private)."""

    def do_HEAD(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200 if self.path == "/tiny-org/tiny/resolve/main/config.json" else 401)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def hub() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def hf_spec(tmp_path: Path, model: str) -> Path:
    return write_spec(tmp_path, f"name: h\nexperiment: experiments.hf\nfixed:\n  model: '{model}'\n"
                                "space:\n  batch_size: [1, 2]\n")


def test_a_hub_model_is_asked_for_once(tmp_path: Path, hub: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", hub)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    assert errors(hf_spec(tmp_path, "tiny-org/tiny")) == []
    (line,) = errors(hf_spec(tmp_path, "tiny-org/missing"))
    assert line.startswith(f"4: fixed.model: the hub ({hub}) has no model tiny-org/missing, or it is gated or private "
                           "(HTTP 401)")


def test_an_endpoint_without_its_scheme_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The HF tour's ``HF_ENDPOINT=hf-mirror.com``: a ``ValueError`` traceback, exit 1."""
    monkeypatch.setenv("HF_ENDPOINT", "hf-mirror.com")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    (line,) = errors(hf_spec(tmp_path, "gpt2"))
    assert line == ("4: fixed.model: HF_ENDPOINT (hf-mirror.com) is not an http(s) URL, so the hub cannot be asked "
                    "for gpt2; set it as https://hf-mirror.com, or unset it for huggingface.co")


def test_an_unreachable_hub_is_fine_for_a_cached_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    (line,) = errors(hf_spec(tmp_path, "gpt2"))
    assert "cannot be reached within 5 s" in line and "the cache has no config of gpt2" in line
    snapshot = tmp_path / "cache" / "models--gpt2" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    assert errors(hf_spec(tmp_path, "gpt2")) == []
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert errors(hf_spec(tmp_path, "gpt2")) == []
    (line,) = errors(hf_spec(tmp_path, "gpt3"))
    assert "HF_HUB_OFFLINE is set and the cache" in line and "has no config of gpt3" in line


def test_a_local_model_folder(tmp_path: Path) -> None:
    folder = tmp_path / "my-gpt2"
    folder.mkdir()
    (line,) = errors(hf_spec(tmp_path, str(folder)))
    assert line == f"4: fixed.model: folder {folder} has no config.json (a model folder as save_pretrained writes it)"
    (folder / "config.json").write_text("{}")
    assert errors(hf_spec(tmp_path, str(folder))) == []
    (line,) = errors(hf_spec(tmp_path, str(tmp_path / "nope")))
    assert f"no folder {tmp_path}/nope" in line


def test_the_run_refuses_an_unreachable_hub_id_in_seconds(tmp_path: Path) -> None:
    """Where a trial would wait out huggingface_hub's retries (about 40 s offline) after importing
    torch and transformers, the run says so at once and starts nothing."""
    spec = hf_spec(tmp_path, "no-such-org/no-such-model")
    started = time.monotonic()
    proc = orchestrate([str(spec)], tmp_path, env={"HF_ENDPOINT": f"http://127.0.0.1:{closed_port()}",
                                                   "HF_HUB_CACHE": str(tmp_path / "cache")})
    assert time.monotonic() - started < 15
    assert proc.returncode == 2 and proc.stderr.startswith(f"{spec}:4: fixed.model: the hub"), proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]


def test_a_swept_model_names_each_value_s_line(tmp_path: Path, hub: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", hub)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    spec = write_spec(tmp_path, "name: h\nexperiment: experiments.hf\nspace:\n  model:\n    - tiny-org/tiny\n"
                                "    - tiny-org/gone\n  batch_size: [1]\n")
    (line,) = errors(spec)
    assert line.startswith("6: space.model[1]: the hub")


def test_a_broken_spec_s_misspelled_names_come_in_the_same_read(tmp_path: Path) -> None:
    """A rule broken and a name misspelled: one run of the command says both (the names read from
    the raw YAML and the module's source), the run as the dry run."""
    spec = write_spec(tmp_path, "name: t\nexperiment: experiments.mlp\nfixed:\n  hiden_size: 8\n"
                                "space:\n  batch_size: [8, 0]\n")
    for args in ([str(spec), "--dry-run"], [str(spec)]):
        proc = orchestrate(args, tmp_path)
        assert proc.returncode == 2
        lines = proc.stderr.splitlines()
        assert [ln.split(": ", 2)[:2] for ln in lines] == [[f"{spec}:4", "fixed.hiden_size"],
                                                          [f"{spec}:6", "space.batch_size[1]"]], proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]


def test_an_unknown_parameter_of_a_module_without_parameters_says_so_in_words() -> None:
    """An experiment whose ``PARAMS`` is empty: the line says it takes none of its own (it once
    read "it takes  and the harness knobs")."""
    from orchestrator.sweep.checks import unknown_names

    def error(path: tuple[str, str], rule: str) -> SpecError:
        return SpecError(f"{'.'.join(path)}: {rule}")

    (none,) = unknown_names("bare", [("fixed", "model")], [], error)
    assert str(none).endswith("fixed.model: unknown parameter for bare; it takes no parameter of its own, only the harness knobs")
    (some,) = unknown_names("mlp", [("fixed", "widht")], ["width", "depth"], error)
    assert str(some).endswith("did you mean 'width'? it takes depth, width and the harness knobs")


def test_a_dry_run_says_it_did_not_check_an_undeclared_module_s_parameters(tmp_path: Path) -> None:
    """The HF tour: ``n_layers: 1`` (gpt2's is ``n_layer``) passed ``--dry-run``, whose help said it
    checks the experiment's parameter names; the run refused it. Now the plan says what it left."""
    spec = write_spec(tmp_path, "name: h\nexperiment: experiments.hf\nfixed:\n  model_type: gpt2\n  n_layers: 1\n"
                                "space:\n  batch_size: [1, 2]\n")
    proc = orchestrate([str(spec), "--dry-run"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert ("its parameters (names and values) were not checked: it declares no PARAMS dict literal the dry run "
            "can read; a run checks them as it starts, in the probe and the smoke step, before anything is created"
            ) in proc.stdout
    proc = orchestrate([str(write_spec(tmp_path, "name: b\nexperiment: experiments.bert\nspace:\n  batch_size: [1]\n")),
                        "--dry-run"], tmp_path)
    assert proc.returncode == 0 and "were not checked" not in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("code, body, remedy", [
    (403, "Invalid Host header - possible DNS rebinding attack detected",
     "the server refuses the name 127.0.0.1:{port} (MLflow's --allowed-hosts): start it with --allowed-hosts naming it"),
    (401, "You are not authenticated. Please see https://www.mlflow.org/docs/latest/auth/index.html",
     "set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN) to an account of the server"),
    (404, "<!doctype html><html>...",  # the PostgreSQL tour's http://host:5000/mlflow: passed, then the run
     "no MLflow API at that path (HTTP 404 Not Found): name the server itself"),  # said a page's HTML, cut off
])
def test_a_tracking_server_that_refuses_the_run_is_said_by_the_dry_run(tmp_path: Path, code: int, body: str,
                                                                       remedy: str) -> None:
    """A scale-out tour: ``--dry-run`` asked only ``/health`` (which MLflow exempts from its Host
    check and its authentication) and passed; the run then stopped on a 403 or a 401. A contract
    test: a server that answers as MLflow 3.17's did in the tour (its words, its codes)."""
    import http.server
    import threading

    class Refusing(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            status, text = (200, "OK") if self.path == "/health" else (code, body)
            self.send_response(status)
            self.end_headers()
            self.wfile.write(text.encode())

        def log_message(self, *_: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        spec = write_spec(tmp_path, f"name: t\nexperiment: experiments.mlp\ntracking_uri: http://127.0.0.1:{port}\n")
        (line,) = errors(spec, tracking_server=True)
        assert line.startswith(f"3: tracking_uri: the tracking server refuses this run (HTTP {code} "), line
        assert remedy.format(port=port) in line and line.endswith(f"got 'http://127.0.0.1:{port}'"), line
        assert errors(spec) == []  # a run asks when it opens the store, and says the same remedy then
    finally:
        server.shutdown()


def test_a_tracking_host_that_is_no_name_is_refused_and_a_silent_one_left_to_wait_for(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The PostgreSQL tour: ``--tracking-uri http://nosuchhost.invalid:5000`` was waited for as an
    outage (search.outage_s, then exit 75): a name this machine does not know is refused at once. A
    host that resolves but does not answer is still the run's to wait for."""
    monkeypatch.chdir(tmp_path)
    spec = write_spec(tmp_path, "name: d\nexperiment: experiments.mlp\n")
    for uri, refused in (("http://nosuchhost.invalid:5000", True), (f"http://127.0.0.1:{free_port()}", False)):
        loaded = load_spec(spec, {"--tracking-uri": (("tracking_uri",), uri)})
        if not refused:
            pf.preflight(loaded, Origins(tracking_uri="--tracking-uri"))  # a run waits for it
            continue
        with pytest.raises(SpecError) as caught:
            pf.preflight(loaded, Origins(tracking_uri="--tracking-uri"))
        assert str(caught.value).startswith("--tracking-uri: tracking_uri: the tracking server's host nosuchhost.invalid is not a "
                                            "name this machine knows ("), str(caught.value)


def test_mlruns_linked_to_a_volume_not_mounted_is_one_line_per_store(tmp_path: Path) -> None:
    """The fault tour: ``mlruns`` a link to a scratch volume not mounted: the dry run passed, and the
    run ended in a FileExistsError traceback at ``Path("mlruns").mkdir``."""
    write_spec(tmp_path, "name: d\nexperiment: experiments.mlp\nspace: {hidden_size: [8]}\n")
    (tmp_path / "mlruns").symlink_to(tmp_path / "unmounted" / "mlruns")
    for flags in (["--dry-run"], []):
        proc = orchestrate(["spec.yaml", *flags], tmp_path)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        lines = proc.stderr.splitlines()
        assert len(lines) == 2 and all(f"mlruns is a link to {tmp_path}/unmounted/mlruns, which does not exist (a volume "
                                       "not mounted?); mount it, or remove the link" in ln for ln in lines), lines
    assert not (tmp_path / "unmounted").exists()
