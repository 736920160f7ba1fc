"""The exact speedups of issue 12 change no result beyond float rounding.

Each test runs the fast path and the reference path from the same state and compares: equal
designs where the computation is the same, parameters or gradients within a stated tolerance
where only the summation order changes.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from matchopt.models import GaussianMLP, adam, bootstrap_weights, fit_gaussian

# Float32 rounding of a few dozen Adam steps: differences of a few ulps of O(0.1) parameters.
PARAMETER_TOLERANCE = 1e-6


def max_parameter_difference(a: torch.nn.Module, b: torch.nn.Module) -> float:
    return max((p - q).abs().max().item() for p, q in zip(a.parameters(), b.parameters()))


@pytest.fixture
def regression_data():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(300, 6, generator=generator)
    y = x[:, 0] - 0.5 * x[:, 1] ** 2 + 0.1 * torch.randn(300, generator=generator)
    return x, y


def test_fused_adam_matches_the_foreach_update(regression_data):
    x, y = regression_data
    torch.manual_seed(0)
    start = GaussianMLP(6, (32, 32))
    trained = []
    for fused in (True, False):
        model = copy.deepcopy(start)
        optimizer = adam(model.parameters(), lr=1e-3, fused=fused)
        assert bool(optimizer.defaults.get("fused")) is fused
        for step in range(40):
            batch = slice(step % 4 * 64, step % 4 * 64 + 64)
            loss = model.nll(x[batch], y[batch]).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        trained.append(model)
    assert max_parameter_difference(*trained) < PARAMETER_TOLERANCE
    assert max_parameter_difference(trained[0], start) > 1e-3  # it did train


def test_adamw_groups_keep_their_weight_decay():
    model = torch.nn.Linear(3, 2)
    groups = [
        {"params": [model.weight], "weight_decay": 0.1},
        {"params": [model.bias], "weight_decay": 0.0},
    ]
    optimizer = adam(groups, lr=1e-3, decoupled=True)
    assert isinstance(optimizer, torch.optim.AdamW)
    assert [g["weight_decay"] for g in optimizer.param_groups] == [0.1, 0.0]


def test_skipping_zero_weight_rows_gives_the_same_training(regression_data):
    x, y = regression_data
    weights = torch.from_numpy(bootstrap_weights(len(x), 1, np.random.default_rng(3))[0])
    assert (weights == 0).float().mean() > 0.3  # a bootstrap leaves about 37% of rows out
    torch.manual_seed(0)
    start = GaussianMLP(6, (32, 32))
    trained, losses = [], []
    for skip in (True, False):
        model = copy.deepcopy(start)
        losses.append(
            fit_gaussian(
                model,
                x,
                y,
                epochs=4,
                batch_size=50,
                lr=1e-3,
                sample_weights=weights,
                generator=torch.Generator().manual_seed(1),
                skip_zero_weights=skip,
            )
        )
        trained.append(model)
    assert max_parameter_difference(*trained) < PARAMETER_TOLERANCE
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-6)


def test_an_all_zero_batch_still_takes_an_adam_step(regression_data):
    x, y = regression_data
    weights = torch.zeros(len(x))
    weights[:10] = 1.0  # with batch 10 and a shuffle, most batches hold no weighted row
    torch.manual_seed(0)
    start = GaussianMLP(6, (8,))
    trained = []
    for skip in (True, False):
        model = copy.deepcopy(start)
        fit_gaussian(
            model,
            x,
            y,
            epochs=2,
            batch_size=10,
            lr=1e-2,
            sample_weights=weights,
            generator=torch.Generator().manual_seed(2),
            skip_zero_weights=skip,
        )
        trained.append(model)
    assert max_parameter_difference(*trained) < PARAMETER_TOLERANCE


# --- One trained ensemble serves GA, Ens-Mean and Ens-Min ---------------------------------------


def _designs(method: str, task, seed: int = 0, cache=None) -> tuple[np.ndarray, dict]:
    from matchopt.methods import RunContext, make_method

    solver = make_method(method, "quick", seed=seed)
    if cache is not None:
        solver.run = RunContext.of(ensemble_folder=cache)
    solver.fit(task.offline)
    return solver.propose(16), solver.fit_report()


@pytest.fixture
def wide_members(monkeypatch):
    """The paper's GA / ensemble members are 2048 wide and train one after another; the quick
    preset's 64-wide ones would train grouped. Make every width count as wide."""
    import matchopt.models.gaussian as gaussian

    monkeypatch.setattr(gaussian, "GROUPED_MAX_WIDTH", 0)


@pytest.mark.parametrize("task_name", ["potts", "styblinski-tang"])
def test_ga_and_ensembles_from_one_cached_ensemble_give_their_own_designs(
    tmp_path, task_name, wide_members
):
    from matchopt.tasks import load_task

    task = load_task(task_name)
    alone = {m: _designs(m, task)[0] for m in ("ens-mean", "ens-min", "ga")}
    shared = {m: _designs(m, task, cache=tmp_path) for m in ("ens-mean", "ens-min", "ga")}
    for method in alone:
        np.testing.assert_array_equal(shared[method][0], alone[method], err_msg=method)
    assert shared["ens-mean"][1]["shared_ensemble"]["from_cache"] is False
    assert shared["ens-min"][1]["shared_ensemble"]["from_cache"] is True
    assert shared["ga"][1]["shared_ensemble"]["from_cache"] is True  # member 0 of the five
    assert len(list(tmp_path.glob("*.pt"))) == 1


def test_grouped_ensembles_are_shared_between_requests_of_one_size(tmp_path):
    from matchopt.tasks import load_task

    task = load_task("potts")
    cma, first = _designs("cma-es", task, cache=tmp_path)
    designs, report = _designs("bo-qei", task, cache=tmp_path)
    assert not first["shared_ensemble"]["from_cache"] and report["shared_ensemble"]["from_cache"]
    np.testing.assert_array_equal(designs, _designs("bo-qei", task)[0])
    # GA's quick members are narrow too: not a prefix of the grouped five, so trained anew.
    _designs("ens-mean", task, cache=tmp_path)
    assert not _designs("ga", task, cache=tmp_path)[1]["shared_ensemble"]["from_cache"]


def test_a_smaller_ensemble_first_is_replaced_by_the_larger_one(tmp_path, wide_members):
    from matchopt.tasks import load_task

    task = load_task("styblinski-tang")
    _, ga_report = _designs("ga", task, cache=tmp_path)
    designs, report = _designs("ens-mean", task, cache=tmp_path)
    assert not ga_report["shared_ensemble"]["from_cache"]
    assert not report["shared_ensemble"]["from_cache"]  # one member cached: five trained
    np.testing.assert_array_equal(designs, _designs("ens-mean", task)[0])
    assert _designs("ga", task, cache=tmp_path)[1]["shared_ensemble"]["from_cache"]


def test_another_seed_or_setting_is_not_taken_from_the_cache(tmp_path):
    from matchopt.methods import RunContext, make_method
    from matchopt.tasks import load_task

    task = load_task("potts")
    _designs("ens-mean", task, seed=0, cache=tmp_path)
    assert not _designs("ens-mean", task, seed=1, cache=tmp_path)[1]["shared_ensemble"][
        "from_cache"
    ]
    solver = make_method("ga", "quick", {"epochs": "4"})
    solver.run = RunContext.of(ensemble_folder=tmp_path)
    assert not solver.fit(task.offline).fit_report()["shared_ensemble"]["from_cache"]


def test_a_damaged_cache_file_is_a_miss(tmp_path, wide_members):
    from matchopt.tasks import load_task

    task = load_task("potts")
    _designs("ens-mean", task, cache=tmp_path)
    (file,) = tmp_path.glob("*.pt")
    file.write_bytes(b"not a torch file")
    designs, report = _designs("ens-min", task, cache=tmp_path)
    assert not report["shared_ensemble"]["from_cache"]
    np.testing.assert_array_equal(designs, _designs("ens-min", task)[0])


def test_a_cache_entry_short_of_a_tensor_is_a_miss(tmp_path, wide_members):
    """Loading what an entry has would leave a member half-initialized, counted as trained."""
    from matchopt.models.ensemble_cache import CACHE_KIND
    from matchopt.state import load_state, state_bytes
    from matchopt.tasks import load_task

    task = load_task("potts")
    _designs("ens-mean", task, cache=tmp_path)
    (file,) = tmp_path.glob("*.pt")
    entry = load_state(file.read_bytes(), CACHE_KIND)
    dropped = next(k for k in entry["state"] if k.startswith("members.2."))
    del entry["state"][dropped]
    file.write_bytes(state_bytes(entry, CACHE_KIND))
    designs, report = _designs("ens-min", task, cache=tmp_path)
    assert not report["shared_ensemble"]["from_cache"]
    np.testing.assert_array_equal(designs, _designs("ens-min", task)[0])


def test_bench_groups_the_cells_that_share_an_ensemble(tmp_path, wide_members):
    from matchopt.bench.cells import Cell
    from matchopt.bench.grid import plan_jobs

    cells = [
        Cell(task, method, seed, "quick")
        for task in ("potts",)
        for method in ("ga", "matchopt", "ens-min", "ens-mean", "cma-es", "bo-qei")
        for seed in (0, 1)
    ]
    jobs = plan_jobs(cells, tmp_path)
    grouped = {tuple(c.name for c in job.cells): job.ensemble_folder for job in jobs}
    assert ("potts/ens-min/seed0", "potts/ens-mean/seed0", "potts/ga/seed0") in grouped
    assert ("potts/cma-es/seed1", "potts/bo-qei/seed1") in grouped
    assert grouped[("potts/matchopt/seed0",)] is None
    assert len(jobs) == 2 + 2 + 2  # matchopt x 2 seeds, two ensemble groups x 2 seeds
    folders = [f for f in grouped.values() if f is not None]
    assert len(set(folders)) == len(folders) == 4


def test_bench_with_a_shared_ensemble_writes_the_standalone_records(tmp_path, wide_members):
    from matchopt.bench import Grid, run_grid
    from matchopt.runner import run

    grid = Grid(["potts"], ["ga", "ens-mean", "ens-min"], [0], "quick")
    summary = run_grid(grid, tmp_path / "out", workers=1, threads=1, progress=False)
    assert len(summary.finished) == 3 and not summary.failed
    by_method = {r.method: r for r in summary.records}
    assert not by_method["ens-mean"].extra["fit"]["shared_ensemble"]["from_cache"]
    assert by_method["ga"].extra["fit"]["shared_ensemble"]["from_cache"]
    for method, record in by_method.items():
        alone, _ = run("potts", method, 0, "quick", threads=1)
        assert record.scores == alone.scores, method
    assert not any((tmp_path / "out" / ".snapshots" / "ensembles").glob("*"))


# --- Small ensemble members train in lockstep ----------------------------------------------------


@pytest.mark.parametrize("bootstrap", [True, False])
def test_grouped_training_equals_training_members_one_after_another(regression_data, bootstrap):
    from matchopt.models import GaussianEnsemble

    x, y = regression_data
    torch.manual_seed(4)
    start = GaussianEnsemble(6, 3, (16, 8), "leaky_relu")
    trained = {}
    for grouped in (True, False):
        ensemble = copy.deepcopy(start)
        ensemble.fit(
            x, y, epochs=3, batch_size=40, lr=1e-3, seed=2, bootstrap=bootstrap, grouped=grouped
        )
        trained[grouped] = ensemble
    assert max_parameter_difference(trained[True], trained[False]) < PARAMETER_TOLERANCE
    assert max_parameter_difference(trained[True], start) > 1e-3


def test_narrow_ensembles_train_grouped_and_wide_ones_in_turn(monkeypatch, regression_data):
    import matchopt.models.gaussian as gaussian

    calls = []
    monkeypatch.setattr(
        gaussian,
        "fit_members",
        lambda *a, **k: calls.append("grouped" if k.get("stacked", True) else "one"),
    )
    x, y = regression_data
    for hidden, n_models in [((256,), 5), ((2048, 8), 2), ((32,), 1)]:  # by width, not count
        gaussian.GaussianEnsemble(6, n_models, hidden).fit(
            x, y, epochs=1, batch_size=50, lr=1e-3, seed=0
        )
    assert calls == ["grouped", "one", "one", "grouped"]


# --- BONET: a batch in micro-batches -------------------------------------------------------------


@pytest.mark.parametrize("task_name", ["potts", "styblinski-tang"])
def test_bonet_micro_batches_sum_to_the_batch_gradient(task_name, monkeypatch):
    """Without dropout (whose masks depend on how the batch is cut) the accumulated gradient of
    every step is the whole batch's, and training ends at the same parameters up to rounding."""
    import matchopt.methods.bonet as bonet
    from matchopt.methods import make_method
    from matchopt.tasks import load_task

    clip = bonet.clip_seed_grad_norms
    gradients: list[list[torch.Tensor]] = []

    def record_then_clip(parameters, max_norm):
        parameters = list(parameters)
        gradients[-1].append(torch.cat([p.grad.flatten() for p in parameters]).clone())
        return clip(parameters, max_norm)

    monkeypatch.setattr(bonet, "clip_seed_grad_norms", record_then_clip)
    task = load_task(task_name)
    trained = []
    for micro_batch in ("None", "8"):
        gradients.append([])
        solver = make_method(
            "bonet", "quick", {"dropout": "0", "epochs": "2", "micro_batch": micro_batch}
        )
        trained.append(solver.fit(task.offline))
    whole, parts = gradients
    assert len(whole) == len(parts) > 1
    for a, b in zip(whole, parts):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)
    assert max_parameter_difference(trained[0].model_, trained[1].model_) < 1e-5
    np.testing.assert_allclose(trained[0].losses_, trained[1].losses_, rtol=1e-5)


def test_an_ensemble_killed_between_members_resumes_at_the_next_member(tmp_path, wide_members):
    """Each finished member is kept in the cache; a rerun trains only the rest and gives the
    designs of an uninterrupted run."""
    import matchopt.models.gaussian as gaussian
    from matchopt.tasks import load_task

    task = load_task("styblinski-tang")  # continuous designs: any change shows
    original = gaussian.fit_members
    trained = []

    def killed_after_two(*args, **kwargs):
        if len(trained) == 2:
            raise KeyboardInterrupt  # the process dies while member 3 trains
        trained.append(1)
        return original(*args, **kwargs)

    gaussian.fit_members = killed_after_two
    try:
        with pytest.raises(KeyboardInterrupt):
            _designs("ens-mean", task, cache=tmp_path)
    finally:
        gaussian.fit_members = original
    designs, report = _designs("ens-mean", task, cache=tmp_path)
    assert report["shared_ensemble"]["resumed_members"] == 2
    assert report["shared_ensemble"]["earlier_seconds"] > 0  # the killed sitting's members
    np.testing.assert_array_equal(designs, _designs("ens-mean", task)[0])


def test_loss_total_is_the_python_float_sum_bit_for_bit():
    from matchopt.models import LossTotal

    rng = np.random.default_rng(0)
    losses = torch.from_numpy(rng.lognormal(size=500).astype(np.float32))
    counts = rng.integers(1, 257, size=500)
    expected, total = 0.0, LossTotal()
    for loss, count in zip(losses, counts):
        expected += loss.item() * int(count)
        total.add(loss, int(count))
    assert total.value() == expected
    # Nested (BONET's micro-batches): a batch's total added as it stands.
    expected_outer, outer = 0.0, LossTotal()
    for start in range(0, 500, 50):
        inner_sum, inner = 0.0, LossTotal()
        for loss, count in zip(losses[start : start + 50], counts[start : start + 50]):
            inner_sum += loss.item() * int(count)
            inner.add(loss, int(count))
        expected_outer += inner_sum
        outer.add(inner)
    assert outer.value() == expected_outer
    assert LossTotal().value() == 0.0
