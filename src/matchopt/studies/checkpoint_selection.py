"""Which offline checkpoint-selection rule finds MATCH-OPT's good surrogates?

Run as published, MATCH-OPT trains 200 epochs and searches once at the end; on TF-Bind-8 the
surrogates after 40-100 epochs give better designs than the last one. Choosing the epoch by
oracle score would leak the oracle; choosing it from held-out offline rows is a method. This
study measures how well each rule of :data:`~matchopt.validation.SELECTIONS` does that.

Read top to bottom:

1. **Training** (one per task and seed): MATCH-OPT with the paper's configuration, ``fraction``
   of the offline rows held out (``split``: random or top), a checkpoint and every validation
   metric after every ``every`` epochs (:mod:`matchopt.validation`).
2. **Oracle** (the study only): every checkpoint runs the paper's search and its 128 designs are
   scored by the task's oracle. This module is the only place in matchopt that scores
   intermediate checkpoints with an oracle; the outputs label these columns ``oracle_*``, and no
   rule sees them.
3. **Rules**: ``last`` and the best checkpoint by each validation metric. For each rule, the mean
   oracle p100/p50 of the checkpoints it picks; for each metric, the Spearman correlation between
   the metric (signed so that larger is better) and oracle p50 across one seed's checkpoints.
   Rules and metrics are named ``split:name``: each split is its own training.

Outputs in ``out`` (each written atomically; a finished (task, split, seed) is kept and skipped
on a rerun, so a long study resumes; the tables cover every finished seed of the named tasks
under ``out`` made with the same settings, so expensive tasks may run fewer seeds):
``<task>/<split>/seed<k>.csv`` (one row per checkpoint),
``checkpoints.csv`` (all of them), ``picks.csv``, ``rules.csv`` (rules named ``split:rule``,
best first), ``metric_correlation.csv``, and ``<task>-<split>.png`` (oracle p100 and p50 against
epoch per seed, each rule's pick marked).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Sequence
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
from matchopt.validation import METRICS, SELECTIONS, larger_is_better

if TYPE_CHECKING:
    import pandas as pd

CHECKPOINTS_FILE = "checkpoints.csv"
RULES_FILE = "rules.csv"
CORRELATION_FILE = "metric_correlation.csv"
RULES = SELECTIONS
N_DESIGNS = 128


def _import_pandas():
    try:
        import pandas as pd
    except ImportError:
        raise MatchoptError(
            "the checkpoint-selection study needs pandas: pip install pandas"
        ) from None
    return pd


# --- 1 + 2. One training, every checkpoint searched and scored ----------------------------------


def study_seed(
    task: Task,
    seed: int,
    every: int,
    split: str = "random",
    fraction: float = 0.1,
    preset: str = "paper",
    overrides: dict[str, Any] | None = None,
    progress: bool = False,
) -> pd.DataFrame:
    """One MATCH-OPT training on ``task`` with a checkpoint every ``every`` epochs.

    Returns:
        One row per checkpoint: epoch, every validation metric, ``oracle_p100`` and
        ``oracle_p50`` of the 128 designs its search returns.
    """
    pd = _import_pandas()
    settings = {
        **(overrides or {}),
        "validation_fraction": fraction,
        "validation_split": split,
        "validation_every": every,
        "selection": "last",
    }
    method = make_method("matchopt", preset, settings, seed=seed, progress=progress)
    method.fit(task.offline, keep_checkpoints=True)
    rows = []
    for metrics, state in zip(method.validator_.history, method.checkpoints_):
        method.model_.load_state_dict(state)
        designs = method.propose(N_DESIGNS)
        scores = task.normalize(task.score(designs))
        rows.append(
            {
                "task": task.name,
                "seed": seed,
                "split": split,
                **metrics,
                "oracle_p100": percentile(scores, 100),
                "oracle_p50": percentile(scores, 50),
            }
        )
    return pd.DataFrame(rows)


# --- 3. Rules ------------------------------------------------------------------------------------


def rule_picks(checkpoints: pd.DataFrame) -> pd.DataFrame:
    """The checkpoint each rule picks, per (task, seed): columns task, seed, rule, epoch, oracle_*.

    ``last`` picks the final epoch; a metric rule the best value (earliest epoch on ties), as
    :class:`~matchopt.validation.CheckpointSelector` does during training.
    """
    pd = _import_pandas()
    picks = []
    for (task, seed, split), group in checkpoints.groupby(["task", "seed", "split"], sort=False):
        group = group.sort_values("epoch")
        for rule in RULES:
            if rule == "last":
                row = group.iloc[-1]
            else:
                values = group[rule].to_numpy(dtype=float)
                if np.isnan(values).all():
                    continue
                signed = values if larger_is_better(rule) else -values
                row = group.iloc[int(np.nanargmax(signed))]
            picks.append(
                {
                    "task": task,
                    "seed": seed,
                    "rule": f"{split}:{rule}",
                    "epoch": int(row["epoch"]),
                    "oracle_p100": float(row["oracle_p100"]),
                    "oracle_p50": float(row["oracle_p50"]),
                }
            )
    return pd.DataFrame(picks)


def rule_table(picks: pd.DataFrame) -> pd.DataFrame:
    """Per rule (``split:rule``): mean oracle p100/p50 per task, mean p50 and p100 ranks.

    The rank is computed per task from the rules' mean p50 (1 = best, ties share the lower rank),
    then averaged over tasks: the criterion written (docs/studies.md) before the study was run.
    Rows are sorted by it (ties: mean p100 rank, then ``last``), so the first row is the winner.
    """
    means = picks.groupby(["rule", "task"], sort=False)[["oracle_p100", "oracle_p50"]].mean()
    table = means.unstack("task")
    table.columns = [f"{task} {column.removeprefix('oracle_')}" for column, task in table.columns]
    p50 = means["oracle_p50"].unstack("task")
    table["mean p50 rank"] = p50.rank(ascending=False, method="min").mean(axis=1)
    ordered = picks.sort_values(["task", "seed"], kind="stable")
    table["epochs picked"] = ordered.groupby("rule", sort=False).apply(
        lambda rows: "; ".join(
            f"{task} " + " ".join(map(str, group["epoch"]))
            for task, group in rows.groupby("task", sort=False)
        ),
        include_groups=False,
    )
    p100 = means["oracle_p100"].unstack("task")
    table["mean p100 rank"] = p100.rank(ascending=False, method="min").mean(axis=1)
    # Ties: the higher mean p100 rank, then the paper's rule (last) first.
    table["is_last"] = [not rule.endswith(":last") for rule in table.index]
    table = table.sort_values(["mean p50 rank", "mean p100 rank", "is_last"], kind="stable")
    return table.drop(columns="is_last")


def metric_correlations(checkpoints: pd.DataFrame) -> pd.DataFrame:
    """Spearman correlation of each metric (signed: larger is better) with oracle p50.

    Computed across the checkpoints of one (task, seed), then averaged over seeds per task.
    """
    pd = _import_pandas()
    from scipy import stats

    rows = []
    for (task, seed, split), group in checkpoints.groupby(["task", "seed", "split"], sort=False):
        for metric in [*METRICS, "matching-loss"]:
            values = group[metric].to_numpy(dtype=float)
            sign = 1.0 if larger_is_better(metric) else -1.0
            ok = np.isfinite(values)
            oracle = group["oracle_p50"].to_numpy(dtype=float)[ok]
            if ok.sum() < 3 or np.ptp(values[ok]) == 0 or np.ptp(oracle) == 0:
                rho = float("nan")
            else:
                rho = float(stats.spearmanr(sign * values[ok], oracle).statistic)
            rows.append(
                {
                    "task": task,
                    "seed": seed,
                    "metric": f"{split}:{metric}",
                    "spearman_with_p50": rho,
                }
            )
    frame = pd.DataFrame(rows)
    return frame.groupby(["metric", "task"], sort=False)["spearman_with_p50"].mean().unstack("task")


def every_epochs(curve: pd.DataFrame) -> float:
    """Epochs between the checkpoints of one curve (1 with a single checkpoint)."""
    epochs = np.sort(curve["epoch"].to_numpy())
    return float(np.min(np.diff(epochs))) if len(epochs) > 1 else 1.0


def _figure_png(checkpoints: pd.DataFrame, picks: pd.DataFrame, task: str) -> bytes:
    """Oracle p100 (top) and p50 (bottom) against epoch, one column per seed, rules marked."""
    from matplotlib.figure import Figure

    data = checkpoints[checkpoints["task"] == task]
    seeds = sorted(data["seed"].unique())
    fig = Figure(figsize=(3.2 * len(seeds) + 1.8, 5.0), layout="constrained")
    axes = fig.subplots(2, len(seeds), squeeze=False, sharex=True)
    markers = dict(zip(RULES, "osD^v<>ph"))
    colors = dict(zip(RULES, [f"C{i}" for i in range(len(RULES))]))
    split = data["split"].iloc[0]
    data = data[data["split"] == split]
    for column, seed in enumerate(seeds):
        curve = data[data["seed"] == seed].sort_values("epoch")
        chosen = picks[
            (picks["task"] == task)
            & (picks["seed"] == seed)
            & picks["rule"].str.startswith(f"{split}:")
        ]
        for row_index, score in enumerate(("oracle_p100", "oracle_p50")):
            ax = axes[row_index][column]
            ax.plot(curve["epoch"], curve[score], color="0.4", lw=1.2, marker=".", ms=3)
            for offset, pick in enumerate(chosen.itertuples(index=False)):
                rule = pick.rule.split(":", 1)[1]
                # Rules that pick the same checkpoint are spread sideways; heights stay exact.
                spread = 0.4 * every_epochs(curve) / max(len(chosen), 1)
                ax.plot(
                    pick.epoch + spread * (offset - (len(chosen) - 1) / 2),
                    getattr(pick, score),
                    linestyle="none",
                    marker=markers[rule],
                    color=colors[rule],
                    label=rule,
                    ms=6,
                    alpha=0.85,
                )
            ax.grid(alpha=0.3)
            if row_index == 0:
                ax.set_title(f"{task}, seed {seed} ({split} split)")
            else:
                ax.set_xlabel("epoch")
            if column == 0:
                ax.set_ylabel(f"{score.removeprefix('oracle_')} (oracle, study only)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right center", title="rule's pick", fontsize=8)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, metadata={"Software": None})
    return buffer.getvalue()


def _other_seeds(
    out: Path,
    tasks: Sequence[str],
    splits: Sequence[str],
    done: set[tuple[str, str, int]],
    described: Callable[[str], str],
) -> list[pd.DataFrame]:
    """The finished seeds under ``out`` of these tasks and splits that this run did not do
    (e.g. fewer seeds for an expensive task, run by another command), if made with these
    settings: the tables cover them too."""
    pd = _import_pandas()
    frames = []
    for task_name in dict.fromkeys(tasks):
        for split in dict.fromkeys(splits):
            for path in sorted((out / task_name / split).glob("seed*.csv")):
                seed = int(path.stem.removeprefix("seed"))
                if (task_name, split, seed) in done:
                    continue
                if same_settings(out, path, described(split)):
                    frames.append(pd.read_csv(path))
    return frames


def _check_arguments(every: int, seeds: Sequence[int]) -> None:
    """Refuse a checkpoint interval under one epoch and repeated or negative seeds."""
    if every < 1:
        raise MatchoptError(f"--every must be >= 1 epoch, got {every}")
    if len(set(seeds)) != len(seeds) or any(s < 0 for s in seeds):
        raise MatchoptError(f"seeds must be distinct and >= 0, got {list(seeds)}")


def _settings_description(
    split: str, fraction: float, every: int, preset: str, overrides: dict[str, Any] | None
) -> str:
    """The settings a stored seed of ``split`` must have been made with (JSON), to be read back."""
    settings = {"split": split, "fraction": fraction, "every": every, "preset": preset}
    return json.dumps({**settings, "overrides": overrides or {}}, sort_keys=True)


def _write_tables_and_figures(
    out: Path, checkpoints: pd.DataFrame, tasks: Sequence[str], splits: Sequence[str]
) -> pd.DataFrame:
    """Write the checkpoints, rules, correlations and picks tables and one figure per task and
    split into ``out``; returns the rule table."""
    picks = rule_picks(checkpoints)
    rules = rule_table(picks)
    atomic_write_bytes(out / CHECKPOINTS_FILE, csv_bytes(checkpoints))
    atomic_write_bytes(out / RULES_FILE, csv_bytes(rules, index=True))
    atomic_write_bytes(out / CORRELATION_FILE, csv_bytes(metric_correlations(checkpoints), True))
    atomic_write_bytes(out / "picks.csv", csv_bytes(picks))
    for task_name in dict.fromkeys(tasks):
        for split in dict.fromkeys(splits):
            png = _figure_png(checkpoints[checkpoints["split"] == split], picks, task_name)
            atomic_write_bytes(out / f"{task_name}-{split}.png", png)
    return rules


def run_checkpoint_selection_study(
    tasks: Sequence[str],
    seeds: Sequence[int],
    out_dir: str | Path,
    every: int = 10,
    splits: Sequence[str] = ("random",),
    fraction: float = 0.1,
    preset: str = "paper",
    overrides: dict[str, Any] | None = None,
    data_dir: str | Path | None = None,
    progress: bool = False,
) -> pd.DataFrame:
    """Run (or resume) the study and write its tables and figures; returns the rule table.

    Args:
        tasks: task names; rules are ranked across them.
        seeds: one training per seed and task.
        out_dir: output folder.
        every: epochs between checkpoints.
        splits: held-out rows, ``random`` and/or ``top``: one training per split, task and seed.
        fraction: share of offline rows held out.
        preset: MATCH-OPT preset the trainings start from (``paper`` for the study itself).
        overrides: config overrides on top of the preset (e.g. fewer epochs for a smoke test).
        data_dir: design-bench data folder.
        progress: progress bars on stderr.
    """
    pd = _import_pandas()
    _check_arguments(every, seeds)
    out = check_output_folder(out_dir, "study folder")

    def described(split: str) -> str:
        return _settings_description(split, fraction, every, preset, overrides)

    frames = []
    jobs = [(task, split, seed) for task in tasks for split in splits for seed in seeds]
    bar = tqdm(jobs, desc="checkpoint study", unit="run", disable=not progress)
    loaded: dict[str, Task] = {}
    for task_name, split, seed in bar:
        bar.set_postfix(task=task_name, split=split, seed=seed, refresh=True)
        if task_name not in loaded:
            loaded[task_name] = load_task(task_name, data_dir)
        frame, _ = stored_or_computed(
            out,
            out / task_name / split / f"seed{seed}.csv",
            described(split),
            study_seed,
            loaded[task_name],
            seed,
            every,
            split,
            fraction,
            preset,
            overrides,
            progress,
        )
        frames.append(frame)
    bar.close()
    frames += _other_seeds(out, tasks, splits, set(jobs), described)
    checkpoints = pd.concat(frames, ignore_index=True)
    return _write_tables_and_figures(out, checkpoints, tasks, splits)


def format_table(frame: pd.DataFrame) -> str:
    """A plain-text rendering of a study table."""
    return frame.to_string(float_format=lambda v: f"{v:.3f}")


__all__ = [
    "run_checkpoint_selection_study",
    "study_seed",
    "rule_picks",
    "rule_table",
    "metric_correlations",
    "format_table",
]
