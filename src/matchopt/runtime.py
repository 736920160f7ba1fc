"""Process-level settings: compute threads, and malloc for long training runs."""

from __future__ import annotations

import ctypes
import math
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from matchopt.errors import MatchoptError, printable

if TYPE_CHECKING:
    import torch


def keep_freed_memory() -> bool:
    """Ask glibc malloc to keep freed blocks instead of returning them to the system.

    MATCH-OPT's training step allocates the same few MB of temporaries thousands of times;
    with glibc's defaults every large block is a fresh mmap whose pages fault in again, which
    costs about a quarter of a step on the machines we measured. Applications (the CLI, the
    benchmarks) call this once; a library import never does. Returns False where not glibc.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    limit = 1 << 30
    return bool(libc.mallopt(m_mmap_threshold, limit) and libc.mallopt(m_trim_threshold, limit))


# --- Threads ----------------------------------------------------------------------------------

#: Environment variable that sets the default number of compute threads of a matchopt process.
THREADS_ENV = "MATCHOPT_THREADS"
#: Most threads the default gives one run: matchopt's networks are small, and more threads than
#: free cores make PyTorch's OpenMP threads wait on each other (measured 16x slower on a loaded
#: 2-core machine; docs/benchmarks.md: Threads).
MAX_DEFAULT_THREADS = 4
#: Most threads a run may ask for, per core of the machine: far more threads than cores only
#: makes them wait on each other (1000 threads ran 4.6x slower on 2 cores).
MAX_THREADS_PER_CORE = 4


def default_threads() -> int:
    """Compute threads of one run: ``$MATCHOPT_THREADS``, else half the cores (1 to 4).

    Half the cores, so that a run leaves room for whatever else the machine does (a browser,
    another run) instead of collapsing when it has to share (measurements: docs/benchmarks.md).

    Raises:
        MatchoptError: ``$MATCHOPT_THREADS`` is not a whole number >= 1.
    """
    text = os.environ.get(THREADS_ENV, "").strip()
    if text:
        return check_threads(text, f"${THREADS_ENV}")
    return max(1, min(MAX_DEFAULT_THREADS, (os.cpu_count() or 1) // 2))


def max_threads() -> int:
    """Most compute threads a run may ask for: :data:`MAX_THREADS_PER_CORE` per core."""
    return MAX_THREADS_PER_CORE * (os.cpu_count() or 1)


def check_threads(value: object, name: str = "--threads") -> int:
    """``value`` as a thread count from 1 to :func:`max_threads`, or a one-line error naming
    ``name``."""
    try:
        threads = int(str(value).strip())
    except ValueError:
        raise MatchoptError(f"{name} {value!r}: expected a whole number of threads") from None
    if threads < 1:
        raise MatchoptError(f"{name} {value}: needs at least 1 thread")
    cap = max_threads()
    if threads > cap:
        raise MatchoptError(
            f"{name} {threads}: at most {cap} threads ({MAX_THREADS_PER_CORE} per core, "
            f"{os.cpu_count() or 1} cores here); more only make them wait on each other"
        )
    return threads


#: Whether the application chose the threads (:func:`set_threads`), and how many
#: :func:`limit_threads` blocks are open: while either holds, methods keep those threads.
_threads_chosen = {"application": False, "blocks": 0}


def set_threads(threads: int | None = None) -> int:
    """Use ``threads`` (default :func:`default_threads`) compute threads in this process, for
    PyTorch and every BLAS/OpenMP library (threadpoolctl), and in processes it starts.

    Applications (the CLI, benchmark scripts) call this once; the library itself only limits
    threads inside :func:`limit_threads` blocks. Returns the number set.

    Raises:
        MatchoptError: ``threads`` is not a whole number from 1 to :func:`max_threads`.
    """
    import torch
    from threadpoolctl import threadpool_limits

    threads = default_threads() if threads is None else check_threads(threads)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(threads)
    torch.set_num_threads(threads)
    threadpool_limits(limits=threads)
    _threads_chosen["application"] = True
    return threads


@contextmanager
def limit_threads(threads: int | None = None) -> Iterator[int]:
    """Within the block, use ``threads`` compute threads (default :func:`default_threads`);
    the previous settings come back after it. Yields the number used.

    Raises:
        MatchoptError: ``threads`` is not a whole number from 1 to :func:`max_threads`.
    """
    import torch
    from threadpoolctl import threadpool_limits

    threads = default_threads() if threads is None else check_threads(threads)
    before = torch.get_num_threads()
    with threadpool_limits(limits=threads):
        torch.set_num_threads(threads)
        _threads_chosen["blocks"] += 1
        try:
            yield threads
        finally:
            _threads_chosen["blocks"] -= 1
            torch.set_num_threads(before)


@contextmanager
def default_threads_unless_chosen() -> Iterator[None]:
    """:func:`limit_threads` with the default, unless the threads were chosen already (by
    :func:`set_threads` or an open :func:`limit_threads` block): what a method's ``fit`` and
    ``propose`` run in, so that code calling them directly gets the same policy as the CLI."""
    if _threads_chosen["application"] or _threads_chosen["blocks"]:
        yield
        return
    with limit_threads():
        yield


# --- Devices ----------------------------------------------------------------------------------

#: Environment variable that sets the default torch device of a matchopt process.
DEVICE_ENV = "MATCHOPT_DEVICE"


def resolve_device(name: str | None = None, option: str = "--device"):
    """The torch device ``name`` names, checked to exist here.

    ``name``: ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"`` or ``"auto"`` (the first GPU if torch
    sees one, else the CPU); None = ``$MATCHOPT_DEVICE``, else ``"cpu"``. Random draws stay on
    the CPU whatever the device (methods draw there and move the numbers), so a seed gives the
    same draws everywhere; results on a GPU still differ from the CPU's by float rounding.

    Raises:
        MatchoptError: an unknown device, or one this machine or this torch build lacks.
    """
    import torch

    if name is None:
        name = os.environ.get(DEVICE_ENV, "").strip() or "cpu"
        option = f"${DEVICE_ENV}" if os.environ.get(DEVICE_ENV, "").strip() else option
    text = str(name).strip().lower()
    if text == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        raise MatchoptError(
            f"{option} {name!r} is not a device; use cpu, cuda, cuda:<index>, mps or auto"
        ) from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise MatchoptError(
                f"{option} {name!r}: torch {torch.__version__} sees no CUDA GPU here (a CPU "
                "build, or no driver); use --device cpu, or install a CUDA build of torch"
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise MatchoptError(
                f"{option} {name!r}: this machine has {torch.cuda.device_count()} CUDA device(s)"
            )
    elif device.type == "mps":
        if not torch.backends.mps.is_available():
            raise MatchoptError(f"{option} {name!r}: this machine has no Apple GPU (mps)")
    elif device.type != "cpu":
        raise MatchoptError(f"{option} {name!r}: matchopt runs on cpu, cuda or mps devices")
    return device


# --- Seeds ------------------------------------------------------------------------------------

#: Largest seed: one bound that every consumer of a seed accepts (numpy's legacy and
#: scikit-learn's ``random_state`` take 32-bit seeds, torch at most 64 bits, records int64).
MAX_SEED = 2**32 - 1


@contextmanager
def seeded_torch_rng(seed: int, device: torch.device | str | None = None) -> Iterator[None]:
    """Seed torch's global generator of the CPU (and of ``device``, a GPU) with ``seed`` inside
    the block, and give the caller back the states it had afterwards.

    Methods build their networks inside it (initialized on the CPU: the same start on every
    device). ``torch.manual_seed`` alone would reseed every GPU for good; this touches only the
    generators it restores.
    """
    import torch

    device = torch.device("cpu" if device is None else device)
    cuda = cuda_indices(device)
    mps_state = torch.mps.get_rng_state() if device.type == "mps" else None
    with torch.random.fork_rng(devices=cuda):
        torch.default_generator.manual_seed(seed)
        for index in cuda:
            torch.cuda.default_generators[index].manual_seed(seed)
        if mps_state is not None:
            torch.mps.manual_seed(seed)
        try:
            yield
        finally:
            if mps_state is not None:
                torch.mps.set_rng_state(mps_state)


def cuda_indices(device: torch.device | str) -> list[int]:
    """The CUDA device index ``device`` means ("cuda" alone: the current one), as a list; empty
    for other devices. Whose random generator a block on ``device`` draws from."""
    import torch

    device = torch.device(device)
    if device.type != "cuda":
        return []
    return [torch.cuda.current_device() if device.index is None else device.index]


#: Environment variable that sets the memory matchopt may plan to use, in GiB (default: what
#: the machine, or the container's limit, has available when the check runs).
MEMORY_ENV = "MATCHOPT_MEMORY_GIB"


def available_memory() -> int | None:
    """Bytes of memory a new allocation can take: ``$MATCHOPT_MEMORY_GIB`` if set, else the
    smaller of the machine's available memory (``MemAvailable``) and what a cgroup limit
    leaves; None where neither can be read (then nothing is refused)."""
    chosen = os.environ.get(MEMORY_ENV)
    if chosen:
        return memory_limit(chosen)
    found = []
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    try:
        with (
            open("/sys/fs/cgroup/memory.max") as limit,
            open("/sys/fs/cgroup/memory.current") as current,
        ):
            text = limit.read().strip()
            if text != "max":
                found.append(max(0, int(text) - int(current.read().strip())))
    except (OSError, ValueError):
        pass
    return min(found) if found else None


#: Largest ``$MATCHOPT_MEMORY_GIB`` taken (a pebibyte): beyond, the number is a mistake.
MAX_MEMORY_GIB = 2**20


def memory_limit(text: str) -> int:
    """Bytes of the ``$MATCHOPT_MEMORY_GIB`` setting ``text``: a number of GiB above 0 and at
    most :data:`MAX_MEMORY_GIB` (inf, NaN, 0 and negative numbers are refused).

    Raises:
        MatchoptError: naming the setting and what it takes.
    """
    try:
        gib = float(text)
    except ValueError:
        gib = math.nan
    if not 0 < gib <= MAX_MEMORY_GIB:
        raise MatchoptError(
            f"${MEMORY_ENV}={printable(text, 60)!r}: expected a number of GiB above 0 and at "
            f"most {MAX_MEMORY_GIB:,}"
        )
    return int(gib * 2**30)


def check_memory(needed: float, what: str) -> None:
    """Refuse, before allocating, work whose estimated peak ``needed`` (bytes) exceeds
    :func:`available_memory`, naming the figure and the limit."""
    available = available_memory()
    if available is not None and needed > available:
        raise MatchoptError(
            f"{what} needs about {needed / 2**30:.1f} GiB of memory, more than the "
            f"{available / 2**30:.1f} GiB available (set ${MEMORY_ENV} to plan for another "
            "limit)"
        )
