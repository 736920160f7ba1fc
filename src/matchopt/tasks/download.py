"""Fetch design-bench data files from the Hugging Face mirror (``matchopt data fetch``).

Source: the dataset repo ``beckhamc/design_bench_data``
(https://huggingface.co/datasets/beckhamc/design_bench_data), the mirror current papers use since
design-bench's own bucket stopped serving files. Its files sit at the same relative paths as in
design-bench's data folder, from the repo root: ``<folder>/<prefix>-{x,y}-<k>.npy`` (e.g.
``tf_bind_8-SIX6_REF_R1/tf_bind_8-x-0.npy``, ``tf_bind_10-pho4/...``, ``superconductor/...``,
``ant_morphology/ant_morphology-x-0.npy`` beside ``ant_morphology/ant_oracle.pkl``). Found in
public code that downloads from it (not by listing the repo, which is unreachable from here): a
design-bench fork's ``DiskResource.download`` calls ``hf_hub_download(repo_id=
"beckhamc/design_bench_data", filename=<path relative to the data folder>, repo_type="dataset",
local_dir=<data folder>)``; setup scripts run ``hf download beckhamc/design_bench_data
--repo-type dataset --include 'tf_bind_8-SIX6_REF_R1/*' 'tf_bind_10-pho4/*' 'superconductor/*'``
and fetch ``.../resolve/main/ant_morphology/ant_oracle.pkl``. So the repo filename of a file is
its path in ``Task.required_files(None)``, written with ``/``.

Every file is downloaded into a temporary folder inside the data folder (so the final move is a
rename on one file system), checked against its sha256 where one is known
(:data:`matchopt.tasks.checksums.SHA256`: TF-Bind-8 and TF-Bind-10), and moved into place with
``os.replace``: the final path never holds a partial or corrupt file. Every file written is
recorded with its sha256 and the revision asked for (``$MATCHOPT_HF_REVISION``, default
``main``) in ``matchopt-digests.json`` in the data folder, so every file has a digest: known in
advance for TF-Bind, recorded at first download for the others. A file already present is
skipped when its digest matches (or when none is known or recorded); a present file whose digest
does not match is downloaded again and replaced (reported as "replaced").

``huggingface_hub`` is imported only inside :func:`hub_download`, so importing this module (or
matchopt) does not need it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import sys
import tempfile
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tqdm.auto import tqdm

from matchopt.errors import MatchoptError
from matchopt.io import atomic_write_bytes
from matchopt.tasks.base import Task, describe_files, resolve_data_dir
from matchopt.tasks.checksums import SHA256

REPO_ID = "beckhamc/design_bench_data"
REPO_URL = f"https://huggingface.co/datasets/{REPO_ID}"
#: Environment variable naming the repo revision (a commit hash, a tag or a branch) to fetch.
REVISION_ENV = "MATCHOPT_HF_REVISION"
#: Revision fetched when ``$MATCHOPT_HF_REVISION`` is unset. The mirror's commit hash could not be
#: read from the machines matchopt is built on (no network to the hub), so the default is the
#: branch; every file's digest is recorded at download (:data:`MANIFEST`) and checked after.
DEFAULT_REVISION = "main"
#: File in the data folder: the sha256 and revision of every file a fetch wrote.
MANIFEST = "matchopt-digests.json"
#: Prefix of the temporary folders made inside the data folder (removed when a fetch ends).
TEMP_PREFIX = ".matchopt-fetch-"

#: A download client: ``client(filename, local_dir)`` writes the repo file ``filename`` (a
#: ``/``-separated path) under the folder ``local_dir`` and returns the path it wrote.
Client = Callable[[str, Path], "str | os.PathLike"]


#: Host of the mirror, and how long to wait for it before saying there is no network.
HUB_HOST, CONNECT_TIMEOUT = "huggingface.co", 5.0
#: Environment variable of huggingface_hub naming another hub (a mirror), e.g.
#: ``https://hf-mirror.com``: the hub client downloads from it, so it is the host probed.
ENDPOINT_ENV = "HF_ENDPOINT"


def hub_address() -> tuple[str, int, str]:
    """Host, port and URL scheme the hub client connects to: ``$HF_ENDPOINT``, else
    https://huggingface.co.

    Raises:
        MatchoptError: ``$HF_ENDPOINT`` is not an http(s) URL with a host.
    """
    endpoint = os.environ.get(ENDPOINT_ENV, "").strip()
    if not endpoint:
        return HUB_HOST, 443, "https"
    bad = MatchoptError(f"${ENDPOINT_ENV} {endpoint!r}: expected a URL such as https://host")
    try:
        url = urllib.parse.urlsplit(endpoint)
        host, port = url.hostname, url.port
    except ValueError:  # e.g. a port that is not a number
        raise bad from None
    if url.scheme not in ("http", "https") or not host:
        raise bad
    return host, port or (443 if url.scheme == "https" else 80), url.scheme


def check_reachable(host: str | None = None, timeout: float = CONNECT_TIMEOUT) -> None:
    """One TCP connection to the hub (``host``:443, default: the host of ``$HF_ENDPOINT``, else
    huggingface.co) before any download, so that a machine without network gets one short
    message in seconds instead of the hub client's retries.

    Behind a proxy (``$HTTPS_PROXY`` and the like, as the hub client reads them) the hub is
    not reached directly, so nothing is probed: the download itself reports a failure.

    Raises:
        MatchoptError: the host cannot be reached.
    """
    if host is None:
        host, port, scheme = hub_address()
    else:
        port, scheme = 443, "https"
    import urllib.request  # here: 50 ms, and only a fetch needs it

    proxies = urllib.request.getproxies_environment()
    proxy = proxies.get(scheme) or proxies.get("all")
    if proxy and not urllib.request.proxy_bypass_environment(host, proxies):
        return
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as err:
        raise MatchoptError(
            f"cannot reach {host} ({err.strerror or type(err).__name__}): no network? The files "
            f"can also be placed by hand (same sub-folders as {REPO_URL})"
        ) from None


def _require_hub():
    try:
        import huggingface_hub
    except ImportError:
        raise MatchoptError(
            "downloading design-bench data needs huggingface_hub: pip install huggingface_hub"
        ) from None
    return huggingface_hub


def hub_download(filename: str, local_dir: Path) -> Path:
    """Download one file of :data:`REPO_ID` into ``local_dir`` (the default client).

    Args:
        filename: path of the file in the repo, e.g. ``tf_bind_8-SIX6_REF_R1/tf_bind_8-x-0.npy``.
        local_dir: folder to write it under (at ``local_dir / filename``).

    Returns:
        Path of the downloaded file.
    """
    try:
        import huggingface_hub
        from huggingface_hub.utils import (
            are_progress_bars_disabled,
            disable_progress_bars,
            enable_progress_bars,
        )
    except ImportError:
        raise MatchoptError(
            "downloading design-bench data needs huggingface_hub: pip install huggingface_hub"
        ) from None
    # One bar over files (ours) reads better than one bar per small file from the hub.
    was_disabled = are_progress_bars_disabled()
    disable_progress_bars()
    try:
        path = huggingface_hub.hf_hub_download(
            repo_id=REPO_ID,
            repo_type="dataset",
            filename=filename,
            local_dir=local_dir,
            revision=revision(),
        )
    finally:
        if not was_disabled:
            enable_progress_bars()
    return Path(path)


def revision() -> str:
    """The repo revision fetched: ``$MATCHOPT_HF_REVISION``, else :data:`DEFAULT_REVISION`."""
    return os.environ.get(REVISION_ENV, "").strip() or DEFAULT_REVISION


def read_manifest(folder: Path) -> dict[str, dict[str, str]]:
    """File name -> {"sha256", "revision"} recorded by earlier fetches into ``folder``."""
    path = folder / MANIFEST
    if not path.is_file():
        return {}
    try:
        content = json.loads(path.read_text())
        files = content["files"]
        if not isinstance(files, dict):
            raise TypeError("files is not a mapping")
    except (ValueError, KeyError, TypeError, RecursionError) as err:
        raise MatchoptError(
            f"{path}: not a matchopt digest list ({err}); delete it to fetch the files again"
        ) from None
    return files


def _write_manifest(folder: Path, files: dict[str, dict[str, str]]) -> None:
    text = json.dumps({"repo": REPO_ID, "files": files}, indent=1, sort_keys=True)
    atomic_write_bytes(folder / MANIFEST, (text + "\n").encode())


def sha256_of(path: Path) -> str:
    """Hex sha256 digest of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _network_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that mean "the download failed" rather than a bug in matchopt.

    OSError covers connection errors, huggingface_hub's HTTP errors and its "not in the local
    cache" error when offline. The transport libraries' own errors are added only when the hub
    has already imported them (they are absent otherwise, and importing them here would cost).
    """
    errors: list[type[BaseException]] = [OSError]
    for module, name in (
        ("huggingface_hub.errors", "EntryNotFoundError"),
        ("huggingface_hub.errors", "XetDownloadError"),
        ("requests", "RequestException"),
        ("httpx", "HTTPError"),
        ("httpx2", "HTTPError"),
    ):
        cls = getattr(sys.modules.get(module), name, None)
        if isinstance(cls, type) and issubclass(cls, BaseException):
            errors.append(cls)
    return tuple(errors)


def _task_class(task: str | type[Task]) -> type[Task]:
    if isinstance(task, type) and issubclass(task, Task):
        return task
    # Imported here: the registry imports every task family, and tasks/__init__ may import us.
    from matchopt.tasks import get_task_class

    return get_task_class(task)


def task_files(task: str | type[Task]) -> list[str]:
    """Repo filenames (``/``-separated, relative to the data folder) of the files a task needs
    from outside: those its ``missing_files`` reports in an empty folder. Empty for embedded
    tasks and for tasks that generate their files on first load (e.g. ``hopper-local``)."""
    cls = _task_class(task)
    if cls.embedded:
        return []
    # Asking the task (rather than listing required_files) keeps files it builds itself out.
    with tempfile.TemporaryDirectory(prefix="matchopt-probe-") as empty:
        root = Path(empty)
        return [Path(p).relative_to(root).as_posix() for p in cls.missing_files(root)]


@dataclass
class FetchReport:
    """What :func:`fetch_task_data` did; file names are relative to ``data_dir``."""

    data_dir: Path
    #: Files that were absent and are now downloaded and verified.
    downloaded: list[str] = field(default_factory=list)
    #: Files present with a wrong sha256, downloaded again and replaced.
    replaced: list[str] = field(default_factory=list)
    #: Files already present and verified (or present, with no known digest), left alone.
    skipped: list[str] = field(default_factory=list)
    #: Tasks with no files to fetch (embedded data, or generated on first load).
    no_files: list[str] = field(default_factory=list)

    def text(self) -> str:
        """A short summary for the command line."""
        lines = [
            f"data folder: {self.data_dir}",
            f"downloaded {len(self.downloaded)} file(s), replaced {len(self.replaced)} corrupt "
            f"file(s), {len(self.skipped)} already present",
        ]
        if self.replaced:
            lines.append(f"replaced: {describe_files([Path(n) for n in self.replaced])}")
        if self.no_files:
            lines.append(
                f"nothing to fetch (embedded or generated data): {', '.join(self.no_files)}"
            )
        return "\n".join(lines)


def _make_temp(data_dir: Path) -> Path:
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=TEMP_PREFIX, dir=data_dir))
    except OSError as err:
        raise MatchoptError(
            f"cannot write to the data folder {data_dir} ({err.strerror or err}); pass "
            f"--data-dir DIR or set $MATCHOPT_DATA_DIR to a writable folder"
        ) from None


def _one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__


def _plan_files(tasks: Iterable[str | type[Task]], report: FetchReport) -> list[str]:
    """The files of ``tasks`` in order, each once; tasks without files go to ``report.no_files``."""
    plan: list[str] = []
    for task in tasks:
        names = task_files(task)
        if not names:
            report.no_files.append(_task_class(task).name)
        plan.extend(n for n in names if n not in plan)
    return plan


def _download_checked(
    client: Client,
    name: str,
    temp: Path,
    folder: Path,
    expected: str | None,
    later: Sequence[str],
) -> Path:
    """``name`` downloaded into ``temp``, its sha256 checked when ``expected`` is known.

    Raises:
        MatchoptError: the download failed (the message names ``name`` and the files of
            ``later`` not yet in ``folder``: all that is still missing), gave no file, or gave a
            file of another sha256 (deleted).
    """
    try:
        got = Path(client(name, temp))
    except _network_errors() as err:
        still = [name] + [n for n in later if not (folder / n).is_file()]
        raise MatchoptError(
            f"could not download {name} from {REPO_URL} ({_one_line(err)}); "
            f"{len(still)} file(s) still missing: place them by hand in {folder} "
            f"(same sub-folders as in the repo): {describe_files([Path(n) for n in still])}"
        ) from None
    if not got.is_file():
        raise MatchoptError(f"downloading {name} from {REPO_URL} gave no file")
    if expected is not None:
        digest = sha256_of(got)
        if digest != expected:
            got.unlink()
            raise MatchoptError(
                f"downloaded {name} has sha256 {digest}, expected {expected}; the file "
                f"was not kept. Try again later, or place a good copy by hand at {folder / name}"
            )
    return got


def _install(got: Path, folder: Path, name: str, recorded: dict[str, dict[str, str]]) -> None:
    """Move the downloaded file ``got`` to ``folder / name`` and record its sha256 and the repo
    revision in the folder's manifest."""
    final = folder / name
    final.parent.mkdir(parents=True, exist_ok=True)
    recorded[name] = {"sha256": sha256_of(got), "revision": revision()}
    os.replace(got, final)
    _write_manifest(folder, recorded)


def fetch_task_data(
    tasks: Iterable[str | type[Task]],
    data_dir: str | os.PathLike | None = None,
    progress: bool = True,
    client: Client | None = None,
) -> FetchReport:
    """Download the design-bench files of ``tasks`` into the data folder (``matchopt data fetch``).

    Args:
        tasks: task names (or Task classes); their files are fetched in order, each file once.
        data_dir: data folder; default ``$MATCHOPT_DATA_DIR``, else the user cache folder.
        progress: show a progress bar over files on stderr.
        client: download function (see :data:`Client`); default :func:`hub_download`. Tests pass
            a fake here.

    Returns:
        A :class:`FetchReport`.

    Raises:
        MatchoptError: unknown task; data folder not writable; a download failed (no network:
            one message naming the files still missing, where to place them, and the repo
            URL); a downloaded file's sha256 differs from the known one (the file is not kept).
    """
    folder = resolve_data_dir(data_dir)
    reachable = check_reachable if client is None else None  # fakes need no network
    client = hub_download if client is None else client
    report = FetchReport(data_dir=folder)
    plan = _plan_files(tasks, report)
    temp: Path | None = None
    recorded = read_manifest(folder) if folder.is_dir() else {}
    bar = tqdm(plan, desc="design-bench files", unit="file", disable=not progress)
    try:
        for i, name in enumerate(bar):
            final = folder / name
            # A digest known in advance (TF-Bind), else the one recorded when it was fetched.
            expected = SHA256.get(name) or recorded.get(name, {}).get("sha256")
            present = final.is_file()
            if present and (expected is None or sha256_of(final) == expected):
                report.skipped.append(name)
                continue
            if temp is None:
                if reachable is not None:
                    _require_hub()  # a missing package first: the better message
                    reachable()
                temp = _make_temp(folder)
            got = _download_checked(client, name, temp, folder, expected, plan[i + 1 :])
            _install(got, folder, name, recorded)
            (report.replaced if present else report.downloaded).append(name)
    finally:
        bar.close()
        if temp is not None:
            shutil.rmtree(temp, ignore_errors=True)
    return report


def ensure_task_data(
    task: str | type[Task],
    data_dir: str | os.PathLike | None = None,
    download: bool = False,
    progress: bool = True,
    client: Client | None = None,
) -> Path:
    """Make sure a task's files are in the data folder before loading it (``--download``).

    Only missing files trigger a download (present ones are not hashed here; ``matchopt data
    fetch`` verifies them).

    Args:
        task: task name or Task class.
        data_dir: data folder; default ``$MATCHOPT_DATA_DIR``, else the user cache folder.
        download: fetch missing files (else a missing file is an error).
        progress: progress bar while downloading.
        client: download function for :func:`fetch_task_data`.

    Returns:
        The resolved data folder (pass it on to ``load_task``).

    Raises:
        MatchoptError: files missing and ``download`` is false (the message names them and how
            to get them), or the download failed.
    """
    cls = _task_class(task)
    folder = resolve_data_dir(data_dir)
    missing = cls.missing_files(folder)
    if missing:
        if not download:
            raise MatchoptError(cls.missing_message(folder, missing))
        fetch_task_data([cls], folder, progress=progress, client=client)
    return folder


def task_data_counts(
    task: str | type[Task], data_dir: str | os.PathLike | None = None, verify: bool = False
) -> tuple[int, int, int]:
    """(good, corrupt, total) files of a task in the data folder.

    ``good`` counts present files (and, with ``verify``, whose known sha256 matches); ``corrupt``
    counts present files whose known sha256 does not match (only with ``verify``). Known: built
    in (:data:`SHA256`), else recorded when ``matchopt data fetch`` downloaded the file
    (:data:`MANIFEST`); files placed by hand with neither are counted good unread.
    """
    folder = resolve_data_dir(data_dir)
    names = task_files(task)
    recorded = read_manifest(folder) if verify else {}
    good = corrupt = 0
    for name in names:
        path = folder / name
        if not path.is_file():
            continue
        expected = SHA256.get(name) or recorded.get(name, {}).get("sha256") if verify else None
        if expected is not None and sha256_of(path) != expected:
            corrupt += 1
        else:
            good += 1
    return good, corrupt, len(names)


def data_status_table(
    data_dir: str | os.PathLike | None = None,
    verify: bool = False,
    tasks: Iterable[str] | None = None,
) -> str:
    """One row per task: name, data status, sub-folder(s) (``matchopt data status``).

    Status is ``present (n/n)``, ``missing (0/n)`` or ``partial (k/n)`` for tasks with files to
    fetch, with ``, c corrupt`` added when ``verify`` finds files whose sha256 does not match;
    other tasks show their own :meth:`Task.data_status` (``embedded``, or e.g. ``generate``).

    Args:
        data_dir: data folder; default ``$MATCHOPT_DATA_DIR``, else the user cache folder.
        verify: hash present files that have a known sha256, built in or recorded at download
            (reads every such file).
        tasks: task names; default every registered task.
    """
    folder = resolve_data_dir(data_dir)
    if tasks is None:
        from matchopt.tasks import TASKS

        tasks = list(TASKS)
    lines = [f"data folder: {folder}", f"{'task':<16} {'data':<24} folder"]
    for name in tasks:
        names = task_files(name)
        if not names:
            # Embedded or generated data: the task's own status ("embedded", "generate", ...).
            status = _task_class(name).data_status(folder)
            lines.append(f"{name:<16} {status:<24} -")
            continue
        good, corrupt, total = task_data_counts(name, folder, verify)
        state = "present" if good == total else "missing" if good + corrupt == 0 else "partial"
        status = f"{state} ({good}/{total})" + (f", {corrupt} corrupt" if corrupt else "")
        subfolders = sorted({n.rsplit("/", 1)[0] + "/" for n in names if "/" in n})
        lines.append(f"{name:<16} {status:<24} {', '.join(subfolders) or './'}")
    return "\n".join(lines)
