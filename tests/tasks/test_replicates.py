"""Replicate-noise tasks: the assay's statistics, the offline rows, the noiseless oracle."""

import numpy as np
import pytest
from task_fixtures import write_sequences

from matchopt.tasks import TASKS, load_task
from matchopt.tasks.replicates import PottsReplicates, ReplicateAssay
from matchopt.tasks.synthetic import ChainPotts


@pytest.fixture(scope="module")
def potts():
    return PottsReplicates()


def test_measurements_look_like_a_noisy_saturated_assay(potts):
    stats = potts.assay_statistics
    # The design explains a minority of the variance; replicates disagree by about a quarter
    # of the range; a tenth of the values sit at the floor or the ceiling.
    assert 0.1 < stats["design_share_of_variance"] < 0.2
    assert 0.2 < stats["replicate_difference_over_range"] < 0.3
    assert 0.09 < stats["saturated_share"] < 0.11


def test_offline_rows_are_replicates_of_few_designs(potts):
    designs, counts = np.unique(potts.offline.x, axis=0, return_counts=True)
    assert len(designs) == ReplicateAssay().max_designs
    assert counts.min() >= 5 and counts.max() <= 8
    assert len(potts.offline) == potts.offline_size == counts.sum()
    # Clipped at both ends: several rows share the floor and the ceiling.
    y = potts.offline.y
    assert (y == y.min()).sum() > 10 and (y == y.max()).sum() > 10
    # Two replicates of one design differ.
    first = np.flatnonzero((potts.offline.x == designs[0]).all(axis=1))
    assert np.ptp(y[first]) > 0


def test_the_oracle_is_the_noiseless_function(potts):
    x = potts.offline.x[:50]
    np.testing.assert_array_equal(potts.score(x), ChainPotts().function(x))
    full = ChainPotts()
    assert (potts.y_min, potts.y_max) == (full.y_min, full.y_max)


def test_the_offline_best_is_the_best_measured_designs_true_value(potts):
    true = potts.normalize(potts.score(np.unique(potts.offline.x, axis=0)))
    assert potts.offline_best() == pytest.approx(true.max())
    # The luckiest replicate overstates it: methods must beat the truth, not the noise.
    assert potts.normalize(potts.offline.y.max()) > potts.offline_best()


def test_a_task_is_the_same_on_every_load(potts):
    again = PottsReplicates()
    np.testing.assert_array_equal(again.offline.x, potts.offline.x)
    np.testing.assert_array_equal(again.offline.y, potts.offline.y)


def test_the_assay_measures_each_design_five_to_eight_times():
    f = np.linspace(0.0, 1.0, 200)
    design, measured = ReplicateAssay(seed=3).measure(f)
    counts = np.bincount(design, minlength=len(f))
    assert counts.min() >= 5 and counts.max() <= 8 and set(np.unique(counts)) == {5, 6, 7, 8}
    low, high = np.percentile(measured, [1, 99])
    assert measured.min() == low or (measured == measured.min()).sum() > 1
    assert (measured == measured.max()).sum() == pytest.approx(0.05 * len(measured), abs=2)
    assert (measured == measured.min()).sum() == pytest.approx(0.05 * len(measured), abs=2)
    assert high <= measured.max()


def test_tfbind8_replicates_reads_tfbind8s_files_and_scores_by_lookup(tmp_path):
    write_sequences(tmp_path, TASKS["tfbind8"], n_rows=400)
    task = load_task("tfbind8-replicates", tmp_path)
    plain = load_task("tfbind8", tmp_path)
    x = np.unique(task.offline.x, axis=0)
    np.testing.assert_array_equal(task.score(x), plain.score(x))
    assert task.offline_best() == pytest.approx(task.normalize(task.score(x)).max())
