"""benchmarks/fit_floor.py: the products it times are the step's own matrix products."""

from types import SimpleNamespace

import pytest
import torch
from benchmark_scripts import load_benchmark
from torch.utils.flop_counter import FlopCounterMode

from matchopt.methods.matchopt import fused_loss_and_gradients, quadrature_rule
from matchopt.models.mlp import MLP


def load_script():
    return load_benchmark("fit_floor")


@pytest.mark.parametrize("kappa, share", [(1, 0.6), (5, 0.8)])
def test_the_floor_counts_most_of_the_steps_matrix_work_and_no_more(kappa, share):
    d, hidden, points = 12, (64, 32, 16), 32
    torch.manual_seed(0)
    model = MLP(d, hidden)
    x, y = torch.randn(points, d), torch.sort(torch.randn(points)).values
    with FlopCounterMode(display=False) as counter:
        fused_loss_and_gradients(model, x, y, quadrature_rule("trapezoid", kappa), alpha=1.0)
    step = counter.get_total_flops() / 2  # multiply-adds of every product of the step
    floor = sum(m * k * n for m, k, n in load_script().products(d, hidden, points, kappa))
    # A lower bound: the value term's products on the trajectory points are left out (more of
    # the step where there are no interior nodes).
    assert share * step < floor <= step


def test_the_whole_step_is_timed_three_ways_and_compiling_keeps_the_gradients(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    config = SimpleNamespace(
        trajectory_length=16, quadrature="trapezoid", kappa=5, alpha=1.0, rank_weight=0.0
    )
    result = load_script().whole_steps(6, (32, 16), config, repeats=3)
    for way in load_script().STEP_WAYS:
        assert result[f"{way}_ms"] > 0 and result[f"{way}_first_call_s"] >= 0
    assert result["eager_float32_grad_difference"] == 0.0
    # Compiling fuses the elementwise work: the same step up to round-off.
    assert result["compiled_float32_grad_difference"] < 1e-4
    # bfloat16 products change the gradients by far more than round-off (measured, not used).
    assert result["compiled_bfloat16_grad_difference"] > result["compiled_float32_grad_difference"]
