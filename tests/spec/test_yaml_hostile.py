"""Hostile or odd YAML (issue #13, item 4), from the installed command: every case ends in exit
code 2 and one stderr line naming the file (and the line where there is one) and the rule, in
bounded time and memory, with nothing written to disk. Each runs ``orchestrate CASE --dry-run``
in a subprocess with a timeout and a 2 GiB address-space limit: a hang is a timeout, an
unbounded expansion a MemoryError traceback (exit 1), and either fails the test."""

from __future__ import annotations

import importlib.util
import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from conftest import ORCHESTRATE, ROOT
from orchestrator.spec import yamlsource
from orchestrator.errors import SpecError

MLP_PARAMS = ("in_features", "hidden_size", "num_layers", "num_classes", "lr", "seed")
"""experiments.mlp's own names: a misspelled one would be a second error."""
HEAD = "name: t\nexperiment: experiments.mlp\n"  # lines 1-2
LIMIT_S = 30
"""Each case answers in well under a second on an idle machine; 30 s allows for a shared one."""


def _bomb(levels: int = 9, width: int = 9) -> str:
    """"Billion laughs": 9 levels of 9 aliases expand to 9**9 (387 million) values."""
    out = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    out += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    return HEAD + "\n".join(out) + "\n"


def _write(text: str | bytes) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return make


def _huge(path: Path) -> None:
    """50 MB: a valid head, then a comment line (sparse after the head: no 50 MB of disk)."""
    with open(path, "wb") as f:
        f.write(HEAD.encode() + b"# ")
        f.truncate(50 * 2**20)


@dataclass(frozen=True)
class Case:
    id: str
    make: Callable[[Path], None]
    """Creates the spec at the given path."""
    line: int | tuple[int, ...] | None
    """The line the message names (or the lines it may name); None: a rule about the whole file."""
    expect: tuple[str, ...]
    """Substrings of the message: the rule."""

    def __str__(self) -> str:
        return self.id


CASES = [
    Case("self-referencing-alias", _write(HEAD + "space:\n  batch_size: &x [8, *x]\n"), 4,
         ("the alias *x is inside the value it names (&x on line 4)", "a spec cannot contain itself")),
    Case("self-referencing-mapping", _write(HEAD + "fixed: &m\n  a: 1\n  b: *m\n"), 5,
         ("the alias *m is inside the value it names (&m on line 3)",)),
    Case("self-referencing-deep", _write(HEAD + "space: &s\n  x:\n    - [1, {y: [*s]}]\n"), 5,
         ("the alias *s is inside the value it names (&s on line 3)",)),
    Case("alias-bomb", _write(_bomb()), 7,
         ("a4[0]: ", "expanding the alias *a3 here makes more than 10,000 values", "a spec holds a few hundred")),
    Case("alias-bomb-as-key", _write(_bomb(4) + "fixed:\n  ? *a3\n  : 1\n"), 8,
         ("fixed: ", "keys must be names, got a list")),
    Case("alias-chain-deep", _write(HEAD + "a0: &a0 [1]\n" + "".join(f"a{i}: &a{i} [*a{i - 1}]\n" for i in range(1, 60))),
         22, ("a19[0]: ", "expanding the alias *a18 here nests more than 20 levels deep")),
    Case("nesting-10000-flow", _write(HEAD + "fixed: " + "[" * 10_000 + "]" * 10_000 + "\n"), 3,
         ("nested more than 20 levels deep", "a spec needs at most 5")),
    Case("nesting-300-block", _write(HEAD + "fixed:\n" + "".join("  " * (i + 1) + f"k{i}:\n" for i in range(300))), 23,
         ("nested more than 20 levels deep",)),
    Case("many-values", _write(HEAD + "space:\n  lr: [" + ", ".join(map(str, range(20_000))) + "]\n"), 4,
         ("space.lr[9995]: ", "the document has more than 10,000 values by this point", "a few hundred")),
    Case("file-50-mb", _huge, None, ("the file is 50.0 MiB; a spec is at most 256 KiB", "is it the right file?")),
    Case("not-utf8", _write(HEAD.encode() + "fixed:\n  note: café\n".encode("latin-1")), 4,
         ("not a text file: byte 54 (0xe9) is not UTF-8", "save the spec as UTF-8")),
    Case("utf16", _write(HEAD.encode("utf-16")), 1, ("not a text file", "is not UTF-8")),
    Case("nul-character", _write(HEAD + "fixed:\n  a: b\x00c\n"), 4,
         ("not valid YAML: character U+0000 is not allowed in YAML",)),
    Case("escape-sequence", _write(HEAD + "fixed:\n  a: \x1b[31mred\n"), 4,
         ("not valid YAML: character U+001B is not allowed in YAML",)),
    Case("tab-indent", _write(HEAD + "fixed:\n\tbatch_size: 8\n"), 4,
         ("not valid YAML: a tab character; indent with spaces",)),
    Case("number-of-5000-digits", _write(HEAD + "fixed:\n  a: " + "1" * 5000 + "\n"), 4,
         ("not valid YAML: a number of 5,000 digits is too long in '111",)),
    Case("directory", lambda p: p.mkdir(), None, ("is a folder, not a spec file",)),
    Case("fifo", lambda p: os.mkfifo(p), None, ("is a FIFO (named pipe), not a spec file",)),
    Case("dev-zero", lambda p: p.symlink_to("/dev/zero"), None, ("is a character device, not a spec file",)),
    # Valid YAML whose spec is out of all proportion: refused as quickly, in as little memory.
    Case("line-break-in-a-value", _write('name: "my\\nsweep"\nexperiment: experiments.mlp\n'), 1,
         ("the study name must be letters, digits", "got 'my")),
    Case("name-of-120-characters", _write("name: " + "a" * 120 + "\nexperiment: experiments.mlp\n"), 1,
         ("the study name must be at most 100 characters, got 120",)),  # the fault tour: "must be letters, ..."
    Case("grid-of-10**8", _write(HEAD + "search: {sampler: grid}\nspace:\n  hidden_size: {low: 1, high: 100000000, step: 1}\n"),
         (4, 5), ("space",)),
    Case("grid-of-10**6-from-lists", _write(HEAD + "space:\n" + "".join(f"  {p}: [{', '.join(map(str, range(1, 11)))}]\n"
                                                                   for p in MLP_PARAMS)), 4,
         ("space.in_features: the space holds 1,000,000 configurations", "at most 100,000")),
    Case("step-of-1e-308", _write(HEAD + "space:\n  hidden_size: {low: 0.0, high: 1.0e+308, step: 1.0e-308}\n"), 4,
         ("space.hidden_size.step: ", "more than a sweep can visit")),
    Case("effective-batch-range-of-10**11", _write(HEAD + "search: {n_trials: 3}\nspace:\n  batch_size: [1]\n"
                                                   "  effective_batch_size: {low: 1, high: 100000000000}\n"),
         (4, 6), ("space",)),
]


SPEC_RULES = {"line-break-in-a-value", "name-of-120-characters", "grid-of-10**8", "grid-of-10**6-from-lists", "step-of-1e-308",
              "effective-batch-range-of-10**11"}
"""Cases the YAML loader accepts and the spec's rules refuse; the rest are the loader's own."""


def orchestrate_limited(args: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    def limit_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, resource.getrlimit(resource.RLIMIT_AS)[1]))

    started = time.monotonic()
    proc = subprocess.run([ORCHESTRATE, *args], cwd=cwd, capture_output=True, text=True, timeout=LIMIT_S,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}, preexec_fn=limit_memory)
    return proc, time.monotonic() - started


def check_one_line(proc: subprocess.CompletedProcess[str], spec: Path, case: Case) -> str:
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and proc.stderr.count("\n") == 1, f"expected one stderr line, got {proc.stderr!r}"
    if case.line is None:
        assert lines[0].startswith(f"{spec}: "), lines[0]
    else:
        allowed = case.line if isinstance(case.line, tuple) else (case.line,)
        assert any(lines[0].startswith(f"{spec}:{n}: ") for n in allowed), lines[0]
    for part in case.expect:
        assert part in lines[0], f"{part!r} not in {lines[0]!r}"
    return lines[0]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_hostile_yaml_is_one_line_exit_2_quickly_and_creates_nothing(case: Case, tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    case.make(spec)

    proc, elapsed = orchestrate_limited([str(spec), "--dry-run"], tmp_path)

    print(proc.stderr, end="")
    check_one_line(proc, spec, case)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]  # no mlruns/, nothing else
    assert elapsed < LIMIT_S


BY_ID = {c.id: c for c in CASES}


@pytest.mark.parametrize("command", ["report", "best"])
@pytest.mark.parametrize("case_id", ["alias-bomb", "self-referencing-alias", "fifo", "not-utf8"])
def test_report_and_best_refuse_hostile_yaml_the_same_way(command: str, case_id: str, tmp_path: Path) -> None:
    case = BY_ID[case_id]
    spec = tmp_path / "spec.yaml"
    case.make(spec)

    proc, _ = orchestrate_limited([command, str(spec)], tmp_path)

    check_one_line(proc, spec, case)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]


def test_a_real_run_refuses_hostile_yaml_before_creating_anything(tmp_path: Path) -> None:
    """Without --dry-run a valid spec would create mlruns/; the bomb must stop before that."""
    case = BY_ID["alias-bomb"]
    spec = tmp_path / "spec.yaml"
    case.make(spec)

    proc, _ = orchestrate_limited([str(spec)], tmp_path)

    check_one_line(proc, spec, case)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]


def test_benign_anchors_and_aliases_still_work(tmp_path: Path) -> None:
    """A user may write a list once and reuse it: ``&sizes`` / ``*sizes``."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(HEAD + "device: cpu\nspace:\n  hidden_size: &sizes [32, 64]\n  in_features: *sizes\n"
                    "  batch_size: [8]\nsearch: {sampler: grid}\n")

    proc, _ = orchestrate_limited([str(spec), "--dry-run"], tmp_path)

    assert proc.returncode == 0, proc.stderr
    assert "4 configurations: hidden_size x2, in_features x2, batch_size x1" in proc.stdout
    assert "in_features                [32, 64]" in proc.stdout


def _pure_python_yamlsource() -> object:
    """``orchestrator.spec.yamlsource`` as it loads where PyYAML was built without libyaml: PyYAML's
    pure-Python scanner and parser under the same composer."""
    saved = sys.modules.get("yaml._yaml")
    sys.modules["yaml._yaml"] = None  # type: ignore[assignment] - `from yaml._yaml import ...` raises ImportError
    try:
        spec = importlib.util.spec_from_file_location("yamlsource_pure", ROOT / "orchestrator" / "spec" / "yamlsource.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        if saved is None:
            del sys.modules["yaml._yaml"]
        else:
            sys.modules["yaml._yaml"] = saved
    return module


PURE = _pure_python_yamlsource()


@pytest.mark.parametrize("parser", ["libyaml", "pure-python"])
@pytest.mark.parametrize("case", [c for c in CASES if c.id not in SPEC_RULES], ids=str)
def test_the_loader_refuses_each_case_the_same_way_with_either_parser(case: Case, parser: str,
                                                                     tmp_path: Path) -> None:
    """In this process, ``load_yaml`` itself (the CLI above runs it on libyaml): the same line and
    rule with PyYAML's pure-Python parser, the fallback where libyaml is missing."""
    module = yamlsource if parser == "libyaml" else PURE
    assert (module._CParser is None) == (parser == "pure-python")
    spec = tmp_path / "spec.yaml"
    case.make(spec)

    with pytest.raises(SpecError) as info:
        module.load_yaml(spec)

    message = str(info.value)
    allowed = case.line if isinstance(case.line, tuple) else (case.line,)
    assert info.value.line in allowed, message
    assert "\n" not in message
    for part in case.expect:
        assert part in message, f"{part!r} not in {message!r}"
