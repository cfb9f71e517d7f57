"""``sweep/seams.py``: the Protocols the sweep loop is typed with are what its real parts and the
replay's stand-ins provide. Nothing checks a Protocol at run time; mypy (tests/project/test_types.py)
checks it where an implementation is passed for one, and this compares each one's members and
parameters with each implementation's, wherever they are passed."""

from __future__ import annotations

import inspect

import pytest

from orchestrator.launch import ProcessRun, ProcessRunner
from orchestrator.replay.strategies import NullTracker, ReplayRunner, _ReplayRun
from orchestrator.store.outage import Stopping
from orchestrator.store.tracking import AsyncTracker
from orchestrator.launch import StopFlag
from orchestrator.store.coordination import NoLock, ProposalLock, StudyLock
from orchestrator.sweep.seams import Runner, TrialRun, TrialTracker


def _members(protocol: type) -> dict[str, object]:
    skip = set(vars(object)) | {"_is_protocol", "_is_runtime_protocol", "__protocol_attrs__", "__non_callable_proto_members__",
                                "__abstractmethods__", "__parameters__", "__annotations__", "_abc_impl", "__dict__",
                                "__weakref__", "__module__", "__doc__", "__subclasshook__", "__init__", "__slots__"}
    names = {n: v for n, v in vars(protocol).items() if n not in skip and not n.startswith("_abc")}
    names.update({n: None for n in getattr(protocol, "__annotations__", {})})
    return names


def _params(func: object) -> list[inspect.Parameter]:
    return [p for p in inspect.signature(func).parameters.values() if p.name != "self"]  # type: ignore[arg-type]


@pytest.mark.parametrize(("protocol", "impl"), [
    (Runner, ProcessRunner), (Runner, ReplayRunner),
    (TrialRun, ProcessRun), (TrialRun, _ReplayRun),
    (TrialTracker, AsyncTracker), (TrialTracker, NullTracker),
    (Stopping, StopFlag),
    (ProposalLock, StudyLock), (ProposalLock, NoLock),
], ids=lambda c: c.__name__)
def test_each_implementation_has_every_member_with_its_parameters(protocol: type, impl: type) -> None:
    instance_attrs = {"slots", "down", "signum", "retaken"}  # set in __init__ (or a class attribute)
    for name, member in _members(protocol).items():
        assert hasattr(impl, name) or name in instance_attrs, f"{impl.__name__} lacks {name}"
        if not callable(member) or isinstance(member, property):
            continue
        wanted, got = _params(member), _params(getattr(impl, name))
        got_names = [p.name for p in got]
        positional = [p.name for p in wanted if p.kind is p.POSITIONAL_OR_KEYWORD]
        assert got_names[:len(positional)] == positional, (impl.__name__, name, got_names, positional)
        for p in wanted:
            assert p.name in got_names, (impl.__name__, name, p.name)
            if p.default is not p.empty:  # optional in the Protocol: optional in the implementation
                assert got[got_names.index(p.name)].default is not p.empty, (impl.__name__, name, p.name)
        extra = [p for p in got if p.name not in {w.name for w in wanted} and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        assert all(p.default is not p.empty for p in extra), (impl.__name__, name, extra)


def test_both_locks_count_their_retakings_from_zero() -> None:
    """``retaken`` is an instance attribute of ``StudyLock`` (set in ``__init__``), which the
    member check above cannot see on the class: each lock has it, at 0, and confirms as a no-op
    where nothing is shared (an SQLite study, a replay)."""
    for lock in (StudyLock("sqlite:///study.db", "s"), NoLock()):
        with lock:
            lock.confirm()
        assert lock.retaken == 0
