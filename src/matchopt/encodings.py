"""Maps between designs and the float vectors models are trained on.

* Tokens <-> logits, as design-bench's ``to_logits`` / ``to_integers`` (soft interpolation 0.6):
  ``p = 0.6 * onehot + 0.4 / K``, ``logits = log p[1:] - log p[0]`` (K-1 values per token, class 0
  dropped). Back: prepend a zero column, argmax.
* z-scoring with the offline statistics (population std; a zero std becomes 1).
* :class:`DesignEncoder` chains both for any :class:`~matchopt.data.DesignSpace`, so that every
  method trains and searches in the same normalized space and hands back designs in the task's
  own format.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from matchopt.data import DesignSpace
from matchopt.errors import MatchoptError
from matchopt.state_checks import attribute, check_array, check_bool, check_type

SOFT_INTERPOLATION = 0.6


def tokens_to_logits(
    tokens: np.ndarray, vocab_size: int, soft_interpolation: float = SOFT_INTERPOLATION
) -> np.ndarray:
    """Tokens (n x L ints) -> logits (n x L x (K-1) floats), design-bench's ``to_logits``."""
    tokens = np.asarray(tokens)
    if tokens.dtype.kind not in "iu":
        raise MatchoptError(f"tokens must be integers, got dtype {tokens.dtype}")
    bad = (tokens < 0) | (tokens >= vocab_size)
    if bad.any():  # eye()[-1] would silently read as the last token
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise MatchoptError(f"token {tokens[where]} at {where} is outside 0..{vocab_size - 1}")
    onehot = np.eye(vocab_size, dtype=np.float64)[tokens]
    probs = soft_interpolation * onehot + (1.0 - soft_interpolation) / vocab_size
    log_probs = np.log(probs)
    return (log_probs[..., 1:] - log_probs[..., :1]).astype(np.float32)


def logits_to_tokens(logits: np.ndarray) -> np.ndarray:
    """Logits (n x L x (K-1)) -> tokens (n x L), argmax with the dropped class as a zero logit."""
    logits = np.asarray(logits)
    full = np.concatenate([np.zeros(logits.shape[:-1] + (1,), logits.dtype), logits], axis=-1)
    return full.argmax(axis=-1).astype(np.int64)


@dataclass
class Standardizer:
    """z-scoring along axis 0 with stored mean and population std (zero std -> 1)."""

    mean: np.ndarray
    std: np.ndarray

    @classmethod
    def fit(cls, values: np.ndarray) -> Standardizer:
        values = np.asarray(values, dtype=np.float64)
        with np.errstate(over="ignore", invalid="ignore", under="ignore"):
            mean, std = values.mean(axis=0), values.std(axis=0)
            spread = np.ptp(values, axis=0) if len(values) else np.zeros_like(mean)
        if not (np.isfinite(mean).all() and np.isfinite(std).all()) or np.any(
            (std < 1e-150) & (spread > 0)
        ):
            # Magnitudes near the float64 limits (e.g. 1e300 or 1e-300) overflow or underflow
            # the squares: compute the moments of values / max|values| and scale back (ordinary
            # data never comes here, so their statistics stay bit for bit).
            scale = np.max(np.abs(values), axis=0)
            scale = np.where(np.isfinite(scale) & (scale > 0), scale, 1.0)
            mean, std = (values / scale).mean(axis=0) * scale, (values / scale).std(axis=0) * scale
        std = np.where(std > 0, std, 1.0)
        return cls(mean, std)

    def __matchopt_check__(self) -> None:
        """Checks of a standardizer read from a model file (:mod:`matchopt.state`)."""
        mean = check_array(attribute(self, "mean"), "mean")
        std = check_array(attribute(self, "std"), "std")
        if mean.shape != std.shape and not (mean.size == std.size == 1):
            raise MatchoptError(f"mean has shape {mean.shape} but std {std.shape}")
        if not (std > 0).all():
            raise MatchoptError("std holds values <= 0")

    def transform(self, values: np.ndarray) -> np.ndarray:
        return (np.asarray(values, dtype=np.float64) - self.mean) / self.std

    def inverse(self, values: np.ndarray) -> np.ndarray:
        return np.asarray(values, dtype=np.float64) * self.std + self.mean


class DesignEncoder:
    """Designs <-> normalized float features (and y <-> normalized y) for one offline dataset.

    Discrete designs become flattened logits, then every feature and y are z-scored with the
    offline statistics (protocol.md, "Normalization for training").

    Args:
        space: the design space of the data.
        normalize_x: z-score the features (the default for every paper method).
        normalize_y: z-score the scores.
    """

    def __init__(self, space: DesignSpace, normalize_x: bool = True, normalize_y: bool = True):
        self.space = space
        self.normalize_x = normalize_x
        self.normalize_y = normalize_y

    def fit(self, x: np.ndarray, y: np.ndarray) -> DesignEncoder:
        raw = self._to_raw_features(x)
        self.x_scaler_ = Standardizer.fit(raw) if self.normalize_x else None
        self.y_scaler_ = Standardizer.fit(np.asarray(y).reshape(-1)) if self.normalize_y else None
        return self

    def __matchopt_check__(self) -> None:
        """Checks of an encoder read from a model file (:mod:`matchopt.state`)."""
        check_type(self, "space", DesignSpace)
        check_bool(self, "normalize_x")
        check_bool(self, "normalize_y")
        if "x_scaler_" not in vars(self) and "y_scaler_" not in vars(self):
            return  # not fitted
        x_scaler = check_type(self, "x_scaler_", Standardizer, none=not self.normalize_x)
        if x_scaler is not None:
            shape = (self.n_features,)
            for name in ("mean", "std"):
                check_array(getattr(x_scaler, name), f"x_scaler_.{name}", shape=shape)
        y_scaler = check_type(self, "y_scaler_", Standardizer, none=not self.normalize_y)
        if y_scaler is not None:
            for name in ("mean", "std"):
                value = np.asarray(getattr(y_scaler, name))
                if value.shape not in ((), (1,)):
                    raise MatchoptError(f"y_scaler_.{name} has shape {value.shape}, expected ()")

    @property
    def n_features(self) -> int:
        if self.space.is_discrete:
            return self.space.shape[0] * (self.space.vocab_size - 1)
        return self.space.shape[0]

    def _to_raw_features(self, x: np.ndarray) -> np.ndarray:
        if self.space.is_discrete:
            return tokens_to_logits(x, self.space.vocab_size).reshape(len(x), -1)
        return np.asarray(x, dtype=np.float64).reshape(len(x), -1)

    def encode_x(self, x: np.ndarray) -> np.ndarray:
        """Designs (n x shape) -> features (n x n_features), float32."""
        raw = self._to_raw_features(x)
        out = self.x_scaler_.transform(raw) if self.x_scaler_ is not None else raw
        return out.astype(np.float32)

    def decode_x(self, features: np.ndarray) -> np.ndarray:
        """Features (n x n_features) -> designs in the space's own format and dtype."""
        features = np.asarray(features, dtype=np.float64)
        raw = self.x_scaler_.inverse(features) if self.x_scaler_ is not None else features
        if self.space.is_discrete:
            length, k = self.space.shape[0], self.space.vocab_size
            return logits_to_tokens(raw.reshape(len(raw), length, k - 1))
        return raw.reshape((len(raw),) + self.space.shape).astype(np.float32)

    def encode_y(self, y: np.ndarray) -> np.ndarray:
        y = np.asarray(y, dtype=np.float64).reshape(-1)
        return (self.y_scaler_.transform(y) if self.y_scaler_ is not None else y).astype(np.float32)

    def decode_y(self, y: np.ndarray) -> np.ndarray:
        y = np.asarray(y, dtype=np.float64).reshape(-1)
        return self.y_scaler_.inverse(y) if self.y_scaler_ is not None else y
