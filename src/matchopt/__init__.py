"""matchopt: offline black-box optimization with gradient-matching surrogates (MATCH-OPT).

Quick use::

    import matchopt
    record, designs = matchopt.run("styblinski-tang", "matchopt", seed=0, preset="quick")
    print(record.p100, record.p50)

    # your own data
    from matchopt import MatchOpt, OfflineData, DesignSpace
    data = OfflineData(x, y, DesignSpace.continuous(x.shape[1]))
    designs = MatchOpt(seed=0).fit(data).propose(128)
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

from matchopt._version import __version__
from matchopt.errors import MatchoptError

if TYPE_CHECKING:
    from matchopt.data import DesignSpace, OfflineData
    from matchopt.methods import METHODS, MatchOpt, MatchOptConfig, Method, make_method
    from matchopt.records import RunRecord
    from matchopt.runner import run
    from matchopt.runtime import default_threads, limit_threads, set_threads
    from matchopt.tabular import TableOptimizer
    from matchopt.tasks import TASKS, Task, load_task

#: Public name -> the module that defines it, imported on first use: the command line imports
#: this package, and ``matchopt --help`` should not wait for torch.
_LAZY = {
    "DesignSpace": "matchopt.data",
    "OfflineData": "matchopt.data",
    "METHODS": "matchopt.methods",
    "MatchOpt": "matchopt.methods",
    "MatchOptConfig": "matchopt.methods",
    "Method": "matchopt.methods",
    "make_method": "matchopt.methods",
    "RunRecord": "matchopt.records",
    "run": "matchopt.runner",
    "default_threads": "matchopt.runtime",
    "limit_threads": "matchopt.runtime",
    "set_threads": "matchopt.runtime",
    "TableOptimizer": "matchopt.tabular",
    "TASKS": "matchopt.tasks",
    "Task": "matchopt.tasks",
    "load_task": "matchopt.tasks",
}

__all__ = [
    "METHODS",
    "TASKS",
    "DesignSpace",
    "MatchOpt",
    "MatchOptConfig",
    "MatchoptError",
    "Method",
    "OfflineData",
    "RunRecord",
    "TableOptimizer",
    "Task",
    "__version__",
    "default_threads",
    "limit_threads",
    "load_task",
    "make_method",
    "run",
    "set_threads",
]


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module 'matchopt' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
