"""Optimize your own data: a CSV/Parquet table or a DataFrame in, proposals in its format out.

    from matchopt.tabular import TableOptimizer
    opt = TableOptimizer(target="y", method="matchopt", seed=0).fit("measured.csv")
    proposals = opt.propose(128)  # DataFrame: features, predicted_y, nearest_euclidean
    opt.save("model.pt")          # TableOptimizer.load("model.pt").propose(128) gives the same

:mod:`matchopt.tabular.schema` maps tables to designs and back; :mod:`matchopt.tabular.optimizer`
fits a method, makes, deduplicates and ranks proposals, and saves models.
"""

from matchopt.tabular.optimizer import (
    OUTPUT_SUFFIXES,
    ProposalWarning,
    TableOptimizer,
    check_output_path,
    table_bytes,
    write_file,
    write_table,
)
from matchopt.tabular.schema import (
    CategoricalColumn,
    NumericColumn,
    SequenceColumn,
    TableSchema,
    parse_bounds,
    read_table,
)

__all__ = [
    "OUTPUT_SUFFIXES",
    "CategoricalColumn",
    "NumericColumn",
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
