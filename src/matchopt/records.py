"""Run records: the record type, where records live in a results folder, reading and writing them,
and the one mean +- std summary table printed by ``run`` and ``bench``.

A results folder holds ``<task>/<method>/seed<k>.json`` (the record), optionally
``seed<k>.designs.npy`` beside it (the designs), and ``seed<k>.error.json`` for a grid cell that
failed. Records are written atomically, and no link below the results folder is followed
(:mod:`matchopt.safe_paths`); a record is read only from a regular file of at most
:data:`MAX_RECORD_BYTES`.

Time fields, one meaning each: ``fit_seconds`` and ``search_seconds`` (the method's own work;
their sum is :attr:`RunRecord.wall_seconds`, what reports compare) and ``extra["cell_seconds"]``
(the whole run: fit, search and scoring by the oracle). A run that continued a killed one from its
training snapshot counts the training of the earlier sittings in both (``extra["resumed"]``).
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import numbers
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from matchopt.errors import MatchoptError
from matchopt.safe_paths import read_below, read_regular, write_below

RECORD_NAME = re.compile(r"^seed(\d+)\.json$")
#: Largest record file read (a record of 128 designs takes a few kilobytes).
MAX_RECORD_BYTES = 64 * 2**20


@dataclass
class RunRecord:
    """Everything about one (task, method, seed) run, enough to rerun it and re-score it.

    ``scores`` keeps all normalized oracle values of the returned designs, so any percentile
    can be computed later; ``p100`` and ``p50`` are nearest-rank percentiles of them.
    """

    task: str
    method: str
    seed: int
    preset: str
    config: dict[str, Any]
    scores: list[float]
    p100: float
    p50: float
    offline_best: float
    fit_seconds: float
    search_seconds: float
    version: str
    n_designs: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> RunRecord:
        return cls(**json.loads(text))

    @property
    def wall_seconds(self) -> float:
        """Fit plus search time: the method's own cost."""
        return self.fit_seconds + self.search_seconds


# --- Layout --------------------------------------------------------------------------------------


def record_path(out_dir: str | Path, task: str, method: str, seed: int) -> Path:
    """``<out>/<task>/<method>/seed<k>.json``."""
    return Path(out_dir) / task / method / f"seed{seed}.json"


def error_path(out_dir: str | Path, task: str, method: str, seed: int) -> Path:
    """``<out>/<task>/<method>/seed<k>.error.json``: why a grid cell failed."""
    return Path(out_dir) / task / method / f"seed{seed}.error.json"


# --- Writing and reading -------------------------------------------------------------------------


def designs_path(path: Path) -> Path:
    """``seed<k>.designs.npy`` beside the record ``seed<k>.json``."""
    return path.with_suffix(".designs.npy")


def write_record(out_dir: str | Path, record: RunRecord, designs: np.ndarray | None = None) -> Path:
    """Write the record (and the designs as .npy beside it), each atomically, following no
    link below ``out_dir``."""
    path = record_path(out_dir, record.task, record.method, record.seed)
    if designs is not None:
        buffer = io.BytesIO()
        np.save(buffer, designs)
        write_below(out_dir, designs_path(path), buffer.getvalue())
    write_below(out_dir, path, (record.to_json() + "\n").encode())
    return path


def read_record(path: str | Path, root: str | Path | None = None) -> RunRecord:
    """One record file, checked field by field; with ``root`` (a results folder it is inside),
    reached without following a link below it.

    Raises:
        MatchoptError: the file is missing, not a regular file, too large or unreadable, or a
            field has the wrong type.
    """
    path = Path(path)
    if root is None:
        data = read_regular(path, MAX_RECORD_BYTES, "run record")
    else:
        data = read_below(root, path, MAX_RECORD_BYTES, "run record")
        if data is None:
            raise MatchoptError(f"{path}: no such run record")
    try:
        record = RunRecord.from_json(data.decode("utf-8"))
    except (ValueError, TypeError, RecursionError) as err:  # JSON, UTF-8: ValueErrors
        raise MatchoptError(f"{path}: not a readable run record ({err})") from None
    problem = _record_problem(record)
    if problem:
        raise MatchoptError(f"{path}: not a readable run record ({problem})")
    return record


def is_number(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def is_finite_number(value: object) -> bool:
    """A number (not a bool) that is neither NaN nor infinite; an int too large for a float is
    not finite either (the report computes in floats)."""
    if not is_number(value):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _shown(value: object, limit: int = 40) -> str:
    """``repr`` of a bad field's value, cut short to keep an error message on one line."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


#: Longest fit or search a record may report: a year.
MAX_SECONDS = 3.2e7
#: Largest normalized score (in absolute value) a record may hold.
SCORE_LIMIT = 1e12


def check_record(record: RunRecord) -> None:
    """Refuse to write a record that reading it back would refuse (:func:`read_record`): a
    run whose scores or times make no sense (a score beyond +-1e12, a training of more than a
    year) fails with the reason instead.

    Raises:
        MatchoptError: naming the run and the field.
    """
    problem = _record_problem(record)
    if problem:
        raise MatchoptError(
            f"the run {record.task}/{record.method}/seed{record.seed} gives an impossible "
            f"record ({problem}); no record written"
        )


def _record_problem(record: RunRecord) -> str | None:
    """What is wrong with a record's fields (every field a report or a grid reads), or None."""
    if not isinstance(record.task, str) or not isinstance(record.method, str):
        return "task and method must be strings"
    if not isinstance(record.seed, int) or isinstance(record.seed, bool):
        return f"seed {_shown(record.seed)} is not an integer"
    for name in ("preset", "version"):
        if not isinstance(getattr(record, name), str):
            return f"{name} {_shown(getattr(record, name))} is not a string"
    if not isinstance(record.config, dict):
        return f"config {_shown(record.config)} is not an object"
    if not isinstance(record.scores, list) or not record.scores:
        return "scores must be a non-empty list"
    if not all(is_number(s) for s in record.scores):
        return "scores must all be numbers"
    bad = next((i for i, s in enumerate(record.scores) if not is_finite_number(s)), None)
    if bad is not None:
        return f"scores must all be finite numbers: score {bad} is {_shown(record.scores[bad])}"
    bad = next((i for i, s in enumerate(record.scores) if abs(s) > SCORE_LIMIT), None)
    if bad is not None:
        return f"score {bad} is {record.scores[bad]!r}, beyond +-{SCORE_LIMIT:g}"
    for name in ("p100", "p50", "offline_best", "fit_seconds", "search_seconds"):
        value = getattr(record, name)
        if not is_number(value):
            return f"{name} {_shown(value)} is not a number"
        if not is_finite_number(value):
            return f"{name} {_shown(value)} is not a finite number"
    for name in ("fit_seconds", "search_seconds"):
        if not 0 <= getattr(record, name) <= MAX_SECONDS:
            return f"{name} {getattr(record, name)!r} is not in [0, {MAX_SECONDS:g}] seconds"
    # Normalized scores: a task's full data span [0, 1], and designs far beyond the data can
    # reach thousands (an unbounded search); beyond SCORE_LIMIT no run has a meaning.
    for name in ("p100", "p50", "offline_best"):
        if abs(getattr(record, name)) > SCORE_LIMIT:
            return f"{name} {getattr(record, name)!r} is beyond +-{SCORE_LIMIT:g}"
    n_designs = record.n_designs
    if not isinstance(n_designs, int) or isinstance(n_designs, bool) or n_designs < 0:
        return f"n_designs {_shown(n_designs)} is not a count (an integer >= 0)"
    if len(record.scores) != n_designs:  # a cut or merged file: its percentiles mean other things
        return f"{len(record.scores)} scores for n_designs {n_designs}"
    if not isinstance(record.extra, dict):
        return f"extra {_shown(record.extra)} is not an object"
    # Read by the report: extra.environment (device, gpu), extra.fit.shared_ensemble.
    for name in ("environment", "fit"):
        if name in record.extra and not isinstance(record.extra[name], dict):
            return f"extra.{name} {_shown(record.extra[name])} is not an object"
    lab = record.extra.get("lab")
    if lab is not None:
        problem = _lab_problem(lab, n_designs)
        if problem:
            return f"extra.lab: {problem}"
    shared = record.extra.get("fit", {}).get("shared_ensemble")
    if shared is not None and not isinstance(shared, dict):
        return f"extra.fit.shared_ensemble {_shown(shared)} is not an object or null"
    return None


#: Counts of the lab view (:func:`matchopt.evaluation.lab_view`).
LAB_COUNTS = ("distinct", "offline_repeats", "unmeasured", "new")


def _lab_problem(lab: object, n_designs: int) -> str | None:
    """What is wrong with a record's lab view (read by the report), or None."""
    if not isinstance(lab, dict):
        return f"{_shown(lab)} is not an object"
    for name in LAB_COUNTS:
        value = lab.get(name)
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= n_designs:
            return f"{name} {_shown(value)} is not a count in [0, {n_designs}]"
    for name in ("p100", "p50"):
        value = lab.get(name)
        if value is None and lab["new"] == 0:
            continue
        if not is_finite_number(value) or abs(value) > SCORE_LIMIT:
            return f"{name} {_shown(value)} is not a finite score"
    return None


def load_records(results_dir: str | Path) -> list[RunRecord]:
    """Read every ``<task>/<method>/seed<k>.json`` record under ``results_dir``, recursively.

    Files with other names (``seed<k>.error.json`` left by failed grid cells, ``.designs.npy``,
    temporary files) are ignored.

    Returns:
        The records, sorted by (task, method, seed).

    Raises:
        MatchoptError: If the folder does not exist or holds no record, a record cannot be read,
            its path disagrees with its contents, or two files hold the same (task, method, seed).
    """
    root = Path(results_dir)
    if not root.exists():
        raise MatchoptError(f"results folder {root} does not exist")
    if not root.is_dir():
        raise MatchoptError(f"results folder {root} is not a folder")
    records: list[RunRecord] = []
    seen: dict[tuple[str, str, int], Path] = {}
    for path in sorted(root.rglob("seed*.json")):
        match = RECORD_NAME.match(path.name)
        if match is None or path.is_dir():
            continue  # a record's name on a device, pipe or link to one is refused on reading
        record = read_record(path)
        # The layout is the index of a results folder; a record copied to another seed's or
        # method's file would silently count twice, so path and contents must agree.
        expected = (path.parent.parent.name, path.parent.name, int(match.group(1)))
        if (record.task, record.method, record.seed) != expected:
            raise MatchoptError(
                f"{path}: record is for task {record.task!r}, method {record.method!r}, seed "
                f"{record.seed}, but its path says task {expected[0]!r}, method "
                f"{expected[1]!r}, seed {expected[2]}"
            )
        key = (record.task, record.method, record.seed)
        if key in seen:
            raise MatchoptError(
                f"two records for task {key[0]!r}, method {key[1]!r}, seed {key[2]}: "
                f"{seen[key]} and {path}; report on a folder holding only one of them"
            )
        seen[key] = path
        records.append(record)
    if not records:
        raise MatchoptError(f"no run records (<task>/<method>/seed<k>.json) under {root}")
    check_one_configuration(records, seen)
    return sorted(records, key=lambda r: (r.task, r.method, r.seed))


#: Config fields added after records were first written, with the value that reproduces what
#: those records ran: a record without the field ran with that value.
ADDED_FIELDS: dict[str, Any] = {
    "search_lr_scale": 1.0,
    "micro_batch": None,
    "runs_at_once": None,
    # MATCH-OPT's validation: no held-out rows, the last epoch, as published.
    "validation_fraction": 0.0,
    "validation_split": "random",
    "validation_every": 1,
    "selection": "last",
    "refit": False,
}


def same_config(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two records' configs are the same, reading a missing added field as its old
    value (:data:`ADDED_FIELDS`)."""
    return {**ADDED_FIELDS, **a} == {**ADDED_FIELDS, **b}


def check_one_configuration(
    records: Sequence[RunRecord], paths: dict[tuple[str, str, int], Path] | None = None
) -> None:
    """Refuse to pool seeds run with another preset, config or number of designs into one
    (task, method) cell (the p100 of 64 designs is not that of 128).

    Raises:
        MatchoptError: naming the cell and two records that differ.
    """
    first: dict[tuple[str, str], RunRecord] = {}
    for record in sorted(records, key=lambda r: (r.task, r.method, r.seed)):
        cell = (record.task, record.method)
        other = first.setdefault(cell, record)
        if (
            record.preset != other.preset
            or record.n_designs != other.n_designs
            or not same_config(record.config, other.config)
        ):
            where = ""
            if paths is not None:
                where = (
                    f" ({paths[(other.task, other.method, other.seed)]} and "
                    f"{paths[(record.task, record.method, record.seed)]})"
                )
            what = (
                f"presets {other.preset!r} and {record.preset!r}"
                if record.preset != other.preset
                else f"{other.n_designs} and {record.n_designs} designs"
                if record.n_designs != other.n_designs
                else "configs that differ in "
                + ", ".join(
                    sorted(
                        k
                        for k in set(record.config) | set(other.config)
                        if record.config.get(k, ADDED_FIELDS.get(k))
                        != other.config.get(k, ADDED_FIELDS.get(k))
                    )
                )
            )
            raise MatchoptError(
                f"task {record.task!r}, method {record.method!r}: seed {other.seed} and seed "
                f"{record.seed} were run with {what}{where}; a table cell pools one "
                "configuration, so keep each configuration in its own results folder"
            )


# --- The summary table ---------------------------------------------------------------------------


#: What the score columns mean, in one line (printed under summary tables).
SCORE_NOTE = (
    "p100 / p50: best and median normalized score of the designs, (y - y_min) / (y_max - y_min) "
    "over the task's full dataset; offline best: the best offline design's (noiseless where the "
    "rows are noisy replicates); mean +- std over seeds"
)


def summary_table(records: Sequence[RunRecord], explain: bool = True) -> str:
    """Markdown table, one row per (task, method, preset): mean +- std over seeds.

    Population std (ddof 0, as design-baselines reports) of p100 and p50 (std only with two
    seeds or more), the offline best and the mean fit + search seconds per seed; with
    ``explain``, :data:`SCORE_NOTE` under the table.
    """
    import pandas as pd

    groups: dict[tuple[str, str, str], list[RunRecord]] = {}
    for record in records:
        groups.setdefault((record.task, record.method, record.preset), []).append(record)
    rows = []
    for (task, method, preset), group in sorted(groups.items()):
        group = sorted(group, key=lambda r: r.seed)
        rows.append(
            [
                task,
                method,
                preset,
                ",".join(str(r.seed) for r in group),
                _mean_std([r.p100 for r in group]),
                _mean_std([r.p50 for r in group]),
                f"{group[0].offline_best:.3f}",
                f"{np.mean([r.wall_seconds for r in group]):.1f}",
            ]
        )
    header = ["task", "method", "preset", "seeds", "p100", "p50", "offline best", "seconds / seed"]
    frame = pd.DataFrame(rows, columns=header)
    lines = [frame.to_markdown(index=False, tablefmt="github", disable_numparse=True)]
    if explain:
        lines += ["", SCORE_NOTE]
    return "\n".join(lines)


def _mean_std(values: list[float]) -> str:
    if len(values) < 2:  # one seed has no spread to report
        return f"{np.mean(values):.3f}"
    return f"{np.mean(values):.3f} +- {np.std(values):.3f}"
