"""Run records (matchopt.records): the file layout, a round trip, and the commit of the code a
record names."""

import numpy as np
import pytest

from matchopt.errors import MatchoptError
from matchopt.records import RunRecord, write_record


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


def test_a_record_that_reading_would_refuse_is_never_written():
    from matchopt.records import RunRecord, check_record

    record = RunRecord(
        "t", "m", 0, "quick", {}, [-1.6e16], -1.6e16, -1.6e16, 0.5, 1e300, 0.0, "0", 1
    )
    with pytest.raises(MatchoptError, match="no record written"):
        check_record(record)
