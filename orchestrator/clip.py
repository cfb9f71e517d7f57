"""Messages shortened for a line without cutting a word: the one rule every printed excerpt
(a trial's failure, a report's note, a YAML key) follows. Pure functions, table-tested."""

from __future__ import annotations

import re

ELLIPSIS = "…"
CPU_ALLOCATOR_NOISE = re.compile(r"\[enforce fail at [^\]]*\] [^.]*\. ")
"""``[enforce fail at alloc_cpu.cpp:127] err == 0. `` before the CPU allocator's own message."""


def clip(text: str, width: int) -> str:
    """``text``'s first line (the rest is left out), whole if it fits in ``width`` characters;
    else cut after the last whole sentence that fits (when that keeps at least half the width) or
    the last whole word, with "…" saying that more was there. A single word longer than ``width``
    is the one case cut inside a word."""
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    if len(first) <= width:
        return first
    room = width - 1  # the ellipsis takes one
    sentence = first.rfind(". ", 0, room)
    if sentence >= room // 2:
        return first[:sentence + 1] + " " + ELLIPSIS if sentence + 3 <= width else first[:sentence + 1] + ELLIPSIS
    word = first.rfind(" ", 0, room + 1)
    cut = first[:word] if word > 0 else first[:room]
    if cut.count("(") > cut.count(")") and cut.rfind("(") >= room // 2:
        cut = cut[:cut.rfind("(")]  # not "(or…": the aside goes whole
    return cut.rstrip(" ,;:(-") + ELLIPSIS


def short_detail(detail: str, width: int) -> str:
    """A trial's failure for a line: without the CPU allocator's boilerplate, which would push its
    message ("DefaultCPUAllocator: can't allocate memory: you tried to allocate ...") out."""
    return clip(CPU_ALLOCATOR_NOISE.sub("", detail), width)
