"""Fuzz every path that loads a spec with mutations of the repository's own specs.

    python bench/fuzz_specs.py                      # 20,000 examples, seed 0
    python bench/fuzz_specs.py --examples 50000 --seed 3

Each example is one of ``sweeps/*.yaml`` after a few mutations of its text, its structure or its
bytes (lines deleted, duplicated or swapped, values swapped or replaced by odd scalars, YAML
syntax injected, anchors and aliases, self-referencing aliases, alias bombs, deep nesting, tabs,
control characters, bytes that are not UTF-8). It goes through the four ways the command loads a
spec, in this process, as the CLI calls them: ``orchestrate SPEC --dry-run``, ``orchestrate SPEC``
(stopped right after the spec is loaded), ``orchestrate report SPEC`` and ``orchestrate best SPEC``
(both stopped before the study is opened). The invariant (issue #13, item 4): each path ends in
a valid spec, or in exit code 2 with one stderr line ``SPEC:LINE: ...``, within a time limit,
under a memory limit, with nothing written to disk. Anything else is a failure: an exception
other than the CLI's own errors, a traceback, a second line, a message without the file and
line, a hang. Prints: examples tried, valid specs, one-line errors, failures (and the first few
failing documents). Exit code 1 if any failed.

``tests/spec/test_fuzz_specs.py`` runs the same strategy and checker for 1,000 examples in CI.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import os
import re
import resource
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import yaml
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
SPEC_TEXTS = tuple(p.read_text() for p in sorted((ROOT / "sweeps").glob("*.yaml")))
_FAST = {"Loader": getattr(yaml, "CSafeLoader", yaml.SafeLoader)}
SPEC_DOCS = tuple(yaml.load(text, **_FAST) for text in SPEC_TEXTS)
"""The specs parsed once (libyaml where PyYAML has it): structural mutations start from a copy."""
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
PATHS = ("dry-run", "run", "report", "best")
TIME_LIMIT_S = 10.0
"""Per path and example; a path that takes longer has hung (a spec loads in milliseconds)."""
MEMORY_HEADROOM = 1 << 30
"""Per path and example: more than this on top of what the process already has is a failure
(a MemoryError here, not the machine's OOM killer)."""

ODD_SCALARS = (
    "~", "null", "", "yes", "no", "on", "off", "y", "True", "NULL", ".inf", "-.inf", ".nan", "0x1F",
    "0o17", "017", "0b101", "1_000", "1:20", "190:20:30", "2024-13-45", "2024-01-01",
    "2001-12-14t21:59:43.10-05:00", "1e3", "1.0e+3", "-8", "0", "-0", "8.5", "99999999999999999999",
    "1" * 5000, "1." + "0" * 400, '"8"', "'8'", '"a\\nb"', '"tab\\there"', '"\\u2028"', '"\\x85"', "'é'",
    '"\\0"', '"\\e"', "[]", "{}", "[8, 8]", "[8, true]", "[1, 1.0]", "[[8]]", "[{a: 1}]",
    "{low: 1, high: 64, step: 1}", "{low: 1, high: 1000000000, step: 1}", "{low: 0.1, high: 0.01}",
    "{low: 1.0e-3, high: 1, log: true}", "{low: 8, high: 64, step: 10}", "{low: .nan, high: 1}",
    "{max: 8, min: 1}", "{max: lots}",
    "!!str 8", "!!int x", "!!float 1", "!!bool maybe", "!!binary aGVsbG8=", "!!python/name:os.system",
    "!!python/object/apply:os.system ['true']", "!!set {a, b}", "!!omap [a: 1]", "!!timestamp 2024",
    "!custom x", "!!map [1]", "!!seq {a: 1}", "&anchor 8", "*undefined", "'unterminated",
    '"unterminated', "[unclosed", "{a: 1", "a: b: c", "@at", "`tick", "%percent", "|", ">-",
    "x" * 3000, "sqlite://", "sqlite:///:memory:", "sqlite:///does/not/exist/x.db",
    "postgresql+nosuch://u@h/db", "postgresql://u@127.0.0.1:1/x", "http://localhost:5000", "./mlruns",
    "file:///tmp/x", "databricks", "experiments.nosuch", "experiments/mlp.py", "os", "experiments.mlp",
    "experiments.bert", "experiments.faults", "cpu", "cuda", "mps", "auto", "cpu:0-1", "cuda:0,cuda:0",
    "grid", "tpe", "nsga2", "random", "bayes", "float16", "bfloat16", "fp16", "maximize", "minimize",
    "samples_per_s", "peak_memory_gib", "increasing", "{sgd: 0, adamw: 1}", "set_to_none", "zero_fill",
    "adamw_fused", "sgd", "expandable_segments:True", "tiny", "bert-base",
)
KEYS = (
    "name", "experiment", "device", "devices", "fixed", "space", "objective", "search", "trial",
    "storage", "tracking_uri", "metric", "metrics", "direction", "constraints", "sampler", "n_trials",
    "seed", "max_failures", "timeout_min", "patience", "skip_predicted_oom", "memory_order",
    "allow_swap", "grace_period_s", "warmup_steps", "measure_steps", "min_measure_s", "timeout_s",
    "repeats", "batch_size", "effective_batch_size", "grad_accum_steps", "dtype", "seq_len",
    "activation_checkpointing", "compile", "optimizer", "lr", "zero_grad", "empty_cache_every",
    "memory_fraction", "cpu_memory_limit_gib", "mps_high_watermark_ratio", "mps_low_watermark_ratio",
    "mps_fallback", "cuda_alloc_conf", "hidden_size", "model", "low", "high", "step", "log", "max",
    "min", "serach", "n_trails", "<<", "? x", "'quoted key'", "1", "~", "true", "[a]", "{a: 1}",
)
FRAGMENTS = (
    "---", "...", "%YAML 1.1", "%TAG ! tag:x,2000:", "- item", "? complex", ": value", "<<: *base",
    "base: &base {batch_size: 8}", "&a", "*a", "!!python/object:os.system", "{", "}", "[", "]", "'",
    '"', "|", ">", "#", "@", "`", "%", ",", "key: value", "key:value", "  nested: 1",
    "\tbatch_size: 8", "space: &s\n  x: *s", "a: &x [*x]", "a: &x {b: *x}",
    "\ufeff", "\r", "\x85", "\u2028", "\x00", "\x07", "\x1b[31m", "\ud7ff", "\ue000", "\U0001F600",
)
_KEY_LINE = re.compile(r"^(\s*(?:- )?)([^\s#:][^:#]*?):(\s*)(.*?)(\s+#.*)?$")


# -- the mutations --------------------------------------------------------------------------------

def _value_span(line: str) -> tuple[int, int] | None:
    """Where the value of ``key: value`` (or of a list item ``- value``) is in the line."""
    m = _KEY_LINE.match(line)
    if m:
        return m.start(4), m.end(4)
    m = re.match(r"^(\s*- )(.*?)(\s+#.*)?$", line)
    return (m.start(2), m.end(2)) if m else None


def _set_value(line: str, value: str) -> str:
    span = _value_span(line)
    if span is None:
        return line + " " + value
    a, b = span
    return line[:a] + value + line[b:]


def _deep(depth: int, flow: bool) -> str:
    if flow:
        return "[" * depth + "]" * depth
    return "\n" + "".join("  " * (i + 1) + f"k{i}:\n" for i in range(min(depth, 200)))  # 200: 40 KB


def _bomb(width: int, depth: int) -> str:
    out = ["b0: &b0 [" + ", ".join(["lol"] * width) + "]"]
    for i in range(1, depth):
        out.append(f"b{i}: &b{i} [" + ", ".join([f"*b{i - 1}"] * width) + "]")
    return "\n".join(out)


@st.composite
def _text_mutation(draw: Any, lines: list[str]) -> list[str]:
    """One mutation of the lines of a spec."""
    n = len(lines)
    i = draw(st.integers(0, max(n - 1, 0)))
    j = draw(st.integers(0, max(n - 1, 0)))
    op = draw(st.sampled_from((
        "delete", "duplicate", "swap_lines", "swap_values", "odd_value", "odd_value", "odd_value",
        "fragment", "reindent", "insert_text", "truncate", "rename_key", "alias", "self_alias",
        "bomb", "deep", "tab")))
    lines = list(lines)
    if n == 0:
        return [draw(st.sampled_from(FRAGMENTS))]
    if op == "delete":
        del lines[i]
    elif op == "duplicate":
        lines.insert(i, lines[i])
    elif op == "swap_lines":
        lines[i], lines[j] = lines[j], lines[i]
    elif op == "swap_values":
        si, sj = _value_span(lines[i]), _value_span(lines[j])
        if si and sj:
            vi, vj = lines[i][si[0]:si[1]], lines[j][sj[0]:sj[1]]
            lines[i], lines[j] = _set_value(lines[i], vj), _set_value(lines[j], vi)
    elif op == "odd_value":
        lines[i] = _set_value(lines[i], draw(st.sampled_from(ODD_SCALARS)))
    elif op == "fragment":
        indent = draw(st.sampled_from(("", "  ", "    ", " ", "\t")))
        lines.insert(i, indent + draw(st.sampled_from(FRAGMENTS)))
    elif op == "reindent":
        delta = draw(st.integers(-4, 4))
        indent = len(lines[i]) - len(lines[i].lstrip(" "))
        lines[i] = " " * delta + lines[i] if delta >= 0 else lines[i][min(-delta, indent):]
    elif op == "insert_text":
        k = draw(st.integers(0, len(lines[i])))
        lines[i] = lines[i][:k] + draw(st.text(max_size=12)) + lines[i][k:]
    elif op == "truncate":
        k = draw(st.integers(0, len(lines[i])))
        lines = lines[:i] + [lines[i][:k]]
    elif op == "rename_key":
        m = _KEY_LINE.match(lines[i])
        if m:
            lines[i] = m.group(1) + draw(st.sampled_from(KEYS)) + lines[i][m.end(2):]
    elif op == "alias":
        span = _value_span(lines[i])
        if span:
            lines[i] = lines[i][:span[0]] + "&v " + lines[i][span[0]:]
            lines[j] = _set_value(lines[j], "*v")
    elif op == "self_alias":
        lines[i] = _set_value(lines[i], draw(st.sampled_from(("&s [*s]", "&s [8, [*s]]", "&s {a: *s}"))))
    elif op == "bomb":
        lines.insert(i if not lines[i][:1].isspace() else 0,
                     _bomb(draw(st.integers(2, 10)), draw(st.integers(2, 9))))
        lines[j] = _set_value(lines[j], f"*b{draw(st.integers(0, 1))}")
    elif op == "deep":
        depth = draw(st.one_of(st.integers(1, 40), st.sampled_from((300, 3000))))  # around the cap, and far past it
        lines[i] = _set_value(lines[i], _deep(depth, draw(st.booleans())))
    elif op == "tab":
        k = draw(st.integers(0, len(lines[i])))
        lines[i] = lines[i][:k] + "\t" + lines[i][k:]
    return lines


def _paths(node: Any, prefix: tuple = ()) -> Iterator[tuple]:
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for k, v in enumerate(node):
            yield from _paths(v, prefix + (k,))


_VALUES = st.one_of(
    st.sampled_from((None, True, False, 0, -1, 1, 8, 2.5, float("inf"), float("nan"), 10 ** 30, "", "x",
                     "cpu", "grid", "float16", [], {}, [8, 16], [8, 8], {"low": 1, "high": 8},
                     {"low": 1, "high": 10 ** 9, "step": 1}, {"max": 2})).map(copy.deepcopy),  # a fresh one:
    # mutations change values in place
    st.integers(), st.floats(), st.text(max_size=20), st.lists(st.integers(-2, 300), max_size=6),
)


@st.composite
def _structure_mutation(draw: Any, doc: Any) -> Any:
    """One change to the parsed document: delete, replace or move a value, add a key."""
    paths = [p for p in _paths(doc) if p]
    if not paths:
        return doc
    path = draw(st.sampled_from(paths))
    parent = doc
    for part in path[:-1]:
        parent = parent[part]
    op = draw(st.sampled_from(("delete", "replace", "replace", "move", "add_key", "wrap")))
    if op == "delete":
        del parent[path[-1]]
    elif op == "replace":
        parent[path[-1]] = draw(_VALUES)
    elif op == "move":
        other = draw(st.sampled_from(paths))
        target = doc
        for part in other[:-1]:
            target = target[part]
        if other[:len(path)] != path:  # not into itself
            value = parent[path[-1]]
            target[other[-1]] = value
            if other != path:
                with contextlib.suppress(KeyError, IndexError, TypeError):
                    del parent[path[-1]]
    elif op == "add_key" and isinstance(parent, dict):
        parent[draw(st.sampled_from(KEYS))] = draw(_VALUES)
    elif op == "wrap":
        parent[path[-1]] = draw(st.sampled_from(([parent[path[-1]]], {"x": parent[path[-1]]})))
    return doc


@st.composite
def mutated_spec(draw: Any) -> bytes:
    """A spec from sweeps/ after 1-4 mutations of its structure, text or bytes."""
    which = draw(st.integers(0, len(SPEC_TEXTS) - 1))
    text = SPEC_TEXTS[which]
    structural = draw(st.integers(0, 3)) == 0
    if structural:  # structure first (the text must still parse), then text
        doc = copy.deepcopy(SPEC_DOCS[which])
        for _ in range(draw(st.integers(1, 3))):
            doc = draw(_structure_mutation(doc))
        text = yaml.dump(doc, Dumper=_DUMPER, sort_keys=False, allow_unicode=draw(st.booleans()),
                         default_flow_style=draw(st.sampled_from((False, None, True))))
    lines = text.split("\n")
    for _ in range(draw(st.integers(0 if structural else 1, 4))):
        lines = draw(_text_mutation(lines))
    ending = draw(st.sampled_from(("\n", "\n", "\n", "\r\n", "\r")))
    data = ending.join(lines).encode("utf-8", "surrogatepass")
    if draw(st.integers(0, 9)) == 0:  # bytes: not UTF-8, another encoding, a BOM
        how = draw(st.sampled_from(("insert", "latin-1", "utf-16", "bom")))
        if how == "insert":
            k = draw(st.integers(0, len(data)))
            data = data[:k] + draw(st.binary(min_size=1, max_size=4)) + data[k:]
        elif how == "latin-1":
            data = ending.join(lines).encode("latin-1", "replace") + "é\n".encode("latin-1")
        elif how == "utf-16":
            data = ending.join(lines).encode("utf-16", "surrogatepass")
        else:
            data = b"\xef\xbb\xbf" + data
    return data


# -- the invariant --------------------------------------------------------------------------------

WHOLE_FILE_RULES = ("the file is ", "no such file", "is a folder", "is a FIFO", "is a character device",
                    "cannot read the file")
"""The rules about the file as a whole: their messages name the file and no line."""


class Loaded(BaseException):
    """Raised by the stand-ins for what comes after loading: the spec was valid."""


class Hang(BaseException):
    """A path ran past ``TIME_LIMIT_S``."""


@dataclass
class Outcome:
    path: str
    kind: str
    """``valid``, ``error`` (one line, exit 2, FILE:LINE) or ``failure``."""
    detail: str = ""


@dataclass
class Tally:
    examples: int = 0
    valid: int = 0
    """Examples whose spec was valid (every path reached the end of loading)."""
    errors: int = 0
    """Examples refused with one line naming the file and line, on every path."""
    failures: list[tuple[bytes, list[Outcome]]] = field(default_factory=list)
    by_path: dict[str, dict[str, int]] = field(default_factory=dict)
    samples: dict[str, list[bytes]] = field(default_factory=dict)
    """The first few documents of each kind (``valid``, ``error``), to replay elsewhere."""

    def add(self, data: bytes, outcomes: list[Outcome]) -> None:
        self.examples += 1
        for o in outcomes:
            self.by_path.setdefault(o.path, {}).setdefault(o.kind, 0)
            self.by_path[o.path][o.kind] += 1
        bad = [o for o in outcomes if o.kind == "failure"]
        if bad:
            self.failures.append((data, bad))
            return
        kind = "valid" if all(o.kind == "valid" for o in outcomes) else "error"
        if kind == "valid":
            self.valid += 1
        else:
            self.errors += 1
        if len(self.samples.setdefault(kind, [])) < 10:
            self.samples[kind].append(data)


@contextlib.contextmanager
def _limits() -> Iterator[None]:
    """A time limit (SIGALRM raises ``Hang``) and a memory limit (``RLIMIT_AS``: MemoryError)
    around one path, both restored after it."""
    def alarm(signum: int, frame: Any) -> None:
        raise Hang()

    previous = signal.signal(signal.SIGALRM, alarm)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    vm = _vm_bytes()
    cap = vm + MEMORY_HEADROOM if vm else resource.RLIM_INFINITY
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    started = time.monotonic()
    outer, interval = signal.setitimer(signal.ITIMER_REAL, TIME_LIMIT_S)  # pytest-timeout's, say
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        signal.signal(signal.SIGALRM, previous)
        if outer:  # give the outer timer back what is left of it
            signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - started), 0.001), interval)


def _vm_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


@contextlib.contextmanager
def _stopped_after_loading() -> Iterator[None]:
    """What follows loading, replaced: a run (``orchestrator.sweep.run.run``, which the CLI imports when
    it starts one), and opening the study for report / best."""
    import importlib

    from orchestrator.report import command as report

    def stop(*args: Any, **kwargs: Any) -> Any:
        raise Loaded()

    targets = [(report, "open_study"), (importlib.import_module("orchestrator.sweep.run"), "run")]
    saved = [getattr(module, name) for module, name in targets]
    for module, name in targets:
        setattr(module, name, stop)
    try:
        yield
    finally:
        for (module, name), value in zip(targets, saved):
            setattr(module, name, value)


def _call(path: str, spec: Path) -> tuple[int | None, str, str, BaseException | None]:
    """One path as the CLI runs it: exit code, stdout, stderr, and what escaped (if anything)."""
    from orchestrator import cli
    from orchestrator.report import command as report

    argv = {"dry-run": [str(spec), "--dry-run"], "run": [str(spec)],
            "report": ["report", str(spec)], "best": ["best", str(spec)]}[path]
    out, err = io.StringIO(), io.StringIO()
    code: int | None = None
    escaped: BaseException | None = None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            with _limits():
                code = report.main(argv) if path in ("report", "best") else cli.main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - Loaded, Hang, or a bug: classified below
            escaped = exc
    return code, out.getvalue(), err.getvalue(), escaped


def check_paths(data: bytes, workdir: Path, paths: tuple[str, ...] = PATHS) -> list[Outcome]:
    """Write ``data`` as ``workdir/spec.yaml`` and load it through each path from ``workdir``."""
    spec = workdir / "spec.yaml"
    spec.write_bytes(data)
    where = re.compile(re.escape(str(spec)) + r"(:\d+: \S|: (" + "|".join(map(re.escape, WHOLE_FILE_RULES)) + "))")
    outcomes = []
    old = os.getcwd()
    os.chdir(workdir)
    try:
        with _stopped_after_loading():
            for path in paths:
                code, out, err, escaped = _call(path, spec)
                outcomes.append(_classify(path, code, out, err, escaped, where))
                left = sorted(set(os.listdir(workdir)) - {"spec.yaml"})
                if left:
                    outcomes[-1] = Outcome(path, "failure", f"left files behind: {left}")
                    _clean(workdir)
    finally:
        os.chdir(old)
    return outcomes


def _classify(path: str, code: int | None, out: str, err: str, escaped: BaseException | None,
              where: re.Pattern[str]) -> Outcome:
    if isinstance(escaped, Loaded) or (path == "dry-run" and escaped is None and code == 0
                                       and out.startswith("Plan for ") and not err):
        return Outcome(path, "valid")
    if isinstance(escaped, Hang):
        return Outcome(path, "failure", f"no answer within {TIME_LIMIT_S:g} s")
    if escaped is not None:
        return Outcome(path, "failure", f"{type(escaped).__name__}: {str(escaped)[:300]}")
    lines = err.splitlines()
    if code != 2:
        return Outcome(path, "failure", f"exit code {code}; stderr {err[-300:]!r}")
    if not lines or err.count("\n") != len(lines) or len(set(lines)) != len(lines):
        return Outcome(path, "failure", f"{len(lines)} stderr lines (each error once, one line each): {err[:300]!r}")
    for line in lines:  # a spec that breaks several rules: one line for each
        if not where.match(line):
            return Outcome(path, "failure", f"the message does not start with FILE:LINE: {line[:300]!r}")
    if "Traceback" in err or out:
        return Outcome(path, "failure", f"output besides the message: {out[:200]!r}")
    return Outcome(path, "error", lines[0])


def _clean(workdir: Path) -> None:
    import shutil

    for entry in workdir.iterdir():
        if entry.name != "spec.yaml":
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()


# -- the benchmark --------------------------------------------------------------------------------

def scratch_dir() -> Path:
    """A folder for the fuzzed spec: in memory (/dev/shm) where there is one. Rewriting a file
    on ext4 flushes it at close (auto_da_alloc): 5 ms an example, a third of the whole check."""
    shm = Path("/dev/shm")
    where = shm if shm.is_dir() and os.access(shm, os.W_OK) else None
    return Path(tempfile.mkdtemp(prefix="fuzz-specs-", dir=where))


def run(examples: int, seed: int, show: int = 5) -> Tally:
    import shutil

    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hyp_seed

    tally = Tally()
    workdir = scratch_dir()

    @hyp_seed(seed)
    @settings(max_examples=examples, deadline=None, database=None, derandomize=False,
              suppress_health_check=list(HealthCheck), phases=[Phase.generate])
    @given(mutated_spec())
    def one(data: bytes) -> None:
        tally.add(data, check_paths(data, workdir))  # failures are counted, never raised

    try:
        one()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return tally


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--examples", type=int, default=20_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--show", type=int, default=5, help="failing documents to print")
    args = p.parse_args(argv)
    started = time.perf_counter()
    tally = run(args.examples, args.seed)
    elapsed = time.perf_counter() - started
    print(f"fuzz_specs: {tally.examples:,} examples from {len(SPEC_TEXTS)} specs in sweeps/ (seed {args.seed}), "
          f"{elapsed:.0f} s, each through {', '.join(PATHS)}")
    print(f"  valid specs        {tally.valid:,}")
    print(f"  one-line errors    {tally.errors:,}")
    print(f"  failures           {len(tally.failures):,}")
    for path, kinds in tally.by_path.items():
        print(f"  {path:<8} " + ", ".join(f"{k} {v:,}" for k, v in sorted(kinds.items())))
    for data, bad in tally.failures[:args.show]:
        print(f"\nFAILED {bad[0].path}: {bad[0].detail}\n{data[:600]!r}")
    return 1 if tally.failures else 0


if __name__ == "__main__":
    sys.exit(main())
