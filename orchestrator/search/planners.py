"""The ``auto`` search's planner for a space, built once per command: a resumed study's command
asks it twice (``report.resume``: is the search done? then ``proposer.Proposer``: what next?), and
for 100,000 configurations building one is a second of the command's start-up. The first asks
with ``keep``; the second takes that planner over (it has decided once, on the same study's
results) rather than building another. Nothing else is kept: a planner fits its model to the
results it is given and keeps the fit for the next, larger ones, so two sweeps in one process (the
replays) must not share one."""

from __future__ import annotations

from typing import Any

from orchestrator.search.planner import Planner

_kept: tuple[str, Planner] | None = None


def planner_for(configs: list[dict[str, Any]], *args: Any, keep: bool = False, **kwargs: Any) -> Planner:
    """``Planner(configs, *args, **kwargs)``: the one kept by the last call with ``keep`` when it was given
    the same (taken over: it is kept no more), else a new one (kept, with ``keep``). The space's
    configurations come from the same plan: their number and ends tell them apart."""
    global _kept
    key = repr((len(configs), configs[:1], configs[-1:], args, sorted(kwargs.items())))
    if _kept is not None and _kept[0] == key:
        planner, _kept = _kept[1], None
        return planner
    planner = Planner(configs, *args, **kwargs)
    _kept = (key, planner) if keep else None
    return planner
