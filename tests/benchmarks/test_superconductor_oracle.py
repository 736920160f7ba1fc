"""benchmarks/superconductor_oracle.py on a small fixture in the real shards' layout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from task_fixtures import write_superconductor

ROOT = Path(__file__).resolve().parents[2]


def test_the_oracle_report_states_accuracy_and_how_far_another_forest_moves_scores(tmp_path):
    write_superconductor(tmp_path)  # 460 rows: the forest draws them all and holds out 230
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "superconductor_oracle.py"),
            "--data-dir",
            str(tmp_path),
            "--other-seeds",
            "1",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env=env,
    ).stdout
    result = json.loads(out.strip().splitlines()[-1])
    split = result["accuracy"]["design_bench_split"]
    assert split["rows"] == 230 and 0.5 < split["spearman"] <= 1.0
    # Every row is drawn, so the rows the forest never saw are the held-out ones.
    assert result["accuracy"]["unseen_rows"] == split
    assert result["offline_rows"] == 368 and result["offline_best_measured"] < 1.0
    (other,) = result["other_forests"]
    assert other["seed"] == 1 and 0.0 < other["offline_mean_abs_change"] < 0.5
    assert "design_bench_split: 230 rows" in out
