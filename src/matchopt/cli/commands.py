"""The commands of the command line, one function each (``cmd_<name>``), called by
:func:`matchopt.cli.main` with the parsed arguments."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path

from matchopt.bench import Grid, run_grid
from matchopt.bench.cells import Cell, run_cell, save_record
from matchopt.bench.grid import (
    LOCK_FILE,
    check_results_folder,
    finished_record,
    first_repeated,
)
from matchopt.checkpoints import save_on_interrupt
from matchopt.config_fields import parse_set_options
from matchopt.errors import MatchoptError, printable
from matchopt.io import FileLocked, check_output_folder, file_lock
from matchopt.methods import METHODS, RECOMMENDED_METHOD, get_method_entry
from matchopt.methods.base import build_config
from matchopt.records import RunRecord, summary_table
from matchopt.report import write_report
from matchopt.runtime import (
    MAX_SEED,
    check_threads,
    keep_freed_memory,
    resolve_device,
)
from matchopt.tasks import (
    DATA_DIR_ENV,
    SUITES,
    TASKS,
    Task,
    get_suite,
    load_task,
    resolve_data_dir,
    task_name,
)
from matchopt.tasks.download import data_status_table, ensure_task_data, fetch_task_data

#: Subcommand name -> the function that runs it, registered where each is defined.
REGISTERED: dict[str, Callable[[argparse.Namespace], int]] = {}


def registered(name: str) -> Callable[[Callable[[argparse.Namespace], int]], Callable]:
    """Register the decorated function as the subcommand ``name``."""

    def register(function: Callable[[argparse.Namespace], int]) -> Callable:
        REGISTERED[name] = function
        return function

    return register


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


@registered("run")
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


@registered("bench")
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


@registered("report")
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


@registered("study")
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
    return _print_rules(
        "Mean oracle scores of the checkpoints each rule picks (study only):",
        format_table(rules),
        args.out,
    )


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
    return _print_rules(
        "Mean oracle scores of each search step scale (study only):", format_table(rules), args.out
    )


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
    return _print_rules(
        "Mean oracle scores of each combination of search settings (study only):",
        format_table(rules),
        args.out,
    )


def _print_rules(title: str, table: str, out: str) -> int:
    """A study's rule table on stdout, where its files went on stderr; exit status 0."""
    print(title)
    print(table)
    print(f"CSV and PNG in {out}", file=sys.stderr)
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


@registered("data")
def cmd_data(args: argparse.Namespace) -> int:
    if args.data_command == "fetch":
        print(fetch_task_data([task_name(t) for t in args.tasks], args.data_dir).text())
    else:
        print(data_status_table(args.data_dir, verify=args.verify))
    return 0


@registered("tasks")
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


@registered("methods")
def cmd_methods(args: argparse.Namespace) -> int:
    if args.name is None:
        for title, rows in method_listing():
            print(title)
            width = max(len(name) for name, _ in rows)
            for name, text in rows:
                print(f"  {name:{width}}  {text}")
            print()
        print("`matchopt methods NAME` lists a method's config fields (--set KEY=VALUE).")
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


def method_listing() -> list[tuple[str, list[tuple[str, str]]]]:
    """``matchopt methods``' sections: the recommended method, the other methods of its class
    as its variants (each by the settings where it differs), MATCH-OPT's other methods, the
    baselines, the sanity checks and the per-table choices; each a title and (name, text)
    rows."""
    recommended = METHODS[RECOMMENDED_METHOD]
    base = build_config(recommended, "paper")
    variants, rest = [], {"matchopt": [], "baseline": [], "sanity": [], "choice": []}
    for name, entry in METHODS.items():
        if name == RECOMMENDED_METHOD:
            continue
        if entry.cls is recommended.cls:
            config = build_config(entry, "paper")
            changed = [
                f"{f.name}={getattr(config, f.name)!r} (not {getattr(base, f.name)!r})"
                for f in dataclasses.fields(config)
                if getattr(config, f.name) != getattr(base, f.name)
            ]
            variants.append((name, ", ".join(changed)))
        else:
            rest[entry.kind].append((name, entry.summary))
    sections = [
        ("Recommended (the default of `matchopt optimize`):", [
            (RECOMMENDED_METHOD, recommended.summary)
        ]),
        (f"Variants of {RECOMMENDED_METHOD} (its settings but these):", variants),
        ("MATCH-OPT as published:", rest["matchopt"]),
        ("Baselines:", rest["baseline"]),
        ("Sanity checks (reference points, not methods to use):", rest["sanity"]),
        ("Per-table choice:", rest["choice"]),
    ]  # fmt: skip
    return [(title, rows) for title, rows in sections if rows]


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


@registered("optimize")
def cmd_optimize(args: argparse.Namespace) -> int:
    """Build the run's one :class:`~matchopt.tabular.settings.OptimizeJob` from the options and
    hand it over (:func:`~matchopt.tabular.optimizer.run_optimize` checks and runs it)."""
    import shlex

    from matchopt.tabular.optimizer import run_optimize
    from matchopt.tabular.settings import OptimizeJob, OptimizeSettings, parse_bounds

    features = _names(args.features, "--features") if args.features is not None else None
    categorical = [c.strip() for c in args.categorical.split(",") if c.strip()]
    overrides = parse_set_options(args.set)
    command = shlex.join(["matchopt", *getattr(args, "argv", [])])
    settings = OptimizeSettings(
        target=args.target,
        features=features,
        categorical=categorical,
        sequence=args.sequence,
        alphabet=args.alphabet,
        minimize=args.minimize,
        bounds=parse_bounds(args.bounds),
        method=args.method,
        preset=args.preset,
        overrides=overrides,
        seed=args.seed,
        threads=args.threads,
        oversample=args.oversample,
        min_distance=args.min_distance,
        diversity=args.diversity,
        categories=args.categories,
        progress=True,
        device=args.device,
    )
    job = OptimizeJob(
        data=args.data,
        settings=settings,
        n=args.n,
        out=args.out,
        report=args.report,
        save_model=args.save_model,
        candidates=args.candidates,
        force=args.force,
        command=command,
    )
    return run_optimize(job)


@registered("propose")
def cmd_propose(args: argparse.Namespace) -> int:
    import shlex

    from matchopt.tabular import TableOptimizer, read_table
    from matchopt.tabular.optimizer import make_proposals
    from matchopt.tabular.outputs import check_outputs, write_outputs
    from matchopt.tabular.settings import check_count

    inputs = [args.model] + ([args.candidates] if args.candidates else [])
    paths = check_outputs(args.out, args.report, None, args.force, inputs)
    check_count(args.n)
    candidates = read_table(args.candidates) if args.candidates else None
    optimizer = TableOptimizer.load(args.model)
    if args.threads is not None:
        optimizer.threads = check_threads(args.threads)
    fitted = f"{optimizer.method} fitted on {printable(optimizer.source_)}"  # from the file
    print(f"[{printable(args.model)}: {fitted} / seed {optimizer.seed}]", file=sys.stderr)
    command = shlex.join(["matchopt", *getattr(args, "argv", [])])
    try:
        proposals, messages = make_proposals(optimizer, args.n, candidates, args.candidates)
        ranked = candidates is not None
        write_outputs(optimizer, proposals, messages, paths, command, ranked)
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
