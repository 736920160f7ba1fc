"""Task registry: a plain dict from name to task class."""

from __future__ import annotations

import os

from matchopt.errors import MatchoptError
from matchopt.tasks.base import DATA_DIR_ENV, Task, resolve_data_dir
from matchopt.tasks.design_bench import Superconductor, TFBind8, TFBind10
from matchopt.tasks.hopper import HopperController, HopperLocal
from matchopt.tasks.morphology import AntMorphology, DKittyMorphology
from matchopt.tasks.synthetic import ChainPotts, StyblinskiTang

TASKS: dict[str, type[Task]] = {
    cls.name: cls
    for cls in (
        StyblinskiTang,
        ChainPotts,
        TFBind8,
        TFBind10,
        Superconductor,
        HopperController,
        HopperLocal,
        AntMorphology,
        DKittyMorphology,
    )
}
DEFAULT_TASK = StyblinskiTang.name


def get_task_class(name: str) -> type[Task]:
    if name not in TASKS:
        raise MatchoptError(f"unknown task {name!r}; known tasks: {', '.join(TASKS)}")
    return TASKS[name]


def load_task(name: str, data_dir: str | os.PathLike | None = None) -> Task:
    """Build a registered task (reading its files from ``data_dir`` or $MATCHOPT_DATA_DIR)."""
    return get_task_class(name)(data_dir)


__all__ = [
    "DATA_DIR_ENV",
    "DEFAULT_TASK",
    "TASKS",
    "Task",
    "get_task_class",
    "load_task",
    "resolve_data_dir",
]
