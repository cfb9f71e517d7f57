"""Read YAML into plain Python values while remembering the line of every key and item.

PyYAML's composer gives nodes with positions; we build the values ourselves so that duplicate
keys are an error (PyYAML silently keeps the last one) and every field path maps to a line.

Whatever the file holds, ``load_yaml`` ends in a ``Document`` or one ``SpecError`` with the file
(and the line where there is one), in bounded time and memory: only regular files are opened
(a FIFO or a device would block or never end), at most ``MAX_BYTES`` are read, nesting is capped
at ``MAX_DEPTH`` levels, an alias inside the value it names is refused, and the values built,
aliases expanded, are capped at ``MAX_VALUES`` (an "alias bomb" of a few lines expands to 10**9).
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any, NamedTuple, cast

import yaml

from orchestrator.errors import SpecError

Path_ = tuple  # a field path such as ("space", "batch_size", 2)
MERGE_TAG = "tag:yaml.org,2002:merge"

MAX_BYTES = 256 * 1024
"""A spec is a few KB (the largest in sweeps/ is 1.3 KB). The worst file this size measured (a list
of 87,000 items, refused by MAX_VALUES) loads in about 1 s with libyaml under PyYAML's composer and
3 s with PyYAML's pure-Python parser (the fallback), on a busy 2-core CPU."""
MAX_DEPTH = 20
"""Levels of nesting; a spec needs 5 (``search.memory_order.NAME.VALUE``)."""
MAX_VALUES = 10_000
"""Keys, items and scalars after expanding aliases; a spec holds a few hundred."""

_LINE_BREAK = re.compile("\r\n|[\n\r\x85\u2028\u2029]")  # what PyYAML counts as a line break

try:  # libyaml's scanner and parser (C), with PyYAML's composer on top: 10x faster than pure Python
    from yaml._yaml import CParser as _CParser
except ImportError:  # PyYAML built without libyaml
    _CParser = None  # type: ignore[misc, assignment]  # no libyaml: the pure-Python composer below


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
    text = _read_text(path, name)
    loader = None
    try:
        loader = _Loader(text, name)  # the reader checks every character here
        node = loader.get_single_node()
    except yaml.YAMLError as exc:
        line, problem = _describe(exc, text, _CParser is not None)
        raise SpecError(f"not valid YAML: {problem}", file=name, line=line) from None
    except RecursionError:  # not expected below MAX_DEPTH; never a traceback all the same
        raise SpecError(f"nested too deeply (a spec needs at most {MAX_DEPTH} levels)", file=name) from None
    finally:
        if loader is not None:
            loader.dispose()
    if node is None:
        raise SpecError("the file is empty; a spec needs at least `name:` and `experiment:`",
                        file=name, line=1)
    builder = _Builder(name)
    data = builder.build(node, (), 0, ((), node.start_mark.line + 1, None), False)
    return Document(data, builder.lines, builder.spelled)


def _read_text(path: Path, name: str) -> str:
    """The file as text: a regular file of at most ``MAX_BYTES`` in UTF-8, else a SpecError.

    Opened non-blocking and checked with ``fstat`` before any read: opening a FIFO for reading
    blocks until a writer comes, and a device such as /dev/zero never ends."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise SpecError("no such file", file=name) from None
    except IsADirectoryError:
        raise SpecError("is a folder, not a spec file", file=name) from None
    except OSError as exc:
        raise SpecError(f"cannot read the file: {exc.strerror or exc}", file=name) from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise SpecError("is a folder, not a spec file", file=name)
        if not stat.S_ISREG(info.st_mode):
            raise SpecError(f"is {_file_kind(info.st_mode)}, not a spec file (a spec must be a regular file)",
                            file=name)
        if info.st_size > MAX_BYTES:
            raise SpecError(f"the file is {_size(info.st_size)}; a spec is at most {_size(MAX_BYTES)} "
                            "(is it the right file?)", file=name)
        raw = b""
        while len(raw) <= MAX_BYTES:  # a file that grows while it is read is still capped
            chunk = os.read(fd, MAX_BYTES + 1 - len(raw))
            if not chunk:
                break
            raw += chunk
    except OSError as exc:
        raise SpecError(f"cannot read the file: {exc.strerror or exc}", file=name) from None
    finally:
        os.close(fd)
    if len(raw) > MAX_BYTES:
        raise SpecError(f"the file is larger than {_size(MAX_BYTES)}, the most a spec may be "
                        "(is it the right file?)", file=name)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise SpecError(f"not a text file: byte {exc.start} (0x{raw[exc.start]:02x}) is not UTF-8; "
                        "save the spec as UTF-8", file=name, line=line) from None


def _file_kind(mode: int) -> str:
    for test, kind in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "a special file"


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n // 1024} KiB" if n % 1024 == 0 else f"{n:,} bytes"


if _CParser is not None:
    class _Composer(yaml.composer.Composer, _CParser, yaml.resolver.Resolver):
        """PyYAML's composer (Python, so ``compose_node`` can be checked below) over libyaml's
        events, which carry the same marks (0-based line and column)."""

        def __init__(self, text: str) -> None:
            _CParser.__init__(self, text)
            yaml.composer.Composer.__init__(self)
            yaml.resolver.Resolver.__init__(self)
else:
    _Composer = yaml.SafeLoader  # type: ignore[misc, assignment]  # the pure-Python loader in the C one's place


class _Loader(_Composer):
    """A YAML composer: nesting is capped, and an alias inside the value its anchor names
    (``a: &x [*x]``, which builds a value that contains itself) is refused where it is written."""

    def __init__(self, text: str, name: str) -> None:
        super().__init__(text)
        self.name = name
        self.depth = 0
        self.open_anchors: dict[str, int] = {}
        """Anchors whose value is being composed -> the line of the anchor."""

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event = self.peek_event()
        line = event.start_mark.line + 1  # type: ignore[union-attr]  # composed while events remain, each with its mark
        if isinstance(event, yaml.AliasEvent):
            if event.anchor in self.open_anchors:
                raise SpecError(f"the alias *{event.anchor} is inside the value it names (&{event.anchor} on "
                                f"line {self.open_anchors[event.anchor]}); a spec cannot contain itself",
                                file=self.name, line=line)
            return _alias(super().compose_node(parent, index), event)  # type: ignore[arg-type]  # an alias names a node
        if not isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            return super().compose_node(parent, index)
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise SpecError(f"nested more than {MAX_DEPTH} levels deep (a spec needs at most 5)",
                            file=self.name, line=line)
        anchor = event.anchor
        if anchor is not None and anchor not in self.anchors:  # a duplicate anchor: PyYAML says so
            self.open_anchors[anchor] = line
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1
            if anchor is not None and self.open_anchors.get(anchor) == line:
                del self.open_anchors[anchor]


def _alias(node: yaml.Node, event: yaml.AliasEvent) -> yaml.Node:
    """The anchored node as seen from where the alias is written: the same value (shared, not
    copied), the alias's position, and ``alias`` set to its name."""
    seen: yaml.Node
    # (the marks: libyaml's parser gives its own Mark class, which the stubs do not allow for)
    if isinstance(node, yaml.ScalarNode):
        seen = yaml.ScalarNode(node.tag, node.value, event.start_mark, event.end_mark, style=node.style)  # type: ignore[arg-type]  # libyaml's Mark
    else:
        collection = cast(yaml.CollectionNode, node)  # a sequence or a mapping
        seen = type(collection)(collection.tag, collection.value, event.start_mark, event.end_mark,  # type: ignore[arg-type]  # libyaml's Mark
                                flow_style=collection.flow_style)
    seen.alias = event.anchor  # type: ignore[union-attr]  # our own mark on the node, read by the builder
    return seen


def _describe(exc: yaml.YAMLError, text: str, libyaml: bool) -> tuple[int | None, str]:
    """The parser's error as (line, one readable sentence)."""
    mark = getattr(exc, "problem_mark", None)
    line = mark.line + 1 if mark is not None else None
    if isinstance(exc, yaml.reader.ReaderError):  # a character YAML does not allow; no mark, a position
        if libyaml:  # a position in the UTF-8 bytes libyaml was given, not in the text
            before = text.encode("utf-8", "surrogatepass")[:exc.position].decode("utf-8", "ignore")
        else:
            before = text[:exc.position]
        line = len(_LINE_BREAK.findall(before)) + 1
        if isinstance(exc.character, int):
            return line, f"character U+{exc.character:04X} is not allowed in YAML (a control character)"
        return line, str(exc).splitlines()[0]
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    context = getattr(exc, "context", None)
    context_mark = getattr(exc, "context_mark", None)
    if "maximum nesting depth" in problem:  # PyYAML 6.0.4 (what a fresh install gets) stops deep nesting before our composer does
        return line, f"nested more than {MAX_DEPTH} levels deep (a spec needs at most 5)"
    if "'\\t'" in problem or " tab " in problem or (mark is not None and _tab_at(text, mark)):
        return line, "a tab character; indent with spaces (YAML does not allow tabs)"
    if context and problem.startswith("but "):  # "expected a single document ... but found another"
        return line, f"{context} {problem}"
    if context and context_mark is not None and context_mark.line + 1 != line:
        problem += f" ({context} that starts on line {context_mark.line + 1})"
    return line, problem


def _tab_at(text: str, mark: Any) -> bool:
    """Whether the error at ``mark`` is a tab's doing: one in the line's indentation, at the mark
    or just before it (libyaml's messages do not always name the tab; PyYAML's do)."""
    lines = _LINE_BREAK.split(text, maxsplit=mark.line + 1)
    line = lines[mark.line] if mark.line < len(lines) else ""
    indent = line[:len(line) - len(line.lstrip(" \t"))]
    return "\t" in indent or "\t" in line[max(mark.column - 1, 0):mark.column + 1]


def _key_text(key: object) -> str:
    if key is None:
        return "null"
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, (list, tuple)):
        return "a list"
    if isinstance(key, dict):
        return "a mapping"
    return str(key)


def _short(text: str, width: int = 40) -> str:
    from orchestrator.clip import clip

    return clip(text, width)


class _Builder:
    """Plain values from nodes, with the line of every field path; bounded in depth and count."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.lines: dict[tuple, int] = {}
        self.spelled: dict[tuple, str] = {}
        self.loader = yaml.SafeLoader("")
        self.count = 0

    def build(self, node: yaml.Node, path: tuple, depth: int, origin: tuple[tuple, int, str | None],
              expanding: bool) -> Any:
        """``origin``: the path, line and alias (or None) of the innermost value on the way here
        that is written where it stands: an alias, but not what it expands to (``expanding``).
        A message about size points there."""
        self.count += 1
        if not expanding:
            alias = getattr(node, "alias", None)
            origin = (path, self.lines.get(path, node.start_mark.line + 1), alias)
            expanding = alias is not None
        if self.count > MAX_VALUES or depth > MAX_DEPTH:
            raise self.too_big(origin)
        self.lines[path] = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            out: dict[Any, Any] = {}
            for key_node, value_node in node.value:
                key_line = key_node.start_mark.line + 1
                if key_node.tag == MERGE_TAG:
                    raise SpecError("YAML merge keys (<<) are not supported; write the keys out",
                                    file=self.name, line=key_line, field=_dotted(path) or None)
                key = (self.construct(key_node) if isinstance(key_node, yaml.ScalarNode)
                       else [] if isinstance(key_node, yaml.SequenceNode) else {})
                if not isinstance(key, str):
                    raise SpecError(f"keys must be names, got {_key_text(key)}"
                                    + (" (quote it to use it as a name)" if isinstance(key, (int, float, bool)) else ""),
                                    file=self.name, line=key_line, field=_dotted(path) or None)
                if key in out:
                    first = self.lines[path + (key,)]
                    raise SpecError(f"duplicate key '{_short(key)}' (first given on line {first})", file=self.name,
                                    line=key_line, field=_dotted(path + (key,)))
                self.lines[path + (key,)] = key_line
                out[key] = self.build(value_node, path + (key,), depth + 1, origin, expanding)
                self.lines[path + (key,)] = key_line
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, path + (i,), depth + 1, origin, expanding) for i, item in enumerate(node.value)]
        value = self.construct(cast(yaml.ScalarNode, node))  # neither a mapping nor a sequence: a scalar
        if (isinstance(value, bool) or value is None) and node.value not in ("true", "false", "null"):
            self.spelled[path] = node.value
        return value

    def too_big(self, origin: tuple[tuple, int, str | None]) -> SpecError:
        path, line, alias = origin
        if self.count > MAX_VALUES:
            rule = (f"expanding the alias *{alias} here makes more than {MAX_VALUES:,} values" if alias
                    else f"the document has more than {MAX_VALUES:,} values by this point")
            rule += " (a spec holds a few hundred)"
        else:
            rule = (f"expanding the alias *{alias} here nests" if alias else "nested")
            rule += f" more than {MAX_DEPTH} levels deep (a spec needs at most 5)"
        return SpecError(rule, file=self.name, line=line, field=_dotted(path) or None)

    def construct(self, node: yaml.ScalarNode) -> Any:
        """One scalar; a tag PyYAML's safe loader does not know, a value its tag cannot read
        (``!!timestamp 2024``, ``!!bool maybe``), a malformed date or a number too long to
        convert is a SpecError."""
        try:
            return self.loader.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        except ValueError as exc:  # int('1' * 5000), a 13th month
            problem = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            if "Exceeds the limit" in problem:  # Python converts at most 4300 digits
                problem = f"a number of {len(node.value):,} digits is too long"
        except Exception:  # noqa: BLE001 - PyYAML's constructors fail on bad tagged values in many ways
            problem = f"cannot be read as {node.tag.replace('tag:yaml.org,2002:', '!!')}"
        raise SpecError(f"not valid YAML: {problem} in {_short(node.value)!r}", file=self.name,
                        line=node.start_mark.line + 1)


def _dotted(path: tuple) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


dotted = _dotted
