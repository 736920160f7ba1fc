import os
import stat

import numpy as np

from matchopt.evaluation import fit_accuracy, percentile
from matchopt.io import atomic_write_bytes
from matchopt.records import RunRecord, write_record


def test_nearest_rank_percentiles():
    values = np.arange(1, 129) / 128
    assert percentile(values, 100) == 1.0
    assert percentile(values, 50) == np.percentile(values, 50, method="nearest")
    assert percentile([3.0, 1.0, 2.0, 4.0], 50) in (2.0, 3.0)


def test_fit_accuracy_hand_computed():
    truth = np.array([1.0, 2.0, 3.0, 4.0])
    assert fit_accuracy(truth, truth) == {"r2": 1.0, "spearman": 1.0}
    # Residuals 1, 0, 0, -1 against a spread of 5: R^2 = 1 - 2/5; the ranks of 2, 2, 3, 3
    # tie in pairs (Spearman 0.894...), and a reversed order has Spearman -1.
    measured = fit_accuracy(truth, [2.0, 2.0, 3.0, 3.0])
    assert measured["r2"] == 0.6
    assert np.isclose(measured["spearman"], 2 / np.sqrt(5))
    assert fit_accuracy(truth, truth[::-1])["spearman"] == -1.0


def _record(seed=0):
    return RunRecord(
        task="t",
        method="m",
        seed=seed,
        preset="quick",
        config={"a": 1},
        scores=[0.1, 0.2],
        p100=0.2,
        p50=0.1,
        offline_best=0.15,
        fit_seconds=1.0,
        search_seconds=0.5,
        version="0",
        n_designs=2,
    )


def test_record_round_trip_and_layout(tmp_path):
    record = _record(3)
    path = write_record(tmp_path, record, np.zeros((2, 4)))
    assert path == tmp_path / "t" / "m" / "seed3.json"
    assert RunRecord.from_json(path.read_text()) == record
    assert np.load(path.with_suffix(".designs.npy")).shape == (2, 4)
    assert not list(tmp_path.rglob("*.tmp"))


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


def test_records_name_the_commit_of_the_code(tmp_path):
    import subprocess

    from matchopt._version import commit_of
    from matchopt.runner import environment

    package = tmp_path / "repo" / "src" / "matchopt"
    package.mkdir(parents=True)
    (package / "runner.py").write_text("x = 1\n")
    unwritten = package / "_commit.txt"
    unwritten.write_text("$Format:%H$\n")  # as committed; git archive fills it in
    assert commit_of(package, unwritten) is None  # not a checkout, not an archive

    def git(*args):
        return subprocess.run(
            ["git", "-C", str(tmp_path / "repo"), "-c", "user.name=t", "-c", "user.email=t@t",
             *args], capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip

    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "one")
    head = git("rev-parse", "HEAD")
    assert commit_of(package, unwritten) == head
    (package / "runner.py").write_text("x = 2\n")
    assert commit_of(package, unwritten) == head + "+dirty"
    archived = tmp_path / "_commit.txt"
    archived.write_text("0123abcd\n")
    assert commit_of(tmp_path, archived) == "0123abcd"
    assert "commit" in environment()  # every record's extra.environment


def test_the_commit_is_read_when_the_run_starts(monkeypatch):
    # A checkout that moves on while a long run trains: the record names the code that started.
    import matchopt._version as version
    from matchopt.methods.random_designs import RandomDesigns
    from matchopt.runner import run

    head = ["started"]
    monkeypatch.setattr(version, "commit_of", lambda *args: head[0])
    version.source_commit.cache_clear()
    fit = RandomDesigns.fit

    def fit_then_commit(self, data):
        head[0] = "committed during the fit"
        return fit(self, data)

    monkeypatch.setattr(RandomDesigns, "fit", fit_then_commit)
    try:
        record, _ = run("potts", "random", n_designs=4)
    finally:
        version.source_commit.cache_clear()
    assert record.extra["environment"]["commit"] == "started"
