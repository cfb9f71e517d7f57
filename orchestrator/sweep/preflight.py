"""What a run checks before it starts anything, in one pass that notes every failure, for the run
and for ``--dry-run`` alike (the dry run also asks a tracking server, where the run waits for one;
and it checks what the run checks later, once its probe has the device: ``dry_run``).

- A script spec's file is there; an experiment module is found where a trial finds it, and its
  fixed and swept names are its ``PARAMS`` or harness knobs, read from its source
  (``spec.declared``), without torch; a module that builds ``PARAMS`` in code is left to the probe.
- The study's and the runs' stores can open: an SQLite file's folder exists and is writable (the
  default ``mlruns/`` is created), a database server answers within ``REACH_TIMEOUT_S``
  (``store.study.check_url_opens``), and, for ``--dry-run``, a tracking server answers HTTP
  within it.
- ``experiments.hf``'s ``model:`` can be loaded: a folder with a config, or a hub id the hub
  answers for (or that the cache holds), within the same timeout (``hub``).

The network checks run side by side, so the whole pass takes at most about ``REACH_TIMEOUT_S``.
Each failure is a ``SpecError`` naming the spec's line (or the flag that gave the value); they are
raised together (``errors.raise_all``). Passwords never reach a message (``redact.shown``).
"""

from __future__ import annotations

import functools
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from orchestrator.errors import SpecError, StudyError, each_error, raise_all
from orchestrator.redact import shown
from orchestrator.spec.load import Choice, SweepSpec
from orchestrator.urls import Origins, is_tracking_server

REACH_TIMEOUT_S = 5.0
"""How long a server (a database, a tracking server, the Hugging Face hub) has to answer."""


def preflight(spec: SweepSpec, origins: Origins = Origins(), *, tracking_server: bool = False) -> None:
    """Every check above; all failures at once. ``tracking_server``: also ask an http(s)
    tracking URI's server (``--dry-run``; a run waits for it up to ``search.outage_s``)."""
    found: list[SpecError] = []

    def attempt(check: Callable[[], None]) -> None:
        try:
            check()
        except SpecError as exc:
            found.extend(each_error(exc))

    attempt(lambda: workload(spec))
    remote: list[Callable[[], None]] = [functools.partial(store, spec, origins, f, u, tracking_server)
                                        for f, u in (("storage", spec.storage), ("tracking_uri", spec.tracking_uri))]
    if tracking_server and is_tracking_server(spec.tracking_uri):
        remote.append(lambda: tracking(spec, origins))
    elif is_tracking_server(spec.tracking_uri):
        remote.append(lambda: tracking_host(spec, origins))
    remote += [functools.partial(hub_model, spec, p, m) for p, m in hub_models(spec)]
    with ThreadPoolExecutor(max_workers=len(remote)) as pool:
        for future in [pool.submit(attempt, check) for check in remote]:
            future.result()
    raise_all(found)


def dry_run(spec: SweepSpec, origins: Origins, new_study: bool) -> list[str]:
    """What ``--dry-run`` checks: ``preflight``'s checks, a tracking server asked too, and what a
    run checks only once its probe has named the device and its stores are open, asked here
    without them: the device slots, for the device the plan is printed for (``startup.slots_for``;
    ``origins.devices``: they came from ``--devices``), then, where nothing else failed, a study file
    lost or emptied where an earlier study left its runs (``report.command.lost_study``; not with
    ``--new-study``). Every failure at once, each in the run's words; else the slots' names."""
    from orchestrator.report.command import lost_study
    from orchestrator.search.space import guess_device, make_plan
    from orchestrator.sweep.startup import slots_for

    device = make_plan(spec, spec.device if spec.device != "auto" else guess_device()).device  # "swept": space.device
    found: list[SpecError] = []
    slots: list[str] = []
    for check in (lambda: preflight(spec, origins, tracking_server=True),
                  lambda: slots.extend(s.name for s in slots_for(spec, device, origins.devices is not None))):
        try:
            check()
        except SpecError as exc:
            found.extend(each_error(exc))
    if not found and not new_study and (lost := lost_study(spec)) is not None:
        raise lost
    raise_all(found)
    return slots


def workload(spec: SweepSpec) -> None:
    """The script's file, or the experiment module and the names it declares."""
    from orchestrator.spec.script import check_script_file
    from orchestrator.sweep.checks import unknown_params

    if spec.script is not None:
        check_script_file(spec)
        return
    from orchestrator.spec.declared import lacks_build, module_params
    from orchestrator.spec.locate import locate, trial_path

    try:  # as the trial finds it: the working directory first on the path (python -m)
        origin = locate(str(spec.experiment), trial_path()).origin
    except LookupError as exc:
        raise spec.error(("experiment",), str(exc)) from None
    accepted = module_params(origin)
    if accepted is not None:
        raise_all(unknown_params(spec, accepted))
    if lacks_build(origin):  # the probe's words, before it
        raise spec.error(("experiment",), f"{spec.experiment} does not follow the experiment contract: it has no "
                                          "build(params, device) function (see docs/experiment.md)")


def with_declared_names(exc: SpecError, path: str) -> None:
    """``exc`` (a spec that breaks rules) raised again with the misspelled parameter names that
    its experiment's ``PARAMS`` shows (``workload``'s check, read from the raw YAML), so that the
    first read says them too; ``exc`` alone where they cannot be read."""
    from pathlib import Path

    from orchestrator.spec.declared import module_params
    from orchestrator.spec.locate import locate, trial_path
    from orchestrator.spec.model import nearest_line
    from orchestrator.spec.yamlsource import dotted, load_yaml
    from orchestrator.sweep.checks import unknown_names

    found = each_error(exc)
    try:
        data, lines, _ = load_yaml(Path(path))
        experiment = data.get("experiment") if isinstance(data, dict) and "script" not in data else None
        accepted = module_params(locate(experiment, trial_path()).origin) if isinstance(experiment, str) else None
    except (SpecError, LookupError):
        accepted = None
    if accepted is not None:
        names = [(section, name) for section in ("fixed", "space") if isinstance(data.get(section), dict)
                 for name in data[section]]
        found += unknown_names(experiment, names, accepted, lambda p, rule: SpecError(  # type: ignore[arg-type]  # accepted: experiment named a module
            rule, file=path, line=nearest_line(lines, p), field=dotted(p)))
    raise_all(found)


def _error(spec: SweepSpec, origins: Origins, field: str, rule: str) -> SpecError:
    """A store's failure, on the flag or variable that gave its URL, else on the spec's line."""
    origin = getattr(origins, field)  # the field named beside the flag, as the spec's own rules name it
    return SpecError(rule, file=origin, field=field) if origin else spec.error((field,), rule)


def store(spec: SweepSpec, origins: Origins, field: str, url: str, dry: bool = False) -> None:
    """The store at ``url`` can open (a server: within ``REACH_TIMEOUT_S``). A server that does
    not answer is waited for by a run (``search.outage_s``, then exit 75, as mid-sweep: a requeue
    loop on 75 gets through a failover); ``dry``: ``--dry-run`` says so."""
    from orchestrator.store.study import StoreUnreachable, check_url_opens

    try:
        check_url_opens(url, field, timeout_s=REACH_TIMEOUT_S)
    except StoreUnreachable as exc:
        if not dry:
            return
        raise _error(spec, origins, field, f"the server does not answer within {REACH_TIMEOUT_S:g} s ({exc.why}); a run "
                     f"would wait for it up to search.outage_s={spec.search.outage_s:g} s, then stop (exit 75), "
                     f"got {shown(url)!r}") from None
    except StudyError as exc:
        if getattr(origins, field) is None and (field,) not in spec.lines:  # the default store, which no
            raise SpecError(str(exc), file="orchestrate") from None  # line names: its own line, with the others
        raise _error(spec, origins, field, f"{str(exc).split(': ', 1)[-1]}, got {shown(url)!r}") from None


def tracking(spec: SweepSpec, origins: Origins) -> None:
    """An http(s) tracking server answers (any HTTP answer: it is there), and does not refuse
    this run (``asked``)."""
    import urllib.error
    import urllib.parse
    import urllib.request

    parts = urllib.parse.urlsplit(spec.tracking_uri)
    bare = parts._replace(netloc=parts.hostname + (f":{parts.port}" if parts.port else "") if parts.hostname else "",
                          query="", fragment="")
    base = urllib.parse.urlunsplit(bare).rstrip("/")
    try:
        with urllib.request.urlopen(base + "/health", timeout=REACH_TIMEOUT_S):
            pass
    except urllib.error.HTTPError:
        pass
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise _error(spec, origins, "tracking_uri", f"the tracking server does not answer within {REACH_TIMEOUT_S:g} "
                     f"s ({getattr(exc, 'reason', exc)}); a run would wait for it up to search.outage_s="
                     f"{spec.search.outage_s:g} s, then stop (exit 75), got {shown(spec.tracking_uri)!r}") from None
    asked(spec, origins, base, parts)


def tracking_host(spec: SweepSpec, origins: Origins) -> None:
    """A run's tracking server's name resolves: a name that does not is a mistake, refused at once
    (the PostgreSQL tour's ``http://nosuchhost.invalid:5000`` was waited for as an outage, for
    search.outage_s, then exit 75). A server that does not answer is still waited for."""
    import socket
    import urllib.parse
    import urllib.request

    host = urllib.parse.urlsplit(spec.tracking_uri).hostname
    proxied = urllib.request.getproxies().get(urllib.parse.urlsplit(spec.tracking_uri).scheme)
    if not host or (proxied and not urllib.request.proxy_bypass(host)):  # the proxy resolves it (a review)
        return
    try:
        socket.getaddrinfo(host, None)
    except socket.gaierror as exc:
        if exc.errno in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)):
            raise _error(spec, origins, "tracking_uri", f"the tracking server's host {host} is not a name this "
                         f"machine knows ({exc.strerror}): fix the URI, got {shown(spec.tracking_uri)!r}") from None


def asked(spec: SweepSpec, origins: Origins, base: str, parts: urllib.parse.SplitResult) -> None:
    """The server answers a question as the run would ask it (its Host check and its
    authentication, which ``/health`` skips): a refusal is the run's own line, with its remedy."""
    import base64
    import os
    import urllib.error
    import urllib.request

    from orchestrator.urls import server_remedy

    request = urllib.request.Request(base + "/api/2.0/mlflow/experiments/search?max_results=1")
    user = parts.username or os.environ.get("MLFLOW_TRACKING_USERNAME")
    password = parts.password or os.environ.get("MLFLOW_TRACKING_PASSWORD")
    if os.environ.get("MLFLOW_TRACKING_TOKEN"):
        request.add_header("Authorization", f"Bearer {os.environ['MLFLOW_TRACKING_TOKEN']}")
    elif user and password:
        request.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=REACH_TIMEOUT_S):
            return
    except urllib.error.HTTPError as exc:
        if exc.code not in (401, 403, 404):
            return  # another answer: the run's own calls will say what it means
        said = f"HTTP {exc.code} {exc.reason}" + (
            "" if exc.code == 404 else f": {exc.read(500).decode(errors='replace').strip()}")
    except (urllib.error.URLError, OSError, ValueError):
        return  # it answered /health: what else goes wrong, the run waits out
    raise _error(spec, origins, "tracking_uri", f"the tracking server refuses this run ({said.splitlines()[0]})"
                 f"{server_remedy(spec.tracking_uri, said)}, got {shown(spec.tracking_uri)!r}")


def hub_models(spec: SweepSpec) -> list[tuple[tuple, str]]:
    """(field path, value) of each model a ``hub.HUB_EXPERIMENTS`` module is given."""
    from orchestrator.sweep.hub import HUB_EXPERIMENTS

    name = HUB_EXPERIMENTS.get(str(spec.experiment)) if spec.script is None else None
    if name is None or "model_type" in spec.fixed or "model_type" in spec.space:
        return []  # both given: the module's own check says to give one
    if isinstance(spec.fixed.get(name), str):
        return [(("fixed", name), spec.fixed[name])]
    dim = spec.space.get(name)
    if isinstance(dim, Choice):
        return [(("space", name, i), v) for i, v in enumerate(dim.values) if isinstance(v, str)]
    return []


def hub_model(spec: SweepSpec, path: tuple, model: str) -> None:
    from orchestrator.sweep.hub import problem

    why = problem(model, REACH_TIMEOUT_S)
    if why is not None:
        raise spec.error(path, why)
