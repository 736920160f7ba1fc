"""Training snapshots, so that a long run killed in the middle continues where it stopped.

A method that supports them (:class:`~matchopt.methods.training.Resumable`) saves, every
``every`` seconds at the end of an epoch, everything its training loop needs to go on:
parameters, optimizer state, the state of its random generators, the epoch, and what it has
measured so far. The file is a matchopt
state file (:mod:`matchopt.state`: safetensors, tensors and plain data behind a JSON header, read
with no pickle), written atomically (a temporary file, then a rename) below the results folder
without following a link (:mod:`matchopt.safe_paths`). A rerun of the same command finds
the snapshot, checks that it belongs to the same run (method, config, seed and data, by a
digest), restores it and trains the remaining epochs: the designs are the same as those of an
uninterrupted run. A fit of several loops (MATCH-OPT's training, then its refit on all rows) keeps
one file per loop (``seed0.pt``, ``seed0.refit.pt``), so a kill in a later loop keeps the earlier
ones finished. A method made of several fits (``auto``'s pool) gives each fit a snapshot file of
its own beside the run's (:meth:`TrainingCheckpoint.part`: ``seed0.lower0.pt``,
``seed0.full0.member3.pt``) and keeps the Gaussian ensembles they share in a folder beside it
(``seed0.shared``, :attr:`TrainingCheckpoint.shared_folder`); removing the run's snapshot removes
them all. Snapshots of the older ``torch.save`` format are not read (a warning; the
training starts from scratch and writes the new format).

The last epoch always leaves a snapshot (the finished state), and it stays after ``fit``: a run
killed after its training, while it searches or is scored, takes its trained model from there
instead of training again. ``matchopt run`` and ``bench`` remove the snapshot once the run's
record is written (:func:`matchopt.bench.cells.save_record`): a record that cannot be written
(a full disk) leaves the snapshot, and the rerun takes the trained model from it; a caller of
:meth:`~matchopt.methods.training.Resumable.resume_from` removes it when its results are stored
(a fit from a finished snapshot trains nothing and gives the same model).

A snapshot is checked whole before anything is restored from it (:meth:`LoopSnapshots.start`): its
content must hash to the digest written with it (:func:`content_digest`: parts changed or mixed
after the save, such as weights of another epoch, are never trained on). Since anyone who edits
a file can compute a digest again, what it says is checked against the run it resumes too: its
epoch in ``0..epochs``, every part present with the shapes and types of the live modules,
optimizers and generators, each optimizer's settings (learning rate, betas...) equal to the live
one's, as many optimizer steps as the epochs it claims take (where the loop says how many an
epoch takes), the values the loop keeps (losses, one per epoch trained, and the method's own),
and its training time a number of seconds from 0 to a year
(:data:`~matchopt.records.MAX_SECONDS`). A snapshot of this run that fails a check (corrupted, or
crafted) is ignored with a one-line warning on stderr and the training starts from scratch; one
of another run (another key) is ignored silently. A snapshot that cannot be written (a full
disk) does not stop the run: a one-line warning, and the run goes on without it; the previous
snapshot stays whole (the writes are atomic), so that a rerun after a kill resumes from there.

A first Ctrl-C during a training loop that keeps snapshots (inside :func:`save_on_interrupt`,
which ``matchopt run`` and a one-worker ``bench`` use) does not stop the loop at once: the loop
finishes its epoch, writes a snapshot and then stops, so that a rerun continues from there
instead of from the last timed snapshot. A second Ctrl-C stops at once.

A snapshot also keeps the seconds the run had trained when it was written, over all sittings, so
that a resumed run's record gives the time of the whole training (:attr:`TrainingCheckpoint.
earlier_seconds`), not only that of its last sitting.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import json
import math
import numbers
import os
import re
import secrets
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from matchopt.errors import MatchoptError, printable
from matchopt.models.ensemble_cache import remove_cache_folder, remove_cache_temporaries
from matchopt.records import MAX_SECONDS
from matchopt.safe_paths import (
    SNAPSHOT_FOLDER,
    LinkError,
    managed_root,
    open_folder,
    parts_below,
    read_below,
    temporary_name,
    write_below,
)
from matchopt.state import MAX_FILE_BYTES, StateError, load_state, state_bytes

#: Environment variable: seconds between snapshots (default :data:`DEFAULT_EVERY`).
EVERY_ENV = "MATCHOPT_CHECKPOINT_SECONDS"
#: Seconds between snapshots of a long training run.
DEFAULT_EVERY = 300.0
#: The ``kind`` of the state files (:mod:`matchopt.state`) that hold snapshots.
SNAPSHOT_KIND = "training-snapshot"
#: The stages of one method's fit other than ``main``: MATCH-OPT's refit, an ensemble's
#: members, CMA-ES's search of n designs.
_LOOP_STAGE = r"refit|member(?:0|[1-9][0-9]{0,5})|search-[1-9][0-9]{0,8}"
#: The stages of a fit other than ``main``, each a file ``<stem>.<stage><suffix>``: those of
#: :data:`_LOOP_STAGE`, and the fits of a method made of several (``auto``'s pool member k on
#: the pseudo-offline rows, ``lower<k>``, and on all rows, ``full<k>``), each with the stages of
#: its own fit (``full0.member3``). Clean-ups delete these names only.
STAGE_NAME = re.compile(
    rf"(?:(?:lower|full)(?:0|[1-9][0-9]{{0,2}})(?:\.(?:{_LOOP_STAGE}))?)|{_LOOP_STAGE}"
)
#: The folder ``<stem>.shared`` beside a snapshot file, where the fits of a method made of
#: several keep the Gaussian ensembles they share (:mod:`matchopt.models.ensemble_cache`), so
#: that a killed run finds the members trained before the kill.
SHARED_SUFFIX = ".shared"


class _Interrupt:
    """What :func:`save_on_interrupt` knows: is it on, is a loop training, was a stop asked."""

    enabled = False
    training = False
    requested = False


def _on_interrupt(signum: int, frame: Any) -> None:
    if _Interrupt.training and not _Interrupt.requested:
        _Interrupt.requested = True
        print(
            "\nmatchopt: stopping after this epoch to save a training snapshot "
            "(Ctrl-C again: stop now)",
            file=sys.stderr,
        )
        return
    raise KeyboardInterrupt


@contextlib.contextmanager
def save_on_interrupt() -> Iterator[None]:
    """While inside, a first Ctrl-C (SIGINT) during a training loop that keeps snapshots asks it
    to finish its epoch, save a snapshot and then raise ``KeyboardInterrupt``; outside a loop,
    and at a second Ctrl-C, ``KeyboardInterrupt`` comes at once. Only in the main thread (where
    Python delivers signals) of a process that does not ignore SIGINT; elsewhere it changes
    nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:  # e.g. under nohup: keep ignoring it
        yield
        return
    previous = signal.signal(signal.SIGINT, _on_interrupt)
    _Interrupt.enabled, _Interrupt.training, _Interrupt.requested = True, False, False
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        _Interrupt.enabled, _Interrupt.training, _Interrupt.requested = False, False, False


def default_every() -> float:
    """``$MATCHOPT_CHECKPOINT_SECONDS``, else :data:`DEFAULT_EVERY`."""
    text = os.environ.get(EVERY_ENV, "").strip()
    if not text:
        return DEFAULT_EVERY
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise MatchoptError(f"${EVERY_ENV} {text!r}: expected seconds >= 0")
    return value


def run_key(name: str, config: Any, seed: int | Sequence[int], x: np.ndarray, y: np.ndarray) -> str:
    """Digest of what makes a run: the method's class name, its config, its seed (a seed batch's
    seeds) and the offline data."""
    digest = hashlib.sha256()
    fields = dataclasses.asdict(config)
    digest.update(json.dumps([name, fields, seed], default=str).encode())
    digest.update(np.ascontiguousarray(x).tobytes())
    digest.update(np.ascontiguousarray(y).tobytes())
    return digest.hexdigest()


def loop_snapshots(
    checkpoint: TrainingCheckpoint | None,
    name: str,
    config: Any,
    seed: int | Sequence[int],
    data: Any,
    stage: str,
    parts: dict[str, Any],
) -> LoopSnapshots:
    """:class:`LoopSnapshots` of the run ``name``/``config``/``seed`` on ``data`` (its
    :func:`run_key`, digested only where there is a snapshot file to bind)."""
    key = "" if checkpoint is None else run_key(name, config, seed, data.x, data.y)
    return LoopSnapshots(checkpoint, key, stage, **parts)


#: What a check of a snapshot returns: what is wrong with it, in words, or None.
Check = Callable[[dict[str, Any]], "str | None"]


def warn(message: str) -> None:
    """One line on stderr: ``matchopt: warning: <message>`` (names and text from files made
    printable, so that the line stays one line), above the progress bars of a training loop
    (``tqdm.write``), not in the middle of one."""
    from tqdm.auto import tqdm

    tqdm.write(f"matchopt: warning: {printable(message)}", file=sys.stderr)


def is_number(value: object) -> bool:
    """A real number, not a bool (nor a tensor)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def is_finite_number(value: object) -> bool:
    if not is_number(value):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


def is_integer(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def shown(value: object, limit: int = 40) -> str:
    """``repr`` of a bad value on one line, cut short (a tensor: its shape)."""
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def state_problem(saved: Any, live: Any, where: str) -> str | None:
    """What keeps ``saved`` from standing for ``live`` (a state dict, or any nest of dicts,
    lists, tensors and plain values), or None: the same keys and lengths, tensors of the same
    shape and dtype, numbers for numbers, the same strings, bools and Nones. ``where`` names
    ``saved`` in the message."""
    if isinstance(live, torch.Tensor):
        if not isinstance(saved, torch.Tensor):
            return f"{where} is {shown(saved)}, not a tensor"
        if saved.shape != live.shape:
            return f"{where} has shape {tuple(saved.shape)} instead of {tuple(live.shape)}"
        if saved.dtype != live.dtype:
            return f"{where} has dtype {saved.dtype} instead of {live.dtype}"
        return None
    if isinstance(live, Mapping):
        if not isinstance(saved, Mapping):
            return f"{where} is {shown(saved)}, not a dict"
        missing = [key for key in live if key not in saved]
        if missing:
            return f"{where} has no entry {shown(missing[0])}"
        extra = [key for key in saved if key not in live]
        if extra:
            return f"{where} has an unexpected entry {shown(extra[0])}"
        for key, value in live.items():
            problem = state_problem(saved[key], value, f"{where}[{key!r}]")
            if problem:
                return problem
        return None
    if isinstance(live, (list, tuple)):
        if not isinstance(saved, (list, tuple)):
            return f"{where} is {shown(saved)}, not a list"
        if len(saved) != len(live):
            return f"{where} has {len(saved)} entries instead of {len(live)}"
        for i, (saved_value, value) in enumerate(zip(saved, live)):
            problem = state_problem(saved_value, value, f"{where}[{i}]")
            if problem:
                return problem
        return None
    if isinstance(live, bool) or live is None or isinstance(live, str):
        if type(saved) is not type(live) or (isinstance(live, str) and saved != live):
            return f"{where} is {shown(saved)} instead of {shown(live)}"
        return None
    if is_number(live):
        if not is_number(saved) or (is_integer(live) and not is_integer(saved)):
            return f"{where} is {shown(saved)}, not a number like {shown(live)}"
        return None
    if type(saved) is not type(live):
        return f"{where} is {shown(saved)}, not a {type(live).__name__}"
    return None


#: What Adam (and AdamW) keeps of each parameter.
_ADAM_STATE = {"step", "exp_avg", "exp_avg_sq"}


def optimizer_state_problem(optimizer: torch.optim.Optimizer, saved: Any, where: str) -> str | None:
    """What keeps ``saved`` from loading into ``optimizer`` and stepping on, or None: the same
    parameter groups (settings and parameters), a state for known parameters only, with tensors
    of their shapes (Adam: exactly its moments and a finite step count >= 0)."""
    live = optimizer.state_dict()
    if not isinstance(saved, Mapping):
        return f"{where} is {shown(saved)}, not an optimizer state"
    for key in ("state", "param_groups"):
        if key not in saved:
            return f"{where} has no entry {key!r}"
    problem = state_problem(saved["param_groups"], live["param_groups"], f"{where}['param_groups']")
    if problem:
        return problem
    params: dict[Any, tuple[torch.Tensor, dict]] = {}
    for i, (saved_group, live_group, group) in enumerate(
        zip(saved["param_groups"], live["param_groups"], optimizer.param_groups)
    ):
        if list(saved_group["params"]) != list(live_group["params"]):
            return f"{where}['param_groups'][{i}] holds other parameters"
        for name, value in live_group.items():  # the run's settings: lr, betas, eps...
            if name != "params" and not _same_setting(saved_group[name], value):
                return (
                    f"{where}['param_groups'][{i}][{name!r}] is {shown(saved_group[name])}, "
                    f"but this run's is {shown(value)}"
                )
        params.update({key: (p, group) for key, p in zip(live_group["params"], group["params"])})
    state = saved["state"]
    if not isinstance(state, Mapping):
        return f"{where}['state'] is {shown(state)}, not a dict"
    adam = isinstance(optimizer, torch.optim.Adam)
    for key, entry in state.items():
        at = f"{where}['state'][{key!r}]"
        if key not in params:
            return f"{at}: no such parameter"
        if not isinstance(entry, Mapping):
            return f"{at} is {shown(entry)}, not a dict"
        param, group = params[key]
        if adam and entry:
            expected = _ADAM_STATE | ({"max_exp_avg_sq"} if group.get("amsgrad") else set())
            if set(entry) != expected:
                return f"{at} has entries {sorted(map(str, entry))} instead of {sorted(expected)}"
            step = entry["step"]
            if not isinstance(step, torch.Tensor) or step.ndim != 0:
                return f"{at}['step'] is {shown(step)}, not a count"
            if not (step.is_floating_point() and math.isfinite(step.item()) and step.item() >= 0):
                return f"{at}['step'] is {shown(step)}, not a count"
        for name, value in entry.items():
            if name == "step" and adam:
                continue
            if isinstance(value, torch.Tensor):
                if value.ndim > 0 and value.shape != param.shape:
                    return (
                        f"{at}[{name!r}] has shape {tuple(value.shape)} instead of "
                        f"{tuple(param.shape)}"
                    )
                if adam and (value.shape != param.shape or not value.is_floating_point()):
                    return f"{at}[{name!r}] is not a moment of shape {tuple(param.shape)}"
            elif not is_number(value):
                return f"{at}[{name!r}] is {shown(value)}, not a tensor or a number"
    return None


def _same_setting(saved: Any, live: Any) -> bool:
    """An optimizer setting of a snapshot equals the live one (betas: element by element)."""
    if isinstance(live, (list, tuple)):
        return isinstance(saved, (list, tuple)) and list(saved) == list(live)
    if isinstance(live, torch.Tensor):
        return isinstance(saved, torch.Tensor) and torch.equal(saved.cpu(), live.cpu())
    return type(saved) is type(live) and saved == live


def steps_problem(parts: dict[str, Any], saved: Mapping, epoch: int, per_epoch: int) -> str | None:
    """What makes the Adam optimizers' step counts in the snapshot parts ``saved`` other than
    ``epoch`` epochs of ``per_epoch`` steps, or None: a snapshot that claims epochs it did not
    train (its losses padded, its epoch raised) would skip them."""
    expected = epoch * per_epoch
    for name, part in parts.items():
        if not isinstance(part, torch.optim.Adam):
            continue
        steps = [entry["step"] for entry in saved[name]["state"].values() if entry]
        if expected and not steps:
            return f"snapshot part {name!r} took no optimizer step in {epoch} epochs"
        for step in steps:
            if float(step) != expected:
                return (
                    f"snapshot part {name!r} took {float(step):g} optimizer steps, not the "
                    f"{expected} of {epoch} epochs"
                )
    return None


def part_problem(part: Any, saved: Any, where: str) -> str | None:
    """What keeps the saved state of a snapshot part (module, optimizer, generator, or any
    object with ``state_dict``) from restoring it, or None. Nothing is changed: generators are
    tried on copies."""
    if isinstance(part, np.random.Generator):
        problem = state_problem(saved, generator_state(part), where)
        if problem:
            return problem
        try:
            set_generator_state(copy.deepcopy(part), saved)
        except Exception:
            return f"{where} is not a state of a {type(part.bit_generator).__name__} generator"
        return None
    if isinstance(part, torch.Generator):
        problem = state_problem(saved, part.get_state(), where)
        if problem:
            return problem
        try:
            torch.Generator(device=part.device).set_state(saved)
        except Exception:
            return f"{where} is not a state of a torch generator"
        return None
    if isinstance(part, torch.optim.Optimizer):
        return optimizer_state_problem(part, saved, where)
    return state_problem(saved, part.state_dict(), where)


class TrainingCheckpoint:
    """The snapshot file of one run.

    Args:
        path: the snapshot file.
        every: seconds between snapshots (0: after every epoch).
        root: the folder below which no link is followed (default :func:`snapshot_root`).
    """

    def __init__(
        self,
        path: str | os.PathLike,
        every: float | None = None,
        root: str | os.PathLike | None = None,
    ):
        self.path = Path(path)
        self.root = snapshot_root(self.path) if root is None else Path(root)
        parts_below(self.root, self.path)  # a path outside its root is a mistake of the caller
        self.every = default_every() if every is None else float(every)
        self.key: str | None = None
        self._last = self._started = time.monotonic()
        #: Seconds of training in earlier sittings, up to the snapshot this one resumed (0: none).
        self.earlier_seconds = 0.0
        # Tells a snapshot written by this process from one of an earlier sitting.
        self._sitting = secrets.token_hex(8)
        # A snapshot that could not be written is said once per run, not at every epoch.
        self._save_failed = False

    def bind(self, key: str) -> None:
        """Tie the snapshots to one run (see :func:`run_key`)."""
        self.key = key

    def stage_path(self, stage: str) -> Path:
        """The file of ``stage``: :attr:`path` for ``main``, ``<stem>.<stage><suffix>`` beside it
        for the others (:data:`STAGE_NAME`)."""
        if stage == "main":
            return self.path
        if not STAGE_NAME.fullmatch(stage):
            raise ValueError(f"snapshot stage {stage!r} is not one of STAGE_NAME")
        return self.path.with_name(f"{self.path.stem}.{stage}{self.path.suffix}")

    def part(self, stage: str) -> TrainingCheckpoint:
        """The snapshot file of one fit of a method made of several (``stage`` of
        :data:`STAGE_NAME`, such as ``lower0``): its own run's snapshots, whose stages are
        files beside this one (``<stem>.lower0.member3<suffix>``), so that
        :func:`remove_snapshot` of this file removes them too."""
        return TrainingCheckpoint(self.stage_path(stage), self.every, self.root)

    @property
    def shared_folder(self) -> Path:
        """The folder where the fits of a method made of several share Gaussian ensembles
        (:data:`SHARED_SUFFIX`); :func:`remove_snapshot` of this file removes it."""
        return _shared_folder(self.path)

    def load(
        self,
        stage: str,
        check: Check | None = None,
        restart: str = "training starts from scratch",
    ) -> dict[str, Any] | None:
        """The snapshot of ``stage`` of this run, or None: none, one of another run, or one that
        cannot be used.

        A snapshot of this run is checked before it is taken: its training time (``seconds``)
        must be a number of seconds from 0 to :data:`~matchopt.records.MAX_SECONDS`, and
        ``check`` (given the whole snapshot) must find nothing wrong. One that fails, or a file
        that cannot be read, is ignored with a one-line warning that ends with ``restart`` (what
        the caller does instead).

        Raises:
            LinkError: a folder on the way below :attr:`root`, or the file, is a link.
        """
        path = self.stage_path(stage)
        state = self._read(path, restart)
        if not isinstance(state, dict) or not _same_text(state.get("key"), self.key):
            return None  # another run's: it is overwritten
        if not _same_text(state.get("stage"), stage):
            return None
        seconds = state.get("seconds")
        content = {k: v for k, v in state.items() if k != "digest"}
        if not _same_text(state.get("digest"), content_digest(content)):
            problem = "snapshot parts do not match the digest written with them (changed or mixed)"
        elif not is_finite_number(seconds) or not 0 <= seconds <= MAX_SECONDS:
            problem = (
                f"snapshot training time {shown(seconds)} is not a number of seconds from 0 "
                f"to {MAX_SECONDS:g}"
            )
        else:
            try:
                problem = check(state) if check is not None else None
            except Exception as err:  # whatever a crafted file holds: never a traceback
                problem = f"snapshot cannot be checked ({type(err).__name__}: {err})"
        if problem:
            warn(f"{path}: {problem}; {restart}")
            return None
        if not _same_text(state.get("sitting"), self._sitting):
            self.earlier_seconds = float(seconds)
        return state

    def _read(self, path: Path, restart: str) -> Any:
        """The content of the snapshot file ``path``, None where there is none, or None with a
        warning where it cannot be read."""
        try:
            data = read_below(self.root, path, MAX_FILE_BYTES, "training snapshot")
        except LinkError:
            raise
        except MatchoptError as err:  # not a regular file, too large, unreadable
            warn(f"{err}; {restart}")
            return None
        if data is None:
            return None
        if data[:4] == b"PK\x03\x04":
            warn(
                f"{path}: a training snapshot of an older matchopt (torch.save), which is not "
                f"read; {restart} (and writes the current format)"
            )
            return None
        try:
            return load_state(data, SNAPSHOT_KIND, str(path))
        except StateError:  # a foreign or broken file: start afresh, it is overwritten
            warn(f"{path}: not a readable training snapshot; {restart}")
            return None

    def due(self) -> bool:
        return time.monotonic() - self._last >= self.every

    def save(self, stage: str, state: dict[str, Any]) -> None:
        """Write ``state`` (tensors and plain data) atomically.

        A write that fails (a full disk) does not stop the run: a one-line warning, the first
        time, and the previous snapshot of ``stage`` stays as it was. A link below
        :attr:`root` stops it (:class:`~matchopt.safe_paths.LinkError`)."""
        seconds = self.earlier_seconds + time.monotonic() - self._started
        entry = {**state, "key": self.key, "stage": stage, "seconds": seconds}
        entry["sitting"] = self._sitting
        entry["digest"] = content_digest(entry)
        data = state_bytes(entry, SNAPSHOT_KIND)
        path = self.stage_path(stage)
        try:
            write_below(self.root, path, data)
        except OSError as err:
            if not self._save_failed:
                self._save_failed = True
                warn(
                    f"could not save a training snapshot to {path}: {err.strerror or err}; "
                    "the run goes on without it"
                )
        self._last = time.monotonic()


def snapshot_root(path: str | os.PathLike) -> Path:
    """The folder below which the folders of the snapshot file ``path`` are matchopt's
    (:func:`managed_root` of its folder)."""
    return managed_root(Path(path).parent)


def snapshot_bytes(state: dict[str, Any]) -> bytes:
    """A snapshot's content as the bytes of its file (what :meth:`TrainingCheckpoint.save`
    writes; also for tests that craft one)."""
    return state_bytes(state, SNAPSHOT_KIND)


def read_snapshot(path: str | os.PathLike) -> dict[str, Any]:
    """The content of a snapshot file, unchecked (for tools and tests; a run checks it)."""
    path = Path(path)
    return load_state(path.read_bytes(), SNAPSHOT_KIND, str(path))


def content_digest(value: Any) -> str:
    """sha256 of a snapshot's content (nested dicts, lists, tensors and plain values) as it
    would be read back: a snapshot is used only if its parts still hash to the digest written
    with them, so that parts changed or mixed after the save (weights of another epoch, an
    optimizer state of another learning rate) are never trained on."""
    digest = hashlib.sha256()

    def feed(item: Any) -> None:
        if isinstance(item, torch.Tensor):
            data = item.detach().cpu().contiguous()
            digest.update(f"T{data.dtype}{tuple(data.shape)}".encode())
            digest.update(data.reshape(-1).view(torch.uint8).numpy().tobytes())
        elif isinstance(item, Mapping):
            digest.update(f"D{len(item)}".encode())
            for key in sorted(item, key=repr):
                digest.update(repr(key).encode())
                feed(item[key])
        elif isinstance(item, (list, tuple)):
            digest.update(f"L{len(item)}".encode())
            for part in item:
                feed(part)
        elif isinstance(item, np.ndarray):
            feed(torch.from_numpy(np.ascontiguousarray(item)))
        elif isinstance(item, (bool, np.bool_)):
            digest.update(f"B{bool(item)}".encode())
        elif is_integer(item):
            digest.update(f"I{int(item)}".encode())
        elif is_number(item):  # a numpy float reads back as a float: the same digest
            digest.update(f"F{float(item)!r}".encode())
        else:
            digest.update(f"V{item!r}".encode())

    feed(value)
    return digest.hexdigest()


def _same_text(value: Any, expected: str | None) -> bool:
    return isinstance(value, str) and value == expected


def snapshot_files(path: str | os.PathLike, root: str | os.PathLike | None = None) -> list[Path]:
    """The files of the snapshot ``path`` that exist: it and those of its other stages
    (:meth:`TrainingCheckpoint.stage_path`: names of :data:`STAGE_NAME` only), reached without
    following a link below ``root`` (default :func:`snapshot_root`)."""
    path = Path(path)
    root = snapshot_root(path) if root is None else root
    with open_folder(root, parts_below(root, path.parent)) as folder:
        if folder is None:
            return []
        return [path.with_name(name) for name in _stage_names(folder, path) if folder.is_file(name)]


def _stage_names(folder: Any, path: Path) -> list[str]:
    """The names in ``folder`` that are (or whose temporary files are) files of the snapshot
    ``path``: its own and those of its stages, exactly."""
    stem, suffix = f"{path.stem}.", path.suffix
    stages = set()
    for name in folder.names():
        if name.startswith(".") and name.endswith(".tmp"):
            name = name[1:-4]
        inner = name[len(stem) : len(name) - len(suffix)]
        if name.startswith(stem) and name.endswith(suffix) and STAGE_NAME.fullmatch(inner):
            stages.add(name)
    return [path.name, *sorted(stages)]


def remove_snapshot_temporaries(
    path: str | os.PathLike, root: str | os.PathLike | None = None
) -> None:
    """Remove the temporary files that a killed write left for the files of the snapshot
    ``path`` (:func:`snapshot_files`' names), each by its exact name."""
    path = Path(path)
    root = Path(snapshot_root(path) if root is None else root)
    with open_folder(root, parts_below(root, path.parent)) as folder:
        for name in _stage_names(folder, path) if folder is not None else ():
            folder.remove(temporary_name(name))
    remove_cache_temporaries(_shared_folder(path), root)


def _shared_folder(path: Path) -> Path:
    """The shared folder of the snapshot ``path`` (:attr:`TrainingCheckpoint.shared_folder`)."""
    return path.with_name(path.stem + SHARED_SUFFIX)


def remove_snapshot(path: str | os.PathLike, root: str | os.PathLike | None = None) -> None:
    """Remove the snapshot ``path`` and those of its other stages, each by its exact name (and
    the temporary file through which it is written), the ensembles of its shared folder
    (:attr:`TrainingCheckpoint.shared_folder`), then the folders that this leaves empty,
    up to and including the ``.snapshots`` folder a run keeps them in; no link below ``root``
    (default :func:`snapshot_root`) is followed."""
    path = Path(path)
    root = Path(snapshot_root(path) if root is None else root)
    parts = parts_below(root, path.parent)
    with open_folder(root, parts) as folder:
        if folder is None:
            return
        for name in _stage_names(folder, path):
            folder.remove(name)
            folder.remove(temporary_name(name))
    remove_cache_folder(_shared_folder(path), root)  # its cache files, then it if empty
    if SNAPSHOT_FOLDER not in parts:
        return
    top = len(parts) - 1 - parts[::-1].index(SNAPSHOT_FOLDER)
    for end in range(len(parts), top, -1):  # only an empty folder goes
        with open_folder(root, parts[: end - 1]) as parent:
            if parent is None or not parent.remove_folder(parts[end - 1]):
                return


def generator_state(rng: np.random.Generator) -> dict[str, Any]:
    """A numpy generator's state as plain data (restored by :func:`set_generator_state`)."""
    return rng.bit_generator.state


def set_generator_state(rng: np.random.Generator, state: dict[str, Any]) -> None:
    rng.bit_generator.state = state


#: A check of the values a loop saves beyond its losses: given them and the snapshot's epoch,
#: what is wrong, in words, or None.
ValuesCheck = Callable[[dict[str, Any], int], "str | None"]


class LoopSnapshots:
    """Snapshots of one training loop: its parts (modules, optimizers, generators) restored at
    the start and saved at the end of an epoch when due, and at the end of the last.

    Usage in a method's training (:meth:`~matchopt.methods.engine.TrainingRun.snapshots` makes
    them from the method's run context; ``parts`` by name; extra values such as losses go
    along)::

        snapshots = run.snapshots(data, model=net, optimizer=opt, noise=generator)
        start = snapshots.start(losses, epochs)  # 0, or the epoch a killed run had reached
        for epoch in range(start, epochs):
            ...
            snapshots.save(epoch + 1, epochs, losses=losses)  # when due, and after the last

    Does nothing without a ``checkpoint``.

    Args:
        checkpoint: the run's snapshot file, or None.
        key: the run's identity (:func:`run_key`), which a snapshot must match.
        stage: tells apart several loops of one fit (e.g. training and refit).
        **parts: torch modules, optimizers and generators, numpy generators.
    """

    def __init__(
        self, checkpoint: TrainingCheckpoint | None, key: str, stage: str = "main", **parts: Any
    ):
        self.checkpoint = checkpoint
        self.stage = stage
        self.parts = parts
        self.saved: dict[str, Any] = {}
        if self.checkpoint is not None:
            self.checkpoint.bind(key)

    def _state_of(self, part: Any) -> Any:
        if isinstance(part, np.random.Generator):
            return generator_state(part)
        if isinstance(part, torch.Generator):
            return part.get_state()
        return part.state_dict()

    def problem(
        self,
        state: dict[str, Any],
        epochs: int,
        check: ValuesCheck | None = None,
        steps_per_epoch: int | None = None,
    ) -> str | None:
        """What keeps the snapshot ``state`` from resuming this loop of ``epochs`` epochs, or
        None: its epoch, its parts against the live ones, its optimizer steps (with
        ``steps_per_epoch``: :func:`steps_problem`), its losses (a number per epoch trained),
        and ``check`` on its values."""
        epoch = state.get("epoch")
        if not is_integer(epoch):
            return f"snapshot epoch {shown(epoch)} is not an integer"
        if not 0 <= epoch <= epochs:
            return f"snapshot epoch {epoch} is outside 0..{epochs}"
        parts = state.get("parts")
        if not isinstance(parts, Mapping):
            return f"snapshot parts {shown(parts)} is not a dict"
        for name, part in self.parts.items():
            if name not in parts:
                return f"snapshot has no part {name!r}"
            problem = part_problem(part, parts[name], f"snapshot part {name!r}")
            if problem:
                return problem
        if steps_per_epoch is not None:
            problem = steps_problem(self.parts, parts, int(epoch), steps_per_epoch)
            if problem:
                return problem
        values = state.get("values")
        if not isinstance(values, Mapping):
            return f"snapshot values {shown(values)} is not a dict"
        # One float per epoch trained (NaN too: a training that diverged saves it).
        losses = values.get("losses")
        if not isinstance(losses, list) or len(losses) != epoch:
            return f"snapshot losses {shown(losses)} are not a list of {epoch} numbers"
        if not all(isinstance(loss, float) for loss in losses):
            return f"snapshot losses {shown(losses)} are not all numbers"
        return check(values, int(epoch)) if check is not None else None

    def resume(
        self, epochs: int, check: ValuesCheck | None = None, steps_per_epoch: int | None = None
    ) -> dict[str, Any] | None:
        """Restore the parts from a snapshot of this run; returns its saved values (with
        ``epoch``), or None when there is nothing to resume. The snapshot is checked whole
        first (:meth:`problem`, :meth:`TrainingCheckpoint.load`): one that fails leaves every
        part as it was (a warning, and the loop starts from scratch)."""
        if self.checkpoint is None:
            return None
        saved = self.checkpoint.load(
            self.stage, lambda state: self.problem(state, epochs, check, steps_per_epoch)
        )
        if saved is None:
            return None
        for name, part in self.parts.items():
            state = saved["parts"][name]
            if isinstance(part, np.random.Generator):
                set_generator_state(part, state)
            elif isinstance(part, torch.Generator):
                part.set_state(state)
            else:
                part.load_state_dict(state)
        return dict(saved["values"]) | {"epoch": int(saved["epoch"])}

    def start(
        self,
        losses: list[float],
        epochs: int,
        check: ValuesCheck | None = None,
        steps_per_epoch: int | None = None,
    ) -> int:
        """:meth:`resume` a loop of ``epochs`` epochs, refill ``losses`` in place with the saved
        ones; returns the first epoch to train (0 without a snapshot). Other saved values are in
        ``self.saved``; ``check`` (given them and the epoch) says what is wrong with them, so that
        a snapshot whose values the method could not restore is ignored before anything is
        restored from it; ``steps_per_epoch``: the optimizer steps an epoch takes, where the
        loop knows them (:func:`steps_problem`)."""
        self.saved = self.resume(epochs, check, steps_per_epoch) or {}
        losses[:] = self.saved.get("losses", [])
        _Interrupt.training = self.checkpoint is not None
        return self.saved.get("epoch", 0)

    def save(self, epoch: int, epochs: int, **values: Any) -> None:
        """After ``epoch`` of ``epochs`` epochs: a snapshot if one is due, and always after the
        last (the finished state, kept until the run's record is written). After a Ctrl-C
        (:func:`save_on_interrupt`): a snapshot, then ``KeyboardInterrupt``."""
        if self.checkpoint is None:
            return
        stop = _Interrupt.requested
        if epoch < epochs and not (stop or self.checkpoint.due()):
            return
        parts = {name: self._state_of(part) for name, part in self.parts.items()}
        self.checkpoint.save(self.stage, {"parts": parts, "values": values, "epoch": epoch})
        if epoch >= epochs:
            _Interrupt.training = False
        if stop:
            _Interrupt.requested = _Interrupt.training = False
            raise KeyboardInterrupt
