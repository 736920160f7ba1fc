"""Optimize your own data: a CSV/Parquet table or a DataFrame in, proposals in its format out.

    from matchopt.tabular import TableOptimizer
    opt = TableOptimizer(target="y", method="matchopt", seed=0).fit("measured.csv")
    proposals = opt.propose(128)  # DataFrame: features, predicted_y, nearest_euclidean
    opt.save("model.pt")          # TableOptimizer.load("model.pt").propose(128) gives the same

The modules, in the order a run uses them: :mod:`~matchopt.tabular.settings` (what the optimizer
is asked to do, checked once), :mod:`~matchopt.tabular.schema` (reading a table, mapping it to
designs and back), :mod:`~matchopt.tabular.fit` (the method, the predicting ensemble, its
calibration), :mod:`~matchopt.tabular.propose` (new designs, deduplicated and ranked),
:mod:`~matchopt.tabular.outputs` (the files and the report's content);
:mod:`~matchopt.tabular.optimizer` holds :class:`TableOptimizer` and the run of ``matchopt
optimize`` that goes through them.
"""

from matchopt.tabular.optimizer import TableOptimizer
from matchopt.tabular.outputs import (
    OUTPUT_SUFFIXES,
    check_output_path,
    table_bytes,
    write_file,
    write_table,
)
from matchopt.tabular.propose import ProposalWarning
from matchopt.tabular.schema import (
    CategoricalColumn,
    NumericColumn,
    SequenceColumn,
    TableSchema,
    read_table,
)
from matchopt.tabular.settings import OptimizeJob, OptimizeSettings, parse_bounds

__all__ = [
    "OUTPUT_SUFFIXES",
    "CategoricalColumn",
    "NumericColumn",
    "OptimizeJob",
    "OptimizeSettings",
    "ProposalWarning",
    "SequenceColumn",
    "TableOptimizer",
    "TableSchema",
    "check_output_path",
    "parse_bounds",
    "read_table",
    "table_bytes",
    "write_file",
    "write_table",
]
