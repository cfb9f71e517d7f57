"""The ``auto`` search's verdict (whether a sweep is done, and why) and its decision (the next
configuration, and how it was chosen): what the planner returns and the sweep reads. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Verdict:
    """Whether the search is done, and why."""

    done: bool
    chance: float
    """Probability that some configuration left beats the best measured by more than the band."""
    left: int
    """Configurations without a result that are not running."""
    too_large: int
    """Of those, how many are proven or predicted (p < 0.05) not to fit."""
    reason: str = ""
    lead: float = 1.0
    """The likeliest unmeasured configuration's chance to fit and beat the best by more than the band."""
    unsure: bool = False
    """Done without being sure: a measured rival may still beat the best by more than the band
    (``remeasure``); ``reason`` says which, and what would tell them apart."""
    ends_running: bool = False
    """Done, and the trials in flight cannot change it either (``flight``): the sweep stops them."""


@dataclass
class Decision:
    config: dict[str, Any] | None
    verdict: Verdict
    why: str = ""
    """How the configuration was chosen (``boundary``, ``coverage``, ``improvement`` or ``remeasure``:
    measured again, alternating with the best), for the record."""


def reason(chance: float, left: int, too_large: int, band: float, nothing_left: bool = False) -> str:
    if nothing_left:
        return (f"every configuration that could fit has a result ({too_large} left are proven not to fit)"
                if left else "every configuration has a result")
    return (f"no configuration left is likely to beat the best by more than {band:.0%} (chance {chance:.1%}); "
            f"{left} not measured, {too_large} of them predicted not to fit")
