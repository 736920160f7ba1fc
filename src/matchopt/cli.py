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

import argparse
import dataclasses
import os
import sys
from pathlib import Path

from matchopt._version import __version__
from matchopt.bench import Grid, run_grid
from matchopt.bench.cells import Cell, run_cell, save_record
from matchopt.bench.grid import (
    BACKENDS,
    LOCK_FILE,
    check_results_folder,
    finished_record,
    first_repeated,
)
from matchopt.checkpoints import save_on_interrupt
from matchopt.errors import ConfigError, MatchoptError, printable
from matchopt.io import FileLocked, check_output_folder, file_lock
from matchopt.methods import METHODS, RECOMMENDED_METHOD, get_method_entry
from matchopt.methods.base import PRESETS, build_config, parse_set_options
from matchopt.records import RunRecord, summary_table
from matchopt.report import FORMATS, write_report
from matchopt.runtime import (
    DEVICE_ENV,
    MAX_SEED,
    THREADS_ENV,
    check_threads,
    keep_freed_memory,
    resolve_device,
    set_threads,
)
from matchopt.tasks import (
    DATA_DIR_ENV,
    DEFAULT_TASK,
    SUITES,
    TASKS,
    Task,
    get_suite,
    load_task,
    resolve_data_dir,
    task_name,
)
from matchopt.tasks.download import data_status_table, ensure_task_data, fetch_task_data
from matchopt.validation import SPLITS


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors are one line too."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise MatchoptError(message)


#: The output of ``optimize`` and ``propose`` when ``--out`` is not given.
DEFAULT_OUT = "proposals.csv"


def parse_seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise MatchoptError(f"--seeds {text!r}: expected integers separated by commas") from None
    if not seeds:
        raise MatchoptError("--seeds needs at least one seed")
    if any(s < 0 or s > MAX_SEED for s in seeds):
        raise MatchoptError(f"--seeds {text}: seeds must be integers from 0 to {MAX_SEED}")
    if len(set(seeds)) != len(seeds):
        raise MatchoptError(f"--seeds {text}: a seed is repeated (each seed is one run)")
    return seeds


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
    parser = _Parser(prog="matchopt", description="Offline black-box optimization (MATCH-OPT).")
    parser.add_argument("--version", action="version", version=f"matchopt {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

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

    p_study = sub.add_parser("study", help="the paper's synthetic studies")
    studies = p_study.add_subparsers(dest="study", required=True, parser_class=_Parser)
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

    p_check = studies.add_parser(
        "checkpoint-selection",
        help="which held-out metric picks MATCH-OPT's good checkpoints (oracle-scored study)",
    )
    p_check.add_argument("--task", default=DEFAULT_TASK, help="task name(s), comma-separated")
    p_check.add_argument("--seeds", default="0", help="comma-separated seeds (default 0)")
    p_check.add_argument("--every", type=int, default=10, help="epochs between checkpoints")
    p_check.add_argument(
        "--split",
        default="random",
        help=f"held-out rows: {' and/or '.join(SPLITS)}, comma-separated",
    )
    p_check.add_argument("--fraction", type=float, default=0.1, help="share of rows held out")
    p_check.add_argument("--preset", default="paper", choices=PRESETS, help="default: paper")
    p_check.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="config override"
    )
    p_check.add_argument("--data-dir", default=None, help=f"design-bench data (or ${DATA_DIR_ENV})")
    p_check.add_argument("--out", default="study-checkpoint-selection", help="folder for outputs")
    add_threads_option(p_check)

    p_step = studies.add_parser(
        "search-step",
        help="how far MATCH-OPT's search should move designs (oracle-scored study)",
    )
    p_step.add_argument("--task", default=DEFAULT_TASK, help="task name(s), comma-separated")
    p_step.add_argument("--seeds", default="0", help="comma-separated seeds (default 0)")
    p_step.add_argument(
        "--scales", default="1,2,4,8,16", help="search_lr_scale values, comma-separated"
    )
    p_step.add_argument("--preset", default="validated", choices=PRESETS, help="default: validated")
    p_step.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="config override"
    )
    p_step.add_argument("--data-dir", default=None, help=f"design-bench data (or ${DATA_DIR_ENV})")
    p_step.add_argument("--out", default="study-search-step", help="folder for outputs")
    add_threads_option(p_step)

    p_settings = studies.add_parser(
        "search-settings",
        help="one training per task and seed, searched with a grid of settings (oracle-scored)",
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
    p_settings.add_argument("--task", default=DEFAULT_TASK, help="task name(s), comma-separated")
    p_settings.add_argument(
        "--suite", default=None, choices=tuple(SUITES), help="the tasks of this suite"
    )
    p_settings.add_argument("--seeds", default="0", help="comma-separated seeds (default 0)")
    p_settings.add_argument("--preset", default="paper", choices=PRESETS, help="default: paper")
    p_settings.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="config override"
    )
    p_settings.add_argument(
        "--data-dir", default=None, help=f"design-bench data (or ${DATA_DIR_ENV})"
    )
    p_settings.add_argument("--out", default="study-search-settings", help="folder for outputs")
    add_threads_option(p_settings)

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

    add_table_parsers(sub)

    p_tasks = sub.add_parser("tasks", help="list tasks and whether their data is present")
    p_tasks.add_argument("--data-dir", default=None)
    p_methods = sub.add_parser("methods", help="list methods, or one method's config fields")
    p_methods.add_argument("name", nargs="?", default=None, metavar="NAME", help="a method")
    return parser


def cmd_run(args: argparse.Namespace) -> int:
    args.task = task_name(args.task)  # also a design-bench name (TFBind8-Exact-v0)
    seeds = parse_seeds(args.seeds)
    overrides = parse_set_options(args.set)
    entry = get_method_entry(args.method)
    build_config(entry, args.preset, overrides)  # validate options before loading data
    resolve_device(args.device)
    created = not Path(args.out).exists()
    out = check_output_folder(args.out, "--out")
    check_results_folder(out)
    try:
        return _run_cells(args, seeds, overrides, out)
    except BaseException:
        # A run that failed before writing anything leaves no empty folder behind.
        if created and out.is_dir() and not any(out.iterdir()):
            out.rmdir()
        raise


def _run_cells(
    args: argparse.Namespace, seeds: list[int], overrides: dict[str, str], out: Path
) -> int:
    cells = [
        Cell(
            args.task, args.method, seed, args.preset, tuple(sorted(overrides.items())), args.device
        )
        for seed in seeds
    ]
    # As bench: a seed whose record is there is done (a record of another configuration is an
    # error: the folder would mix two).
    finished = {cell: finished_record(cell, out) for cell in cells}
    if args.download:
        ensure_task_data(args.task, args.data_dir, download=True)
    task = load_task(args.task, args.data_dir)
    keep_freed_memory()
    records = []
    try:
        # The bench's lock: a bench (or another run) on this folder shares snapshot files.
        with file_lock(out / LOCK_FILE, wait=False):
            for cell in cells:
                record = finished[cell]
                if record is None:
                    record = _run_one(cell, task, out, args)
                else:
                    print(
                        f"[{task.name} / {cell.method} / seed {cell.seed} / {cell.preset}] "
                        f"recorded already: {cell.record_path(out)} (delete it to run again)",
                        file=sys.stderr,
                    )
                    if args.json:
                        print(record.to_json(), flush=True)
                records.append(record)
    except FileLocked as err:
        raise MatchoptError(
            f"a bench or run ({err.holder}) is writing into {out}; wait for it to finish or "
            "use another --out folder"
        ) from None
    if not args.json:
        print(summary_table(records))
    return 0


def _run_one(cell: Cell, task: Task, out: Path, args: argparse.Namespace) -> RunRecord:
    """One seed of ``matchopt run``: a one-cell grid in this process; its record is written,
    then its training snapshot removed (a record that cannot be written: one error line, and
    the snapshot stays for the rerun)."""
    print(f"[{task.name} / {cell.method} / seed {cell.seed} / {cell.preset}]", file=sys.stderr)
    with save_on_interrupt():  # Ctrl-C in training: a snapshot first, so the seed resumes
        record, designs = run_cell(
            cell, task, progress=True, threads=args.threads, snapshot=cell.snapshot_path(out)
        )
    path = save_record(cell, out, record, designs)
    if args.json:
        print(record.to_json(), flush=True)
    else:
        print(
            f"  p100 {record.p100:.3f}  p50 {record.p50:.3f}  offline best "
            f"{record.offline_best:.3f}  fit {record.fit_seconds:.1f}s  "
            f"search {record.search_seconds:.1f}s  -> {path}",
            file=sys.stderr,
        )
    return record


def cmd_bench(args: argparse.Namespace) -> int:
    grid = Grid(
        tasks=list(get_suite(args.suite)) if args.suite else _task_names(args.tasks, "--tasks"),
        methods=_names(args.methods, "--methods"),
        seeds=parse_seeds(args.seeds),
        preset=args.preset,
        overrides=parse_set_options(args.set),
        device=args.device,
    )
    if args.download:
        for name in grid.tasks:
            ensure_task_data(name, args.data_dir, download=True)
    keep_freed_memory()
    summary = run_grid(
        grid,
        args.out,
        backend=args.backend,
        workers=args.workers,
        data_dir=args.data_dir,
        ray_address=args.ray_address,
        threads=args.threads,
        batch_seeds=args.batch_seeds,
    )
    print(summary.text())
    if summary.interrupted:
        return 130
    return 1 if summary.failed else 0


def cmd_report(args: argparse.Namespace) -> int:
    if args.tasks and args.suite:
        raise MatchoptError("give --tasks or --suite, not both")
    tasks = _task_names(args.tasks, "--tasks") if args.tasks else None
    if args.suite:
        tasks = list(get_suite(args.suite))
    text = write_report(
        args.dir,
        parse_numbers(args.percentiles, "--percentiles"),
        args.format,
        args.plots,
        tasks=tasks,
        methods=_names(args.methods, "--methods") if args.methods else None,
        summary_only=args.summary,
    )
    print(text, end="")
    if args.plots:
        print(f"figures and their numbers in {args.plots}", file=sys.stderr)
    return 0


def cmd_study(args: argparse.Namespace) -> int:
    if args.study == "checkpoint-selection":
        return _checkpoint_selection_study(args)
    if args.study == "search-step":
        return _search_step_study(args)
    if args.study == "search-settings":
        return _search_settings_study(args)
    from matchopt.studies.gradient_error import format_summary, run_gradient_error_study

    summary = run_gradient_error_study(
        args.out,
        n_train=args.n_train,
        alphas=parse_numbers(args.alphas, "--alphas"),
        n_test=args.n_test,
        seed=args.seed,
        epochs=args.epochs,
        batch_size=args.batch_size,
        progress=True,
    )
    print(format_summary(summary))
    print(f"CSV and PNG in {args.out}", file=sys.stderr)
    return 0


def _checkpoint_selection_study(args: argparse.Namespace) -> int:
    from matchopt.studies.checkpoint_selection import (
        format_table,
        run_checkpoint_selection_study,
    )

    overrides = parse_set_options(args.set)
    build_config(get_method_entry("matchopt"), args.preset, overrides)  # fail before any work
    rules = run_checkpoint_selection_study(
        _task_names(args.task, "--task"),
        parse_seeds(args.seeds),
        args.out,
        every=args.every,
        splits=_names(args.split, "--split"),
        fraction=args.fraction,
        preset=args.preset,
        overrides=overrides,
        data_dir=args.data_dir,
        progress=True,
    )
    print("Mean oracle scores of the checkpoints each rule picks (study only):")
    print(format_table(rules))
    print(f"CSV and PNG in {args.out}", file=sys.stderr)
    return 0


def _search_step_study(args: argparse.Namespace) -> int:
    from matchopt.studies.checkpoint_selection import format_table
    from matchopt.studies.search_step import run_search_step_study

    overrides = parse_set_options(args.set)
    build_config(get_method_entry("matchopt"), args.preset, overrides)  # fail before any work
    rules = run_search_step_study(
        _task_names(args.task, "--task"),
        parse_seeds(args.seeds),
        args.out,
        scales=parse_numbers(args.scales, "--scales"),
        preset=args.preset,
        overrides=overrides,
        data_dir=args.data_dir,
        progress=True,
    )
    print("Mean oracle scores of each search step scale (study only):")
    print(format_table(rules))
    print(f"CSV and PNG in {args.out}", file=sys.stderr)
    return 0


def _search_settings_study(args: argparse.Namespace) -> int:
    from matchopt.studies.checkpoint_selection import format_table
    from matchopt.studies.search_settings import run_search_settings_study

    grid: dict[str, list[str]] = {}
    for item in args.grid:
        key, sep, values = item.partition("=")
        names = [v.strip() for v in values.split(",") if v.strip()]
        if not sep or not key.strip() or not names:
            raise MatchoptError(f"malformed --grid {item!r}: expected key=value1,value2")
        if key.strip() in grid:
            raise MatchoptError(f"--grid names {key.strip()!r} twice")
        grid[key.strip()] = names
    rules = run_search_settings_study(
        args.method,
        grid,
        list(get_suite(args.suite)) if args.suite else _task_names(args.task, "--task"),
        parse_seeds(args.seeds),
        args.out,
        preset=args.preset,
        overrides=parse_set_options(args.set),
        data_dir=args.data_dir,
        progress=True,
    )
    print("Mean oracle scores of each combination of search settings (study only):")
    print(format_table(rules))
    print(f"CSV and PNG in {args.out}", file=sys.stderr)
    return 0


def parse_numbers(text: str, option: str) -> list[float]:
    try:
        numbers = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise MatchoptError(f"{option} {text!r}: expected numbers separated by commas") from None
    if not numbers:
        raise MatchoptError(f"{option} needs at least one number")
    return numbers


def _names(text: str, option: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise MatchoptError(f"{option} needs at least one name")
    repeated = first_repeated(names)
    if repeated is not None:  # a grid would run the same cells twice over
        raise MatchoptError(f"{option} lists {repeated!r} twice")
    return names


def _task_names(text: str, option: str) -> list[str]:
    """Task names of a comma-separated option; design-bench names become matchopt's."""
    names = [task_name(name) for name in _names(text, option)]
    repeated = first_repeated(names)
    if repeated is not None:  # e.g. tfbind8 and TFBind8-Exact-v0
        raise MatchoptError(f"{option} lists {repeated!r} twice")
    return names


def cmd_data(args: argparse.Namespace) -> int:
    if args.data_command == "fetch":
        print(fetch_task_data([task_name(t) for t in args.tasks], args.data_dir).text())
    else:
        print(data_status_table(args.data_dir, verify=args.verify))
    return 0


def cmd_tasks(args: argparse.Namespace) -> int:
    data_dir = resolve_data_dir(args.data_dir)
    print(f"data folder: {data_dir or f'(none: set --data-dir or {DATA_DIR_ENV})'}")
    width = max(map(len, TASKS))
    print(f"{'task':<{width}} {'design':<20} {'offline rows':>12}  {'data':<9} summary")
    for name, cls in TASKS.items():
        print(
            f"{name:<{width}} {cls.space.describe():<20} {cls.offline_size:>12,}  "
            f"{cls.data_status(data_dir):<9} {cls.summary}"
        )
    for suite, names in SUITES.items():
        print(f"\nsuite {suite} (`matchopt bench --suite {suite}`): {', '.join(names)}")
    return 0


def cmd_methods(args: argparse.Namespace) -> int:
    if args.name is None:
        width = max(map(len, METHODS))
        for name, entry in METHODS.items():
            mark = "  (recommended: default of `matchopt optimize`)" * (name == RECOMMENDED_METHOD)
            print(f"{name:{width}}  {entry.summary}{mark}")
        print("\n`matchopt methods NAME` lists a method's config fields (--set KEY=VALUE).")
        return 0
    entry = get_method_entry(args.name)
    print(f"{args.name}: {entry.summary}" + " (recommended)" * (args.name == RECOMMENDED_METHOD))
    notes = field_docs(entry.cls.config_class)
    paper = build_config(entry, "paper")
    presets = {p: v for p, v in entry.cls.presets.items() if p != "paper" and v}
    for f in dataclasses.fields(paper):
        fixed = " (fixed by this method)" if f.name in entry.fixed else ""
        others = "; ".join(f"{p}: {v[f.name]!r}" for p, v in presets.items() if f.name in v)
        print(
            f"  {f.name} = {getattr(paper, f.name)!r}{fixed}" + (f"  [{others}]" if others else "")
        )
        if notes.get(f.name):
            print(f"      {notes[f.name]}")
    print(f"presets: {', '.join(entry.cls.presets)}; values shown are the paper preset's")
    return 0


def field_docs(config_class: type) -> dict[str, str]:
    """Field name -> first line of the docstring written under it in the config's source (or in
    the source of the base class that declares it)."""
    import ast
    import inspect
    import textwrap

    docs: dict[str, str] = {}
    for cls in reversed(config_class.__mro__):  # a subclass's docstring wins
        if not dataclasses.is_dataclass(cls):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
        except (OSError, TypeError, SyntaxError):  # no source (e.g. a frozen build)
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node, after in zip(body, body[1:]):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[node.target.id] = after.value.value.strip().splitlines()[0]
    return docs


def add_table_parsers(sub: argparse._SubParsersAction) -> None:
    """``optimize`` and ``propose``: optimize a user's own CSV/Parquet table."""
    p_opt = sub.add_parser(
        "optimize", help="fit a method on your own CSV/Parquet table and propose new rows"
    )
    p_opt.add_argument("data", metavar="DATA", help="CSV or Parquet file, one measured row each")
    p_opt.add_argument("--target", required=True, help="the column to maximize (or minimize)")
    p_opt.add_argument("--minimize", action="store_true", help="lower target values are better")
    p_opt.add_argument(
        "--features", default=None, metavar="A,B", help="feature columns (default: all others)"
    )
    p_opt.add_argument(
        "--categorical", default="", metavar="A,B", help="feature columns holding categories"
    )
    p_opt.add_argument(
        "--categories",
        default="search",
        choices=("search", "keep"),
        help="search (default): each proposal's categories are the ones the ranking surrogate "
        "predicts best, one column at a time; keep: as the method's search left them (almost "
        "always its start row's)",
    )
    p_opt.add_argument(
        "--sequence", default=None, metavar="COL", help="a fixed-length sequence column"
    )
    p_opt.add_argument(
        "--alphabet", default=None, metavar="LETTERS", help="its letters (default: those used)"
    )
    p_opt.add_argument(
        "--bounds",
        action="append",
        default=[],
        metavar="COL=LO:HI",
        help="range of a numeric column's proposals (default: its observed range; repeatable)",
    )
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
    p_opt.add_argument(
        "--min-distance",
        type=float,
        default=0.0,
        metavar="D",
        help="proposals at least D from every measured row (differing positions, or std units)",
    )
    p_opt.add_argument(
        "--diversity",
        type=float,
        default=0.0,
        metavar="D",
        help="proposals at least D from each other (same units; best predicted kept first)",
    )
    add_threads_option(p_opt)
    add_device_option(p_opt)

    p_prop = sub.add_parser("propose", help="propose new rows with a model saved by optimize")
    p_prop.add_argument("--model", required=True, help="file written by optimize --save-model")
    p_prop.add_argument("--n", type=int, default=128, help="proposals to write (default 128)")
    p_prop.add_argument(
        "--out",
        default=None,
        help=f"CSV or Parquet output file (default {DEFAULT_OUT}, only if no such file exists)",
    )
    add_threads_option(p_prop)


def output_path(given: str | None) -> str:
    """``--out``, or :data:`DEFAULT_OUT` where no file of that name exists: a file the user did
    not name is never overwritten."""
    if given is not None:
        return given
    if os.path.lexists(DEFAULT_OUT):
        raise MatchoptError(
            f"{DEFAULT_OUT} exists (the default output); name it with --out to replace it, or "
            "name another file"
        )
    return DEFAULT_OUT


def cmd_optimize(args: argparse.Namespace) -> int:
    from matchopt.tabular import (
        OUTPUT_SUFFIXES,
        TableOptimizer,
        check_output_path,
        parse_bounds,
        read_table,
    )
    from matchopt.tabular.optimizer import resolve_preset

    # Every cheap check comes before the (possibly long) fit.
    out = check_output_path(output_path(args.out), "--out", OUTPUT_SUFFIXES, inputs=[args.data])
    model_path = (
        check_output_path(args.save_model, "--save-model", inputs=[args.data])
        if args.save_model
        else None
    )
    if model_path is not None and model_path.resolve() == out.resolve():
        raise MatchoptError("--save-model and --out name the same file")
    _check_count(args.n)
    resolve_device(args.device)
    optimizer = TableOptimizer(
        target=args.target,
        features=_names(args.features, "--features") if args.features is not None else None,
        categorical=[c.strip() for c in args.categorical.split(",") if c.strip()],
        sequence=args.sequence,
        alphabet=args.alphabet,
        minimize=args.minimize,
        bounds=parse_bounds(args.bounds),
        method=args.method,
        preset=args.preset,
        overrides=parse_set_options(args.set),
        seed=args.seed,
        threads=args.threads,
        oversample=args.oversample,
        min_distance=args.min_distance,
        diversity=args.diversity,
        categories=args.categories,
        progress=True,
        device=args.device,
    )
    build_config(
        get_method_entry(args.method), resolve_preset(args.method, args.preset), optimizer.overrides
    )
    optimizer.fit(read_table(args.data), source=args.data)
    schema = optimizer.schema_
    print(
        f"[{printable(args.data)}: {len(optimizer.data_)} rows / {args.method} / seed {args.seed}] "
        f"design: {printable(schema.describe())}",
        file=sys.stderr,
    )
    if schema.ignored:
        print(f"  ignored columns: {printable(', '.join(schema.ignored))}", file=sys.stderr)
    if optimizer.choice_:
        print(choice_line(optimizer.choice_), file=sys.stderr)
    quality = optimizer.fit_quality_
    if quality is not None:
        print(
            f"  held-out fit: Spearman {quality['spearman']:.2f}, R^2 {quality['r2']:.2f} on "
            f"{quality['n_test']} rows ({quality['what']})",
            file=sys.stderr,
        )
    model_bytes = optimizer.to_bytes() if model_path is not None else None
    _propose_and_write(optimizer, args.n, out)
    if model_path is not None:
        from matchopt.tabular import write_file

        write_file(model_path, model_bytes)
        print(f"model -> {printable(model_path)}")
    return 0


def cmd_propose(args: argparse.Namespace) -> int:
    from matchopt.tabular import OUTPUT_SUFFIXES, TableOptimizer, check_output_path

    out = check_output_path(output_path(args.out), "--out", OUTPUT_SUFFIXES, inputs=[args.model])
    _check_count(args.n)
    optimizer = TableOptimizer.load(args.model)
    if args.threads is not None:
        optimizer.threads = check_threads(args.threads)
    fitted = f"{optimizer.method} fitted on {printable(optimizer.source_)}"  # from the file
    print(f"[{printable(args.model)}: {fitted} / seed {optimizer.seed}]", file=sys.stderr)
    try:
        _propose_and_write(optimizer, args.n, out)
    except (MatchoptError, OSError):
        raise
    except Exception as err:
        # A file that passed every check and still fails: the checks cannot see how the layers
        # of a generator fit together (MINs, DDOM, CbAS, BONET); name the file, not a frame.
        why = " ".join(f"{type(err).__name__}: {err}".split())[:300]
        raise MatchoptError(
            f"{args.model}: the model in this file fails to propose ({printable(why)}); fit "
            "and save it again with `matchopt optimize --save-model`"
        ) from None
    return 0


def _check_count(n: int) -> None:
    from matchopt.tabular.optimizer import MAX_PROPOSALS

    if n < 1:
        raise MatchoptError(f"--n {n}: need at least 1 proposal")
    if n > MAX_PROPOSALS:
        raise MatchoptError(f"--n {n}: at most {MAX_PROPOSALS:,} proposals per call")


def choice_line(choice: dict) -> str:
    """What a per-table choice picked and why: each member's protocol score."""
    scores = ", ".join(f"{name} {value:.3f}" for name, value in choice["protocol"].items())
    why = (
        f"protocol scores (mean judge score of each member's designs when fitted without the "
        f"table's best rows): {scores}"
        if scores
        else "too few rows to judge the members on the table: the first member"
    )
    left = "".join(f"; {name} left out ({reason})" for name, reason in choice["left_out"].items())
    return f"  chose {choice['choice']}: {why}{left}"


def _propose_and_write(optimizer, n: int, out: Path) -> None:
    """Propose, report shortfalls as one-line warnings, write atomically, show the best rows."""
    import warnings

    from matchopt.tabular import ProposalWarning, write_table

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ProposalWarning)
        proposals = optimizer.propose(n)
    for warning in caught:
        if issubclass(warning.category, ProposalWarning):
            print(f"matchopt: warning: {printable(warning.message)}", file=sys.stderr)
        else:
            warnings.showwarning(
                warning.message, warning.category, warning.filename, warning.lineno
            )
    if len(proposals) == 0:
        raise MatchoptError(
            f"no proposal could be made ({optimizer.n_candidates_} candidates, all repeating "
            "measured rows or filtered out); nothing written"
        )
    write_table(proposals, out)
    print(f"  ranked by {printable(optimizer.ranking_)}", file=sys.stderr)
    if len(proposals):  # column names and categories come from the user's file
        lines = proposals.head(10).to_string(index=False).splitlines()
        print("\n".join(printable(line, 20_000) for line in lines))
    print(f"{len(proposals)} proposals -> {printable(out)}")


COMMANDS = {
    "optimize": cmd_optimize,
    "propose": cmd_propose,
    "run": cmd_run,
    "bench": cmd_bench,
    "report": cmd_report,
    "study": cmd_study,
    "data": cmd_data,
    "tasks": cmd_tasks,
    "methods": cmd_methods,
}


#: What a command interrupted by Ctrl-C has kept, said after "matchopt: interrupted".
INTERRUPTED = {
    "run": " (recorded seeds are kept; rerun the same command to go on: a seed in training "
    "continues from its last snapshot)",
    "bench": " (recorded cells are kept; rerun the same command to go on)",
    "study": " (finished tasks and seeds are kept; rerun the same command to go on)",
    "optimize": " (no file is left half-written: the proposals are written when ready, then "
    "the model file)",
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


if __name__ == "__main__":
    sys.exit(main())
