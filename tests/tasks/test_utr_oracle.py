"""The UTR task's oracle (matchopt.tasks.utr_oracle): the shipped network on sample designs, its
files checked, its recipe deterministic."""

import dataclasses
import hashlib
import json
import os
import shutil

import numpy as np
import pytest

from matchopt.errors import MatchoptError
from matchopt.tasks import load_task
from matchopt.tasks.utr_oracle import (
    HEADER_FILE,
    WEIGHTS_FILE,
    OracleRecipe,
    UTROracle,
    _package_folder,
    predict,
    train_network,
)

BASES = "ACGT"


def encode(sequence: str) -> np.ndarray:
    return np.array([BASES.index(c) for c in sequence], dtype=np.int32)


@pytest.fixture(scope="module")
def oracle():
    return UTROracle()


def test_the_shipped_oracle_states_its_recipe_and_held_out_accuracy(oracle):
    header = oracle.header
    assert header["recipe"] == dataclasses.asdict(OracleRecipe())
    assert header["rows"] == 280_000 and header["held_out"]["rows"] == 28_000
    # Sample et al. report R^2 0.93 on their high-read test set; a random 10% of all rows
    # (noisier, low-read UTRs included) is harder.
    assert header["held_out"]["r2"] > 0.7 and header["held_out"]["spearman"] > 0.8
    assert header["command"].startswith("python benchmarks/fit_utr_oracle.py")


def test_an_upstream_start_codon_lowers_the_predicted_load(oracle):
    # Sample et al.'s strongest finding: an out-of-frame upstream ATG cuts ribosome load.
    rng = np.random.default_rng(0)
    plain = rng.choice(np.array([0, 1, 2]), size=(64, 50)).astype(np.int32)  # no T: no ATG
    with_atg = plain.copy()
    with_atg[:, 30:33] = encode("ATG")
    drop = oracle(plain) - oracle(with_atg)
    assert np.mean(drop > 0) > 0.9 and np.median(drop) > 0.5


def test_predictions_follow_the_measured_loads(oracle, data_dir):
    task = load_task("utr", data_dir)
    rows = np.random.default_rng(1).choice(len(task.offline), size=2_000, replace=False)
    predicted, measured = oracle(task.offline.x[rows]), task.offline.y[rows]
    assert np.corrcoef(predicted, measured)[0, 1] > 0.6
    assert np.all((predicted > -2) & (predicted < 14))


def copy_of_the_oracle(tmp_path):
    folder = tmp_path / "oracle"
    shutil.copytree(_package_folder(), folder)
    return folder


def test_a_changed_weights_file_is_refused(tmp_path):
    folder = copy_of_the_oracle(tmp_path)
    data = bytearray((folder / WEIGHTS_FILE).read_bytes())
    data[-1] ^= 1
    (folder / WEIGHTS_FILE).write_bytes(bytes(data))
    with pytest.raises(MatchoptError, match="not those of the oracle matchopt ships"):
        UTROracle(folder)
    (folder / HEADER_FILE).write_text("[1, 2]")
    with pytest.raises(MatchoptError, match="JSON object"):
        UTROracle(folder)
    (folder / HEADER_FILE).unlink()
    with pytest.raises(MatchoptError, match="cannot read"):
        UTROracle(folder)


@pytest.mark.parametrize(
    "edit",
    ["y_mean x10", "y_std 0", "y_std negated", "lr", "weights and their sha256 rewritten"],
)
def test_an_edited_oracle_is_refused_whatever_digest_its_files_say(tmp_path, edit):
    """``oracle.json``'s numbers change every score (x10: p100 2.09; 0: a constant; negated: the
    ranking reversed); the digest that checks them is in the code, not in the files."""
    folder = copy_of_the_oracle(tmp_path)
    header = json.loads((folder / HEADER_FILE).read_text())
    if edit == "y_mean x10":
        header["y_mean"] *= 10
    elif edit == "y_std 0":
        header["y_std"] = 0.0
    elif edit == "y_std negated":
        header["y_std"] = -header["y_std"]
    elif edit == "lr":
        header["recipe"]["lr"] = 1e-2
    else:
        data = bytearray((folder / WEIGHTS_FILE).read_bytes())
        data[-1] ^= 1
        (folder / WEIGHTS_FILE).write_bytes(bytes(data))
        header["weights_sha256"] = hashlib.sha256(bytes(data)).hexdigest()
    (folder / HEADER_FILE).write_text(json.dumps(header))
    with pytest.raises(MatchoptError, match="not those of the oracle matchopt ships"):
        UTROracle(folder)
    assert UTROracle(copy_of_the_oracle(tmp_path / "again")).y_std > 0  # the real one loads


@pytest.mark.parametrize("target", ["/dev/zero", "/proc/self/pagemap"])
def test_weights_that_are_a_link_to_a_device_or_proc_file_are_refused_unread(tmp_path, target):
    if not os.path.exists(target):
        pytest.skip(f"no {target}")
    folder = copy_of_the_oracle(tmp_path)
    (folder / WEIGHTS_FILE).unlink()
    (folder / WEIGHTS_FILE).symlink_to(target)
    with pytest.raises(
        MatchoptError, match="cannot read the UTR oracle .*(not a regular|gives more)"
    ):
        UTROracle(folder)


def test_the_recipe_is_deterministic_for_its_seed():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 4, size=(300, 50))
    y = (x[:, :10] == 0).sum(axis=1) + 0.3 * rng.normal(size=300)
    recipe = OracleRecipe(filters=16, dense=8, epochs=5, batch_size=32, dropout=0.0)
    first = train_network(x, y, recipe, progress=False)
    second = train_network(x, y, recipe, progress=False)
    np.testing.assert_array_equal(
        predict(first[0], x, first[1], first[2]), predict(second[0], x, second[1], second[2])
    )
    fitted = predict(first[0], x, first[1], first[2])
    assert np.corrcoef(fitted, y)[0, 1] > 0.6
