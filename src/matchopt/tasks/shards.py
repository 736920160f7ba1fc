"""design-bench's data files and offline-set recipe, shared by every task that reads them.

Layout: ``<data>/<folder>/<prefix>-{x,y}-<k>.npy`` (``k`` = shard). The offline set keeps the
rows with ``y <= percentile(y_full, max_percentile)``, then optionally a uniform subsample.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from matchopt.errors import MatchoptError
from matchopt.runtime import check_memory
from matchopt.safe_paths import check_regular


def shard_paths(data_dir: Path | None, folder: str, prefix: str, n_shards: int) -> list[Path]:
    """x and y shard paths, in shard order: [x-0, y-0, x-1, y-1, ...]."""
    base = Path(data_dir or ".") / folder
    return [base / f"{prefix}-{axis}-{k}.npy" for k in range(n_shards) for axis in ("x", "y")]


#: Largest shard file opened (design-bench's largest, Hopper's, takes 0.3 GiB).
MAX_SHARD_BYTES = 64 * 2**30


def _open_shard(path: Path) -> np.ndarray:
    """A read-only memory map of one ``.npy`` file (nothing is read but its header); only a
    regular file (a pipe would block, a device map without end)."""
    check_regular(path, MAX_SHARD_BYTES, "design-bench file")
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError) as err:
        raise MatchoptError(f"cannot read design-bench file {path}: {err}") from None


def _check_shard_pair(
    px: Path, py: Path, row_shape: tuple[int, ...] | None, x_kinds: str
) -> tuple[int, tuple[int, ...], np.dtype, np.dtype]:
    """Check one x/y shard pair from its ``.npy`` headers (no row is read): same row count, x rows
    of ``row_shape``, y of shape (n,) or (n, 1), dtypes of the allowed kinds.

    Returns:
        The pair's row count, the row shape (x's own where ``row_shape`` is None), x's and y's
        dtypes.
    """
    x, y = _open_shard(px), _open_shard(py)
    if x.ndim == 0 or y.ndim == 0 or len(x) != len(y):
        raise MatchoptError(f"{px} has shape {x.shape} but {py} has shape {y.shape}")
    if row_shape is None:
        row_shape = x.shape[1:]
    if x.shape[1:] != tuple(row_shape):
        raise MatchoptError(f"{px}: expected rows of shape {tuple(row_shape)}, got {x.shape}")
    if y.shape[1:] not in ((), (1,)):
        raise MatchoptError(f"{py}: expected y of shape (n, 1), got {y.shape}")
    # Text, dates or complex numbers would fail (or silently lose a part) further on.
    for path, array, allowed, what in ((px, x, x_kinds, "x"), (py, y, "iuf", "y")):
        if array.dtype.kind not in allowed:
            expected = "integer tokens" if allowed == "iu" else "real numbers (integer or float)"
            raise MatchoptError(f"{path}: {what} has dtype {array.dtype}; expected {expected}")
    return len(x), row_shape, x.dtype, y.dtype  # the maps close on return


def _allocate_rows(
    where: Path,
    total: int,
    row_shape: tuple[int, ...] | None,
    x_dtype: np.dtype,
    y_dtype: np.dtype,
    x_kinds: str,
) -> tuple[np.ndarray, np.ndarray]:
    """Empty x (``total`` x row shape) and y (``total``,) arrays, once memory is known to hold
    them and the task's designs made of them (:func:`~matchopt.runtime.check_memory`)."""
    # The arrays as stored, and the task's offline rows (at most all) as designs: tokens become
    # int64 (8 bytes from an int8 file's 1), floats float32 (DesignSpace.dtype).
    design = np.dtype(np.int64 if set(x_kinds) <= set("iu") else np.float32)
    cells = math.prod(row_shape or ())
    row_bytes = cells * (x_dtype.itemsize + design.itemsize) + 2 * y_dtype.itemsize
    check_memory(
        total * row_bytes,
        f"{where}: {total:,} rows of shape {tuple(row_shape or ())} (the .npy headers)",
    )
    return np.empty((total, *(row_shape or ())), dtype=x_dtype), np.empty(total, dtype=y_dtype)


def load_shards(
    paths: list[Path], row_shape: tuple[int, ...] | None = None, x_kinds: str = "biuf"
) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate x and y shards (paths as from :func:`shard_paths`) into (x, y of shape (N,)).

    Row counts come from the ``.npy`` headers first; each shard is then copied into one
    preallocated array, so the peak memory is the final arrays plus one shard's pages.

    Args:
        paths: ``[x-0, y-0, x-1, y-1, ...]``.
        row_shape: expected shape of one x row (e.g. ``(10,)``); checked per file when given.
        x_kinds: numpy dtype kinds x may have (``"iu"``: integer tokens).

    Returns:
        x (N x row shape) in the shards' common dtype and y (N,) (float).

    Raises:
        MatchoptError: a file that cannot be read (a pickle is refused unread), mismatched
            shapes, x or y not real numbers, no rows, or a score that is not finite.
    """
    x_paths, y_paths = paths[0::2], paths[1::2]
    counts, x_dtypes, y_dtypes = [], [], []
    for px, py in zip(x_paths, y_paths):
        n, row_shape, x_dtype, y_dtype = _check_shard_pair(px, py, row_shape, x_kinds)
        counts.append(n)
        x_dtypes.append(x_dtype)
        y_dtypes.append(y_dtype)
    total = sum(counts)
    if total == 0:
        raise MatchoptError(f"{x_paths[0].parent}: the shards of {x_paths[0].name} hold no rows")
    x_dtype, y_dtype = np.result_type(*x_dtypes), np.result_type(*y_dtypes)
    x_all, y_all = _allocate_rows(x_paths[0].parent, total, row_shape, x_dtype, y_dtype, x_kinds)
    start = 0
    for px, py, n in zip(x_paths, y_paths, counts):
        x_all[start : start + n] = _open_shard(px)
        y_all[start : start + n] = _open_shard(py).reshape(-1)
        bad = np.flatnonzero(~np.isfinite(y_all[start : start + n]))
        if len(bad):
            raise MatchoptError(f"{py}: y row {bad[0]} is {y_all[start + bad[0]]} (not finite)")
        start += n
    return x_all, y_all


def offline_mask(y_full: np.ndarray, max_percentile: float) -> np.ndarray:
    """Rows kept in the offline set: ``y <= percentile(y_full, max_percentile)`` (design-bench)."""
    return y_full <= np.percentile(y_full, max_percentile)


def offline_rows(
    y_full: np.ndarray, max_percentile: float, max_samples: int | None = None, seed: int = 0
) -> np.ndarray:
    """Indices (sorted) of the offline set: :func:`offline_mask`, then, if more than
    ``max_samples`` rows pass, ``max_samples`` of them drawn uniformly without replacement
    (``np.random.default_rng(seed)``)."""
    rows = np.flatnonzero(offline_mask(y_full, max_percentile))
    if max_samples is not None and len(rows) > max_samples:
        rng = np.random.default_rng(seed)
        rows = np.sort(rng.choice(rows, size=max_samples, replace=False))
    return rows
