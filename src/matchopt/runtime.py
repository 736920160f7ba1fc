"""Process-level settings for long training runs."""

from __future__ import annotations

import ctypes
import sys


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
