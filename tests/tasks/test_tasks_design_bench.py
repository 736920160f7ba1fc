"""design-bench's tasks (matchopt.tasks.design_bench): the lookup oracle, TF-Bind-8 on its real
rows, TF-Bind-10, Superconductor and UTR on small fixtures in the design-bench layout.

The fixtures keep each task's real shard count (84 and 5 shards) with fewer rows per shard:
* tfbind10: 25,023 rows over 4,000 distinct 10-mers, each repeated about 6 times with different
  y, scattered over the shards (so duplicates fall in one shard and across shards); enough rows
  that more than 10,000 pass the median cut and the subsample rule applies.
* superconductor: 460 rows of sparse element counts with a learnable critical temperature; the
  oracle then draws all 460 rows (``min(2000, n)``) and holds out 230.
"""

import pickle

import numpy as np
import pytest
from task_fixtures import decode_codes, write_shards, write_superconductor, write_utr

from matchopt.errors import MatchoptError
from matchopt.evaluation import fit_accuracy
from matchopt.tasks import TASKS, load_task
from matchopt.tasks.design_bench import (
    UTR,
    RandomForestOracle,
    SequenceLookupOracle,
    Superconductor,
    TFBind8,
    TFBind10,
)
from matchopt.tasks.utr_oracle import (
    UTROracle,
)

TF10_ROWS = [300] * 83 + [123]


SC_ROWS = [100] * 4 + [60]


def decode(codes, length=10):
    """Tokens (n x length) of base-4 codes (n,)."""
    return decode_codes(codes, length)


@pytest.fixture(scope="module")
def tf10(tmp_path_factory):
    """(data dir, codes (N,), y (N,)) of a TF-Bind-10 fixture."""
    rng = np.random.default_rng(0)
    pool = rng.choice(4**10, size=4000, replace=False)
    codes = pool[rng.integers(0, len(pool), size=sum(TF10_ROWS))]
    y = rng.normal(size=len(codes)).astype(np.float32)
    root = tmp_path_factory.mktemp("tf10")
    write_shards(root, "tf_bind_10-pho4", "tf_bind_10", decode(codes), y, TF10_ROWS)
    return root, codes, y


def last_occurrence(codes, y):
    """Reference oracle: a dict overwritten row by row, in shard order."""
    table = {}
    for code, value in zip(codes.tolist(), y.tolist()):
        table[code] = value
    return table


def test_tfbind10_loads_with_the_offline_rule(tf10):
    root, codes, y = tf10
    task = load_task("tfbind10", root)
    assert TASKS["tfbind10"] is TFBind10
    assert len(task.offline) == TFBind10.offline_size == 10_000
    assert (y <= np.median(y)).sum() > 10_000  # so the subsample rule is exercised
    assert task.offline.y.max() <= np.median(y)
    # Every offline row is a row of the full data (sequence and its y together).
    pairs = set(zip(codes.tolist(), y.astype(np.float64).tolist()))
    offline_codes = task.offline.x @ (4 ** np.arange(9, -1, -1))
    assert set(zip(offline_codes.tolist(), task.offline.y.tolist())) <= pairs
    assert len(set(offline_codes.tolist())) < 10_000  # duplicated sequences can both be offline


def test_tfbind10_oracle_takes_the_last_occurrence_across_shards(tf10):
    root, codes, y = tf10
    task = load_task("tfbind10", root)
    table = last_occurrence(codes, y)
    unique = np.array(sorted(table))
    np.testing.assert_array_equal(task.score(decode(unique)), [table[c] for c in unique.tolist()])
    # The rule matters: for sequences whose first and last y differ, the first is not returned.
    first = {}
    for code, value in zip(codes.tolist(), y.tolist()):
        first.setdefault(code, value)
    differ = np.array([c for c in unique.tolist() if first[c] != table[c]])
    assert len(differ) > 3000
    assert not np.any(task.score(decode(differ)) == [first[c] for c in differ.tolist()])
    # A sequence seen in shard 0 and again in the last shard scores its last-shard value.
    shard = np.repeat(np.arange(len(TF10_ROWS)), TF10_ROWS)
    both = np.intersect1d(codes[shard == 0], codes[shard == 83])
    assert len(both) > 0
    last_rows = [np.flatnonzero(codes == c)[-1] for c in both]
    assert (shard[last_rows] == 83).all()
    np.testing.assert_array_equal(task.score(decode(both)), y[last_rows])


def test_lookup_oracle_is_the_same_when_built_in_small_chunks(tf10, monkeypatch):
    _, codes, y = tf10
    x = decode(codes)
    whole = SequenceLookupOracle(x, y, 4)
    monkeypatch.setattr(SequenceLookupOracle, "chunk_rows", 7)
    chunked = SequenceLookupOracle(x, y, 4)
    np.testing.assert_array_equal(whole.values, chunked.values)
    np.testing.assert_array_equal(whole.present, chunked.present)
    assert whole.present.sum() == len(np.unique(codes))


def test_tfbind10_normalizes_with_the_full_data(tf10):
    root, _, y = tf10
    task = load_task("tfbind10", root)
    assert (task.y_min, task.y_max) == (float(y.min()), float(y.max()))
    assert task.offline.y.max() < task.y_max  # the max is never offline (above the median)
    np.testing.assert_allclose(task.normalize([y.min(), y.max()]), [0.0, 1.0])


def test_tfbind10_offline_set_depends_only_on_the_recorded_seed(tf10):
    root, _, _ = tf10
    first, second = load_task("tfbind10", root), load_task("tfbind10", root)
    np.testing.assert_array_equal(first.offline.x, second.offline.x)
    np.testing.assert_array_equal(first.offline.y, second.offline.y)

    class OtherSeed(TFBind10):
        subsample_seed = 1

    other = OtherSeed(root)
    assert not np.array_equal(first.offline.y, other.offline.y)


def test_tfbind10_rejects_designs_outside_the_table(tf10):
    root, codes, _ = tf10
    task = load_task("tfbind10", root)
    seen = set(codes.tolist())
    absent = np.array([next(c for c in range(4**10) if c not in seen)])
    with pytest.raises(MatchoptError, match="not in the oracle"):
        task.score(decode(absent))


def test_tfbind10_missing_shards_are_named(tmp_path):
    x = np.zeros((3, 10), dtype=np.int32)
    write_shards(tmp_path, "tf_bind_10-pho4", "tf_bind_10", x, np.zeros(3, np.float32), [3])
    assert TFBind10.data_status(tmp_path) == "missing"
    with pytest.raises(MatchoptError, match="tf_bind_10"):
        load_task("tfbind10", tmp_path)


@pytest.fixture
def sc_dir(tmp_path):
    """Data dir with a Superconductor fixture; returns (dir, x, y)."""
    x, y = write_superconductor(tmp_path, SC_ROWS)
    return tmp_path, x, y


def test_superconductor_loads_scores_and_normalizes(sc_dir):
    root, x, y = sc_dir
    task = load_task("superconductor", root)
    assert TASKS["superconductor"] is Superconductor
    assert len(task.offline) == (y <= np.percentile(y, 80)).sum()
    assert task.offline.x.dtype == np.float32 and task.offline.x.shape[1] == 86
    assert (task.y_min, task.y_max) == (float(y.min()), float(y.max()))
    assert task.offline.y.max() < task.y_max
    assert task.oracle_val_r2 > 0.5 and task.oracle_val_spearman > 0.5
    scores = task.score(x[:50])
    assert scores.shape == (50,) and scores.dtype == np.float64
    assert np.corrcoef(scores, y[:50])[0, 1] > 0.8
    with pytest.raises(MatchoptError, match="shape"):
        task.score(np.zeros((2, 85)))


def test_superconductor_fixture_has_the_real_shards_layout_and_splits(sc_dir):
    """The fixture's files are the real shards' (names, dtypes, shapes); the offline set is
    exactly the rows at or below the 80th percentile; the oracle's stated accuracy is measured
    on drawn rows it was not trained on."""
    root, x, y = sc_dir
    names = sorted(p.name for p in (root / "superconductor").iterdir())
    assert names == sorted(f"superconductor-{a}-{k}.npy" for a in "xy" for k in range(5))
    shard_x = np.load(root / "superconductor" / "superconductor-x-4.npy")
    shard_y = np.load(root / "superconductor" / "superconductor-y-4.npy")
    assert (shard_x.dtype, shard_x.shape) == (np.float32, (60, 86))
    assert (shard_y.dtype, shard_y.shape) == (np.float32, (60, 1))
    task = load_task("superconductor", root)
    kept = y <= np.percentile(y, 80)
    np.testing.assert_array_equal(task.offline.x, x[kept])
    np.testing.assert_array_equal(task.offline.y, y[kept])
    train, val = RandomForestOracle(seed=Superconductor.oracle_seed).split(len(y))
    assert (len(train), len(val)) == (230, 230) and not set(train) & set(val)
    measured = fit_accuracy(y[val], task.score(x[val]))
    assert (task.oracle_val_r2, task.oracle_val_spearman) == (measured["r2"], measured["spearman"])
    # On its own training rows a deep forest is far closer than on the held-out ones.
    assert fit_accuracy(y[train], task.score(x[train]))["r2"] > max(0.9, task.oracle_val_r2)


def test_superconductor_scores_a_design_far_outside_the_data_within_its_space(sc_dir):
    # Normalized by a small std, a large value overflows float32, which sklearn casts to: clipped
    # first. Beyond the task's space (Task.domain) a design is not scored at all.
    root, x, _ = sc_dir
    task = load_task("superconductor", root)
    low, high = task.domain()
    far = x[:2].copy()
    far[0], far[1] = (high + x.max(axis=0)) / 2, (low + x.min(axis=0)) / 2  # 5,000 spans out
    assert np.isfinite(task.score(far)).all()
    far[:, 0] = [3e38, -3e38]
    with pytest.raises(MatchoptError, match="coordinate 0 is 3e\\+38, outside the space"):
        task.score(far)


def test_superconductor_same_seed_same_oracle(sc_dir):
    root, x, _ = sc_dir
    first, second = load_task("superconductor", root), load_task("superconductor", root)
    np.testing.assert_array_equal(second.score(x[:64]), first.score(x[:64]))
    assert second.oracle_val_r2 == first.oracle_val_r2


def test_superconductor_never_reads_a_pickle_from_the_data_folder(sc_dir, tmp_path):
    """A crafted cache file (the name older versions wrote) never runs: no marker appears."""
    root, x, _ = sc_dir
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    for name in ("matchopt-oracle-0-v1.pkl", "matchopt-oracle-0-v2.pkl"):
        (root / "superconductor" / name).write_bytes(pickle.dumps(Payload()))
    task = load_task("superconductor", root)
    assert np.isfinite(task.score(x[:3])).all()
    assert not marker.exists()


def test_lookup_oracle_takes_the_last_occurrence():
    x = np.array([[0, 1], [1, 0], [0, 1], [3, 3]])
    y = np.array([1.0, 2.0, 3.0, 4.0])
    oracle = SequenceLookupOracle(x, y, vocab_size=4)
    np.testing.assert_array_equal(oracle(np.array([[0, 1], [1, 0], [3, 3]])), [3.0, 2.0, 4.0])
    with pytest.raises(MatchoptError, match="not in the oracle"):
        oracle(np.array([[2, 2]]))


def test_tfbind8_oracle_on_real_rows(data_dir):
    task = load_task("tfbind8", data_dir)
    assert len(task.offline) == 32_898 == TFBind8.offline_size
    assert (task.y_min, task.y_max) == (0.0, 1.0)
    x = np.load(data_dir / "tf_bind_8-SIX6_REF_R1" / "tf_bind_8-x-0.npy")
    y = np.load(data_dir / "tf_bind_8-SIX6_REF_R1" / "tf_bind_8-y-0.npy").reshape(-1)
    rows = np.random.default_rng(0).choice(len(x), size=2000, replace=False)
    np.testing.assert_array_equal(task.score(x[rows].astype(np.int64)), y[rows].astype(np.float64))
    assert task.offline.y.max() <= np.percentile(y, 50)
    assert TFBind8.data_status(data_dir) == "present"


def test_missing_data_names_the_files(tmp_path):
    with pytest.raises(MatchoptError, match="tf_bind_8-x-0.npy"):
        load_task("tfbind8", tmp_path)
    assert TFBind8.data_status(tmp_path) == "missing"


def test_the_task_follows_design_benchs_recipe_with_a_cap(tmp_path):
    x, y = write_utr(tmp_path, n_rows=280)
    task = load_task("utr", tmp_path)
    assert len(task.offline) == 140  # the lower half; the cap (10,000) does not bind here
    assert task.offline.y.max() <= np.median(y)
    assert (task.y_min, task.y_max) == (float(y.min()), float(y.max()))
    assert task.oracle_accuracy["rows"] == 28_000
    np.testing.assert_array_equal(task.score(x[:5]), UTROracle()(x[:5]))
    assert UTR.max_samples == UTR.offline_size == 10_000
