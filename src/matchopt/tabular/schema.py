"""A user's table <-> matchopt's designs: reading, validating, encoding and decoding.

A :class:`TableSchema` is inferred once from the user's table (CSV, Parquet or a DataFrame) and
then maps rows to designs of one :class:`~matchopt.data.DesignSpace` and designs back to rows in
the user's own format:

* **one sequence column** (``sequence=``): a discrete space, one token per letter over the
  alphabet (given, or the sorted set of letters in the column); every sequence must have the
  same length. The sequence is the whole design: other columns are ignored.
* **numeric and categorical columns**: a continuous space. A numeric column is one coordinate;
  a categorical column is a one-hot block of one coordinate per observed category, decoded by
  argmax over its block. A :class:`DesignSpace` has one kind per task, so categories live inside
  the continuous vector (a categorical-only table uses the same scheme).

Decoding puts designs in the user's units: numbers are clipped to the observed ``[min, max]`` of
their column (or to user bounds), columns whose observed values are all whole numbers stay
integers (rounded), other numbers are written with float32 precision (the precision methods
search in); categories and letters are always ones seen in the data (or in the given alphabet).
User bounds only clip: methods search their usual space (e.g. ``random`` draws in the observed
box), so with bounds inside the observed range many proposals may sit on a bound.

Scores are maximized inside matchopt: ``minimize=True`` negates the target when encoding.
Row numbers in messages count data rows from 1; for CSV files the line number (header = line 1)
is given as well.
"""

from __future__ import annotations

import bisect
import csv
import math
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from matchopt.data import DesignSpace
from matchopt.errors import MatchoptError, printable
from matchopt.runtime import check_memory
from matchopt.safe_paths import check_regular
from matchopt.state_checks import (
    check_bool,
    check_int,
    check_items,
    check_number,
    check_str,
    check_type,
    describe,
)

#: File suffixes read and written as CSV or Parquet.
CSV_SUFFIXES = (".csv",)
PARQUET_SUFFIXES = (".parquet", ".pq")
#: The column flagging predictions the table does not support (:mod:`.calibration`).
FLAG_NAME = "extrapolated"
#: The column of the ranking surrogate's value, where it is the method's own.
RANKING_NAME = "ranking_score"


# --- Reading files --------------------------------------------------------------------------------


def read_table(path: str | Path) -> pd.DataFrame:
    """Read a CSV (all cells as text, converted per column later) or Parquet file.

    CSV cells are kept as strings (no automatic NA guessing: ``NA`` may be a sequence), so that
    the schema reports a bad cell by its row, column and value. Only a regular file of at most
    :data:`MAX_TABLE_BYTES` is read (a link to a device or a ``/proc`` file is refused), and
    only when the memory its reading takes (:func:`~matchopt.runtime.check_memory`) is there.

    Raises:
        MatchoptError: missing file, unknown suffix, a file too large or not regular, unreadable
            content, duplicate column names, not enough memory.
    """
    path = Path(path)
    if not path.exists():
        raise MatchoptError(f"{printable(path)}: no such file")
    if path.is_dir():
        raise MatchoptError(f"{printable(path)}: is a folder, not a data file")
    size = check_regular(path, MAX_TABLE_BYTES, "data file")
    suffix = path.suffix.lower()
    if suffix not in CSV_SUFFIXES + PARQUET_SUFFIXES:
        raise MatchoptError(
            f"{path}: unknown file format {path.suffix or '(no suffix)'!r}; "
            f"use {', '.join(CSV_SUFFIXES + PARQUET_SUFFIXES)}"
        )
    try:
        return _read_csv(path, size) if suffix in CSV_SUFFIXES else _read_parquet(path)
    except MemoryError:  # the estimate fell short (another process took the memory meanwhile)
        raise MatchoptError(
            f"{printable(path)}: reading it ran out of memory ({size / 2**30:.2f} GiB file)"
        ) from None


#: Largest table file read: a table of designs and their measurements takes megabytes (8.3
#: million rows of TF-Bind-10 as CSV: 0.3 GiB); beyond, a file is something else.
MAX_TABLE_BYTES = 2**30
#: Peak memory of reading a CSV table and encoding it, in multiples of the file's size, with
#: room to spare (measured on a 235 MB file of 6 numeric columns, beyond the interpreter's own:
#: read by pyarrow 1.9 times its size, encoded 3.1 times; pandas' reader alone: 4.7 times).
CSV_MEMORY_FACTOR = 5
#: Memory a table takes per column beyond its cells, while read and encoded, with room to spare
#: (measured: 14 KiB per column reading a CSV of 3 rows and 100,000 columns).
COLUMN_MEMORY_BYTES = 32 * 2**10
#: The same for Parquet, in multiples of the columns' uncompressed size (Arrow, then pandas).
PARQUET_MEMORY_FACTOR = 3


def _read_csv(path: Path, size: int) -> pd.DataFrame:
    width = _header_width(path)
    check_memory(
        CSV_MEMORY_FACTOR * size + COLUMN_MEMORY_BYTES * width,
        f"{path}: reading this {size / 2**30:.2f} GiB CSV file of {width:,} columns",
    )
    raw = _read_csv_arrow(path, width)
    try:
        # header=None keeps the header row as written: pandas would rename duplicates (a, a.1).
        raw = (
            raw
            if raw is not None
            else pd.read_csv(
                path,
                header=None,
                dtype=str,
                keep_default_na=False,
                skip_blank_lines=True,
                encoding="utf-8-sig",  # a byte-order mark (spreadsheet exports) is not a name
            )
        )
    except pd.errors.EmptyDataError:
        raise MatchoptError(f"{path}: the file is empty") from None
    except UnicodeDecodeError:
        raise MatchoptError(f"{path}: cannot read as CSV: not UTF-8 text") from None
    except (pd.errors.ParserError, ValueError, OSError) as err:
        reason = " ".join(str(err).split())
        raise MatchoptError(f"{path}: cannot read as CSV: {reason}") from None
    header = [str(name).strip() for name in raw.iloc[0]]
    check_column_names(header, str(path))
    frame = raw.iloc[1:].reset_index(drop=True)
    frame.columns = header
    lines = _record_lines(path)
    # Blank lines are skipped and a quoted cell may span lines: a fixed offset would be wrong.
    if lines is not None and len(lines) == len(raw):
        frame.attrs[LINES_ATTR] = {"rows": len(frame), "runs": _runs(lines[1:])}
    return frame


def _header_width(path: Path) -> int:
    """The number of cells of the CSV file's first record (0: none); a file with NUL bytes at
    its start is refused (not text: a binary file, or a sparse file's hole)."""
    with path.open("rb") as handle:
        if b"\0" in handle.read(1 << 16):
            raise MatchoptError(f"{printable(path)}: holds NUL bytes: not a CSV text file")
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            return len(next(csv.reader(handle), []))
    except (csv.Error, UnicodeDecodeError):
        return 0  # the reader below names the problem by line


def _read_csv_arrow(path: Path, width: int) -> pd.DataFrame | None:
    """The CSV file's cells as Arrow-backed text (the header row first), read at about the
    file's size in memory; None where pyarrow is absent or the file is not plain enough for
    it (blank lines of spaces, ragged rows, text that is not UTF-8): pandas' reader then reads
    it, and names the problem by line."""
    try:
        import pyarrow as pa
        import pyarrow.csv as pa_csv
    except ImportError:
        return None
    if width == 0:
        return None
    names = [f"c{i}" for i in range(width)]
    try:
        table = pa_csv.read_csv(
            path,
            read_options=pa_csv.ReadOptions(column_names=names),
            parse_options=pa_csv.ParseOptions(newlines_in_values=True),
            convert_options=pa_csv.ConvertOptions(
                column_types={name: pa.string() for name in names},
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
            ),
        )
    except MemoryError:
        raise
    except (OSError, ValueError, UnicodeDecodeError, csv.Error, pa.ArrowException):
        return None
    frame = table.to_pandas(types_mapper={pa.string(): pd.StringDtype("pyarrow")}.get)
    frame.columns = range(width)
    return frame


#: Key of ``DataFrame.attrs`` with the file line of each data row of a table read from a CSV file:
#: ``{"rows": n, "runs": [[row, line], ...]}``, each run a row and the line it starts on, the
#: rows after it on the following lines up to the next run. Runs, not a line per row: pandas
#: deep-copies ``attrs`` on every operation (and Parquet writes them as JSON).
LINES_ATTR = "source_lines"


def _runs(lines: list[int]) -> list[list[int]]:
    """``[row, line]`` where row's line is not the one after the previous row's."""
    runs: list[list[int]] = []
    for row, line in enumerate(lines):
        if not runs or line != runs[-1][1] + row - runs[-1][0]:
            runs.append([row, line])
    return runs


def _record_lines(path: Path) -> list[int] | None:
    """First line of every record of a CSV file that pandas reads (header included), or None
    if the file cannot be read this way (then messages give rows without lines).

    Like pandas (``skip_blank_lines``), a record that is one line of only whitespace is skipped.
    """
    starts: list[int] = []
    last = [""]

    def feed(handle: Iterable[str]) -> Iterator[str]:
        for line in handle:
            last[0] = line
            yield line

    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            reader = csv.reader(feed(handle))
            end = 0
            for _ in reader:
                start, end = end + 1, reader.line_num
                if start != end or last[0].strip():
                    starts.append(start)
    except (csv.Error, OSError, UnicodeDecodeError):
        return None
    return starts


def _read_parquet(path: Path) -> pd.DataFrame:
    """The Parquet file's table, when the memory its columns take is there."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise MatchoptError(f"{path}: Parquet needs pyarrow (pip install pyarrow)") from None
    try:
        names = pq.read_schema(path).names
        check_column_names(names, str(path))
        metadata = pq.read_metadata(path)
        size = sum(metadata.row_group(i).total_byte_size for i in range(metadata.num_row_groups))
        check_memory(
            PARQUET_MEMORY_FACTOR * size + COLUMN_MEMORY_BYTES * len(names),
            f"{path}: reading this Parquet file ({size / 2**30:.2f} GiB uncompressed, "
            f"{len(names):,} columns)",
        )
        frame = pq.read_table(path).to_pandas()
    except (MatchoptError, MemoryError):
        raise
    except Exception as err:  # pyarrow raises several unrelated types for a bad file
        reason = " ".join(str(err).split())
        raise MatchoptError(f"{path}: cannot read as Parquet: {reason}") from None
    # A table read from a CSV file and saved as Parquet keeps its attrs: those lines are not ours.
    frame.attrs.pop(LINES_ATTR, None)
    return frame


def read_frame(
    data: pd.DataFrame | str | os.PathLike, source: str | None, name: str
) -> tuple[pd.DataFrame, str]:
    """A DataFrame, or the table of a CSV or Parquet file, and its name in messages (``source``,
    else the file's path, else ``name``)."""
    if isinstance(data, (str, os.PathLike)):
        return read_table(data), source or str(data)
    if isinstance(data, pd.DataFrame):
        return data, source or name
    raise MatchoptError(f"expected a DataFrame or a file path, got {type(data).__name__}")


def check_column_names(names: Sequence[object], source: str) -> None:
    """Raise on an empty or duplicate column name (columns are addressed by name)."""
    seen: set[str] = set()
    for index, name in enumerate(names):
        text = str(name)
        if not text.strip():
            raise MatchoptError(f"{source}: column {index + 1} has no name")
        if text in seen:
            raise MatchoptError(f"{source}: duplicate column name {text!r}")
        seen.add(text)


# --- Column kinds ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class NumericColumn:
    """A numeric feature: one coordinate of a continuous design."""

    name: str
    """Column name."""
    low: float
    """Smallest value a proposal may take (observed minimum or user bound)."""
    high: float
    """Largest value a proposal may take (observed maximum or user bound)."""
    integer: bool
    """Every observed value is a whole number: proposals are rounded."""
    scale: float
    """Population std of the observed values (1 if constant): unit of the distance column."""

    def __matchopt_check__(self) -> None:
        """Checks of a column read from a model file (:mod:`matchopt.state`)."""
        check_str(self, "name")
        low = check_number(self, "low")
        check_number(self, "high", low)
        check_bool(self, "integer")
        check_number(self, "scale", 0.0, above=True)


@dataclass(frozen=True)
class CategoricalColumn:
    """A categorical feature: a one-hot block of a continuous design, decoded by argmax."""

    name: str
    """Column name."""
    categories: tuple
    """Observed values (sorted when they can be), one coordinate each."""

    def __matchopt_check__(self) -> None:
        """Checks of a column read from a model file (:mod:`matchopt.state`)."""
        check_str(self, "name")
        categories = check_items(
            self,
            "categories",
            lambda v: isinstance(v, (str, bool, int, float, np.generic)),
            "texts or numbers",
            kinds=(tuple,),
        )
        if not categories or len(set(categories)) != len(categories):
            raise MatchoptError(f"categories are {describe(categories)} with repeats or none")


@dataclass(frozen=True)
class SequenceColumn:
    """A fixed-length sequence: the whole design, one token per position."""

    name: str
    """Column name."""
    alphabet: str
    """Letters in token order (token i is ``alphabet[i]``)."""
    length: int
    """Length of every sequence."""

    def __matchopt_check__(self) -> None:
        """Checks of a column read from a model file (:mod:`matchopt.state`)."""
        check_str(self, "name")
        alphabet = check_str(self, "alphabet")
        if len(alphabet) < 2 or len(set(alphabet)) != len(alphabet):
            raise MatchoptError(f"alphabet is {describe(alphabet)}, expected 2 or more letters")
        check_int(self, "length", 1)


# --- The schema -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TableSchema:
    """How one table maps to designs and scores, and designs back to rows.

    Build it with :meth:`infer`. Attributes are the inferred column descriptions.
    """

    target: str
    """Name of the score column."""
    minimize: bool
    """Lower target values are better (the target is negated inside matchopt)."""
    columns: tuple[NumericColumn | CategoricalColumn, ...]
    """Numeric and categorical features, in design order (empty for a sequence table)."""
    sequence: SequenceColumn | None
    """The sequence column of a sequence table, else None."""
    ignored: tuple[str, ...]
    """Columns of the table that are neither the target nor a feature."""

    def __matchopt_check__(self) -> None:
        """Checks of a schema read from a model file (:mod:`matchopt.state`; its columns are
        checked there): numeric and categorical columns, or a sequence alone."""
        check_str(self, "target")
        check_bool(self, "minimize")
        columns = check_items(
            self,
            "columns",
            lambda c: isinstance(c, (NumericColumn, CategoricalColumn)),
            "numeric and categorical columns",
            kinds=(tuple,),
        )
        sequence = check_type(self, "sequence", SequenceColumn, none=True)
        if (sequence is None) == (not columns):
            raise MatchoptError("expected feature columns or a sequence column, and not both")
        check_items(self, "ignored", lambda c: isinstance(c, str), "column names", kinds=(tuple,))
        names = [*self.feature_names, self.target]
        if len(set(names)) != len(names):
            raise MatchoptError("a column name appears twice among the features and target")

    # -- construction --

    @classmethod
    def infer(
        cls,
        frame: pd.DataFrame,
        target: str,
        *,
        features: Sequence[str] | None = None,
        categorical: Iterable[str] = (),
        sequence: str | None = None,
        alphabet: str | None = None,
        minimize: bool = False,
        bounds: Mapping[str, tuple[float, float]] | None = None,
        source: str = "data",
    ) -> TableSchema:
        """Validate ``frame`` and describe its columns.

        Args:
            frame: the user's table, one row per measured design.
            target: name of the score column.
            features: feature columns; None = every column but the target (for a sequence
                table: the sequence column alone).
            categorical: feature columns to treat as categories (others must be numeric).
            sequence: name of a fixed-length sequence column (the whole design).
            alphabet: letters a sequence may use; None = the letters found in the column.
            minimize: lower target values are better.
            bounds: column -> (low, high) limits of proposals for numeric columns, instead of
                the observed range.
            source: name of the table in messages (its path).

        Raises:
            MatchoptError: naming the file, column, row and value of the first problem found.
        """
        check_column_names(list(frame.columns), source)
        where = _Locator.of(frame, source)
        columns = [str(c) for c in frame.columns]
        frame = frame.set_axis(columns, axis=1)
        bounds = dict(bounds or {})
        features, categorical = _design_columns(
            frame, target, features, list(categorical), sequence, alphabet, bounds, source
        )
        y = numeric_values(frame[target], target, where, hint=False)
        if np.ptp(y) == 0:
            raise MatchoptError(
                f"{source}: target column {target!r} is constant ({_number(y[0])} in every row); "
                "there is nothing to optimize"
            )
        ignored = tuple(c for c in columns if c != target and c not in features)

        if sequence is not None:
            _, seq = sequence_tokens(frame[sequence], sequence, alphabet, where, infer=True)
            return cls(target, bool(minimize), (), seq, ignored)

        described = tuple(
            _describe_column(frame[name], name, name in categorical, bounds.get(name), where)
            for name in features
        )
        return cls(target, bool(minimize), described, None, ignored)

    # -- properties --

    @property
    def feature_names(self) -> list[str]:
        """Feature columns in the order proposals list them."""
        if self.sequence is not None:
            return [self.sequence.name]
        return [c.name for c in self.columns]

    @property
    def space(self) -> DesignSpace:
        """The design space: tokens over the alphabet, or floats with one-hot blocks."""
        if self.sequence is not None:
            return DesignSpace.discrete(self.sequence.length, len(self.sequence.alphabet))
        return DesignSpace.continuous(sum(_width(c) for c in self.columns))

    @property
    def distance_name(self) -> str:
        """Name of the distance column of proposals."""
        return "nearest_hamming" if self.sequence is not None else "nearest_euclidean"

    @property
    def prediction_name(self) -> str:
        """Name of the prediction column of proposals."""
        return f"predicted_{self.target}"

    @property
    def spread_name(self) -> str:
        """Name of the column of proposals holding the ensemble's spread of the prediction."""
        return f"{self.prediction_name}_std"

    def describe(self) -> str:
        """One line: what the design is made of."""
        if self.sequence is not None:
            s = self.sequence
            return f"sequence {s.name!r}: {s.length} letters of {s.alphabet!r}"
        numeric = sum(isinstance(c, NumericColumn) for c in self.columns)
        cats = [c for c in self.columns if isinstance(c, CategoricalColumn)]
        text = f"{numeric} numeric column(s)"
        if cats:
            sizes = ", ".join(f"{printable(c.name)} ({len(c.categories)})" for c in cats)
            text += f", {len(cats)} categorical column(s): {sizes}"
        return text + f" -> {self.space.describe()}"

    # -- table -> designs --

    def encode(self, frame: pd.DataFrame, source: str = "data") -> np.ndarray:
        """Feature columns of a table (already validated by :meth:`infer`) -> designs (n x d)."""
        where = _Locator.of(frame, source)
        if self.sequence is not None:
            tokens, _ = sequence_tokens(
                frame[self.sequence.name], self.sequence.name, self.sequence.alphabet, where
            )
            return tokens
        blocks = []
        for column in self.columns:
            if isinstance(column, NumericColumn):
                blocks.append(numeric_values(frame[column.name], column.name, where)[:, None])
            else:
                values = category_values(frame[column.name], column.name, where)
                index = {v: i for i, v in enumerate(column.categories)}
                for row, value in enumerate(values):
                    if value not in index:
                        known = ", ".join(_short(str(c)) for c in column.categories[:10])
                        raise MatchoptError(
                            f"{where(column.name, row)}: category {_short(str(value))!r} was not "
                            f"in the measured table (it has: {known}"
                            f"{', ...' if len(column.categories) > 10 else ''})"
                        )
                codes = np.array([index[v] for v in values], dtype=np.int64)
                blocks.append(np.eye(len(column.categories))[codes])
        return np.concatenate(blocks, axis=1)

    def encode_candidates(self, frame: pd.DataFrame, source: str) -> np.ndarray:
        """Candidate designs given by the user (a table with this schema's feature columns;
        other columns are ignored) -> designs; a missing column, an unknown category or letter
        is an error naming the file, column and row."""
        check_column_names(list(frame.columns), source)
        columns = [str(c) for c in frame.columns]
        missing = [name for name in self.feature_names if name not in columns]
        if missing:
            raise MatchoptError(
                f"{source}: no column {_column_list(missing)} (the candidates need the measured "
                f"table's feature columns: {_column_list(self.feature_names)})"
            )
        if not len(frame):
            raise MatchoptError(f"{source}: no rows")
        frame = frame.set_axis(columns, axis=1)
        designs = self.encode(frame, source)
        if self.sequence is not None and designs.shape[1] != self.sequence.length:
            raise MatchoptError(
                f"{source}: column {self.sequence.name!r} holds sequences of "
                f"{designs.shape[1]} letters; the measured ones have {self.sequence.length}"
            )
        return self.space.validate(designs.astype(self.space.dtype), source)

    def scores(self, frame: pd.DataFrame, source: str = "data") -> np.ndarray:
        """The target as matchopt maximizes it (negated when minimizing), (n,) float64."""
        where = _Locator.of(frame, source)
        y = numeric_values(frame[self.target], self.target, where, hint=False)
        return -y if self.minimize else y

    def user_scores(self, y: np.ndarray) -> np.ndarray:
        """Internal scores (maximized) -> the user's units and sign."""
        y = np.asarray(y, dtype=np.float64)
        return -y if self.minimize else y

    # -- designs -> table --

    def decode(self, designs: np.ndarray) -> pd.DataFrame:
        """Designs (n x d) -> rows in the user's format (clipped, rounded, argmax, letters)."""
        designs = np.asarray(designs)
        if self.sequence is not None:
            letters = np.array(list(self.sequence.alphabet))[designs.astype(np.int64)]
            return pd.DataFrame({self.sequence.name: ["".join(row) for row in letters]})
        out: dict[str, object] = {}
        start = 0
        for column in self.columns:
            width = _width(column)
            block = np.asarray(designs[:, start : start + width], dtype=np.float64)
            start += width
            if isinstance(column, CategoricalColumn):
                codes = block.argmax(axis=1)
                out[column.name] = pd.Series(list(column.categories)).take(codes).to_numpy()
            elif column.integer:
                low, high = math.ceil(column.low), math.floor(column.high)
                out[column.name] = whole_numbers(np.clip(np.round(block[:, 0]), low, high))
            else:
                # float32 is the precision methods search in: write its shortest decimal form.
                short = np.array([float(str(v)) for v in block[:, 0].astype(np.float32)])
                out[column.name] = np.clip(short, column.low, column.high)
        return pd.DataFrame(out)

    def canonical(self, designs: np.ndarray) -> tuple[pd.DataFrame, np.ndarray]:
        """Decoded rows and their designs re-encoded (what the user gets, as a design)."""
        rows = self.decode(designs)
        encoded = self.encode(rows, "proposals")
        return rows, self.space.validate(encoded, "proposals")

    def neighbours(
        self, designs: np.ndarray, radius: int, count: int, rng: np.random.Generator
    ) -> np.ndarray:
        """``count`` random neighbours of ``designs`` (n x d, parents drawn in turn).

        Sequences: ``radius`` positions (at most the length) each get another letter. Other
        tables: every numeric column moves by a Gaussian step of ``radius / 4`` of its std
        (then clipped to its range), and each categorical column takes another category with
        probability ``radius / (radius + 4)``.
        """
        designs = np.asarray(designs)
        parents = designs[np.arange(count) % len(designs)].copy()
        if self.sequence is not None:
            k, length = len(self.sequence.alphabet), self.sequence.length
            moved = min(radius, length)
            positions = np.argsort(rng.random((count, length)), axis=1)[:, :moved]
            rows = np.arange(count)[:, None]
            shift = rng.integers(1, k, size=(count, moved))
            parents[rows, positions] = (parents[rows, positions] + shift) % k
            return parents
        parents = parents.astype(np.float64)
        start = 0
        for column in self.columns:
            width = _width(column)
            if isinstance(column, NumericColumn):
                step = rng.normal(0.0, radius / 4 * column.scale, size=count)
                parents[:, start] = np.clip(parents[:, start] + step, column.low, column.high)
            elif width > 1:
                switch = rng.random(count) < radius / (radius + 4)
                current = parents[:, start : start + width].argmax(1)
                new = (current + rng.integers(1, width, size=count)) % width
                codes = np.where(switch, new, current)
                parents[:, start : start + width] = np.eye(width)[codes]
            start += width
        return parents

    def category_blocks(self) -> list[tuple[str, slice]]:
        """Each categorical column's name and the slice of its one-hot block in a design."""
        blocks, start = [], 0
        for column in self.columns:
            width = _width(column)
            if isinstance(column, CategoricalColumn):
                blocks.append((column.name, slice(start, start + width)))
            start += width
        return blocks

    # -- distances --

    def distance_weights(self) -> np.ndarray:
        """Per-coordinate weights (d,) of the continuous distance: 1/std for a numeric column,
        1/sqrt(2) inside a one-hot block (a differing category adds exactly 1 to the squared
        distance)."""
        weights = []
        for column in self.columns:
            if isinstance(column, NumericColumn):
                weights.append(np.array([1.0 / column.scale]))
            else:
                weights.append(np.full(len(column.categories), math.sqrt(0.5)))
        return np.concatenate(weights)

    def nearest_distances(self, designs: np.ndarray, reference: np.ndarray) -> np.ndarray:
        """Distance (n,) of each design to its nearest reference design (the measured rows).

        Hamming distance (differing positions) for sequences; otherwise Euclidean distance with
        numeric columns in units of their std and 1 per differing categorical column.
        """
        return self._nearest(np.asarray(designs), np.asarray(reference))

    def nearest_other_distances(self, designs: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Distance of each of ``designs[rows]`` to its nearest *other* row of ``designs``
        (distinct designs: how far apart the measured designs lie), as
        :meth:`nearest_distances`."""
        designs = np.asarray(designs)
        return self._nearest(designs[rows], designs, skip=np.asarray(rows))

    def _nearest(
        self, designs: np.ndarray, reference: np.ndarray, skip: np.ndarray | None = None
    ) -> np.ndarray:
        """Nearest distances; ``skip[i]`` is a reference row design ``i`` is not compared to."""
        out = np.empty(len(designs))
        # Chunks keep the (chunk x N x d) comparison array near 16M entries.
        chunk = max(1, 16_000_000 // max(1, reference.size))

        def smallest(block: np.ndarray, start: int) -> np.ndarray:
            if skip is not None:
                block = block.astype(np.float64)
                block[np.arange(len(block)), skip[start : start + len(block)]] = np.inf
            return block.min(-1)

        if self.sequence is not None:
            for i in range(0, len(designs), chunk):
                diff = designs[i : i + chunk, None, :] != reference[None, :, :]
                out[i : i + chunk] = smallest(diff.sum(-1), i)
            return out
        w = self.distance_weights()
        a, b = designs.astype(np.float64) * w, reference.astype(np.float64) * w
        # Centred on the reference rows: the expansion below loses the differences to round-off
        # when the columns sit far from zero (counts near 2**64).
        center = b.mean(0) if len(b) else 0.0
        a, b = a - center, b - center
        b_sq = (b * b).sum(1)
        for i in range(0, len(a), chunk):
            part = a[i : i + chunk]
            sq = (part * part).sum(1)[:, None] + b_sq[None, :] - 2.0 * part @ b.T
            out[i : i + chunk] = np.sqrt(np.maximum(smallest(sq, i), 0.0))
        return out


# --- Column conversion ----------------------------------------------------------------------------


def _design_columns(
    frame: pd.DataFrame,
    target: str,
    features: Sequence[str] | None,
    categorical: list[str],
    sequence: str | None,
    alphabet: str | None,
    bounds: Mapping[str, tuple[float, float]],
    source: str,
) -> tuple[list[str], list[str]]:
    """The feature and categorical columns of :meth:`TableSchema.infer` (True/False columns
    added as categories), checked against the table; raises on the first problem."""
    columns = list(frame.columns)
    if len(frame) == 0:
        raise MatchoptError(f"{source}: no data rows")
    if len(frame) == 1:  # before the target check: one row would read as a constant target
        raise MatchoptError(f"{source}: only 1 data row; at least 2 are needed")
    if alphabet is not None and sequence is None:
        raise MatchoptError("--alphabet needs --sequence: it lists a sequence column's letters")
    if target not in columns:
        raise MatchoptError(
            f"{source}: no target column {target!r}; columns: {_column_list(columns)}"
        )
    features = _feature_names(columns, target, features, categorical, sequence, source)
    if sequence is None:
        # True/False columns are two categories: proposals come back as True/False, not 0/1.
        categorical += [n for n in features if n not in categorical and _is_true_false(frame[n])]
    for name in categorical:
        if name not in features:
            raise MatchoptError(f"{source}: categorical column {name!r} is not a feature")
    for name in bounds:
        if name not in features or name in categorical or name == sequence:
            raise MatchoptError(
                f"--bounds {name}: {name!r} is not a numeric feature column of {source}"
            )
    return features, categorical


def output_columns(schema: TableSchema) -> list[str]:
    """The columns matchopt adds to proposals and predictions (no feature may take their
    names)."""
    prediction = schema.prediction_name
    return [
        prediction,
        schema.spread_name,
        f"{prediction}_low",
        f"{prediction}_high",
        FLAG_NAME,
        RANKING_NAME,
        schema.distance_name,
        "origin",
    ]


def check_output_names(schema: TableSchema, source: str) -> None:
    """Raise where a feature column has the name of a column matchopt adds."""
    for name in output_columns(schema):
        if name in schema.feature_names:
            raise MatchoptError(
                f"{source}: feature column {name!r} has the name of an output column; rename it"
            )


def _describe_column(
    series: pd.Series,
    name: str,
    categorical: bool,
    bound: tuple[float, float] | None,
    where: _Locator,
) -> NumericColumn | CategoricalColumn:
    """A feature column's description: its categories, or its range (``bound`` if given),
    whether it holds whole numbers, and its std."""
    if categorical:
        return CategoricalColumn(name, _categories(category_values(series, name, where)))
    values = numeric_values(series, name, where)
    integer = bool(np.all(values == np.round(values)))
    low, high = float(values.min()), float(values.max())
    if bound is not None:
        low, high = _check_bounds(name, bound, integer)
    std = float(values.std())
    return NumericColumn(name, low, high, integer, std if std > 0 else 1.0)


class _Locator:
    """Names a cell in messages: file, column, row (and line, for CSV files)."""

    def __init__(self, source: str, runs: Sequence[Sequence[int]] = ()):
        self.source = source
        self.runs = [(int(row), int(line)) for row, line in runs]

    @classmethod
    def of(cls, frame: pd.DataFrame, source: str) -> _Locator:
        """A locator of ``frame``'s cells, with file lines when it was read from a CSV file."""
        lines = frame.attrs.get(LINES_ATTR)
        # Lines of another table (rows added or removed since reading) would mislead.
        if isinstance(lines, dict) and lines.get("rows") == len(frame):
            return cls(source, lines.get("runs", ()))
        return cls(source)

    def line(self, row: int) -> int | None:
        """The file line data row ``row`` (from 0) starts on, if known."""
        at = bisect.bisect_right(self.runs, (row, math.inf)) - 1
        if at < 0:
            return None
        first, line = self.runs[at]
        return line + row - first

    def __call__(self, column: str, row: int) -> str:
        line = self.line(row)
        where = f" (line {line})" if line is not None else ""
        return f"{self.source}: column {column!r}, row {row + 1}{where}"


def _is_missing(value: object) -> bool:
    if value is None:
        return True
    if isinstance(value, str):
        return not value.strip()
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def numeric_values(series: pd.Series, name: str, where: _Locator, hint: bool = True) -> np.ndarray:
    """A column as finite float64 values (n,); raises on the first missing, non-numeric, NaN or
    infinite cell (``hint``: suggest --categorical for a word in a feature column).

    Dates and durations are refused by name: as float32 designs their nanosecond counts would
    round to minutes and come back as raw integers.
    """
    if pd.api.types.is_datetime64_any_dtype(series) or pd.api.types.is_timedelta64_dtype(series):
        raise MatchoptError(
            f"{where.source}: column {name!r} holds dates or durations ({series.dtype}); "
            "convert it to a number (e.g. days since a start date)"
            + (", pass it as --categorical or leave it out with --features" if hint else "")
        )
    if pd.api.types.is_bool_dtype(series):
        series = series.astype(np.int64)
    if pd.api.types.is_numeric_dtype(series):
        values = series.to_numpy(dtype=np.float64, na_value=np.nan)
    else:
        if pd.api.types.is_string_dtype(series) and not pd.api.types.is_object_dtype(series):
            text = series.str.strip()  # Arrow-backed text: one pass, no Python strings
        else:
            text = series.map(lambda v: v.strip() if isinstance(v, str) else v)
        values = pd.to_numeric(text, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~np.isfinite(values)
    if not bad.any():
        return values
    row = int(np.argmax(bad))
    raw = series.iloc[row]
    if _is_missing(raw):
        problem = "missing value" if not isinstance(raw, float) else "NaN (missing value)"
    elif np.isinf(values[row]):
        problem = f"{str(raw).strip()!r} is infinite; only finite numbers are allowed"
    elif np.isnan(values[row]) and str(raw).strip().lower() == "nan":
        problem = f"{str(raw).strip()!r} (NaN); only finite numbers are allowed"
    elif _is_nested(raw):
        problem = f"{_short(raw)} is {_nested_kind(raw)}; a feature is one number per cell"
        if hint:
            problem += " (leave the column out with --features)"
    else:
        problem = f"{str(raw).strip()!r} is not a number"
        if hint:
            problem += " (categories: --categorical; not a feature: --features)"
    raise MatchoptError(f"{where(name, row)}: {problem}")


def category_values(series: pd.Series, name: str, where: _Locator) -> list:
    """A categorical column as a list of values; raises on the first missing cell."""
    values = series.tolist()
    for row, value in enumerate(values):
        if _is_nested(value):
            raise MatchoptError(
                f"{where(name, row)}: {_short(value)} is {_nested_kind(value)}; a category must "
                "be one value (text or a number)"
            )
        if _is_missing(value):
            raise MatchoptError(f"{where(name, row)}: missing value")
    return [v.strip() if isinstance(v, str) else v for v in values]


def _is_nested(value: object) -> bool:
    """A cell holding several values (Parquet list, struct or map columns)."""
    return isinstance(value, (list, tuple, dict, set, np.ndarray))


def _nested_kind(value: object) -> str:
    return "a record" if isinstance(value, dict) else "a list"


def _categories(values: list) -> tuple:
    unique = list(dict.fromkeys(values))
    try:
        return tuple(sorted(unique))
    except TypeError:  # mixed types: keep the order of first appearance
        return tuple(unique)


def sequence_tokens(
    series: pd.Series,
    name: str,
    alphabet: str | None,
    where: _Locator,
    infer: bool = False,
) -> tuple[np.ndarray, SequenceColumn]:
    """A sequence column -> tokens (n x L, int64) and its description.

    Raises on a missing or non-text cell, a length that differs from row 1's, a letter outside
    the alphabet, a repeated letter in the alphabet or an alphabet of fewer than 2 letters.
    """
    values = series.tolist()
    for row, value in enumerate(values):
        if _is_missing(value):
            raise MatchoptError(f"{where(name, row)}: missing sequence")
        if not isinstance(value, str):
            nested = _is_nested(value)
            shown = f"{_short(value)} is {_nested_kind(value)}," if nested else f"{value!r} is"
            raise MatchoptError(f"{where(name, row)}: {shown} not a text sequence")
    values = [v.strip() for v in values]
    length = len(values[0])
    for row, value in enumerate(values):
        if len(value) != length:
            raise MatchoptError(
                f"{where(name, row)}: sequence {_short(value)!r} has length {len(value)}, "
                f"row 1 has length {length}; sequences must all have the same length"
            )
    codes = np.frombuffer("".join(values).encode("utf-32-le"), dtype=np.uint32)
    codes = codes.reshape(len(values), length)
    if alphabet is None:
        if not infer:
            raise MatchoptError("an alphabet is needed to encode sequences")
        alphabet = "".join(sorted(set("".join(values))))
        if len(alphabet) < 2:
            raise MatchoptError(
                f"{where.source}: column {name!r} uses only the letter(s) {alphabet!r}; "
                "pass --alphabet with every letter a design may use (at least 2)"
            )
    else:
        repeated = [c for c in dict.fromkeys(alphabet) if alphabet.count(c) > 1]
        if repeated:
            raise MatchoptError(f"--alphabet {alphabet!r}: letter {repeated[0]!r} is repeated")
        if len(alphabet) < 2:
            raise MatchoptError(f"--alphabet {alphabet!r}: needs at least 2 letters")
    letters = np.frombuffer(alphabet.encode("utf-32-le"), dtype=np.uint32)
    order = np.argsort(letters)
    position = np.searchsorted(letters[order], codes).clip(0, len(letters) - 1)
    known = letters[order][position] == codes
    if not known.all():
        row, col = (int(i) for i in np.argwhere(~known)[0])
        raise MatchoptError(
            f"{where(name, row)}: letter {values[row][col]!r} at position {col + 1} of "
            f"{_short(values[row])!r} is not in the alphabet {alphabet!r}"
        )
    tokens = order[position].astype(np.int64)
    return tokens, SequenceColumn(name, alphabet, length)


# --- Helpers --------------------------------------------------------------------------------------


def _is_true_false(series: pd.Series) -> bool:
    """A bool column (Parquet), or text cells all reading true or false (CSV, any case)."""
    if pd.api.types.is_bool_dtype(series):
        return True
    if not (pd.api.types.is_object_dtype(series) or pd.api.types.is_string_dtype(series)):
        return False
    words = {v.strip().lower() if isinstance(v, str) else None for v in series}
    return bool(words) and words <= {"true", "false"}


def _column_list(columns: Sequence[str]) -> str:
    """The table's column names for a message, as they print (names come from the file)."""
    return ", ".join(map(printable, columns))


def _feature_names(
    columns: list[str],
    target: str,
    features: Sequence[str] | None,
    categorical: list[str],
    sequence: str | None,
    source: str,
) -> list[str]:
    for name in [*(features or []), *categorical, *([sequence] if sequence else [])]:
        if name not in columns:
            raise MatchoptError(f"{source}: no column {name!r}; columns: {_column_list(columns)}")
        if name == target:
            raise MatchoptError(f"{source}: the target {target!r} cannot also be a feature")
    if features is not None and len(set(features)) != len(features):
        raise MatchoptError("--features lists a column twice")
    if sequence is not None:
        if categorical:
            raise MatchoptError("a sequence column is the whole design: drop --categorical")
        if features is not None and list(features) != [sequence]:
            raise MatchoptError(
                "a sequence column is the whole design: --features cannot add other columns"
            )
        return [sequence]
    names = list(features) if features is not None else [c for c in columns if c != target]
    if not names:
        raise MatchoptError(f"{source}: no feature columns besides the target {target!r}")
    return names


def _check_bounds(name: str, bound: tuple[float, float], integer: bool) -> tuple[float, float]:
    try:
        low, high = (float(v) for v in bound)
    except (TypeError, ValueError):
        raise MatchoptError(f"--bounds {name}: expected two numbers, got {bound!r}") from None
    if not (np.isfinite(low) and np.isfinite(high)) or low >= high:
        raise MatchoptError(f"--bounds {name}={low}:{high}: need finite low < high")
    if integer and math.ceil(low) > math.floor(high):
        raise MatchoptError(f"--bounds {name}={low}:{high}: no whole number in the range")
    return low, high


def whole_numbers(values: np.ndarray) -> np.ndarray:
    """Rounded floats as integers: int64 where they fit, uint64 for non-negative values up to
    2**64 (a column of unsigned 64-bit counts), else the floats themselves. Floats at 2**63 or
    2**64 (what the largest integers of those types round to) stay below the type's limit."""
    values = np.asarray(values, dtype=np.float64)
    if len(values) == 0:
        return values.astype(np.int64)
    low, high = float(values.min()), float(values.max())
    if low >= -(2.0**63) and high < 2.0**63:
        return values.astype(np.int64)
    if low >= 0 and high <= 2.0**64:
        return np.minimum(values, np.nextafter(2.0**64, 0)).astype(np.uint64)
    return values


def _width(column: NumericColumn | CategoricalColumn) -> int:
    return 1 if isinstance(column, NumericColumn) else len(column.categories)


def _short(value: object, limit: int = 40) -> str:
    """A cell's value for a one-line message: its text on one line, cut at ``limit``."""
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _number(value: float) -> str:
    return f"{value:g}"
