"""One self-contained HTML page that says what ``matchopt optimize`` did and how far to trust it.

The page is plain HTML with inline CSS: no script, no font, no style sheet or image fetched from
anywhere (a Content-Security-Policy in the page forbids it). Figures are matplotlib PNGs inlined
as ``data:`` URLs. Sections:

* the header: table, target and direction, rows and designs;
* "Can the model be trusted here?": grouped cross-validation, predicted against observed;
* "Proposals": the proposals' predictions and intervals beside the measured distribution;
* "How far from the data": the proposals' distances to the nearest measured design against the
  measured designs' distances to each other;
* the top proposals as a table; what was chosen and why; the warnings; how to reproduce the run.

Every piece of text that comes from the user (column names, paths, values, warnings) is escaped,
and ``$`` is escaped in figure text so that matplotlib never reads it as mathtext.

    context = ReportContext(source="measured.csv", target="yield", ...)
    write_report("proposals.html", context)
"""

from __future__ import annotations

import base64
import html
import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from matchopt.io import atomic_write_bytes

if TYPE_CHECKING:
    import os

#: Most proposals drawn in the proposals figure (best first).
MAX_PLOTTED = 64
#: Proposals listed in the page's table (best first).
TABLE_ROWS = 16

# Colours of the figures: measured data, proposals inside the data, extrapolated proposals.
_DATA_COLOUR = "0.55"
_PROPOSAL_COLOUR = "tab:blue"
_EXTRAPOLATED_COLOUR = "tab:red"

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 auto;
       max-width: 64rem; padding: 1rem 1.5rem 3rem; color: #1d1d1f; line-height: 1.45; }
h1 { font-size: 1.5rem; margin-bottom: 0.2rem; }
h2 { font-size: 1.2rem; margin-top: 2rem; border-bottom: 1px solid #ccc; padding-bottom: 0.2rem; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 0.15rem 1rem; }
dl.facts dt { font-weight: 600; }
dl.facts dd { margin: 0; overflow-wrap: anywhere; }
img { max-width: 100%; height: auto; display: block; margin: 0.6rem 0; }
.table-wrap { overflow-x: auto; }
table { border-collapse: collapse; font-size: 0.85rem; }
th, td { border: 1px solid #ccc; padding: 0.2rem 0.45rem; text-align: right; }
th { background: #f2f2f2; }
table.settings td, table.settings th { text-align: left; }
pre { background: #f6f6f6; padding: 0.6rem; overflow-x: auto; white-space: pre-wrap;
      overflow-wrap: anywhere; }
.note { color: #555; }
.warning { color: #8a3b00; }
"""

# No script, no fetch: images only from data: URLs, styles only from the page itself.
_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"


@dataclass
class ReportContext:
    """Everything the page shows. Values are in the user's units and sign.

    Attributes:
        source: The table's path or name.
        target: The target column's name.
        minimize: Whether lower target values are better.
        observed: Measured target values, one per row (n_rows,).
        cv: Grouped cross-validation, or None when the table has too few distinct designs.
            Keys: ``observed``, ``predicted``, ``low``, ``high`` (arrays (n_rows,), out-of-fold,
            user units); ``spearman``, ``r2``, ``coverage`` (fraction of rows inside their
            interval), ``confidence`` (the intervals' level, a fraction such as 0.9; a value
            above 1 is read as a percentage); ``n_rows``, ``n_designs``; ``splits`` (how the
            folds were made, in words).
        proposals: The proposals file's rows, best first.
        prediction: Column of ``proposals`` holding the prediction, e.g. ``predicted_y``.
        low: Column holding the interval's lower end, e.g. ``predicted_y_low``.
        high: Column holding the interval's upper end, e.g. ``predicted_y_high``.
        flag: Bool column, true for extrapolated proposals, e.g. ``extrapolated``.
        distance: Column holding the distance to the nearest measured design
            (``nearest_euclidean`` or ``nearest_hamming``).
        data_distances: Each measured design's distance to its nearest other measured design.
        choice: Lines saying what was chosen and why (method, preset, ranking, scores).
        settings: Settings that reproduce the run (seed, method, preset, options, version).
        command: The command line that reproduces the run.
        warnings: The run's warnings.
        n_designs: Distinct designs in the table, shown when ``cv`` is None (else cv's count).
    """

    source: str
    target: str
    minimize: bool
    observed: np.ndarray
    cv: dict | None
    proposals: pd.DataFrame
    prediction: str
    low: str
    high: str
    flag: str
    distance: str
    data_distances: np.ndarray
    choice: list[str]
    settings: dict[str, str]
    command: str
    warnings: list[str]
    n_designs: int | None = None


def render_report(context: ReportContext) -> str:
    """The whole HTML page of one ``matchopt optimize`` run, as text.

    Args:
        context: What the run measured, proposed and chose.

    Returns:
        A self-contained HTML document (figures inlined, no script, no external resource).
    """
    title = f"matchopt optimize: {context.target} ({context.source})"
    sections = [
        _header(context),
        _trust_section(context),
        _proposals_section(context),
        _distance_section(context),
        _table_section(context),
        _choice_section(context),
        _warnings_section(context),
        _reproduce_section(context),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{_esc(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
        + "\n".join(sections)
        + "\n</body>\n</html>\n"
    )


def write_report(path: str | os.PathLike, context: ReportContext) -> Path:
    """Render the page and write it to ``path`` atomically (never a partial file).

    Returns:
        The path written.
    """
    path = Path(path)
    atomic_write_bytes(path, render_report(context).encode("utf-8"))
    return path


# ---------------------------------------------------------------------------------------------
# Sections


def _header(context: ReportContext) -> str:
    observed = _floats(context.observed)
    direction = "minimize (lower is better)" if context.minimize else "maximize (higher is better)"
    designs = context.cv["n_designs"] if context.cv is not None else context.n_designs
    facts = [
        ("Table", context.source),
        ("Target", f"{context.target}: {direction}"),
        ("Rows", f"{observed.size}"),
        ("Designs", "not counted" if designs is None else f"{int(designs)}"),
        ("Proposals", f"{len(context.proposals)}"),
    ]
    finite = observed[np.isfinite(observed)]
    if finite.size:
        facts.append(("Best measured", _number(_best(finite, context.minimize))))
    items = "".join(f"<dt>{_esc(k)}</dt><dd>{_esc(v)}</dd>" for k, v in facts)
    return (
        f"<header>\n<h1>matchopt optimize: {_esc(context.target)}</h1>\n"
        f'<dl class="facts">{items}</dl>\n</header>'
    )


def _trust_section(context: ReportContext) -> str:
    heading = '<section id="trust">\n<h2>Can the model be trusted here?</h2>\n'
    cv = context.cv
    if cv is None:
        held = "" if context.n_designs is None else f" ({int(context.n_designs)})"
        return heading + (
            f"<p>Not checked: the table holds too few distinct designs{held} to hold some out, "
            "fit the model on the rest and compare its predictions with the held-out "
            "measurements. Nothing on this page says how far the predictions can be trusted; "
            "treat the proposals as untested guesses.</p>\n</section>"
        )
    confidence = _percent_level(cv["confidence"])
    numbers = [
        f"Spearman rank correlation of out-of-fold predictions with measurements: "
        f"{_number(cv['spearman'], 3)} (1: held-out designs ranked perfectly; near 0: no better "
        "than chance).",
        f"R\u00b2: {_number(cv['r2'], 3)} (1: exact; 0: no better than predicting the mean).",
        f"Coverage: {_percent(cv['coverage'])} of measured rows fall inside their "
        f"{_number(confidence, 3)}% intervals ({_number(confidence, 3)}% expected).",
        f"How the table was split: {cv['splits']}.",
    ]
    items = "".join(f"<li>{_esc(line)}</li>" for line in numbers)
    image = _image(
        _cv_figure(context, confidence),
        f"Cross-validated prediction against measured {context.target}, with "
        f"{_number(confidence, 3)}% intervals and the line y = x",
    )
    return heading + f"{image}\n<ul>{items}</ul>\n</section>"


def _proposals_section(context: ReportContext) -> str:
    heading = '<section id="proposals">\n<h2>Proposals</h2>\n'
    proposals = context.proposals
    count = len(proposals)
    if count == 0:
        return heading + "<p>No proposals were made.</p>\n</section>"
    flags = _flags(proposals, context.flag)
    shown = min(count, MAX_PLOTTED)
    lines = [
        f"{count} proposals in the file's order (best ranked first)"
        + (f" (the first {shown} drawn)." if shown < count else "."),
        f"{int(flags.sum())} of {count} are extrapolated (column {context.flag} true, drawn "
        "as red crosses): trust their predictions less.",
    ]
    predictions = _column(proposals, context.prediction)
    finite = predictions[np.isfinite(predictions)]
    if finite.size:
        best = _best(finite, context.minimize)
        lines.append(f"Best prediction: {_number(best)}.")
    missing = [c for c in (context.prediction, context.low, context.high) if c not in proposals]
    if missing:
        lines.append(f"Columns missing from the proposals: {', '.join(missing)}.")
    image = _image(
        _proposals_figure(context),
        f"Predicted {context.target} of the proposals with their intervals, best first, beside "
        "the histogram of measured values",
    )
    items = "".join(f"<li>{_esc(line)}</li>" for line in lines)
    return heading + f"{image}\n<ul>{items}</ul>\n</section>"


def _distance_section(context: ReportContext) -> str:
    heading = '<section id="distance">\n<h2>How far from the data</h2>\n'
    proposals = _column(context.proposals, context.distance)
    proposals = proposals[np.isfinite(proposals)]
    data = _floats(context.data_distances)
    data = data[np.isfinite(data)]
    if not proposals.size and not data.size:
        return heading + "<p>No distances to show.</p>\n</section>"
    lines = [
        f"Distance ({context.distance}) from each proposal to its nearest measured design, "
        "against each measured design's distance to its nearest other measured design.",
    ]
    if proposals.size:
        lines.append(
            f"Proposals: median {_number(np.median(proposals))}, "
            f"largest {_number(proposals.max())}."
        )
    if data.size:
        lines.append(
            f"Measured designs: median {_number(np.median(data))}, largest {_number(data.max())}."
        )
    if proposals.size and data.size:
        farther = int((proposals > data.max()).sum())
        lines.append(
            f"{farther} of {proposals.size} proposals are farther from the data than "
            "any measured design is from its nearest neighbour."
        )
    image = _image(
        _distance_figure(context, proposals, data),
        f"Histograms of {context.distance}: proposals against measured designs",
    )
    items = "".join(f"<li>{_esc(line)}</li>" for line in lines)
    return heading + f"{image}\n<ul>{items}</ul>\n</section>"


def _table_section(context: ReportContext) -> str:
    heading = '<section id="top">\n<h2>Top proposals</h2>\n'
    proposals = context.proposals
    if len(proposals) == 0:
        return heading + "<p>No proposals were made.</p>\n</section>"
    # Ranks 1.. as the index, under a header on the same row as the column names.
    top = proposals.head(TABLE_ROWS).set_axis(range(1, min(len(proposals), TABLE_ROWS) + 1))
    top = top.rename_axis(index=None, columns="rank")
    table = top.to_html(escape=True, na_rep="", border=0, float_format=_number, justify="right")
    note = (
        f'<p class="note">The first {len(top)} of {len(proposals)} rows of the proposals file; '
        f"{_esc(context.flag)} marks extrapolated proposals.</p>"
    )
    return heading + f'{note}\n<div class="table-wrap">{table}</div>\n</section>'


def _choice_section(context: ReportContext) -> str:
    body = _list(context.choice) if context.choice else "<p>Nothing recorded.</p>"
    return f'<section id="choice">\n<h2>What was chosen and why</h2>\n{body}\n</section>'


def _warnings_section(context: ReportContext) -> str:
    body = _list(context.warnings, "warning") if context.warnings else "<p>none</p>"
    return f'<section id="warnings">\n<h2>Warnings</h2>\n{body}\n</section>'


def _reproduce_section(context: ReportContext) -> str:
    rows = "".join(
        f"<tr><th>{_esc(k)}</th><td>{_esc(v)}</td></tr>" for k, v in context.settings.items()
    )
    table = f'<table class="settings">{rows}</table>' if rows else "<p>No settings recorded.</p>"
    return (
        '<section id="reproduce">\n<h2>Reproduce</h2>\n'
        f"{table}\n<p>The command:</p>\n<pre>{_esc(context.command)}</pre>\n</section>"
    )


# ---------------------------------------------------------------------------------------------
# Figures (matplotlib's object-oriented API on an Agg canvas: the user's backend is left alone)


def _new_figure(width: float, height: float, **subplots: Any):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure, figure.subplots(**subplots)


def _cv_figure(context: ReportContext, confidence: float):
    cv = context.cv
    observed, predicted = _floats(cv["observed"]), _floats(cv["predicted"])
    low, high = _floats(cv["low"]), _floats(cv["high"])
    figure, ax = _new_figure(6.0, 5.0)
    shown = np.isfinite(observed) & np.isfinite(predicted)
    bars = shown & np.isfinite(low) & np.isfinite(high)
    if bars.any():
        ax.errorbar(
            observed[bars],
            predicted[bars],
            yerr=_yerr(predicted[bars], low[bars], high[bars]),
            fmt="none",
            ecolor=_DATA_COLOUR,
            elinewidth=0.8,
            alpha=0.6,
            label=f"{_number(confidence, 3)}% interval",
        )
    ax.scatter(
        observed[shown],
        predicted[shown],
        s=14,
        color=_PROPOSAL_COLOUR,
        zorder=3,
        label="held-out row",
    )
    values = np.concatenate([observed[shown], predicted[shown]])
    if values.size:
        lo, hi = float(values.min()), float(values.max())
        pad = 0.05 * (hi - lo) or 0.5
        ax.plot(
            [lo - pad, hi + pad],
            [lo - pad, hi + pad],
            color="black",
            linewidth=1,
            linestyle="--",
            label="y = x",
        )
    target = _mpl(context.target)
    ax.set_xlabel(f"measured {target}")
    ax.set_ylabel(f"cross-validated prediction of {target}")
    ax.set_title("Out-of-fold predictions (grouped by design)", fontsize="medium")
    _legend(ax)
    return figure


def _proposals_figure(context: ReportContext):
    from matplotlib.ticker import MaxNLocator

    proposals = context.proposals.head(MAX_PLOTTED)
    predicted = _column(proposals, context.prediction)
    low, high = _column(proposals, context.low), _column(proposals, context.high)
    flags = _flags(proposals, context.flag)
    figure, (ax, hist_ax) = _new_figure(
        9.0, 4.5, ncols=2, sharey=True, gridspec_kw={"width_ratios": [4, 1]}
    )
    rank = np.arange(1, len(proposals) + 1)
    for extrapolated, colour, marker, label in (
        (False, _PROPOSAL_COLOUR, "o", "proposal"),
        (True, _EXTRAPOLATED_COLOUR, "x", "extrapolated proposal"),
    ):
        rows = (flags == extrapolated) & np.isfinite(predicted)
        if not rows.any():
            continue
        bars = rows & np.isfinite(low) & np.isfinite(high)
        if bars.any():
            ax.errorbar(
                rank[bars],
                predicted[bars],
                yerr=_yerr(predicted[bars], low[bars], high[bars]),
                fmt="none",
                ecolor=colour,
                elinewidth=1,
                alpha=0.5,
            )
        ax.scatter(
            rank[rows], predicted[rows], color=colour, marker=marker, s=20, zorder=3, label=label
        )
    observed = _floats(context.observed)
    observed = observed[np.isfinite(observed)]
    if observed.size:
        best = _best(observed, context.minimize)
        for axis in (ax, hist_ax):
            axis.axhline(
                best,
                color="black",
                linestyle="--",
                linewidth=1,
                label="best measured" if axis is ax else None,
            )
        hist_ax.hist(
            observed,
            bins=min(30, max(5, observed.size // 4)),
            orientation="horizontal",
            color=_DATA_COLOUR,
        )
    target = _mpl(context.target)
    ax.set_xlabel("proposal rank (1 = first in the file)")
    ax.set_ylabel(target)
    ax.set_xlim(0, len(proposals) + 1)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title("Predictions with their intervals", fontsize="medium")
    _legend(ax)
    hist_ax.set_xlabel("measured rows")
    hist_ax.set_title("Measured", fontsize="medium")
    return figure


def _distance_figure(context: ReportContext, proposals: np.ndarray, data: np.ndarray):
    figure, ax = _new_figure(7.0, 4.0)
    values = np.concatenate([proposals, data])
    whole = np.all(values == np.round(values)) and np.ptp(values) <= 60
    if whole:  # whole numbers (Hamming distances): one bar per value
        bins = np.arange(values.min() - 0.5, values.max() + 1.5)
    else:
        bins = np.histogram_bin_edges(values, bins=30)
    if data.size:
        ax.hist(
            data,
            bins=bins,
            density=True,
            alpha=0.6,
            color=_DATA_COLOUR,
            label="measured design to its nearest other measured design",
        )
    if proposals.size:
        ax.hist(
            proposals,
            bins=bins,
            density=True,
            alpha=0.6,
            color=_PROPOSAL_COLOUR,
            label="proposal to its nearest measured design",
        )
    ax.set_xlabel(_mpl(context.distance))
    ax.set_ylabel("density")
    ax.set_title("Distance to the nearest measured design", fontsize="medium")
    _legend(ax)
    return figure


def _legend(ax) -> None:
    """A legend, only where something carries a label (matplotlib warns otherwise)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small", loc="best")


def _image(figure, alt: str) -> str:
    """``figure`` as an inline PNG ``<img>`` with escaped alt text."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{_esc(alt)}">'


def _yerr(center: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Error bar lengths (2, n) below and above ``center``; never negative (an interval that
    misses its own centre is drawn up to the centre)."""
    return np.stack([np.clip(center - low, 0, None), np.clip(high - center, 0, None)])


# ---------------------------------------------------------------------------------------------
# Text and values


def _esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def _mpl(text: str, limit: int = 48) -> str:
    """``text`` as literal matplotlib text, cut to ``limit`` characters (a long column name
    would push the axes off the figure); ``$`` would otherwise start mathtext."""
    text = str(text)
    if len(text) > limit:
        text = text[: limit - 1] + "\u2026"
    return text.replace("$", r"\$")


def _list(lines: list[str], css_class: str | None = None) -> str:
    attribute = f' class="{css_class}"' if css_class else ""
    return "<ul>" + "".join(f"<li{attribute}>{_esc(line)}</li>" for line in lines) + "</ul>"


def _number(value: object, digits: int = 4) -> str:
    """A float with ``digits`` significant digits; ``n/a`` for a missing or non-finite one."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return "n/a"
    return f"{number:.{digits}g}" if math.isfinite(number) else "n/a"


def _percent(fraction: object) -> str:
    """A fraction as a whole percentage; ``n/a`` for a missing or non-finite one."""
    number = _number(fraction)
    return number if number == "n/a" else f"{100 * float(fraction):.0f}%"


def _percent_level(confidence: object) -> float:
    """An interval's level in percent, from a fraction (0.9) or a percentage (90)."""
    try:
        level = float(confidence)
    except (TypeError, ValueError):
        return math.nan
    return 100 * level if level <= 1 else level


def _best(values: np.ndarray, minimize: bool) -> float:
    return float(values.min() if minimize else values.max())


def _floats(values: object) -> np.ndarray:
    return np.asarray(values, dtype=float).reshape(-1)


def _column(frame: pd.DataFrame, name: str) -> np.ndarray:
    """``frame[name]`` as floats (NaN where not a number); all NaN when the column is absent."""
    if name not in frame:
        return np.full(len(frame), np.nan)
    return pd.to_numeric(frame[name], errors="coerce").to_numpy(dtype=float)


def _flags(frame: pd.DataFrame, name: str) -> np.ndarray:
    """``frame[name]`` as bools: true for True, "true" (any case) or 1; missing cells and an
    absent column read as false (a column read back from CSV holds text)."""
    if name not in frame:
        return np.zeros(len(frame), dtype=bool)
    column = frame[name]
    if column.dtype == bool:
        return column.to_numpy()
    return np.array([str(v).strip().lower() in ("true", "1", "1.0") for v in column], dtype=bool)
