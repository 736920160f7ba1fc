import os
from pathlib import Path

import pytest

from matchopt.tasks import DATA_DIR_ENV


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
