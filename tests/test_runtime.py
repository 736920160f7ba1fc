"""The thread policy (matchopt.runtime): one default for run, optimize, bench and the API."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from table_helpers import (
    assert_one_line_error,
    numeric_frame,
    optimize,
)
from test_cli import matchopt

from matchopt.errors import MatchoptError
from matchopt.runner import run
from matchopt.runtime import (
    DEVICE_ENV,
    THREADS_ENV,
    check_threads,
    default_threads,
    limit_threads,
    resolve_device,
    set_threads,
)


def test_default_is_half_the_cores_at_most_four(monkeypatch):
    monkeypatch.delenv(THREADS_ENV, raising=False)
    for cores, expected in ((1, 1), (2, 1), (3, 1), (8, 4), (64, 4)):
        monkeypatch.setattr(os, "cpu_count", lambda cores=cores: cores)
        assert default_threads() == expected
    monkeypatch.setenv(THREADS_ENV, "3")
    assert default_threads() == 3
    monkeypatch.setenv(THREADS_ENV, "0")
    with pytest.raises(MatchoptError, match=f"\\${THREADS_ENV} 0: needs at least 1 thread"):
        default_threads()


def test_limit_threads_restores_the_previous_setting():
    before = torch.get_num_threads()
    with limit_threads(1) as used:
        assert used == 1 and torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_threads_above_four_per_core_are_refused_everywhere(monkeypatch):
    """1000 threads on 2 cores ran 4.6x slower: the CLI, set_threads and limit_threads refuse
    more than 4 per core, naming the option, the value and the cap."""
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert check_threads("8") == 8
    with pytest.raises(MatchoptError, match="--threads 9: at most 8 threads"):
        check_threads("9")
    before = torch.get_num_threads()
    with pytest.raises(MatchoptError, match="at most 8 threads"):
        with limit_threads(1000):
            pass
    with pytest.raises(MatchoptError, match="at most 8 threads"):
        set_threads(1000)  # refused before it changes anything
    assert torch.get_num_threads() == before
    monkeypatch.setenv(THREADS_ENV, "64")
    with pytest.raises(MatchoptError, match=f"\\${THREADS_ENV} 64: at most 8 threads"):
        default_threads()


def test_method_seeds_are_32_bit():
    from matchopt.methods import make_method

    for seed in (-1, 2**32, 18446744073709551616):
        with pytest.raises(MatchoptError, match="seed must be an integer from 0 to 4294967295"):
            make_method("random", "quick", seed=seed)
    assert make_method("random", "quick", seed=2**32 - 1).seed == 2**32 - 1


def test_run_records_the_threads_it_used():
    record, _ = run("potts", "random", threads=1)
    assert record.extra["environment"]["torch_threads"] == 1


def test_cli_threads_reach_the_record(tmp_path):
    result = matchopt(
        "run", "--method", "random", "--threads", "1", "--json", "--out", str(tmp_path)
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["extra"]["environment"]["torch_threads"] == 1
    bench = tmp_path / "bench"
    result = matchopt(
        "bench", "--tasks", "potts", "--methods", "random", "--seeds", "0", "--threads", "1",
        "--workers", "1", "--out", str(bench),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    record = json.loads((bench / "potts" / "random" / "seed0.json").read_text())
    assert record["extra"]["environment"]["torch_threads"] == 1


# --- Devices ----------------------------------------------------------------------------------


def test_resolve_device_names_and_environment(monkeypatch):
    monkeypatch.delenv(DEVICE_ENV, raising=False)
    assert resolve_device(None) == torch.device("cpu")
    assert resolve_device(" CPU ") == torch.device("cpu")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected
    monkeypatch.setenv(DEVICE_ENV, "cpu")
    assert resolve_device(None) == torch.device("cpu")
    monkeypatch.setenv(DEVICE_ENV, "gpu0")
    with pytest.raises(MatchoptError, match=r"^\$MATCHOPT_DEVICE 'gpu0' is not a device"):
        resolve_device(None)


def test_unknown_or_absent_devices_are_one_line_errors():
    with pytest.raises(MatchoptError, match="--device 'tpu' is not a device; use cpu, cuda"):
        resolve_device("tpu")
    with pytest.raises(MatchoptError, match="matchopt runs on cpu, cuda or mps"):
        resolve_device("meta")
    if not torch.cuda.is_available():
        with pytest.raises(MatchoptError, match="sees no CUDA GPU here"):
            resolve_device("cuda:0")
    else:
        with pytest.raises(MatchoptError, match="CUDA device"):
            resolve_device(f"cuda:{torch.cuda.device_count()}")


def test_cli_rejects_a_bad_device_before_any_work(tmp_path):
    result = matchopt("run", "--task", "styblinski-tang", "--method", "random", "--preset",
                      "quick", "--device", "tpu", "--out", str(tmp_path / "out"))  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "--device 'tpu' is not a device" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_seeded_torch_rng_seeds_the_block_and_restores_the_callers_stream():
    import torch

    from matchopt.runtime import cuda_indices, seeded_torch_rng

    torch.manual_seed(123)
    expected_after = torch.rand(3)
    torch.manual_seed(123)
    with seeded_torch_rng(7):
        inside = torch.rand(3)
    assert torch.equal(torch.rand(3), expected_after)  # the caller's stream goes on untouched
    torch.manual_seed(7)
    assert torch.equal(inside, torch.rand(3))  # inside: the stream of manual_seed(7)
    assert cuda_indices("cpu") == [] and cuda_indices("cuda:1") == [1]


def test_seeded_torch_rng_leaves_gpu_generators_alone(monkeypatch):
    """torch.manual_seed would reseed every GPU for good; the CPU-only block must not touch
    any GPU generator (checked without a GPU by watching the seeding calls)."""
    import torch

    from matchopt.runtime import seeded_torch_rng

    calls = []
    monkeypatch.setattr(torch.cuda, "manual_seed_all", lambda seed: calls.append(seed))
    monkeypatch.setattr(torch.cuda, "manual_seed", lambda seed: calls.append(seed))
    with seeded_torch_rng(5):
        pass
    assert calls == []


def test_methods_called_directly_follow_the_thread_default(tmp_path):
    """Method.fit / propose run with matchopt's default threads unless the caller chose them
    (set_threads, limit_threads); a fresh process, so no earlier choice is in force."""
    script = tmp_path / "probe.py"
    script.write_text(
        "import dataclasses, json, numpy as np, torch\n"
        "from matchopt import DesignSpace, OfflineData\n"
        "from matchopt.methods.base import Method\n"
        "from matchopt.methods.wrappers import fit_all_or_nothing, in_default_threads\n"
        "from matchopt.runtime import limit_threads, set_threads\n"
        "@dataclasses.dataclass(frozen=True)\n"
        "class Config:\n"
        "    pass\n"
        "class Probe(Method):\n"
        "    config_class, presets, seen = Config, {'paper': {}}, []\n"
        "    @fit_all_or_nothing\n"
        "    def fit(self, data):\n"
        "        self.seen.append(torch.get_num_threads()); self.data_ = data; return self\n"
        "    @in_default_threads\n"
        "    def propose(self, n=128):\n"
        "        self.seen.append(torch.get_num_threads()); return self.data_.x[:n]\n"
        "x = np.zeros((4, 2), np.float32)\n"
        "data = OfflineData(x, np.arange(4.0), DesignSpace.continuous(2))\n"
        "torch.set_num_threads(3)\n"
        "Probe().fit(data).propose(2)\n"
        "after = torch.get_num_threads()\n"
        "with limit_threads(2):\n"
        "    Probe().fit(data).propose(2)\n"
        "set_threads(2)\n"
        "Probe().fit(data)\n"
        "print(json.dumps({'seen': Probe.seen, 'after': after}))\n"
    )
    env = {**os.environ, "MATCHOPT_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    # The default (1) inside fit and propose, the caller's 3 back after; a caller's choice kept.
    assert out == {"seen": [1, 1, 2, 2, 2], "after": 3}


@pytest.mark.parametrize("text", ["inf", "1e308", "-1", "0", "nan", "2e6", "lots"])
def test_a_memory_setting_must_be_gib_above_0_up_to_a_pebibyte(text):
    from matchopt.runtime import memory_limit

    with pytest.raises(MatchoptError, match="expected a number of GiB above 0"):
        memory_limit(text)


def test_a_memory_setting_in_gib_is_bytes():
    from matchopt.runtime import memory_limit

    assert memory_limit("1.5") == 3 * 2**29
    assert memory_limit(" 8 ") == 8 * 2**30


@pytest.mark.parametrize("setting", ["inf", "1e308", "-1", "0", "nan", "-inf"])
def test_a_memory_setting_that_is_no_limit_is_one_error_line(
    capsys, tmp_path, monkeypatch, setting
):
    path = tmp_path / "data.csv"
    numeric_frame(40).to_csv(path, index=False)
    monkeypatch.setenv("MATCHOPT_MEMORY_GIB", setting)
    code, _, err = optimize(capsys, path, "--target", "y")
    assert_one_line_error(
        code, err, f"$MATCHOPT_MEMORY_GIB='{setting}': expected a number of GiB above 0"
    )
