"""Writing files so that an interruption never leaves a partial or corrupted one."""

from __future__ import annotations

import contextlib
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path

from matchopt.errors import MatchoptError
from matchopt.safe_paths import open_folder


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

    The bytes reach the disk (fsync) before the rename, and the rename before returning, so
    that a crash or power loss right after leaves the old file or the new one, never an empty
    one. The folder is created if needed. A file that is replaced keeps its permission bits; a
    new one gets the usual permissions (0666 minus the umask); a link at ``path`` is replaced,
    never written through (:meth:`matchopt.safe_paths.Folder.write`).
    """
    path = Path(path)
    with open_folder(path.parent, create=True) as folder:
        folder.write(path.name, data, owned=False)


#: What a lock file may hold: nothing, or the record :func:`file_lock` writes.
_LOCK_RECORD = re.compile(rb"(pid \d{1,10}\n?)?")


def _open_lock_file(path: Path):  # noqa: ANN202 (a text file object)
    """``path`` opened for reading and writing without following a link (created if missing),
    after checking it is a lock file matchopt could have made (:func:`file_lock`)."""
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as err:
        if path.is_symlink():
            raise MatchoptError(f"{path} is a link; remove it (matchopt follows none)") from None
        raise MatchoptError(f"cannot open the lock file {path}: {err.strerror or err}") from None
    status = os.fstat(fd)
    problem = None
    if not stat.S_ISREG(status.st_mode):
        problem = "is not a regular file"
    elif status.st_nlink != 1:
        problem = "has another name (a hard link)"
    elif hasattr(os, "getuid") and status.st_uid != os.getuid():
        problem = "belongs to another user"
    elif status.st_size > 64 or not _LOCK_RECORD.fullmatch(os.pread(fd, 64, 0)):
        problem = "holds something other than a lock record"
    if problem:
        os.close(fd)
        raise MatchoptError(f"{path} {problem}; remove it to run here (nothing was written)")
    return os.fdopen(fd, "r+")


class FileLocked(MatchoptError):
    """Another process holds the lock (:func:`file_lock` with ``wait=False``)."""

    def __init__(self, path: Path, holder: str):
        self.path, self.holder = path, holder
        super().__init__(f"{path} is locked by {holder}")


@contextlib.contextmanager
def file_lock(path: str | os.PathLike, wait: bool = True) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (POSIX ``flock``) for the ``with`` block.

    The operating system releases it when the holder dies, so a killed run leaves no stale lock.
    The lock file holds the holder's pid, for messages, and is removed when the block ends (a
    finished run leaves none behind). A process that waited on a file removed meanwhile takes
    the lock again on the new one (the inode check), so two holders never overlap.

    The file is opened without following a link (``O_NOFOLLOW``); what is there must be a
    regular file of this user with one name (no hard link elsewhere) that is empty or holds a
    lock record (``pid N``), else nothing is written and the reason is raised: a link planted
    at ``path`` cannot make matchopt overwrite a file elsewhere.

    Args:
        path: the lock file (created if missing).
        wait: wait for the holder to finish; False raises at once.

    Raises:
        FileLocked: ``wait`` is False and another process holds the lock.
    """
    try:
        import fcntl
    except ImportError:  # no flock (Windows): writes stay atomic, parallel runs repeat work
        yield
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        handle = _open_lock_file(path)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise FileLocked(path, holder) from None
        try:
            same = os.stat(path).st_ino == os.fstat(handle.fileno()).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        handle.close()  # the holder removed this file: lock the one now at ``path``
    with handle:
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}\n")
        handle.flush()
        try:
            yield
        finally:
            path.unlink(missing_ok=True)  # while still holding it, then release
            fcntl.flock(handle, fcntl.LOCK_UN)
