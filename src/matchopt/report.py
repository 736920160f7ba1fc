"""Run records -> tables and figures (the paper's Tables 1-6 and 9, Figures 3 and 5).

A results folder holds ``<task>/<method>/seed<k>.json`` records (at any depth). Everything here
is computed from the 128 normalized scores kept in each record, so any percentile can be
reported; percentiles are nearest-rank (:func:`matchopt.evaluation.percentile`).

Ranks follow the protocol: per task, methods are ranked by their mean score over seeds (1 = best,
ties share the better rank), and the mean normalized rank is

    MNR(method) = mean over tasks t of rank_t(method) / n_t,

with n_t the number of methods ranked on task t (lower is better). A method missing on a task
is not ranked there, and its MNR averages over the tasks it has.

Text output is deterministic: tasks and methods sorted by name, scores with 3 decimals and
seconds with 1, so two reports of the same records are byte-identical.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from matchopt.errors import MatchoptError, printable
from matchopt.evaluation import percentile
from matchopt.io import atomic_write_bytes
from matchopt.names import FORMATS
from matchopt.published import SOURCE, published_cell, published_tasks
from matchopt.records import RunRecord, is_number, load_records

ABLATION_METHODS = ("matchopt", "matchopt-noreg")
CURVE_PERCENTILES = tuple(range(101))


class _ScoreFormat:
    """Scores at three decimals, never as a negative zero (-0.0004 prints as 0.000)."""

    @staticmethod
    def format(value: float) -> str:
        text = f"{value:.3f}"
        return text[1:] if text == "-0.000" else text


_SCORE = _ScoreFormat()
_SECONDS = "{:.1f}"
_FRAME_COLUMNS = ["task", "method", "seed", "preset", "q", "score", "p100", "p50", "wall_seconds"]
_CSV_COLUMNS = ["metric", "task", "method", "q", "mean", "std", "n_seeds", "rank", "mnr"]


# --------------------------------------------------------------------------- loading records


# --------------------------------------------------------------------------- frames and ranks


def check_percentiles(percentiles: Iterable[float]) -> tuple[float, ...]:
    """Validate percentiles (numbers within 0..100); returns them as floats, duplicates dropped.

    Raises:
        MatchoptError: If one is not a number in 0..100, or none is given.
    """
    if isinstance(percentiles, (str, bytes)) or is_number(percentiles):
        raise MatchoptError(f"percentiles {percentiles!r}: expected a list of numbers in 0..100")
    checked: list[float] = []
    for q in percentiles:
        if not is_number(q) or not math.isfinite(q) or not 0 <= q <= 100:
            raise MatchoptError(f"percentile {q!r} is not a number within 0..100")
        if float(q) not in checked:
            checked.append(float(q))
    if not checked:
        raise MatchoptError("no percentile given; expected numbers within 0..100, e.g. 100,50")
    return tuple(checked)


def records_frame(
    records: Sequence[RunRecord], percentiles: Iterable[float] = (100, 50)
) -> pd.DataFrame:
    """Long-form table of records: one row per record and percentile.

    Args:
        records: Run records.
        percentiles: Percentiles q (0..100) of each record's scores to compute.

    Returns:
        Columns task, method, seed, preset, q, score (nearest-rank q-th percentile of the stored
        scores), p100, p50 (as stored), wall_seconds (fit + search); sorted by q (in the given
        order), task, method, seed.
    """
    qs = check_percentiles(percentiles)
    ordered = sorted(records, key=lambda r: (r.task, r.method, r.seed))
    rows = [
        [r.task, r.method, r.seed, r.preset, q, percentile(r.scores, q), r.p100, r.p50]
        + [float(r.wall_seconds)]
        for q in qs
        for r in ordered
    ]
    frame = pd.DataFrame(rows, columns=_FRAME_COLUMNS)
    return frame.astype({"seed": "int64", "q": "float64", "score": "float64"})


#: Percentiles of the lab view (each record keeps these two; :func:`matchopt.evaluation.lab_view`).
LAB_PERCENTILES = (100.0, 50.0)
_LAB_COUNTS = ("distinct", "offline_repeats", "unmeasured", "new")


def lab_frame(records: Sequence[RunRecord]) -> pd.DataFrame:
    """Long-form table of the records' lab views (records without one are left out).

    Returns:
        Columns task, method, seed, q, score and the counts distinct, offline_repeats,
        unmeasured, new; ``score`` is the q-th percentile over the distinct new designs, -inf
        for a run that returned none (ranked last: a lab has nothing new to test).
    """
    rows = []
    for r in sorted(records, key=lambda r: (r.task, r.method, r.seed)):
        lab = r.extra.get("lab")
        if lab is None:
            continue
        for q in LAB_PERCENTILES:
            value = lab[f"p{q:g}"]
            score = -math.inf if value is None else float(value)
            rows.append([r.task, r.method, r.seed, q, score, *(lab[c] for c in _LAB_COUNTS)])
    columns = ["task", "method", "seed", "q", "score", *_LAB_COUNTS]
    return pd.DataFrame(rows, columns=columns).astype({"q": "float64", "score": "float64"})


def summarize(frame: pd.DataFrame, value: str = "score") -> pd.DataFrame:
    """Mean, population std (ddof=0) and count over seeds of one column of a records frame.

    Args:
        frame: A :func:`records_frame`.
        value: The column to summarize (``score`` or ``wall_seconds``).

    Returns:
        Columns q, task, method, mean, std, n_seeds; one row per (q, task, method) with records.
    """
    grouped = frame.groupby(["q", "task", "method"], sort=True)[value]
    stats = pd.DataFrame(
        {"mean": grouped.mean(), "std": grouped.std(ddof=0), "n_seeds": grouped.size()}
    )
    return stats.reset_index()


def mean_matrix(summary: pd.DataFrame, q: float) -> pd.DataFrame:
    """Task x method matrix of mean scores at percentile ``q`` (NaN where a method is missing)."""
    rows = summary[summary["q"] == float(q)]
    matrix = rows.pivot(index="task", columns="method", values="mean")
    return matrix.sort_index(axis=0).sort_index(axis=1)


def rank_methods(means: pd.DataFrame) -> pd.DataFrame:
    """Rank methods per task: 1 = highest mean, ties share the better (smaller) rank.

    Args:
        means: Task x method mean scores; NaN where a method has no records on a task.

    Returns:
        Task x method ranks (floats, NaN where the mean is missing).
    """
    # Means of equal seed scores summed in another order can differ in the last bit; rounding
    # far below any reported digit lets them tie, as the protocol intends.
    return means.astype(float).round(12).rank(axis=1, method="min", ascending=False)


def mean_normalized_rank(means: pd.DataFrame) -> pd.Series:
    """MNR(method) = mean over tasks of rank / number of methods ranked on that task.

    Args:
        means: Task x method mean scores (NaN where a method is missing on a task).

    Returns:
        MNR per method (lower is better), indexed like ``means.columns``; NaN for a method with
        no mean on any task.
    """
    ranks = rank_methods(means)
    normalized = ranks.div(ranks.count(axis=1), axis=0)
    return normalized.mean(axis=0, skipna=True).rename("mnr")


def percentile_curves(
    records: Sequence[RunRecord], percentiles: Iterable[float] = CURVE_PERCENTILES
) -> pd.DataFrame:
    """MNR and mean normalized score of every method at each percentile (paper Fig. 3).

    Returns:
        Columns q, method, mnr, mean_score, score_std, n_tasks; ``mean_score`` averages, over
        the tasks a method has, its mean score over seeds on each task; ``score_std`` averages
        the std over seeds the same way (the band of the figure); ``n_tasks`` counts them.
    """
    summary = summarize(records_frame(records, percentiles))
    parts = []
    for q in check_percentiles(percentiles):
        means = mean_matrix(summary, q)
        rows = summary[summary["q"] == float(q)]
        stds = rows.pivot(index="task", columns="method", values="std").reindex_like(means)
        parts.append(
            pd.DataFrame(
                {
                    "q": q,
                    "method": means.columns,
                    "mnr": mean_normalized_rank(means).to_numpy(),
                    "mean_score": means.mean(axis=0, skipna=True).to_numpy(),
                    "score_std": stds.mean(axis=0, skipna=True).to_numpy(),
                    "n_tasks": means.count(axis=0).to_numpy(),
                }
            )
        )
    return pd.concat(parts, ignore_index=True)


def rank_distribution(
    records: Sequence[RunRecord], percentiles: Iterable[float] = (100, 50)
) -> pd.DataFrame:
    """Each method's rank on each task at each percentile (paper Fig. 5).

    Returns:
        Columns q, task, method, rank, n_ranked (methods ranked on that task); ranked cells only.
    """
    summary = summarize(records_frame(records, percentiles))
    parts = []
    for q in check_percentiles(percentiles):
        ranks = rank_methods(mean_matrix(summary, q))
        long = ranks.stack().dropna().rename("rank").reset_index()
        long["n_ranked"] = long["task"].map(ranks.count(axis=1)).astype("int64")
        long.insert(0, "q", q)
        parts.append(long)
    return pd.concat(parts, ignore_index=True)[["q", "task", "method", "rank", "n_ranked"]]


def rank_table(records: Sequence[RunRecord], percentiles: Iterable[float] = (100, 50)):
    """Each method's rank on each task and its MNR, at each percentile (the ranks figure).

    Returns:
        Columns q, task, method, rank, n_ranked, mnr (the method's MNR at q); ranked cells only.
    """
    summary = summarize(records_frame(records, percentiles))
    parts = []
    for q in check_percentiles(percentiles):
        means = mean_matrix(summary, q)
        ranks = rank_methods(means)
        long = ranks.stack().dropna().rename("rank").reset_index()
        long["n_ranked"] = long["task"].map(ranks.count(axis=1)).astype("int64")
        long["mnr"] = long["method"].map(mean_normalized_rank(means))
        long.insert(0, "q", q)
        parts.append(long)
    return pd.concat(parts, ignore_index=True)


def runtime_summary(records: Sequence[RunRecord]) -> pd.DataFrame:
    """Wall seconds (fit + search) per seed: columns task, method, mean, std, n_seeds."""
    summary = summarize(records_frame(records, (100,)), value="wall_seconds")
    return summary.drop(columns="q")


# --------------------------------------------------------------------------- text tables


#: LaTeX's special characters, and what prints them.
_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    **{c: "\\" + c for c in "_&%$#{}"},
}


def _escape_latex(text: str) -> str:
    """``text`` (a name or message from a file) as LaTeX that prints it: special characters
    escaped, control characters as visible escapes (a newline would end a ``%`` comment or a
    tabular cell)."""
    return re.sub(r"[\\~^_&%$#{}]", lambda m: _LATEX_SPECIAL[m.group()], printable(text))


def _escape_markdown(text: str) -> str:
    """``text`` (a name or message from a file) as one markdown table cell: ``|`` escaped (it
    would end the cell), backslashes too (so that ``\\|`` cannot unescape it), control
    characters as visible escapes (a newline would end the row)."""
    return printable(text).replace("\\", "\\\\").replace("|", "\\|")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _seed_note(n: int) -> str:
    return f"[{_count(n, 'seed')}]"


def _usual_count(counts: Iterable[int]) -> int:
    """The most common seed count (the larger on a tie): cells with another count get marked."""
    tally = Counter(counts)
    return max(tally, key=lambda n: (tally[n], n)) if tally else 0


class _Style:
    """Markup of one output format for the shared table layout."""

    def __init__(self, fmt: str):
        self.fmt = fmt
        self.pm = " $\\pm$ " if fmt == "latex" else " ± "
        self.missing = "--" if fmt == "latex" else "–"

    def bold(self, text: str) -> str:
        return f"\\textbf{{{text}}}" if self.fmt == "latex" else f"**{text}**"

    def name(self, text: str) -> str:
        """Text from records or files (names, reasons, errors) as it prints in this format."""
        return _escape_latex(text) if self.fmt == "latex" else _escape_markdown(text)

    def table(self, title: str, header: list[str], rows: list[list[str]], notes: str) -> str:
        """The cells (already formatted text) as a pandas table: GitHub markdown
        (``to_markdown``, via tabulate) or a booktabs tabular (``Styler.to_latex``)."""
        frame = pd.DataFrame(rows, columns=header)
        if self.fmt == "latex":
            body = (
                frame.style.hide(axis="index")
                .format(escape=None)
                .to_latex(column_format="l" + "c" * (len(header) - 1), hrules=True)
            )
            return "\n".join([f"% {title}", f"% {notes}", body.rstrip("\n")])
        body = frame.to_markdown(index=False, tablefmt="github", disable_numparse=True)
        return "\n".join([f"## {title}", "", body, "", notes])

    def note(self, text: str) -> str:
        return f"% {text}" if self.fmt == "latex" else text


def _score_cell(style: _Style, mean: float, std: float, n_seeds: int, best: bool) -> str:
    """``mean ± std``; one seed has no spread to show (its cell is marked "[1 seed]")."""
    text = _SCORE.format(mean) + (style.pm + _SCORE.format(std) if n_seeds > 1 else "")
    return style.bold(text) if best else text


def offline_best(records: Sequence[RunRecord]) -> dict[str, float]:
    """Task -> the best offline row's normalized score (the paper's D(best) row)."""
    best: dict[str, float] = {}
    for record in records:
        best[record.task] = max(best.get(record.task, -math.inf), float(record.offline_best))
    return best


def _shown_published(q: float, tasks: Sequence[str], methods: Sequence[str]) -> set[str]:
    """The tasks that get a "published" column: the paper reports them at ``q`` for at least one
    of ``methods``."""
    return {
        task
        for task in set(tasks) & published_tasks(q)
        if any(published_cell(q, method, task) is not None for method in methods)
    }


def _measured_cell(
    style: _Style, cells: pd.DataFrame, ranks: pd.DataFrame, task: str, method: str, usual: int
) -> str:
    """``mean ± std (rank)``, bold where best on the task, its seed count where unusual."""
    if (task, method) not in cells.index:
        return style.missing
    cell = cells.loc[(task, method)]
    rank = ranks.loc[task, method]
    best = not math.isnan(rank) and rank == 1
    text = _score_cell(style, cell["mean"], cell["std"], int(cell["n_seeds"]), best)
    text += f" ({int(rank)})" if not math.isnan(rank) else ""
    if int(cell["n_seeds"]) != usual:
        text += " " + _seed_note(int(cell["n_seeds"]))
    return text


def _offline_best_row(
    style: _Style, tasks: Sequence[str], shown: set[str], offline: dict[str, float]
) -> list[str]:
    """The "offline best" row: each task's best offline score, unranked, no MNR."""
    row = [style.name("offline best")]
    for t in tasks:
        row += [style.missing] if t in shown else []
        row.append(_SCORE.format(offline[t]) if t in offline else style.missing)
    return row + [style.missing]


def _score_notes(style: _Style, usual: int, offline: bool, shown: bool) -> str:
    """What a score table's cells, marks and extra rows and columns mean."""
    return (
        f"Cells: mean{style.pm}std over seeds (population std; one seed: its score) and (rank on "
        "the task: 1 = best, "
        f"ties share the better rank); bold: best mean on the task; {usual} seeds per cell "
        "unless marked. MNR: mean over tasks of rank / number of methods ranked on the task "
        "(lower is better)."
        + (
            " offline best: the best offline design's normalized score (noiseless where the"
            " rows are noisy replicates; not ranked; the same for every percentile)."
            if offline
            else ""
        )
        + (
            f" (published): the paper's number beside ours ({SOURCE}; not ranked; – where the "
            "paper has none)."
            if shown
            else ""
        )
    )


def _score_table(
    style: _Style, summary: pd.DataFrame, q: float, offline: dict[str, float] | None = None
) -> str:
    rows_q = summary[summary["q"] == q]
    means = mean_matrix(summary, q)
    ranks = rank_methods(means)
    mnr = mean_normalized_rank(means)
    usual = _usual_count(rows_q["n_seeds"])
    cells = rows_q.set_index(["task", "method"])
    tasks, methods = list(means.index), list(means.columns)
    # A "published" column beside each task the paper reports, if any of these methods is in it.
    shown = _shown_published(q, tasks, methods)
    rows = []
    for method in methods:
        row = [style.name(method)]
        for task in tasks:
            if task in shown:
                paper = published_cell(q, method, task)
                row.append(paper.replace(" ± ", style.pm) if paper else style.missing)
            row.append(_measured_cell(style, cells, ranks, task, method, usual))
        row.append(_SCORE.format(mnr[method]))
        rows.append(row)
    if offline:
        rows.append(_offline_best_row(style, tasks, shown, offline))
    header = ["Method"]
    for t in tasks:
        header += [style.name(f"{t} (published)")] if t in shown else []
        header.append(style.name(t))
    header.append("MNR")
    title = f"Normalized score, percentile {q:g} of each run's designs"
    notes = _score_notes(style, usual, bool(offline), bool(shown))
    return style.table(title, header, rows, notes)


#: The method whose median designs :func:`_summary_table` compares every method with.
REFERENCE_METHOD = "matchopt"


def _lab_mnrs(lab: pd.DataFrame) -> dict[float, pd.Series]:
    """Lab-view MNR per percentile (empty without lab views)."""
    if lab.empty:
        return {}
    return {q: mean_normalized_rank(mean_matrix(summarize(lab), q)) for q in LAB_PERCENTILES}


def _lab_cells(style: _Style, method: str, mnrs: dict[float, pd.Series], new: pd.Series) -> list:
    """A summary row's lab-view cells: MNR at each lab percentile, mean distinct new designs."""
    cells = [_SCORE.format(m[method]) if method in m else style.missing for m in mnrs.values()]
    return cells + [f"{new[method]:.1f}" if method in new else style.missing]


def _summary_table(
    style: _Style,
    summary: pd.DataFrame,
    qs: tuple[float, ...],
    offline: dict[str, float],
    lab: pd.DataFrame | None = None,
) -> str:
    """One row per method: its MNR at each percentile and their mean (rows sorted by it), and
    on how many of its tasks its median design (q = 50) beats the offline best and
    MATCH-OPT's median, compared at the tables' three decimals; with lab views, the MNR on
    them and the mean number of distinct new designs per run."""
    lab = lab if lab is not None else lab_frame([])
    lab_mnrs = _lab_mnrs(lab)
    new_designs = lab[lab["q"] == LAB_PERCENTILES[0]].groupby("method")["new"].mean()
    mnrs = {q: mean_normalized_rank(mean_matrix(summary, q)) for q in qs}
    overall = pd.concat(mnrs.values(), axis=1).mean(axis=1).sort_values(kind="stable")
    medians = mean_matrix(summary, 50.0) if 50.0 in qs else None

    def beats(task_means: pd.Series, others: pd.Series) -> str:
        both = task_means.dropna().index.intersection(others.dropna().index)
        wins = sum(round(task_means[t], 3) > round(others[t], 3) for t in both)
        return f"{wins} of {len(both)}"

    rows = []
    for method, mean_mnr in overall.items():
        row = [style.name(method)] + [_SCORE.format(mnrs[q][method]) for q in qs]
        row.append(_SCORE.format(mean_mnr))
        tasks = summary[(summary["method"] == method) & (summary["q"] == qs[0])]
        row.append(str(tasks["task"].nunique()))
        if medians is not None:
            row.append(beats(medians[method], pd.Series(offline)))
            if REFERENCE_METHOD in medians and method != REFERENCE_METHOD:
                row.append(beats(medians[method], medians[REFERENCE_METHOD]))
            elif REFERENCE_METHOD in medians:
                row.append(style.missing)
        if lab_mnrs:
            row += _lab_cells(style, method, lab_mnrs, new_designs)
        rows.append(row)
    header = ["Method"] + [f"MNR p{q:g}" for q in qs] + ["mean MNR", "tasks"]
    if medians is not None:
        header.append("p50 above offline best")
        if REFERENCE_METHOD in medians:
            header.append(f"p50 above {REFERENCE_METHOD} p50")
    if lab_mnrs:
        header += [f"lab MNR p{q:g}" for q in LAB_PERCENTILES] + ["new designs"]
    notes = (
        "MNR: mean over tasks of rank / number of methods ranked on the task (lower is better), "
        "as in the score tables; rows sorted by the mean of the MNRs. p50 above ...: tasks on "
        "which the method's mean median design scores higher, compared at three decimals."
    )
    if lab_mnrs:
        notes += (
            " lab MNR: the same ranks of the percentiles over each run's distinct designs not "
            "in the offline table (a run with none ranks last), over the records that keep "
            "this view; new designs: their mean number per run (of 128)."
        )
    return style.table("Summary over the tasks", header, rows, notes)


def _lab_table(style: _Style, lab: pd.DataFrame) -> str:
    """Per method: the lab view's counts (mean per run over its records) and lab MNRs."""
    mnrs = _lab_mnrs(lab)
    counts = lab[lab["q"] == LAB_PERCENTILES[0]].groupby("method")[list(_LAB_COUNTS)].mean()
    rows = [
        [style.name(method)]
        + [f"{counts.loc[method, c]:.1f}" for c in _LAB_COUNTS]
        + [_SCORE.format(mnrs[q][method]) for q in LAB_PERCENTILES]
        for method in counts.index
    ]
    header = ["Method", "distinct", "offline repeats", "unmeasured", "new"]
    header += [f"lab MNR p{q:g}" for q in LAB_PERCENTILES]
    notes = (
        "What a lab would test of each run's designs, mean per run: distinct designs, designs "
        "equal to an offline row (copies counted), designs the task's table never measured "
        "(scored as its minimum), and distinct designs not in the offline table (new); lab "
        "MNR ranks the percentiles over those new designs (a run with none ranks last)."
    )
    return style.table("Lab view", header, rows, notes)


def _ablation_table(style: _Style, summary: pd.DataFrame, qs: tuple[float, ...]) -> str:
    full, noreg = ABLATION_METHODS
    present = set(summary["method"])
    title = f"Ablation: {full} vs {noreg} (no value regularizer)"
    if full not in present or noreg not in present:
        missing = ", ".join(m for m in ABLATION_METHODS if m not in present)
        if style.fmt == "latex":
            return style.note(f"{title}: skipped, no records for {missing}.")
        return f"## {title}\n\nSkipped: no records for {missing}."
    cells = summary.set_index(["q", "task", "method"])
    usual = _usual_count(summary[summary["method"].isin(ABLATION_METHODS)]["n_seeds"])
    tasks = sorted(set(summary.loc[summary["method"].isin(ABLATION_METHODS), "task"]))
    header = ["Task"]
    for q in qs:
        header += [f"{style.name(full)} (p{q:g})", f"{style.name(noreg)} (p{q:g})"]
    rows = []
    for task in tasks:
        row = [style.name(task)]
        for q in qs:
            pair = [
                cells.loc[(q, task, m)] if (q, task, m) in cells.index else None
                for m in ABLATION_METHODS
            ]
            # Rounded as in rank_methods, so that equal means tie (both bold).
            top = max((round(c["mean"], 12) for c in pair if c is not None), default=math.nan)
            for cell in pair:
                if cell is None:
                    row.append(style.missing)
                    continue
                both = all(c is not None for c in pair)
                best = both and round(cell["mean"], 12) >= top
                text = _score_cell(style, cell["mean"], cell["std"], int(cell["n_seeds"]), best)
                if int(cell["n_seeds"]) != usual:
                    text += " " + _seed_note(int(cell["n_seeds"]))
                row.append(text)
        rows.append(row)
    notes = (
        f"Cells: mean{style.pm}std over seeds (one seed: its score) of the normalized score at "
        "percentile q (pq); "
        f"bold: the better of the two; {usual} seeds per cell unless marked."
    )
    return style.table(title, header, rows, notes)


def run_devices(records: Sequence[RunRecord]) -> dict[tuple[str, str], str]:
    """(task, method) -> the accelerator its runs used, for cells that ran off the CPU (the GPU's
    name where the record has it, else the torch device)."""
    devices: dict[tuple[str, str], set[str]] = {}
    for record in records:
        environment = record.extra.get("environment", {})
        device = str(environment.get("device", "cpu"))
        if device.split(":")[0] != "cpu":
            devices.setdefault((record.task, record.method), set()).add(
                str(environment.get("gpu") or device)
            )
    return {cell: ", ".join(sorted(names)) for cell, names in devices.items()}


def shared_ensemble_cells(records: Sequence[RunRecord]) -> set[tuple[str, str]]:
    """(task, method) cells with a run that read its ensemble from another cell's training
    (``matchopt bench`` shares one between GA, Ens-Mean and Ens-Min): their wall seconds leave
    that training out."""
    return {
        (r.task, r.method)
        for r in records
        if (r.extra.get("fit", {}).get("shared_ensemble") or {}).get("from_cache")
    }


def seed_batch_cells(records: Sequence[RunRecord]) -> set[tuple[str, str]]:
    """(task, method) cells with a run trained in a batch of seeds (``matchopt bench
    --batch-seeds``): its fit seconds are its share of the batch's."""
    return {(r.task, r.method) for r in records if r.extra.get("seed_batch")}


def _runtime_table(
    style: _Style,
    runtime: pd.DataFrame,
    devices: dict[tuple[str, str], str] | None = None,
    shared: set[tuple[str, str]] | None = None,
    batched: set[tuple[str, str]] | None = None,
) -> str:
    devices, shared, batched = devices or {}, shared or set(), batched or set()
    means = runtime.pivot(index="method", columns="task", values="mean")
    counts = runtime.pivot(index="method", columns="task", values="n_seeds")
    means, counts = means.sort_index().sort_index(axis=1), counts.sort_index().sort_index(axis=1)
    usual = _usual_count(runtime["n_seeds"])
    rows = []
    for method in means.index:
        row = [style.name(method)]
        for task in means.columns:
            mean = means.loc[method, task]
            if math.isnan(mean):
                row.append(style.missing)
                continue
            text = _SECONDS.format(mean)
            n = int(counts.loc[method, task])
            text += " " + _seed_note(n) if n != usual else ""
            if (task, method) in devices:
                text += " " + style.name(f"({devices[task, method]})")
            if (task, method) in shared:
                text += " " + style.name("(shared ensemble)")
            if (task, method) in batched:
                text += " " + style.name("(seeds batched)")
            row.append(text)
        rows.append(row)
    header = ["Method"] + [style.name(t) for t in means.columns]
    title = "Runtime: mean wall seconds per seed (fit + search)"
    notes = (
        f"Seconds measured where each run ran: on CPUs (threads and load in each record), or "
        f"on the GPU named in parentheses; {usual} seeds per cell unless marked. (shared "
        "ensemble): the runs read an ensemble another cell of the grid trained (e.g. GA and "
        "Ens-Min from Ens-Mean's), so their seconds leave its training out. (seeds "
        "batched): seeds trained together in one batched loop; each counts its share."
    )
    return style.table(title, header, rows, notes)


#: File of a results folder giving, per (task, method), why seeds are missing (columns task,
#: method, reason; ``#`` starts a comment line). The report lists every registered method a
#: task lacks seeds of, with this reason, a failed cell's error, or "not run".
PENDING_FILE = "pending.csv"


def pending_reasons(results_dir: str | Path) -> dict[tuple[str, str], str]:
    """(task, method) -> reason, from ``<results_dir>/pending.csv`` (empty if there is none)."""
    path = Path(results_dir) / PENDING_FILE
    if not path.is_file():
        return {}
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, ValueError) as err:  # UTF-8 errors are ValueErrors
        raise MatchoptError(f"{path}: cannot be read as UTF-8 text ({err})") from None
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    reasons = {}
    try:
        for number, row in enumerate(csv.DictReader(lines), start=2):
            if not row.get("task") or not row.get("method") or not row.get("reason"):
                raise MatchoptError(f"{path}, row {number}: needs task, method and reason")
            reasons[row["task"].strip(), row["method"].strip()] = row["reason"].strip()
    except csv.Error as err:
        raise MatchoptError(f"{path}: not a readable CSV file ({err})") from None
    return reasons


def missing_cells(
    results_dir: str | Path,
    records: Sequence[RunRecord],
    methods: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Every (task, method) with fewer seeds than the task's best-covered method, and why.

    Tasks are those of ``records``; methods those the folder's grids planned (with a record, a
    failed cell or a ``pending.csv`` entry), or ``methods``. The reason is
    the ``pending.csv`` entry, else the error of a failed cell (``seed<k>.error.json``), else
    "not run". Columns: task, method, seeds, expected, reason.
    """
    from matchopt.methods import METHODS

    counts = Counter((r.task, r.method) for r in records)
    reasons = pending_reasons(results_dir)
    if methods is not None:
        wanted = list(methods)
    else:  # the methods the folder's grids planned: run, failed or marked pending there
        failed = {p.parent.name for p in Path(results_dir).rglob("seed*.error.json")}
        planned = {m for _, m in counts} | {m for _, m in reasons} | failed
        wanted = sorted(m for m in planned if m in METHODS)
    rows = []
    for task in sorted({r.task for r in records}):
        expected = max(n for (t, _), n in counts.items() if t == task)
        for method in wanted:
            done = counts.get((task, method), 0)
            if done >= expected:
                continue
            reason = reasons.get((task, method)) or _failure(results_dir, task, method)
            rows.append([task, method, done, expected, reason or "not run"])
    return pd.DataFrame(rows, columns=["task", "method", "seeds", "expected", "reason"])


def _failure(results_dir: str | Path, task: str, method: str) -> str | None:
    """The error of the first failed cell of (task, method), if a grid left one."""
    for path in sorted(Path(results_dir).rglob(f"{task}/{method}/seed*.error.json")):
        return f"failed ({path.name}): {_error_line(path)}"
    return None


def _error_line(path: Path) -> str:
    """The first line of an error file's ``error`` (cut to 120 characters); a generic reason if
    the file is unreadable, not a JSON object or has no error message."""
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # JSON and UTF-8 errors are ValueErrors
        return "error file unreadable or not JSON"
    if not isinstance(payload, dict):
        return "error file is not a JSON object"
    error = payload.get("error")
    lines = [line for line in str(error).splitlines() if line.strip()] if error else []
    return lines[0][:120] if lines else "no error message in the error file"


def _missing_table(style: _Style, missing: pd.DataFrame) -> str:
    rows = [
        [style.name(c.task), style.name(c.method), f"{c.seeds} of {c.expected}"]
        + [style.name(c.reason)]
        for c in missing.itertuples(index=False)
    ]
    notes = (
        f"Methods with fewer seeds than the task's best-covered method; reasons from "
        f"the results folder's {PENDING_FILE}, a failed cell's error file, or none (not run)."
    )
    return style.table("Cells missing seeds", ["Task", "Method", "Seeds", "Why"], rows, notes)


def _csv_report(summary: pd.DataFrame, runtime: pd.DataFrame, qs: tuple[float, ...]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(_CSV_COLUMNS)
    for q in qs:
        means = mean_matrix(summary, q)
        ranks, mnr = rank_methods(means), mean_normalized_rank(means)
        rows_q = summary[summary["q"] == q].sort_values(["task", "method"])
        for cell in rows_q.itertuples(index=False):
            rank = ranks.loc[cell.task, cell.method]
            writer.writerow(
                [
                    "score",
                    cell.task,
                    cell.method,
                    f"{q:g}",
                    _SCORE.format(cell.mean),
                    _SCORE.format(cell.std),
                    int(cell.n_seeds),
                    "" if math.isnan(rank) else int(rank),
                    _SCORE.format(mnr[cell.method]),
                ]
            )
    for cell in runtime.sort_values(["task", "method"]).itertuples(index=False):
        writer.writerow(
            [
                "wall_seconds",
                cell.task,
                cell.method,
                "",
                _SECONDS.format(cell.mean),
                _SECONDS.format(cell.std),
                int(cell.n_seeds),
                "",
                "",
            ]
        )
    return buffer.getvalue()


def _filter(records: list[RunRecord], field: str, wanted: Sequence[str] | None) -> list[RunRecord]:
    if wanted is None:
        return records
    have = {getattr(r, field) for r in records}
    unknown = [w for w in wanted if w not in have]
    if unknown:
        raise MatchoptError(
            f"no records for {field} {', '.join(map(repr, unknown))}; "
            f"the records have: {', '.join(sorted(have))}"
        )
    return [r for r in records if getattr(r, field) in set(wanted)]


def _check_format(fmt: str, summary_only: bool) -> None:
    """Refuse an unknown format, and the summary alone in CSV."""
    if fmt not in FORMATS:
        raise MatchoptError(f"report format {fmt!r} is not one of {', '.join(FORMATS)}")
    if summary_only and fmt == "csv":
        raise MatchoptError("--summary is a table of the md and latex formats, not of csv")


def _intro(style: _Style, records: list[RunRecord], summary: pd.DataFrame) -> str:
    """The report's opening: what it counts (runs, tasks, methods, presets) and what scores are;
    a title in markdown, a comment in LaTeX."""
    presets = ", ".join(style.name(p) for p in sorted({r.preset for r in records}))
    intro = (
        f"{_count(len(records), 'run')}, {_count(summary['task'].nunique(), 'task')}, "
        f"{_count(summary['method'].nunique(), 'method')} (presets: {presets}); scores are "
        "normalized oracle values of each run's designs, nearest-rank percentiles."
    )
    return "# matchopt report\n\n" + intro if style.fmt == "md" else style.note(intro)


def _missing_and_older_tables(
    style: _Style,
    results_dir: str | Path,
    records: list[RunRecord],
    methods: Sequence[str] | None,
) -> list[str]:
    """Tables of the cells that need a look: records missing, records of an older format."""
    tables = []
    missing = missing_cells(results_dir, records, methods)
    if len(missing):
        tables.append(_missing_table(style, missing))
    older = older_format_cells(records)
    if older:
        tables.append(_older_format_table(style, older))
    return tables


def write_report(
    results_dir: str | Path,
    percentiles: Iterable[float] = (100, 50),
    fmt: str = "md",
    plots_dir: str | Path | None = None,
    *,
    tasks: Sequence[str] | None = None,
    methods: Sequence[str] | None = None,
    runtime: bool = True,
    summary_only: bool = False,
) -> str:
    """Tables (and optionally figures) of the records under ``results_dir``.

    Args:
        results_dir: Folder of ``<task>/<method>/seed<k>.json`` records.
        percentiles: Percentiles (0..100) of each run's scores to tabulate, in this order.
        fmt: ``md`` (GitHub markdown), ``latex`` (booktabs tabulars) or ``csv`` (one table,
            columns metric, task, method, q, mean, std, n_seeds, rank, mnr).
        plots_dir: If given, figures (PNG) and their numbers (CSV) are written there.
        tasks: Only these tasks (default: all with records).
        methods: Only these methods (default: all with records); ranks are among them.
        runtime: Include the runtime table (wall seconds differ between reruns of the same grid).
        summary_only: Only the summary over the tasks (each method's MNR and median wins), as
            in the README's suite table.

    Returns:
        The report text: a score table per percentile, the summary over the tasks, the
        MATCH-OPT ablation and the runtime.

    Raises:
        MatchoptError: On a bad format or percentile, or unreadable or missing records.
    """
    _check_format(fmt, summary_only)
    qs = check_percentiles(percentiles)
    records = load_records(results_dir)
    records = _filter(_filter(records, "task", tasks), "method", methods)
    summary = summarize(records_frame(records, qs))
    times = runtime_summary(records)
    if plots_dir is not None:
        write_figures(records, plots_dir, qs)
    if fmt == "csv":
        return _csv_report(summary, times if runtime else times.iloc[:0], qs)
    style = _Style(fmt)
    parts = [_intro(style, records, summary)]
    best = offline_best(records)
    lab = lab_frame(records)
    if summary_only:
        return "\n\n".join([*parts, _summary_table(style, summary, qs, best, lab)]) + "\n"
    parts += [_score_table(style, summary, q, best) for q in qs]
    parts.append(_summary_table(style, summary, qs, best, lab))
    if not lab.empty:
        parts.append(_lab_table(style, lab))
    parts.append(_ablation_table(style, summary, qs))
    if runtime:
        cells = (shared_ensemble_cells(records), seed_batch_cells(records))
        parts.append(_runtime_table(style, times, run_devices(records), *cells))
    parts += _missing_and_older_tables(style, results_dir, records, methods)
    return "\n\n".join(parts) + "\n"


def _older_format_table(style: _Style, older: list[tuple[str, str, str]]) -> str:
    """The cells holding records of an older format (:func:`older_format_cells`)."""
    rows = [[style.name(task), style.name(method), seeds] for task, method, seeds in older]
    note = (
        "Records without the environment of their run (device, threads, the commit of the "
        "code): written by matchopt before records kept it. Their scores stand; their "
        "times and code cannot be traced; rerun the cell to replace them."
    )
    return style.table("Records of an older format", ["Task", "Method", "Seeds"], rows, note)


def older_format_cells(records: Sequence[RunRecord]) -> list[tuple[str, str, str]]:
    """(task, method, seeds) of the records without ``extra.environment`` (an older format)."""
    cells: dict[tuple[str, str], list[int]] = {}
    for record in records:
        if "environment" not in record.extra:
            cells.setdefault((record.task, record.method), []).append(record.seed)
    return [(t, m, ",".join(map(str, sorted(s)))) for (t, m), s in sorted(cells.items())]


# --------------------------------------------------------------------------- figures


#: The method the figures emphasize (thick black line, drawn on top).
EMPHASIZED = "matchopt"
_LINE_STYLES = ("-", "--", "-.", ":")


def method_styles(methods: Sequence[str]) -> dict[str, dict]:
    """Line style of every method: distinct (colour, dash) pairs, matchopt emphasized.

    Colours come from the 10 distinct hues of tab10 (not tab20, whose pairs are two shades of
    one hue); after 10 methods the dash pattern changes, so no two methods look alike.
    """
    from matplotlib import colormaps

    palette = colormaps["tab10"]
    styles = {}
    others = [m for m in sorted(methods) if m != EMPHASIZED]
    for i, method in enumerate(others):
        styles[method] = {
            "color": palette(i % 10),
            "linestyle": _LINE_STYLES[(i // 10) % len(_LINE_STYLES)],
            "linewidth": 1.4,
            "zorder": 2,
        }
    if EMPHASIZED in methods:
        styles[EMPHASIZED] = {"color": "black", "linestyle": "-", "linewidth": 2.8, "zorder": 5}
    return styles


def _new_figure(width: float, height: float, ncols: int = 1):
    # The object-oriented API with an explicit Agg canvas: no pyplot global state, and the
    # caller's matplotlib backend is left alone.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(1, ncols, squeeze=False)[0]
    return figure, axes


def _rank_heatmap(ax, rows: pd.DataFrame, q: float) -> None:
    """Methods (best MNR on top) x tasks, each cell its rank on the task; MNR in the last column."""
    mnr = rows.groupby("method")["mnr"].first().sort_values(kind="stable")
    tasks = sorted(rows["task"].unique())
    ranks = rows.pivot(index="method", columns="task", values="rank").reindex(
        index=mnr.index, columns=tasks
    )
    scaled = ranks.div(rows.groupby("task")["n_ranked"].first(), axis=1)
    ax.imshow(scaled.to_numpy(dtype=float), cmap="RdYlGn_r", vmin=0, vmax=1, aspect="auto")
    for i, method in enumerate(ranks.index):
        for j, task in enumerate(tasks):
            value = ranks.loc[method, task]
            ax.text(
                j,
                i,
                "–" if np.isnan(value) else f"{value:.0f}",
                ha="center",
                va="center",
                fontsize="small",
            )
        ax.text(len(tasks), i, f"{mnr[method]:.3f}", ha="center", va="center", fontsize="small")
    ax.set_xticks(range(len(tasks) + 1), [*tasks, "MNR"], rotation=60, ha="right")
    ax.set_yticks(range(len(ranks.index)), list(ranks.index))
    ax.set_xlim(-0.5, len(tasks) + 0.5)
    ax.set_title(f"Rank per task at percentile {q:g} (1 = best)", fontsize="medium")


def write_figures(
    records: Sequence[RunRecord], plots_dir: str | Path, percentiles: Iterable[float] = (100, 50)
) -> list[Path]:
    """Write the figures as PNG, each with its numbers as a CSV of the same name beside it.

    - ``percentile_curves``: MNR and mean normalized score of every method at every percentile
      0..100 (paper Fig. 3); the numbers of :func:`percentile_curves`.
    - ``rank_distribution``: box plots of each method's rank across tasks at each requested
      percentile (paper Fig. 5); the numbers of :func:`rank_distribution`.
    - ``ranks_per_task``: each method's rank on each task at each requested percentile, and its
      MNR (methods sorted by MNR); the numbers of :func:`rank_table`.
    - ``runtime``: mean wall seconds per seed of each method on each task (log scale); the
      numbers of :func:`runtime_summary`.

    Args:
        records: Run records.
        plots_dir: Output folder (created if missing).
        percentiles: Percentiles for the rank distribution.

    Returns:
        Paths written (PNG and CSV).
    """
    qs = check_percentiles(percentiles)
    out = Path(plots_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise MatchoptError(f"cannot create the plots folder {out}: {err}") from None
    written: list[Path] = []
    figures = (
        ("percentile_curves", lambda: _percentile_curves_figure(records)),
        ("rank_distribution", lambda: _rank_distribution_figure(records, qs)),
        ("ranks_per_task", lambda: _ranks_per_task_figure(records, qs)),
        ("runtime", lambda: _runtime_figure(records)),
    )
    for stem, draw in figures:
        figure, frame = draw()
        # Both rendered in memory first, then each written atomically: an interrupted report
        # leaves the files of an earlier one whole, never a half-written file.
        png = io.BytesIO()
        figure.savefig(png, format="png", dpi=120)
        text = frame.to_csv(index=False, lineterminator="\n")
        for path, data in ((out / f"{stem}.png", png.getvalue()), (out / f"{stem}.csv", text)):
            try:
                atomic_write_bytes(path, data if isinstance(data, bytes) else data.encode())
            except OSError as err:  # e.g. a full disk: one line naming the file
                raise MatchoptError(f"could not write {path}: {err.strerror or err}") from None
            written.append(path)
    return written


def _percentile_curves_figure(records: Sequence[RunRecord]) -> tuple[Any, pd.DataFrame]:
    """Paper Fig. 3: MNR and mean normalized score at every percentile."""
    curves = percentile_curves(records)
    styles = method_styles(curves["method"].unique())
    all_tasks = len({r.task for r in records})
    figure, (ax_mnr, ax_score) = _new_figure(11, 4.2, ncols=2)
    for method, rows in curves.groupby("method", sort=True):
        style = styles[method]
        n_tasks = int(rows["n_tasks"].max())
        # Methods run on fewer tasks than others are averaged over those only: say so.
        label = method if n_tasks == all_tasks else f"{method} ({n_tasks} of {all_tasks} tasks)"
        ax_mnr.plot(rows["q"], rows["mnr"], label=label, **style)
        ax_score.plot(rows["q"], rows["mean_score"], label=label, **style)
        ax_score.fill_between(
            rows["q"],
            rows["mean_score"] - rows["score_std"],
            rows["mean_score"] + rows["score_std"],
            color=style["color"],
            alpha=0.12,
            linewidth=0,
            zorder=1,
        )
    best = offline_best(records)
    ax_score.axhline(
        float(np.mean(list(best.values()))),
        color="0.35",
        linestyle=(0, (1, 1)),
        linewidth=1.2,
        label="offline best (mean over tasks)",
        zorder=1,
    )
    ax_mnr.set(
        xlabel="percentile of a run's designs",
        ylabel="mean normalized rank (lower is better)",
        title="MNR by percentile",
    )
    ax_score.set(
        xlabel="percentile of a run's designs",
        ylabel="mean normalized score (band: ± std over seeds)",
        title="Mean normalized score by percentile",
    )
    ax_score.legend(fontsize="small", loc="center left", bbox_to_anchor=(1.0, 0.5))
    return figure, curves


def _rank_distribution_figure(
    records: Sequence[RunRecord], qs: Sequence[float]
) -> tuple[Any, pd.DataFrame]:
    """Paper Fig. 5: box plots of each method's rank across tasks at each percentile."""
    styles = method_styles(percentile_curves(records)["method"].unique())
    all_tasks = len({r.task for r in records})
    ranks = rank_distribution(records, qs)
    figure, axes = _new_figure(
        max(4.5, 0.45 * ranks["method"].nunique() + 1.5) * len(qs), 4.2, ncols=len(qs)
    )
    for ax, q in zip(axes, qs):
        rows = ranks[ranks["q"] == q]
        names = sorted(rows["method"].unique())
        boxes = ax.boxplot(
            [rows.loc[rows["method"] == m, "rank"].to_numpy() for m in names],
            patch_artist=True,
        )
        for name, box in zip(names, boxes["boxes"]):
            box.set(facecolor=styles.get(name, {}).get("color", "0.6"), alpha=0.45)
            if name == EMPHASIZED:
                box.set(facecolor="0.85", linewidth=2.6, edgecolor="black", alpha=1.0)
        counts = rows.groupby("method")["task"].nunique()
        labels = [n if counts[n] == all_tasks else f"{n} ({counts[n]}/{all_tasks})" for n in names]
        ax.set_xticks(range(1, len(names) + 1), labels, rotation=60, ha="right")
        ax.set(
            ylabel="rank on a task (1 = best)",
            title=f"Ranks across tasks, percentile {q:g} ((k/n): run on k of n tasks)",
        )
        ax.invert_yaxis()
    return figure, ranks


def _ranks_per_task_figure(
    records: Sequence[RunRecord], qs: Sequence[float]
) -> tuple[Any, pd.DataFrame]:
    """Each method's rank on each task at each percentile, methods sorted by MNR."""
    table = rank_table(records, qs)
    n_methods = table["method"].nunique()
    figure, axes = _new_figure(
        (0.62 * table["task"].nunique() + 3.2) * len(qs), 0.32 * n_methods + 1.6, ncols=len(qs)
    )
    for ax, q in zip(axes, qs):
        _rank_heatmap(ax, table[table["q"] == q], q)
    return figure, table


def _runtime_figure(records: Sequence[RunRecord]) -> tuple[Any, pd.DataFrame]:
    """Mean wall seconds per seed of each method on each task (log scale)."""
    times = runtime_summary(records)
    methods = sorted(times["method"].unique())
    tasks = sorted(times["task"].unique())
    figure, (ax,) = _new_figure(max(6.0, 0.5 * len(methods) + 2), 4.2)
    width = 0.8 / len(tasks)
    for i, task in enumerate(tasks):
        rows = times[times["task"] == task].set_index("method").reindex(methods)
        positions = np.arange(len(methods)) + (i - (len(tasks) - 1) / 2) * width
        ax.bar(positions, rows["mean"].to_numpy(), width, label=task)
    ax.set_xticks(range(len(methods)), methods, rotation=60, ha="right")
    if (times["mean"] > 0).all():
        ax.set_yscale("log")  # runtimes span orders of magnitude across methods
    ax.set(ylabel="wall seconds per seed (fit + search)", title="Runtime")
    ax.legend(fontsize="small")
    return figure, times
