"""A full-page screenshot of a ``matchopt optimize`` report page, in headless Chromium.

    python benchmarks/report_screenshot.py proposals.html docs/report.png

Uses Debian's Chromium (``apt-get install chromium``; /usr/bin/chromium, else ``chromium`` on
the PATH) through Playwright (``pip install playwright``; its own browser downloads are not
needed). Prints the page's console errors and page errors, if any, and exits 1 when there are
some. tests/tabular/test_report_page.py launches the browser with the same settings.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

#: Debian's Chromium; ``chromium`` on the PATH where it is elsewhere.
CHROMIUM = "/usr/bin/chromium"
#: Headless in a container (no sandbox, no GPU) and no network of its own (updates, sync).
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
#: Width of the window the page is laid out in (CSS pixels); the page's own limit is 64rem.
VIEWPORT = {"width": 1100, "height": 900}


def find_chromium() -> str | None:
    """Path of a Chromium executable, or None."""
    return CHROMIUM if Path(CHROMIUM).is_file() else shutil.which("chromium")


def launch(playwright):  # noqa: ANN001, ANN201 (Playwright's own types)
    """A headless Chromium browser with :data:`LAUNCH_ARGS`."""
    executable = find_chromium()
    if executable is None:
        raise FileNotFoundError("no Chromium: apt-get install chromium")
    return playwright.chromium.launch(executable_path=executable, args=LAUNCH_ARGS, headless=True)


def screenshot(page_path: Path, out: Path) -> list[str]:
    """Write a full-page PNG screenshot of ``page_path`` to ``out``.

    Returns:
        The page's console errors and page errors.
    """
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    with sync_playwright() as playwright:
        browser = launch(playwright)
        try:
            page = browser.new_page(viewport=VIEWPORT)
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(page_path.resolve().as_uri(), wait_until="load")
            out.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(out), full_page=True)
        finally:
            browser.close()
    return errors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("page", type=Path, help="the report page (HTML)")
    parser.add_argument("out", type=Path, help="the screenshot (PNG)")
    args = parser.parse_args(argv)
    if not args.page.is_file():
        parser.error(f"no such file: {args.page}")
    errors = screenshot(args.page, args.out)
    for error in errors:
        print(f"page error: {error}", file=sys.stderr)
    print(f"wrote {args.out}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
