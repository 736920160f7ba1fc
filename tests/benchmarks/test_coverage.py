"""benchmarks/coverage.py: a task's offline data as a user's table, and back."""

import numpy as np
import pytest
from benchmark_scripts import load_benchmark
from task_fixtures import make_task

from matchopt.tabular.schema import TableSchema


@pytest.fixture(scope="module")
def coverage():
    return load_benchmark("coverage", "coverage_bench")


@pytest.mark.parametrize("name", ["tfbind8", "hartmann6"])
def test_task_table_round_trips_to_the_same_designs(coverage, tmp_path, name):
    task = make_task(name, tmp_path)
    frame, to_designs = coverage.task_table(task)
    assert len(frame) == len(task.offline)
    np.testing.assert_array_equal(frame["y"].to_numpy(), task.offline.y)
    designs = to_designs(frame)
    assert designs.dtype == task.offline.x.dtype
    np.testing.assert_array_equal(designs, task.offline.x)
    # The optimizer reads the table as the same designs (token i is the alphabet's letter i).
    options = coverage.table_options(task)
    schema = TableSchema.infer(frame, "y", **options)
    assert schema.space == task.space
    np.testing.assert_array_equal(schema.encode(frame, "table"), task.offline.x)
    assert options["sequence"] == ("seq" if task.space.is_discrete else None)


def test_proposals_of_a_large_vocabulary_round_trip(coverage, tmp_path):
    task = make_task("ehrlich-20x64", tmp_path)
    designs = np.random.default_rng(0).integers(0, 20, size=(5, 64))
    _, to_designs = coverage.task_table(task)
    np.testing.assert_array_equal(to_designs(coverage.designs_frame(task, designs)), designs)
