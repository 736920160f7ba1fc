"""Synthetic studies that reproduce the paper's illustrative figures (not benchmark runs).

* :mod:`matchopt.studies.gradient_error`: Fig. 1, gradient error of MATCH-OPT vs regression on
  the Shekel function.
"""

from matchopt.studies.gradient_error import run_gradient_error_study

__all__ = ["run_gradient_error_study"]
