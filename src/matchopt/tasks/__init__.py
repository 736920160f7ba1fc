"""Task registry: a plain dict from name to task class."""

from __future__ import annotations

import os

from matchopt.errors import MatchoptError
from matchopt.names import DEFAULT_TASK, SUITES
from matchopt.tasks.base import DATA_DIR_ENV, Task, resolve_data_dir
from matchopt.tasks.botorch_functions import BOTORCH_TASKS
from matchopt.tasks.design_bench import UTR, Superconductor, TFBind8, TFBind10
from matchopt.tasks.ehrlich import EHRLICH_TASKS
from matchopt.tasks.hopper import HopperController, HopperLocal
from matchopt.tasks.landscapes import LANDSCAPE_TASKS
from matchopt.tasks.morphology import AntMorphology, DKittyMorphology
from matchopt.tasks.replicates import REPLICATE_TASKS
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
        UTR,
        *REPLICATE_TASKS,
        *EHRLICH_TASKS,
        *BOTORCH_TASKS,
        *LANDSCAPE_TASKS,
    )
}


def get_suite(name: str) -> tuple[str, ...]:
    """The task names of a registered suite."""
    if name not in SUITES:
        raise MatchoptError(f"unknown suite {name!r}; known suites: {', '.join(SUITES)}")
    return SUITES[name]


#: design-bench task name -> matchopt task name (the paper's six tasks).
DESIGN_BENCH_NAMES: dict[str, str] = {
    # Declared on the class itself: a task built on another (hopper-local) is not that task.
    vars(cls)["design_bench_name"]: name
    for name, cls in TASKS.items()
    if vars(cls).get("design_bench_name")
}


def task_name(name: str) -> str:
    """A registered task's name, given it or its design-bench name (``TFBind8-Exact-v0``)."""
    name = DESIGN_BENCH_NAMES.get(name, name)
    if name not in TASKS:
        raise MatchoptError(
            f"unknown task {name!r}; known tasks: {', '.join(TASKS)} "
            f"(or their design-bench names: {', '.join(DESIGN_BENCH_NAMES)})"
        )
    return name


def get_task_class(name: str) -> type[Task]:
    """The class of a registered task (its name or its design-bench name)."""
    return TASKS[task_name(name)]


def load_task(name: str, data_dir: str | os.PathLike | None = None) -> Task:
    """Build a registered task (reading its files from ``data_dir`` or $MATCHOPT_DATA_DIR)."""
    return get_task_class(name)(data_dir)


__all__ = [
    "DATA_DIR_ENV",
    "DEFAULT_TASK",
    "DESIGN_BENCH_NAMES",
    "SUITES",
    "TASKS",
    "Task",
    "get_suite",
    "get_task_class",
    "load_task",
    "resolve_data_dir",
    "task_name",
]
