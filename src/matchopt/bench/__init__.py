"""Benchmark grids: tasks x methods x seeds, one independent, resumable job per cell.

    from matchopt.bench import Grid, run_grid
    grid = Grid(tasks=["potts"], methods=["matchopt", "random"], seeds=[0, 1], preset="quick")
    summary = run_grid(grid, out="runs/grid", backend="local", workers=2)

Each cell writes its record atomically under ``<out>/<task>/<method>/seed<k>.json`` (the same
layout as ``matchopt run``); a rerun skips cells whose record is there, retries failed ones.
"""

from matchopt.bench.grid import Cell, CellOutcome, Grid, GridSummary, run_grid

__all__ = ["Cell", "CellOutcome", "Grid", "GridSummary", "run_grid"]
