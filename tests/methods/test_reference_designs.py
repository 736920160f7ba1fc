"""Same seed, same designs: every registered method, both embedded tasks, against one golden file.

``tests/data/reference_designs.npz`` holds the quick-preset designs (seed 0, 32 designs) of every
registered method on both embedded tasks, computed with pinned kernels
(``tests/reference_designs.py``). A refactor must leave them bit for bit; a change of a method's
arithmetic regenerates that method's entries, with the reason in the commit:

    python tests/reference_designs.py tests/data/reference_designs.npz [METHOD ...]
"""

import subprocess
import sys
from pathlib import Path

import numpy as np

from matchopt.methods import METHODS

HERE = Path(__file__).parents[1]
GOLDEN = HERE / "data" / "reference_designs.npz"
TASKS = ("styblinski-tang", "potts")


def test_every_registered_method_proposes_its_reference_designs(tmp_path):
    now = tmp_path / "now.npz"
    subprocess.run(
        [sys.executable, str(HERE / "reference_designs.py"), str(now)], check=True, timeout=900
    )
    golden = dict(np.load(GOLDEN, allow_pickle=False))
    after = dict(np.load(now, allow_pickle=False))
    # Every registered method is in the golden file, by construction of the check.
    expected = {f"{task}/{method}" for task in TASKS for method in METHODS}
    assert set(golden) == expected, "regenerate: python tests/reference_designs.py ..."
    changed = [key for key in golden if not np.array_equal(golden[key], after[key])]
    assert not changed, f"designs changed for {changed}"
