"""Files inside folders matchopt writes into, reached without following links; bounded reads.

The user names a results folder (``matchopt run`` / ``bench --out``), and links on the way to it
are the user's. Below it, every folder is matchopt's (record folders, the snapshot folder,
shared ensembles), so matchopt follows no link there: each folder between the root and a file it
writes, replaces, reads or deletes is opened one component at a time relative to the folder
above it (``openat`` with ``O_NOFOLLOW | O_DIRECTORY``), and a component that is a link, or not a
folder, is refused with one line naming it. A link planted before a run, or swapped in while it
runs, can redirect neither a write nor a deletion out of the folder. Inside the folder reached:

- files are written through a temporary file and a rename (never a partial file), with the
  folder's descriptor, so the rename lands where the temporary file was made;
- files are read only when they are regular files (not a link, device, pipe or ``/proc`` file),
  up to a size;
- files are deleted by their exact names (the ``unlink`` of a link removes the link, never what it
  points to); nothing is deleted by pattern or by tree.

:func:`matchopt.io.atomic_write_bytes` writes every other file through the same code, with the
file's own folder (which the user named) as the root. Platforms without ``openat`` (Windows)
check each component with ``lstat`` instead.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path

from matchopt.errors import MatchoptError, printable

#: The folder of a results folder that holds the snapshots of its running cells
#: (:mod:`matchopt.checkpoints`) and the Gaussian ensembles its runs share.
SNAPSHOT_FOLDER = ".snapshots"

_AT = {os.open, os.mkdir, os.unlink, os.rename, os.rmdir, os.stat} <= os.supports_dir_fd
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_FOLDER_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
#: Longest file name most file systems take (a temporary name must fit it too).
NAME_MAX = 255
_CHUNK = 1 << 20


def name_max(folder: str | os.PathLike) -> int:
    """The longest file name (bytes) the file system of ``folder`` takes (:data:`NAME_MAX`
    where it does not say)."""
    try:
        return int(os.pathconf(folder, "PC_NAME_MAX"))
    except (OSError, ValueError, AttributeError):
        return NAME_MAX


def size_text(n: float) -> str:
    """``n`` bytes in words (e.g. ``16 MiB``)."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} bytes"


class LinkError(MatchoptError):
    """A link where matchopt follows none (below the root of a folder it writes into)."""


def link_error(path: Path, root: Path) -> LinkError:
    return LinkError(
        f"{printable(path)} is a link; matchopt follows no link inside {printable(root)} "
        "(remove it, or use another folder)"
    )


def parts_below(root: str | os.PathLike, path: str | os.PathLike) -> tuple[str, ...]:
    """The components of ``path`` below ``root`` (``path`` must be ``root / ...``, no ``..``)."""
    try:
        parts = Path(path).relative_to(Path(root)).parts
    except ValueError:
        raise MatchoptError(f"{printable(path)} is not inside {printable(root)}") from None
    if any(part in ("", ".", "..") for part in parts):
        raise MatchoptError(f"{printable(path)}: '..' inside {printable(root)}")
    return parts


class Folder:
    """A folder reached without following links below its root (:func:`open_folder`).

    Names given to its methods are plain file names inside it (no ``/``).
    """

    def __init__(self, path: Path, root: Path, fd: int | None):
        self.path, self.root, self.fd = path, root, fd

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> Folder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _name(self, name: str) -> str:
        if not name or "/" in name or os.sep in name or name in (".", ".."):
            raise MatchoptError(f"{printable(name)!r} is not a file name")
        return name if self.fd is not None else str(self.path / name)

    def entry(self, name: str) -> os.stat_result | None:
        """The entry ``name`` itself (a link is not followed), or None where there is none."""
        try:
            return os.stat(self._name(name), dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def is_file(self, name: str) -> bool:
        """``name`` is a regular file (not a link to one)."""
        entry = self.entry(name)
        return entry is not None and stat.S_ISREG(entry.st_mode)

    def names(self) -> list[str]:
        return sorted(os.listdir(self.fd if self.fd is not None else self.path))

    def child(self, name: str, create: bool = False) -> Folder | None:
        """The folder ``name`` inside this one (created when missing and ``create``), or None
        where it is missing; a link or a file there is refused."""
        path = self.path / name
        entry = self.entry(name)
        if entry is None and create:
            with contextlib.suppress(FileExistsError):
                os.mkdir(self._name(name), dir_fd=self.fd)
            entry = self.entry(name)
        if entry is None:
            return None
        if stat.S_ISLNK(entry.st_mode):
            raise link_error(path, self.root)
        if not stat.S_ISDIR(entry.st_mode):
            raise MatchoptError(f"{printable(path)} is not a folder; remove it")
        if self.fd is None:
            return Folder(path, self.root, None)
        try:
            fd = os.open(name, _FOLDER_FLAGS | _NOFOLLOW, dir_fd=self.fd)
        except OSError as err:  # swapped for a link since the check
            if err.errno in (errno.ELOOP, errno.ENOTDIR):
                raise link_error(path, self.root) from None
            raise
        return Folder(path, self.root, fd)

    def write(self, name: str, data: bytes, owned: bool = True) -> None:
        """Replace ``name`` by ``data`` atomically: a temporary file, fsync, a rename, fsync of
        the folder; a crash leaves the old file or the new one. A file that is replaced keeps
        its permission bits; a new one gets 0666 minus the umask.

        ``owned``: the folder is matchopt's (a results folder), whose temporary files have
        exact names (``.<name>.tmp``): one left by a killed run is replaced. Elsewhere the
        temporary name has a random part (never another's file)."""
        entry = self.entry(name)  # a file replaced keeps its bits; never the setuid ones
        replaced = entry is not None and stat.S_ISREG(entry.st_mode)
        mode = stat.S_IMODE(entry.st_mode) & 0o777 if replaced else _new_file_mode()
        tmp = self._temporary(name, owned)
        try:
            with os.fdopen(tmp[1], "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
                if hasattr(os, "fchmod"):  # the temporary file was made owner-only
                    os.fchmod(handle.fileno(), mode)
            if not hasattr(os, "fchmod"):
                os.chmod(self._name(tmp[0]), mode)
            os.replace(self._name(tmp[0]), self._name(name), src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            self.remove(tmp[0])
            raise
        self.sync()

    def _temporary(self, name: str, owned: bool) -> tuple[str, int]:
        """A new temporary file beside ``name``: its name and an open descriptor."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
        exact = temporary_name(name)
        owned = owned and len(exact) <= NAME_MAX
        for attempt in range(100):
            if owned and attempt < 2:
                tmp = exact
            elif len(f".{name}.12345678.tmp") <= NAME_MAX:
                tmp = f".{name}.{secrets.token_hex(4)}.tmp"
            else:
                tmp = f".matchopt-{secrets.token_hex(8)}.tmp"
            try:
                return tmp, os.open(self._name(tmp), flags, 0o600, dir_fd=self.fd)
            except FileExistsError:
                if owned and attempt == 0:
                    self.remove(tmp)  # left by a killed run: its exact name is matchopt's
        raise MatchoptError(f"cannot make a temporary file in {printable(self.path)}")

    def sync(self) -> None:
        """Make a rename in this folder durable (where folders can be synced)."""
        fd = self.fd
        if fd is None:
            try:
                fd = os.open(self.path, os.O_RDONLY)
            except OSError:
                return
        try:
            os.fsync(fd)
        except OSError:  # some file systems refuse fsync on folders; the rename stands anyway
            pass
        finally:
            if fd != self.fd:
                os.close(fd)

    def read(self, name: str, limit: int, what: str = "file") -> bytes | None:
        """The bytes of the regular file ``name`` (None where there is none), refused when it is
        a link, not a regular file, or over ``limit`` bytes (:func:`read_descriptor`)."""
        path = self.path / name
        entry = self.entry(name)
        if entry is None:
            return None
        if stat.S_ISLNK(entry.st_mode):
            raise link_error(path, self.root)
        try:
            fd = os.open(self._name(name), _READ_FLAGS | _NOFOLLOW, dir_fd=self.fd)
        except FileNotFoundError:
            return None
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise link_error(path, self.root) from None
            raise MatchoptError(f"cannot read {printable(path)}: {err.strerror}") from None
        return read_descriptor(fd, path, limit, what)

    def remove(self, name: str) -> bool:
        """Delete the entry ``name`` (a file, or a link itself), not a folder; whether one
        was there."""
        entry = self.entry(name)
        if entry is None or stat.S_ISDIR(entry.st_mode):
            return False  # a folder is never deleted as a file
        try:
            os.unlink(self._name(name), dir_fd=self.fd)
        except FileNotFoundError:
            return False
        return True

    def remove_folder(self, name: str) -> bool:
        """Delete the folder ``name`` if it is empty; whether it went."""
        try:
            os.rmdir(self._name(name), dir_fd=self.fd)
        except OSError:
            return False
        return True

    def rename(self, name: str, new: str) -> None:
        os.replace(self._name(name), self._name(new), src_dir_fd=self.fd, dst_dir_fd=self.fd)


def temporary_name(name: str) -> str:
    """The exact name of the temporary file through which matchopt writes ``name`` in a folder
    of its own (:meth:`Folder.write`)."""
    return f".{name}.tmp"


def _new_file_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


@contextlib.contextmanager
def open_folder(
    root: str | os.PathLike, parts: Sequence[str] = (), create: bool = False
) -> Iterator[Folder | None]:
    """The folder ``root / parts`` reached without following a link below ``root`` (module
    notes), or None where a part is missing (created with ``create``, ``root`` too).

    Raises:
        MatchoptError: a part is a link or not a folder; ``root`` cannot be opened.
    """
    root = Path(root)
    if create:
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise MatchoptError(f"cannot create {printable(root)}: {err.strerror or err}") from None
    fd = None
    if _AT:
        try:
            fd = os.open(root, _FOLDER_FLAGS)
        except FileNotFoundError:
            yield None
            return
        except OSError as err:
            raise MatchoptError(f"cannot open {printable(root)}: {err.strerror or err}") from None
    elif not root.is_dir():
        yield None
        return
    folders = [Folder(root, root, fd)]
    try:
        for part in parts:
            below = folders[-1].child(part, create)
            if below is None:
                yield None
                return
            folders.append(below)
        yield folders[-1]
    finally:
        for folder in folders:
            folder.close()


def check_no_links(root: str | os.PathLike, path: str | os.PathLike) -> None:
    """Refuse ``path`` where a folder on its way below ``root`` is a link or a file (what
    exists of it; nothing is created), before any work that would write there."""
    parts = parts_below(root, path)
    with open_folder(root, parts[:-1]) as folder:
        entry = folder.entry(parts[-1]) if folder is not None and parts else None
        if entry is not None and stat.S_ISLNK(entry.st_mode):
            raise link_error(Path(path), Path(root))


def write_below(root: str | os.PathLike, path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` inside ``root`` atomically (:meth:`Folder.write`), creating
    the folders on the way; no link below ``root`` is followed."""
    parts = parts_below(root, path)
    with open_folder(root, parts[:-1], create=True) as folder:
        folder.write(parts[-1], data)


def read_below(
    root: str | os.PathLike, path: str | os.PathLike, limit: int, what: str = "file"
) -> bytes | None:
    """The bytes of the regular file ``path`` inside ``root`` (None where it or a folder on the
    way is missing); a link below ``root`` is refused."""
    parts = parts_below(root, path)
    with open_folder(root, parts[:-1]) as folder:
        return None if folder is None else folder.read(parts[-1], limit, what)


def remove_below(root: str | os.PathLike, path: str | os.PathLike) -> bool:
    """Delete the file ``path`` inside ``root`` by its exact name; whether it was there."""
    parts = parts_below(root, path)
    with open_folder(root, parts[:-1]) as folder:
        return folder is not None and folder.remove(parts[-1])


# --- Reading files the user names ----------------------------------------------------------------


def as_path(value: object, what: str) -> Path:
    """``value`` as a path: a ``str`` or an ``os.PathLike`` of text.

    Raises:
        TypeError: anything else (None, a number, bytes), naming ``what`` and the type.
    """
    if isinstance(value, (str, os.PathLike)):
        text = os.fspath(value)
        if isinstance(text, str):
            return Path(text)
    raise TypeError(f"{what} must be a path (str or os.PathLike), not {type(value).__name__}")


def read_regular(path: str | os.PathLike, limit: int, what: str = "file") -> bytes:
    """The bytes of the file ``path`` (a link the user named is followed): only a regular file,
    of at most ``limit`` bytes (:func:`read_descriptor`); a pipe does not block.

    Raises:
        MatchoptError: missing, not a regular file, or too large, in one line.
    """
    path = Path(path)
    return read_descriptor(_open_for_reading(path, what), path, limit, what)


def _open_for_reading(path: Path, what: str) -> int:
    """``path`` opened for reading without blocking (a pipe with no writer opens at once)."""
    try:
        return os.open(path, _READ_FLAGS)
    except FileNotFoundError:
        raise MatchoptError(f"{printable(path)}: no such {what}") from None
    except OSError as err:
        raise MatchoptError(f"cannot read {printable(path)}: {err.strerror or err}") from None


def read_descriptor(fd: int, path: Path, limit: int, what: str = "file") -> bytes:
    """Read the open file ``fd`` (closed after): only a regular file of at most ``limit``
    bytes, and no more than the size the file system gives (a ``/proc`` file says 0 and
    gives without end)."""
    try:
        size = _regular_size(os.fstat(fd), path, limit, what)
        chunks, got = [], 0
        while True:
            chunk = os.read(fd, min(_CHUNK, size + 4096 - got))  # /proc: 8-byte reads
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
            if got > size:
                raise MatchoptError(
                    f"{printable(path)}: gives more bytes than its size ({size}): not a "
                    f"regular {what} (a /proc or device file); not read"
                )
        return b"".join(chunks)
    except OSError as err:
        raise MatchoptError(f"cannot read {printable(path)}: {err.strerror or err}") from None
    finally:
        os.close(fd)


def _regular_size(status: os.stat_result, path: Path, limit: int, what: str) -> int:
    if stat.S_ISDIR(status.st_mode):
        raise MatchoptError(f"{printable(path)}: is a folder, not a {what}")
    if not stat.S_ISREG(status.st_mode):
        raise MatchoptError(
            f"{printable(path)}: not a regular file (a device, pipe or socket); not read"
        )
    if status.st_size > limit:
        raise MatchoptError(
            f"{printable(path)}: not read: it takes {size_text(status.st_size)}, over the "
            f"{size_text(limit)} a {what} may take"
        )
    return status.st_size


def check_regular(path: str | os.PathLike, limit: int, what: str = "file") -> int:
    """The size of the file ``path``, checked as :func:`read_regular` checks it, for a reader
    that opens the path itself (pyarrow, numpy): a regular file of at most ``limit`` bytes
    whose first bytes agree with its size (a ``/proc`` file says 0 and has more)."""
    path = Path(path)
    fd = _open_for_reading(path, what)
    try:
        size = _regular_size(os.fstat(fd), path, limit, what)
        if size == 0 and os.read(fd, 4096):  # /proc files take reads of 8 bytes and more
            raise MatchoptError(
                f"{printable(path)}: says it is empty but is not: not a regular {what} (a /proc "
                "or device file); not read"
            )
        return size
    except OSError as err:
        raise MatchoptError(f"cannot read {printable(path)}: {err.strerror or err}") from None
    finally:
        os.close(fd)


def managed_root(folder: str | os.PathLike) -> Path:
    """The results folder that holds the ``.snapshots`` folder on the way to ``folder``, else
    ``folder`` itself: below it, matchopt follows no link (:mod:`matchopt.safe_paths`)."""
    parts = Path(folder).parts
    if SNAPSHOT_FOLDER not in parts:
        return Path(folder)
    last = len(parts) - 1 - parts[::-1].index(SNAPSHOT_FOLDER)
    return Path(*parts[:last]) if last else Path(".")
