"""Seeds as a batch dimension (issue 28): a batched seed trains as its run alone, up to round-off.

Round-off: a batched product sums in another order than the product of one seed alone, so the
two differ by round-off (``tests/roundoff.py``); one step is checked against Higham's bound,
a whole training against a bound a few orders of magnitude above float32's unit round-off
(Adam's normalized steps carry a step's relative round-off into the parameters, step after
step, without amplifying it much over the quick preset's 60 steps). Where the shapes and
kernels are the same (the same batch run twice, killed or not), the check is bitwise.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from interrupts import counted
from roundoff import TRAINING_ROUNDOFF, _flat

import matchopt.methods.bonet as bonet_module
import matchopt.methods.coms as coms_module
import matchopt.methods.ddom as ddom_module
import matchopt.methods.mins as mins_module
import matchopt.models.gaussian as gaussian_module
from matchopt.methods import RunContext, make_method
from matchopt.methods.training import fit_seeds
from matchopt.tasks import load_task

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
    real = getattr(module, hook)
    config = make_method(name, "quick").config_
    # BONET's steps go over trajectory windows, the others' over the offline rows.
    rows = config.n_trajectories * config.trajectory_length if name == "bonet" else len(data)
    steps_per_epoch = -(-rows // config.batch_size)

    snapshot = tmp_path / "batch.pt"
    early_in_fifth_epoch = 4 * steps_per_epoch + 1
    monkeypatch.setattr(module, hook, counted(real, [], kill_at=early_in_fifth_epoch))
    with pytest.raises(KeyboardInterrupt):
        batch(snapshot)
    assert snapshot.is_file()
    steps = []
    monkeypatch.setattr(module, hook, counted(real, steps))
    resumed = batch(snapshot)
    assert len(steps) == 2 * steps_per_epoch  # only the fifth and sixth epochs train
    for one, again in zip(reference, resumed):
        np.testing.assert_array_equal(again.propose(16), one.propose(16))
        assert getattr(again, "losses_", None) == getattr(one, "losses_", None)
        if name == "coms":
            assert again.alpha_ == one.alpha_
    # A snapshot of one seed's run is not the batch's (and the reverse): nothing resumes.
    single = make_method(name, "quick", settings, seed=2)
    single.run = RunContext.of(snapshot, every=0)
    steps.clear()
    single.fit(data)
    assert len(steps) == 6 * steps_per_epoch
