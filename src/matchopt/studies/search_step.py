"""How far should MATCH-OPT's search move the designs?

With the paper's search (150 Adam steps of 0.01 on z-scored logits), about half of the designs
of the ``validated`` preset on TF-Bind-8 keep every token of their starting row: the median
design is an offline one. This study measures, on development tasks, the oracle scores of the
same fitted surrogate searched with the step size multiplied by each of several scales
(``search_lr_scale``), so that one scale can be chosen on the development tasks and frozen
before any run of the confirmation task.

Read top to bottom:

1. **Training** (one per task and seed): MATCH-OPT with ``preset`` (``validated``).
2. **Search and oracle** (the study only): for each scale, the 128 designs of the search with
   that step size, scored by the task's oracle. This module and
   :mod:`~matchopt.studies.checkpoint_selection` are the only places that score designs of
   alternative settings with an oracle; their outputs label these columns ``oracle_*``.
   Also recorded, without the oracle: how far the designs moved (the share of designs left
   equal to their start, and the mean distance in normalized units).
3. **Rules**: per scale the mean oracle p100/p50 per task and the mean p50 rank across tasks
   (the criterion written in docs/studies.md before the study ran); ties go to the smaller scale.

Outputs in ``out`` (atomic; a finished (task, seed) is kept and skipped on a rerun, and the
tables cover every finished seed of the named tasks made with the same settings):
``<task>/seed<k>.csv``, ``scales.csv`` (all rows), ``rules.csv`` (best first) and
``search-step.png`` (oracle p50 and p100 against the scale, per task).
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from tqdm.auto import tqdm

from matchopt.errors import MatchoptError
from matchopt.evaluation import percentile
from matchopt.io import atomic_write_bytes, check_output_folder
from matchopt.methods import make_method
from matchopt.studies.stored import csv_bytes, same_settings, stored_or_computed
from matchopt.tasks import Task, load_task

if TYPE_CHECKING:
    import pandas as pd

N_DESIGNS = 128
DEFAULT_SCALES = (1.0, 2.0, 4.0, 8.0, 16.0)


def study_seed(
    task: Task,
    seed: int,
    scales: Sequence[float],
    preset: str = "validated",
    overrides: dict[str, Any] | None = None,
    progress: bool = False,
) -> pd.DataFrame:
    """One training on ``task``; its surrogate searched with every step scale.

    Returns:
        One row per scale: ``unchanged`` (share of designs equal to their start),
        ``moved`` (mean normalized distance from the start), ``oracle_p100``, ``oracle_p50``.
    """
    import pandas as pd

    method = make_method("matchopt", preset, overrides, seed=seed, progress=progress)
    if method.config_.init != "topk":
        raise MatchoptError("the search-step study compares searches from the top rows (init)")
    method.fit(task.offline)
    starts = task.offline.x[task.offline.top_k(N_DESIGNS)]
    start_features = method.encoder_.encode_x(starts)
    rows = []
    for scale in scales:
        method.set_params(config__search_lr_scale=float(scale))
        designs = method.propose(N_DESIGNS)
        same = np.all(designs.reshape(len(designs), -1) == starts.reshape(len(starts), -1), 1)
        moved = np.linalg.norm(method.encoder_.encode_x(designs) - start_features, axis=1)
        scores = task.normalize(task.score(designs))
        rows.append(
            {
                "task": task.name,
                "seed": seed,
                "scale": float(scale),
                "unchanged": float(same.mean()),
                "moved": float(moved.mean()),
                "oracle_p100": percentile(scores, 100),
                "oracle_p50": percentile(scores, 50),
            }
        )
    return pd.DataFrame(rows)


def rule_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per scale: mean oracle p100/p50 and share unchanged per task, mean p50 and p100 ranks.

    Sorted by mean p50 rank (1 = best per task; ties share the lower rank), then mean p100
    rank, then the smaller scale: the first row is the rule the study chooses.
    """
    means = frame.groupby(["scale", "task"])[["oracle_p100", "oracle_p50", "unchanged"]].mean()
    table = means.unstack("task")
    table.columns = [f"{task} {col.removeprefix('oracle_')}" for col, task in table.columns]
    p50 = means["oracle_p50"].unstack("task")
    p100 = means["oracle_p100"].unstack("task")
    table["mean p50 rank"] = p50.rank(ascending=False, method="min").mean(axis=1)
    table["mean p100 rank"] = p100.rank(ascending=False, method="min").mean(axis=1)
    table["seeds"] = frame.groupby("scale")["seed"].nunique()
    table = table.reset_index().sort_values(
        ["mean p50 rank", "mean p100 rank", "scale"], kind="stable"
    )
    return table.set_index("scale")


def _figure_png(frame: pd.DataFrame) -> bytes:
    """Oracle p50 (top) and p100 (bottom) against the scale, one column per task."""
    from matplotlib.figure import Figure

    tasks = list(dict.fromkeys(frame["task"]))
    fig = Figure(figsize=(3.4 * len(tasks) + 0.6, 5.2), layout="constrained")
    axes = fig.subplots(2, len(tasks), squeeze=False, sharex=True)
    for column, task in enumerate(tasks):
        data = frame[frame["task"] == task]
        for row, score in enumerate(("oracle_p50", "oracle_p100")):
            ax = axes[row][column]
            for _, curve in data.groupby("seed"):
                curve = curve.sort_values("scale")
                ax.plot(curve["scale"], curve[score], color="0.7", lw=0.8, marker=".", ms=3)
            mean = data.groupby("scale")[score].mean()
            ax.plot(mean.index, mean.to_numpy(), color="C0", lw=2, marker="o", label="mean")
            ax.set_xscale("log", base=2)
            ax.grid(alpha=0.3)
            if row == 0:
                ax.set_title(task)
            else:
                ax.set_xlabel("search_lr_scale (x the paper's step)")
            if column == 0:
                ax.set_ylabel(f"{score.removeprefix('oracle_')} (oracle, study only)")
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, metadata={"Software": None})
    return buffer.getvalue()


def run_search_step_study(
    tasks: Sequence[str],
    seeds: Sequence[int],
    out_dir: str | Path,
    scales: Sequence[float] = DEFAULT_SCALES,
    preset: str = "validated",
    overrides: dict[str, Any] | None = None,
    data_dir: str | Path | None = None,
    progress: bool = False,
) -> pd.DataFrame:
    """Run (or resume) the study, write its tables and figure; returns the rule table."""
    import pandas as pd

    if not scales or any(not np.isfinite(s) or s <= 0 for s in scales):
        raise MatchoptError(f"scales must be positive numbers, got {list(scales)}")
    if len(set(seeds)) != len(seeds) or any(s < 0 for s in seeds):
        raise MatchoptError(f"seeds must be distinct and >= 0, got {list(seeds)}")
    out = check_output_folder(out_dir, "study folder")
    settings = json.dumps(
        {"scales": [float(s) for s in scales], "preset": preset, "overrides": overrides or {}},
        sort_keys=True,
    )
    frames = []
    jobs = [(task, seed) for task in tasks for seed in seeds]
    bar = tqdm(jobs, desc="search-step study", unit="run", disable=not progress)
    for task_name, seed in bar:
        bar.set_postfix(task=task_name, seed=seed, refresh=True)
        frame, _ = stored_or_computed(
            out,
            out / task_name / f"seed{seed}.csv",
            settings,
            study_seed,
            load_task(task_name, data_dir),
            seed,
            scales,
            preset,
            overrides,
        )
        frames.append(frame)
    bar.close()
    # The tables cover every finished seed of these tasks under ``out`` made with the same
    # settings, also by other commands (e.g. fewer seeds of an expensive task).
    for task_name in dict.fromkeys(tasks):
        for path in sorted((out / task_name).glob("seed*.csv")):
            seed = int(path.stem.removeprefix("seed"))
            if (task_name, seed) not in jobs and same_settings(out, path, settings):
                frames.append(pd.read_csv(path))
    frame = pd.concat(frames, ignore_index=True)
    frame["scale"] = frame["scale"].astype(float)  # CSV writes 1.0 as 1
    rules = rule_table(frame)
    atomic_write_bytes(out / "scales.csv", csv_bytes(frame))
    atomic_write_bytes(out / "rules.csv", csv_bytes(rules, index=True))
    atomic_write_bytes(out / "search-step.png", _figure_png(frame))
    return rules


__all__ = ["run_search_step_study", "study_seed", "rule_table", "DEFAULT_SCALES"]
