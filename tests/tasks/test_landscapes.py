"""Protein landscape tasks: exact lookup of measured variants, the minimum for the others, the two
offline protocols, and clear errors for missing or malformed files."""

import os
from pathlib import Path

import numpy as np
import pytest
from task_fixtures import write_landscape

from matchopt.errors import MatchoptError
from matchopt.tasks import TASKS, load_task
from matchopt.tasks.landscapes import AMINO_ACIDS, LANDSCAPE_TASKS

NAMES = [cls.name for cls in LANDSCAPE_TASKS]
REAL = os.environ.get("MATCHOPT_DATA_DIR")


def tokens(sequence: str) -> list[int]:
    return [AMINO_ACIDS.index(letter) for letter in sequence]


def test_six_variants_are_registered_and_in_the_dev_suite():
    from matchopt.names import SUITES

    assert NAMES == ["phoq", "phoq-screen", "tev", "tev-screen", "pard3", "pard3-screen"]
    assert set(NAMES) <= set(SUITES["dev"]) and set(NAMES) <= set(TASKS)


@pytest.mark.parametrize("name", ["tev", "pard3-screen"])
def test_measured_variants_score_their_value_and_unmeasured_ones_the_minimum(tmp_path, name):
    sequences, fitness = write_landscape(
        tmp_path, TASKS[name], n_rows=2_400 if name == "tev" else 1_200
    )
    task = load_task(name, tmp_path)
    x = np.array([tokens(s) for s in sequences[:5]])
    np.testing.assert_allclose(task.score(x), fitness[:5])
    assert task.measured(x).all()
    known = set(sequences)
    sites = TASKS[name].space.shape[0]
    unmeasured = next(
        s
        for s in (
            "".join(p) for p in zip(*[AMINO_ACIDS[i:] + AMINO_ACIDS[:i] for i in range(sites)])
        )
        if s not in known
    )
    missing = np.array([tokens(unmeasured)])
    assert not task.measured(missing).any()
    assert task.score(missing)[0] == min(fitness) == task.y_min


def test_the_two_protocols_draw_their_offline_tables(tmp_path):
    sequences, fitness = write_landscape(tmp_path, TASKS["tev"], n_rows=2_400)
    screen, recipe = load_task("tev-screen", tmp_path), load_task("tev", tmp_path)
    assert len(screen.offline) == 2_000  # uniform draw of the measured variants
    assert screen.offline.y.max() > np.median(fitness)
    median = np.percentile(fitness, 50)
    assert len(recipe.offline) == int(np.sum(np.asarray(fitness) <= median))
    assert recipe.offline.y.max() <= median
    # Fixed draw: the same table every load.
    np.testing.assert_array_equal(load_task("tev-screen", tmp_path).offline.x, screen.offline.x)


def test_phoq_recipe_keeps_rows_up_to_the_90th_percentile(tmp_path):
    sequences, fitness = write_landscape(tmp_path, TASKS["phoq"], n_rows=2_400)
    task = load_task("phoq", tmp_path)
    assert task.offline.y.max() == pytest.approx(np.percentile(fitness, 90), rel=0.05)
    assert len(np.unique(task.offline.y)) > 1


def test_files_are_found_beside_the_design_bench_folder(tmp_path):
    write_landscape(tmp_path, TASKS["pard3"], n_rows=1_200)
    design_bench = tmp_path / "design_bench"
    design_bench.mkdir()
    assert TASKS["pard3"].data_status(design_bench) == "present"
    assert len(load_task("pard3", design_bench).offline) > 0


def test_a_missing_file_names_the_file_and_the_folders(tmp_path):
    with pytest.raises(MatchoptError, match=r"Lite2020_ParD3\.csv not found in .*landscapes"):
        load_task("pard3", tmp_path)


@pytest.mark.parametrize(
    "row, problem",
    [("ABCX,A,B,C,X,1.0", "is not 4 letters"), ("ACDE,A,C,D,E,nan", "fitness")],
)
def test_malformed_rows_are_refused_with_the_row(tmp_path, row, problem):
    write_landscape(tmp_path, TASKS["tev"], n_rows=2_400)
    path = Path(tmp_path) / "landscapes" / TASKS["tev"].file_name
    path.write_text(path.read_text() + row + "\n")
    with pytest.raises(MatchoptError, match=f"row 2402.*{problem}"):
        load_task("tev", tmp_path)


@pytest.mark.skipif(not REAL, reason="needs the real landscapes (MATCHOPT_DATA_DIR)")
@pytest.mark.parametrize(
    "name, variant, value",
    [
        ("phoq", "WIPY", 0.0),
        ("phoq", "SSGD", 0.036360625),
        ("tev", "IEMG", -0.076679446),
        ("pard3", "AAA", 0.633183143),
        ("pard3", "AAC", 0.514501478),
    ],
)
def test_real_landscapes_look_up_known_variants(name, variant, value):
    cls = TASKS[name]
    if cls.data_status(REAL) != "present":
        pytest.skip(f"{cls.file_name} not beside {REAL}")
    task = load_task(name, REAL)
    assert task.score(np.array([tokens(variant)]))[0] == pytest.approx(value)
    assert len(task.offline) == cls.offline_size
    assert len(load_task(f"{name}-screen", REAL).offline) == TASKS[f"{name}-screen"].offline_size
