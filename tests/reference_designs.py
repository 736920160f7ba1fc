"""Designs of every method's quick preset on both embedded tasks, pinned to one kernel set.

Refactors must not change what a method proposes. ``python tests/reference_designs.py OUT.npz
[METHOD ...]`` stores the designs of every registered method (or of those named, kept beside the
file's others; quick preset, seed 0, 32 designs) on both embedded tasks;
``tests/methods/test_reference_designs.py`` recomputes them and compares bitwise with
``tests/data/reference_designs.npz``.

Floats depend on the summation order of the kernels, which depends on the processor's
instruction set and the thread count (see ``tests/roundoff.py``). Both sides therefore run in a
process with one thread and the AVX2 kernels of PyTorch, MKL and OpenBLAS (:data:`PINNED_ENV`),
which every x86-64 processor with AVX2 runs identically.
"""

from __future__ import annotations

import os
import sys

#: Environment of the process that computes the designs (set before numpy and torch load).
PINNED_ENV = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    "MKL_CBWR": "AVX2",
    "OPENBLAS_CORETYPE": "Haswell",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MATCHOPT_THREADS": "1",
}
TASKS = ("styblinski-tang", "potts")
N_DESIGNS = 32


def compute(names: list[str] | None = None) -> dict:
    """Task/method name -> designs (32 x shape) of ``names`` (None: every registered method);
    numpy and torch load after the environment."""

    from matchopt.methods import METHODS, make_method
    from matchopt.runtime import set_threads
    from matchopt.tasks import load_task

    set_threads(1)
    designs = {}
    for task_name in TASKS:
        task = load_task(task_name)
        for method_name in names or METHODS:
            method = make_method(method_name, "quick", seed=0).fit(task.offline)
            designs[f"{task_name}/{method_name}"] = method.propose(N_DESIGNS)
    return designs


def main(path: str, names: list[str]) -> None:
    """Write the designs of ``names`` (every registered method when empty) to ``path``; with
    names, the file's other entries are kept (a method whose arithmetic changed is stored
    again, the others stay as they were)."""
    for key, value in PINNED_ENV.items():
        if os.environ.get(key) != value:
            command = [sys.executable, __file__, path, *names]
            os.execvpe(sys.executable, command, {**os.environ, **PINNED_ENV})
    import numpy as np

    kept = {}
    if names and os.path.exists(path):
        kept = dict(np.load(path, allow_pickle=False))
    np.savez_compressed(path, **{**kept, **compute(names or None)})


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
