"""Seeds as a batch dimension (issue 28): a batched seed trains as its run alone, up to round-off.

Round-off: a batched product sums in another order than the product of one seed alone, so the
two differ by round-off (``tests/roundoff.py``); one step is checked against Higham's bound,
a whole training against a bound a few orders of magnitude above float32's unit round-off
(Adam's normalized steps carry a step's relative round-off into the parameters, step after
step, without amplifying it much over the quick preset's 60 steps). Where the shapes and
kernels are the same (the same batch run twice, killed or not), the check is bitwise.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from roundoff import SAFETY, dot_roundoff

import matchopt.methods.bonet as bonet_module
import matchopt.methods.coms as coms_module
import matchopt.methods.ddom as ddom_module
import matchopt.methods.mins as mins_module
import matchopt.models.gaussian as gaussian_module
from matchopt.bench.grid import Grid, plan_jobs, run_grid
from matchopt.errors import MatchoptError
from matchopt.methods import RunContext, make_method
from matchopt.methods.ddom import ScoreNet
from matchopt.methods.training import fit_seeds
from matchopt.models.stacked import SeedStack
from matchopt.tasks import load_task

#: Relative bound on a batched seed's trained parameters, losses and continuous designs against
#: its run alone: 2**10 float32 unit round-offs (about 6e-5).
TRAINING_ROUNDOFF = 2**10 * torch.finfo(torch.float32).eps / 2


@pytest.mark.numerics
def test_a_stack_gives_each_seeds_module_its_output_and_gradient_within_roundoff():
    generator = torch.Generator().manual_seed(0)
    nets = []
    for seed in range(3):
        torch.manual_seed(seed)
        nets.append(ScoreNet(6, (32, 16)))
    stack = SeedStack(nets)
    x = torch.randn(3, 20, 6, generator=generator)
    t, y = torch.rand(3, 20, generator=generator), torch.randn(3, 20, generator=generator)
    out = stack(x, t, y)
    out.pow(2).sum(-1).mean(-1).sum().backward()
    for k, net in enumerate(nets):
        alone = net(x[k], t[k], y[k])
        alone.pow(2).sum(-1).mean().backward()
        # Each output is a chain of dot products of at most 32 terms (8 = 6 features + t + y).
        bound = SAFETY * 3 * dot_roundoff(32, torch.float32)
        scale = alone.abs().max()
        assert (out[k] - alone).abs().max() <= bound * scale
        for (name, p), stacked in zip(net.named_parameters(), stack.stacked):
            grad_scale = p.grad.abs().max().clamp_min(1e-30)
            # The loss sums 20 rows on top: a longer reduction.
            assert (stacked.grad[k] - p.grad).abs().max() <= SAFETY * 4 * dot_roundoff(
                32 * 20, torch.float32
            ) * grad_scale, name


def test_a_stack_refuses_modules_of_different_shapes():
    with pytest.raises(MatchoptError, match="one architecture"):
        SeedStack([ScoreNet(4, (8,)), ScoreNet(4, (9,))])
    with pytest.raises(MatchoptError, match="without buffers"):
        SeedStack([torch.nn.BatchNorm1d(3)])


def _flat(net: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in net.parameters()])


#: Batched methods: name, the attribute holding the trained network, the module and the loss
#: function each training step calls once (for all seeds at once when batched).
BATCHED = [
    ("ddom", "net_", ddom_module, "denoising_loss"),
    ("coms", "model_", coms_module, "conservative_losses"),
    # Ens-Mean's Gaussian ensemble, as GA, Ens-Min, CMA-ES and BO-qEI train it.
    ("ens-mean", "ensemble_", gaussian_module, "soft_clamp"),
    # BONET's transformer is written with the seed dimension first (each seed's dropout masks
    # from its own generator); a run alone is the batch of one.
    ("bonet", "model_", bonet_module, "trajectory_loss"),
    # MINs' Adam has beta1 = 0 (a step moves a weight by about lr * sign(gradient)), so a run
    # alone is the stack of one: the same kernels, the same path.
    ("mins", "generator_", mins_module, "wgan_gp_loss"),
]


@pytest.mark.numerics
@pytest.mark.parametrize("task", ["styblinski-tang", "potts"])
@pytest.mark.parametrize(("name", "network", "module", "hook"), BATCHED)
def test_batched_seeds_train_as_their_runs_alone(task, name, network, module, hook):
    data = load_task(task).offline
    seeds = (0, 1, 2)
    alone = [make_method(name, "quick", {}, seed=s).fit(data) for s in seeds]
    batch = fit_seeds([make_method(name, "quick", {}, seed=s) for s in seeds], data)
    for one, batched in zip(alone, batch):
        mine, theirs = _flat(getattr(one, network)), _flat(getattr(batched, network))
        assert (mine - theirs).abs().max() <= TRAINING_ROUNDOFF * mine.abs().max()
        if hasattr(one, "losses_"):
            np.testing.assert_allclose(batched.losses_, one.losses_, rtol=TRAINING_ROUNDOFF)
        designs, reference = batched.propose(16), one.propose(16)
        if data.space.is_discrete:  # decoded by argmax: a round-off change does not show
            np.testing.assert_array_equal(designs, reference)
        else:
            np.testing.assert_allclose(
                designs, reference, rtol=0, atol=TRAINING_ROUNDOFF * np.abs(reference).max()
            )
        if name == "coms":
            assert batched.alpha_ == pytest.approx(one.alpha_, rel=TRAINING_ROUNDOFF)
    # Different seeds stay different: the batch does not tie them together.
    assert not torch.equal(_flat(getattr(batch[0], network)), _flat(getattr(batch[1], network)))


@pytest.mark.numerics
def test_batched_wide_ensembles_equal_members_trained_one_after_another(monkeypatch):
    """Wide members (Ens-Mean's 2048) train one after another alone, skipping rows of zero
    bootstrap weight; in a seed batch they train in lockstep with those rows weighted 0: the
    same loss, summed in another order."""
    monkeypatch.setattr(gaussian_module, "GROUPED_MAX_WIDTH", 0)
    data = load_task("styblinski-tang").offline
    calls = []
    real = gaussian_module.fit_members

    def counted(*args, **kwargs):
        calls.extend([1] if kwargs.get("stacked") is False else [])  # members trained alone
        return real(*args, **kwargs)

    monkeypatch.setattr(gaussian_module, "fit_members", counted)
    alone = [make_method("ens-mean", "quick", {}, seed=s).fit(data) for s in (3, 4)]
    assert len(calls) == 2 * 5  # each member of each seed in turn
    batch = fit_seeds([make_method("ens-mean", "quick", {}, seed=s) for s in (3, 4)], data)
    assert len(calls) == 10  # the batch trains in lockstep
    for one, batched in zip(alone, batch):
        mine, theirs = _flat(one.ensemble_), _flat(batched.ensemble_)
        assert (mine - theirs).abs().max() <= TRAINING_ROUNDOFF * mine.abs().max()
        designs, reference = batched.propose(16), one.propose(16)
        np.testing.assert_allclose(
            designs, reference, rtol=0, atol=TRAINING_ROUNDOFF * np.abs(reference).max()
        )


@pytest.mark.numerics
def test_a_lockstep_step_of_wide_members_has_each_members_gradients_within_roundoff():
    """Wide members (Ens-Mean's are 2048) trained in a seed batch: one step's gradients are each
    member's own within Higham's bound. Over a training they part further than that (Adam's
    first steps move a weight by about lr times the sign of its gradient, so a near-zero entry
    whose sign round-off flips moves by 2 lr: docs/benchmarks.md), as they do between the
    sequential path with and without its skipping of zero-weight rows."""
    from matchopt.models.gaussian import GaussianMLP, StackedMembers

    generator = torch.Generator().manual_seed(4)
    members = []
    for seed in (0, 1, 2):
        torch.manual_seed(seed)
        members.append(GaussianMLP(32, (512, 512)))
    x = torch.randn(3, 128, 32, generator=generator)
    y = torch.randn(3, 128, generator=generator)
    w = torch.rand(3, 128, generator=generator)
    stacked = StackedMembers(members)
    mean, log_std = stacked(x)
    nll = gaussian_module.gaussian_nll(mean, log_std, y)
    ((w * nll).sum(1) / w.sum(1)).sum().backward()
    for k, member in enumerate(members):
        ((w[k] * member.nll(x[k], y[k])).sum() / w[k].sum()).backward()
        linears = [m for m in member.body if isinstance(m, torch.nn.Linear)]
        # Three layers of at most 512 terms, then 128 rows summed into each weight's gradient.
        bound = SAFETY * 8 * dot_roundoff(512 * 128, torch.float32)
        for layer, weight, bias in zip(linears, stacked.weight, stacked.bias):
            for own, batched in (
                (layer.weight.grad.T, weight.grad[k]),
                (layer.bias.grad, bias.grad[k, 0]),
            ):
                assert (batched - own).abs().max() <= bound * own.abs().max()


@pytest.mark.numerics
def test_a_batched_mins_step_has_each_seeds_gradients_within_roundoff():
    from matchopt.methods.mins import ConditionalMLP, generator_loss, wgan_gp_loss

    generator = torch.Generator().manual_seed(3)
    critics = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        critics.append(ConditionalMLP(5, 1, (16, 16), 8))
    stack = SeedStack(critics)
    x_real, x_fake = (
        torch.randn(2, 12, 5, generator=generator),
        torch.randn(2, 12, 5, generator=generator),
    )
    y, w = torch.randn(2, 12, generator=generator), torch.rand(2, 12, generator=generator)
    e = torch.rand(2, 12, 1, generator=generator)
    losses = wgan_gp_loss(stack, x_real, x_fake, y, w, 10.0, e)
    (losses.sum() + generator_loss(stack, x_fake, y, w).sum()).backward()
    for k, critic in enumerate(critics):
        alone = wgan_gp_loss(critic, x_real[k], x_fake[k], y[k], w[k], 10.0, e[k])
        (alone + generator_loss(critic, x_fake[k], y[k], w[k])).backward()
        assert losses[k].item() == pytest.approx(alone.item(), rel=1e-5)
        for p, stacked in zip(critic.parameters(), stack.stacked):
            # Three layers of at most 24 terms, a double backward, 36 rows summed.
            bound = SAFETY * 8 * dot_roundoff(24 * 36, torch.float32)
            assert (stacked.grad[k] - p.grad).abs().max() <= bound * p.grad.abs().max()


@pytest.mark.parametrize(("name", "network", "module", "hook"), BATCHED)
def test_a_killed_batch_resumes_to_the_uninterrupted_batchs_designs(
    tmp_path, monkeypatch, name, network, module, hook
):
    data = load_task("styblinski-tang").offline
    settings = {"epochs": 6}

    def batch(snapshot=None):
        methods = [make_method(name, "quick", settings, seed=s) for s in (2, 5)]
        if snapshot is not None:
            methods[0].run = RunContext.of(snapshot, every=0)
        return fit_seeds(methods, data)

    reference = batch()
    real, calls = getattr(module, hook), []
    config = make_method(name, "quick").config_
    # BONET's steps go over trajectory windows, the others' over the offline rows.
    rows = config.n_trajectories * config.trajectory_length if name == "bonet" else len(data)
    steps_per_epoch = -(-rows // config.batch_size)

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 4 * steps_per_epoch + 1:  # early in the fifth epoch
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    snapshot = tmp_path / "batch.pt"
    monkeypatch.setattr(module, hook, interrupted)
    with pytest.raises(KeyboardInterrupt):
        batch(snapshot)
    assert snapshot.is_file()
    counted = []
    monkeypatch.setattr(module, hook, lambda *a, **k: counted.append(1) or real(*a, **k))
    resumed = batch(snapshot)
    assert len(counted) == 2 * steps_per_epoch  # only the fifth and sixth epochs train
    for one, again in zip(reference, resumed):
        np.testing.assert_array_equal(again.propose(16), one.propose(16))
        assert getattr(again, "losses_", None) == getattr(one, "losses_", None)
        if name == "coms":
            assert again.alpha_ == one.alpha_
    # A snapshot of one seed's run is not the batch's (and the reverse): nothing resumes.
    single = make_method(name, "quick", settings, seed=2)
    single.run = RunContext.of(snapshot, every=0)
    counted.clear()
    single.fit(data)
    assert len(counted) == 6 * steps_per_epoch


def test_fit_seeds_refuses_mixed_batches_and_fits_other_methods_one_by_one():
    data = load_task("potts").offline
    with pytest.raises(MatchoptError, match="repeated seeds"):
        fit_seeds([make_method("ddom", "quick", {}, seed=1)] * 2, data)
    with pytest.raises(MatchoptError, match="one config"):
        fit_seeds(
            [make_method("ddom", "quick", {}, seed=0), make_method("ddom", "paper", {}, seed=1)],
            data,
        )
    with pytest.raises(MatchoptError, match="got a RandomDesigns beside a Ddom"):
        fit_seeds([make_method("ddom", "quick", {}, seed=0), make_method("random", "quick")], data)
    with pytest.raises(MatchoptError, match="at least one method"):
        fit_seeds([], data)
    fitted = fit_seeds([make_method("random", "quick", {}, seed=s) for s in (0, 1)], data)
    for method in fitted:
        np.testing.assert_array_equal(
            method.propose(8),
            make_method("random", "quick", {}, seed=method.seed).fit(data).propose(8),
        )


@pytest.mark.numerics
def test_bench_batches_seeds_only_when_asked_and_records_say_so(tmp_path):
    grid = Grid(tasks=["styblinski-tang"], methods=["ddom", "random"], seeds=[0, 1], preset="quick")
    jobs = plan_jobs(grid.cells(), tmp_path, batch_seeds=True)
    assert [(j.seed_batch, [c.seed for c in j.cells]) for j in jobs] == [
        (True, [0, 1]),
        (False, [0]),
        (False, [1]),
    ]
    assert not any(j.seed_batch for j in plan_jobs(grid.cells(), tmp_path))
    summary = run_grid(grid, tmp_path / "batched", workers=1, progress=False, batch_seeds=True)
    assert not summary.failed
    alone = run_grid(grid, tmp_path / "alone", workers=1, progress=False)
    assert not alone.failed
    for seed in (0, 1):
        batched = json.loads(
            (tmp_path / f"batched/styblinski-tang/ddom/seed{seed}.json").read_text()
        )
        own = json.loads((tmp_path / f"alone/styblinski-tang/ddom/seed{seed}.json").read_text())
        assert batched["extra"]["seed_batch"]["seeds"] == [0, 1]
        assert "seed_batch" not in own["extra"]
        np.testing.assert_allclose(batched["scores"], own["scores"], rtol=1e-3, atol=1e-3)
    # The batch's snapshot is gone once its records are written.
    assert not list((tmp_path / "batched").glob(".snapshots/**/*.pt"))


@pytest.mark.numerics
def test_bench_trains_shared_ensembles_of_all_seeds_in_one_batch(tmp_path):
    """GA, Ens-Mean and Ens-Min fit one Gaussian ensemble per seed: with --batch-seeds the seeds'
    ensembles train in one batch, which every cell then reads."""
    grid = Grid(
        tasks=["styblinski-tang"],
        methods=["ga", "ens-mean", "ens-min"],
        seeds=[0, 1],
        preset="quick",
    )
    (job,) = plan_jobs(grid.cells(), tmp_path, batch_seeds=True)
    assert job.seed_batch and job.ensemble_folder is not None and job.seeds == [0, 1]
    assert [c.method for c in job.cells] == ["ens-mean"] * 2 + ["ens-min"] * 2 + ["ga"] * 2
    summary = run_grid(grid, tmp_path / "batched", workers=1, progress=False, batch_seeds=True)
    assert not summary.failed
    alone = run_grid(grid, tmp_path / "alone", workers=1, progress=False)
    assert not alone.failed
    for method in ("ga", "ens-mean", "ens-min"):
        for seed in (0, 1):
            path = f"styblinski-tang/{method}/seed{seed}.json"
            batched = json.loads((tmp_path / "batched" / path).read_text())
            own = json.loads((tmp_path / "alone" / path).read_text())
            assert batched["extra"]["seed_batch"]["seeds"] == [0, 1]
            shared = batched["extra"]["fit"]["shared_ensemble"]
            # Ens-Mean's batch trained the ensembles the others read.
            assert shared["from_cache"] == (method != "ens-mean")
            assert shared["seed_batch"] == [0, 1]
            np.testing.assert_allclose(batched["scores"], own["scores"], rtol=1e-4, atol=1e-4)
    # The shared ensembles and the batch's snapshot are gone once every record is written.
    assert not [p for p in (tmp_path / "batched").glob(".snapshots/**/*") if p.is_file()]
