"""The path ``orchestrate SPEC`` walks through the files: a real one-trial CPU sweep, traced.

    python bench/walk.py                                  # this checkout
    python bench/walk.py --root . --root /tmp/premove     # side by side (git worktree add /tmp/premove 5d7a965)

For each ``--root`` (a checkout's root; default this one) a fresh Python process runs that
checkout's ``orchestrator.cli.main([SPEC])`` on a tiny spec (``experiments.mlp``, batch 8,
float32, one trial, CPU) written into a temporary folder, with ``sys.setprofile`` set on its main
thread. The trial itself, the fork server and the probe are subprocesses and are not traced; nor
are the tracker's and the heartbeat's threads. ``PYTHONPATH`` points every process at the root's
code, and the run fails loudly if ``orchestrator`` was imported from elsewhere.

The walk is the sequence of orchestrator files execution is in: after each Python call or return
of a function, the file of the innermost frame that belongs to ``ROOT/orchestrator/`` (a call into
Optuna or MLflow stays in the file that made it; a callback from them into ours enters ours).
Module bodies run at import are left out (the walk is the calls, not the imports; the modules
loaded are counted apart). From the walk:

- *files*: distinct files entered; *transitions*: moves from one file to another;
- *returns*: transitions into a file the walk had already left;
- *climbs*: transitions from a module inside a wing to a module outside that wing (into a
  top-level module or another wing). A wing is a package under ``orchestrator/``. The modules
  directly in ``orchestrator/`` are "top" where this checkout also keeps them at the top (the
  wings layout's shared modules); any other module directly in ``orchestrator/`` (the flat
  layout's) is a wing of its own, so leaving it is a climb.

The sweep loop polls its trial every 50 ms, and each poll walks the same few files: the raw walk's
length depends on how long the trial ran. The *folded* walk is read off the call tree instead
(a node per call of one of our functions, its children the calls it made), in which a call whose
whole subtree equals an earlier sibling's is dropped, as a reader follows a loop's body once per
distinct path through it: depth first, into each call and back to its caller. Its figures are the
ones to compare. ``--start FILE:FUNCTION`` (always ``sweep/run.py:run``) also reads the folded walk
from the first call of that function on: its *stays* are the walk's entries (one per stay in a
file, transitions + 1); and the same without the sweep loop (``LOOP``'s calls not entered): the
start-up and the close. Each root runs ``--rounds`` times; the figures are printed per
round, so their spread shows.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
LOOP = "sweep/loop.py:run"
"""The sweep loop: left out of the start-up's walk (``--start``'s second figure)."""
ROOT = HERE.parents[1]

SPEC = textwrap.dedent("""\
    name: walk
    experiment: experiments.mlp
    device: cpu
    fixed: {in_features: 16, hidden_size: 32, num_layers: 1}
    space:
      batch_size: [8]
      dtype: [float32]
    objective: {metric: samples_per_s, direction: maximize}
    search: {sampler: grid, n_trials: 1}
    trial: {warmup_steps: 1, measure_steps: 2, min_measure_s: 0.1, timeout_s: 300}
    """)


# -- the traced process ------------------------------------------------------------------------------
def trace(root: Path, spec: Path, out: Path) -> None:
    """In a fresh process (``PYTHONPATH=root``, cwd the spec's folder): run ``orchestrate SPEC`` with
    the profiler on; write the raw walk, the folded call tree, the modules loaded and the exit code."""
    package = str(root / "orchestrator") + os.sep
    ours: dict[str, str | None] = {}

    def rel(filename: str) -> str | None:
        """``orchestrator/...py`` for a file of the root's package, else None (cached)."""
        try:
            return ours[filename]
        except KeyError:
            path = os.path.realpath(filename)
            ours[filename] = path[len(str(root)) + 1:] if path.startswith(package) else None
            return ours[filename]

    walk: list[str] = []
    nodes: dict[tuple[Any, ...], int] = {}  # (file, function, child ids) -> id: each distinct subtree once
    stack: list[list[Any]] = [[None, "", "", []]]  # [frame, file, function, child ids]; [0]: the root
    importing = 0

    def innermost(frame: Any) -> str | None:
        while frame is not None:
            r = rel(frame.f_code.co_filename)
            if r is not None:
                return None if frame.f_code.co_name == "<module>" else r
            frame = frame.f_back
        return None

    def close(entry: list[Any]) -> None:
        kept = tuple(dict.fromkeys(entry[3]))  # a sibling subtree seen before is not walked again
        stack[-1][3].append(nodes.setdefault((entry[1], entry[2], kept), len(nodes)))

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal importing
        if event != "call" and event != "return":
            return  # c_call, c_return, c_exception
        code = frame.f_code
        r = rel(code.co_filename)
        if r is None:
            return
        if code.co_name == "<module>":  # a module body, run at its import
            importing += 1 if event == "call" else -1
            return
        if importing:
            return
        if event == "call":
            stack.append([frame, r, f"{code.co_name}:{code.co_firstlineno}", []])
            here: str | None = r
        else:
            if any(entry[0] is frame for entry in stack[-1:0:-1]):
                while True:
                    entry = stack.pop()
                    close(entry)
                    if entry[0] is frame:
                        break
            here = innermost(frame.f_back)
        if here is not None and (not walk or walk[-1] != here):
            walk.append(here)

    os.chdir(spec.parent)
    import orchestrator.cli as cli

    where = Path(cli.__file__).resolve()
    if root not in where.parents:
        raise SystemExit(f"walk: orchestrator came from {where}, not from {root}")
    sys.setprofile(profile)
    try:
        code = cli.main([str(spec)])
    finally:
        sys.setprofile(None)
    while len(stack) > 1:
        close(stack.pop())
    loaded = sorted(m for m in sys.modules if m == "orchestrator" or m.startswith("orchestrator."))
    table = [list(key) for key, _ in sorted(nodes.items(), key=lambda kv: kv[1])]
    out.write_text(json.dumps({"walk": walk, "nodes": table, "roots": stack[0][3], "loaded": loaded,
                               "code": code}))


# -- the figures ---------------------------------------------------------------------------------------
def folded_walk(nodes: list[list[Any]], roots: list[int], skip: str | None = None) -> list[str]:
    """The files in the order a depth-first read of the folded call tree enters them: into each call
    and back to its caller, each distinct subtree once among its siblings (a loop's body once per
    distinct path through it); calls of ``skip`` (``FILE:FUNCTION``) are not entered."""
    walk: list[str] = []
    skipped = _split(skip) if skip else None

    def enter(i: int) -> None:
        file, _, children = nodes[i]
        walk.append(file)
        for c in dict.fromkeys(children):
            if skipped is not None and (nodes[c][0], nodes[c][1].split(":")[0]) == skipped:
                continue
            enter(c)
            walk.append(file)

    for r in dict.fromkeys(roots):
        enter(r)
    return [f for k, f in enumerate(walk) if k == 0 or walk[k - 1] != f]


def subtree(nodes: list[list[Any]], roots: list[int], start: str) -> list[int]:
    """The first call of ``start`` (``FILE:FUNCTION``, the file under ``orchestrator/``) met in a
    depth-first read of the call tree, as the root of a walk of its own; none if it was never called."""
    file, function = _split(start)
    seen: set[int] = set()

    def find(i: int) -> int | None:
        if i in seen:
            return None
        seen.add(i)
        node_file, node_function, children = nodes[i]
        if node_file == file and node_function.split(":")[0] == function:
            return i
        return next((found for c in children if (found := find(c)) is not None), None)

    return next(([found] for r in roots if (found := find(r)) is not None), [])


def _split(where: str) -> tuple[str, str]:
    """``sweep/run.py:run`` as (``orchestrator/sweep/run.py``, ``run``)."""
    file, _, function = where.rpartition(":")
    return f"orchestrator/{file}", function


def wing_of(path: str, top: set[str]) -> tuple[str, str]:
    """(wing, kind) of an ``orchestrator/...`` path; kind: ``wing`` (a package's module), ``top``
    (a shared module directly in ``orchestrator/``) or ``flat`` (any other module there: a wing
    of its own)."""
    parts = path.split("/")
    if len(parts) > 2:
        return parts[1], "wing"
    name = parts[1].removesuffix(".py")
    return ("top", "top") if name in top else (name, "flat")


def figures(walk: list[str], top: set[str]) -> dict[str, Any]:
    files = list(dict.fromkeys(walk))
    left: set[str] = set()
    returns = climbs = to_top = 0
    for a, b in zip(walk, walk[1:]):
        left.add(a)
        if b in left:
            returns += 1
        (wa, kind_a), (wb, kind_b) = wing_of(a, top), wing_of(b, top)
        if kind_a != "top" and wb != wa:
            climbs += 1
            to_top += kind_b == "top"
    kinds = [wing_of(f, top) for f in files]
    by_wing = Counter("flat (each its own wing)" if kind == "flat" else wing for wing, kind in kinds)
    visits = Counter(walk)
    return {"files": len(files), "transitions": len(walk) - 1, "returns": returns, "climbs": climbs,
            "climbs_to_top": to_top, "edges": len(set(zip(walk, walk[1:]))), "by_wing": dict(by_wing),
            "most_visited": visits.most_common(5)}


def top_modules(root: Path) -> set[str]:
    """The modules this checkout keeps directly in ``orchestrator/`` (the wings layout's shared ones)."""
    return {p.stem for p in (root / "orchestrator").glob("*.py")}


def run_round(root: Path, python: str, timeout_s: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="walk-") as tmp:
        spec, out = Path(tmp) / "walk.yaml", Path(tmp) / "walk.json"
        spec.write_text(SPEC)
        env = {**os.environ, "PYTHONPATH": str(root)}
        proc = subprocess.run([python, str(HERE), "--trace", str(root), str(spec), str(out)], cwd=tmp, env=env,
                              capture_output=True, text=True, timeout=timeout_s)
        if proc.returncode != 0 or not out.exists():
            raise SystemExit(f"walk: the traced run under {root} failed (exit {proc.returncode}):\n"
                             + proc.stdout[-3000:] + proc.stderr[-3000:])
        data = json.loads(out.read_text())
        con = sqlite3.connect(Path(tmp) / "mlruns" / "optuna.db")
        try:
            complete = con.execute("SELECT count(*) FROM trials WHERE state = 'COMPLETE'").fetchone()[0]
        finally:
            con.close()
    if data["code"] != 0 or complete != 1:
        raise SystemExit(f"walk: under {root} the sweep exited {data['code']} with {complete} complete "
                         "trial(s), not 0 with 1:\n" + proc.stdout[-3000:] + proc.stderr[-3000:])
    return data


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", type=Path, action="append",
                   help="a checkout's root (repeat to compare; default: this checkout)")
    p.add_argument("--rounds", type=int, default=1, help="runs per root (default 1)")
    p.add_argument("--python", default=sys.executable, help="the interpreter (default: this one)")
    p.add_argument("--show", action="store_true", help="also print each root's folded walk")
    p.add_argument("--json", type=Path, help="also write the figures here")
    p.add_argument("--timeout-s", type=float, default=600)
    p.add_argument("--start", action="append", default=["sweep/run.py:run"], metavar="FILE:FUNCTION",
                   help="also the folded walk from the first call of this function (default and always: "
                        "sweep/run.py:run, where the sweep's start-up begins)")
    p.add_argument("--trace", nargs=3, metavar=("ROOT", "SPEC", "OUT"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.trace:
        trace(Path(args.trace[0]).resolve(), Path(args.trace[1]).resolve(), Path(args.trace[2]).resolve())
        return 0
    roots = [r.resolve() for r in (args.root or [ROOT])]
    top = top_modules(ROOT)
    report: dict[str, Any] = {}
    for k in range(args.rounds):
        for root in roots:  # alternating: the machine's drift falls on every root alike
            data = run_round(root, args.python, args.timeout_s)
            folded = folded_walk(data["nodes"], data["roots"])
            entry = report.setdefault(str(root), {"rounds": []})
            starts = {}
            for start in dict.fromkeys(args.start):
                below = subtree(data["nodes"], data["roots"], start)
                for name, skip in ((start, None), (f"{start} without {LOOP}", LOOP)):
                    w = folded_walk(data["nodes"], below, skip)
                    starts[name] = figures(w, top) if w else None
            entry["rounds"].append({"raw": figures(data["walk"], top), "folded": figures(folded, top),
                                    "modules_loaded": len(data["loaded"]), "from": starts})
            entry["loaded"] = data["loaded"]
            entry["folded_walk"] = folded
    print(f"orchestrate SPEC on a one-trial CPU sweep (experiments.mlp, batch 8, float32), traced in the parent's "
          f"main thread; top = {', '.join(sorted(top))}")
    for root, entry in report.items():
        print(f"\n{root}")
        for k, r in enumerate(entry["rounds"]):
            f, raw = r["folded"], r["raw"]
            print(f"  round {k + 1}: folded: {f['files']} files, {f['transitions']} transitions, "
                  f"{f['returns']} returns, {f['climbs']} climbs ({f['climbs_to_top']} into top), "
                  f"{f['edges']} distinct edges | raw, as polled: {raw['transitions']} transitions, "
                  f"{raw['returns']} returns, {raw['climbs']} climbs | {r['modules_loaded']} modules loaded")
            for start, g in r["from"].items():
                print(f"    from {start}: " + ("never called" if g is None else
                      f"{g['transitions'] + 1} stays in {g['files']} files, {g['climbs']} climbs "
                      f"({g['climbs_to_top']} into top), {g['returns']} returns"))
        last = entry["rounds"][-1]["folded"]
        print("  files entered per wing: " + ", ".join(f"{w} {n}" for w, n in sorted(last["by_wing"].items())))
        print("  most visited (folded): " + ", ".join(f"{f.removeprefix('orchestrator/')} {n}x"
                                                       for f, n in last["most_visited"]))
        if args.show:
            print("  walk: " + " > ".join(f.removeprefix("orchestrator/") for f in entry["folded_walk"]))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
