"""Each running cell's own progress, shown by the driver while several workers run.

A worker process runs its cell with the method's progress bars on, but writes them into a
:class:`CellStatusStream` instead of the terminal: the stream keeps the bar's latest line and
sends it, at most twice a second, to the driver through a queue. The driver's
:class:`RunningCells` shows one line per running cell (task/method/seed and its latest bar)
under the grid's bar, and the grid's time left is estimated from the measured times of the
cells that finished (:func:`time_left`).
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

from tqdm import tqdm

#: Seconds between two lines a worker sends for one cell.
SEND_EVERY = 0.5
#: The driver's queue, in a pool worker (set by the pool's initializer).
_worker_queue: Any = None


def use_status_queue(queue: Any) -> None:
    """In a pool worker: send the progress of this worker's cells to ``queue``."""
    global _worker_queue
    _worker_queue = queue


class CellStatusStream:
    """A file-like stderr for a worker's cell: sends the latest progress line to ``queue``."""

    def __init__(self, queue: Any, name: str):
        self.queue, self.name = queue, name
        self.latest, self.sent_at = "", 0.0

    def write(self, text: str) -> int:
        # tqdm redraws a line after "\r"; the last non-empty piece is the bar as it is now.
        pieces = [p.strip() for p in text.replace("\n", "\r").split("\r") if p.strip()]
        if pieces:
            self.latest = pieces[-1]
            now = time.monotonic()
            if now - self.sent_at >= SEND_EVERY:
                self.sent_at = now
                self._send(self.latest)
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def close(self) -> None:
        self._send(None)  # the cell ended: its line goes away

    def _send(self, line: str | None) -> None:
        try:
            self.queue.put((self.name, line))
        except (OSError, EOFError, BrokenPipeError):  # the driver stopped listening
            pass


def run_with_status(name: str, function: Any, *args: Any, **kwargs: Any) -> Any:
    """``function(*args, progress=True, **kwargs)`` in a pool worker, its bars sent to the
    driver's queue (:func:`use_status_queue`); without one, with no bars."""
    if _worker_queue is None:
        return function(*args, **kwargs)
    stream = CellStatusStream(_worker_queue, name)
    saved, sys.stderr = sys.stderr, stream
    try:
        return function(*args, progress=True, **kwargs)
    finally:
        sys.stderr = saved
        stream.close()


class RunningCells:
    """One status line per running cell under the grid's bar (tqdm positions 1, 2, ...)."""

    def __init__(self, slots: int, disable: bool = False):
        self.lines = [
            tqdm(total=0, bar_format="{desc}", position=i + 1, leave=False, disable=disable)
            for i in range(slots)
        ]
        self.where: dict[str, int] = {}

    def show(self, name: str, line: str | None) -> None:
        """Show the cell's latest line (None: the cell ended, free its line)."""
        if line is None:
            slot = self.where.pop(name, None)
            if slot is not None:
                self.lines[slot].set_description_str("", refresh=True)
            return
        if name not in self.where:
            free = set(range(len(self.lines))) - set(self.where.values())
            if not free:
                return
            self.where[name] = min(free)
        self.lines[self.where[name]].set_description_str(f"  {name}: {line}"[:200], refresh=True)

    def drain(self, queue: Any) -> None:
        """Show every line waiting in ``queue``."""
        while True:
            try:
                name, line = queue.get_nowait()
            except Exception:  # queue.Empty, or a manager that went away
                return
            self.show(name, line)

    def close(self) -> None:
        for line in self.lines:
            line.close()


def time_left(seconds: Sequence[float], cells_left: int, workers: int) -> str:
    """The grid's time left in words, from the median time of the cells finished so far."""
    if not seconds or cells_left <= 0:
        return "?" if cells_left > 0 else "0 s"
    estimate = statistics.median(seconds) * cells_left / max(1, workers)
    if estimate < 90:
        return f"{estimate:.0f} s"
    if estimate < 5400:
        return f"{estimate / 60:.0f} min"
    return f"{estimate / 3600:.1f} h"
