"""Fuzzing the spec loader (issue #13, item 6): the repository's own specs, mutated by hypothesis,
go through every path that loads a spec; each ends in a valid spec or in one stderr line
``SPEC:LINE: ...`` with exit code 2, within a time and memory limit, writing nothing.

The strategy and the checker live in ``bench/fuzz_specs.py`` (which runs many more examples);
here 1,000 fixed examples (derandomized, no example database) each run in-process through the four
entry points as the CLI calls them, and a few of them through the installed ``orchestrate``
command, every path.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from conftest import ROOT, orchestrate

_spec = importlib.util.spec_from_file_location("fuzz_specs", ROOT / "bench" / "fuzz_specs.py")
fuzz_specs = importlib.util.module_from_spec(_spec)
sys.modules["fuzz_specs"] = fuzz_specs
_spec.loader.exec_module(fuzz_specs)

EXAMPLES = 1_000
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def fuzzed() -> tuple[fuzz_specs.Tally, float]:
    """The 1,000 examples, each through the four paths in this process; failures are collected,
    not raised, so that the tally says how many there were."""
    tally = fuzz_specs.Tally()
    workdir = fuzz_specs.scratch_dir()

    @FUZZ
    @given(fuzz_specs.mutated_spec())
    def one(data: bytes) -> None:
        tally.add(data, fuzz_specs.check_paths(data, workdir))

    started = time.perf_counter()
    try:
        one()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return tally, time.perf_counter() - started


def _report(data: bytes, outcomes: list[fuzz_specs.Outcome]) -> str:
    return "\n".join(f"{o.path}: {o.detail}" for o in outcomes if o.kind == "failure") + f"\nthe document: {data!r}"


def test_every_loader_path_ends_in_a_spec_or_one_line_with_file_and_line(
        fuzzed: tuple[fuzz_specs.Tally, float]) -> None:
    tally, elapsed = fuzzed
    print(f"\n{tally.examples} examples in {elapsed:.1f} s: {tally.valid} valid specs, "
          f"{tally.errors} one-line errors, {len(tally.failures)} failures; {tally.by_path}")
    assert not tally.failures, f"{len(tally.failures)} failing documents; the first:\n" + _report(*tally.failures[0])
    assert tally.examples >= EXAMPLES
    # The mutations reach both sides of the line, on every path: neither side is vacuous.
    assert tally.valid >= EXAMPLES // 10 and tally.errors >= EXAMPLES // 2, (tally.valid, tally.errors)
    assert set(tally.by_path) == set(fuzz_specs.PATHS)
    assert all(sum(kinds.values()) == tally.examples for kinds in tally.by_path.values())


def test_the_installed_command_gives_the_same_answer_as_the_in_process_paths(
        fuzzed: tuple[fuzz_specs.Tally, float], tmp_path: Path) -> None:
    """A few of the fuzzed documents, valid and not, through ``orchestrate`` as a user runs it:
    the same line, the same exit code, no traceback, nothing on disk. A valid spec is not run
    (that would start a sweep): its dry run prints the plan, and report / best find no study."""
    tally, _ = fuzzed
    cases = tally.samples.get("valid", [])[:2] + tally.samples.get("error", [])[:4]
    assert len(cases) == 6
    spec = tmp_path / "spec.yaml"
    for data in cases:
        expected = dict(zip(fuzz_specs.PATHS, fuzz_specs.check_paths(data, tmp_path)))
        valid = all(o.kind == "valid" for o in expected.values())
        spec.write_bytes(data)
        for path in fuzz_specs.PATHS:
            if valid and path == "run":
                continue
            args = {"dry-run": [str(spec), "--dry-run"], "run": [str(spec)], "report": ["report", str(spec)],
                    "best": ["best", str(spec)]}[path]
            proc = orchestrate(args, tmp_path, {"PYTHONDONTWRITEBYTECODE": "1"}, timeout=60)
            assert "Traceback" not in proc.stderr, proc.stderr
            assert sorted(os.listdir(tmp_path)) == ["spec.yaml"], (path, data)
            if expected[path].kind == "error":  # the same lines as in-process (its outcome keeps the first)
                assert (proc.returncode, proc.stderr.splitlines()[:1], proc.stdout) == (2, [expected[path].detail], ""), data
            elif path in ("report", "best"):  # a valid spec: past the loader, there is no study to read
                assert proc.returncode == 2 and proc.stderr.startswith("orchestrate: no study "), proc.stderr
                assert proc.stderr.count("\n") == 1
            else:
                assert proc.returncode == 0 and proc.stdout.startswith(f"Plan for {spec}"), proc.stderr
