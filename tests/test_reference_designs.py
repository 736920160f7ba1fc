"""Same seed, same designs, before and after a refactor: every method, both embedded tasks."""

import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
BEFORE = HERE / "data" / "quick_designs_before_redesign.npz"


def test_every_quick_preset_proposes_what_it_did_before_the_redesign(tmp_path):
    """Designs stored before the redesign of issue 11 (tests/reference_designs.py pins kernels)."""
    now = tmp_path / "now.npz"
    subprocess.run(
        [sys.executable, str(HERE / "reference_designs.py"), str(now)], check=True, timeout=900
    )
    before, after = np.load(BEFORE, allow_pickle=False), np.load(now, allow_pickle=False)
    assert sorted(after.files) == sorted(before.files)
    changed = [key for key in before.files if not np.array_equal(before[key], after[key])]
    assert not changed, f"designs changed for {changed}"
