import os
from pathlib import Path

import pytest

from matchopt.tasks import DATA_DIR_ENV

#: Thread variables read by BLAS/OpenMP in subprocesses the tests start (CLI, bench workers).
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def pytest_addoption(parser):
    parser.addoption(
        "--torch-threads",
        type=int,
        default=None,
        help="run the suite with matchopt.runtime.set_threads(N) (N BLAS threads in subprocesses), "
        "to check that no test depends on the thread count",
    )


def pytest_configure(config):
    threads = config.getoption("--torch-threads")
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")  # set in pytest-xdist's workers
    if threads is None and workers:
        # Workers share the cores: each gets its part (more threads than cores collapse torch).
        threads = max(1, (os.cpu_count() or 1) // int(workers))
    if threads is not None:
        if threads < 1:
            raise pytest.UsageError(f"--torch-threads must be >= 1, got {threads}")
        from matchopt.runtime import set_threads

        set_threads(threads)  # torch, BLAS, subprocesses; methods keep it (the app's choice)
        for variable in THREAD_VARIABLES:
            os.environ[variable] = str(threads)


@pytest.fixture
def data_dir() -> Path:
    """Design-bench data folder from $MATCHOPT_DATA_DIR (CI sets it); skip where unset."""
    value = os.environ.get(DATA_DIR_ENV)
    if not value:
        pytest.skip(f"{DATA_DIR_ENV} is not set (CI sets it to ../shared/data/design_bench)")
    path = Path(value)
    if not (path / "tf_bind_8-SIX6_REF_R1" / "tf_bind_8-x-0.npy").is_file():
        pytest.skip(f"no TF-Bind-8 files under {path}")
    return path


@pytest.fixture
def csv_file(tmp_path):
    def write(text: str, name: str = "data.csv"):
        path = tmp_path / name
        path.write_text(text)
        return path

    return write
