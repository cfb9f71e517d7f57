"""``orchestrate``: run or resume the sweep a YAML spec describes.

Thin on purpose: parse flags, load the spec, then hand over. torch is never imported here, and
mlflow/optuna only once a real run starts (``--dry-run``: MLflow only where the study's file is
missing or empty and MLflow's store is there, to look for an earlier study's runs), so ``--help``
and ``--dry-run`` answer at once.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

# Nothing else at import: a Ctrl-C while the command's modules load is caught by ``entry``.

USAGE = """orchestrate SPEC [--dry-run] [--storage URL] [--tracking-uri URI] [--n-trials N] [--stop auto|budget]
                        [--device D] [--devices LIST] [--retry STATUSES] [--no-check] [--export FILE]
                        [--new-study]
       orchestrate report SPEC [--format text|json] [--plots] [--out DIR] [--compare KNOB]
       orchestrate best SPEC [-o FILE]                              (the best configuration as YAML)
       orchestrate check SPEC [--repair]                            (do the study, MLflow and the trial folders agree?)
       orchestrate delete SPEC [--yes] [--leftovers]                (the study, its MLflow runs and trial folders)
       orchestrate ui [SPEC] [--port N]                             (the MLflow UI on 127.0.0.1)
       orchestrate doctor [--check] [--device D] [--format text|json]   (is this machine set up? do the knobs work?)
       orchestrate schema [--format json|markdown]                  (the spec's JSON Schema, or its reference page)
       (report, best, check, delete and ui take --storage URL and --tracking-uri URI too, as a run does)"""
SUBCOMMANDS = {"report": "orchestrator.report.command", "best": "orchestrator.report.command",
               "check": "orchestrator.report.check", "delete": "orchestrator.report.delete",
               "ui": "orchestrator.report.ui",
               "doctor": "orchestrator.doctor.command", "schema": "orchestrator.spec.doc"}


def build_parser() -> argparse.ArgumentParser:
    from orchestrator import exits
    from orchestrator.errors import UsageParser
    from orchestrator.urls import STORAGE_HELP, TRACKING_HELP

    p = UsageParser(
        prog="orchestrate", usage=USAGE,
        description="Run the training sweep a YAML spec describes (or resume it), each trial in a "
                    "fresh subprocess; results go to Optuna (the study) and MLflow (the runs).",
        epilog=exits.HELP + " Run the same command again to resume; trials that failed with "
               "status error run again then.")
    p.add_argument("spec", help="the sweep spec, e.g. sweeps/bert_tiny.yaml")
    p.add_argument("--dry-run", action="store_true",
                   help="check what a run checks without torch (the spec, the experiment's parameter names where it declares "
                        "PARAMS, the store folders and "
                        "servers, a hub model: 5 s for a server to answer; the device slots; a study file lost "
                        "or emptied where MLflow holds its runs), every failure at once; print the plan; "
                        "create nothing, import no torch")
    p.add_argument("--storage", help=STORAGE_HELP)
    p.add_argument("--tracking-uri", help=TRACKING_HELP)
    p.add_argument("--n-trials", type=int, help="the budget: at most this many trials with a result in the "
                   "study (overrides search.n_trials)")
    p.add_argument("--stop", metavar="auto|budget", help="auto: end once no configuration left is likely to "
                   "beat the best by more than search.band; budget: use the whole budget (overrides search.stop)")
    p.add_argument("--device", help="auto, mps, cuda or cpu (overrides the spec's device)")
    p.add_argument("--devices", metavar="LIST",
                   help="device slots, one trial at a time on each: auto (every visible GPU), "
                        "cuda:0,cuda:2, or cpu:0-3,cpu:4-7 (cores) (overrides the spec's devices)")
    p.add_argument("--retry", metavar="STATUSES", type=_statuses, default=(),
                   help="also run again configurations whose result has one of these statuses, "
                        "e.g. timeout,crashed (trials that ended 'error' always run again)")
    p.add_argument("--no-check", action="store_true",
                   help="skip the smoke step (one training step of the first configuration at a batch of at most 2, "
                        "before the first trial; a script runs at the smallest batch it sweeps, to its first "
                        "optimizer step)")
    p.add_argument("--export", metavar="FILE", type=Path,
                   help="after the sweep, write the best configuration to FILE as flat YAML")
    p.add_argument("--new-study", action="store_true",
                   help="start a new study where the spec's study file is missing or empty (lost, emptied) "
                        "though MLflow or the trial folders hold an earlier study's runs; those stay as they "
                        "are, and are not read back into the new study")
    return p


def _statuses(text: str) -> tuple[str, ...]:
    from orchestrator.outcome import RESULT_STATUSES

    items = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [x for x in items if x not in RESULT_STATUSES]
    if bad or not items:
        raise argparse.ArgumentTypeError(f"--retry takes statuses from {', '.join(RESULT_STATUSES)} "
                                         f"(comma-separated), got {text!r}")
    return items


def main(argv: list[str] | None = None) -> int:
    from orchestrator import exits
    from orchestrator.errors import OrchestratorError, SpecError, print_error
    from orchestrator.spec.load import load_spec
    from orchestrator.timeline import command_started

    command_started()
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in SUBCOMMANDS:
        import importlib

        return importlib.import_module(SUBCOMMANDS[argv[0]]).main(argv)
    if argv and (near := near_command(argv[0])) is not None:
        return print_error(OrchestratorError(f"unknown command {argv[0]!r}; did you mean {near!r}?"))
    from orchestrator.sweep import output

    output.stop_early()  # SIGTERM and SIGHUP, until the sweep takes them over: one line, as Ctrl-C
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        from orchestrator.urls import guard, overrides

        from dataclasses import replace

        stores, origins = overrides(args.storage, args.tracking_uri)
        given = (("--n-trials", args.n_trials), ("--stop", args.stop), ("--device", args.device))
        origins = replace(origins, devices=args.devices,
                          flags=tuple(w for flag, value in given if value is not None for w in (flag, str(value))))
        try:
            spec = load_spec(args.spec, {
                **stores,
                "--n-trials": (("search", "n_trials"), args.n_trials),
                "--stop": (("search", "stop"), args.stop),
                "--device": (("device",), args.device),
                "--devices": (("devices",), args.devices),
            })
        except SpecError as exc:  # with its misspelled parameter names, read without torch
            from orchestrator.sweep.preflight import with_declared_names

            with_declared_names(exc, args.spec)
            raise
        guard(spec, origins)
        if args.dry_run:
            from orchestrator.report.dryrun import print_plan
            from orchestrator.sweep.preflight import dry_run

            slots = dry_run(spec, origins, args.new_study)  # what the run checks, at once
            print_plan(spec, slots)
            return exits.OK
        from orchestrator.sweep.run import run

        return run(spec, export=args.export, retry=args.retry, check=not args.no_check,
                   origins=origins, new_study=args.new_study)
    except OrchestratorError as exc:
        return print_error(exc)
    except KeyboardInterrupt as exc:  # outside the sweep's own handlers (``sweep.output``)
        signum = getattr(exc, "signum", signal.SIGINT)
        how = "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
        if not output.began:  # after the sweep, its own last line has been said
            print(f"orchestrate: {how} before the sweep started; nothing was run", file=sys.stderr)
        return exits.for_signal(signum)
    finally:
        output.end_early()


def near_command(word: str) -> str | None:
    """The command ``word``, the first argument, misspells (``reprot``: ``report``), or None. A
    file that exists, a flag, or a word with a dot or a slash (a spec's path) is never one."""
    if word.startswith("-") or "." in word or os.sep in word or os.path.exists(word):
        return None
    import difflib

    return next(iter(difflib.get_close_matches(word, SUBCOMMANDS, n=1)), None)


INTERRUPTED = {
    "check": "it changes nothing: run it again",
    "check --repair": "what it wrote is kept; run it again to finish",
    "report": "it changes nothing", "best": "it changes nothing", "doctor": "it changes nothing",
    "schema": "it changes nothing",
}
"""What a Ctrl-C outside a sweep left, by command (a sweep says so itself: ``sweep.loop``)."""


def entry() -> None:
    """Console-script entry: unexpected errors keep their traceback and exit 1. A reader that
    closes the pipe early (``orchestrate ... --dry-run | head``) ends the output quietly, and a
    Ctrl-C anywhere (while the modules load, in ``check --repair``) is one line, exit 130."""
    try:
        from orchestrator import exits
        from orchestrator.errors import silence_stdout, standard_streams
        from orchestrator.timeline import event

        standard_streams()
        if (why := _working_folder(sys.argv[1:])) is not None:
            print(f"orchestrate: {why}", file=sys.stderr)
            sys.exit(exits.USAGE)
        try:
            code = main()
            sys.stdout.flush()  # a pipe's buffered output is written here, not at interpreter exit
            event("exit")
        except BrokenPipeError:
            silence_stdout()  # no second error when Python flushes stdout at exit
            sys.exit(exits.BROKEN_PIPE)
        except OSError as exc:
            if exc.errno not in exits.DISK_ERRNOS:
                raise
            silence_stdout()  # its output's disk is full or failing: say so on stderr, once
            try:
                print(f"orchestrate: its output could not be written ({exc.strerror}); free the disk it goes "
                      "to and run the command again", file=sys.stderr, flush=True)
            except OSError:
                pass
            sys.exit(exits.STORE_DOWN)
        if "mlflow" in sys.modules:
            # A sweep ran: its records are written (MLflow's writer drained, every store call
            # committed) and its processes are gone. The interpreter's teardown of MLflow's and
            # Optuna's modules (pandas, SQLAlchemy, ...) would keep the prompt ~1 CPU-s longer.
            import logging

            logging.shutdown()
            sys.stderr.flush()
            os._exit(code)
    except KeyboardInterrupt:
        _interrupted(sys.argv[1:])
    sys.exit(code)


def _working_folder(argv: list[str]) -> str | None:
    """What is wrong with the folder the command runs in, where the stores and trial folders are
    found (``mlruns``), or None: deleted under the shell, or named in bytes MLflow cannot record."""
    try:
        cwd = os.getcwd()
    except FileNotFoundError:
        return "the folder this command runs in was deleted (or moved); cd to one that exists"
    try:
        cwd.encode("utf-8")
    except UnicodeEncodeError:
        if argv and argv[0] in ("doctor", "schema"):  # no store, no path recorded
            return None
        return (f"the folder this command runs in, {cwd.encode('utf-8', 'replace').decode()}, has a name that is "
                "not UTF-8, which MLflow cannot record in its paths; run from a folder whose name is UTF-8")
    return None


def _interrupted(argv: list[str]) -> None:
    """A Ctrl-C outside the sweep's own handlers: one line, exit 130, at once (no thread of
    MLflow's or SQLAlchemy's to wait for; a store's file lock is released by the OS)."""
    command = argv[0] if argv and argv[0] in SUBCOMMANDS else None
    key = "check --repair" if command == "check" and "--repair" in argv else command
    said = INTERRUPTED.get(key or "", "nothing was run") if command else "nothing was run"
    try:
        print(f"orchestrate{' ' + key if key else ''}: interrupted (Ctrl-C); {said}", file=sys.stderr, flush=True)
    except OSError:
        pass
    os._exit(130)


if __name__ == "__main__":
    entry()
