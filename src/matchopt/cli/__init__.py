"""Command-line interface: a thin layer over :mod:`matchopt.runner` and the registries.

    matchopt run [--task T] [--method M] [--seeds 0,1,2,3] [--preset paper|quick]
                 [--data-dir D] [--out DIR] [--set key=value ...] [--json]
    matchopt bench --tasks T1,T2 | --suite S --methods M1,M2 --seeds 0,1,2,3 --out DIR [--preset P]
                   [--backend local|ray] [--workers N] [--ray-address ADDR] [--batch-seeds]
                   [--set key=value ...]
    matchopt report DIR [--percentiles 100,50] [--format md|latex|csv] [--plots DIR]
    matchopt study gradient-error [--out DIR] [--seed S] [--epochs E] ...
    matchopt study checkpoint-selection --task T[,T2] --seeds 0,1 --every K [--split random|top]
    matchopt study search-step --task T[,T2] --seeds 0,1 [--scales 1,2,4,8,16]
    matchopt study search-settings --grid KEY=V1,V2 [--grid ...] --task T[,T2] | --suite S
    matchopt optimize DATA --target COL [--minimize] [--categorical A,B] [--sequence COL]
                      [--method M] [--n 128] [--out proposals.csv] [--save-model PATH] ...
    matchopt propose --model PATH [--n 128] [--out proposals.csv]
    matchopt tasks [--data-dir D]
    matchopt methods [NAME]

Errors a user can cause print one line (``matchopt: error: ...``) and exit with status 2.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from matchopt.cli.parser import build_parser
from matchopt.errors import ConfigError, MatchoptError, printable
from matchopt.runtime import check_threads, set_threads

__all__ = ["COMMANDS", "build_parser", "main"]


def _command(name: str) -> Callable:
    """The subcommand ``name`` as :mod:`matchopt.cli.commands` registers it, imported when it
    runs (the heavy imports wait until then)."""

    def command(args):
        from matchopt.cli import commands

        return commands.REGISTERED[name](args)

    return command


COMMANDS = {
    name: _command(name)
    for name in (
        "optimize",
        "propose",
        "run",
        "bench",
        "report",
        "study",
        "data",
        "tasks",
        "methods",
    )
}

#: What a command interrupted by Ctrl-C has kept, said after "matchopt: interrupted".
INTERRUPTED = {
    "run": " (recorded seeds are kept; rerun the same command to go on: a seed in training "
    "continues from its last snapshot)",
    "bench": " (recorded cells are kept; rerun the same command to go on)",
    "study": " (finished tasks and seeds are kept; rerun the same command to go on)",
    "optimize": " (no file is left half-written: the proposals, the report and the model file "
    "are written when ready, each whole)",
    "propose": " (nothing was written)",
}

#: Settings that are command-line options of their own (the rest are ``--set`` config fields).
OPTION_SETTINGS = {"workers": "--workers"}


def _as_option(err: ConfigError) -> str:
    """The error in the words of the command line: the option the user typed."""
    flag = OPTION_SETTINGS.get(err.key)
    if flag is not None:
        return f"{flag} {err.value}: {err.problem}"
    shown = f"{err.key}={err.value}" if err.value is not None else err.key
    return f"--set {shown}: {err.problem}"


def main(argv: list[str] | None = None) -> int:
    for stream in (sys.stdout, sys.stderr):
        # A terminal or pipe that cannot encode a name (PYTHONIOENCODING=ascii) shows escapes.
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    try:
        args = build_parser().parse_args(argv)
        args.argv = list(sys.argv[1:] if argv is None else argv)  # the command, to reproduce it
        if hasattr(args, "threads") and args.command != "bench":
            set_threads(None if args.threads is None else check_threads(args.threads))
        code = COMMANDS[args.command](args)
        sys.stdout.flush()  # a full disk behind stdout shows here, not at exit
        return code
    except ConfigError as err:
        return _error(_as_option(err))
    except MatchoptError as err:
        # One line, whatever names or text from files the message quotes.
        return _error(err)
    except BrokenPipeError:  # e.g. `matchopt methods | head`
        return 0
    except OSError as err:  # a full disk, a file size limit, stdout on /dev/full
        where = f" ({err.filename})" if err.filename else ""
        return _error(f"{err.strerror or err}{where}")
    except KeyboardInterrupt:
        command = sys.argv[1] if argv is None and len(sys.argv) > 1 else (argv or [""])[0]
        print(f"matchopt: interrupted{INTERRUPTED.get(command, '')}", file=sys.stderr)
        return 130


def _error(message: object) -> int:
    """Print one error line (if stderr can take it) and return the exit status 2."""
    try:
        print(f"matchopt: error: {printable(message)}", file=sys.stderr)
        sys.stderr.flush()
    except OSError:
        pass
    _drop_unwritable_stdout()
    return 2


def _drop_unwritable_stdout() -> None:
    """Discard what a full stdout still buffers, so that the exit does not fail again."""
    try:
        sys.stdout.flush()
    except OSError:
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (for the interpreter's exit)
        except OSError:
            pass
