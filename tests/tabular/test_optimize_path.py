"""``matchopt optimize`` runs one way: from its entry to the files it writes, the command line
hands one settings object over once, and the orchestrator visits each of its parts once.

What "entered twice" means here. The modules counted are matchopt's orchestration layer,
``matchopt.cli*`` and ``matchopt.tabular*``; the library they call into and return from
(pandas, torch, ``matchopt.methods``, ``matchopt.models``, ``matchopt.state``...) is not
counted, and a call of an orchestration module from inside such a library counts as if that
module were called by the nearest orchestration module below it on the stack. At every Python
call (``sys.setprofile``) the stack is read as the chain of counted modules from the outermost
frame to the one called, consecutive repeats collapsed (``cli -> cli.commands ->
tabular.optimizer -> tabular.propose``). Then:

* **hand-over**: the modules the command line calls directly (the first counted module past the
  leading ``matchopt.cli*`` ones of each chain), in order, consecutive repeats collapsed, name
  each module once; and once the orchestrator (:data:`ORCHESTRATOR`) is on the stack, no
  ``matchopt.cli*`` function is called again (no callback into the command line, no second
  round of checks after the work began);
* **phases**: the modules the orchestrator calls directly (the module just past its outermost
  frame in each chain), in order, consecutive repeats collapsed, name each module once: reading,
  fitting, proposing and writing are each one visit. A part may call another part (proposing
  asks the schema to decode, writing asks the optimizer for its report) and a part may call back
  into the orchestrator's object (``optimizer._predict``): those calls are nested inside the
  phase and do not start a new one. What fails is the orchestrator going back to a part it has
  left (reading the table, fitting, then reading again), or the command line calling back.

Imports are not steps: calls made while a counted module is being imported are left out. The
whole command is recorded, from :func:`matchopt.cli.main` to its return: the proposals file,
the report and the model file are all written inside it.
"""

import sys

import pandas as pd
from table_helpers import numeric_frame

from matchopt.cli import main

#: The module that runs ``optimize`` after the command line hands over.
ORCHESTRATOR = "matchopt.tabular.optimizer"


def counted(module: str) -> bool:
    """Whether ``module`` belongs to the orchestration layer the test follows."""
    return module.startswith(("matchopt.cli", "matchopt.tabular"))


def record(argv: list[str]) -> tuple[int, list[tuple[str, ...]]]:
    """Run the command line in-process; the exit status and, per call of a counted function,
    the chain of counted modules on the stack (outermost first, consecutive repeats collapsed)."""
    chains: list[tuple[str, ...]] = []

    def profile(frame, event, arg):
        if event != "call" or not counted(frame.f_globals.get("__name__", "")):
            return
        chain: list[str] = []
        while frame is not None:
            module = frame.f_globals.get("__name__", "")
            if frame.f_code.co_name == "<module>" and counted(module):
                return  # a module's import, not a step of the command
            if counted(module) and (not chain or chain[-1] != module):
                chain.append(module)
            frame = frame.f_back
        chains.append(tuple(reversed(chain)))

    sys.setprofile(profile)
    try:
        code = main(argv)
    finally:
        sys.setprofile(None)
    return code, chains


def collapsed(items: list[str]) -> list[str]:
    """``items`` with consecutive repeats dropped."""
    return [item for index, item in enumerate(items) if index == 0 or items[index - 1] != item]


def hand_over(chains: list[tuple[str, ...]]) -> list[str]:
    """The counted modules the command line calls directly, in order."""
    called = []
    for chain in chains:
        inner = [m for m in chain if not m.startswith("matchopt.cli")]
        lead = len(chain) - len(inner)
        if inner and lead and all(m.startswith("matchopt.cli") for m in chain[:lead]):
            called.append(chain[lead])
    return collapsed(called)


def cli_calls_after_hand_over(chains: list[tuple[str, ...]]) -> list[str]:
    """Command-line modules whose functions run once the orchestrator was on the stack."""
    started = False
    late = []
    for chain in chains:
        started = started or ORCHESTRATOR in chain
        if started and chain[-1].startswith("matchopt.cli"):
            late.append(chain[-1])
    return collapsed(late)


def phases(chains: list[tuple[str, ...]]) -> list[str]:
    """The counted modules the orchestrator calls directly (from its outermost frame), in
    order."""
    called = []
    for chain in chains:
        if ORCHESTRATOR in chain:
            index = chain.index(ORCHESTRATOR)
            if index + 1 < len(chain):
                called.append(chain[index + 1])
    return collapsed(called)


def twice(sequence: list[str]) -> list[str]:
    return sorted({m for m in sequence if sequence.count(m) > 1})


def short(sequence: list[str]) -> str:
    return " -> ".join(m.removeprefix("matchopt.") for m in sequence)


def test_optimize_enters_each_module_once(tmp_path, capsys):
    data = tmp_path / "data.csv"
    numeric_frame(12).to_csv(data, index=False)
    out = tmp_path / "proposals.csv"
    argv = [
        "optimize", str(data), "--target", "y", "--method", "random", "--preset", "quick",
        "--n", "3", "--out", str(out), "--save-model", str(tmp_path / "model.pt"),
    ]  # fmt: skip
    code, chains = record(argv)
    assert code == 0, capsys.readouterr().err
    assert len(pd.read_csv(out)) == 3
    handed, steps = hand_over(chains), phases(chains)
    print(f"hand-over: {short(handed)}\nphases: {short(steps)}")
    assert not twice(handed), f"the command line enters a module twice: {short(handed)}"
    assert not cli_calls_after_hand_over(chains), (
        f"the command line runs again after handing over: {short(handed)}"
    )
    assert ORCHESTRATOR in handed, short(handed)
    assert not twice(steps), f"the orchestrator goes back to a part: {short(steps)}"


def test_the_settings_are_checked_once(tmp_path, capsys, monkeypatch):
    """The command line's run and the Python API's fit each check the settings in one call."""
    import matchopt.tabular.optimizer as optimizer
    import matchopt.tabular.settings as settings

    calls = []
    real = settings.check_settings

    def counted_check(*args, **kwargs):
        calls.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(settings, "check_settings", counted_check)
    monkeypatch.setattr(optimizer, "check_settings", counted_check)
    data = tmp_path / "data.csv"
    numeric_frame(12).to_csv(data, index=False)
    argv = [
        "optimize", str(data), "--target", "y", "--method", "random", "--preset", "quick",
        "--n", "2", "--out", str(tmp_path / "p.csv"), "--oversample", "3",
    ]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    assert len(calls) == 1 and calls[0].oversample == 3 and calls[0].progress
    calls.clear()
    optimizer.TableOptimizer(target="y", method="random", preset="quick").fit(numeric_frame(12))
    assert len(calls) == 1 and calls[0].target == "y"
