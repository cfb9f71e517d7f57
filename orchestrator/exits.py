"""Every exit code of ``orchestrate``, in one place (``orchestrate --help`` lists them)."""

from __future__ import annotations

import errno
import signal

OK = 0
"""The sweep finished, or stopped itself (out-of-memory trials are results; so is "nothing fit")."""
INTERNAL = 1
"""An unexpected error: its traceback is printed."""
USAGE = 2
"""An invalid spec, flag, experiment or study (one line on stderr, naming the file and line)."""
FAILED = 3
"""Trials failed: more than ``search.max_failures``, or no feasible result because they failed;
``orchestrate best``: the study has no feasible result to write."""
STORE_DOWN = 75
"""A store failed, and the study is incomplete until the same command runs again: the study's
database or the tracking server stayed unreachable for ``search.outage_s``, or a store refused a
write (a full disk, a read-only file system, a permission, a lock held past its timeout:
``store.writefault``), or MLflow still lacks records the study holds. The study keeps every
result told; the same command resumes it and writes MLflow's missing records (75 is
``EX_TEMPFAIL`` of sysexits.h: a temporary failure, to be retried)."""
DIFFERS = 1
"""``orchestrate check``: the study, MLflow and the trial folders differ (each difference is printed)."""
NOT_HONOURED = 4
"""``orchestrate doctor --check``: a memory knob did not take effect."""
BROKEN_PIPE = 128 + signal.SIGPIPE
"""The reader of the output left early (``| head``), as a shell reports it."""
INTERRUPTED = 128 + signal.SIGINT
"""Ctrl-C: the running trials were killed and recorded as interrupted."""
TERMINATED = 128 + signal.SIGTERM
HUNG_UP = 128 + signal.SIGHUP
"""SIGHUP (the terminal closed): the sweep stops as for SIGTERM."""


DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS)
"""A write refused by the disk (full, over quota, failing, read-only): the command's output lost,
not a reason for a traceback."""


def for_signal(signum: int) -> int:
    """The code a sweep stopped by ``signum`` exits with (130 for Ctrl-C, 143 for SIGTERM, 129 for
    SIGHUP, 141 for a closed pipe)."""
    return 128 + signum


HELP = (f"Exit codes: {OK} finished or stopped itself (OOM trials are results; so is 'nothing fit'), "
        f"{INTERNAL} internal error, {USAGE} invalid spec, usage or experiment, {FAILED} trials failed: "
        f"more than search.max_failures, or no feasible result because trials failed, {STORE_DOWN} a store "
        f"unreachable for longer than search.outage_s or refusing writes (a full disk...), or MLflow "
        f"missing records the study holds: the same command resumes and repairs, "
        f"{INTERRUPTED} interrupted ({TERMINATED} on SIGTERM, {HUNG_UP} on SIGHUP, {BROKEN_PIPE} when the reader of "
        f"the output left): the trials in flight are recorded as interrupted. `check` exits {DIFFERS} where "
        f"the study, MLflow and the trial folders differ; `best` {FAILED} where the study has no feasible result; "
        f"`doctor --check` {NOT_HONOURED} where a memory knob is not honoured.")
