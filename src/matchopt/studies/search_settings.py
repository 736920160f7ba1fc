"""Which search settings should a method freeze? One training, many searches, scored by oracle.

A method's search fields (step, starts, pessimism...) do not change its training, so one fitted
method per task and seed can be searched with every combination of a grid of settings. This
study does that on development tasks and ranks the combinations by a criterion fixed in
advance (docs/suite-rounds.md), so that one combination can be frozen into the method's defaults
before the method meets any task it is confirmed on.

Read top to bottom:

1. **Training** (one per task and seed): the method with ``preset`` and ``overrides``.
2. **Search and oracle** (the study only): for each combination of the grid, the method's 128
   designs, scored by the task's oracle. The studies (this module,
   :mod:`~matchopt.studies.search_step`, :mod:`~matchopt.studies.checkpoint_selection`) are
   the only code that scores designs of alternative settings with an oracle; their outputs
   label those columns ``oracle_*``. Also recorded without the oracle: the share of designs
   equal to an offline row (``offline_rows``).
3. **Rules**: per combination the mean oracle p100/p50 per task, its rank among the
   combinations on each task at p50 and at p100 (1 = best, ties share the better rank),
   ``mean rank`` = the mean over tasks of (p50 rank + p100 rank) / 2, and ``p50 above offline``
   = the number of tasks where its mean p50 beats the best offline row (a rank alone ignores how
   far a combination falls: a collapse on one task costs it no more than a narrow loss). Best
   first: most tasks above the offline best, then the lowest mean rank, then the better mean p50
   rank, then the order of the grid as given (put the cheaper or more conservative values
   first).

Outputs in ``out`` (atomic; a finished (task, seed) is kept and skipped on a rerun):
``<task>/seed<k>.csv``, ``settings.csv`` (all rows), ``rules.csv`` (best first) and
``search-settings.png`` (oracle p50 and p100 of every combination, per task; the chosen one
marked).
"""

from __future__ import annotations

import dataclasses
import io
import itertools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from tqdm.auto import tqdm

from matchopt.errors import MatchoptError
from matchopt.evaluation import percentile
from matchopt.io import atomic_write_bytes, check_output_folder
from matchopt.methods import MethodEntry, build_config, get_method_entry, make_method
from matchopt.studies.stored import csv_bytes, stored_or_computed
from matchopt.tasks import Task, load_task

if TYPE_CHECKING:
    import pandas as pd

N_DESIGNS = 128


def combinations(grid: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Every combination of the grid's values, in the order given (last field fastest)."""
    names = list(grid)
    return [dict(zip(names, values)) for values in itertools.product(*grid.values())]


def setting_name(setting: Mapping[str, Any]) -> str:
    """``pessimism=1,search_step=0.3``: a combination as one string (a table's row label)."""
    return ",".join(
        f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in setting.items()
    )


def study_seed(
    task: Task,
    method_name: str,
    seed: int,
    grid: Mapping[str, Sequence[Any]],
    preset: str = "paper",
    overrides: Mapping[str, Any] | None = None,
) -> pd.DataFrame:
    """One training of ``method_name`` on ``task``, searched with every combination of ``grid``.

    Returns:
        One row per combination: ``setting``, ``offline_rows`` (share of designs equal to an
        offline row), ``offline_best`` (the best offline row's normalized score),
        ``oracle_p100``, ``oracle_p50``.
    """
    import pandas as pd

    method = make_method(method_name, preset, dict(overrides or {}), seed=seed)
    method.fit(task.offline)
    offline = {row.tobytes() for row in np.ascontiguousarray(task.offline.x)}
    rows = []
    for setting in combinations(grid):
        method.set_params(**{f"config__{k}": v for k, v in setting.items()})
        designs = method.propose(N_DESIGNS).astype(task.offline.x.dtype)
        scores = task.normalize(task.score(designs))
        rows.append(
            {
                "task": task.name,
                "seed": seed,
                "setting": setting_name(setting),
                "offline_rows": float(
                    np.mean([row.tobytes() in offline for row in np.ascontiguousarray(designs)])
                ),
                "offline_best": task.offline_best(),
                "oracle_p100": percentile(scores, 100),
                "oracle_p50": percentile(scores, 50),
            }
        )
    return pd.DataFrame(rows)


def _recorded(value: float) -> float:
    """``value`` as the study's CSV tables hold it (6 significant digits)."""
    return float(f"{value:.6g}")


def rule_table(frame: pd.DataFrame, order: Sequence[str]) -> pd.DataFrame:
    """Per combination: mean oracle p100/p50 per task, mean ranks (module notes), best first.

    ``order``: the combinations' names in grid order (the last tie-break).
    """
    # Judged on the values as the study's tables record them (6 significant digits): the same
    # table whether the rows come from memory or from the CSVs of a rerun, and no "win" by a
    # last-bit difference (Ehrlich values are float32 products: a design at the offline best's
    # level may score one ulp apart from it).
    frame = frame.assign(
        **{c: frame[c].map(_recorded) for c in ("oracle_p100", "oracle_p50", "offline_best")}
    )
    means = frame.groupby(["setting", "task"])[["oracle_p100", "oracle_p50"]].mean()
    table = means.unstack("task")
    table.columns = [f"{task} {col.removeprefix('oracle_')}" for col, task in table.columns]
    p50 = means["oracle_p50"].unstack("task").round(12)
    p100 = means["oracle_p100"].unstack("task").round(12)
    p50_rank = p50.rank(ascending=False, method="min")
    p100_rank = p100.rank(ascending=False, method="min")
    table["mean p50 rank"] = p50_rank.mean(axis=1)
    table["mean p100 rank"] = p100_rank.mean(axis=1)
    table["mean rank"] = ((p50_rank + p100_rank) / 2).mean(axis=1)
    offline_best = frame.groupby("task")["offline_best"].first()
    table["p50 above offline"] = p50.gt(offline_best, axis=1).sum(axis=1)
    table["seeds"] = frame.groupby("setting")["seed"].nunique()
    table["grid order"] = [list(order).index(s) for s in table.index]
    table = table.sort_values(
        ["p50 above offline", "mean rank", "mean p50 rank", "grid order"],
        ascending=[False, True, True, True],
        kind="stable",
    )
    return table.drop(columns="grid order")


def _figure_png(frame: pd.DataFrame, order: Sequence[str], chosen: str) -> bytes:
    """Oracle p50 (top) and p100 (bottom) of every combination, one column per task.

    The x axis numbers the combinations in grid order (``settings.csv`` names them); the one
    the criterion chose is marked in red.
    """
    from matplotlib.figure import Figure

    tasks = list(dict.fromkeys(frame["task"]))
    fig = Figure(figsize=(2.6 * len(tasks) + 1.2, 5.4), layout="constrained")
    axes = fig.subplots(2, len(tasks), squeeze=False, sharex=True)
    positions = {name: i for i, name in enumerate(order)}
    for column, task in enumerate(tasks):
        data = frame[frame["task"] == task]
        for row, score in enumerate(("oracle_p50", "oracle_p100")):
            ax = axes[row][column]
            mean = data.groupby("setting")[score].mean()
            names = [s for s in order if s in mean.index]
            ax.plot(
                [positions[s] for s in names], [mean[s] for s in names], color="C0", marker=".",
                lw=0.8, ms=3,
            )  # fmt: skip
            if chosen in mean.index:
                ax.plot(positions[chosen], mean[chosen], "o", color="C3", ms=7, label="chosen")
            ax.axhline(
                data["offline_best"].iloc[0], color="0.4", ls=":", lw=1, label="offline best"
            )
            ax.grid(alpha=0.3)
            if row == 0:
                ax.set_title(task, fontsize="medium")
            else:
                ax.set_xlabel("combination (grid order)")
            if column == 0:
                ax.set_ylabel(f"{score.removeprefix('oracle_')} (oracle, study only)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=2, fontsize="small")
    fig.suptitle(f"chosen: {chosen}", fontsize="medium")
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, metadata={"Software": None})
    return buffer.getvalue()


def _typed_grid(
    entry: MethodEntry,
    grid: Mapping[str, Sequence[Any]],
    seeds: Sequence[int],
    preset: str,
    overrides: Mapping[str, Any],
) -> tuple[dict[str, list[Any]], list[str]]:
    """The grid with its values as the config types them, and its combinations' names in order.

    Raises:
        MatchoptError: an empty grid, a field also overridden, a combination the config
            refuses (before any training), or bad seeds.
    """
    if not grid or any(len(values) == 0 for values in grid.values()):
        raise MatchoptError("the grid needs at least one field with at least one value")
    clash = set(grid) & set(overrides)
    if clash:
        raise MatchoptError(f"{', '.join(sorted(clash))}: in the grid and in --set")
    # Every combination must be a valid config (fails before any training).
    settings = combinations(grid)
    for setting in settings:
        build_config(entry, preset, {**overrides, **setting})
    if len(set(seeds)) != len(seeds) or any(s < 0 for s in seeds):
        raise MatchoptError(f"seeds must be distinct and >= 0, got {list(seeds)}")
    # Grid values as the config types them (e.g. "0.3" -> 0.3), so names are the same however
    # the values were given.
    typed = [
        {k: getattr(build_config(entry, preset, {**overrides, **s}), k) for k in s}
        for s in settings
    ]
    typed_grid = {name: list(dict.fromkeys(s[name] for s in typed)) for name in grid}
    return typed_grid, [setting_name(s) for s in typed]


def _study_identity(
    method_name: str,
    entry: MethodEntry,
    grid: Mapping[str, Sequence[Any]],
    preset: str,
    overrides: Mapping[str, Any],
) -> str:
    """The settings a stored table must have been made with (JSON), to be read back.

    The method's config without the grid's fields (the grid sets them; their defaults may change
    later, e.g. when the study's winner is frozen into them).
    """
    config = build_config(entry, preset, dict(overrides))
    fixed = {k: v for k, v in dataclasses.asdict(config).items() if k not in grid}
    return json.dumps(
        {
            "method": method_name,
            "preset": preset,
            "config": fixed,
            "grid": {k: [str(v) for v in vs] for k, vs in grid.items()},
        },
        sort_keys=True,
        default=str,
    )


def run_search_settings_study(
    method_name: str,
    grid: Mapping[str, Sequence[Any]],
    tasks: Sequence[str],
    seeds: Sequence[int],
    out_dir: str | Path,
    preset: str = "paper",
    overrides: Mapping[str, Any] | None = None,
    data_dir: str | Path | None = None,
    progress: bool = False,
) -> pd.DataFrame:
    """Run (or resume) the study, write its tables and figure; returns the rule table.

    Raises:
        MatchoptError: an unknown method or field, a value the field refuses, a field that is
            also overridden, bad seeds, or a folder holding a study of other settings.
    """
    import pandas as pd

    entry = get_method_entry(method_name)
    grid, order = _typed_grid(entry, grid, seeds, preset, dict(overrides or {}))
    described = _study_identity(method_name, entry, grid, preset, dict(overrides or {}))
    out = check_output_folder(out_dir, "study folder")
    frames = []
    jobs = [(task, seed) for task in tasks for seed in seeds]
    bar = tqdm(jobs, desc="search-settings study", unit="run", disable=not progress)
    for task_name, seed in bar:
        bar.set_postfix(task=task_name, seed=seed, refresh=True)
        frame, _ = stored_or_computed(
            out,
            out / task_name / f"seed{seed}.csv",
            described,
            study_seed,
            load_task(task_name, data_dir),
            method_name,
            seed,
            grid,
            preset,
            overrides,
        )
        frames.append(frame)
    bar.close()
    frame = pd.concat(frames, ignore_index=True)
    rules = rule_table(frame, order)
    atomic_write_bytes(out / "settings.csv", csv_bytes(frame))
    atomic_write_bytes(out / "rules.csv", csv_bytes(rules, index=True))
    atomic_write_bytes(out / "search-settings.png", _figure_png(frame, order, rules.index[0]))
    return rules


__all__ = ["combinations", "rule_table", "run_search_settings_study", "study_seed"]
