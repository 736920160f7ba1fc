"""The report page of ``matchopt optimize``: escaping, edge cases, and the page in a real browser.

The browser test opens the page in headless Chromium (Debian's /usr/bin/chromium through
Playwright, as benchmarks/report_screenshot.py does) and is skipped where either is missing.
"""

from __future__ import annotations

import base64
import contextlib
import html
import importlib.util
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from matchopt.tabular.report_page import (
    MAX_PLOTTED,
    TABLE_ROWS,
    ReportContext,
    render_report,
    write_report,
)

HOSTILE = "<script>alert(1)</script>"
#: A target name that matplotlib would read as (broken) mathtext if ``$`` were not escaped.
TARGET = f"{HOSTILE} $\\frac{{ cost$"
SOURCE = '/data/<img src=x onerror="alert(2)">&runs.csv'
HEADINGS = (
    "Can the model be trusted here?",
    "Proposals",
    "How far from the data",
    "Top proposals",
    "What was chosen and why",
    "Warnings",
    "Reproduce",
)
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def make_context(
    n_rows: int = 40,
    n_proposals: int = 20,
    minimize: bool = False,
    with_cv: bool = True,
    nan_intervals: bool = False,
    target: str = TARGET,
) -> ReportContext:
    """A small synthetic run: two numeric features and a categorical one with hostile text."""
    rng = np.random.default_rng(0)
    observed = rng.normal(10.0, 2.0, n_rows)
    predicted = observed + rng.normal(0.0, 1.0, n_rows)
    low, high = predicted - 1.5, predicted + 1.5
    prediction = f"predicted_{target}"
    proposals = pd.DataFrame(
        {
            "a": rng.uniform(0, 1, n_proposals).round(4),
            "<b>solvent</b>": rng.choice(["water", "<i>dmso</i>"], n_proposals),
            prediction: np.sort(rng.normal(12.0, 1.0, n_proposals))[:: 1 if minimize else -1],
        }
    )
    proposals[f"{prediction}_low"] = proposals[prediction] - 1.0
    proposals[f"{prediction}_high"] = proposals[prediction] + 1.0
    proposals["extrapolated"] = np.arange(n_proposals) % 5 == 0
    proposals["nearest_euclidean"] = rng.uniform(0.2, 2.0, n_proposals)
    if nan_intervals:
        low[::3] = np.nan
        high[1::4] = np.nan
        proposals.loc[::2, f"{prediction}_low"] = np.nan
        proposals.loc[::3, f"{prediction}_high"] = np.nan
    cv = {
        "observed": observed,
        "predicted": predicted,
        "low": low,
        "high": high,
        "spearman": 0.812,
        "r2": 0.64,
        "coverage": 0.875,
        "confidence": 0.9,
        "n_rows": n_rows,
        "n_designs": n_rows // 2,
        "splits": "5 folds by design: replicate rows of one design stay together",
    }
    return ReportContext(
        source=SOURCE,
        target=target,
        minimize=minimize,
        observed=observed,
        cv=cv if with_cv else None,
        proposals=proposals,
        prediction=prediction,
        low=f"{prediction}_low",
        high=f"{prediction}_high",
        flag="extrapolated",
        distance="nearest_euclidean",
        data_distances=rng.uniform(0.1, 1.5, n_rows),
        choice=["method: matchopt (recommended)", f"ranking: the method's own surrogate {HOSTILE}"],
        settings={"seed": "0", "method": "matchopt", "preset": "validated", "note": HOSTILE},
        command=f"matchopt optimize '{SOURCE}' --target '{target}' --out proposals.csv",
        warnings=[f"3 proposals repeat measured rows {HOSTILE}"],
        n_designs=None if with_cv else 7,
    )


def images(page: str) -> list[bytes]:
    """The PNG bytes of every inline image of ``page``."""
    found = re.findall(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)" alt="[^"<>]+">', page)
    assert len(found) == page.count("<img"), "an <img> that is not an inline PNG with alt text"
    return [base64.b64decode(data) for data in found]


@pytest.fixture(scope="module")
def hostile_page() -> str:
    return render_report(make_context())


def test_user_text_is_escaped_everywhere(hostile_page):
    assert "<script" not in hostile_page.lower()
    assert "<img src=x" not in hostile_page and "<b>solvent" not in hostile_page
    assert "<i>dmso" not in hostile_page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in hostile_page
    assert html_escaped(SOURCE) in hostile_page
    assert "&lt;b&gt;solvent&lt;/b&gt;" in hostile_page  # a column name in the table
    assert "&lt;i&gt;dmso&lt;/i&gt;" in hostile_page  # a cell in the table


def html_escaped(text: str) -> str:
    return html.escape(text, quote=True)


#: The page's markup: text, tables, inline images; nothing that runs or fetches.
ALLOWED_TAGS = {
    *("html", "head", "meta", "title", "style", "body", "header", "section", "h1", "h2"),
    *("p", "ul", "li", "dl", "dt", "dd", "div", "pre", "img"),
    *("table", "thead", "tbody", "tr", "th", "td"),
}


class Tags(HTMLParser):
    """The tag names of a page, and every attribute that holds a URL."""

    def __init__(self):
        super().__init__()
        self.names: set[str] = set()
        self.urls: list[tuple[str, str]] = []

    def handle_starttag(self, tag, attrs):
        self.names.add(tag)
        self.urls += [(k, v) for k, v in attrs if k in ("src", "href", "action", "srcset")]


def test_page_is_self_contained_with_every_section(hostile_page):
    for heading in HEADINGS:
        assert f">{heading}</h2>" in hostile_page
    # Nothing is fetched: no script, no link, no URL but the inline images'.
    tags = Tags()
    tags.feed(hostile_page)
    assert tags.names <= ALLOWED_TAGS, tags.names - ALLOWED_TAGS
    assert {name for name, _ in tags.urls} == {"src"}
    assert all(url.startswith("data:image/png;base64,") for _, url in tags.urls)
    pngs = images(hostile_page)
    assert len(pngs) == 3  # cross-validation, proposals, distances
    assert all(png.startswith(PNG_SIGNATURE) and len(png) > 1000 for png in pngs)
    assert "81.2" not in hostile_page and "0.812" in hostile_page  # Spearman, 3 digits
    assert "88% of measured rows fall inside their 90% intervals" in hostile_page
    assert "4 of 20 are extrapolated" in hostile_page
    assert "How the table was split: 5 folds by design" in hostile_page
    assert hostile_page.count("<tr>") >= TABLE_ROWS + 1


def test_without_cross_validation_the_page_says_why_and_draws_no_fit():
    page = render_report(make_context(with_cv=False))
    assert "too few distinct designs (7)" in page
    assert len(images(page)) == 2  # proposals and distances only
    assert "<dt>Designs</dt><dd>7</dd>" in page


def test_minimize_marks_the_lowest_values_as_best():
    context = make_context(minimize=True, n_proposals=1, target="cost")
    page = render_report(context)
    lowest = f"{context.observed.min():.4g}"
    assert f"<dt>Best measured</dt><dd>{lowest}</dd>" in page
    assert "minimize (lower is better)" in page
    assert f"Best prediction: {context.proposals['predicted_cost'].iloc[0]:.4g}." in page
    assert "0 of 1 are extrapolated" not in page and "1 of 1 are extrapolated" in page
    assert len(images(page)) == 3


def test_missing_intervals_and_many_proposals_still_draw():
    context = make_context(n_proposals=MAX_PLOTTED + 6, nan_intervals=True, target="y")
    page = render_report(context)
    assert len(images(page)) == 3
    assert f"the first {MAX_PLOTTED} drawn" in page
    # Every interval missing, and no column for them at all.
    context.proposals = context.proposals.drop(columns=[context.low]).head(3)
    context.proposals[context.high] = np.nan
    page = render_report(context)
    assert len(images(page)) == 3
    assert "Columns missing from the proposals: predicted_y_low." in page


def test_write_report_writes_the_rendered_page(tmp_path):
    context = make_context(n_rows=12, n_proposals=3, target="y")
    path = write_report(tmp_path / "sub" / "report.html", context)
    assert path == tmp_path / "sub" / "report.html"
    text = path.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    assert [p.name for p in path.parent.iterdir()] == ["report.html"]  # no temporary left


# ---------------------------------------------------------------------------------------------
# In a real browser


def load_screenshot_script():
    """benchmarks/report_screenshot.py as a module (its launch settings are the test's)."""
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "report_screenshot.py"
    spec = importlib.util.spec_from_file_location("report_screenshot", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def opened_in_chromium(page_path: Path):
    """``(page, errors, requests)`` of ``page_path`` loaded in Chromium; skips the test where
    playwright or Chromium is missing."""
    pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    script = load_screenshot_script()
    if script.find_chromium() is None:
        pytest.skip("no Chromium at /usr/bin/chromium or on the PATH (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    requests: list[str] = []
    with sync_playwright() as playwright:
        browser = script.launch(playwright)
        try:
            page = browser.new_page(viewport=script.VIEWPORT)
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.on("request", lambda request: requests.append(request.url))
            page.goto(page_path.as_uri(), wait_until="load")
            yield page, errors, requests
        finally:
            browser.close()


def test_page_renders_in_chromium_without_errors(tmp_path):
    page_path = write_report(tmp_path / "report.html", make_context())
    with opened_in_chromium(page_path) as (page, errors, requests):
        loaded = page.evaluate(
            "Array.from(document.images, i => [i.complete, i.naturalWidth, i.alt])"
        )
        scripts = page.evaluate("document.scripts.length")
        visible = {
            heading: page.get_by_role("heading", name=heading, exact=True).is_visible()
            for heading in HEADINGS
        }
        hostile_shown = page.get_by_text(HOSTILE).first.is_visible()
        page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
    assert errors == []
    assert [url for url in requests if not url.startswith(("file:", "data:"))] == []
    assert len(loaded) == 3
    assert all(complete and width > 0 and alt for complete, width, alt in loaded), loaded
    assert scripts == 0
    assert visible == dict.fromkeys(HEADINGS, True)
    assert hostile_shown  # the hostile column name is text on the page, not markup
    assert (tmp_path / "report.png").read_bytes().startswith(PNG_SIGNATURE)


def test_the_report_of_a_real_optimize_run_renders_in_chromium(tmp_path):
    from matchopt.cli import main
    from matchopt.tabular.known_tables import mixed_table

    frame, _ = mixed_table(rows=80)
    frame.to_csv(tmp_path / "screen.csv", index=False)
    code = main([
        "optimize", str(tmp_path / "screen.csv"), "--target", "score", "--categorical",
        "catalyst,solvent,ligand", "--method", "random", "--preset", "quick", "--n", "12",
        "--out", str(tmp_path / "p.csv"),
    ])  # fmt: skip
    assert code == 0
    with opened_in_chromium(tmp_path / "p.report.html") as (page, errors, _):
        loaded = page.evaluate("Array.from(document.images, i => [i.complete, i.naturalWidth])")
        visible = [
            page.get_by_role("heading", name=heading, exact=True).is_visible()
            for heading in HEADINGS
        ]
    assert errors == []
    assert len(loaded) == 3 and all(complete and width > 0 for complete, width in loaded)
    assert all(visible)
