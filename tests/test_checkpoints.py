"""Training snapshots: a run killed in the middle continues and gives the same designs."""

from __future__ import annotations

import errno
import itertools
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from interrupts import counted

import matchopt.checkpoints as checkpoints
import matchopt.methods.matchopt as matchopt_module
from matchopt.checkpoints import TrainingCheckpoint, run_key
from matchopt.methods import RunContext, make_method
from matchopt.records import read_record
from matchopt.safe_paths import LinkError
from matchopt.tasks import load_task

SETTINGS = {"epochs": 12, "validation_every": 2}


def fit_killed_at_draw(method, data, snapshot, monkeypatch, draw: int) -> None:
    """``method`` fitted keeping snapshots in ``snapshot``, killed (Ctrl-C) at its ``draw``-th
    epoch of trajectories."""
    real = matchopt_module.sample_trajectories
    monkeypatch.setattr(matchopt_module, "sample_trajectories", counted(real, [], kill_at=draw))
    with pytest.raises(KeyboardInterrupt):
        method.resume_from(snapshot, 0).fit(data)
    monkeypatch.setattr(matchopt_module, "sample_trajectories", real)


def fit_killed_midway(data, snapshot, monkeypatch) -> None:
    """A validated-quick fit keeping snapshots in ``snapshot``, killed at its 8th trajectory
    draw: in the middle of training, after the first validation (the selector holds parameters).
    """
    first = make_method("matchopt", "validated-quick", SETTINGS, seed=1)
    fit_killed_at_draw(first, data, snapshot, monkeypatch, draw=8)


def test_an_interrupted_fit_resumes_to_the_same_designs(tmp_path, monkeypatch):
    data = load_task("potts").offline
    reference = make_method("matchopt", "validated-quick", SETTINGS, seed=1).fit(data)
    snapshot = tmp_path / "snapshot.pt"
    fit_killed_midway(data, snapshot, monkeypatch)
    assert snapshot.is_file()
    resumed = make_method("matchopt", "validated-quick", SETTINGS, seed=1)
    resumed.resume_from(snapshot, every=0).fit(data)
    np.testing.assert_array_equal(resumed.propose(16), reference.propose(16))
    assert resumed.losses_ == reference.losses_
    assert resumed.fit_report()["validation"] == reference.fit_report()["validation"]
    # The finished training stays (a run killed while searching takes it from there): a fit
    # from it takes no training step and restores the selected checkpoint.
    assert snapshot.is_file()
    monkeypatch.setattr(matchopt_module, "fused_loss_and_gradients", untouched)
    again = make_method("matchopt", "validated-quick", SETTINGS, seed=1)
    again.resume_from(snapshot, every=0).fit(data)
    np.testing.assert_array_equal(again.propose(16), reference.propose(16))
    assert again.selected_epoch_ == reference.selected_epoch_
    assert again.fit_report()["validation"] == reference.fit_report()["validation"]


def untouched(*args, **kwargs):
    raise AssertionError("trained again from a finished snapshot")


def test_a_snapshot_of_another_run_is_ignored(tmp_path):
    data = load_task("potts").offline
    snapshot = tmp_path / "snapshot.pt"
    method = make_method("matchopt", "quick", {"epochs": 3}, seed=0).resume_from(snapshot, 0)
    method.run.snapshot.bind("another run")
    method.run.snapshot.save("main", {"epoch": 2})
    fitted = make_method("matchopt", "quick", {"epochs": 3}, seed=0).resume_from(snapshot, 0)
    reference = make_method("matchopt", "quick", {"epochs": 3}, seed=0).fit(data)
    np.testing.assert_array_equal(fitted.fit(data).propose(8), reference.propose(8))
    # Methods without snapshots are given none (GA keeps it: its seed batches resume).
    random_designs, ga = make_method("random", "quick"), make_method("ga", "quick")
    random_designs.run = ga.run = RunContext.of(snapshot)
    assert random_designs.run.snapshot is None and ga.run.snapshot is not None
    assert not hasattr(random_designs, "resume_from") and not hasattr(ga, "resume_from")


def test_a_snapshot_holds_tensors_of_no_device_and_resumes_on_the_cpu(tmp_path, monkeypatch):
    """A snapshot file holds CPU copies of its tensors (safetensors: no device), so one written
    on a GPU resumes on a CPU-only machine; and it is read without torch's unpickler."""
    data = load_task("potts").offline
    reference = make_method("matchopt", "validated-quick", SETTINGS, seed=1).fit(data)
    snapshot = tmp_path / "snapshot.pt"
    fit_killed_midway(data, snapshot, monkeypatch)
    assert snapshot.read_bytes()[:4] != b"PK\x03\x04"  # not a torch.save archive
    monkeypatch.setattr(torch, "load", lambda *a, **k: pytest.fail("torch.load was called"))
    resumed = make_method("matchopt", "validated-quick", SETTINGS, seed=1)
    checkpoint = resumed.resume_from(snapshot, every=0).run.snapshot
    checkpoint.bind(run_key("MatchOpt", resumed.config_, resumed.seed, data.x, data.y))
    saved = checkpoint.load("main")
    assert saved is not None and int(saved["epoch"]) > 2  # read, not skipped as foreign
    tensors = [saved["parts"]["model"], saved["values"]["selector"]["parameters"]]
    assert all(t.device.type == "cpu" for part in tensors for t in part.values())
    resumed.fit(data)
    np.testing.assert_array_equal(resumed.propose(16), reference.propose(16))
    assert resumed.losses_ == reference.losses_


def test_kill_and_rerun_of_the_command_gives_the_same_designs(tmp_path):
    """``matchopt run`` killed (SIGKILL) after its first snapshot; the same command again."""
    env = {**os.environ, "MATCHOPT_CHECKPOINT_SECONDS": "0"}
    command = [
        sys.executable, "-m", "matchopt.cli", "run", "--task", "potts", "--preset", "quick",
        "--set", "epochs=40", "--threads", "1",
    ]  # fmt: skip
    killed = tmp_path / "killed"
    process = subprocess.Popen([*command, "--out", str(killed)], env=env, stderr=subprocess.PIPE)
    snapshot = killed / ".snapshots" / "potts" / "matchopt" / "seed0.pt"
    deadline = time.monotonic() + 120
    while not snapshot.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    assert process.poll() is None, "the run ended before its first snapshot"
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert snapshot.is_file() and not (killed / "potts" / "matchopt" / "seed0.json").exists()
    subprocess.run([*command, "--out", str(killed)], env=env, check=True, capture_output=True)
    whole = tmp_path / "whole"
    subprocess.run([*command, "--out", str(whole)], env=env, check=True, capture_output=True)
    designs = "potts/matchopt/seed0.designs.npy"
    np.testing.assert_array_equal(np.load(killed / designs), np.load(whole / designs))
    assert not snapshot.exists()
    # The resumed record's times include the training of the killed sitting.
    resumed = read_record(killed / "potts" / "matchopt" / "seed0.json")
    earlier = resumed.extra["resumed"]["earlier_seconds"]
    assert earlier > 0 and resumed.fit_seconds > earlier
    assert resumed.extra["cell_seconds"] > earlier
    assert "resumed" not in read_record(whole / "potts" / "matchopt" / "seed0.json").extra


def test_a_snapshot_keeps_the_seconds_of_all_sittings(tmp_path, monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(checkpoints.time, "monotonic", lambda: clock[0])
    first = TrainingCheckpoint(tmp_path / "snapshot.pt", every=0)
    first.bind("run")
    clock[0] += 30
    first.save("main", {"epoch": 1})
    assert first.load("main") is not None and first.earlier_seconds == 0  # its own snapshot
    clock[0] += 500  # trained on, killed before the next snapshot: that time is redone
    second = TrainingCheckpoint(tmp_path / "snapshot.pt", every=0)
    second.bind("run")
    assert second.load("main") is not None
    assert second.earlier_seconds == 30
    clock[0] += 20
    second.save("main", {"epoch": 2})
    third = TrainingCheckpoint(tmp_path / "snapshot.pt", every=0)
    third.bind("run")
    third.load("main")
    assert third.earlier_seconds == 50


@pytest.mark.parametrize(
    "name, module, hook, task",
    [
        ("ddom", "matchopt.methods.ddom", "denoising_loss", "styblinski-tang"),
        ("mins", "matchopt.methods.mins", "wgan_gp_loss", "potts"),
        ("coms", "matchopt.methods.coms", "conservative_losses", "styblinski-tang"),
        ("bonet", "matchopt.methods.bonet", "trajectory_loss", "potts"),
    ],
)
def test_baselines_resume_to_the_same_designs(tmp_path, monkeypatch, name, module, hook, task):
    import importlib

    method_module = importlib.import_module(module)
    data = load_task(task).offline
    settings = {"epochs": 6}
    reference = make_method(name, "quick", settings, seed=2).fit(data)
    snapshot = tmp_path / f"{name}.pt"
    real = getattr(method_module, hook)
    # Steps per epoch, counted on the reference run's loss function calls.
    counter = []
    monkeypatch.setattr(method_module, hook, counted(real, counter))
    make_method(name, "quick", {"epochs": 1}, seed=2).fit(data)
    steps_per_epoch = len(counter)
    early_in_fifth_epoch = 4 * steps_per_epoch + 1
    monkeypatch.setattr(method_module, hook, counted(real, [], kill_at=early_in_fifth_epoch))
    with pytest.raises(KeyboardInterrupt):
        make_method(name, "quick", settings, seed=2).resume_from(snapshot, 0).fit(data)
    assert snapshot.is_file()
    monkeypatch.setattr(method_module, hook, real)
    resumed = make_method(name, "quick", settings, seed=2).resume_from(snapshot, 0).fit(data)
    np.testing.assert_array_equal(resumed.propose(16), reference.propose(16))
    assert resumed.losses_ == reference.losses_
    # The last epoch left the finished state: a fit from it (a run killed while proposing,
    # rerun) takes no training step and gives the same designs.
    assert snapshot.is_file()
    monkeypatch.setattr(method_module, hook, untouched)
    again = make_method(name, "quick", settings, seed=2).resume_from(snapshot, 0).fit(data)
    np.testing.assert_array_equal(again.propose(16), reference.propose(16))
    assert again.losses_ == reference.losses_


def test_an_interrupted_cma_es_search_redoes_only_its_unfinished_runs(tmp_path, monkeypatch):
    import matchopt.methods.cma_es as cma_module

    data = load_task("potts").offline
    settings = {"runs_at_once": 4}  # 16 runs: four groups of four
    reference = make_method("cma-es", "quick", settings, seed=3).fit(data).propose(16)
    snapshot = tmp_path / "cma-es.pt"
    real, calls = cma_module._lockstep_runs, []
    # The third group of runs is cut short.
    monkeypatch.setattr(cma_module, "_lockstep_runs", counted(real, calls, kill_at=3))
    method = make_method("cma-es", "quick", settings, seed=3).resume_from(snapshot, 0).fit(data)
    with pytest.raises(KeyboardInterrupt):
        method.propose(16)
    assert (tmp_path / "cma-es.search-16.pt").is_file()  # one file per stage: the search of 16
    calls.clear()
    monkeypatch.setattr(cma_module, "_lockstep_runs", counted(real, calls))
    resumed = make_method("cma-es", "quick", settings, seed=3).resume_from(snapshot, 0).fit(data)
    np.testing.assert_array_equal(resumed.propose(16), reference)
    assert len(calls) == 2  # groups 3 and 4 only
    # The finished search stays until the record is written: proposing again runs nothing.
    calls.clear()
    np.testing.assert_array_equal(resumed.propose(16), reference)
    assert not calls
    # Another number of designs is another search: the snapshot of 16 is not used for 8.
    assert resumed.resume_from(snapshot, 0).propose(8).shape == (8, 12)
    assert calls
    checkpoints.remove_snapshot(snapshot)
    assert not list(tmp_path.glob("*.pt"))  # both searches' files


def test_a_refit_killed_midway_keeps_its_finished_training(tmp_path, monkeypatch):
    """MATCH-OPT with a refit runs two loops, each with its own file: a kill in the refit
    resumes the refit, and the training before it is restored finished, not trained again."""
    data = load_task("potts").offline
    settings = {**SETTINGS, "refit": True}
    starts, calls, stage = [], {"main": 0, "refit": 0}, ["main"]
    real_start, real_loss = (
        checkpoints.LoopSnapshots.start,
        matchopt_module.fused_loss_and_gradients,
    )

    def recorded_start(self, losses, *args, **kwargs):
        stage[0] = self.stage
        starts.append((self.stage, real_start(self, losses, *args, **kwargs)))
        return starts[-1][1]

    def counted_loss(*args, **kwargs):
        calls[stage[0]] += 1
        if calls[stage[0]] == kill_at.get(stage[0]):
            raise KeyboardInterrupt
        return real_loss(*args, **kwargs)

    monkeypatch.setattr(checkpoints.LoopSnapshots, "start", recorded_start)
    monkeypatch.setattr(matchopt_module, "fused_loss_and_gradients", counted_loss)
    kill_at = {}
    reference = make_method("matchopt", "validated-quick", settings, seed=1).fit(data)
    per_epoch = calls["refit"] // reference.selected_epoch_
    assert reference.selected_epoch_ >= 3 and starts == [("main", 0), ("refit", 0)]

    snapshot = tmp_path / "snapshot.pt"
    kill_at, calls["main"], calls["refit"] = {"refit": 2 * per_epoch + 1}, 0, 0  # 3rd epoch
    with pytest.raises(KeyboardInterrupt):
        make_method("matchopt", "validated-quick", settings, seed=1).resume_from(
            snapshot, every=0
        ).fit(data)
    assert snapshot.is_file() and (tmp_path / "snapshot.refit.pt").is_file()

    kill_at, calls["main"], calls["refit"] = {}, 0, 0
    starts.clear()
    resumed = make_method("matchopt", "validated-quick", settings, seed=1)
    resumed.resume_from(snapshot, every=0).fit(data)
    assert starts == [("main", SETTINGS["epochs"]), ("refit", 2)] and calls["main"] == 0
    np.testing.assert_array_equal(resumed.propose(16), reference.propose(16))
    assert resumed.selected_epoch_ == reference.selected_epoch_
    assert resumed.losses_ == reference.losses_
    checkpoints.remove_snapshot(snapshot)
    assert not list(tmp_path.glob("*.pt"))


def test_a_cell_killed_while_proposing_does_not_train_again(tmp_path, monkeypatch):
    """The snapshot outlives ``fit``: a cell stopped in its search, rerun, reuses the training;
    it is removed once the record is written."""
    from matchopt.bench.cells import Cell, run_cell, save_record
    from matchopt.methods.matchopt import MatchOpt

    monkeypatch.setenv("MATCHOPT_CHECKPOINT_SECONDS", "0")
    cell = Cell("potts", "matchopt", 0, "quick", (("epochs", "4"),))
    whole, designs = run_cell(cell, threads=1)
    snapshot = cell.snapshot_path(tmp_path)
    real_propose = MatchOpt.propose

    def stopped(self, n=128):
        raise KeyboardInterrupt

    monkeypatch.setattr(MatchOpt, "propose", stopped)
    with pytest.raises(KeyboardInterrupt):
        run_cell(cell, threads=1, snapshot=snapshot)
    assert snapshot.is_file()
    monkeypatch.setattr(MatchOpt, "propose", real_propose)
    monkeypatch.setattr(matchopt_module, "fused_loss_and_gradients", untouched)
    record, again = run_cell(cell, threads=1, snapshot=snapshot)
    np.testing.assert_array_equal(again, designs)
    assert record.scores == whole.scores
    assert record.extra["resumed"]["earlier_seconds"] > 0  # the training of the first sitting
    assert snapshot.is_file()  # until the record is written
    save_record(cell, tmp_path, record, again)
    assert cell.record_path(tmp_path).is_file() and not snapshot.exists()


def test_remove_snapshot_removes_its_stages_only(tmp_path):
    names = ["run[1].pt", "run[1].refit.pt", "run1.refit.pt", "run[1]0.refit.pt", "other.pt"]
    # The fits of a method made of several, and names that only look like theirs.
    names += ["run[1].full0.member3.pt", "run[1].lower12.pt", "run[1].lower1.search-16.pt"]
    names += ["run[1].full0.full1.pt", "run[1].pool0.pt", "run[1].lower01.pt"]
    for name in names:
        (tmp_path / name).write_bytes(b"")
    shared = tmp_path / "run[1].shared"  # their Gaussian ensembles: cache files go, others stay
    shared.mkdir()
    (shared / ("ab" * 16 + ".pt")).write_bytes(b"")
    checkpoints.remove_snapshot(tmp_path / "run[1].pt")  # glob characters in the name
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "other.pt",
        "run1.refit.pt",
        "run[1].full0.full1.pt",
        "run[1].lower01.pt",
        "run[1].pool0.pt",
        "run[1]0.refit.pt",
    ]
    assert not shared.exists()
    shared.mkdir()
    (shared / "notes.txt").write_text("mine")
    checkpoints.remove_snapshot(tmp_path / "run[1].pt")
    assert (shared / "notes.txt").read_text() == "mine"


def test_the_fits_of_a_method_made_of_several_keep_files_beside_its_snapshot(tmp_path):
    checkpoint = checkpoints.TrainingCheckpoint(tmp_path / ".snapshots" / "t" / "seed0.pt", 0)
    part = checkpoint.part("lower1")
    assert part.path == checkpoint.path.with_name("seed0.lower1.pt")
    assert part.stage_path("member2").name == "seed0.lower1.member2.pt"
    assert (part.root, part.every) == (checkpoint.root, 0)
    assert checkpoint.shared_folder.name == "seed0.shared"
    with pytest.raises(ValueError, match="STAGE_NAME"):
        checkpoint.part("pool0")


def test_a_shared_folder_that_is_a_link_is_not_followed(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / ("ab" * 16 + ".pt")).write_bytes(b"kept")
    folder = tmp_path / ".snapshots" / "t"
    folder.mkdir(parents=True)
    (folder / "seed0.pt").write_bytes(b"")
    (folder / "seed0.shared").symlink_to(elsewhere)
    with pytest.raises(LinkError, match="seed0.shared is a link"):
        checkpoints.remove_snapshot(folder / "seed0.pt", root=tmp_path)
    assert (elsewhere / ("ab" * 16 + ".pt")).read_bytes() == b"kept"


@pytest.fixture
def interactive_sigint():
    """SIGINT as in an interactive terminal (a background or nohup run of the tests ignores
    it); the handler before comes back after the test."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield signal.default_int_handler
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_in_run_saves_a_snapshot_at_once_and_the_rerun_resumes_to_the_same_designs(
    tmp_path, monkeypatch, capsys, interactive_sigint
):
    """A first Ctrl-C while `matchopt run` trains: the epoch ends, a snapshot is written (none
    was due: the timed interval is far away), the run stops with 130, and the rerun continues
    from that epoch to the designs of an uninterrupted run."""
    from matchopt.cli import main

    monkeypatch.setenv(checkpoints.EVERY_ENV, "100000")
    argv = ["run", "--task", "potts", "--method", "matchopt", "--preset", "quick"]
    argv += ["--set", "epochs=12", "--seeds", "1"]
    assert main([*argv, "--out", str(tmp_path / "reference")]) == 0
    real, calls, epochs_trained = matchopt_module.sample_trajectories, [], []

    def ctrl_c_at_the_8th_draw(*args, **kwargs):
        calls.append(1)
        if len(calls) == 8:
            os.kill(os.getpid(), signal.SIGINT)  # as a terminal's Ctrl-C
        return real(*args, **kwargs)

    monkeypatch.setattr(matchopt_module, "sample_trajectories", ctrl_c_at_the_8th_draw)
    out = tmp_path / "run"
    assert main([*argv, "--out", str(out)]) == 130
    assert "stopping after this epoch to save a training snapshot" in capsys.readouterr().err
    snapshot = out / checkpoints.SNAPSHOT_FOLDER / "potts" / "matchopt" / "seed1.pt"
    assert snapshot.is_file() and not (out / "potts" / "matchopt" / "seed1.json").exists()
    assert 0 < checkpoints.read_snapshot(snapshot)["epoch"] < 12
    assert signal.getsignal(signal.SIGINT) is interactive_sigint  # the caller's handler is back

    def counting(*args, **kwargs):
        epochs_trained.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(matchopt_module, "sample_trajectories", counting)
    assert main([*argv, "--out", str(out)]) == 0
    assert 0 < len(epochs_trained) < 12  # resumed, not trained from scratch
    np.testing.assert_array_equal(
        np.load(out / "potts" / "matchopt" / "seed1.designs.npy"),
        np.load(tmp_path / "reference" / "potts" / "matchopt" / "seed1.designs.npy"),
    )


def test_outside_a_training_loop_ctrl_c_stops_at_once(interactive_sigint):
    with checkpoints.save_on_interrupt(), pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)  # the signal handler raises here


def test_a_process_that_ignores_ctrl_c_goes_on_ignoring_it():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with checkpoints.save_on_interrupt():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGINT)  # ignored: nothing happens
    finally:
        signal.signal(signal.SIGINT, previous)


# --- Crafted or corrupted snapshots --------------------------------------------------------------

#: A validated MATCH-OPT run short enough to train in a second: its snapshot holds every kind
#: of part (module, optimizer, numpy generator) and value (losses, history, selector).
CRAFT_SETTINGS = {"epochs": 3, "validation_every": 2}


def finished_snapshot(path, preset="validated-quick", settings=CRAFT_SETTINGS, name="matchopt"):
    """The snapshot of a whole run (``every=0``), with the run's real key, read back as the
    dict that the snapshot file holds."""
    data = load_task("potts").offline
    make_method(name, preset, settings, seed=0).resume_from(path, every=0).fit(data)
    return checkpoints.read_snapshot(path)


def sealed(state):
    """``state`` with its digest made again, as a crafter would: then the field checks are what
    must refuse it."""
    content = {k: v for k, v in state.items() if k != "digest"}
    return {**content, "digest": checkpoints.content_digest(content)}


def _set(path, value):
    """An edit of a snapshot: ``path`` (keys from the top) set to ``value``."""

    def edit(state):
        for key in path[:-1]:
            state = state[key]
        state[path[-1]] = value

    return edit


def _drop(path):
    def edit(state):
        for key in path[:-1]:
            state = state[key]
        del state[path[-1]]

    return edit


#: Case -> (edit of a real snapshot, what the warning says is wrong).
CRAFTED = {
    "epoch-far-ahead": (_set(["epoch"], 10**9), "snapshot epoch 1000000000 is outside 0..3"),
    "epoch-negative": (_set(["epoch"], -5), "snapshot epoch -5 is outside 0..3"),
    "epoch-not-an-integer": (_set(["epoch"], "abc"), "snapshot epoch 'abc' is not an integer"),
    "epoch-a-bool": (_set(["epoch"], True), "snapshot epoch True is not an integer"),
    "parts-empty": (_set(["parts"], {}), "snapshot has no part 'model'"),
    "weight-of-a-wrong-shape": (
        _set(["parts", "model", "hidden.0.weight"], torch.zeros(3, 3)),
        "snapshot part 'model'['hidden.0.weight'] has shape (3, 3) instead of (64, 36)",
    ),
    "weight-missing": (
        _drop(["parts", "model", "output.bias"]),
        "snapshot part 'model' has no entry 'output.bias'",
    ),
    "weight-not-a-tensor": (
        _set(["parts", "model", "output.bias"], [0.0]),
        "snapshot part 'model'['output.bias'] is [0.0], not a tensor",
    ),
    "optimizer-moment-of-a-wrong-shape": (
        _set(["parts", "optimizer", "state", 0, "exp_avg"], torch.zeros(2)),
        "snapshot part 'optimizer'['state'][0]['exp_avg'] has shape (2,) instead of (64, 36)",
    ),
    "optimizer-step-missing": (
        _drop(["parts", "optimizer", "state", 0, "step"]),
        "snapshot part 'optimizer'['state'][0] has entries ['exp_avg', 'exp_avg_sq'] instead of "
        "['exp_avg', 'exp_avg_sq', 'step']",
    ),
    "optimizer-of-other-parameters": (
        _set(["parts", "optimizer", "state", 99], {}),
        "snapshot part 'optimizer'['state'][99]: no such parameter",
    ),
    "optimizer-setting-of-a-wrong-type": (
        _set(["parts", "optimizer", "param_groups", 0, "lr"], "fast"),
        "snapshot part 'optimizer'['param_groups'][0]['lr'] is 'fast', not a number like 0.0001",
    ),
    "generator-of-another-kind": (
        _set(["parts", "rng", "bit_generator"], "MT19937"),
        "snapshot part 'rng'['bit_generator'] is 'MT19937' instead of 'PCG64'",
    ),
    "generator-state-out-of-range": (
        _set(["parts", "rng", "state", "state"], -1),
        "snapshot part 'rng' is not a state of a PCG64 generator",
    ),
    "values-empty": (_set(["values"], {}), "snapshot losses None are not a list of 3 numbers"),
    "losses-short": (
        _set(["values", "losses"], [1.0, 2.0]),
        "snapshot losses [1.0, 2.0] are not a list of 3 numbers",
    ),
    "losses-not-numbers": (
        _set(["values", "losses"], ["a", "b", "c"]),
        "snapshot losses ['a', 'b', 'c'] are not all numbers",
    ),
    "history-too-long": (
        _set(["values", "history"], [{"epoch": 2}] * 5),
        "snapshot history [{'epoch': 2}, {'epoch': 2}, {'epoch'... is not a list of 2 evaluations",
    ),
    "selector-parameters-of-a-wrong-shape": (
        _set(["values", "selector", "parameters", "output.weight"], torch.zeros(16, 1)),
        "snapshot selector parameters['output.weight'] has shape (16, 1) instead of (1, 16)",
    ),
    "selector-epoch-ahead": (
        _set(["values", "selector", "best_epoch"], 7),
        "snapshot selector best epoch 7 is outside 1..3",
    ),
    "validation-seconds-nan": (
        _set(["values", "validation_seconds"], math.nan),
        "snapshot validation time nan is not a number of seconds >= 0",
    ),
    "seconds-nan": (
        _set(["seconds"], math.nan),
        "snapshot training time nan is not a number of seconds from 0 to 3.2e+07",
    ),
    "seconds-negative": (
        _set(["seconds"], -1.0),
        "snapshot training time -1.0 is not a number of seconds from 0 to 3.2e+07",
    ),
    "seconds-beyond-a-year": (
        _set(["seconds"], 1e300),
        "snapshot training time 1e+300 is not a number of seconds from 0 to 3.2e+07",
    ),
    "learning-rate-of-another-run": (
        _set(["parts", "optimizer", "param_groups", 0, "lr"], 1e-2),
        "snapshot part 'optimizer'['param_groups'][0]['lr'] is 0.01, but this run's is 0.0001",
    ),
    "betas-of-another-run": (
        _set(["parts", "optimizer", "param_groups", 0, "betas"], (0.5, 0.999)),
        "snapshot part 'optimizer'['param_groups'][0]['betas'] is (0.5, 0.999), but this run's "
        "is (0.9, 0.999)",
    ),
}


def warnings_in(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("matchopt: warning:")]


@pytest.mark.parametrize("case", CRAFTED)
def test_a_crafted_snapshot_is_ignored_with_a_warning_and_training_starts_from_scratch(
    tmp_path, monkeypatch, capsys, case
):
    """A snapshot with the run's key but a bad field: nothing is restored from it (no part
    half-restored), one warning line names the file and the problem, and the run trains from
    scratch to the designs of a run without snapshots."""
    edit, problem = CRAFTED[case]
    data = load_task("potts").offline
    reference = make_method("matchopt", "validated-quick", CRAFT_SETTINGS, seed=0).fit(data)
    snapshot = tmp_path / "seed0.pt"
    state = finished_snapshot(snapshot)
    edit(state)
    snapshot.write_bytes(checkpoints.snapshot_bytes(sealed(state)))
    capsys.readouterr()

    real_start, starts = checkpoints.LoopSnapshots.start, []

    def recorded_start(self, *args, **kwargs):
        starts.append(real_start(self, *args, **kwargs))
        return starts[-1]

    monkeypatch.setattr(checkpoints.LoopSnapshots, "start", recorded_start)
    method = make_method("matchopt", "validated-quick", CRAFT_SETTINGS, seed=0)
    method.resume_from(snapshot, every=0).fit(data)
    assert warnings_in(capsys.readouterr().err) == [
        f"matchopt: warning: {snapshot}: {problem}; training starts from scratch"
    ]
    assert starts == [0]
    assert method.run.resumed_seconds == 0
    assert method.losses_ == reference.losses_
    assert method.fit_report()["validation"] == reference.fit_report()["validation"]
    assert method.selected_epoch_ == reference.selected_epoch_
    np.testing.assert_array_equal(method.propose(16), reference.propose(16))
    # The fresh training wrote a good snapshot over the bad one.
    assert checkpoints.read_snapshot(snapshot)["epoch"] == CRAFT_SETTINGS["epochs"]


def test_a_snapshot_that_claims_epochs_it_did_not_train_is_not_resumed(
    tmp_path, monkeypatch, capsys
):
    """A snapshot of epoch 1 of 3 whose losses are padded to 3 and epoch raised to 3 (digest
    made again) would skip two epochs: its optimizer took one epoch's steps, so it is refused
    and the run trains from scratch to the designs of a run without snapshots."""
    data = load_task("potts").offline
    settings = {"epochs": 3}
    reference = make_method("matchopt", "quick", settings, seed=0).fit(data)
    snapshot = tmp_path / "seed0.pt"
    killed = make_method("matchopt", "quick", settings, seed=0)
    fit_killed_at_draw(killed, data, snapshot, monkeypatch, draw=2)  # in epoch two
    state = checkpoints.read_snapshot(snapshot)
    assert state["epoch"] == 1
    state["epoch"], state["values"]["losses"] = 3, state["values"]["losses"] * 3
    snapshot.write_bytes(checkpoints.snapshot_bytes(sealed(state)))
    capsys.readouterr()
    method = make_method("matchopt", "quick", settings, seed=0).resume_from(snapshot, 0)
    method.fit(data)
    (line,) = warnings_in(capsys.readouterr().err)
    steps = int(state["parts"]["optimizer"]["state"][0]["step"])
    assert line == (
        f"matchopt: warning: {snapshot}: snapshot part 'optimizer' took {steps} optimizer "
        f"steps, not the {3 * steps} of 3 epochs; training starts from scratch"
    )
    assert method.losses_ == reference.losses_
    np.testing.assert_array_equal(method.propose(16), reference.propose(16))


def test_an_unreadable_snapshot_is_ignored_with_a_warning(tmp_path, capsys):
    data = load_task("potts").offline
    snapshot = tmp_path / "seed0.pt"
    finished_snapshot(snapshot, "quick", {"epochs": 2})
    snapshot.write_bytes(snapshot.read_bytes()[:1000])  # cut short
    capsys.readouterr()
    method = make_method("matchopt", "quick", {"epochs": 2}, seed=0)
    method.resume_from(snapshot, every=0).fit(data)
    assert warnings_in(capsys.readouterr().err) == [
        f"matchopt: warning: {snapshot}: not a readable training snapshot; training starts "
        "from scratch"
    ]
    reference = make_method("matchopt", "quick", {"epochs": 2}, seed=0).fit(data)
    assert method.losses_ == reference.losses_


def test_a_crafted_coms_snapshot_is_ignored_before_any_part_is_restored(tmp_path, capsys):
    """COMs restores a value of its own (log alpha) after its parts: a bad one is found before
    the parts are restored."""
    data = load_task("styblinski-tang").offline
    settings = {"epochs": 2}
    snapshot = tmp_path / "coms.pt"
    make_method("coms", "quick", settings, seed=2).resume_from(snapshot, 0).fit(data)
    state = checkpoints.read_snapshot(snapshot)
    state["values"]["log_alpha"] = torch.zeros(3)
    snapshot.write_bytes(checkpoints.snapshot_bytes(sealed(state)))
    capsys.readouterr()
    resumed = make_method("coms", "quick", settings, seed=2).resume_from(snapshot, 0).fit(data)
    assert warnings_in(capsys.readouterr().err) == [
        f"matchopt: warning: {snapshot}: snapshot log_alpha has shape (3,) instead of (1,); "
        "training starts from scratch"
    ]
    reference = make_method("coms", "quick", settings, seed=2).fit(data)
    assert resumed.losses_ == reference.losses_
    assert resumed.alpha_ == reference.alpha_
    np.testing.assert_array_equal(resumed.propose(8), reference.propose(8))


def test_a_crafted_cma_es_search_snapshot_is_ignored_with_a_warning(tmp_path, capsys):
    data = load_task("potts").offline
    settings = {"runs_at_once": 4}
    reference = make_method("cma-es", "quick", settings, seed=3).fit(data).propose(8)
    snapshot = tmp_path / "cma-es.pt"
    make_method("cma-es", "quick", settings, seed=3).resume_from(snapshot, 0).fit(data).propose(8)
    search = tmp_path / "cma-es.search-8.pt"
    state = checkpoints.read_snapshot(search)
    state["groups"] = [torch.zeros(4, 5), torch.zeros(4, 36)]  # 36 features
    search.write_bytes(checkpoints.snapshot_bytes(sealed(state)))
    capsys.readouterr()
    method = make_method("cma-es", "quick", settings, seed=3).resume_from(snapshot, 0).fit(data)
    np.testing.assert_array_equal(method.propose(8), reference)
    assert warnings_in(capsys.readouterr().err) == [
        f"matchopt: warning: {search}: snapshot group 0 is a tensor of shape (4, 5), not one of "
        "shape (4, 36); the search starts from scratch"
    ]


def test_a_snapshot_with_a_nan_training_time_gives_a_record_the_report_reads(tmp_path, capsys):
    """The training time of earlier sittings comes from the snapshot: NaN would make the
    record's fit_seconds NaN, which the report (and a rerun) refuse."""
    from matchopt.bench.cells import Cell, run_cell
    from matchopt.records import write_record
    from matchopt.report import write_report

    cell = Cell("potts", "matchopt", 0, "quick", (("epochs", "3"),))
    snapshot = cell.snapshot_path(tmp_path)
    snapshot.parent.mkdir(parents=True)
    state = finished_snapshot(snapshot, "quick", {"epochs": 3})
    state["seconds"] = math.nan
    snapshot.write_bytes(checkpoints.snapshot_bytes(sealed(state)))
    capsys.readouterr()
    record, designs = run_cell(cell, threads=1, snapshot=snapshot)
    assert len(warnings_in(capsys.readouterr().err)) == 1
    assert math.isfinite(record.fit_seconds) and "resumed" not in record.extra
    write_record(tmp_path, record, designs)
    assert read_record(cell.record_path(tmp_path)).fit_seconds == record.fit_seconds
    assert "potts" in write_report(tmp_path)


# --- A full disk ---------------------------------------------------------------------------------


@pytest.fixture
def full_disk(monkeypatch):
    """``full_disk(which)``: from now on, the atomic writes of :mod:`matchopt.safe_paths` whose
    target path ``which(path)`` accepts fail as on a full disk: their temporary file is made,
    its first write raises ``OSError(ENOSPC)``. ``full_disk(None)``: space again."""
    import matchopt.safe_paths as safe_paths

    real_temporary, real_fdopen = safe_paths.Folder._temporary, safe_paths.os.fdopen
    which, targets = [None], {}

    class FullFile:
        def __init__(self, handle):
            self.handle = handle

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

        def __getattr__(self, name):
            return getattr(self.handle, name)

    def temporary(folder, name, owned):
        tmp, fd = real_temporary(folder, name, owned)
        targets[fd] = folder.path / name
        return tmp, fd

    def fdopen(fd, *args, **kwargs):
        handle = real_fdopen(fd, *args, **kwargs)
        target = targets.pop(fd, None)
        if target is not None and which[0] is not None and which[0](target):
            return FullFile(handle)
        return handle

    monkeypatch.setattr(safe_paths.Folder, "_temporary", temporary)
    monkeypatch.setattr(safe_paths.os, "fdopen", fdopen)

    def fill(predicate):
        which[0] = predicate

    return fill


def temporaries(folder) -> list:
    return [p for p in Path(folder).rglob("*.tmp")]


def test_a_snapshot_that_cannot_be_written_leaves_the_last_good_one_and_the_run_goes_on(
    tmp_path, monkeypatch, capsys, full_disk
):
    """The disk fills up after the first snapshot: one warning, the training goes on to the
    designs of a run without snapshots, the first snapshot stays whole (no temporary file left),
    and a rerun resumes from it."""
    data = load_task("potts").offline
    settings = {"epochs": 4}
    reference = make_method("matchopt", "quick", settings, seed=0).fit(data)
    snapshot = tmp_path / "seed0.pt"
    writes = itertools.count()
    full_disk(lambda path: path == snapshot and next(writes) >= 1)
    capsys.readouterr()
    method = make_method("matchopt", "quick", settings, seed=0).resume_from(snapshot, every=0)
    method.fit(data)
    assert warnings_in(capsys.readouterr().err) == [
        f"matchopt: warning: could not save a training snapshot to {snapshot}: No space left "
        "on device; the run goes on without it"
    ]  # once, though three snapshots failed
    assert next(writes) == 4
    np.testing.assert_array_equal(method.propose(16), reference.propose(16))
    assert checkpoints.read_snapshot(snapshot)["epoch"] == 1
    assert not temporaries(tmp_path)

    full_disk(None)
    real, epochs_trained = matchopt_module.sample_trajectories, []
    monkeypatch.setattr(
        matchopt_module,
        "sample_trajectories",
        lambda *a, **k: epochs_trained.append(1) or real(*a, **k),
    )
    rerun = make_method("matchopt", "quick", settings, seed=0).resume_from(snapshot, every=0)
    rerun.fit(data)
    assert len(epochs_trained) == 3  # from the snapshot of epoch 1
    assert rerun.losses_ == reference.losses_
    np.testing.assert_array_equal(rerun.propose(16), reference.propose(16))


RUN = ["run", "--task", "potts", "--method", "matchopt", "--preset", "quick", "--set", "epochs=3"]


def test_run_whose_final_snapshot_cannot_be_written_still_writes_its_record(
    tmp_path, capsys, full_disk
):
    """The case of the issue: the run trained to the end, then the final snapshot (50 KB) did
    not fit where the record (8 KB) does: the finished result is kept."""
    from matchopt.cli import main

    full_disk(lambda path: path.suffix == ".pt")
    assert main([*RUN, "--out", str(tmp_path)]) == 0
    snapshot = tmp_path / checkpoints.SNAPSHOT_FOLDER / "potts" / "matchopt" / "seed0.pt"
    assert warnings_in(capsys.readouterr().err) == [
        f"matchopt: warning: could not save a training snapshot to {snapshot}: No space left "
        "on device; the run goes on without it"
    ]
    assert read_record(tmp_path / "potts" / "matchopt" / "seed0.json").p100 > 0
    assert not snapshot.exists() and not temporaries(tmp_path)


def errors_in(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("matchopt: error:")]


@pytest.mark.parametrize("command", ["run", "bench"])
def test_a_record_that_cannot_be_written_keeps_the_snapshot_and_the_rerun_resumes(
    tmp_path, monkeypatch, capsys, full_disk, command
):
    """The record is written before the snapshot is removed: a full disk at the record ends the
    command with one error line (exit 2), the finished snapshot stays, and the same command
    once there is space trains nothing and writes the record."""
    from matchopt.cli import main

    if command == "run":
        argv = [*RUN, "--out", str(tmp_path)]
    else:
        argv = ["bench", "--tasks", "potts", "--methods", "matchopt", "--preset", "quick"]
        argv += ["--set", "epochs=3", "--seeds", "0", "--workers", "1", "--out", str(tmp_path)]
    record = tmp_path / "potts" / "matchopt" / "seed0.json"
    snapshot = tmp_path / checkpoints.SNAPSHOT_FOLDER / "potts" / "matchopt" / "seed0.pt"
    full_disk(lambda path: path == record)
    assert main(argv) == 2
    assert errors_in(capsys.readouterr().err) == [
        f"matchopt: error: could not save the record of potts/matchopt/seed0 to {record}: No "
        f"space left on device; its training snapshot {snapshot} is kept: rerun the same "
        "command to resume from it"
    ]
    assert not record.exists() and not temporaries(tmp_path)
    assert checkpoints.read_snapshot(snapshot)["epoch"] == 3

    full_disk(None)
    monkeypatch.setattr(matchopt_module, "fused_loss_and_gradients", untouched)
    assert main(argv) == 0
    assert read_record(record).p100 > 0 and not snapshot.exists()


@pytest.mark.parametrize("edit", ["weights of another epoch", "learning rate", "no digest"])
def test_a_snapshot_whose_parts_changed_after_the_save_is_not_trained_on(tmp_path, capsys, edit):
    data = load_task("potts").offline
    reference = make_method("matchopt", "validated-quick", CRAFT_SETTINGS, seed=0).fit(data)
    snapshot = tmp_path / "seed0.pt"
    state = finished_snapshot(snapshot)
    if edit == "weights of another epoch":
        model = state["parts"]["model"]
        model["output.weight"] = model["output.weight"] * 0.5
    elif edit == "learning rate":
        state["parts"]["optimizer"]["param_groups"][0]["lr"] = 0.01
    else:
        del state["digest"]
    snapshot.write_bytes(checkpoints.snapshot_bytes(state))
    capsys.readouterr()
    method = make_method("matchopt", "validated-quick", CRAFT_SETTINGS, seed=0)
    method.resume_from(snapshot, every=0).fit(data)
    (line,) = warnings_in(capsys.readouterr().err)
    assert "do not match the digest written with them" in line and str(snapshot) in line
    assert method.losses_ == reference.losses_


def test_a_snapshot_of_the_older_torch_save_format_is_not_read(tmp_path, capsys, monkeypatch):
    """Snapshots were torch.save archives: never unpickled now; the training starts again and
    writes the current format."""
    import io

    data = load_task("potts").offline
    snapshot = tmp_path / "seed0.pt"
    buffer = io.BytesIO()
    torch.save({"epoch": 1, "parts": {}, "values": {"losses": [0.5]}}, buffer)
    snapshot.write_bytes(buffer.getvalue())
    monkeypatch.setattr(torch, "load", lambda *a, **k: pytest.fail("torch.load was called"))
    capsys.readouterr()
    method = make_method("matchopt", "quick", {"epochs": 2}, seed=0)
    method.resume_from(snapshot, every=0).fit(data)
    assert warnings_in(capsys.readouterr().err) == [
        f"matchopt: warning: {snapshot}: a training snapshot of an older matchopt (torch.save), "
        "which is not read; training starts from scratch (and writes the current format)"
    ]
    assert checkpoints.read_snapshot(snapshot)["epoch"] == 2
    reference = make_method("matchopt", "quick", {"epochs": 2}, seed=0).fit(data)
    assert method.losses_ == reference.losses_
