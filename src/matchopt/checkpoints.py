"""Training snapshots, so that a long run killed in the middle continues where it stopped.

A method that supports them (``Method.resumable``) saves, every ``every`` seconds at the end of
an epoch, everything its training loop needs to go on: parameters, optimizer state, the state
of its random generators, the epoch, and what it has measured so far. The file is written
atomically (a temporary file, then a rename) with ``torch.save`` and read with
``torch.load(weights_only=True)``: tensors and plain data only. A rerun of the same command finds
the snapshot, checks that it belongs to the same run (method, config, seed and data, by a
digest), restores it and trains the remaining epochs: the designs are the same as those of an
uninterrupted run. A fit of several loops (MATCH-OPT's training, then its refit on all rows) keeps
one file per loop (``seed0.pt``, ``seed0.refit.pt``), so a kill in a later loop keeps the earlier
ones finished.

The last epoch always leaves a snapshot (the finished state), and it stays after ``fit``: a run
killed after its training, while it searches or is scored, takes its trained model from there
instead of training again. ``matchopt run`` and ``bench`` remove the snapshot once the run's
designs are scored, before they write its record; a caller of
:meth:`~matchopt.methods.Method.resume_from` removes it when its results are stored (a fit from
a finished snapshot trains nothing and gives the same model).

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
import dataclasses
import glob
import hashlib
import io
import json
import os
import secrets
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from matchopt.errors import MatchoptError
from matchopt.io import atomic_write_bytes

#: Environment variable: seconds between snapshots (default :data:`DEFAULT_EVERY`).
EVERY_ENV = "MATCHOPT_CHECKPOINT_SECONDS"
#: Seconds between snapshots of a long training run.
DEFAULT_EVERY = 300.0
#: The folder of a results folder that holds the snapshots of its running cells.
SNAPSHOT_FOLDER = ".snapshots"


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


def run_key(method: Any, x: np.ndarray, y: np.ndarray) -> str:
    """Digest of what makes a run: method class, config, seed and the offline data."""
    digest = hashlib.sha256()
    config = dataclasses.asdict(method.config_)
    digest.update(json.dumps([type(method).__name__, config, method.seed], default=str).encode())
    digest.update(np.ascontiguousarray(x).tobytes())
    digest.update(np.ascontiguousarray(y).tobytes())
    return digest.hexdigest()


class TrainingCheckpoint:
    """The snapshot file of one run.

    Args:
        path: the snapshot file.
        every: seconds between snapshots (0: after every epoch).
    """

    def __init__(self, path: str | os.PathLike, every: float | None = None):
        self.path = Path(path)
        self.every = default_every() if every is None else float(every)
        self.key: str | None = None
        self._last = self._started = time.monotonic()
        #: Seconds of training in earlier sittings, up to the snapshot this one resumed (0: none).
        self.earlier_seconds = 0.0
        # Tells a snapshot written by this process from one of an earlier sitting.
        self._sitting = secrets.token_hex(8)

    def bind(self, key: str) -> None:
        """Tie the snapshots to one run (see :func:`run_key`)."""
        self.key = key

    def stage_path(self, stage: str) -> Path:
        """The file of ``stage``: :attr:`path` for ``main``, ``<stem>.<stage><suffix>`` beside it
        for the others."""
        if stage == "main":
            return self.path
        return self.path.with_name(f"{self.path.stem}.{stage}{self.path.suffix}")

    def load(self, stage: str) -> dict[str, Any] | None:
        """The snapshot of ``stage`` of this run, or None (none, or one of another run)."""
        path = self.stage_path(stage)
        if not path.is_file():
            return None
        try:
            # Onto the CPU: a snapshot written on a GPU then resumes on a CPU-only machine. Every
            # tensor is restored through load_state_dict, copy_ or set_state, which place it.
            state = torch.load(io.BytesIO(path.read_bytes()), map_location="cpu", weights_only=True)
        except Exception:  # a foreign or broken file: start afresh, it is overwritten
            return None
        if not isinstance(state, dict) or state.get("key") != self.key:
            return None
        if state.get("stage") != stage:
            return None
        if state.get("sitting") != self._sitting:
            self.earlier_seconds = float(state.get("seconds", 0.0))
        return state

    def due(self) -> bool:
        return time.monotonic() - self._last >= self.every

    def save(self, stage: str, state: dict[str, Any]) -> None:
        """Write ``state`` (tensors and plain data) atomically."""
        buffer = io.BytesIO()
        seconds = self.earlier_seconds + time.monotonic() - self._started
        torch.save(
            {
                **state,
                "key": self.key,
                "stage": stage,
                "seconds": seconds,
                "sitting": self._sitting,
            },
            buffer,
        )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(self.stage_path(stage), buffer.getvalue())
        self._last = time.monotonic()


def remove_snapshot(path: str | os.PathLike) -> None:
    """Remove the snapshot ``path`` and those of its other stages
    (:meth:`TrainingCheckpoint.stage_path`), then the folders that this leaves empty, up to and
    including the ``.snapshots`` folder a run keeps them in."""
    path = Path(path)
    path.unlink(missing_ok=True)
    for stage_file in path.parent.glob(f"{glob.escape(path.stem)}.*{glob.escape(path.suffix)}"):
        stage_file.unlink(missing_ok=True)
    if SNAPSHOT_FOLDER not in path.parent.parts:
        return
    for folder in path.parents:
        try:
            folder.rmdir()  # only an empty folder goes
        except OSError:
            return
        if folder.name == SNAPSHOT_FOLDER:
            return


def generator_state(rng: np.random.Generator) -> dict[str, Any]:
    """A numpy generator's state as plain data (restored by :func:`set_generator_state`)."""
    return rng.bit_generator.state


def set_generator_state(rng: np.random.Generator, state: dict[str, Any]) -> None:
    rng.bit_generator.state = state


class LoopSnapshots:
    """Snapshots of one training loop: its parts (modules, optimizers, generators) restored at
    the start and saved at the end of an epoch when due, and at the end of the last.

    Usage in a method's ``fit`` (``parts`` by name; extra values such as losses go along)::

        snapshots = LoopSnapshots(self, data, model=net, optimizer=opt, noise=generator)
        start = snapshots.start(losses)  # 0, or the epoch a killed run had reached
        for epoch in range(start, epochs):
            ...
            snapshots.save(epoch + 1, epochs, losses=losses)  # when due, and after the last

    Does nothing for a method without a ``training_checkpoint``.

    Args:
        method: the method being fitted.
        data: its offline data (part of the run's identity).
        stage: tells apart several loops of one fit (e.g. training and refit).
        **parts: torch modules, optimizers and generators, numpy generators.
    """

    def __init__(self, method: Any, data: Any, stage: str = "main", **parts: Any):
        self.checkpoint = getattr(method, "training_checkpoint", None)
        self.stage = stage
        self.parts = parts
        if self.checkpoint is not None:
            self.checkpoint.bind(run_key(method, data.x, data.y))

    def _state_of(self, part: Any) -> Any:
        if isinstance(part, np.random.Generator):
            return generator_state(part)
        if isinstance(part, torch.Generator):
            return part.get_state()
        return part.state_dict()

    def resume(self) -> dict[str, Any] | None:
        """Restore the parts from a snapshot of this run; returns its saved values (with
        ``epoch``), or None when there is nothing to resume."""
        if self.checkpoint is None:
            return None
        saved = self.checkpoint.load(self.stage)
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
        return saved["values"] | {"epoch": int(saved["epoch"])}

    def start(self, losses: list[float]) -> int:
        """:meth:`resume`, refill ``losses`` in place with the saved ones; returns the first
        epoch to train (0 without a snapshot). Other saved values are in ``self.saved``."""
        self.saved = self.resume() or {}
        losses[:] = self.saved.get("losses", [])
        _Interrupt.training = self.checkpoint is not None
        return self.saved.get("epoch", 0)

    def save(self, epoch: int, epochs: int, **values: Any) -> None:
        """After ``epoch`` of ``epochs`` epochs: a snapshot if one is due, and always after the
        last (the finished state, kept until the run's designs are scored). After a Ctrl-C
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


class TorchGlobalRNG:
    """PyTorch's global generators as a snapshot part (for loops whose dropout draws from them):
    CPU, and the CUDA devices given."""

    def __init__(self, cuda_devices: tuple[int, ...] | list[int] = ()):
        self.cuda_devices = list(cuda_devices)

    def state_dict(self) -> dict[str, Any]:
        return {
            "cpu": torch.get_rng_state(),
            "cuda": [torch.cuda.get_rng_state(d) for d in self.cuda_devices],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        torch.set_rng_state(state["cpu"])
        for device, cuda_state in zip(self.cuda_devices, state["cuda"]):
            torch.cuda.set_rng_state(cuda_state, device)
