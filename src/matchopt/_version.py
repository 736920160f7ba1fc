"""The installed package version, in a module of its own so that any module can import it
without importing the package ``__init__`` (which imports most modules), and the commit of the
code that runs (records keep it: the version alone does not tell two commits apart)."""

from __future__ import annotations

import subprocess
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

try:
    __version__ = version("matchopt")
except PackageNotFoundError:  # running from a source tree
    __version__ = "0.0.0+unknown"

#: ``git archive`` writes the commit into this file (``export-subst`` in .gitattributes).
_COMMIT_FILE = Path(__file__).with_name("_commit.txt")


@lru_cache(maxsize=1)
def source_commit() -> str | None:
    """The git commit of this package's code: from ``_commit.txt`` in a ``git archive`` of the
    repository, else from ``git`` in a checkout (``+dirty`` when the package's files differ from
    it); None when neither can tell (e.g. an installed wheel)."""
    return commit_of(Path(__file__).resolve().parent, _COMMIT_FILE)


def commit_of(package: Path, commit_file: Path) -> str | None:
    """:func:`source_commit` of the package folder ``package`` (``<repo>/src/matchopt``)."""
    try:
        written = commit_file.read_text().strip()
    except OSError:
        written = ""
    if written and not written.startswith("$Format"):
        return written

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["git", "-C", str(package), *args], capture_output=True, text=True, timeout=10
        )

    try:
        top = git("rev-parse", "--show-toplevel")
        # Only matchopt's own repository: an install inside another repository is not ours.
        if top.returncode or Path(top.stdout.strip()).resolve() / "src" / "matchopt" != package:
            return None
        head = git("rev-parse", "HEAD")
        if head.returncode:
            return None
        dirty = git("diff", "--quiet", "HEAD", "--", ".").returncode != 0
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty else "")
