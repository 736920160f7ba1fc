"""Model files (matchopt.state): methods round-trip, clone() works, crafted files never run."""

from __future__ import annotations

import io
import json
import pickle

import numpy as np
import pytest
import torch
from sklearn.base import clone
from test_tabular import assert_one_line_error, run_cli

from matchopt.errors import MatchoptError
from matchopt.methods import METHODS, Method, make_method
from matchopt.methods.bdi import BDI
from matchopt.state import FORMAT, FORMAT_VERSION, StateError, load_state, state_bytes
from matchopt.tasks import load_task


@pytest.fixture(scope="module")
def potts():
    return load_task("potts").offline


@pytest.mark.parametrize("name", sorted(METHODS))
def test_every_method_saves_and_loads_to_the_same_proposals(name, potts, tmp_path):
    method = make_method(name, "quick", seed=3).fit(potts)
    path = method.save(tmp_path / "method.pt")
    loaded = Method.load(path)
    assert type(loaded) is type(method) and loaded.config == method.config
    np.testing.assert_array_equal(loaded.propose(12), method.propose(12))
    assert loaded.fit_report() == method.fit_report()
    if method.has_surrogate:
        designs = potts.x[:5]
        np.testing.assert_array_equal(loaded.predict(designs), method.predict(designs))


def test_validation_history_survives_a_round_trip(potts, tmp_path):
    method = make_method("matchopt", "validated-quick", seed=1).fit(potts)
    loaded = Method.load(method.save(tmp_path / "m.pt"))
    assert loaded.validator_.history == method.validator_.history
    assert loaded.fit_report()["selected_epoch"] == method.selected_epoch_


def test_load_refuses_another_class_and_an_unfitted_method(potts, tmp_path):
    path = make_method("random", "quick").fit(potts).save(tmp_path / "r.pt")
    with pytest.raises(MatchoptError, match="holds a RandomDesigns, not a fitted BDI"):
        BDI.load(path)
    with pytest.raises(MatchoptError, match="must be fitted"):
        make_method("random").save(tmp_path / "unfitted.pt")


@pytest.mark.parametrize("name", ["matchopt", "ga", "bonet"])
def test_scikit_learn_clone_and_set_params(name):
    method = make_method(name, "quick", seed=4)
    copy = clone(method)
    assert type(copy) is type(method) and copy.seed == 4 and copy.config == method.config
    assert copy.config is not method.config
    copy.set_params(seed=5, config__epochs=2)
    assert copy.seed == 5 and copy.config_.epochs == 2 and method.config_.epochs != 2
    assert method.get_params()["config__epochs"] == method.config_.epochs
    with pytest.raises(MatchoptError, match="no parameter 'epochs'"):
        copy.set_params(epochs=3)
    with pytest.raises(MatchoptError, match="epochs"):
        copy.set_params(config__epochs=-1)
    with pytest.raises(MatchoptError, match="seed"):
        copy.set_params(seed=-1)


# --- Crafted files --------------------------------------------------------------------------------


class Payload:
    """Unpickling this object would create the marker file."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def file_with_header(header: dict, tensors: dict | None = None) -> bytes:
    buffer = io.BytesIO()
    torch.save({"header": json.dumps(header), "tensors": tensors or {}}, buffer)
    return buffer.getvalue()


def header(tree, kind="method") -> dict:
    return {"format": FORMAT, "format_version": FORMAT_VERSION, "kind": kind, "tree": tree}


def crafted_files(marker) -> dict[str, bytes]:
    """Files an attacker could hand in, each with what the error must say."""
    buffer = io.BytesIO()
    torch.save({"kind": "table-optimizer", "optimizer": Payload(marker)}, buffer)
    return {
        "torch pickle": buffer.getvalue(),
        "plain pickle": pickle.dumps(Payload(marker)),
        "foreign class": file_with_header(
            header({"$t": "object", "class": "subprocess.Popen", "attrs": {}})
        ),
        "foreign function": file_with_header(header({"$t": "function", "name": "builtins.exec"})),
        "foreign module": file_with_header(
            header({"$t": "module", "class": "os.system", "attrs": {}})
        ),
        "dunder attribute": file_with_header(
            header(
                {
                    "$t": "object",
                    "class": "matchopt.methods.random_designs.RandomDesigns",
                    "attrs": {"__class__": None},
                }
            )
        ),
        "object array": file_with_header(
            header({"$t": "ndarray", "key": "t0", "dtype": "|O", "shape": [1]}),
            {"t0": torch.zeros(8, dtype=torch.uint8)},
        ),
        "newer format": file_with_header({**header(None), "format_version": FORMAT_VERSION + 1}),
        "truncated": state_bytes([1, 2, 3], "method")[:50],
    }


def test_crafted_files_fail_before_anything_runs(tmp_path):
    marker = tmp_path / "pwned"
    for what, data in crafted_files(marker).items():
        with pytest.raises(StateError) as err:
            load_state(data, "method", what)
        message = str(err.value)
        assert "\n" not in message and what in message, (what, message)
        assert not marker.exists(), what
    with pytest.raises(StateError, match="newer than this matchopt"):
        load_state(crafted_files(marker)["newer format"], "method")


def test_propose_model_of_a_crafted_file_is_one_error_line(capsys, tmp_path):
    marker = tmp_path / "pwned"
    for what, data in crafted_files(marker).items():
        path = tmp_path / "model.pt"
        path.write_bytes(data)
        code, _, err = run_cli(capsys, "propose", "--model", path, "--out", tmp_path / "o.csv")
        assert_one_line_error(code, err, "model.pt", "model")
        assert not marker.exists(), what
        assert not (tmp_path / "o.csv").exists()


def test_a_method_file_is_not_a_table_model(capsys, potts, tmp_path):
    path = make_method("random", "quick").fit(potts).save(tmp_path / "method.pt")
    code, _, err = run_cli(capsys, "propose", "--model", path, "--out", tmp_path / "o.csv")
    assert_one_line_error(code, err, "method.pt", "holds a 'method' model, not a 'table-optimizer'")


def test_shared_objects_stay_shared():
    data = np.arange(6.0)
    tree = {"a": data, "b": data, "weights": torch.nn.Linear(2, 3)}
    loaded = load_state(state_bytes(tree, "method"), "method")
    assert loaded["a"] is loaded["b"]
    np.testing.assert_array_equal(loaded["a"], data)
    torch.testing.assert_close(loaded["weights"].weight, tree["weights"].weight)


def test_unsavable_objects_are_named():
    with pytest.raises(StateError, match=r"cannot save dict\['f'\]: objects of type"):
        state_bytes({"f": io.BytesIO()}, "method")
    with pytest.raises(StateError, match="array of Python objects"):
        state_bytes({"x": np.array([object()])}, "method")
