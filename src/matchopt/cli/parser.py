"""The command line's parser, one builder per subcommand.

It imports nothing heavy (no torch, pandas or scikit-learn), so that ``matchopt --help`` and
every subcommand's ``--help`` start in well under a second; the commands themselves live in
:mod:`matchopt.cli.commands`, imported once the arguments are parsed.
"""

from __future__ import annotations

import argparse

from matchopt._version import __version__
from matchopt.errors import MatchoptError
from matchopt.names import (
    BACKENDS,
    DATA_DIR_ENV,
    DEFAULT_OUT,
    DEFAULT_TASK,
    FORMATS,
    PRESETS,
    RECOMMENDED_METHOD,
    SPLITS,
    SUITES,
)
from matchopt.runtime import DEVICE_ENV, MAX_SEED, THREADS_ENV


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors are one line too."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise MatchoptError(message)


def seed_number(text: str) -> int:
    """argparse type of ``--seed``: an integer from 0 to :data:`~matchopt.runtime.MAX_SEED`."""
    try:
        seed = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if seed < 0 or seed > MAX_SEED:
        raise argparse.ArgumentTypeError(f"{seed}: seeds are integers from 0 to {MAX_SEED}")
    return seed


def add_threads_option(parser: argparse.ArgumentParser, what: str = "this run") -> None:
    parser.add_argument(
        "--threads",
        default=None,
        metavar="N",
        help=f"compute threads of {what} (default: ${THREADS_ENV}, else half the cores, 1-4)",
    )


def add_device_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--device",
        default=None,
        help=f"torch device: cpu, cuda, cuda:N, mps or auto (default: ${DEVICE_ENV}, else cpu)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: one builder per subcommand."""
    parser = _Parser(prog="matchopt", description="Offline black-box optimization (MATCH-OPT).")
    parser.add_argument("--version", action="version", version=f"matchopt {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for add in (
        add_run_parser,
        add_bench_parser,
        add_report_parser,
        add_study_parsers,
        add_data_parsers,
        add_table_parsers,
        add_listing_parsers,
    ):
        add(sub)
    return parser


def add_run_parser(sub: argparse._SubParsersAction) -> None:
    """``run``: one method on one task, some seeds."""
    p_run = sub.add_parser("run", help="run a method on a task for some seeds and score it")
    p_run.add_argument("--task", default=DEFAULT_TASK, help=f"task name (default {DEFAULT_TASK})")
    p_run.add_argument("--method", default="matchopt", help="method name (default matchopt)")
    p_run.add_argument("--seeds", default="0", help="comma-separated seeds (default 0)")
    p_run.add_argument("--preset", default="paper", choices=PRESETS, help="default: paper")
    p_run.add_argument("--data-dir", default=None, help=f"design-bench data (or ${DATA_DIR_ENV})")
    p_run.add_argument("--out", default="runs", help="folder for records (default ./runs)")
    p_run.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field, e.g. --set epochs=50 (repeatable)",
    )
    p_run.add_argument("--json", action="store_true", help="stdout: one JSON record per line")
    p_run.add_argument(
        "--download", action="store_true", help="fetch missing design-bench files first"
    )
    add_threads_option(p_run)
    add_device_option(p_run)


def add_bench_parser(sub: argparse._SubParsersAction) -> None:
    """``bench``: a grid of tasks x methods x seeds."""
    p_bench = sub.add_parser(
        "bench", help="run a grid of tasks x methods x seeds; resumable, one record per cell"
    )
    which = p_bench.add_mutually_exclusive_group(required=True)
    which.add_argument("--tasks", help="comma-separated task names")
    which.add_argument(
        "--suite", choices=tuple(SUITES), help="a named set of tasks (`matchopt tasks` lists them)"
    )
    p_bench.add_argument("--methods", required=True, help="comma-separated method names")
    p_bench.add_argument("--seeds", default="0,1,2,3", help="comma-separated (default 0,1,2,3)")
    p_bench.add_argument("--out", required=True, help="results folder (reruns skip its records)")
    p_bench.add_argument("--preset", default="paper", choices=PRESETS, help="default: paper")
    p_bench.add_argument("--backend", default="local", choices=BACKENDS, help="default: local")
    p_bench.add_argument(
        "--workers", type=int, default=None, help="cells run at once (default: one per core)"
    )
    p_bench.add_argument("--ray-address", default=None, help="Ray cluster (default: start one)")
    p_bench.add_argument(
        "--batch-seeds",
        action="store_true",
        help="train the seeds of a method that can (ddom, coms, mins, bonet and the Gaussian "
        "ensembles) as one batch: one step for all seeds (for GPUs; the same records up to "
        "float round-off)",
    )
    p_bench.add_argument("--data-dir", default=None, help=f"design-bench data (or ${DATA_DIR_ENV})")
    p_bench.add_argument(
        "--download", action="store_true", help="fetch missing design-bench files first"
    )
    p_bench.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="[TASK:][METHOD.]KEY=VALUE",
        help="override a config field of every method that has it, or of one method; "
        "TASK: limits it to one task",
    )
    add_threads_option(p_bench, "each cell (default: as run, at most cores // workers)")
    add_device_option(p_bench)


def add_report_parser(sub: argparse._SubParsersAction) -> None:
    """``report``: tables and figures from records."""
    p_report = sub.add_parser("report", help="tables and figures from a folder of records")
    p_report.add_argument("dir", help="results folder (records at any depth below it)")
    p_report.add_argument("--percentiles", default="100,50", help="default: 100,50")
    p_report.add_argument("--format", default="md", choices=FORMATS, help="default: md")
    p_report.add_argument("--plots", default=None, help="folder for PNG figures and their CSVs")
    p_report.add_argument("--tasks", default=None, help="only these tasks (comma-separated)")
    p_report.add_argument(
        "--suite", default=None, choices=tuple(SUITES), help="only the tasks of this suite"
    )
    p_report.add_argument("--methods", default=None, help="only these methods (comma-separated)")
    p_report.add_argument(
        "--summary",
        action="store_true",
        help="only the summary over the tasks: each method's MNR and median wins (md, latex)",
    )


def add_study_parsers(sub: argparse._SubParsersAction) -> None:
    """``study``: the studies, one subcommand each."""
    p_study = sub.add_parser("study", help="the paper's synthetic studies")
    studies = p_study.add_subparsers(dest="study", required=True, parser_class=_Parser)
    add_gradient_study(studies)
    p_check = add_task_study(
        studies,
        "checkpoint-selection",
        "which held-out metric picks MATCH-OPT's good checkpoints (oracle-scored study)",
        preset="paper",
    )
    p_check.add_argument("--every", type=int, default=10, help="epochs between checkpoints")
    p_check.add_argument(
        "--split",
        default="random",
        help=f"held-out rows: {' and/or '.join(SPLITS)}, comma-separated",
    )
    p_check.add_argument("--fraction", type=float, default=0.1, help="share of rows held out")

    p_step = add_task_study(
        studies,
        "search-step",
        "how far MATCH-OPT's search should move designs (oracle-scored study)",
        preset="validated",
    )
    p_step.add_argument(
        "--scales", default="1,2,4,8,16", help="search_lr_scale values, comma-separated"
    )
    add_settings_study(studies)


def add_gradient_study(studies: argparse._SubParsersAction) -> None:
    """``study gradient-error``: Fig. 1 of the paper."""
    p_grad = studies.add_parser(
        "gradient-error", help="Fig. 1: gradient error of MATCH-OPT vs regression on Shekel 4-d"
    )
    p_grad.add_argument("--out", default="study-gradient-error", help="folder for CSV and PNG")
    add_threads_option(p_grad)
    p_grad.add_argument("--n-train", type=int, default=1000, help="training inputs from N(0, I)")
    p_grad.add_argument("--alphas", default="0.1,0.2,0.5,1.0", help="test inputs from N(0, a I)")
    p_grad.add_argument("--n-test", type=int, default=1000, help="test inputs per alpha")
    p_grad.add_argument("--seed", type=seed_number, default=0)
    p_grad.add_argument("--epochs", type=int, default=200, help="training epochs of both models")
    p_grad.add_argument("--batch-size", type=int, default=128, help="trajectory length / batch")


def add_settings_study(studies: argparse._SubParsersAction) -> None:
    """``study search-settings``: one training per task and seed, a grid of search settings."""
    p_settings = add_task_study(
        studies,
        "search-settings",
        "one training per task and seed, searched with a grid of settings (oracle-scored)",
        preset="paper",
    )
    p_settings.add_argument(
        "--method",
        default=RECOMMENDED_METHOD,
        help=f"method name (default {RECOMMENDED_METHOD}, the recommended one)",
    )
    p_settings.add_argument(
        "--grid",
        action="append",
        required=True,
        metavar="KEY=V1,V2",
        help="a search field and its values, e.g. --grid search_step=0.1,0.3 (repeatable)",
    )
    p_settings.add_argument(
        "--suite", default=None, choices=tuple(SUITES), help="the tasks of this suite"
    )


def add_task_study(
    studies: argparse._SubParsersAction, name: str, summary: str, preset: str
) -> argparse.ArgumentParser:
    """A study over tasks and seeds, with the options every such study has."""
    parser = studies.add_parser(name, help=summary)
    parser.add_argument("--task", default=DEFAULT_TASK, help="task name(s), comma-separated")
    parser.add_argument("--seeds", default="0", help="comma-separated seeds (default 0)")
    parser.add_argument("--preset", default=preset, choices=PRESETS, help=f"default: {preset}")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="config override"
    )
    parser.add_argument("--data-dir", default=None, help=f"design-bench data (or ${DATA_DIR_ENV})")
    parser.add_argument("--out", default=f"study-{name}", help="folder for outputs")
    add_threads_option(parser)
    return parser


def add_data_parsers(sub: argparse._SubParsersAction) -> None:
    """``data fetch`` and ``data status``."""
    p_data = sub.add_parser("data", help="fetch design-bench data files or show which are here")
    data_sub = p_data.add_subparsers(dest="data_command", required=True, parser_class=_Parser)
    p_fetch = data_sub.add_parser(
        "fetch",
        help="download TASK... files from huggingface.co/datasets/beckhamc/design_bench_data",
    )
    p_fetch.add_argument("tasks", nargs="+", metavar="TASK")
    p_fetch.add_argument(
        "--data-dir", default=None, help=f"data folder (or ${DATA_DIR_ENV}; default: a cache dir)"
    )
    p_status = data_sub.add_parser("status", help="which tasks' files are present")
    p_status.add_argument("--data-dir", default=None)
    p_status.add_argument(
        "--verify",
        action="store_true",
        help="check the sha256 of files with a known digest (built in, or recorded by data fetch)",
    )


def add_listing_parsers(sub: argparse._SubParsersAction) -> None:
    """``tasks`` and ``methods``: what is registered."""
    p_tasks = sub.add_parser("tasks", help="list tasks and whether their data is present")
    p_tasks.add_argument("--data-dir", default=None)
    p_methods = sub.add_parser("methods", help="list methods, or one method's config fields")
    p_methods.add_argument("name", nargs="?", default=None, metavar="NAME", help="a method")


def add_table_parsers(sub: argparse._SubParsersAction) -> None:
    """``optimize`` and ``propose``: optimize a user's own CSV/Parquet table."""
    add_optimize_parser(sub)
    add_propose_parser(sub)


def add_optimize_parser(sub: argparse._SubParsersAction) -> None:
    """``optimize``: fit a method on a table and write proposals."""
    p_opt = sub.add_parser(
        "optimize", help="fit a method on your own CSV/Parquet table and propose new rows"
    )
    p_opt.add_argument("data", metavar="DATA", help="CSV or Parquet file, one measured row each")
    add_design_options(p_opt)
    p_opt.add_argument(
        "--method",
        default=RECOMMENDED_METHOD,
        help=f"method name (default {RECOMMENDED_METHOD}, the recommended one: `matchopt methods`)",
    )
    p_opt.add_argument(
        "--preset",
        default=None,
        choices=PRESETS,
        help="default: validated where the method has it (checkpoint chosen on held-out rows), "
        "else paper",
    )
    p_opt.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a config field"
    )
    p_opt.add_argument("--n", type=int, default=128, help="proposals to write (default 128)")
    p_opt.add_argument("--seed", type=seed_number, default=0, help="seed (default 0)")
    p_opt.add_argument(
        "--oversample",
        type=int,
        default=4,
        metavar="K",
        help="top-up pool of K x n candidates when the method's designs repeat rows (default 4)",
    )
    p_opt.add_argument(
        "--out",
        default=None,
        help=f"CSV or Parquet output file (default {DEFAULT_OUT}, only if no such file exists)",
    )
    p_opt.add_argument("--save-model", default=None, metavar="PATH", help="save the fitted model")
    add_output_options(p_opt)
    add_distance_options(p_opt)
    add_threads_option(p_opt)
    add_device_option(p_opt)


def add_design_options(parser: argparse.ArgumentParser) -> None:
    """The options of ``optimize`` that say what the table's design and target are."""
    parser.add_argument("--target", required=True, help="the column to maximize (or minimize)")
    parser.add_argument("--minimize", action="store_true", help="lower target values are better")
    parser.add_argument(
        "--features", default=None, metavar="A,B", help="feature columns (default: all others)"
    )
    parser.add_argument(
        "--categorical", default="", metavar="A,B", help="feature columns holding categories"
    )
    parser.add_argument(
        "--categories",
        default="search",
        choices=("search", "keep"),
        help="search (default): each proposal's categories are the ones the ranking surrogate "
        "predicts best, one column at a time; keep: as the method's search left them (almost "
        "always its start row's)",
    )
    parser.add_argument(
        "--sequence", default=None, metavar="COL", help="a fixed-length sequence column"
    )
    parser.add_argument(
        "--alphabet", default=None, metavar="LETTERS", help="its letters (default: those used)"
    )
    parser.add_argument(
        "--bounds",
        action="append",
        default=[],
        metavar="COL=LO:HI",
        help="range of a numeric column's proposals (default: its observed range; repeatable)",
    )


def add_distance_options(parser: argparse.ArgumentParser) -> None:
    """``--min-distance`` and ``--diversity`` of ``optimize``."""
    parser.add_argument(
        "--min-distance",
        type=float,
        default=0.0,
        metavar="D",
        help="proposals at least D from every measured row (differing positions, or std units)",
    )
    parser.add_argument(
        "--diversity",
        type=float,
        default=None,
        metavar="D",
        help="proposals at least D from each other (same units; best ranked kept first; "
        "default 0.5 for tables of columns, 0 for sequences)",
    )


def add_output_options(parser: argparse.ArgumentParser) -> None:
    """``--candidates``, ``--report`` and ``--force`` of ``optimize`` and ``propose``."""
    parser.add_argument(
        "--candidates",
        default=None,
        metavar="FILE",
        help="rank the designs of this CSV or Parquet file (your library of candidates) "
        "instead of proposing new ones",
    )
    parser.add_argument(
        "--report",
        default=None,
        metavar="PATH",
        help="the HTML report of the run (default: beside --out, <name>.report.html)",
    )
    parser.add_argument(
        "--force", action="store_true", help="replace output files that exist (else refused)"
    )


def add_propose_parser(sub: argparse._SubParsersAction) -> None:
    """``propose``: proposals from a model file written by ``optimize --save-model``."""
    p_prop = sub.add_parser("propose", help="propose new rows with a model saved by optimize")
    p_prop.add_argument("--model", required=True, help="file written by optimize --save-model")
    p_prop.add_argument("--n", type=int, default=128, help="proposals to write (default 128)")
    p_prop.add_argument(
        "--out",
        default=None,
        help=f"CSV or Parquet output file (default {DEFAULT_OUT}, only if no such file exists)",
    )
    add_output_options(p_prop)
    add_threads_option(p_prop)
