"""The import graph of src/matchopt: no cycles, and the layers import one way only.

Data flows task -> method -> designs -> oracle -> scores -> report; methods and models never see
a task (they are fitted on OfflineData alone), which is what keeps the oracle out of their reach.
"""

import ast
from pathlib import Path

import pytest

import matchopt

PACKAGE = Path(matchopt.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    return isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def _imports(
    tree: ast.Module,
    module: str,
    is_package: bool,
    top_level_only: bool,
    type_checking: bool = False,
):
    """Names of matchopt modules imported by ``tree`` (relative imports resolved); with
    ``type_checking``, those inside ``if TYPE_CHECKING:`` blocks too."""
    found = set()

    def visit(nodes, nested):
        for node in nodes:
            if isinstance(node, ast.If) and _is_type_checking(node) and not type_checking:
                continue
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.startswith("matchopt"))
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = module.split(".")
                    anchor = anchor if is_package else anchor[:-1]
                    anchor = anchor[: len(anchor) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                if base.startswith("matchopt"):
                    found.add(base)
                    # ``from matchopt.x import y`` may import the submodule matchopt.x.y
                    found.update(f"{base}.{a.name}" for a in node.names)
            if not top_level_only or not nested:
                for child in ast.iter_child_nodes(node):
                    if isinstance(child, ast.stmt):
                        visit([child], nested or isinstance(node, (ast.FunctionDef, ast.ClassDef)))

    visit(tree.body, False)
    return found


def _graph(top_level_only: bool, type_checking: bool = False) -> dict[str, set[str]]:
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts}
    graph = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        is_package = path.name == "__init__.py"
        imported = _imports(tree, name, is_package, top_level_only, type_checking)
        graph[name] = {m for m in imported if m in files and m != name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


@pytest.mark.parametrize("type_checking", [False, True])
@pytest.mark.parametrize("top_level_only", [True, False])
def test_imports_have_no_cycle(top_level_only, type_checking):
    # A package imports its own submodules from __init__; a submodule importing its package
    # back is the cycle that works only by import order. Lazy imports inside functions count
    # too (False): deferring an import hides a cycle, it does not remove it. So do imports for
    # type checkers only (type_checking): two modules that name each other's types are one
    # module's worth of coupling split in two.
    graph = _graph(top_level_only=top_level_only, type_checking=type_checking)
    assert len(graph) > 30
    cycle = _cycle(graph)
    assert cycle is None, " -> ".join(cycle)


@pytest.mark.parametrize("layer", ["matchopt.methods", "matchopt.models"])
def test_methods_and_models_never_import_tasks(layer):
    graph = _graph(top_level_only=False)  # lazy imports inside functions count too
    offenders = {
        module: sorted(m for m in imported if m.startswith("matchopt.tasks"))
        for module, imported in graph.items()
        if module.startswith(layer)
    }
    assert not {m: t for m, t in offenders.items() if t}


def _reachable(graph: dict[str, set[str]], module: str) -> set[str]:
    """Every module ``module`` imports, directly or through others."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        for nxt in graph[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


def test_models_know_nothing_of_the_runs_that_use_them():
    # The model layer trains and loads networks; how runs execute (the runner, the bench's
    # cells and grids, the ensembles shared between runs, the methods' run context) is above
    # it. Imports through other modules and lazy ones count too.
    graph = _graph(top_level_only=False)
    above = ("matchopt.bench", "matchopt.runner", "matchopt.shared_ensembles", "matchopt.methods")
    offenders = {
        module: sorted(m for m in _reachable(graph, module) if m.startswith(above))
        for module in graph
        if module.startswith("matchopt.models")
    }
    assert not {m: found for m, found in offenders.items() if found}


def test_the_cycle_finder_finds_cycles():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_type_checking_imports_count_only_when_asked():
    tree = ast.parse(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from matchopt.data import X\n"
    )
    assert _imports(tree, "matchopt.m", False, True) == set()
    assert "matchopt.data" in _imports(tree, "matchopt.m", False, True, type_checking=True)


def test_the_command_line_parser_imports_nothing_heavy():
    # `matchopt --help` starts fast because parsing imports no numerical library; the commands
    # import what they need once the arguments are parsed (benchmarks/cli_startup.py times it).
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from matchopt.cli import build_parser, main\n"
        "build_parser().format_help()\n"
        "heavy = ('torch', 'numpy', 'pandas', 'sklearn', 'scipy', 'matplotlib', 'tqdm')\n"
        "print(','.join(m for m in heavy if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""
    # The package's public names still resolve (imported on first use).
    assert matchopt.MatchOpt.__name__ == "MatchOpt"
    assert set(matchopt.__all__) <= set(dir(matchopt))
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        matchopt.nothing  # noqa: B018


#: The longest function the package holds: longer ones are cut into named steps.
MAX_FUNCTION_LINES = 60


def test_no_function_is_longer_than_the_limit():
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name} ({lines})")
    assert not long, long


def test_the_package_states_what_is_not_how_it_came_to_be():
    """History (issue and round numbers) lives in CHANGELOG.md and docs/suite.md."""
    import re

    pattern = re.compile(r"issue [0-9]+|round [0-9]", re.IGNORECASE)
    found = [
        f"{path.relative_to(PACKAGE)}:{number}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)
    ]
    assert not found, found
