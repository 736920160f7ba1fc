"""Embedded Ehrlich function tasks (holo-bench; Stanton et al. 2024, "Closed-Form Test Functions
for Biophysical Sequence Design"): built deterministically in memory, no files needed.

An Ehrlich function ``f`` scores a sequence of ``dim`` tokens from ``num_states``. Sequences the
function's sparse transition matrix forbids (a banned pair of neighbouring tokens) are
infeasible; a feasible sequence scores the product, over ``num_motifs`` spaced motifs of
``motif_length`` tokens, of the (quantized, epistatic) fraction of the motif present at its best
position. The maximum is 1.0 (every motif present), reached by holo's ``optimal_solution()``.

The oracle is holo's own ``Ehrlich`` object (pytorch-holo 0.0.5, imported lazily), called
without observation noise. holo scores infeasible sequences ``-inf``; matchopt scores them 0.0,
the paper's definition, so every score is finite (the task contract and the full-data
normalization need that). Feasible sequences score exactly what holo returns (float32 in holo,
returned as float64).

Offline data recipe (every instance, all seeds fixed):

1. ``n_samples`` sequences from the function's own feasible distribution: holo's DMP sampler
   (``sample_dmp`` with the function's stationary distribution and transition matrix, as in
   ``Ehrlich.initial_solution``) driven by ``torch.Generator().manual_seed(data_seed)``;
2. ``n_mutants`` point mutants: a parent drawn uniformly from step 1, then 1 to
   ``max_mutations`` distinct positions set to another token, uniformly
   (``numpy.random.default_rng(data_seed)``); a mutant may be infeasible (score 0). Mutants
   are 10% of the full data: a third to a half of them are infeasible, and more would fill
   the offline set (the lower part) with zeros;
3. the full dataset is all of them (samples first, then mutants); the offline set is the rows
   with ``y <= percentile(y_full, max_percentile)`` (:func:`~matchopt.tasks.shards.offline_mask`,
   as design-bench and :mod:`matchopt.tasks.synthetic`). Ehrlich values are quantized, so many
   rows tie; every row tied with the cut is kept, which makes the offline set a deterministic
   function of the seeds (and of the torch version holo samples with).

Normalized scores use the full dataset's min (0: it holds infeasible mutants) and max, so the
optimum (1.0) normalizes above 1 (see each instance's docstring).
"""

from __future__ import annotations

from functools import lru_cache
from typing import ClassVar

import numpy as np
import torch

from matchopt.data import DesignSpace
from matchopt.errors import MatchoptError
from matchopt.tasks.base import Task
from matchopt.tasks.shards import offline_mask

#: How to install holo so that it runs on numpy 2 (its 0.0.5 metadata pins numpy<2 and pulls
#: wandb and hydra, which the Ehrlich function does not use).
HOLO_INSTALL = "pip install --no-deps pytorch-holo==0.0.5 && pip install pooch"

#: Rows per call to holo (its motif search holds windows x rows x motif length values).
BATCH_ROWS = 8192


def _import_ehrlich(task_name: str):
    """holo's ``Ehrlich`` class, or a one-line :class:`MatchoptError` naming the install."""
    try:
        from holo.test_functions.closed_form import Ehrlich
    except ImportError as err:
        raise MatchoptError(
            f"task {task_name!r} needs holo-bench's Ehrlich function, which cannot be imported "
            f"({err}); install it with `{HOLO_INSTALL}`"
        ) from None
    return Ehrlich


@lru_cache(maxsize=16)
def _ehrlich(
    task_name: str,
    num_states: int,
    dim: int,
    num_motifs: int,
    motif_length: int,
    quantization: int | None,
    epistasis_factor: float,
    random_seed: int,
):
    """holo's Ehrlich function with these parameters (built once per instance)."""
    return _import_ehrlich(task_name)(
        num_states=num_states,
        dim=dim,
        num_motifs=num_motifs,
        motif_length=motif_length,
        quantization=quantization,
        epistasis_factor=epistasis_factor,
        noise_std=0.0,
        negate=False,
        random_seed=random_seed,
    )


class EhrlichTask(Task):
    """Base class of the Ehrlich tasks; subclasses only set the parameters below.

    Designs are ``dim`` integer tokens in ``0..num_states-1``; the oracle is holo's Ehrlich
    function (infeasible sequences score 0). The offline data follow the module's recipe: DMP
    samples and point mutants of them, cut at a percentile of their scores.

    Attributes:
        num_states, dim, num_motifs, motif_length, quantization, epistasis_factor: holo's
            ``Ehrlich`` parameters (``quantization=None`` means ``motif_length``, none extra).
        holo_seed: holo's ``random_seed`` (transition matrix, motifs and spacings).
        data_seed: seed of the offline data (torch for the DMP samples, numpy for the mutants).
        n_samples, n_mutants, max_mutations: sizes of the full dataset (recipe steps 1 and 2).
        max_percentile: the offline cut (recipe step 3).
    """

    embedded = True
    num_states: ClassVar[int]
    dim: ClassVar[int]
    num_motifs: ClassVar[int]
    motif_length: ClassVar[int]
    quantization: ClassVar[int | None] = None
    epistasis_factor: ClassVar[float] = 0.0
    holo_seed: ClassVar[int] = 0
    data_seed: ClassVar[int] = 0
    n_samples: ClassVar[int]
    n_mutants: ClassVar[int]
    max_mutations: ClassVar[int] = 2
    max_percentile: ClassVar[float]

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "dim" in cls.__dict__ or "num_states" in cls.__dict__:
            cls.space = DesignSpace.discrete(cls.dim, cls.num_states)

    @classmethod
    def holo_function(cls):
        """holo's ``Ehrlich`` object of this instance (cached); MatchoptError without holo."""
        return _ehrlich(
            cls.name,
            cls.num_states,
            cls.dim,
            cls.num_motifs,
            cls.motif_length,
            cls.quantization,
            cls.epistasis_factor,
            cls.holo_seed,
        )

    @classmethod
    def function(cls, tokens: np.ndarray) -> np.ndarray:
        """Ehrlich values (n,) in float64 of token arrays (n x dim); infeasible rows score 0."""
        f = cls.holo_function()
        # A copy: offline x is read-only, and torch warns on tensors over read-only memory.
        tokens = np.array(tokens, dtype=np.int64).reshape(-1, cls.dim)
        out = np.empty(len(tokens), dtype=np.float64)
        with torch.no_grad():
            for start in range(0, len(tokens), BATCH_ROWS):
                batch = torch.as_tensor(tokens[start : start + BATCH_ROWS])
                # noise=False: with noise_std=0 holo would still draw (and discard) global
                # torch random numbers, changing the stream of the method that asked.
                out[start : start + len(batch)] = f(batch, noise=False).double().numpy()
        out[np.isneginf(out)] = 0.0
        return out

    @classmethod
    def optimum(cls) -> tuple[np.ndarray, float]:
        """holo's optimal sequence (dim,) and its value (1.0)."""
        f = cls.holo_function()
        return f.optimal_solution().numpy().astype(np.int64), float(f.optimal_value)

    @classmethod
    def full_designs(cls) -> np.ndarray:
        """The full dataset's designs (n_samples + n_mutants, dim), recipe steps 1 and 2."""
        f = cls.holo_function()  # first: it names the task if holo is missing
        from holo.test_functions.elemental import sample_dmp

        generator = torch.Generator().manual_seed(cls.data_seed)
        samples = sample_dmp(
            initial_dist=f.stationary_dist.squeeze(-1),
            transition_matrix=f.transition_matrix,
            num_steps=cls.dim,
            num_samples=cls.n_samples,
            generator=generator,
        ).numpy()
        rng = np.random.default_rng(cls.data_seed)
        parents = rng.integers(0, cls.n_samples, size=cls.n_mutants)
        n_changed = rng.integers(1, cls.max_mutations + 1, size=cls.n_mutants)
        positions = np.argsort(rng.random((cls.n_mutants, cls.dim)), axis=1)
        shifts = rng.integers(1, cls.num_states, size=(cls.n_mutants, cls.dim))
        mutants = samples[parents].copy()
        rows = np.arange(cls.n_mutants)
        for j in range(cls.max_mutations):
            hit = rows[n_changed > j]
            cols = positions[hit, j]
            mutants[hit, cols] = (mutants[hit, cols] + shifts[hit, j]) % cls.num_states
        return np.concatenate([samples, mutants]).astype(np.int64)

    def _load(self):
        x = self.full_designs()
        y = self.function(x)
        keep = offline_mask(y, self.max_percentile)
        return x[keep], y[keep], y

    def _score(self, designs: np.ndarray) -> np.ndarray:
        return self.function(designs)


class Ehrlich4x16(EhrlichTask):
    """Ehrlich function on 16 tokens of 4: 2 motifs of 8 (no slack: the motifs fill the
    sequence), no epistasis; holo seed 1.

    Full data: 3,600 DMP samples + 400 point mutants (data seed 0); offline set: y <= the 30th
    percentile (1,395 rows, 9 levels, best 0.234). Full-data max 0.75, so the optimum (1.0)
    normalizes to 1.33.
    """

    name = "ehrlich-4x16"
    summary = "Ehrlich function (holo), 16 tokens of 4, 2 motifs of 8 (embedded)"
    offline_size = 1_395
    num_states, dim, num_motifs, motif_length = 4, 16, 2, 8
    epistasis_factor, holo_seed = 0.0, 1
    data_seed, n_samples, n_mutants, max_percentile = 0, 3_600, 400, 30.0


class Ehrlich20x32(EhrlichTask):
    """Ehrlich function on 32 tokens of 20: 4 motifs of 4 (the paper's usual shape), no
    epistasis; holo seed 3.

    Full data: 2,250 DMP samples + 250 point mutants (data seed 0); offline set: y <= the 50th
    percentile (1,694 rows, 5 levels, best 4/256). Full-data max 0.1875, so the optimum (1.0)
    normalizes to 5.3.
    """

    name = "ehrlich-20x32"
    summary = "Ehrlich function (holo), 32 tokens of 20, 4 motifs of 4 (embedded)"
    offline_size = 1_694
    num_states, dim, num_motifs, motif_length = 20, 32, 4, 4
    epistasis_factor, holo_seed = 0.0, 3
    data_seed, n_samples, n_mutants, max_percentile = 0, 2_250, 250, 50.0


class Ehrlich4x32(EhrlichTask):
    """Ehrlich function on 32 tokens of 4: 3 motifs of 8, epistasis 0.5; holo seed 2.

    Full data: 3,600 DMP samples + 400 point mutants (data seed 0); offline set: y <= the 40th
    percentile (1,729 rows, 43 levels, best 0.304). Full-data max 0.827, so the optimum (1.0)
    normalizes to 1.21.
    """

    name = "ehrlich-4x32"
    summary = "Ehrlich function (holo), 32 tokens of 4, 3 motifs of 8, epistatic (embedded)"
    offline_size = 1_729
    num_states, dim, num_motifs, motif_length = 4, 32, 3, 8
    epistasis_factor, holo_seed = 0.5, 2
    data_seed, n_samples, n_mutants, max_percentile = 0, 3_600, 400, 40.0


class Ehrlich20x64(EhrlichTask):
    """Ehrlich function on 64 tokens of 20: 4 motifs of 8, epistasis 0.5; holo seed 0.

    Full data: 3,600 DMP samples + 400 point mutants (data seed 0); offline set: y <= the 30th
    percentile (1,608 rows, 22 levels, best 0.0074). Full-data max 0.050, so the optimum (1.0)
    normalizes to 20.
    """

    name = "ehrlich-20x64"
    summary = "Ehrlich function (holo), 64 tokens of 20, 4 motifs of 8, epistatic (embedded)"
    offline_size = 1_608
    num_states, dim, num_motifs, motif_length = 20, 64, 4, 8
    epistasis_factor, holo_seed = 0.5, 0
    data_seed, n_samples, n_mutants, max_percentile = 0, 3_600, 400, 30.0


#: The registered Ehrlich instances (short to long).
EHRLICH_TASKS = (Ehrlich4x16, Ehrlich20x32, Ehrlich4x32, Ehrlich20x64)
