"""Which ops fell back from MPS to the CPU during a trial (``PYTORCH_ENABLE_MPS_FALLBACK=1``).

With the fallback on, an op the MPS backend lacks runs on the CPU instead of raising, with a
``UserWarning`` ("The operator 'aten::...' is not currently supported on the MPS backend and will
fall back to run on the CPU. ..."). Its C++ side (``aten/src/ATen/mps/MPSFallback.mm``) warns with
``TORCH_WARN_ONCE`` from one call site, so by default the process hears of the *first* op only;
``torch.set_warn_always(True)`` makes it warn on every call (``backend.warn_every_fallback``, on
during warm-up). This module records the op named in each such warning, passes each op's first
warning on to the log, and lets every other warning through untouched. No torch here.
"""

from __future__ import annotations

import re
import warnings
from typing import Any

MESSAGE = r"The operator '[^']+' is not currently supported on the MPS backend and will fall back to run on the CPU"
_OP = re.compile(r"The operator '([^']+)' is not currently supported on the MPS backend and will fall back")


def op_name(message: str) -> str | None:
    """``aten::bitwise_and.Tensor_out`` from a fallback warning's text; None for any other text."""
    m = _OP.search(message)
    return m.group(1) if m else None


class FallbackLog:
    """Context manager: ``ops`` lists the ops that fell back while it was open, in order."""

    def __init__(self) -> None:
        self.ops: list[str] = []
        self._saved: Any = None
        self._show: Any = None

    def __enter__(self) -> FallbackLog:
        self._saved = warnings.catch_warnings()  # restores filters and showwarning on exit
        self._saved.__enter__()
        # "always": Python's once-per-location registry would otherwise hide a second op
        # warned from the same line of the model
        warnings.filterwarnings("always", message=MESSAGE, category=UserWarning)
        self._show = warnings.showwarning
        warnings.showwarning = self._showwarning
        return self

    def _showwarning(self, message: object, category: object, filename: str, lineno: int, file: object = None,
                     line: str | None = None) -> None:
        op = op_name(str(message))
        if op is None:
            self._show(message, category, filename, lineno, file, line)
        elif op not in self.ops:
            self.ops.append(op)
            self._show(message, category, filename, lineno, file, line)

    def __exit__(self, *exc: object) -> None:
        self._saved.__exit__(*exc)
