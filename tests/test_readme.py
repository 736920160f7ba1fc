"""The README is a user guide: short, and every command it shows exists as written.

Every ``matchopt ...`` command line of README.md (in shell and text code blocks, and in inline
code spans that start with ``matchopt ``) must name an existing subcommand (and sub-subcommand:
``study search-step``, ``data fetch``) of the real parser, ``matchopt.cli.build_parser()``, and
only options of that subcommand; so must those of the pages under docs/. Links to files must
point to files that exist, and links to headings to headings that exist.
"""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from matchopt.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_LINES = 300

#: Code blocks whose lines are shell commands (or ``$ command`` transcripts).
SHELL_LANGUAGES = {"", "bash", "sh", "shell", "console", "text"}
FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
INLINE = re.compile(r"`([^`]+)`")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")
#: Shell operators that end one command and start the next.
SEPARATORS = {"&&", "||", "|", ";", "&", ">", ">>", "<", "2>", "(", ")"}


def readme() -> str:
    return README.read_text(encoding="utf-8")


def code_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced code block."""
    return [(m.group(1).lower(), m.group(2)) for m in FENCE.finditer(text)]


def shell_lines(body: str) -> list[str]:
    """The commands of a shell block: continuation lines joined, ``$ `` prompts dropped, comment
    lines and blank lines left out (a transcript's output lines are kept: they are not
    ``matchopt`` commands unless they start with one)."""
    joined = re.sub(r"\\\n\s*", " ", body)
    lines = []
    for line in joined.splitlines():
        line = line.strip()
        if line.startswith("$ "):
            line = line[2:].strip()
        if line and not line.startswith("#"):
            lines.append(line)
    return lines


def split_commands(line: str) -> list[list[str]]:
    """The simple commands of one shell line, as words (comments dropped). A line that is not
    valid shell (an output line of a transcript with one apostrophe) is split at whitespace."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError:
        words = line.split()
    commands: list[list[str]] = [[]]
    for word in words:
        if word in SEPARATORS or set(word) <= set("&|;<>()"):
            commands.append([])
        else:
            commands[-1].append(word)
    return [c for c in commands if c]


def matchopt_commands(text: str) -> list[str]:
    """Every ``matchopt ...`` command line of the text's code blocks, as written."""
    found: list[str] = []
    for language, body in code_blocks(text):
        if language not in SHELL_LANGUAGES:
            continue
        for line in shell_lines(body):
            found += [shlex.join(w) for w in split_commands(line) if w[0] == "matchopt"]
    return found


def matchopt_spans(text: str) -> list[str]:
    """Every inline code span of the prose that starts with ``matchopt `` (whitespace
    normalized: a span may wrap across lines)."""
    found: list[str] = []
    for span in INLINE.findall(FENCE.sub("", text)):
        span = " ".join(span.split())
        if span.startswith("matchopt "):
            found += [shlex.join(w) for w in split_commands(span) if w[0] == "matchopt"]
    return found


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


def command_problems(
    command: str, parser: argparse.ArgumentParser | None = None, group_ok: bool = False
) -> list[str]:
    """What is wrong with one ``matchopt ...`` command line: an unknown (sub)subcommand or an
    option its parser does not have. Empty when the command exists as written.

    ``group_ok``: the command may stop at a group of subcommands (prose naming ``matchopt
    study`` or ``matchopt data`` as a whole); a command line to run may not.
    """
    parser = build_parser() if parser is None else parser
    words = shlex.split(command)
    if not words or words[0] != "matchopt":
        return [f"{command!r}: not a matchopt command"]
    path = ["matchopt"]
    rest = words[1:]
    while (sub := _subparsers(parser)) is not None:
        if rest and rest[0] in sub.choices:
            path.append(rest[0])
            parser = sub.choices[rest[0]]
            rest = rest[1:]
            continue
        if rest and rest[0].startswith("-"):
            break  # an option of this level (e.g. matchopt --version): checked below
        if not rest and group_ok:
            return []
        shown = rest[0] if rest else "(nothing)"
        return [
            f"{command!r}: {' '.join(path)} has no subcommand {shown}; "
            f"choices: {', '.join(sub.choices)}"
        ]
    problems = []
    for word in rest:
        flag = word.strip("[]()|,.")
        if not flag.startswith("--"):
            continue
        flag = flag.split("=", 1)[0]
        if flag not in parser._option_string_actions:
            problems.append(f"{command!r}: {' '.join(path)} has no option {flag}")
    return problems


def section(text: str, title: str) -> str:
    """The body of the ``## title`` section, up to the next heading of level 2."""
    match = re.search(rf"^## {re.escape(title)}\s*$(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"README.md has no section '## {title}'"
    return match.group(1)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def link_problems(path: Path) -> list[str]:
    """Relative links and images of a markdown file that point to no file or no heading."""
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    problems = []
    for target in LINK.findall(text) + IMAGE.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            problems.append(f"{path.name}: link to {target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            problems.append(f"{path.name}: link to {target}: no such heading")
    return problems


# --- the README ------------------------------------------------------------------------------


def test_readme_is_at_most_300_lines():
    lines = len(readme().splitlines())
    assert lines <= MAX_LINES, f"README.md has {lines} lines; at most {MAX_LINES}"


def test_quickstart_has_exactly_two_commands():
    body = section(readme(), "Quickstart")
    commands = [
        line
        for language, block in code_blocks(body)
        if language in SHELL_LANGUAGES
        for line in shell_lines(block)
    ]
    assert len(commands) == 2, commands
    assert commands[0].endswith("matchopt run"), "command 1 installs and runs `matchopt run`"
    assert commands[1].endswith("pytest -q -n 2"), "command 2 installs and runs the tests"


def test_ci_runs_the_quickstart_test_command():
    ci = ROOT / ".ci" / "run"
    if not ci.exists():
        pytest.skip("no CI script in this checkout")
    blocks = code_blocks(section(readme(), "Quickstart"))
    test_command = shell_lines(blocks[-1][1])[-1]
    # The CI script activates its own venv first; the rest of the line must be the same.
    assert test_command.split("&&", 1)[1].strip() in ci.read_text(encoding="utf-8")


def test_readme_shows_matchopt_commands():
    commands = matchopt_commands(readme()) + matchopt_spans(readme())
    shown = {shlex.split(c)[1] for c in commands if len(shlex.split(c)) > 1}
    # the commands a user needs first: so the checks below cannot pass by finding nothing
    assert {"run", "optimize", "propose", "bench", "report", "tasks", "methods"} <= shown
    assert {"study", "data"} <= shown


def test_every_readme_command_exists_with_its_options():
    parser = build_parser()
    problems = [p for c in matchopt_commands(readme()) for p in command_problems(c, parser)]
    problems += [
        p for c in matchopt_spans(readme()) for p in command_problems(c, parser, group_ok=True)
    ]
    assert not problems, "\n".join(problems)


def test_every_docs_command_exists_with_its_options():
    parser = build_parser()
    problems = []
    for page in sorted((ROOT / "docs").glob("*.md")):
        text = page.read_text(encoding="utf-8")
        problems += [
            f"{page.name}: {p}"
            for c in matchopt_commands(text)
            for p in command_problems(c, parser)
        ]
        problems += [
            f"{page.name}: {p}"
            for c in matchopt_spans(text)
            for p in command_problems(c, parser, group_ok=True)
        ]
    assert not problems, "\n".join(problems)


def test_readme_links_point_to_existing_files():
    text = readme()
    assert re.search(r"\]\(docs/", text), "README.md links to no page under docs/"
    assert not link_problems(README), "\n".join(link_problems(README))


def test_docs_links_point_to_existing_files():
    problems = [p for page in sorted((ROOT / "docs").glob("*.md")) for p in link_problems(page)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("marker", ["dev-suite-table", "categorical"])
def test_generated_paragraph_markers_are_present_once(marker):
    text = readme()
    opening, closing = f"<!-- {marker} -->", f"<!-- /{marker} -->"
    assert text.count(opening) == 1 and text.count(closing) == 1, marker
    assert text.index(opening) < text.index(closing), marker


# --- the checker itself: it must be able to fail ---------------------------------------------


@pytest.mark.parametrize(
    "command, problem",
    [
        ("matchopt run --made-up-flag 3", "has no option --made-up-flag"),
        ("matchopt optimize data.csv --target y --made-up=1", "has no option --made-up"),
        ("matchopt nosuch --task potts", "has no subcommand nosuch"),
        ("matchopt study", "has no subcommand (nothing)"),
        ("matchopt study search-steps --task potts", "has no subcommand search-steps"),
        ("matchopt data fetch tfbind8 --verify", "matchopt data fetch has no option --verify"),
        ("matchopt report results --seeds 0", "matchopt report has no option --seeds"),
    ],
)
def test_checker_reports_unknown_commands_and_options(command, problem):
    problems = command_problems(command)
    assert problems and problem in problems[0], problems


@pytest.mark.parametrize(
    "command",
    [
        "matchopt run --task tfbind8 --seeds 0,1 --set epochs=5 --json",
        "matchopt study search-step --task potts --scales 1,2",
        "matchopt data status --verify",
        "matchopt bench --suite dev --methods ga --out r --set=potts:ga.epochs=1",
        "matchopt --version",
    ],
)
def test_checker_accepts_real_commands(command):
    assert command_problems(command) == []


def test_prose_may_name_a_group_of_subcommands_but_not_a_wrong_one():
    assert command_problems("matchopt study", group_ok=True) == []
    assert command_problems("matchopt data", group_ok=True) == []
    assert command_problems("matchopt studies", group_ok=True)
    assert command_problems("matchopt study search-steps", group_ok=True)


def test_extraction_finds_commands_in_blocks_chains_and_spans():
    text = "\n".join(
        [
            "```bash",
            "# a comment: matchopt nosuch",
            "pip install -e . && matchopt run --task potts",
            "matchopt bench --tasks potts --methods ga \\",
            "    --out r   # trailing comment",
            "```",
            "```python",
            "matchopt.run('potts')",
            "```",
            "```text",
            "$ matchopt tasks",
            "task  design",
            "```",
            "Run `matchopt report\n  results --format md`, not `matchopt.run`.",
        ]
    )
    assert matchopt_commands(text) == [
        "matchopt run --task potts",
        "matchopt bench --tasks potts --methods ga --out r",
        "matchopt tasks",
    ]
    assert matchopt_spans(text) == ["matchopt report results --format md"]


def test_link_checker_reports_missing_files_and_headings(tmp_path):
    (tmp_path / "other.md").write_text("# Other\n\n## A heading: `code`\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md#a-heading-code) [gone](missing.md) [bad](other.md#nope) [web](https://x)\n",
        encoding="utf-8",
    )
    problems = link_problems(page)
    assert len(problems) == 2
    assert "missing.md: no such file" in problems[0]
    assert "other.md#nope: no such heading" in problems[1]


@pytest.mark.parametrize("page", ["README.md", "docs/suite.md"])
def test_the_suite_table_is_what_its_command_generates(page):
    """The table between the dev-suite-table markers is the output of the `matchopt report
    --summary` command written above it, on the committed records: never typed by hand."""
    from matchopt.report import write_report

    text = (ROOT / page).read_text(encoding="utf-8")
    block = text[text.index("<!-- dev-suite-table -->") : text.index("<!-- /dev-suite-table -->")]
    (command,) = [s for s in matchopt_spans(block) if s.startswith("matchopt report")]
    args = build_parser().parse_args(shlex.split(command)[1:])
    assert args.summary and args.format == "md"
    generated = write_report(
        ROOT / args.dir,
        [float(q) for q in args.percentiles.split(",")],
        methods=args.methods.split(",") if args.methods else None,
        tasks=args.tasks.split(",") if args.tasks else None,
        summary_only=True,
    )
    table = [line for line in generated.splitlines() if line.startswith("|")]
    shown = [line for line in block.splitlines() if line.startswith("|")]
    assert table and shown == table, "run `python benchmarks/readme_suite_table.py`"
    for image in IMAGE.findall(block):
        assert ((ROOT / page).parent / image).is_file(), image
