"""Before/after training-step times of issue 12's exact speedups, measured in one run.

Each row times the same training step two ways on TF-Bind-8-shaped data (32,898 rows of 24
features; 8 x 4 one-hot outputs for BONET) and prints both and their ratio:

* ga/ens member: one step of a 2 x 2048 Gaussian MLP on a bootstrap (batch 128); before =
  torch's default (foreach) Adam over every row of the batch, after = fused Adam with the
  zero-weight rows left out (:func:`matchopt.models.fit_gaussian`).
* ddom: one step of the 3 x 1024 score network (batch 128); foreach vs fused Adam.
* mins: one critic + generator step (3 x 1024, gradient penalty); foreach vs fused Adam.
* coms: one step of the 2 x 2048 model: 50 ascent steps for the negatives, then the conservative
  update; foreach vs fused Adam (the ascent dominates, so little changes).
* bonet: one step of the 8-layer transformer on 128 windows of 64 (RTG, x) pairs; the whole
  batch in one pass vs 4 passes of 32 with gradient accumulation (``micro_batch=32``), both
  fused AdamW.
* grouped ensemble: one step of all five 256-wide members of CMA-ES / BO-qEI / CbAS (batch
  100); one member after another vs in lockstep (:func:`matchopt.models.gaussian.fit_members`).

The last rows estimate the training of GA + Ens-Mean + Ens-Min on one TF-Bind-8 seed from the
member step: before, each trains its own ensemble (1 + 5 + 5 members); after, one 5-member
ensemble serves all three (``matchopt bench`` groups them). Every step of a training run has the
same shape, so steps x median step time is the training time to within a few percent. The
"floor" line is the training's floating-point work at the best matrix-product rate this machine
reaches (a 2048^3 product): no exact speedup goes below it.

Variants of one step are timed in turns (a, b, a, b, ...), so that a drift of the machine's
speed during the run falls on both. Usage (an idle machine; the numbers depend on the thread
count)::

    python benchmarks/speedups.py [--threads 1] [--repeats 30]

The last line of output is one JSON object with every timing in milliseconds per step.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch

from matchopt.methods.bonet import TrajectoryTransformer, decay_groups, trajectory_loss
from matchopt.methods.coms import ascend, conservative_losses
from matchopt.methods.ddom import VPSDE, ScoreNet, denoising_loss
from matchopt.methods.mins import ConditionalMLP, critic_loss, generator_loss
from matchopt.models import GaussianMLP, adam, bootstrap_weights, mlp_layers
from matchopt.models.gaussian import GaussianEnsemble
from matchopt.runtime import keep_freed_memory, set_threads

ROWS, FEATURES, LENGTH, VOCAB = 32_898, 24, 8, 4


def median_ms(*steps: Callable[[], object], repeats: int) -> list[float]:
    """Median milliseconds per call of each step, timed in turns (a, b, a, b, ...) so that a slow
    drift of the machine's speed falls on every variant alike; three warm-up calls each first."""
    for step in steps:
        for _ in range(3):
            step()
    times: list[list[float]] = [[] for _ in steps]
    for _ in range(repeats):
        for step, series in zip(steps, times):
            start = time.perf_counter()
            step()
            series.append((time.perf_counter() - start) * 1000)
    return [statistics.median(series) for series in times]


def member_step(fused: bool, skip_zero_rows: bool) -> Callable[[], None]:
    """One step of ``fit_gaussian`` on a bootstrap: the GA / Ens-Mean / Ens-Min member."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(ROWS, FEATURES, generator=generator)
    y = torch.randn(ROWS, generator=generator)
    weights = torch.from_numpy(bootstrap_weights(ROWS, 1, np.random.default_rng(0))[0]).float()
    torch.manual_seed(0)
    model = GaussianMLP(FEATURES, (2048, 2048))
    optimizer = adam(model.parameters(), lr=3e-4, fused=fused)
    batches = torch.randperm(ROWS, generator=generator).split(128)
    position = [0]

    def step() -> None:
        batch = batches[position[0] % len(batches)]
        position[0] += 1
        w = weights[batch]
        if skip_zero_rows:
            kept = w > 0
            batch, w = batch[kept], w[kept]
        loss = (w * model.nll(x[batch], y[batch])).sum() / w.sum().clamp_min(1e-12)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    return step


def ddom_step(fused: bool) -> Callable[[], None]:
    generator = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    net = ScoreNet(FEATURES, (1024, 1024, 1024))
    optimizer = adam(net.parameters(), lr=1e-3, fused=fused)
    sde = VPSDE(0.1, 20.0, 1.0)
    x0 = torch.randn(128, FEATURES, generator=generator)
    y, w = torch.randn(128, generator=generator), torch.rand(128, generator=generator)

    def step() -> None:
        t = torch.rand(128, generator=generator)
        eps = torch.randn(x0.shape, generator=generator)
        optimizer.zero_grad()
        denoising_loss(net, sde, x0, y, w, t, eps).backward()
        optimizer.step()

    return step


def mins_step(fused: bool) -> Callable[[], None]:
    generator = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    width = LENGTH * VOCAB
    g = ConditionalMLP(32, width, (1024, 1024, 1024), 1024, 0.2)
    d = ConditionalMLP(width, 1, (1024, 1024, 1024), 1024, 0.2)
    g_opt = adam(g.parameters(), lr=2e-4, betas=(0.0, 0.9), fused=fused)
    d_opt = adam(d.parameters(), lr=2e-4, betas=(0.0, 0.9), fused=fused)
    x_real = torch.rand(128, width, generator=generator)
    y, w = torch.randn(128, generator=generator), torch.rand(128, generator=generator)

    def step() -> None:
        with torch.no_grad():
            x_fake = g(torch.randn(128, 32, generator=generator), y)
        d_opt.zero_grad()
        critic_loss(d, x_real, x_fake, y, w, 10.0, generator).backward()
        d_opt.step()
        d.requires_grad_(False)
        g_opt.zero_grad()
        generator_loss(d, g(torch.randn(128, 32, generator=generator), y), y, w).backward()
        g_opt.step()
        d.requires_grad_(True)

    return step


def coms_step(fused: bool) -> Callable[[], None]:
    generator = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model = mlp_layers(FEATURES, (2048, 2048), 1, "relu")
    log_alpha = torch.nn.Parameter(torch.tensor(-2.3))
    optimizer = adam(model.parameters(), lr=3e-4, fused=fused)
    alpha_optimizer = adam([log_alpha], lr=0.01, fused=fused)
    x = torch.randn(128, FEATURES, generator=generator)
    y = torch.randn(128, generator=generator)
    step_size = 2.0 * FEATURES**0.5

    def step() -> None:
        x_neg = ascend(model, x, 50, step_size)
        model_loss, alpha_loss, _ = conservative_losses(model, log_alpha, x, y, x_neg, 2.0)
        optimizer.zero_grad()
        alpha_optimizer.zero_grad()
        (model_loss + alpha_loss).backward()
        optimizer.step()
        alpha_optimizer.step()

    return step


def bonet_step(micro_batch: int | None, fused: bool) -> Callable[[], None]:
    generator = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    context = 64
    model = TrajectoryTransformer(FEATURES, LENGTH * VOCAB, context, 64, 128, 8, 8, 0.1)
    optimizer = adam(
        decay_groups(model, 0.1), lr=1e-4, betas=(0.9, 0.95), decoupled=True, fused=fused
    )
    rtgs = torch.rand(128, context, generator=generator)
    points = torch.randn(128, context, FEATURES, generator=generator)
    tokens = torch.randint(0, VOCAB, (128, context, LENGTH), generator=generator)
    starts = torch.randint(0, 65, (128,), generator=generator)

    def step() -> None:
        optimizer.zero_grad()
        for part in torch.arange(128).split(micro_batch or 128):
            predictions = model(rtgs[part], points[part], starts[part])
            loss = trajectory_loss(predictions, points[part], tokens[part], VOCAB)
            (loss * (len(part) / 128)).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    return step


def ensemble_step_ms(grouped: bool, repeats: int) -> float:
    """Milliseconds per step of all five 256-wide members, from one real epoch of training
    (``GaussianEnsemble.fit``) on 100 x (repeats + 3) rows."""
    generator = torch.Generator().manual_seed(0)
    rows = 100 * (repeats + 3)
    x = torch.randn(rows, FEATURES, generator=generator)
    y = torch.randn(rows, generator=generator)
    torch.manual_seed(0)
    ensemble = GaussianEnsemble(FEATURES, 5, (256,), "leaky_relu")
    copy.deepcopy(ensemble).fit(x[:300], y[:300], epochs=1, batch_size=100, lr=1e-3, seed=0)
    start = time.perf_counter()
    ensemble.fit(x, y, epochs=1, batch_size=100, lr=1e-3, seed=0, grouped=grouped)
    return (time.perf_counter() - start) * 1000 / (rows // 100)


def gemm_gflops(repeats: int) -> float:
    """The machine's matrix-product rate (GFLOP/s) on a 2048 x 2048 x 2048 product, the shape
    BLAS runs best: an upper bound of what any exact training step of these networks reaches."""
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    (ms,) = median_ms(lambda: a @ b, repeats=repeats)
    return 2 * 2048**3 / (ms / 1000) / 1e9


def member_step_gflop() -> float:
    """Floating-point work (GFLOP) of one GA / ensemble member step with the zero-weight rows
    left out: the bootstrap keeps 1 - (1 - 1/n)^n of the rows (about 63%); per row the forward
    pass, the weight gradients (the same products) and the input gradients of the two upper
    layers (the first layer's input needs none)."""
    layers = [(FEATURES, 2048), (2048, 2048), (2048, 2)]
    forward = sum(2 * a * b for a, b in layers)
    input_gradients = sum(2 * a * b for a, b in layers[1:])
    weights = bootstrap_weights(ROWS, 1, np.random.default_rng(0))[0]
    rows = 128 * float((weights > 0).mean())
    return rows * (2 * forward + input_gradients) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--repeats", type=int, default=30, help="timed steps per variant")
    args = parser.parse_args()
    keep_freed_memory()
    set_threads(args.threads)
    r = args.repeats
    few = max(3, r // 3)
    timings: dict[str, float] = {}
    timings["ga_member_before"], timings["ga_member_fused"], timings["ga_member_after"] = median_ms(
        member_step(fused=False, skip_zero_rows=False),
        member_step(fused=True, skip_zero_rows=False),
        member_step(fused=True, skip_zero_rows=True),
        repeats=r,
    )
    timings["ddom_before"], timings["ddom_after"] = median_ms(
        ddom_step(fused=False), ddom_step(fused=True), repeats=r
    )
    timings["mins_before"], timings["mins_after"] = median_ms(
        mins_step(fused=False), mins_step(fused=True), repeats=r
    )
    timings["coms_before"], timings["coms_after"] = median_ms(
        coms_step(fused=False), coms_step(fused=True), repeats=few
    )
    timings["bonet_before"], timings["bonet_fused"], timings["bonet_after"] = median_ms(
        bonet_step(None, fused=False),
        bonet_step(None, fused=True),
        bonet_step(32, fused=True),
        repeats=few,
    )
    timings["grouped_ensemble_before"] = ensemble_step_ms(False, 3 * r)
    timings["grouped_ensemble_after"] = ensemble_step_ms(True, 3 * r)
    print(f"torch {torch.__version__}, {args.threads} thread(s); median ms per training step")
    print(f"{'step':<36}{'before':>10}{'after':>10}{'speedup':>10}")
    rows = [
        ("ga/ens member: fused Adam", "ga_member_before", "ga_member_fused"),
        ("ga/ens member: + skip zero-weight rows", "ga_member_before", "ga_member_after"),
        ("ddom: fused Adam", "ddom_before", "ddom_after"),
        ("mins: fused Adam", "mins_before", "mins_after"),
        ("coms: fused Adam", "coms_before", "coms_after"),
        ("bonet: fused AdamW", "bonet_before", "bonet_fused"),
        ("bonet: + 4 x 32 micro-batches", "bonet_before", "bonet_after"),
        ("5 x 256 ensemble: grouped", "grouped_ensemble_before", "grouped_ensemble_after"),
    ]
    for label, before, after in rows:
        a, b = timings[before], timings[after]
        print(f"{label:<36}{a:>10.2f}{b:>10.2f}{a / b:>9.2f}x")
    # GA + Ens-Mean + Ens-Min on one TF-Bind-8 seed: 100 epochs of ceil(32898 / 128) steps.
    member_steps = 100 * -(-ROWS // 128)
    before_min = 11 * member_steps * timings["ga_member_before"] / 60_000
    after_min = 5 * member_steps * timings["ga_member_after"] / 60_000
    timings["ga_ens_training_minutes_before"] = before_min
    timings["ga_ens_training_minutes_after"] = after_min
    print(
        f"GA + Ens-Mean + Ens-Min training, one TF-Bind-8 seed: {before_min:.1f} min before "
        f"(1 + 5 + 5 members, foreach Adam, every row), {after_min:.1f} min after (5 shared "
        f"members, fused Adam, zero-weight rows skipped): {before_min / after_min:.2f}x"
    )
    # No exact change of the training makes it cheaper than its floating-point work at the best
    # rate this machine's BLAS reaches (Adam's memory traffic comes on top).
    timings["gemm_gflops"] = gemm_gflops(few)
    floor_min = 5 * member_steps * member_step_gflop() / timings["gemm_gflops"] / 60
    timings["ga_ens_training_minutes_floor"] = floor_min
    print(
        f"floor: 5 x {member_steps:,} member steps x {member_step_gflop():.2f} GFLOP at "
        f"{timings['gemm_gflops']:.1f} GFLOP/s (2048^3 matrix product here) = {floor_min:.1f} min"
    )
    print(json.dumps({k: round(v, 3) for k, v in timings.items()}))


if __name__ == "__main__":
    main()
