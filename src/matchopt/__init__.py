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

from matchopt._version import __version__
from matchopt.data import DesignSpace, OfflineData
from matchopt.errors import MatchoptError
from matchopt.methods import METHODS, MatchOpt, MatchOptConfig, Method, make_method
from matchopt.records import RunRecord
from matchopt.runner import run
from matchopt.runtime import default_threads, limit_threads, set_threads
from matchopt.tasks import TASKS, Task, load_task

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
    # TableOptimizer pulls in pandas; import it only when asked for.
    if name == "TableOptimizer":
        from matchopt.tabular import TableOptimizer

        return TableOptimizer
    raise AttributeError(f"module 'matchopt' has no attribute {name!r}")
