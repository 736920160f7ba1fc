import numpy as np
import pytest

from matchopt.data import DesignSpace
from matchopt.encodings import DesignEncoder, Standardizer, logits_to_tokens, tokens_to_logits


def test_logits_values_follow_design_bench():
    logits = tokens_to_logits(np.array([[0, 1, 2, 3]]), vocab_size=4)[0]
    assert logits.shape == (4, 3)
    np.testing.assert_allclose(logits[0], np.log(0.1 / 0.7) * np.ones(3), rtol=1e-6)
    for k in (1, 2, 3):
        expected = np.zeros(3)
        expected[k - 1] = np.log(0.7 / 0.1)
        np.testing.assert_allclose(logits[k], expected, atol=1e-6)


@pytest.mark.parametrize("vocab_size", [2, 4, 20])
def test_logits_round_trip(vocab_size):
    tokens = np.random.default_rng(0).integers(0, vocab_size, size=(100, 9))
    back = logits_to_tokens(tokens_to_logits(tokens, vocab_size))
    np.testing.assert_array_equal(back, tokens)


def test_standardizer_round_trip_and_zero_std():
    values = np.column_stack([np.arange(10.0), np.full(10, 3.0)])
    scaler = Standardizer.fit(values)
    assert scaler.std[1] == 1.0  # constant column: std 0 becomes 1
    z = scaler.transform(values)
    np.testing.assert_allclose(z[:, 0].mean(), 0, atol=1e-12)
    np.testing.assert_allclose(z[:, 0].std(), 1, atol=1e-12)
    np.testing.assert_allclose(scaler.inverse(z), values)


def test_design_encoder_round_trips_both_kinds():
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, 4, size=(50, 8))
    enc = DesignEncoder(DesignSpace.discrete(8, 4)).fit(tokens, rng.normal(size=50))
    features = enc.encode_x(tokens)
    assert features.shape == (50, 24) and features.dtype == np.float32
    np.testing.assert_array_equal(enc.decode_x(features), tokens)

    x = rng.normal(size=(50, 5)).astype(np.float32)
    y = rng.normal(size=50)
    enc = DesignEncoder(DesignSpace.continuous(5)).fit(x, y)
    np.testing.assert_allclose(enc.decode_x(enc.encode_x(x)), x, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(enc.decode_y(enc.encode_y(y)), y, rtol=1e-5, atol=1e-5)


def test_tokens_outside_the_vocabulary_are_named():
    from matchopt.encodings import tokens_to_logits
    from matchopt.errors import MatchoptError

    with pytest.raises(MatchoptError, match=r"token -1 at \(1, 2\) is outside 0..3"):
        tokens_to_logits(np.array([[0, 1, 2], [3, 0, -1]]), 4)
    with pytest.raises(MatchoptError, match="token 4 at"):
        tokens_to_logits(np.array([[4]]), 4)
    with pytest.raises(MatchoptError, match="tokens must be integers"):
        tokens_to_logits(np.array([[0.0]]), 4)


@pytest.mark.parametrize("scale", [1e-300, 1e-160, 1e300])
def test_scores_near_the_float64_limits_are_standardized_as_ordinary_ones(scale):
    from matchopt.encodings import Standardizer

    y = np.random.default_rng(0).normal(size=50)
    plain, scaled = Standardizer.fit(y), Standardizer.fit(y * scale)
    np.testing.assert_allclose(scaled.std / scale, plain.std, rtol=1e-12)
    np.testing.assert_allclose(scaled.transform(y * scale), plain.transform(y), atol=1e-12)


@pytest.mark.filterwarnings("ignore::matchopt.tabular.ProposalWarning")
def test_a_table_of_tiny_targets_gets_the_designs_of_the_same_table_unscaled():
    import pandas as pd

    from matchopt.tabular import TableOptimizer

    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, size=(120, 3))
    table = pd.DataFrame(x, columns=["a", "b", "c"]).assign(y=-((x - 0.3) ** 2).sum(axis=1))
    tiny = table.assign(y=table.y * 1e-300)
    kwargs = dict(target="y", method="ga", preset="quick", seed=0)
    plain = TableOptimizer(**kwargs).fit(table).propose(4)
    small = TableOptimizer(**kwargs).fit(tiny).propose(4)
    np.testing.assert_array_equal(small[["a", "b", "c"]], plain[["a", "b", "c"]])
    np.testing.assert_allclose(small.predicted_y / 1e-300, plain.predicted_y, rtol=1e-9)


def test_standardizer_of_huge_values_matches_the_scaled_moments():
    from matchopt.encodings import Standardizer

    y = np.array([1e300, 5e299, -3e299, 8e299])
    fitted = Standardizer.fit(y)
    small = Standardizer.fit(y / 1e300)
    np.testing.assert_allclose(fitted.mean / 1e300, small.mean, rtol=1e-12)
    np.testing.assert_allclose(fitted.std / 1e300, small.std, rtol=1e-12)
    np.testing.assert_allclose(fitted.inverse(fitted.transform(y)), y, rtol=1e-12)
