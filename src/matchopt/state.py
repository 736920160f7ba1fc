"""Model files that cannot run code: fitted objects as JSON plus tensors, read without pickle.

A fitted method (or a :class:`~matchopt.tabular.TableOptimizer`) is written as one file made by
``torch.save`` of ``{"header": <JSON text>, "tensors": {name: tensor}}`` and read back with
``torch.load(weights_only=True)``, PyTorch's loader that builds only tensors, strings, numbers
and containers and refuses everything else before it is built. A crafted pickle therefore fails
to load without running. The JSON header describes the object graph:

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

A class may define ``__matchopt_state__(self) -> dict`` to choose what is saved (e.g. to leave
out functions, which cannot be saved); the attributes are restored as saved.
"""

from __future__ import annotations

import dataclasses
import io
import json
import sys
import warnings
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from matchopt._version import __version__
from matchopt.errors import MatchoptError

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


class StateError(MatchoptError):
    """A model file that cannot be read (or an object that cannot be saved)."""


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
    buffer = io.BytesIO()
    torch.save({"header": json.dumps(header), "tensors": encoder.tensors}, buffer)
    return buffer.getvalue()


# --- Reading --------------------------------------------------------------------------------------


class _Decoder:
    def __init__(self, tensors: dict[str, torch.Tensor], source: str):
        self.tensors = tensors
        self.source = source
        self.objects: dict[int, Any] = {}
        self.classes = _known_classes()

    def fail(self, why: str) -> StateError:
        return StateError(f"{self.source}: not a valid matchopt model file ({why})")

    def tensor(self, key: Any) -> torch.Tensor:
        value = self.tensors.get(key) if isinstance(key, str) else None
        if not isinstance(value, torch.Tensor):
            raise self.fail(f"tensor {key!r} is missing")
        return value

    def cls(self, name: Any) -> type:
        found = self.classes.get(name) if isinstance(name, str) else None
        if found is None:
            raise self.fail(f"it names class {name!r}, which matchopt does not load")
        return found

    def decode(self, node: Any) -> Any:
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        if not isinstance(node, dict) or not isinstance(node.get("$t"), str):
            raise self.fail(f"unexpected entry {str(node)[:60]!r}")
        kind = node["$t"]
        if kind == "ref":
            if node.get("id") not in self.objects:
                raise self.fail(f"reference to unknown object {node.get('id')!r}")
            return self.objects[node["id"]]
        if kind == "bigint":
            return int(node["value"])
        handler = getattr(self, f"_{kind}", None)
        if handler is None:
            raise self.fail(f"unknown entry type {kind!r}")
        return handler(node)

    def register(self, node: dict, value: Any) -> Any:
        self.objects[node.get("$id")] = value
        return value

    def items(self, node: dict) -> list:
        items = node.get("items")
        if not isinstance(items, list):
            raise self.fail(f"{node['$t']} without items")
        return items

    def _list(self, node: dict) -> list:
        out = self.register(node, [])
        out.extend(self.decode(v) for v in self.items(node))
        return out

    def _tuple(self, node: dict) -> tuple:
        return self.register(node, tuple(self.decode(v) for v in self.items(node)))

    def _set(self, node: dict) -> set:
        return self.register(node, {self.decode(v) for v in self.items(node)})

    def _frozenset(self, node: dict) -> frozenset:
        return self.register(node, frozenset(self.decode(v) for v in self.items(node)))

    def _dict(self, node: dict) -> dict:
        out = self.register(node, {})
        for pair in self.items(node):
            if not isinstance(pair, list) or len(pair) != 2:
                raise self.fail("a dict entry that is not a key-value pair")
            out[self.decode(pair[0])] = self.decode(pair[1])
        return out

    def _tensor(self, node: dict) -> torch.Tensor:
        return self.register(node, self.tensor(node.get("key")))

    def _parameter(self, node: dict) -> torch.nn.Parameter:
        value = torch.nn.Parameter(self.tensor(node.get("key")), bool(node.get("grad", True)))
        return self.register(node, value)

    def _ndarray(self, node: dict) -> np.ndarray:
        raw = self.tensor(node.get("key"))
        try:
            dtype = np.dtype(str(node["dtype"]))
            shape = tuple(int(s) for s in node["shape"])
        except (KeyError, TypeError, ValueError) as err:
            raise self.fail(f"bad array description ({err})") from None
        if dtype.hasobject:
            raise self.fail("an array of Python objects")
        if raw.dtype != torch.uint8 or raw.ndim != 1:
            raise self.fail("array bytes are not a byte vector")
        try:
            array = np.frombuffer(raw.numpy().tobytes(), dtype=dtype).reshape(shape).copy()
        except ValueError as err:
            raise self.fail(f"array bytes do not match their shape ({err})") from None
        return self.register(node, array)

    def _npscalar(self, node: dict) -> np.generic:
        array = self.decode(node.get("array"))
        if not isinstance(array, np.ndarray) or array.shape != ():
            raise self.fail("a numpy scalar that is not a 0-d array")
        return self.register(node, array[()])

    def _function(self, node: dict) -> Any:
        name = node.get("name")
        if name not in _FUNCTIONS:
            raise self.fail(f"it names function {name!r}, which matchopt does not load")
        return _FUNCTIONS[name]

    def mapping(self, node: dict, key: str) -> dict:
        value = node.get(key, {})
        if not isinstance(value, dict):
            raise self.fail(f"{key} is not a mapping")
        return value

    def _module(self, node: dict) -> torch.nn.Module:
        cls = self.cls(node.get("class"))
        if not issubclass(cls, torch.nn.Module):
            raise self.fail(f"{cls.__name__} is not a torch module")
        module = cls.__new__(cls)
        torch.nn.Module.__init__(module)
        self.register(node, module)
        module.training = bool(node.get("training", False))
        for name, value in self.mapping(node, "parameters").items():
            parameter = self.decode(value)
            if parameter is not None and not isinstance(parameter, torch.nn.Parameter):
                raise self.fail(f"parameter {name!r} is not a tensor")
            module._parameters[name] = parameter
        for name, value in self.mapping(node, "buffers").items():
            buffer = self.decode(value)
            if buffer is not None and not isinstance(buffer, torch.Tensor):
                raise self.fail(f"buffer {name!r} is not a tensor")
            module._buffers[name] = buffer
        module._non_persistent_buffers_set = {str(n) for n in node.get("non_persistent", [])}
        for name, value in self.mapping(node, "modules").items():
            child = self.decode(value)
            if child is not None and not isinstance(child, torch.nn.Module):
                raise self.fail(f"submodule {name!r} is not a module")
            module._modules[name] = child
        for name, value in self.mapping(node, "attrs").items():
            if name in _MODULE_BASE_ATTRS or name.startswith("__"):
                raise self.fail(f"module attribute {name!r} may not be set")
            module.__dict__[name] = self.decode(value)
        return module

    def attrs(self, node: dict) -> dict:
        out = {}
        for name, value in self.mapping(node, "attrs").items():
            if not isinstance(name, str) or name.startswith("__"):
                raise self.fail(f"attribute {name!r} may not be set")
            out[name] = self.decode(value)
        return out

    def _object(self, node: dict) -> Any:
        cls = self.cls(node.get("class"))
        if issubclass(cls, torch.nn.Module) or dataclasses.is_dataclass(cls):
            raise self.fail(f"{cls.__name__} saved as a plain object")
        obj = cls.__new__(cls)
        self.register(node, obj)
        obj.__dict__.update(self.attrs(node))
        return obj

    def _dataclass(self, node: dict) -> Any:
        cls = self.cls(node.get("class"))
        if not dataclasses.is_dataclass(cls):
            raise self.fail(f"{cls.__name__} is not a dataclass")
        attrs = self.attrs(node)
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = set(attrs) - set(fields)
        if unknown:
            raise self.fail(f"{cls.__name__} has no field(s) {', '.join(sorted(unknown))}")
        try:
            obj = cls(**{k: v for k, v in attrs.items() if fields[k].init})
        except (TypeError, ValueError, MatchoptError) as err:
            raise self.fail(f"{cls.__name__}: {err}") from None
        for name, value in attrs.items():
            if not fields[name].init:
                object.__setattr__(obj, name, value)
        return self.register(node, obj)


def load_state(data: bytes, kind: str, source: str = "model") -> Any:
    """The object in the bytes of a model file of ``kind`` (written by :func:`state_bytes`).

    Raises:
        StateError: not a model file (e.g. an old pickle-based one: refused unread), another
            kind, a newer format, or a header that names anything matchopt does not load.
    """
    try:
        with warnings.catch_warnings():
            # A foreign pickle protocol only draws a warning before the refusal below.
            warnings.simplefilter("ignore", UserWarning)
            content = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises many types for a foreign or crafted file
        reason = " ".join(str(err).split())[:160]
        raise StateError(
            f"{source}: not a matchopt model file; it was not read, since only tensors and "
            f"plain data are loaded (model files of matchopt 0.1 were pickles and must be "
            f"saved again) ({reason})"
        ) from None
    header_text = content.get("header") if isinstance(content, dict) else None
    tensors = content.get("tensors") if isinstance(content, dict) else None
    if not isinstance(header_text, str) or not isinstance(tensors, dict):
        raise StateError(f"{source}: not a matchopt model file (no header)")
    try:
        header = json.loads(header_text)
    except json.JSONDecodeError as err:
        raise StateError(f"{source}: not a matchopt model file (header: {err})") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise StateError(f"{source}: not a matchopt model file (format)")
    version = header.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise StateError(
            f"{source}: model file format {version!r} is newer than this matchopt "
            f"({__version__}) reads ({FORMAT_VERSION}); upgrade matchopt"
        )
    if header.get("kind") != kind:
        raise StateError(f"{source}: holds a {header.get('kind')!r} model, not a {kind!r} one")
    return _Decoder(tensors, source).decode(header.get("tree"))


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
    if not path.is_file():
        raise StateError(f"{path}: no such model file")
    return load_state(path.read_bytes(), kind, str(path))
