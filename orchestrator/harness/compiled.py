"""A ``compile: true`` trial's compilation: where Inductor keeps its caches, and how long the
trial compiled.

**The caches.** Inductor's FX graph cache and AOTAutograd's cache (both on by default in torch 2.x:
``torch._inductor.config.fx_graph_cache``, ``torch._functorch.config.enable_autograd_cache``) live
under ``TORCHINDUCTOR_CACHE_DIR``, read each time a cache is opened
(``torch/_inductor/runtime/cache_dir_utils.py``, ``cache_dir``; Triton's kernels go under it too,
unless ``TRITON_CACHE_DIR`` says otherwise). Left alone it is ``/tmp/torchinductor_<user>``: shared
with everything else on the machine, and gone when ``/tmp`` is cleaned. A sweep gives each trial a
folder of its study (``TrialConfig.compile_cache``: ``.inductor`` in the study's trial folder,
``trialdir.COMPILE_CACHE``), so that its trials, its repeats and a resumed run find the graphs
compiled before: a second compile of the same graph loads it (measured on this 2-core CPU, a small
MLP: 24.4 s to compile, 2.3 s from the cache). A ``TORCHINDUCTOR_CACHE_DIR`` the user set is kept
(the launcher then gives no folder).

**The time.** ``seconds`` reads TorchDynamo's own accounting (``torch._dynamo.utils.
compilation_time_metrics``): each frame's compilation (``_compile.compile_inner``: tracing, AOT
Autograd, Inductor, the cache lookups) and the backward's, compiled on its first call
(``backward._backward_impl``). It is part of ``startup_s`` (compilation runs in the first warm-up
step), and the result reports it apart as ``compile_s``.
"""

from __future__ import annotations

import os

CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"
COMPILE_KEYS = ("_compile.compile_inner", "backward._backward_impl")
"""TorchDynamo's timers of a frame's compilation and of the backward's (torch 2.11-2.13)."""


def use_cache(folder: str | None) -> None:
    """Inductor's caches in ``folder`` from now on, in this process (None: left as they are)."""
    if folder:
        os.makedirs(folder, exist_ok=True)
        os.environ[CACHE_ENV] = folder


def seconds() -> float | None:
    """Seconds this process has spent compiling (every frame, forward and backward), or None
    where TorchDynamo keeps no such record (another torch version)."""
    try:
        from torch._dynamo.utils import compilation_time_metrics
    except ImportError:
        return None
    found = [sum(compilation_time_metrics[k]) for k in COMPILE_KEYS if k in compilation_time_metrics]
    return float(sum(found)) if found else None


def cache_folder(work_dir: str) -> str | None:
    """The folder a sweep gives its trials (None where the user set ``TORCHINDUCTOR_CACHE_DIR``:
    theirs is kept). Orchestrator side: no torch."""
    from orchestrator.trialdir import COMPILE_CACHE

    if os.environ.get(CACHE_ENV):
        return None
    return os.path.join(work_dir, COMPILE_CACHE)
