"""The fixed names the command line offers, in a module that imports nothing heavy.

``matchopt --help`` builds its parser from these before torch is imported (a start-up well under
a second); the modules that own each name import it from here, so each is written once.
"""

from __future__ import annotations

#: The method the project recommends: the default of ``matchopt optimize`` and
#: :class:`~matchopt.tabular.TableOptimizer` (README, "Which method should I use?"). Chosen on
#: the development suite by the criteria written in docs/suite.md before the comparisons ran;
#: changed only by a new comparison, never by a test-task score.
RECOMMENDED_METHOD = "matchopt-ens-mix-near"

#: The output of ``optimize`` and ``propose`` when ``--out`` is not given.
DEFAULT_OUT = "proposals.csv"

#: Every method's presets (:attr:`matchopt.methods.base.Method.presets`).
PRESETS = ("paper", "quick", "validated", "validated-quick")

#: The task ``matchopt run`` and the studies use when none is named.
DEFAULT_TASK = "styblinski-tang"

#: Named sets of tasks (``matchopt bench --suite NAME``). ``dev``: the development suite that
#: methods and their rules are chosen on (docs/suite.md); the paper's other Design-Bench tasks
#: (tfbind10, superconductor, ant, dkitty, hopper) stay out of it, for confirmation.
SUITES: dict[str, tuple[str, ...]] = {
    "dev": (
        "tfbind8",
        "potts",
        "ehrlich-4x16",
        "ehrlich-4x32",
        "ehrlich-20x64",
        "styblinski-tang",
        "hartmann6",
        "rosenbrock20",
        "levy40",
        "hopper-local",
        "utr",
        "tfbind8-replicates",
        "potts-replicates",
        "phoq",
        "phoq-screen",
        "tev",
        "tev-screen",
        "pard3",
        "pard3-screen",
    ),
}

#: Environment variable naming the folder of the design-bench data files.
DATA_DIR_ENV = "MATCHOPT_DATA_DIR"

#: Where a bench runs its cells (:mod:`matchopt.bench.grid`).
BACKENDS = ("local", "ray")

#: Formats of ``matchopt report`` (:mod:`matchopt.report`).
FORMATS = ("md", "latex", "csv")

#: Held-out rows of the checkpoint-selection study (:mod:`matchopt.validation`).
SPLITS = ("random", "top")
