"""Model files (matchopt.state): methods round-trip, clone() works, crafted files never run."""

from __future__ import annotations

import io
import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.base import clone
from table_helpers import assert_one_line_error, numeric_frame, run_cli

import matchopt.state as state
from matchopt.errors import MatchoptError
from matchopt.methods import METHODS, Method, make_method
from matchopt.methods.base import has_surrogate
from matchopt.methods.bdi import BDI
from matchopt.state import FORMAT, FORMAT_VERSION, StateError, load_state, state_bytes
from matchopt.tabular import TableOptimizer
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
    if has_surrogate(method):
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
    """A model file (safetensors, as matchopt writes) holding ``header`` and ``tensors``."""
    return save_file_bytes(json.dumps(header), tensors or {})


def parts(data: bytes) -> tuple[str, dict]:
    """The header text and tensors of a model file, read with no size limit (to craft files)."""
    from safetensors.torch import load

    length = int.from_bytes(data[:8], "little")
    return json.loads(data[8 : 8 + length])["__metadata__"]["matchopt"], load(data)


def save_file_bytes(header_text: str, tensors: dict) -> bytes:
    from safetensors.torch import save

    return save({k: t.contiguous() for k, t in tensors.items()}, metadata={"matchopt": header_text})


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
    # Loading could not check its tensors against its class (issue 27): refused when saving.
    with pytest.raises(StateError, match=r"cannot save dict\['conv'\]: .* Conv1d is not among"):
        state_bytes({"conv": torch.nn.Conv1d(1, 1, 1)}, "method")


# --- Crafted edits of a real model file (issue 27) ------------------------------------------------
# Each edit gave a traceback (or nothing: a file that propose used as it was) before model files
# were checked against their classes; now `propose --model` prints one error line naming the
# file and the problem, before anything else, and exits with status 2.


@pytest.fixture(scope="module")
def table_model() -> bytes:
    """The model file of a fitted table optimizer (random designs, ranked by an ensemble)."""
    optimizer = TableOptimizer(target="y", method="random", preset="quick", seed=0)
    return optimizer.fit(numeric_frame(16)).to_bytes()


def entry(tree: dict, path: str) -> dict:
    """The header entry at ``path``: attribute, submodule and tensor names, dot-separated."""
    node = tree
    for name in path.split("."):
        slots = ("attrs", "modules", "parameters", "buffers")
        node = next(node[slot][name] for slot in slots if name in node.get(slot, {}))
    return node


def edited(data: bytes, edit=None, text=None) -> bytes:
    """``data`` with its header's tree and its tensors changed by ``edit(tree, tensors)``, then
    the header's JSON text by ``text(header_text)``, laid out as :mod:`matchopt.state` does."""
    header_text, tensors = parts(data)
    header = json.loads(header_text)
    if edit is not None:
        edit(header["tree"], tensors)
    header_text = json.dumps(header)
    if text is not None:
        header_text = text(header_text)
    return save_file_bytes(header_text, tensors)


def set_attribute(path: str, value):
    """An edit setting the attribute at ``path`` (dot-separated) to the header entry ``value``."""

    def edit(tree, tensors):
        parent, _, name = path.rpartition(".")
        (entry(tree, parent) if parent else tree)["attrs"][name] = value

    return edit


def assert_refused(capsys, tmp_path, data: bytes, *parts: str) -> str:
    """``propose --model`` of ``data``: exit 2 with one error line naming the file and
    ``parts``, printed before anything else (not after the "fitted on" line), no output."""
    path = tmp_path / "crafted.pt"
    path.write_bytes(data)
    out = tmp_path / "p.csv"
    code, stdout, err = run_cli(capsys, "propose", "--model", path, "--n", 8, "--out", out)
    assert_one_line_error(code, err, "crafted.pt: ", *parts)
    assert err.startswith("matchopt: error: ") and not stdout and not out.exists(), err
    return err


@pytest.mark.parametrize(
    "value", ["9" * 100_000, "abc", "١٢"], ids=["100000 digits", "abc", "arabic digits"]
)
def test_a_bigint_that_is_not_a_short_whole_number_is_one_error_line(
    value, table_model, capsys, tmp_path
):
    data = edited(table_model, set_attribute("seed", {"$t": "bigint", "value": value}))
    assert_refused(capsys, tmp_path, data, "TableOptimizer.seed: bigint", "at most 4300 digits")


def test_a_json_number_of_too_many_digits_is_one_error_line(table_model, capsys, tmp_path):
    data = edited(table_model, text=lambda t: t.replace('"seed": 0', '"seed": ' + "9" * 100_000))
    assert_refused(capsys, tmp_path, data, "header: a number of more than 4300 digits")


def nested_lists(levels: int) -> str:
    """The JSON text of ``levels`` list entries, each the one item of the one outside it."""
    return '{"$t": "list", "items": [' * levels + "null" + "]}" * levels


@pytest.mark.parametrize(
    "nested, words",
    [
        ("[" * 200_000 + "]" * 200_000, "header: nested too deeply"),
        (nested_lists(5_000), "header: nested too deeply"),  # deeper than json reads
        (nested_lists(150), "objects nested more than 100 levels deep"),  # json reads it
    ],
    ids=["200000 brackets", "5000 list entries", "150 list entries"],
)
def test_a_deeply_nested_header_is_one_error_line(nested, words, table_model, capsys, tmp_path):
    data = edited(
        table_model, text=lambda t: t.replace('"overrides": null', '"overrides": ' + nested)
    )
    assert_refused(capsys, tmp_path, data, words)


def test_a_schema_of_another_type_is_one_error_line_before_anything_is_printed(
    table_model, capsys, tmp_path
):
    data = edited(table_model, set_attribute("schema_", "abc"))
    assert_refused(
        capsys, tmp_path, data, "TableOptimizer: schema_ is 'abc', expected a TableSchema"
    )


def test_a_tensor_of_another_shape_than_its_module_is_one_error_line(table_model, capsys, tmp_path):
    def edit(tree, tensors):
        tensors[entry(tree, "ensemble_.members.0.body.0.weight")["key"]] = torch.zeros(3, 3)

    assert_refused(
        capsys,
        tmp_path,
        edited(table_model, edit),
        "TableOptimizer.ensemble_.members.0.body.0.weight is a (3, 3) tensor",
        "Linear(in_features=2, out_features=32, bias=True, dtype=torch.float32) has (32, 2)",
    )


def test_method_load_checks_tensors_against_their_modules(potts, tmp_path):
    path = make_method("matchopt", "quick", seed=0).fit(potts).save(tmp_path / "m.pt")

    def edit(tree, tensors):
        tensors[entry(tree, "model_.hidden.0.bias")["key"]] = torch.zeros(7)

    path.write_bytes(edited(path.read_bytes(), edit))
    with pytest.raises(
        MatchoptError, match=r"m\.pt: .*MatchOpt\.model_\.hidden\.0\.bias is a \(7,\)"
    ):
        Method.load(path)


@pytest.mark.parametrize(
    "tensor, shape, message",
    [
        ("model_.blocks.0.qkv.bias", (1, 1, 5), r"blocks\.0\.qkv: bias has shape \(1, 1, 5\)"),
        ("model_.blocks.0.contract.weight", (1, 7, 16), r"blocks\.0: contract\.weight has shape"),
        ("model_.head.weight", (1, 9, 48), r"model_: head\.weight has shape \(1, 9, 48\)"),
        ("model_.step_position", (1, 9, 7), r"model_: step_position has shape \(1, 9, 7\)"),
    ],
)
def test_a_bonet_transformer_of_mismatched_shapes_is_refused(
    potts, tmp_path, tensor, shape, message
):
    """BONET's transformer is matchopt's own seed-first layers: they check their shapes and
    that they fit each other when a file is read, before anything runs."""
    path = make_method("bonet", "quick", seed=0).fit(potts).save(tmp_path / "b.pt")

    def edit(tree, tensors):
        tensors[entry(tree, tensor)["key"]] = torch.zeros(shape)

    path.write_bytes(edited(path.read_bytes(), edit))
    with pytest.raises(MatchoptError, match=r"b\.pt: .*" + message):
        Method.load(path)


#: A header longer than :data:`matchopt.state.MAX_HEADER_CHARS` (16 MiB).
LONG = 17 * 2**20


def legacy(data: bytes) -> bytes:
    """The model file ``data`` in the older format (a torch.save archive)."""
    header_text, tensors = parts(data)
    buffer = io.BytesIO()
    torch.save({"header": header_text, "tensors": tensors}, buffer)
    return buffer.getvalue()


def test_a_header_over_the_size_limit_is_one_error_line(table_model, capsys, tmp_path):
    data = edited(table_model, set_attribute("source_", "x" * LONG))
    assert_refused(capsys, tmp_path, data, "header takes", "over the 16 MiB")
    assert state.MAX_HEADER_CHARS < LONG


def test_a_file_over_the_size_limit_is_refused_unread(table_model, capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(state, "MAX_FILE_BYTES", len(table_model) - 1, raising=False)
    monkeypatch.setattr(Path, "read_bytes", lambda path: pytest.fail(f"{path} was read"))
    assert_refused(
        capsys, tmp_path, table_model, "not read: it takes", "a matchopt model file may take"
    )
    with pytest.raises(StateError, match="data: not read: it takes"):
        TableOptimizer.load_bytes(table_model, "data")


def test_saving_refuses_a_file_loading_would_refuse(monkeypatch, table_model):
    optimizer = TableOptimizer.load_bytes(table_model)
    monkeypatch.setattr(state, "MAX_HEADER_CHARS", 1000, raising=False)
    with pytest.raises(StateError, match="cannot save TableOptimizer: its description takes"):
        optimizer.to_bytes()
    monkeypatch.setattr(state, "MAX_HEADER_CHARS", 2**20)
    monkeypatch.setattr(state, "MAX_FILE_BYTES", 1000, raising=False)
    with pytest.raises(StateError, match="cannot save TableOptimizer: the model file would take"):
        optimizer.to_bytes()


def columns(tree) -> list:
    return tree["attrs"]["schema_"]["attrs"]["columns"]["items"]


def set_submodule(path: str, value):
    """An edit setting the submodule at ``path`` (dot-separated) to the header entry ``value``."""

    def edit(tree, tensors):
        parent, _, name = path.rpartition(".")
        entry(tree, parent)["modules"][name] = value

    return edit


def fill_tensor(path: str, value: float):
    def edit(tree, tensors):
        tensors[entry(tree, path)["key"]].fill_(value)

    return edit


def set_column(index: int, **values):
    def edit(tree, tensors):
        tree["attrs"]["schema_"]["attrs"]["columns"]["items"][index]["attrs"].update(values)

    return edit


def drop_column(tree, tensors):
    tree["attrs"]["schema_"]["attrs"]["columns"]["items"].pop()


@pytest.mark.parametrize(
    "edit, words",
    [
        pytest.param(
            set_attribute("seed", -1),
            "TableOptimizer: seed is -1, expected a whole number from 0 to 4294967295",
            id="seed -1",
        ),
        pytest.param(
            set_attribute("seed", 2**32), "seed is 4294967296, expected a whole", id="seed 2**32"
        ),
        pytest.param(
            set_attribute("oversample", 0),
            "oversample is 0, expected a whole number",
            id="oversample 0",
        ),
        pytest.param(
            set_attribute("oversample", 10**9),
            "oversample is 1000000000, expected a whole number",
            id="oversample 10**9",
        ),
        pytest.param(
            set_attribute("min_distance", "far"),
            "min_distance is 'far', expected a finite number >= 0.0",
            id="min_distance text",
        ),
        pytest.param(
            set_attribute("method", "nope"),
            "TableOptimizer: unknown method 'nope'",
            id="unknown method",
        ),
        pytest.param(
            set_attribute("fit_quality_", "good"),
            "TableOptimizer: fit_quality_ is 'good', expected a dict or None",
            id="fit_quality text",
        ),
        pytest.param(
            set_attribute("method_.seed", 1.5),
            "TableOptimizer.method_: seed is 1.5, expected a whole number",
            id="method seed 1.5",
        ),
        pytest.param(
            set_attribute("method_.config", 3),
            "method_: config is 3, expected a RandomDesignsConfig or None",
            id="method config 3",
        ),
        pytest.param(
            set_attribute("source_", {"$t": "list", "items": ["x"]}),
            "source_ is a list, expected a text",
            id="source list",
        ),
        pytest.param(
            set_submodule("ensemble_.members", None),
            "ensemble_: members is None, expected a list of members",
            id="members None",
        ),
        pytest.param(
            set_attribute("ensemble_.members", None),
            "TableOptimizer.ensemble_: attribute 'members' hides a tensor or submodule",
            id="attribute hiding a submodule",
        ),
        pytest.param(
            set_attribute("ensemble_.members.0.body.0.in_features", 3),
            "body.0.weight is a (32, 2) tensor of torch.float32; Linear(in_features=3,",
            id="in_features 3",
        ),
        pytest.param(
            set_attribute("ensemble_.members.0.body.1.negative_slope", "abc"),
            "body.1.negative_slope is 'abc'; LeakyReLU takes float",
            id="slope text",
        ),
        pytest.param(
            fill_tensor("ensemble_.members.1.body.2.bias", float("nan")),
            "TableOptimizer.ensemble_.members.1.body.2.bias holds NaN or infinite values",
            id="NaN bias",
        ),
        pytest.param(
            set_column(0, low="abc"),
            "TableOptimizer.schema_.columns[0]: low is 'abc', expected a finite number",
            id="low text",
        ),
        pytest.param(
            set_column(1, scale=-1.0),
            "schema_.columns[1]: scale is -1.0, expected a finite number > 0.0",
            id="scale -1",
        ),
        pytest.param(
            drop_column,
            "TableOptimizer: schema_ describes 1 floats but data_ holds 2 floats",
            id="a column less",
        ),
    ],
)
def test_attributes_of_other_types_or_out_of_range_are_one_error_line(
    edit, words, table_model, capsys, tmp_path
):
    assert_refused(capsys, tmp_path, edited(table_model, edit), words)


def test_a_model_file_is_safetensors_and_loads_without_torch_load(
    table_model, monkeypatch, tmp_path
):
    from safetensors import safe_open

    assert table_model[:4] != b"PK\x03\x04"  # not a torch.save archive
    path = tmp_path / "model.safetensors"
    path.write_bytes(table_model)
    with safe_open(str(path), framework="pt") as opened:
        assert json.loads(opened.metadata()["matchopt"])["kind"] == "table-optimizer"
    monkeypatch.setattr(torch, "load", lambda *a, **k: pytest.fail("torch.load was called"))
    assert isinstance(load_state(table_model, "table-optimizer", "model.pt"), TableOptimizer)


def test_older_model_files_are_refused_unread_with_how_to_convert_them(
    table_model, monkeypatch, capsys, tmp_path
):
    old = legacy(table_model)
    with monkeypatch.context() as patched:
        patched.setattr(torch, "load", lambda *a, **k: pytest.fail("torch.load was called"))
        with pytest.raises(StateError, match="older format .*examples/convert_model_file.py"):
            state.load_state(old, "table-optimizer", "old.pt")
        assert_refused(capsys, tmp_path, old, "older format", "convert it with")
    # The script the message names converts it (reading the old file needs torch's loader).
    import runpy

    script = Path(__file__).parents[1] / "examples" / "convert_model_file.py"
    convert = runpy.run_path(str(script))["convert"]
    converted = TableOptimizer.load_bytes(convert(old), "new.pt")
    expected = TableOptimizer.load_bytes(table_model)
    assert converted.propose(4).equals(expected.propose(4))


@pytest.mark.parametrize("data", ["model.pt", None, 3], ids=["str", "None", "int"])
def test_load_bytes_of_something_else_than_bytes_is_a_type_error(data):
    with pytest.raises(TypeError, match=f"must be bytes .*not {type(data).__name__}"):
        TableOptimizer.load_bytes(data)


@pytest.mark.parametrize("wrap", [bytearray, memoryview])
def test_load_bytes_takes_a_bytearray_or_a_memoryview_of_a_model_file(table_model, wrap):
    loaded = TableOptimizer.load_bytes(wrap(table_model))
    assert loaded.propose(3).equals(TableOptimizer.load_bytes(table_model).propose(3))


@pytest.mark.parametrize("path", [None, 3, b"model.pt"], ids=["None", "int", "bytes"])
def test_load_of_something_else_than_a_path_is_a_type_error(path):
    with pytest.raises(TypeError, match=f"path must be a path .*not {type(path).__name__}"):
        TableOptimizer.load(path)
    with pytest.raises(TypeError, match="path must be a path"):
        Method.load(path)


def test_a_model_file_that_is_a_fifo_is_refused_without_blocking(tmp_path):
    path = tmp_path / "model.pt"
    os.mkfifo(path)
    with pytest.raises(StateError, match="not a regular file"):
        TableOptimizer.load(path)


def test_a_model_whose_feature_scaling_is_degenerate_is_refused_not_proposed_with_empty_cells(
    table_model, capsys, tmp_path
):
    """A feature scaler of std 1e-300 (an edited file) made every prediction and spread NaN,
    written as empty cells."""
    optimizer = TableOptimizer.load_bytes(table_model)
    optimizer.ensemble_encoder_.x_scaler_.std[:] = 1e-300
    data = optimizer.to_bytes()
    with pytest.raises(StateError, match="predictions that are NaN or infinite"):
        TableOptimizer.load_bytes(data, "m.pt")
    assert_refused(capsys, tmp_path, data, "predictions that are NaN or infinite")
    # Whatever else gives NaN: never an empty cell where a number is due.
    with pytest.raises(MatchoptError, match="predicts NaN or infinite values for 3 of 3"):
        optimizer.propose(3)
