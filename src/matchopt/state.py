"""Model files that cannot run code: fitted objects as JSON plus tensors, read without pickle.

A fitted method (or a :class:`~matchopt.tabular.TableOptimizer`) is written as one safetensors
file: raw tensor buffers behind a JSON header, whose metadata holds matchopt's own JSON header
(:data:`HEADER_KEY`); it is read with no pickle at all (safetensors' own loader). Files of the
older format (a ``torch.save`` archive of ``{"header": <JSON text>, "tensors": {name: tensor}}``)
are refused unread with how to convert them (:data:`CONVERTER`): reading them would take torch's
unpickler. The JSON header describes the object graph:

- numbers, strings, None, lists, tuples, sets and dicts (any JSON-able keys);
- numpy arrays (raw bytes in a tensor, with dtype and shape; object arrays are refused) and
  numpy scalars; torch tensors and parameters;
- ``torch.nn`` modules: class, parameters, buffers, submodules and plain attributes;
- objects of matchopt's own classes (methods, encoders, schemas, configs): their attributes;
  dataclasses are rebuilt through their constructor, so their checks run again;
- a few activation functions (``torch.nn.functional.relu`` ...), by name.

Classes are looked up by name in a table built from modules already imported (matchopt's and
``torch.nn.modules``): a name outside it is an error, and nothing is ever imported because a
file names it. The header's ``format`` and ``kind`` are checked before any object is built.

A file is data from outside, so what it holds is checked before use:

- sizes: the file (:data:`MAX_FILE_BYTES`, also what its archive unpacks to), the JSON header
  (:data:`MAX_HEADER_CHARS`) and the nesting of its object graph (:data:`MAX_DEPTH`);
- every value where it is decoded (whole numbers, array shapes, tensor layouts);
- every ``torch.nn`` module against a fresh one of its class built (on the ``meta`` device, so
  without memory) from the constructor arguments the module keeps: its parameters and buffers
  must have the names, shapes and dtypes that module has; the layers of a ``Sequential`` must
  fit each other; parameters must be finite;
- every object of a class with a ``__matchopt_check__(self)`` method, right after it is
  rebuilt: the class checks the types and ranges of its attributes
  (:mod:`matchopt.state_checks`).

Any problem is one :class:`StateError` naming the file and where in the object it is.

A class may define ``__matchopt_state__(self) -> dict`` to choose what is saved (e.g. to leave
out functions, which cannot be saved); the attributes are restored as saved.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
import sys
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from matchopt._version import __version__
from matchopt.errors import MatchoptError
from matchopt.safe_paths import size_text

#: Value of the header's ``format`` in every file this module writes.
FORMAT = "matchopt-state"
#: Version of the layout; files of a newer layout are refused with a clear message.
FORMAT_VERSION = 1

#: Functions a module attribute may hold (e.g. a transformer layer's activation), by name.
_FUNCTIONS: dict[str, Any] = {
    "torch.nn.functional.relu": F.relu,
    "torch.nn.functional.gelu": F.gelu,
    "torch.nn.functional.silu": F.silu,
    "torch.nn.functional.leaky_relu": F.leaky_relu,
    "torch.nn.functional.softplus": F.softplus,
    "torch.relu": torch.relu,
    "torch.tanh": torch.tanh,
    "torch.sigmoid": torch.sigmoid,
}
_FUNCTION_NAMES = {id(fn): name for name, fn in _FUNCTIONS.items()}
#: Attributes every ``nn.Module`` sets up in its ``__init__`` (hooks and containers).
_MODULE_BASE_ATTRS = frozenset(vars(torch.nn.Module()))

#: Largest model file read or written, and the most its archive may unpack to: a crafted file
#: must not make matchopt read (or inflate) more. Fitted models are far smaller (a method fitted
#: on a Design-Bench task: megabytes to a few hundred).
MAX_FILE_BYTES = 4 * 2**30
#: The key of the safetensors metadata that holds a model file's JSON header.
HEADER_KEY = "matchopt"
#: The script that converts a model file of the older (torch.save) format to the current one.
CONVERTER = "examples/convert_model_file.py"
#: Longest JSON header read or written (characters): a header describes objects, not data
#: (arrays go in tensors), so real ones are kilobytes; parsing takes several times its size.
MAX_HEADER_CHARS = 16 * 2**20
#: Deepest nesting of the object graph in a header (real files: about 10).
MAX_DEPTH = 100
#: Most entries (tensors) in a model file's archive (real files: hundreds at most).
MAX_ENTRIES = 100_000
#: Most digits of a whole number written as text (Python's own default limit).
MAX_BIGINT_DIGITS = 4300
_BIGINT = re.compile(rf"-?[0-9]{{1,{MAX_BIGINT_DIGITS}}}")

#: Layers that keep the width of their input (for the check of a ``Sequential``).
_SAME_WIDTH = (
    torch.nn.Identity,
    torch.nn.Dropout,
    torch.nn.LeakyReLU,
    torch.nn.ReLU,
    torch.nn.SiLU,
    torch.nn.GELU,
    torch.nn.Softplus,
    torch.nn.Tanh,
    torch.nn.Sigmoid,
)
#: ``torch.nn`` modules checked against a fresh module of their class (see the module notes):
#: the ones matchopt's methods use, whose constructors are cheap whatever their arguments. A
#: module of another ``torch.nn`` class may hold no parameters or buffers of its own.
_REBUILT_MODULES = frozenset(
    {
        torch.nn.Linear,
        torch.nn.modules.linear.NonDynamicallyQuantizableLinear,
        torch.nn.LayerNorm,
        torch.nn.MultiheadAttention,
        torch.nn.Embedding,
        *_SAME_WIDTH,
    }
)


class StateError(MatchoptError):
    """A model file that cannot be read (or an object that cannot be saved)."""


def check_predictions(
    source: str, what: str, predict: Callable[[], Any], n_rows: int, finite: bool = False
) -> None:
    """The last check of objects read from a model file: ``predict()`` returns arrays of
    ``n_rows`` predictions (several as a tuple), with ``finite`` numbers only (a model whose
    scaling was edited predicts NaN); any failure is one :class:`StateError` naming ``source``
    and ``what`` failed (e.g. "its surrogates fail to predict the measured rows")."""
    try:
        outputs = predict()
        for output in outputs if isinstance(outputs, tuple) else (outputs,):
            if np.shape(output) != (n_rows,):
                raise ValueError(f"{np.shape(output)} predictions for {n_rows} rows")
            if finite and not np.isfinite(np.asarray(output, dtype=np.float64)).all():
                raise ValueError("predictions that are NaN or infinite")
    except Exception as err:
        why = " ".join(f"{type(err).__name__}: {err}".split())[:300]
        raise StateError(f"{source}: not a valid matchopt model file ({what}: {why})") from None


def _class_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _known_classes() -> dict[str, type]:
    """Class name -> class, for the classes a file may name (see the module notes)."""
    # Every class a caller saves is already imported: importing any method module imports
    # the ``matchopt.methods`` package, which imports them all (and the table optimizer's
    # module imports that package too).
    table: dict[str, type] = {}
    for module_name, module in list(sys.modules.items()):
        if module is None:
            continue
        ours = module_name == "matchopt" or module_name.startswith("matchopt.")
        if not ours and not module_name.startswith("torch.nn.modules."):
            continue
        for value in list(vars(module).values()):
            if not isinstance(value, type) or value.__module__ != module_name:
                continue
            if not ours and not issubclass(value, torch.nn.Module):
                continue
            if issubclass(value, BaseException):
                continue
            table[_class_name(value)] = value
    return table


# --- Writing --------------------------------------------------------------------------------------


class _Encoder:
    def __init__(self) -> None:
        self.tensors: dict[str, torch.Tensor] = {}
        self.memo: dict[int, int] = {}
        self.keep: list[Any] = []  # objects seen, so that their ids stay unique while encoding

    def tensor(self, value: torch.Tensor) -> str:
        key = f"t{len(self.tensors)}"
        self.tensors[key] = value.detach().cpu().clone()
        return key

    def encode(self, value: Any, where: str) -> Any:
        if value is None or isinstance(value, (bool, int, float, str)):
            if isinstance(value, int) and not isinstance(value, bool):
                return value if abs(value) < 2**53 else {"$t": "bigint", "value": str(value)}
            return value
        if id(value) in self.memo:
            return {"$t": "ref", "id": self.memo[id(value)]}
        node_id = len(self.memo)
        self.memo[id(value)] = node_id
        self.keep.append(value)
        node = self._encode_new(value, where)
        node["$id"] = node_id
        return node

    def _encode_new(self, value: Any, where: str) -> dict:
        if isinstance(value, torch.nn.Parameter):
            return {"$t": "parameter", "key": self.tensor(value), "grad": value.requires_grad}
        if isinstance(value, torch.Tensor):
            return {"$t": "tensor", "key": self.tensor(value)}
        if isinstance(value, np.ndarray):
            if value.dtype.hasobject:
                raise StateError(f"cannot save {where}: a numpy array of Python objects")
            raw = np.ascontiguousarray(value)
            data = torch.frombuffer(bytearray(raw.tobytes()), dtype=torch.uint8)
            return {
                "$t": "ndarray",
                "key": self.tensor(data),
                "dtype": raw.dtype.str,
                "shape": list(raw.shape),
            }
        if isinstance(value, np.generic):
            return {"$t": "npscalar", "array": self.encode(np.asarray(value), where)}
        if isinstance(value, (list, tuple, set, frozenset)):
            kind = {list: "list", tuple: "tuple", set: "set", frozenset: "frozenset"}.get(
                type(value)
            )
            if kind is None:
                raise StateError(f"cannot save {where}: a {type(value).__name__}")
            items = sorted(value, key=repr) if kind in ("set", "frozenset") else value
            return {
                "$t": kind,
                "items": [self.encode(v, f"{where}[{i}]") for i, v in enumerate(items)],
            }
        if type(value) in (dict, OrderedDict):  # state_dict() gives an OrderedDict
            return {
                "$t": "dict",
                "items": [
                    [self.encode(k, f"{where} key"), self.encode(v, f"{where}[{k!r}]")]
                    for k, v in value.items()
                ],
            }
        if callable(value) and not isinstance(value, type) and id(value) in _FUNCTION_NAMES:
            return {"$t": "function", "name": _FUNCTION_NAMES[id(value)]}
        if isinstance(value, torch.nn.Module):
            return self._module(value, where)
        cls = type(value)
        if not cls.__module__.startswith("matchopt"):
            raise StateError(f"cannot save {where}: objects of type {_class_name(cls)}")
        custom = getattr(value, "__matchopt_state__", None)
        if custom is not None:
            attrs = custom()
        elif dataclasses.is_dataclass(value):
            attrs = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        else:
            attrs = dict(vars(value))
        return {
            "$t": "dataclass" if dataclasses.is_dataclass(value) else "object",
            "class": _class_name(cls),
            "attrs": {k: self.encode(v, f"{where}.{k}") for k, v in attrs.items()},
        }

    def _module(self, module: torch.nn.Module, where: str) -> dict:
        cls = type(module)
        if not cls.__module__.startswith("matchopt") and cls not in _REBUILT_MODULES:
            own = [
                k
                for k, v in [*module._parameters.items(), *module._buffers.items()]
                if v is not None
            ]
            if own:  # it could not be checked when read back
                raise StateError(
                    f"cannot save {where}: it holds tensors ({', '.join(own)}), and "
                    f"{cls.__name__} is not among the torch.nn layers whose tensors model files "
                    "check"
                )
        attrs = {
            k: self.encode(v, f"{where}.{k}")
            for k, v in vars(module).items()
            if k not in _MODULE_BASE_ATTRS
        }
        return {
            "$t": "module",
            "class": _class_name(type(module)),
            "training": module.training,
            "parameters": {
                k: self.encode(v, f"{where}.{k}") for k, v in module._parameters.items()
            },
            "buffers": {k: self.encode(v, f"{where}.{k}") for k, v in module._buffers.items()},
            "non_persistent": sorted(module._non_persistent_buffers_set),
            "modules": {k: self.encode(v, f"{where}.{k}") for k, v in module._modules.items()},
            "attrs": attrs,
        }


def state_bytes(obj: Any, kind: str) -> bytes:
    """``obj`` as the bytes of a model file of ``kind`` (see the module notes).

    Raises:
        StateError: ``obj`` holds something that cannot be saved (named by its attribute path).
    """
    encoder = _Encoder()
    tree = encoder.encode(obj, type(obj).__name__)
    header = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "kind": kind,
        "class": _class_name(type(obj)),
        "matchopt_version": __version__,
        "tree": tree,
    }
    text = json.dumps(header)
    if len(text) > MAX_HEADER_CHARS:
        raise StateError(
            f"cannot save {type(obj).__name__}: its description takes {size_text(len(text))}, over "
            f"the {size_text(MAX_HEADER_CHARS)} a model file may hold (arrays are saved apart, so "
            "this is a very large Python list, dict or text)"
        )
    from safetensors.torch import save

    tensors = {name: t.contiguous() for name, t in encoder.tensors.items()}
    data = save(tensors, metadata={HEADER_KEY: text})
    if len(data) > MAX_FILE_BYTES:
        raise StateError(
            f"cannot save {type(obj).__name__}: the model file would take "
            f"{size_text(len(data))}, over the {size_text(MAX_FILE_BYTES)} matchopt reads"
        )
    return data


# --- Reading --------------------------------------------------------------------------------------


def _short(node: Any) -> str:
    """A few words about a header entry (never its whole text, nor a walk through its depth)."""
    if isinstance(node, (dict, list)):
        return f"a JSON {'object' if isinstance(node, dict) else 'list'} of {len(node)} items"
    text = repr(node)
    return text if len(text) <= 60 else text[:57] + "..."


def _path(where: str) -> str:
    """An attribute path for a message: its start and end when it is long."""
    return where if len(where) <= 100 else f"{where[:60]}...{where[-37:]}"


class _Decoder:
    def __init__(self, tensors: dict[str, torch.Tensor], source: str):
        self.tensors = tensors
        self.source = source
        self.objects: dict[int, Any] = {}
        self.classes = _known_classes()
        self.depth = 0
        self.where = "model"  # the attribute path being decoded, for messages
        self.failed_at: str | None = None  # where an unforeseen exception came from

    def fail(self, why: str) -> StateError:
        why = " ".join(why.split())
        if len(why) > 400:
            why = why[:397] + "..."
        return StateError(f"{self.source}: not a valid matchopt model file ({why})")

    def tensor(self, key: Any, where: str) -> torch.Tensor:
        value = self.tensors.get(key) if isinstance(key, (str, int, float)) else None
        if not isinstance(value, torch.Tensor):
            raise self.fail(f"{where}: tensor {_short(key)} is missing")
        if value.layout != torch.strided or value.is_quantized or value.device.type != "cpu":
            raise self.fail(f"{where}: tensor {_short(key)} is not a plain tensor ({value.layout})")
        return value

    def cls(self, name: Any) -> type:
        found = self.classes.get(name) if isinstance(name, str) else None
        if found is None:
            raise self.fail(f"it names class {_short(name)}, which matchopt does not load")
        return found

    def decode(self, node: Any, where: str) -> Any:
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        if self.depth >= MAX_DEPTH:
            raise self.fail(f"{_path(where)}: objects nested more than {MAX_DEPTH} levels deep")
        outer = self.where
        self.depth += 1
        self.where = where
        try:
            return self._decode(node, where)
        except Exception:
            if self.failed_at is None:
                self.failed_at = where
            raise
        finally:
            self.depth -= 1
            self.where = outer

    def _decode(self, node: Any, where: str) -> Any:
        if not isinstance(node, dict) or not isinstance(node.get("$t"), str):
            raise self.fail(f"{where}: unexpected entry {_short(node)}")
        kind = node["$t"]
        if kind == "ref":
            key = node.get("id")
            if not isinstance(key, int) or key not in self.objects:
                raise self.fail(f"{where}: reference to unknown object {_short(key)}")
            return self.objects[key]
        if kind == "bigint":
            value = node.get("value")
            if not isinstance(value, str) or not _BIGINT.fullmatch(value):
                raise self.fail(
                    f"{where}: bigint {_short(value)} is not a whole number of at most "
                    f"{MAX_BIGINT_DIGITS} digits"
                )
            return int(value)
        if kind not in _ENTRY_TYPES:
            raise self.fail(f"{where}: unknown entry type {_short(kind)}")
        return getattr(self, f"_{kind}")(node, where)

    def register(self, node: dict, value: Any) -> Any:
        key = node.get("$id")
        if key is not None and not isinstance(key, int):
            raise self.fail(f"{self.where}: object id {_short(key)} is not a whole number")
        self.objects[key] = value
        return value

    def items(self, node: dict, where: str) -> list:
        items = node.get("items")
        if not isinstance(items, list):
            raise self.fail(f"{where}: {node['$t']} without items")
        return items

    def hashable(self, value: Any, where: str) -> Any:
        try:
            hash(value)
        except TypeError:
            raise self.fail(f"{where}: {type(value).__name__} as a set item or dict key") from None
        return value

    def _list(self, node: dict, where: str) -> list:
        out = self.register(node, [])
        out.extend(self.decode(v, f"{where}[{i}]") for i, v in enumerate(self.items(node, where)))
        return out

    def _tuple(self, node: dict, where: str) -> tuple:
        items = self.items(node, where)
        value = tuple(self.decode(v, f"{where}[{i}]") for i, v in enumerate(items))
        return self.register(node, value)

    def _set(self, node: dict, where: str) -> set:
        items = self.items(node, where)
        return self.register(node, {self.hashable(self.decode(v, where), where) for v in items})

    def _frozenset(self, node: dict, where: str) -> frozenset:
        items = self.items(node, where)
        value = frozenset(self.hashable(self.decode(v, where), where) for v in items)
        return self.register(node, value)

    def _dict(self, node: dict, where: str) -> dict:
        out = self.register(node, {})
        for pair in self.items(node, where):
            if not isinstance(pair, list) or len(pair) != 2:
                raise self.fail(f"{where}: a dict entry that is not a key-value pair")
            key = self.hashable(self.decode(pair[0], f"{where} key"), where)
            out[key] = self.decode(pair[1], f"{where}[{_short(key)}]")
        return out

    def _tensor(self, node: dict, where: str) -> torch.Tensor:
        return self.register(node, self.tensor(node.get("key"), where))

    def _parameter(self, node: dict, where: str) -> torch.nn.Parameter:
        tensor = self.tensor(node.get("key"), where)
        grad = node.get("grad", True)
        if not isinstance(grad, bool):
            raise self.fail(f"{where}: grad is {_short(grad)}, not true or false")
        if grad and not (tensor.is_floating_point() or tensor.is_complex()):
            raise self.fail(f"{where}: a parameter of {tensor.dtype} cannot take gradients")
        return self.register(node, torch.nn.Parameter(tensor, grad))

    def _ndarray(self, node: dict, where: str) -> np.ndarray:
        raw = self.tensor(node.get("key"), where)
        try:
            dtype = np.dtype(str(node["dtype"]))
            shape = tuple(int(s) for s in node["shape"])
        except (KeyError, TypeError, ValueError) as err:
            raise self.fail(f"{where}: bad array description ({err})") from None
        if dtype.hasobject:
            raise self.fail(f"{where}: an array of Python objects")
        if dtype.kind not in "biufcSUV" or any(s < 0 for s in shape):
            raise self.fail(f"{where}: an array of {dtype} with shape {shape}")
        if raw.dtype != torch.uint8 or raw.ndim != 1:
            raise self.fail(f"{where}: array bytes are not a byte vector")
        try:
            array = np.frombuffer(raw.numpy().tobytes(), dtype=dtype).reshape(shape).copy()
        except ValueError as err:
            raise self.fail(f"{where}: array bytes do not match their shape ({err})") from None
        return self.register(node, array)

    def _npscalar(self, node: dict, where: str) -> np.generic:
        array = self.decode(node.get("array"), where)
        if not isinstance(array, np.ndarray) or array.shape != ():
            raise self.fail(f"{where}: a numpy scalar that is not a 0-d array")
        return self.register(node, array[()])

    def _function(self, node: dict, where: str) -> Any:
        name = node.get("name")
        if not isinstance(name, str) or name not in _FUNCTIONS:
            raise self.fail(
                f"{where}: it names function {_short(name)}, which matchopt does not load"
            )
        return _FUNCTIONS[name]

    def mapping(self, node: dict, key: str, where: str) -> dict:
        value = node.get(key, {})
        if not isinstance(value, dict):
            raise self.fail(f"{where}: {key} is not a mapping")
        return value

    def slot_names(self, node: dict, key: str, where: str) -> dict:
        value = self.mapping(node, key, where)
        for name in value:
            if not name or "." in name:
                raise self.fail(f"{where}: {key} name {_short(name)} is not a valid name")
        return value

    def _module(self, node: dict, where: str) -> torch.nn.Module:
        cls = self.cls(node.get("class"))
        if not issubclass(cls, torch.nn.Module):
            raise self.fail(f"{where}: {cls.__name__} is not a torch module")
        module = cls.__new__(cls)
        torch.nn.Module.__init__(module)
        self.register(node, module)
        module.training = bool(node.get("training", False))
        for name, value in self.slot_names(node, "parameters", where).items():
            parameter = self.decode(value, f"{where}.{name}")
            if parameter is not None and not isinstance(parameter, torch.nn.Parameter):
                raise self.fail(f"{where}: parameter {name!r} is not a tensor")
            module._parameters[name] = parameter
        for name, value in self.slot_names(node, "buffers", where).items():
            buffer = self.decode(value, f"{where}.{name}")
            if buffer is not None and not isinstance(buffer, torch.Tensor):
                raise self.fail(f"{where}: buffer {name!r} is not a tensor")
            module._buffers[name] = buffer
        non_persistent = node.get("non_persistent", [])
        if not isinstance(non_persistent, list) or not all(
            isinstance(n, str) for n in non_persistent
        ):
            raise self.fail(f"{where}: non_persistent is not a list of names")
        module._non_persistent_buffers_set = set(non_persistent)
        for name, value in self.slot_names(node, "modules", where).items():
            child = self.decode(value, f"{where}.{name}")
            if child is not None and not isinstance(child, torch.nn.Module):
                raise self.fail(f"{where}: submodule {name!r} is not a module")
            module._modules[name] = child
        for name, value in self.mapping(node, "attrs", where).items():
            if name in _MODULE_BASE_ATTRS or name.startswith("__"):
                raise self.fail(f"{where}: module attribute {name!r} may not be set")
            if name in module._parameters or name in module._buffers or name in module._modules:
                raise self.fail(f"{where}: attribute {name!r} hides a tensor or submodule")
            module.__dict__[name] = self.decode(value, f"{where}.{name}")
        _check_module(self, module, where)
        return self.checked(module, where)

    def attrs(self, node: dict, where: str) -> dict:
        out = {}
        for name, value in self.mapping(node, "attrs", where).items():
            if not isinstance(name, str) or name.startswith("__"):
                raise self.fail(f"{where}: attribute {name!r} may not be set")
            out[name] = self.decode(value, f"{where}.{name}")
        return out

    def _object(self, node: dict, where: str) -> Any:
        cls = self.cls(node.get("class"))
        if issubclass(cls, torch.nn.Module) or dataclasses.is_dataclass(cls):
            raise self.fail(f"{where}: {cls.__name__} saved as a plain object")
        obj = cls.__new__(cls)
        self.register(node, obj)
        obj.__dict__.update(self.attrs(node, where))
        return self.checked(obj, where)

    def _dataclass(self, node: dict, where: str) -> Any:
        cls = self.cls(node.get("class"))
        if not dataclasses.is_dataclass(cls):
            raise self.fail(f"{where}: {cls.__name__} is not a dataclass")
        attrs = self.attrs(node, where)
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = set(attrs) - set(fields)
        if unknown:
            raise self.fail(
                f"{where}: {cls.__name__} has no field(s) {_short(', '.join(sorted(unknown)))}"
            )
        try:
            obj = cls(**{k: v for k, v in attrs.items() if fields[k].init})
        except (TypeError, ValueError, MatchoptError) as err:
            raise self.fail(f"{where}: {cls.__name__}: {err}") from None
        for name, value in attrs.items():
            if not fields[name].init:
                object.__setattr__(obj, name, value)
        return self.checked(self.register(node, obj), where)

    def checked(self, obj: Any, where: str) -> Any:
        """``obj`` once its class's ``__matchopt_check__`` (if any) accepts it."""
        check = getattr(type(obj), "__matchopt_check__", None)
        if check is not None:
            try:
                check(obj)
            except MatchoptError as err:
                raise self.fail(f"{where}: {err}") from None
        return obj


#: Entry types with a ``_<type>`` method of :class:`_Decoder` (besides ``ref`` and ``bigint``).
_ENTRY_TYPES = frozenset(
    "list tuple set frozenset dict tensor parameter ndarray npscalar function module object "
    "dataclass".split()
)


# --- Checks of torch modules ----------------------------------------------------------------------


def _own_tensors(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {
        name: value
        for name, value in [*module._parameters.items(), *module._buffers.items()]
        if value is not None
    }


def _fresh_module(
    decoder: _Decoder, module: torch.nn.Module, where: str
) -> tuple[torch.nn.Module, str]:
    """A new module of ``module``'s class, on the meta device, from the constructor arguments
    ``module`` keeps (its attributes of the same names; for a tensor argument such as ``bias``,
    whether it has that tensor), and those arguments in words."""
    cls = type(module)
    kwargs: dict[str, Any] = {}
    if cls is torch.nn.MultiheadAttention:  # arguments kept under other names
        kwargs["bias"] = module._parameters.get("in_proj_bias") is not None
        kwargs["add_bias_kv"] = module._parameters.get("bias_k") is not None
    takes_dtype = False
    for parameter in list(inspect.signature(cls.__init__).parameters.values())[1:]:
        name = parameter.name
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD) or name in kwargs:
            continue
        if name in ("device", "dtype"):
            takes_dtype = takes_dtype or name == "dtype"
        elif name in module.__dict__:
            kwargs[name] = value = module.__dict__[name]
            expected = _argument_type(parameter)
            if expected is not None and not _is_of(value, expected):
                raise decoder.fail(
                    f"{where}.{name} is {_short(value)}; {cls.__name__} takes {expected.__name__}"
                )
        elif name in module._parameters or name in module._buffers:
            kwargs[name] = _own_tensors(module).get(name) is not None
        elif parameter.default is parameter.empty:
            raise decoder.fail(f"{where}: {cls.__name__} without its attribute {name!r}")
    floating = {t.dtype for t in _own_tensors(module).values() if t.is_floating_point()}
    if len(floating) > 1:
        kinds = ", ".join(sorted(str(d) for d in floating))
        raise decoder.fail(f"{where}: {cls.__name__} with tensors of several dtypes ({kinds})")
    if takes_dtype and floating:
        kwargs["dtype"] = floating.pop()
    words = f"{cls.__name__}({', '.join(f'{k}={_short(v)}' for k, v in kwargs.items())})"
    try:
        with torch.device("meta"):
            fresh = cls(**kwargs)
    except Exception as err:  # the constructor's own checks of its arguments
        raise decoder.fail(
            f"{where}: {words} cannot be built ({type(err).__name__}: {err})"
        ) from None
    return fresh, words


def _argument_type(parameter: inspect.Parameter) -> type | None:
    """bool, int or float: what a constructor argument takes, by its annotation or else the
    type of its default (None: not one of those)."""
    names = {"bool": bool, "int": int, "float": float}
    annotation = parameter.annotation
    if isinstance(annotation, str):
        annotation = names.get(annotation)
    if annotation in (bool, int, float):
        return annotation
    default = parameter.default
    return type(default) if type(default) in (bool, int, float) else None


def _is_of(value: Any, expected: type) -> bool:
    if expected is bool:
        return isinstance(value, bool)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return isinstance(value, int) or expected is float


def _check_module(decoder: _Decoder, module: torch.nn.Module, where: str) -> None:
    """Refuse a module whose tensors do not fit its class (see the module notes)."""
    cls = type(module)
    for name, value in module._parameters.items():
        if value is not None and value.is_floating_point() and not torch.isfinite(value).all():
            raise decoder.fail(f"{where}.{name} holds NaN or infinite values")
    if cls.__module__.startswith("matchopt"):
        # Its submodules are checked, and its class checks the rest (__matchopt_check__).
        return
    if cls in _REBUILT_MODULES:
        fresh, words = _fresh_module(decoder, module, where)
        _compare_modules(decoder, fresh, module, where, words)
        return
    own = _own_tensors(module)
    if own:
        raise decoder.fail(
            f"{where}: it holds tensors ({_short(', '.join(own))}), and {cls.__name__} is not "
            "among the torch.nn layers whose tensors model files check"
        )
    if isinstance(module, torch.nn.Sequential):
        _check_sequential(decoder, module, where)


def _compare_modules(
    decoder: _Decoder, fresh: torch.nn.Module, module: torch.nn.Module, where: str, words: str
) -> None:
    """``module`` has the tensors (names, shapes, dtypes), the attributes derived from its
    constructor arguments, and the submodules of ``fresh``, built from those arguments."""
    mine, theirs = _own_tensors(module), _own_tensors(fresh)
    for name in sorted(set(mine) | set(theirs)):
        want, got = theirs.get(name), mine.get(name)
        if want is None or got is None:
            which = "has no" if got is None else "has an unexpected"
            raise decoder.fail(f"{where}: {words} {which} tensor {name!r}")
        if want.shape != got.shape or want.dtype != got.dtype:
            raise decoder.fail(
                f"{where}.{name} is a {tuple(got.shape)} tensor of {got.dtype}; "
                f"{words} has {tuple(want.shape)} of {want.dtype}"
            )
    for name, value in vars(fresh).items():
        if name in _MODULE_BASE_ATTRS:
            continue
        if value is None or isinstance(value, (bool, int, float, str, tuple)):
            got = module.__dict__.get(name, _ABSENT)
            if got is _ABSENT:
                raise decoder.fail(f"{where}: {words} without its attribute {name!r}")
            if type(got) is not type(value) or got != value:
                raise decoder.fail(f"{where}.{name} is {_short(got)}; {words} has {_short(value)}")
    if set(module._modules) != set(fresh._modules):
        raise decoder.fail(
            f"{where}: submodules {_short(', '.join(module._modules))}; {words} has "
            f"{_short(', '.join(fresh._modules)) or 'none'}"
        )
    for name, child in fresh._modules.items():
        got = module._modules[name]
        if child is None or got is None or type(got) is not type(child):
            raise decoder.fail(
                f"{where}.{name} is {_short(type(got).__name__)}; {words} has "
                f"{type(child).__name__}"
            )
        _compare_modules(decoder, child, got, f"{where}.{name}", f"{words}.{name}")


_ABSENT = object()


def _check_sequential(decoder: _Decoder, module: torch.nn.Sequential, where: str) -> None:
    """The layers of a ``Sequential`` fit each other (a linear layer takes the width the layer
    before it gives)."""
    width = None  # of the previous layer's output, when known
    for name, layer in module._modules.items():
        if isinstance(layer, torch.nn.Linear):
            if width is not None and layer.in_features != width:
                raise decoder.fail(
                    f"{where}.{name}: a Linear layer taking {layer.in_features} features "
                    f"after a layer giving {width}"
                )
            width = layer.out_features
        elif isinstance(layer, torch.nn.LayerNorm):
            shape = layer.normalized_shape
            if width is not None and (len(shape) != 1 or shape[0] != width):
                raise decoder.fail(
                    f"{where}.{name}: a LayerNorm over {shape} after a layer giving {width}"
                )
        elif not isinstance(layer, _SAME_WIDTH):
            width = None


def _read_safetensors(data: bytes, source: str) -> tuple[str, dict[str, torch.Tensor]]:
    """The JSON header and the tensors of a model file (safetensors: a length, a JSON header of
    tensor dtypes, shapes and offsets with matchopt's header in its metadata, raw buffers; no
    pickle anywhere)."""
    from safetensors import SafetensorError
    from safetensors.torch import load

    if len(data) > MAX_FILE_BYTES:
        raise StateError(
            f"{source}: not read: it takes {size_text(len(data))}, over the "
            f"{size_text(MAX_FILE_BYTES)} a matchopt model file may take"
        )
    length = int.from_bytes(data[:8], "little") if len(data) >= 8 else -1
    if not 0 < length <= MAX_HEADER_CHARS + 64 * MAX_ENTRIES or 8 + length > len(data):
        raise _not_read(source, "not a safetensors file: its header length does not fit")
    try:
        layout = json.loads(data[8 : 8 + length])
    except (ValueError, RecursionError) as err:
        raise _not_read(source, f"not a safetensors file: {err}") from None
    if not isinstance(layout, dict) or len(layout) > MAX_ENTRIES + 1:
        raise _not_read(source, "not a safetensors file of at most 100,000 tensors")
    metadata = layout.get("__metadata__")
    header_text = metadata.get(HEADER_KEY) if isinstance(metadata, dict) else None
    if not isinstance(header_text, str):
        raise StateError(f"{source}: not a matchopt model file (no header)")
    try:
        tensors = load(data)
    except (SafetensorError, ValueError, RuntimeError) as err:
        raise _not_read(source, f"its tensors cannot be read: {err}") from None
    return header_text, tensors


def _older_format(source: str) -> StateError:
    return StateError(
        f"{source}: a model file of matchopt's older format (a torch.save archive), which is not "
        "read: reading it would take torch's unpickler; convert it with "
        f"{CONVERTER} from matchopt's repository (under torch >= 2.10), or fit the model again"
    )


def _not_read(source: str, reason: str) -> StateError:
    reason = " ".join(reason.split())[:160]
    return StateError(
        f"{source}: not a matchopt model file; it was not read, since only tensors and "
        f"plain data are loaded (model files of matchopt 0.1 were pickles and must be "
        f"saved again) ({reason})"
    )


def _checked_header(header_text: str, kind: str, source: str) -> dict[str, Any]:
    """A model file's matchopt header, parsed and checked: its size, its JSON, the format, a
    version this matchopt reads, and ``kind``."""
    if len(header_text) > MAX_HEADER_CHARS:
        raise StateError(
            f"{source}: not a valid matchopt model file (its header takes "
            f"{size_text(len(header_text))}, over the {size_text(MAX_HEADER_CHARS)} a model "
            "file may hold)"
        )
    try:
        header = json.loads(header_text)
    except RecursionError:
        raise StateError(
            f"{source}: not a valid matchopt model file (header: nested too deeply)"
        ) from None
    except ValueError as err:
        why = (
            " ".join(str(err).split())[:160]
            if isinstance(err, json.JSONDecodeError)
            else f"a number of more than {MAX_BIGINT_DIGITS} digits"  # Python's limit
        )
        raise StateError(f"{source}: not a matchopt model file (header: {why})") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise StateError(f"{source}: not a matchopt model file (format)")
    version = header.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise StateError(
            f"{source}: model file format {_short(version)} is newer than this matchopt "
            f"({__version__}) reads ({FORMAT_VERSION}); upgrade matchopt"
        )
    if header.get("kind") != kind:
        raise StateError(
            f"{source}: holds a {_short(header.get('kind'))} model, not a {kind!r} one"
        )
    return header


def _decode_tree(tree: Any, tensors: dict[str, torch.Tensor], source: str) -> Any:
    """The object a header's tree describes, rebuilt with ``tensors``; any error a crafted file
    makes the rebuilt objects raise becomes a :class:`StateError` naming where it arose."""
    decoder = _Decoder(tensors, source)
    name = tree.get("class") if isinstance(tree, dict) else None
    known = decoder.classes.get(name) if isinstance(name, str) else None
    root = known.__name__ if known is not None else "model"
    try:
        return decoder.decode(tree, root)
    except StateError:
        raise
    except Exception as err:  # anything else a crafted file makes the rebuilt objects raise
        where = _path(decoder.failed_at or root)
        if isinstance(err, MatchoptError):
            raise decoder.fail(f"{where}: {err}") from None
        if isinstance(err, RecursionError):
            raise decoder.fail(f"{where}: nested too deeply") from None
        raise decoder.fail(f"{where}: {type(err).__name__}: {err}") from None


def load_state(data: bytes, kind: str, source: str = "model") -> Any:
    """The object in the bytes of a model file of ``kind`` (written by :func:`state_bytes`).

    Raises:
        TypeError: ``data`` is not bytes, a bytearray or a memoryview.
        StateError: not a model file (e.g. an old pickle-based one: refused unread), another
            kind, a newer format, a file or header over the size limits, a header that names
            anything matchopt does not load, or objects that fail their checks (see the module
            notes); the message names the file and where the problem is.
    """
    if isinstance(data, (bytearray, memoryview)):
        data = bytes(data)
    if not isinstance(data, bytes):
        raise TypeError(
            f"a model file's data must be bytes (or a bytearray or memoryview), not "
            f"{type(data).__name__}"
        )
    if data[:4] == b"PK\x03\x04":  # the older format: a torch.save archive
        raise _older_format(source)
    header_text, tensors = _read_safetensors(data, source)
    header = _checked_header(header_text, kind, source)
    return _decode_tree(header.get("tree"), tensors, source)


def write_state(path: str | Path, obj: Any, kind: str) -> Path:
    """Write ``obj`` to a model file at ``path`` atomically (never a partial file)."""
    from matchopt.io import atomic_write_bytes

    path = Path(path)
    data = state_bytes(obj, kind)
    try:
        atomic_write_bytes(path, data)
    except OSError as err:
        raise StateError(f"cannot write {path}: {err.strerror or err}") from None
    return path


def read_state(path: str | Path, kind: str) -> Any:
    """The object in the model file at ``path`` (see :func:`load_state`)."""
    path = Path(path)
    return load_state(read_model_file(path), kind, str(path))


def read_model_file(path: str | Path) -> bytes:
    """The bytes of the model file at ``path``: a regular file (a pipe or device is refused),
    refused unread when it is over :data:`MAX_FILE_BYTES`.

    Raises:
        TypeError: ``path`` is not a path (str or os.PathLike).
        StateError: missing, not a regular file, too large or unreadable.
    """
    from matchopt.safe_paths import as_path, read_regular

    path = as_path(path, "the model file")
    if not path.exists():
        raise StateError(f"{path}: no such model file")
    try:
        return read_regular(path, MAX_FILE_BYTES, "matchopt model file")
    except StateError:
        raise
    except MatchoptError as err:
        raise StateError(str(err)) from None
