"""Files matchopt writes: a lock that follows no link, outputs with ordinary permissions, atomic
writes (never a partial file)."""

import os
import stat
import time

import pytest

from matchopt import cli
from matchopt.errors import MatchoptError
from matchopt.io import atomic_write_bytes, file_lock

LOCK = ".matchopt-bench.lock"


def run_into(folder) -> int:
    args = ["run", "--task", "styblinski-tang", "--method", "random", "--seeds", "0"]
    return cli.main([*args, "--preset", "quick", "--out", str(folder)])


def test_a_symbolic_link_at_the_lock_is_refused_and_its_target_untouched(tmp_path, capsys):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    out = tmp_path / "S"
    out.mkdir()
    (out / LOCK).symlink_to(victim)
    assert run_into(out) == 2
    assert "is a link" in capsys.readouterr().err
    assert victim.read_text() == "precious\n"


def test_a_dangling_link_creates_nothing_outside(tmp_path):
    out = tmp_path / "S"
    out.mkdir()
    (out / LOCK).symlink_to(tmp_path / "elsewhere")
    with pytest.raises(MatchoptError, match="is a link"):
        with file_lock(out / LOCK):
            pass
    assert not (tmp_path / "elsewhere").exists()


def test_a_hard_link_at_the_lock_is_refused(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("")
    out = tmp_path / "S"
    out.mkdir()
    os.link(victim, out / LOCK)
    with pytest.raises(MatchoptError, match="hard link"):
        with file_lock(out / LOCK):
            pass
    assert victim.read_text() == ""


@pytest.mark.parametrize("content", [b"precious\n", b"x" * 100])
def test_a_lock_file_holding_anything_else_is_not_truncated(tmp_path, content):
    path = tmp_path / LOCK
    path.write_bytes(content)
    with pytest.raises(MatchoptError, match="other than a lock record"):
        with file_lock(path):
            pass
    assert path.read_bytes() == content


def test_a_folder_at_the_lock_is_one_error(tmp_path):
    (tmp_path / LOCK).mkdir()
    with pytest.raises(MatchoptError, match="lock file"):
        with file_lock(tmp_path / LOCK):
            pass


def test_a_stale_lock_record_is_taken_and_removed(tmp_path):
    path = tmp_path / LOCK
    path.write_text("pid 12345\n")
    with file_lock(path, wait=False):
        assert path.read_text() == f"pid {os.getpid()}\n"
    assert not path.exists()


def test_an_output_replacing_a_link_to_a_setuid_file_gets_ordinary_bits(tmp_path):
    target = tmp_path / "tool"
    target.write_text("#!/bin/sh\n")
    target.chmod(0o4755)
    out = tmp_path / "out.csv"
    out.symlink_to(target)
    atomic_write_bytes(out, b"a,b\n1,2\n")
    mode = out.lstat().st_mode
    assert stat.S_ISREG(mode) and not mode & (stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX)
    assert target.read_text() == "#!/bin/sh\n" and target.stat().st_mode & stat.S_ISUID


def test_optimize_never_overwrites_a_default_output_it_was_not_told_to(
    tmp_path, monkeypatch, capsys
):
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    table = pd.DataFrame(rng.uniform(size=(60, 2)), columns=["a", "b"]).assign(
        y=rng.normal(size=60)
    )
    table.to_csv(tmp_path / "t.csv", index=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "proposals.csv").write_text("mine\n")
    args = ["optimize", "t.csv", "--target", "y", "--method", "random", "--n", "4"]
    assert cli.main(args) == 2
    assert "proposals.csv exists" in capsys.readouterr().err
    assert (tmp_path / "proposals.csv").read_text() == "mine\n"
    assert cli.main([*args, "--out", "proposals.csv"]) == 2  # named, but not --force
    assert "proposals.csv exists; add --force" in capsys.readouterr().err
    assert (tmp_path / "proposals.csv").read_text() == "mine\n"
    assert cli.main([*args, "--out", "proposals.csv", "--force"]) == 0  # replaced
    assert (tmp_path / "proposals.csv").read_text() != "mine\n"


def test_stdout_on_a_full_device_is_one_error_line():
    import subprocess
    import sys

    with open("/dev/full", "w") as full:
        result = subprocess.run(
            [sys.executable, "-m", "matchopt.cli", "methods"],
            stdout=full, stderr=subprocess.PIPE, text=True, timeout=120,
        )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == ["matchopt: error: No space left on device"]


def test_names_an_ascii_terminal_cannot_show_are_escaped(tmp_path):
    import subprocess
    import sys

    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    table = pd.DataFrame(rng.uniform(size=(40, 2)), columns=["température", "b"])
    table.assign(y=rng.normal(size=40)).to_csv(tmp_path / "t.csv", index=False)
    args = ["optimize", "t.csv", "--target", "y", "--method", "random", "--n", "3"]
    result = subprocess.run(
        [sys.executable, "-m", "matchopt.cli", *args, "--out", "p.csv"], cwd=tmp_path,
        capture_output=True,
        env={**os.environ, "PYTHONIOENCODING": "ascii"}, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert b"temp\\xe9rature" in result.stdout + result.stderr


@pytest.mark.parametrize("kind", ["file", "link"])
@pytest.mark.parametrize("command", ["run", "bench"])
def test_a_snapshot_folder_that_is_a_file_or_a_link_is_one_error(tmp_path, capsys, kind, command):
    out = tmp_path / "S"
    out.mkdir()
    if kind == "file":
        (out / ".snapshots").write_text("")
    else:
        (tmp_path / "elsewhere").mkdir()
        (out / ".snapshots").symlink_to(tmp_path / "elsewhere")
    if command == "run":
        code = run_into(out)
    else:
        args = ["bench", "--tasks", "styblinski-tang", "--methods", "random", "--seeds", "0"]
        code = cli.main([*args, "--preset", "quick", "--out", str(out)])
    assert code == 2
    assert ".snapshots is " in capsys.readouterr().err
    assert not any((tmp_path / "elsewhere").iterdir()) if kind == "link" else True


def test_a_bench_removes_orphan_temporaries_of_its_cells_by_their_exact_names(tmp_path):
    out = tmp_path / "S"
    folder = out / ".snapshots" / "styblinski-tang" / "random"
    folder.mkdir(parents=True)
    orphans = [folder / ".seed0.pt.tmp", out / "styblinski-tang" / "random" / ".seed0.json.tmp"]
    for orphan in orphans:
        orphan.parent.mkdir(parents=True, exist_ok=True)
        orphan.write_bytes(b"half a file")
    keep = [out / ".snapshots" / "notes.tmp", folder / ".seed0.pt.abc.tmp", folder / ".x.pt.tmp"]
    for path in keep:  # not the exact name of a temporary file of this bench's cells
        path.write_text("x")
    args = ["bench", "--tasks", "styblinski-tang", "--methods", "random", "--seeds", "0"]
    assert cli.main([*args, "--preset", "quick", "--out", str(out)]) == 0
    assert not any(orphan.exists() for orphan in orphans)
    assert all(path.read_text() == "x" for path in keep)


def test_names_on_the_command_line_are_echoed_escaped_and_cut(tmp_path, capsys):
    import numpy as np
    import pandas as pd

    from matchopt.errors import printable

    rng = np.random.default_rng(0)
    name = "t\x1b[31m.csv"
    table = pd.DataFrame(rng.uniform(size=(40, 2)), columns=["a", "b"])
    table.assign(y=rng.normal(size=40)).to_csv(tmp_path / name, index=False)
    out = tmp_path / "p\x1b[2J.csv"
    args = ["optimize", str(tmp_path / name), "--target", "y", "--method", "random"]
    assert cli.main([*args, "--n", "3", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "\x1b" not in captured.out + captured.err
    assert "t\\x1b[31m.csv" in captured.err and "p\\x1b[2J.csv" in captured.out
    long = printable("x" * 100_000_000)
    assert len(long) < 1100 and "characters cut" in long


def test_atomic_write_keeps_the_old_file_when_interrupted(tmp_path, monkeypatch):
    target = tmp_path / "out.json"
    atomic_write_bytes(target, b"old")

    def interrupted(src, dst, **folders):
        raise KeyboardInterrupt

    monkeypatch.setattr("matchopt.io.os.replace", interrupted)
    try:
        atomic_write_bytes(target, b"new content")
    except KeyboardInterrupt:
        pass
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]  # no temporary file left


def test_atomic_write_syncs_the_bytes_before_the_rename_and_the_folder_after(tmp_path, monkeypatch):
    import matchopt.io as io_module

    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        info = os.fstat(fd)
        events.append(("fsync", "folder" if stat.S_ISDIR(info.st_mode) else info.st_size))
        real_fsync(fd)

    def replace(src, dst, **folders):
        events.append(("replace", os.path.basename(dst)))
        real_replace(src, dst, **folders)

    monkeypatch.setattr(io_module.os, "fsync", fsync)
    monkeypatch.setattr(io_module.os, "replace", replace)
    atomic_write_bytes(tmp_path / "out.json", b"12345")
    # The file's five bytes, then the rename, then the folder (so the rename survives a crash).
    assert events == [("fsync", 5), ("replace", "out.json"), ("fsync", "folder")]


def test_atomic_write_keeps_the_mode_of_a_replaced_file(tmp_path):
    path = tmp_path / "proposals.csv"
    path.write_text("old")
    path.chmod(0o640)
    atomic_write_bytes(path, b"new")
    assert path.read_bytes() == b"new" and (path.stat().st_mode & 0o777) == 0o640
    fresh = tmp_path / "fresh.csv"
    atomic_write_bytes(fresh, b"x")
    umask = os.umask(0)
    os.umask(umask)
    assert (fresh.stat().st_mode & 0o777) == 0o666 & ~umask


def test_the_lock_is_exclusive_and_its_file_goes_with_the_holder(tmp_path):
    from matchopt.io import FileLocked, file_lock

    path = tmp_path / "sub" / "x.lock"
    with file_lock(path, wait=False):
        assert path.read_text() == f"pid {os.getpid()}\n"
        with pytest.raises(FileLocked, match=f"pid {os.getpid()}"):
            with file_lock(path, wait=False):
                pass
    assert not path.exists()
    with file_lock(path, wait=False):  # taken again at once
        assert path.exists()
    assert not path.exists()


def test_a_waiter_on_a_removed_lock_file_locks_the_new_one(tmp_path):
    """The holder removes the file on release; a waiter that opened the old file must not hold a
    lock on it while a third process locks a new file at the same path."""
    import threading

    from matchopt.io import file_lock

    path = tmp_path / "x.lock"
    inside, events = threading.Lock(), []

    def hold(name: str, seconds: float) -> None:
        with file_lock(path):
            if not inside.acquire(blocking=False):
                events.append(f"{name} overlapped")
                return
            events.append(name)
            time.sleep(seconds)
            inside.release()

    threads = [threading.Thread(target=hold, args=(f"t{i}", 0.05)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(events) == [f"t{i}" for i in range(6)]
    assert not path.exists()
