"""Metric names (with their units) shared by the harness, the orchestrator and MLflow."""

from __future__ import annotations

SAMPLES_PER_S = "samples_per_s"
TOKENS_PER_S = "tokens_per_s"
STEP_TIME_MS_P50 = "step_time_ms_p50"
STEP_TIME_MS_P90 = "step_time_ms_p90"
THROUGHPUT_CV = "throughput_cv"            # coefficient of variation over sub-windows (0.02 = 2 %)
THROUGHPUT_CI95 = "throughput_ci95"        # the throughput's 95% half-width, log scale (0.05 = +-5 %): harness/spread.py
PEAK_MEMORY_GIB = "peak_memory_gib"        # the headline peak; meaning per backend in docs/measurement.md
PEAK_ALLOCATED_GIB = "peak_allocated_gib"  # CUDA/MPS: peak bytes held by live tensors
PEAK_RESERVED_GIB = "peak_reserved_gib"    # CUDA/MPS: peak bytes the caching allocator held
PEAK_DRIVER_GIB = "peak_driver_gib"        # MPS: max driver_allocated_memory sampled per step
PEAK_RSS_GIB = "peak_rss_gib"              # the trial process's peak resident set
LOSS = "loss"                              # mean training loss over the timed window
LOSS_FIRST = "loss_first"                  # loss of the first warm-up step
MEASURE_S = "measure_s"                    # length of the timed window
MEASURE_STEPS = "measure_steps_done"       # optimizer steps in the timed window
DURATION_S = "duration_s"                  # wall time of the whole trial process
STARTUP_S = "startup_s"                    # the trial's start to the end of warm-up (harness/marks.py)
COMPILE_S = "compile_s"                    # compile: true: seconds compiling, within startup_s (harness/compiled.py)
HOST_CPU_OTHERS = "host_cpu_others"        # share of the host's CPU other processes used in the window (harness/hostcpu.py)

# System swap around the trial (orchestrator/harness/swap.py): system-wide counters, so only what
# moved while the trial ran; 0.0 on a machine without swap (a real reading, not a missing one).
SWAP_OUT_GIB = "swap_out_gib"              # swapped out during the timed window
SWAP_IN_GIB = "swap_in_gib"                # swapped in during the timed window
WARMUP_SWAP_OUT_GIB = "warmup_swap_out_gib"  # swapped out from the trial's start to the end of warm-up
WARMUP_SWAP_IN_GIB = "warmup_swap_in_gib"  # swapped in from the trial's start to the end of warm-up
SWAP_USED_GIB = "swap_used_gib"            # swap in use at the end of the window
SWAP_USED_BEFORE_GIB = "swap_used_before_gib"  # swap in use when the trial started (not its doing)
SWAP_METRICS = (SWAP_OUT_GIB, SWAP_IN_GIB, WARMUP_SWAP_OUT_GIB, WARMUP_SWAP_IN_GIB, SWAP_USED_GIB,
                SWAP_USED_BEFORE_GIB)
MPS_FALLBACK_OPS = "mps_fallback_ops"      # MPS: distinct ops that fell back to the CPU (names in info)

# What a spec may name as objective or constraint.
OBJECTIVE_METRICS = (
    SAMPLES_PER_S, TOKENS_PER_S, STEP_TIME_MS_P50, STEP_TIME_MS_P90, PEAK_MEMORY_GIB,
    PEAK_ALLOCATED_GIB, PEAK_RESERVED_GIB, PEAK_RSS_GIB, LOSS, DURATION_S,
)
