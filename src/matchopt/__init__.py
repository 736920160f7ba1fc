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

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

try:
    __version__ = _version("matchopt")
except PackageNotFoundError:  # running from a source tree
    __version__ = "0.0.0+unknown"

from matchopt.data import DesignSpace, OfflineData  # noqa: E402
from matchopt.errors import MatchoptError  # noqa: E402
from matchopt.evaluation import RunRecord  # noqa: E402
from matchopt.methods import METHODS, MatchOpt, MatchOptConfig, Method, make_method  # noqa: E402
from matchopt.runner import run  # noqa: E402
from matchopt.tasks import TASKS, Task, load_task  # noqa: E402

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
    "load_task",
    "make_method",
    "run",
]


def __getattr__(name: str):
    # TableOptimizer pulls in pandas; import it only when asked for.
    if name == "TableOptimizer":
        from matchopt.tabular import TableOptimizer

        return TableOptimizer
    raise AttributeError(f"module 'matchopt' has no attribute {name!r}")
