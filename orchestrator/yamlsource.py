"""Read YAML into plain Python values while remembering the line of every key and item.

PyYAML's composer gives nodes with positions; we build the values ourselves so that duplicate
keys are an error (PyYAML silently keeps the last one) and every field path maps to a line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import yaml

from orchestrator.errors import SpecError

Path_ = tuple  # a field path such as ("space", "batch_size", 2)
MERGE_TAG = "tag:yaml.org,2002:merge"


class Document(NamedTuple):
    data: Any
    """The document as plain dicts, lists and scalars."""
    lines: dict[tuple, int]
    """Field path -> 1-based line of its key (or of the item, in a list)."""
    spelled: dict[tuple, str]
    """Field path -> the text as written, for booleans and nulls spelled otherwise than
    ``true``/``false``/``null`` (``yes``, ``off``, ``~``): a message can then say what YAML read."""


def load_yaml(path: Path) -> Document:
    """Return the document, the line of every field path and how its booleans were spelled."""
    name = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError("no such file", file=name) from None
    except IsADirectoryError:
        raise SpecError("is a folder, not a spec file", file=name) from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"not a text file: byte {exc.start} is not UTF-8", file=name) from None
    except OSError as exc:
        raise SpecError(f"cannot read the file: {exc.strerror or exc}", file=name) from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        line, problem = _describe(exc)
        raise SpecError(f"not valid YAML: {problem}", file=name, line=line) from None
    if node is None:
        raise SpecError("the file is empty; a spec needs at least `name:` and `experiment:`",
                        file=name, line=1)
    lines: dict[tuple, int] = {}
    spelled: dict[tuple, str] = {}
    loader = yaml.SafeLoader("")
    data = _build(node, (), lines, spelled, loader, name)
    return Document(data, lines, spelled)


def _describe(exc: yaml.YAMLError) -> tuple[int | None, str]:
    """PyYAML's error as (line, one readable sentence)."""
    mark = getattr(exc, "problem_mark", None)
    line = mark.line + 1 if mark is not None else None
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    context = getattr(exc, "context", None)
    context_mark = getattr(exc, "context_mark", None)
    if "'\\t'" in problem:
        return line, "a tab character; indent with spaces (YAML does not allow tabs)"
    if context and problem.startswith("but "):  # "expected a single document ... but found another"
        return line, f"{context} {problem}"
    if context and context_mark is not None and context_mark.line + 1 != line:
        problem += f" ({context} that starts on line {context_mark.line + 1})"
    return line, problem


def _key_text(key: Any) -> str:
    if key is None:
        return "null"
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, (list, tuple)):
        return "a list"
    if isinstance(key, dict):
        return "a mapping"
    return str(key)


def _build(node: yaml.Node, path: tuple, lines: dict[tuple, int], spelled: dict[tuple, str],
           loader: yaml.SafeLoader, name: str) -> Any:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key_line = key_node.start_mark.line + 1
            if key_node.tag == MERGE_TAG:
                raise SpecError("YAML merge keys (<<) are not supported; write the keys out",
                                file=name, line=key_line, field=_dotted(path) or None)
            key = _construct(key_node, loader, name)
            if not isinstance(key, str):
                raise SpecError(f"keys must be names, got {_key_text(key)}"
                                + (" (quote it to use it as a name)" if isinstance(key, (int, float, bool)) else ""),
                                file=name, line=key_line, field=_dotted(path) or None)
            if key in out:
                first = lines[path + (key,)]
                raise SpecError(f"duplicate key '{key}' (first given on line {first})", file=name,
                                line=key_line, field=_dotted(path + (key,)))
            out[key] = _build(value_node, path + (key,), lines, spelled, loader, name)
            lines[path + (key,)] = key_line
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_build(item, path + (i,), lines, spelled, loader, name)
                for i, item in enumerate(node.value)]
    value = _construct(node, loader, name)
    if (isinstance(value, bool) or value is None) and node.value not in ("true", "false", "null"):
        spelled[path] = node.value
    return value


def _construct(node: yaml.Node, loader: yaml.SafeLoader, name: str) -> Any:
    """One scalar; a tag PyYAML's safe loader does not know, or a malformed date, is a SpecError."""
    try:
        return loader.construct_object(node, deep=True)
    except (yaml.YAMLError, ValueError, TypeError) as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(f"not valid YAML: {problem} in {node.value!r}" if isinstance(node, yaml.ScalarNode)
                        else f"not valid YAML: {problem}", file=name,
                        line=node.start_mark.line + 1) from None


def _dotted(path: tuple) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


dotted = _dotted
