"""Writing files so that an interruption never leaves a partial or corrupted one."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from matchopt.errors import MatchoptError


def check_output_folder(path: str | os.PathLike, what: str = "output folder") -> Path:
    """Make sure results can be written under ``path`` before any work starts (hours of
    training must not end in an unwritable folder). Creates it if missing.

    Raises:
        MatchoptError: ``path`` is a file, cannot be created, or is not writable.
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise MatchoptError(f"{what} {path} is a file, not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise MatchoptError(f"cannot create {what} {path}: {err.strerror or err}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise MatchoptError(f"{what} {path} is not writable")
    return path


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename: never a partial file.

    The folder is created if needed; the file gets the usual permissions (0666 minus the umask).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        # mkstemp makes owner-only files; give the usual permissions (0666 minus the umask).
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
