import numpy as np
import pytest
import torch

from matchopt.errors import MatchoptError
from matchopt.methods import make_method
from matchopt.methods.bo_qei import fit_gp
from matchopt.tasks import load_task


def test_gp_noise_is_fixed_and_it_interpolates():
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.uniform(-1, 1, size=(40, 3)))
    y = torch.sin(3 * x[:, 0]) + x[:, 1]
    model = fit_gp(x[:30], y[:30], 0.01)
    assert getattr(model, "outcome_transform", None) is None  # BoTorch's default would standardize
    grown = fit_gp(x, y, 0.01, previous=model)  # warm start across a growing training set
    torch.testing.assert_close(grown.likelihood.noise, torch.full((40,), 0.01, dtype=x.dtype))
    with torch.no_grad():
        mean = grown.posterior(x).mean.squeeze(-1)
    assert (mean - y).abs().max() < 0.2  # interpolates up to the small fixed noise


@pytest.mark.parametrize("task_name", ["styblinski-tang", "potts"])
def test_bo_loop_starts_from_the_top_offline_points(task_name):
    task = load_task(task_name)
    method = make_method("bo-qei", "quick", seed=0).fit(task.offline)
    designs = method.propose(128)
    config = method.config_
    features = method.encoder_.encode_x(task.offline.x)
    top = task.offline.top_k(config.gp_samples)
    observed_x, observed_y = method.observed_x_, method.observed_y_
    assert len(observed_y) == config.gp_samples + config.rounds * config.q
    np.testing.assert_allclose(observed_x[: config.gp_samples], features[top], rtol=1e-6)
    np.testing.assert_allclose(
        observed_y[: config.gp_samples], method.encoder_.encode_y(task.offline.y[top]), rtol=1e-6
    )
    new = observed_x[config.gp_samples :]
    assert (new >= features.min(0) - 1e-6).all() and (new <= features.max(0) + 1e-6).all()
    best = np.argsort(-observed_y, kind="stable")[:128]
    np.testing.assert_array_equal(designs, method.encoder_.decode_x(observed_x[best]))


def test_too_few_points_is_a_clear_error():
    task = load_task("potts")
    overrides = {"gp_samples": "100", "rounds": "1", "q": "2"}
    method = make_method("bo-qei", "quick", overrides, seed=0).fit(task.offline)
    with pytest.raises(MatchoptError, match="fewer than the 128 requested"):
        method.propose(128)


def test_a_failed_cholesky_ends_the_run_early_and_the_record_says_so(monkeypatch):
    from linear_operator.utils.errors import NotPSDError

    import matchopt.methods.bo_qei as bo_qei

    real, calls = bo_qei.qei_candidates, []

    def failing_on_the_second_round(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise NotPSDError("Matrix not positive definite after repeatedly adding jitter")
        return real(*args, **kwargs)

    monkeypatch.setattr(bo_qei, "qei_candidates", failing_on_the_second_round)
    task = load_task("potts")
    method = make_method("bo-qei", "quick", seed=0).fit(task.offline)
    designs = method.propose_up_to(128)
    config = method.config_
    assert len(method.observed_y_) == config.gp_samples + config.q  # one round, then stopped
    assert len(designs) == min(128, len(method.observed_y_))
    report = method.fit_report()
    assert report["bo_rounds"] == 1 and report["bo_stopped"].startswith("NotPSDError: Matrix")


def test_other_errors_of_the_acquisition_are_not_taken_for_a_failed_cholesky(monkeypatch):
    """Out of memory or a device mismatch must fail the run, not return the offline top rows."""
    import matchopt.methods.bo_qei as bo_qei

    def out_of_memory(*args, **kwargs):
        raise RuntimeError("CUDA out of memory")

    monkeypatch.setattr(bo_qei, "qei_candidates", out_of_memory)
    method = make_method("bo-qei", "quick", seed=0).fit(load_task("potts").offline)
    with pytest.raises(RuntimeError, match="CUDA out of memory"):
        method.propose(128)


def test_a_full_run_reports_every_round():
    method = make_method("bo-qei", "quick", seed=0).fit(load_task("potts").offline)
    assert "bo_rounds" not in method.fit_report()  # nothing run yet
    method.propose(16)
    report = method.fit_report()
    assert report["bo_rounds"] == method.config_.rounds and report["bo_stopped"] is None
