"""Read YAML into plain Python values while remembering the line of every key and item.

PyYAML's composer gives nodes with positions; we build the values ourselves so that duplicate
keys are an error (PyYAML silently keeps the last one) and every field path maps to a line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from orchestrator.errors import SpecError

Path_ = tuple  # a field path such as ("space", "batch_size", 2)


def load_yaml(path: Path) -> tuple[Any, dict[tuple, int]]:
    """Return ``(data, lines)``: the document and a map from field path to 1-based line."""
    name = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError("no such file", file=name) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"cannot read the file ({exc.__class__.__name__}: {exc})", file=name) from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(f"not valid YAML: {problem}", file=name, line=line) from None
    if node is None:
        raise SpecError("the file is empty; a spec needs at least `name:` and `experiment:`",
                        file=name, line=1)
    lines: dict[tuple, int] = {}
    loader = yaml.SafeLoader("")
    data = _build(node, (), lines, loader, name)
    return data, lines


def _build(node: yaml.Node, path: tuple, lines: dict[tuple, int], loader: yaml.SafeLoader,
           name: str) -> Any:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool)) or key is None:
                raise SpecError(f"keys must be plain names, got {key!r}", file=name,
                                line=key_node.start_mark.line + 1, field=_dotted(path) or None)
            if key in out:
                first = lines[path + (key,)]
                raise SpecError(f"duplicate key {key!r} (first given on line {first})", file=name,
                                line=key_node.start_mark.line + 1,
                                field=_dotted(path + (key,)))
            out[key] = _build(value_node, path + (key,), lines, loader, name)
            lines[path + (key,)] = key_node.start_mark.line + 1
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_build(item, path + (i,), lines, loader, name) for i, item in enumerate(node.value)]
    return loader.construct_object(node, deep=True)


def _dotted(path: tuple) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


dotted = _dotted
