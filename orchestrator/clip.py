"""Messages shortened for a line without cutting a word: the one rule every printed excerpt
(a trial's failure, a report's note, doctor's, a YAML key) follows. Pure functions, table-tested."""

from __future__ import annotations

import re

ELLIPSIS = "…"
CPU_ALLOCATOR_NOISE = re.compile(r"\[enforce fail at [^\]]*\] [^.]*\. ")
"""``[enforce fail at alloc_cpu.cpp:127] err == 0. `` before the CPU allocator's own message."""


def clip(text: str, width: int) -> str:
    """``text``'s first line (the rest is left out), whole if it fits in ``width`` characters;
    else cut at the last whole word that leaves room for "…", which says that more was there. An
    aside it would open and not close is left out whole, and a single word longer than ``width``
    is the one case cut inside a word."""
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    if len(first) <= width:
        return first
    room = width - 1  # the ellipsis takes one
    word = first.rfind(" ", 0, room + 1)
    cut = first[:word] if word > 0 else first[:room]
    if cut.count("(") > cut.count(")") and cut.rfind("(") >= room // 2:
        cut = cut[:cut.rfind("(")]  # not "(or…": the aside goes whole
    return cut.rstrip(" ,;:(-") + ELLIPSIS


PRINTED = "; it printed: "
"""Between a script's failure and the last lines it printed (``harness/scriptfile.describe_failure``)."""


def short_detail(detail: str, width: int) -> str:
    """A trial's failure for a line: without the CPU allocator's boilerplate, which would push its
    message ("DefaultCPUAllocator: can't allocate memory: you tried to allocate ...") out. Where a
    script exited with no exception of its own (``the script exited ...``), what it printed last
    says why: the end of that is kept, its last line whole where it fits (argparse's usage lines
    come before its ``error: ...``), with at least a third of the line for the failure's first
    words. A script's exception is kept first (after it, Lightning's last line is a tip)."""
    text = clip(CPU_ALLOCATOR_NOISE.sub("", detail), len(detail) + 1)  # the first line, whole
    head, said, tail = text.partition(PRINTED)
    if not said or len(text) <= width or not head.startswith("the script exited"):
        return clip(text, width)
    last = tail.rsplit(" | ", 1)[-1]  # scriptfile.last_lines joins the lines with " | "
    room = min(max(width - len(head) - len(PRINTED), len(last) + 1), width - len(PRINTED) - width // 3)
    head = clip(head, width - len(PRINTED) - min(room, len(tail)))
    return head + PRINTED + clip_start(tail, width - len(head) - len(PRINTED))


def clip_start(text: str, width: int) -> str:
    """``text`` whole if it fits in ``width``, else its end from a whole word, after "…"."""
    if len(text) <= width:
        return text
    start = text.find(" ", len(text) - width + 1)
    return ELLIPSIS + (text[start + 1:] if start >= 0 else text[len(text) - width + 1:])
