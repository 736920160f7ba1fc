"""design-bench's shard files read and checked (matchopt.tasks.shards): every bad file named,
refused unread where reading it would hang or fill the memory; the offline rows' subsample."""

import os
import re

import numpy as np
import pytest
from task_fixtures import write_shards

from matchopt.errors import MatchoptError
from matchopt.tasks import load_task
from matchopt.tasks.design_bench import (
    TFBind10,
    load_shards,
    offline_rows,
)


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_shard_that_is_not_a_regular_file_is_refused_unread(tmp_path, kind):
    x, y = tmp_path / "a-x-0.npy", tmp_path / "a-y-0.npy"
    np.save(x, np.zeros((4, 8), np.int32))
    if kind == "fifo":
        os.mkfifo(y)  # np.load would wait for a writer forever
    else:
        y.symlink_to("/dev/zero")
    with pytest.raises(MatchoptError, match="a-y-0.npy: not a regular file"):
        load_shards([x, y], (8,))


def test_load_shards_checks_the_files(tmp_path):
    paths = [tmp_path / name for name in ("a-x-0.npy", "a-y-0.npy", "a-x-1.npy", "a-y-1.npy")]
    np.save(paths[0], np.zeros((4, 10), np.int32))
    np.save(paths[1], np.arange(4, dtype=np.float32).reshape(-1, 1))
    np.save(paths[2], np.ones((2, 10), np.int32))
    np.save(paths[3], np.arange(4, 6, dtype=np.float32).reshape(-1, 1))
    x, y = load_shards(paths, (10,))
    assert x.shape == (6, 10) and x.dtype == np.int32
    np.testing.assert_array_equal(y, np.arange(6))
    with pytest.raises(MatchoptError, match="a-x-0.npy.*expected rows of shape"):
        load_shards(paths, (8,))
    np.save(paths[3], np.zeros((3, 1), np.float32))
    with pytest.raises(MatchoptError, match="a-x-1.npy"):
        load_shards(paths)
    paths[3].write_text("version https://git-lfs.github.com/spec/v1\n")
    with pytest.raises(MatchoptError, match="cannot read design-bench file .*a-y-1.npy"):
        load_shards(paths)


def test_shards_declaring_more_rows_than_memory_holds_are_refused_unread(tmp_path, monkeypatch):
    # Headers of 150 M rows: sparse files, so the test writes almost nothing.
    x, y = tmp_path / "a-x-0.npy", tmp_path / "a-y-0.npy"
    np.lib.format.open_memmap(x, "w+", np.int8, (150_000_000, 8)).flush()
    np.lib.format.open_memmap(y, "w+", np.float32, (150_000_000, 1)).flush()
    monkeypatch.setenv("MATCHOPT_MEMORY_GIB", "1")
    with pytest.raises(
        MatchoptError, match=r"150,000,000 rows .* needs about 6\.7 GiB .* 1\.0 GiB"
    ):
        load_shards([x, y], (8,))
    # Tokens stored as int8 become int64 designs (8 times the bytes): counted as such, not at
    # the file's size (1.2 GiB of tokens here).
    monkeypatch.setenv("MATCHOPT_MEMORY_GIB", "8")
    with pytest.raises(MatchoptError, match=r"needs about 11\.2 GiB .* 8\.0 GiB"):
        load_shards([x, y], (8,), "iu")
    # A header whose rows the file does not hold is refused too.
    with open(y, "r+b") as handle:
        handle.truncate(1000)
    with pytest.raises(MatchoptError, match="cannot read design-bench file .*a-y-0.npy"):
        load_shards([x, y], (8,))


@pytest.mark.parametrize(
    ("axis", "values", "dtype"),
    [
        ("x", np.array([["a"] * 10] * 4), "<U1"),
        ("y", np.array([[b"1.5"]] * 4), "|S3"),
        ("y", np.arange(4).reshape(-1, 1) + 1j, "complex128"),
        ("x", np.zeros((4, 10), "datetime64[s]"), "datetime64[s]"),
    ],
)
def test_load_shards_refuses_values_that_are_not_real_numbers(tmp_path, axis, values, dtype):
    x, y = tmp_path / "a-x-0.npy", tmp_path / "a-y-0.npy"
    np.save(x, np.zeros((4, 10), np.int32))
    np.save(y, np.arange(4, dtype=np.float32).reshape(-1, 1))
    np.save(x if axis == "x" else y, values)
    bad = x if axis == "x" else y
    words = re.escape(f"{bad.name}: {axis} has dtype {dtype}; expected real numbers")
    with pytest.raises(MatchoptError, match=words):
        load_shards([x, y])
    # Object arrays are not unpickled: refused unread.
    np.save(y, np.array([[1.0], [2.0], [None], [4.0]], dtype=object), allow_pickle=True)
    with pytest.raises(MatchoptError, match="cannot read design-bench file .*a-y-0.npy"):
        load_shards([x, y])


def test_offline_rows_subsamples_only_above_max_samples():
    y = np.arange(100.0)
    np.testing.assert_array_equal(offline_rows(y, 50), np.arange(50))
    np.testing.assert_array_equal(offline_rows(y, 50, max_samples=80), np.arange(50))
    rows = offline_rows(y, 50, max_samples=10, seed=3)
    assert len(set(rows.tolist())) == 10 and rows.max() < 50
    np.testing.assert_array_equal(rows, np.sort(rows))
    np.testing.assert_array_equal(rows, offline_rows(y, 50, max_samples=10, seed=3))


def test_token_shards_that_are_not_integers_are_named(tmp_path):
    from task_fixtures import write_sequences

    write_sequences(tmp_path, TFBind10, 400)
    shard = tmp_path / TFBind10.folder / f"{TFBind10.prefix}-x-3.npy"
    np.save(shard, np.load(shard).astype(np.float32))
    with pytest.raises(MatchoptError, match="x-3.npy: x has dtype float32; expected integer"):
        load_task("tfbind10", tmp_path)


def test_shards_with_a_nan_score_or_no_rows_are_named(tmp_path):
    x, y = np.zeros((5, 86), np.float32), np.arange(5, dtype=np.float32)
    y[3] = np.nan
    write_shards(tmp_path, "superconductor", "superconductor", x, y, [1, 1, 1, 1, 1])
    with pytest.raises(MatchoptError, match=r"superconductor-y-3.npy: y row 0 is nan"):
        load_task("superconductor", tmp_path)
    empty = tmp_path / "empty"
    write_shards(empty, "superconductor", "superconductor", x[:0], y[:0], [0] * 5)
    with pytest.raises(MatchoptError, match="hold no rows"):
        load_task("superconductor", empty)
