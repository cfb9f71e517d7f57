"""A spec that names a training script instead of an experiment module: its rules, and how a
trial's parameters become the script's command line. Pure (no torch, no file is run).

```yaml
script: train.py                      # the spec's folder, then the working directory
args: ["--bs", "{batch_size}", "--amp", "{amp}", "--width", "8"]
samples_per_step: batch_size * accum  # only where the script draws no batch from a DataLoader
```

Every ``{name}`` in ``args`` is a parameter of the trial (fixed or searched, or ``device``);
``{name:FORMAT}`` formats it as Python's ``format`` does (``{lr:.0e}``), and ``{{`` is a literal
brace. An argument that is exactly ``{name}`` and whose value is the empty text is left out, so that
a flag can be swept on and off (``gc: ["", "--gradient-checkpointing"]``). ``samples_per_step`` is a
number or an arithmetic expression over parameter names (``+ - * / // ( )``).

The harness's knobs that act on a process from outside (allocator settings, memory caps, the CPU's
instruction set, its cores and threads) still apply to a script; the knobs only the harness's own
training loop applies (``LOOP_KNOBS``) cannot, and are refused with a line that says to pass them
through ``args``.
"""

from __future__ import annotations

import ast
import operator
import shlex
import string
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from orchestrator.spec.rules import Checker

LOOP_KNOBS = {"dtype": "precision", "grad_accum_steps": "accum", "effective_batch_size": "global_batch",
              "activation_checkpointing": "checkpointing", "compile": "compiled", "optimizer": "optim",
              "zero_grad": "set_to_none", "empty_cache_every": "empty_cache"}
"""Knobs only the harness's training loop can apply (a module's workload): a script runs its own
loop, so these must reach it as its own flags; each with a name of the user's own for the example."""

_OPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv,
}


def placeholders(arg: str) -> list[tuple[str, str]]:
    """The ``{name}`` / ``{name:FORMAT}`` fields of one argument, in order; ``ValueError`` (its
    message a rule) for a field that is not a plain name."""
    try:
        parsed = list(string.Formatter().parse(arg))
    except ValueError as exc:
        raise ValueError(f"{exc} (write {{{{ and }}}} for literal braces)") from None
    fields = []
    for _text, name, spec, conversion in parsed:
        if name is None:
            continue
        if not name.isidentifier() or conversion:
            raise ValueError(f"a placeholder is a parameter's name, as in {{batch_size}} or {{lr:.0e}}; "
                             f"{{{name}{'!' + conversion if conversion else ''}}} is not")
        if "{" in (spec or ""):
            raise ValueError(f"the format of {{{name}}} cannot itself hold a placeholder")
        fields.append((name, spec or ""))
    return fields


def format_arg(arg: str, params: dict[str, Any]) -> str:
    """One argument with its placeholders filled from ``params`` (``str`` of each value, or its
    ``FORMAT``)."""
    out = []
    for text, name, spec, _conversion in string.Formatter().parse(arg):
        out.append(text)
        if name is not None:
            value = params[name]
            out.append(format(value, spec) if spec else str(value))
    return "".join(out)


def script_argv(args: tuple[str, ...], params: dict[str, Any]) -> list[str]:
    """The script's arguments (``sys.argv[1:]``) for one trial; an argument that is exactly one
    placeholder whose value is ``""`` is left out."""
    argv = []
    for arg in args:
        fields = placeholders(arg)
        if len(fields) == 1 and arg == f"{{{fields[0][0]}}}" and params.get(fields[0][0]) == "":
            continue
        argv.append(format_arg(arg, params))
    return argv


def script_call(spec: Any, params: dict[str, Any]) -> Any:
    """What a trial of ``spec`` (a ``SweepSpec``) runs, for ``params``: the ``protocol.ScriptCall``
    of a script spec, None for a module's."""
    if spec.script is None:
        return None
    from orchestrator.protocol import ScriptCall

    return ScriptCall(str(spec.script_file or spec.script), script_argv(spec.args, params),
                      samples_per_step(spec.samples_per_step, params))


def command_line(script: str, argv: list[str], python: str = "python") -> str:
    """The trial as a shell command a person can paste: ``python train.py --bs 64``."""
    return shlex.join([python, script, *argv])


def pasteable(spec: Any, params: dict[str, Any], python: str = "python") -> str:
    """A script spec's trial as a command to paste in the working directory: the script's path
    relative to it where the script is under it (else absolute), its arguments for ``params``."""
    return command_line(shown_script(spec), script_argv(spec.args, params), python)


def shown_script(spec: Any) -> str:
    """The script's path as a command pasted in the working directory finds it."""
    path = Path(spec.script_file or spec.script)
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path.resolve()) if path.is_absolute() or spec.script_file else str(path)


_SYMBOLS = {ast.Pow: "**", ast.Mod: "%", ast.USub: "unary -", ast.MatMult: "@", ast.LShift: "<<", ast.RShift: ">>",
            ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^", ast.Invert: "~", ast.Not: "not"}
"""The operators ``parse_expression`` refuses, as written."""


def parse_expression(text: str) -> ast.expr:
    """``samples_per_step``'s expression, checked: numbers, parameter names, + - * / // and
    parentheses; ``ValueError`` (a rule) otherwise."""
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        raise ValueError("samples_per_step must be a number or an arithmetic expression over parameter "
                         "names, such as batch_size * accum") from None
    for node in ast.walk(tree):
        if isinstance(node, (ast.BinOp, ast.Name, ast.Load)) or type(node) in _OPS:
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) \
                and not isinstance(node.value, bool):
            continue
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.UAdd):
            continue
        what = ast.unparse(node) or _SYMBOLS.get(type(node), type(node).__name__)  # an operator unparses to ''
        raise ValueError("samples_per_step may use numbers, parameter names, + - * / // and parentheses"
                         + (f", not {what}" if what != ast.unparse(tree) else ""))  # the checker adds "got" the whole
    return tree


def expression_names(text: str) -> list[str]:
    """The parameter names ``samples_per_step`` reads."""
    return sorted({n.id for n in ast.walk(parse_expression(text)) if isinstance(n, ast.Name)})


def samples_per_step(text: str | int | float | None, params: dict[str, Any]) -> float | None:
    """``samples_per_step`` for one trial's parameters (None where the spec gives none)."""
    if text is None:
        return None
    if isinstance(text, (int, float)):
        return float(text)

    def value(node: ast.expr) -> float:
        if isinstance(node, ast.Constant):
            return float(node.value)  # type: ignore[arg-type]  # a constant that is no number raises here, as a bad name does
        if isinstance(node, ast.Name):
            return float(params[node.id])
        if isinstance(node, ast.UnaryOp):
            return value(node.operand)
        assert isinstance(node, ast.BinOp)
        return float(_OPS[type(node.op)](value(node.left), value(node.right)))

    return value(parse_expression(text))


def _not_positive(text: str, read: list[str], fixed: dict[str, Any], space: dict[str, Any]) -> str | None:
    """Where ``samples_per_step`` is no positive number: the first configuration of the names it
    reads (each choice, a range's two ends) that makes it fail, zero or less (a tour: ``batch_size /
    0`` gave a traceback, ``batch_size - 10`` negative throughputs recorded ok); None if none does."""
    import itertools
    import math

    def values(name: str) -> tuple[Any, ...]:
        if name in fixed or name == "device":
            return (fixed.get(name, "cpu"),)
        dim = space[name]
        return tuple(dim.values) if hasattr(dim, "values") else (dim.low, dim.high)

    for combo in itertools.islice(itertools.product(*(values(n) for n in read)), 10_000):
        params = dict(zip(read, combo))
        where = " ".join(f"{k}={v}" for k, v in params.items())
        try:
            got = samples_per_step(text, params)
        except (ArithmeticError, TypeError, ValueError) as exc:
            return f"at {where} it cannot be worked out ({type(exc).__name__}: {exc})"
        if got is None or not math.isfinite(got) or got <= 0:
            return f"at {where} it is {got:g}"
    return None


def find_script(given: str, spec_folder: Path, cwd: Path | None = None) -> Path | None:
    """The script's file: ``given`` as it is when absolute, else in the spec's folder, then in the
    working directory; None where neither has it."""
    path = Path(given).expanduser()
    if path.is_absolute():
        return path if path.is_file() else None
    for folder in (spec_folder, cwd or Path.cwd()):
        candidate = (folder / path).resolve()
        if candidate.is_file():
            return candidate
    return None


LAUNCHERS = ("accelerate", "torchrun", "deepspeed", "python", "python3", "mpirun", "srun")
"""Commands that start a training script rather than being one."""


def launched(given: str) -> str | None:
    """The launcher ``script`` names (``accelerate launch train.py``, ``/venv/bin/torchrun``), if any."""
    words = given.split()
    name = Path(words[0]).name if words else ""
    return name if name in LAUNCHERS or (name.startswith("python3.") and name[8:].isdigit()) else None


def launcher_rule(launcher: str, given: str, args: object) -> str:
    """Why a launcher is refused, and the script it starts (the first ``.py`` after it), as the fix."""
    words = given.split()[1:] + ([str(a) for a in args] if isinstance(args, list) else [])
    script = next((w for w in words if w.endswith(".py")), "train.py")
    if "-m" in words[:-1] and not any(w.endswith(".py") for w in words):  # python -m pkg.train: the module's file
        script = words[words.index("-m") + 1].replace(".", "/") + ".py"
    starts = "starts the training script in processes of its own" if not launcher.startswith("python") else \
        "runs the training script"
    return (f"{launcher} is a launcher: it {starts}, and a trial runs the script itself, as `python SCRIPT "
            f"ARGS` in one process measured from its optimizer steps; name the script (script: {script}) and "
            "put only its own flags in args")


def missing(given: str, spec_folder: Path, cwd: Path | None = None) -> str:
    """Where a script that ``find_script`` did not find was looked for, as a rule."""
    here = (cwd or Path.cwd()).resolve()
    path = Path(given).expanduser()
    folder = next((p for p in ([path] if path.is_absolute() else [spec_folder / path, here / path]) if p.is_dir()), None)
    if folder is not None:
        return f"{given} is a folder ({folder.resolve()}), not a script file"
    if path.is_absolute():
        return f"no file {given}"
    return f"no file {given} in the spec's folder ({spec_folder.resolve()}) or the working directory ({here})"


# -- the spec's rules --------------------------------------------------------------------------

def refuse_loop_knobs(c: Checker, top: dict[str, Any], fixed: object, space: object) -> None:
    """A script spec may not name a knob that only the harness's loop applies (``LOOP_KNOBS``):
    checked before any value, so that the line says what to do instead (each such knob noted:
    ``rules.Checker.note``)."""
    if "script" not in top:
        return
    for section, values in (("fixed", fixed), ("space", space)):
        for name, own in LOOP_KNOBS.items():
            if isinstance(values, dict) and name in values:
                c.refuse_whole(c.fail((section, name), f"{name} is applied by the harness's own training loop, which a "
                             f"script does not run; pass it to the script through args instead, under a name "
                              f"of your own (e.g. {own}: [...] and \"--{own.replace('_', '-')}\", \"{{{own}}}\")",
                              show_value=False))


def check_script(c: Checker, top: dict[str, Any], fixed: dict[str, Any], space: dict[str, Any],
                 spec_folder: Path) -> tuple[str | None, Path | None, tuple[str, ...], str | float | None]:
    """The script's keys checked (``c``: ``rules.Checker``): the script as given and its file
    (None where it is not there yet: a run refuses it, ``report`` needs no script), its arguments,
    and ``samples_per_step``. A spec without ``script`` may not give ``args`` or ``samples_per_step``."""
    given = top.get("script")
    if given is None:
        for key in ("args", "samples_per_step"):
            if key in top:
                raise c.fail((key,), f"{key} belongs to a script spec (script: train.py); an experiment "
                             "module reads its parameters itself", show_value=False)
        return None, None, (), None
    if "experiment" in top:
        raise c.fail(("script",), f"give either experiment (a module, line {c.lines.get(('experiment',))}) or "
                     "script (a training script), not both", show_value=False)
    if not isinstance(given, str) or not given.strip():
        raise c.fail(("script",), "script must be the path of a Python file, such as train.py", given)
    if find_script(given, spec_folder) is None and (launcher := launched(given)) is not None:  # not a file of that name
        raise c.fail(("script",), launcher_rule(launcher, given, top.get("args")), given)
    names = set(fixed) | set(space) | {"device"}
    raw_args = top.get("args", [])
    if raw_args is None:
        raw_args = []
    if not isinstance(raw_args, list):
        raise c.fail(("args",), "args must be a list of the script's arguments, such as [\"--bs\", \"{batch_size}\"]",
                     raw_args)
    used: set[str] = set()
    checked = [c.attempt(lambda: _check_arg(c, i, arg, names, fixed, space, used), None)
               for i, arg in enumerate(raw_args)]  # each argument's error noted (``rules.Checker``)
    args = [text for text in checked if text is not None]
    in_args = set(used)
    per_step = top.get("samples_per_step")
    if per_step is not None:
        if isinstance(per_step, bool) or not isinstance(per_step, (str, int, float)):
            raise c.fail(("samples_per_step",), "samples_per_step must be a number or an expression such as "
                         "batch_size * accum", per_step)
        if isinstance(per_step, (int, float)):
            if not per_step > 0:
                raise c.fail(("samples_per_step",), "samples_per_step must be positive", per_step)
        else:
            try:
                read = expression_names(per_step)
            except ValueError as exc:
                raise c.fail(("samples_per_step",), str(exc), per_step) from None
            for name in read:
                if name not in names:
                    raise c.fail(("samples_per_step",), f"{name} is no parameter of this spec (fixed or space)",
                                 per_step)
            if (bad := _not_positive(per_step, read, fixed, space)) is not None:
                raise c.fail(("samples_per_step",), f"samples_per_step must be a positive number for every "
                             f"configuration; {bad}", per_step)
            used.update(read)
    from orchestrator.spec import knobs

    if len(args) < len(checked):  # an argument's error is noted; what it uses is not known
        return given, None, (), None
    for section, values in (("fixed", fixed), ("space", space)):
        for name in values:
            outside = name in knobs.KNOBS and name not in SCRIPT_PARAMS  # applied to the process
            if name not in used and not outside:
                c.note(c.fail((section, name), f"the script never sees {name}: name it in args (\"{{{name}}}\") "
                              + ("or in samples_per_step, " if section == "fixed" else "") + "or remove it "
                              "(a script is given its settings through its arguments only)", show_value=False))
            elif section == "space" and name not in in_args and not outside:  # counted, never given: a fake
                c.note(c.fail((section, name), f"the script never sees {name}: samples_per_step counts it, but "
                              f"every trial would train alike; name it in args (\"{{{name}}}\") or remove it "
                              "(a script is given its settings through its arguments only)", show_value=False))
    return given, find_script(given, spec_folder), tuple(args), per_step


def _check_arg(c: Checker, i: int, arg: object, names: set[str], fixed: dict[str, Any], space: dict[str, Any],
               used: set[str]) -> str:
    """One of ``args``, checked; the names its placeholders use go into ``used``."""
    if isinstance(arg, dict) and len(arg) == 1 and next(iter(arg.values())) is None:  # [--bs, {batch_size}]
        name = next(iter(arg))
        raise c.fail(("args", i), f"YAML reads an unquoted {{{name}}} as a mapping: write it in quotes, "
                     f"\"{{{name}}}\"", show_value=False)
    if isinstance(arg, bool) or not isinstance(arg, (str, int, float)):
        raise c.fail(("args", i), "each argument is text or a number", arg)
    text = str(arg)
    try:
        fields = placeholders(text)
    except ValueError as exc:
        raise c.fail(("args", i), str(exc), text) from None
    for name, spec in fields:
        if name not in names:
            import difflib

            hint = difflib.get_close_matches(name, sorted(names), n=1, cutoff=0.6)
            did = f"did you mean {{{hint[0]}}}? " if hint else ""
            raise c.fail(("args", i), f"{{{name}}} is no parameter of this spec; {did}placeholders name a "
                         f"parameter in fixed or space, or device", text)
        if spec:
            _check_format(c, ("args", i), name, spec, fixed, space, text)
        used.add(name)
    return text


SCRIPT_PARAMS = ("batch_size", "seq_len", "lr", "seed")
"""Knob names that are a script's own parameters (the harness applies none of them to a script):
like any other name of its own, the script sees them only through ``args``."""


def _check_format(c: Checker, path: tuple, name: str, spec: str, fixed: dict[str, Any], space: dict[str, Any],
                  text: str) -> None:
    """``{name:FORMAT}``: the format must take every value the parameter can have."""
    values: tuple[Any, ...] = ()
    if name in fixed:
        values = (fixed[name],)
    elif hasattr(space.get(name), "values"):
        values = space[name].values
    elif name in space:
        values = (space[name].low, space[name].high)
    for value in values:
        try:
            format(value, spec)
        except (ValueError, TypeError) as exc:
            raise c.fail(path, f"{{{name}:{spec}}} cannot format {name}={value!r}: {exc}", text) from None


def check_script_file(spec: Any) -> None:
    """A script spec's file must be there when the sweep (or its dry run) starts, and be Python
    that compiles (compiled only, never run: a syntax error is said here, not by the smoke step)."""
    if spec.script is None:
        return
    if spec.script_file is None:
        raise spec.error(("script",), missing(spec.script, spec.path.parent))
    from orchestrator.scriptsource import check_source  # the trial's own check, here before any process

    path = Path(spec.script_file)
    if (problem := check_source(str(path))) is not None:
        hint = "" if path.suffix == ".py" else f" (it runs as `python {path.name}`: is it a Python file?)"
        raise spec.error(("script",), problem + hint)
