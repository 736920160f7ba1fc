"""No link below a results folder is followed; deletions by exact names; bounded reads."""

import os
import stat

import numpy as np
import pytest

from matchopt import cli
from matchopt.errors import MatchoptError
from matchopt.safe_paths import (
    LinkError,
    open_folder,
    read_below,
    read_regular,
    remove_below,
    write_below,
)

RUN = ["run", "--task", "styblinski-tang", "--method", "random", "--preset", "quick"]


def tree(folder) -> dict:
    """Every entry under ``folder`` (relative path -> bytes, or None for a folder)."""
    found = {}
    for path in sorted(folder.rglob("*")):
        found[str(path.relative_to(folder))] = None if path.is_dir() else path.read_bytes()
    return found


@pytest.fixture
def victim(tmp_path):
    """A folder outside the results folder, holding a file of the user's."""
    folder = tmp_path / "O"
    folder.mkdir()
    (folder / "precious.txt").write_text("mine\n")
    return folder


def refused(capsys, code: int, link) -> None:
    assert code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()[-1:]
    assert line.startswith("matchopt: error: ") and f"{link} is a link" in line, line


def test_a_task_folder_that_is_a_link_is_refused_and_nothing_written_outside(
    tmp_path, victim, capsys
):
    out = tmp_path / "R"
    out.mkdir()
    (out / "styblinski-tang").symlink_to(victim)
    before = tree(victim)
    refused(capsys, cli.main([*RUN, "--out", str(out)]), out / "styblinski-tang")
    assert tree(victim) == before


def test_a_method_folder_that_is_a_link_keeps_the_designs_file_there(tmp_path, victim, capsys):
    designs = victim / "seed0.designs.npy"
    np.save(designs, np.zeros(3))
    before = tree(victim)
    out = tmp_path / "R"
    (out / "styblinski-tang").mkdir(parents=True)
    (out / "styblinski-tang" / "random").symlink_to(victim)
    refused(capsys, cli.main([*RUN, "--out", str(out)]), out / "styblinski-tang" / "random")
    assert tree(victim) == before


def test_a_linked_snapshot_folder_of_a_task_keeps_the_users_snapshot_like_files(
    tmp_path, victim, capsys, monkeypatch
):
    """The snapshot clean-up deleted ``seed0.*.pt`` through the link."""
    (victim / "matchopt").mkdir()
    (victim / "matchopt" / "seed0.keep.pt").write_text("mine\n")
    before = tree(victim)
    out = tmp_path / "R"
    (out / ".snapshots").mkdir(parents=True)
    (out / ".snapshots" / "styblinski-tang").symlink_to(victim)
    monkeypatch.setenv("MATCHOPT_CHECKPOINT_SECONDS", "0")
    args = ["run", "--task", "styblinski-tang", "--method", "matchopt", "--preset", "quick"]
    code = cli.main([*args, "--set", "epochs=5", "--out", str(out)])
    refused(capsys, code, out / ".snapshots" / "styblinski-tang")
    assert tree(victim) == before


def test_the_snapshot_clean_up_deletes_only_the_names_of_the_snapshot_and_its_stages(tmp_path):
    from matchopt.checkpoints import remove_snapshot

    folder = tmp_path / ".snapshots" / "potts" / "matchopt"
    folder.mkdir(parents=True)
    ours = ["seed0.pt", "seed0.refit.pt", "seed0.member3.pt", ".seed0.pt.tmp"]
    theirs = ["seed0.keep.pt", "seed0.refit.old.pt", "seed0..pt", "seed1.pt", "seed0.member.pt"]
    for name in ours + theirs:
        (folder / name).write_text(name)
    remove_snapshot(folder / "seed0.pt")
    assert sorted(p.name for p in folder.iterdir()) == sorted(theirs)


def test_a_linked_method_folder_keeps_its_temporary_looking_files(tmp_path, victim, capsys):
    """The stale-temporaries clean-up of a bench deleted ``.seed9.tmp`` through the link."""
    (victim / ".seed9.tmp").write_text("mine\n")
    (victim / ".seed0.json.tmp").write_text("mine too\n")
    before = tree(victim)
    out = tmp_path / "R"
    (out / "styblinski-tang").mkdir(parents=True)
    (out / "styblinski-tang" / "random").symlink_to(victim)
    args = ["bench", "--tasks", "styblinski-tang", "--methods", "random", "--seeds", "0,9"]
    code = cli.main([*args, "--preset", "quick", "--out", str(out)])
    refused(capsys, code, out / "styblinski-tang" / "random")
    assert tree(victim) == before


@pytest.fixture
def wide_members(monkeypatch):
    """GA, Ens-Mean and Ens-Min share one ensemble when their members train one after another
    (the paper's widths); make the quick preset's widths count as such."""
    import matchopt.models.gaussian as gaussian

    monkeypatch.setattr(gaussian, "GROUPED_MAX_WIDTH", 0)


BENCH_SHARED = ["bench", "--tasks", "potts", "--methods", "ga,ens-mean,ens-min", "--seeds", "0"]


def test_a_linked_ensembles_folder_is_neither_written_nor_cleaned(
    tmp_path, victim, capsys, wide_members
):
    out = tmp_path / "R"
    (out / ".snapshots").mkdir(parents=True)
    (out / ".snapshots" / "ensembles").symlink_to(victim)
    before = tree(victim)
    code = cli.main([*BENCH_SHARED, "--preset", "quick", "--workers", "1", "--out", str(out)])
    refused(capsys, code, out / ".snapshots" / "ensembles")
    assert tree(victim) == before


def test_the_ensemble_clean_up_deletes_only_cache_files(tmp_path, wide_members):
    out = tmp_path / "R"
    args = [*BENCH_SHARED, "--preset", "quick", "--workers", "1", "--out", str(out)]
    mine = []

    from matchopt.models import ensemble_cache

    real = ensemble_cache.EnsembleCache.store

    def store_and_add_a_file_of_mine(self, *a, **k):
        real(self, *a, **k)
        mine.append(self.folder / "notes.txt")
        mine[-1].write_text("mine\n")

    import unittest.mock

    with unittest.mock.patch.object(
        ensemble_cache.EnsembleCache, "store", store_and_add_a_file_of_mine
    ):
        assert cli.main(args) == 0
    assert mine and all(path.read_text() == "mine\n" for path in mine)
    assert [p.name for p in mine[0].parent.iterdir()] == ["notes.txt"]  # cache files went


# --- The mechanism, whatever the command --------------------------------------------------------


def test_a_folder_swapped_for_a_link_after_the_checks_is_refused_at_the_write(tmp_path, victim):
    out = tmp_path / "R"
    (out / "task").mkdir(parents=True)
    (out / "task" / "method").symlink_to(victim)  # after any check a command makes
    before = tree(victim)
    with pytest.raises(LinkError, match="method is a link"):
        write_below(out, out / "task" / "method" / "seed0.json", b"{}")
    with pytest.raises(LinkError):
        remove_below(out, out / "task" / "method" / "precious.txt")
    with pytest.raises(LinkError):
        read_below(out, out / "task" / "method" / "precious.txt", 100)
    assert tree(victim) == before


def test_a_file_at_the_end_of_the_path_that_is_a_link_is_replaced_not_written_through(
    tmp_path, victim
):
    out = tmp_path / "R"
    (out / "t").mkdir(parents=True)
    (out / "t" / "seed0.json").symlink_to(victim / "precious.txt")
    write_below(out, out / "t" / "seed0.json", b"{}\n")
    assert (victim / "precious.txt").read_text() == "mine\n"
    assert not (out / "t" / "seed0.json").is_symlink()
    assert (out / "t" / "seed0.json").read_bytes() == b"{}\n"
    assert remove_below(out, out / "t" / "seed0.json")
    with open_folder(out, ["t"]) as folder:
        assert folder.names() == []


def test_a_stale_temporary_file_of_an_exact_name_is_replaced_and_a_folder_is_never_removed(
    tmp_path,
):
    (tmp_path / ".a.json.tmp").symlink_to(tmp_path / "elsewhere")
    write_below(tmp_path, tmp_path / "a.json", b"1")
    assert (tmp_path / "a.json").read_bytes() == b"1"
    assert not os.path.lexists(tmp_path / ".a.json.tmp") and not (tmp_path / "elsewhere").exists()
    (tmp_path / "d").mkdir()
    assert not remove_below(tmp_path, tmp_path / "d") and (tmp_path / "d").is_dir()


def test_a_new_file_gets_the_usual_permissions(tmp_path):
    umask = os.umask(0o022)
    try:
        write_below(tmp_path, tmp_path / "a" / "b.json", b"1")
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "a" / "b.json").stat().st_mode) == 0o644


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "proc", "folder", "too-large"])
def test_reads_take_only_regular_files_of_bounded_size(tmp_path, kind):
    path = tmp_path / "seed0.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "proc":
        if not os.path.exists("/proc/self/pagemap"):
            pytest.skip("no /proc/self/pagemap")
        path.symlink_to("/proc/self/pagemap")
    elif kind == "folder":
        path.mkdir()
    else:
        path.write_bytes(b"x" * 101)
    words = {
        "fifo": "not a regular file",
        "dev-zero": "not a regular file",
        "proc": "gives more bytes than its size",
        "folder": "is a folder",
        "too-large": "not read: it takes 101 bytes, over the 100 bytes a run record may take",
    }[kind]
    with pytest.raises(MatchoptError, match=words):
        read_regular(path, 100, "run record")


def test_a_fifo_named_like_a_record_does_not_hang_run(tmp_path, capsys):
    out = tmp_path / "R"
    (out / "styblinski-tang" / "random").mkdir(parents=True)
    os.mkfifo(out / "styblinski-tang" / "random" / "seed0.json")
    assert cli.main([*RUN, "--out", str(out)]) == 2
    assert "not a regular file" in capsys.readouterr().err
