"""Contract tests run over every registered method (quick preset, embedded tasks)."""

import numpy as np
import pytest

from matchopt.errors import MatchoptError
from matchopt.methods import METHODS, make_method
from matchopt.methods.wrappers import FITTED_ATTRIBUTE, is_fitted
from matchopt.runner import run
from matchopt.tasks import load_task
from matchopt.tasks.synthetic import ChainPotts

TASKS = ["styblinski-tang", "potts"]


@pytest.fixture(scope="module")
def tasks():
    return {name: load_task(name) for name in TASKS}


@pytest.mark.numerics
@pytest.mark.parametrize("task_name", TASKS)
@pytest.mark.parametrize("method_name", list(METHODS))
def test_quick_preset_contract(method_name, task_name, tasks):
    task = tasks[task_name]
    designs = make_method(method_name, "quick", seed=0).fit(task.offline).propose(128)
    assert designs.shape == (128, *task.space.shape)
    assert designs.dtype == task.space.dtype
    task.space.validate(designs)  # in range, finite
    again = make_method(method_name, "quick", seed=0).fit(task.offline).propose(128)
    np.testing.assert_array_equal(designs, again)


VALIDATED = [name for name, entry in METHODS.items() if "validated-quick" in entry.cls.presets]


@pytest.mark.numerics
@pytest.mark.parametrize("task_name", TASKS)
@pytest.mark.parametrize("method_name", VALIDATED)
def test_validated_quick_preset_contract(method_name, task_name, tasks):
    task = tasks[task_name]
    method = make_method(method_name, "validated-quick", seed=0).fit(task.offline)
    designs = method.propose(128)
    assert designs.shape == (128, *task.space.shape) and designs.dtype == task.space.dtype
    task.space.validate(designs)
    assert 1 <= method.fit_report()["selected_epoch"] <= method.config_.epochs
    again = make_method(method_name, "validated-quick", seed=0).fit(task.offline).propose(128)
    np.testing.assert_array_equal(designs, again)


@pytest.mark.parametrize("method_name", sorted(set(METHODS) - set(VALIDATED)))
def test_other_methods_refuse_the_validated_preset_by_name(method_name):
    assert VALIDATED == ["matchopt", "matchopt-noreg"]
    with pytest.raises(MatchoptError, match="unknown preset 'validated'; choose one of paper"):
        make_method(method_name, "validated")


def test_runner_scores_once_and_only_after_propose(monkeypatch):
    """The oracle scores the designs a method returned, once, after fit and propose."""
    import matchopt.runner as runner

    events = []
    real_make_method = runner.make_method

    def logging_make_method(*args, **kwargs):
        method = real_make_method(*args, **kwargs)
        fit, propose = method.fit, method.propose
        method.fit = lambda data: (events.append("fit"), fit(data))[1]
        method.propose = lambda n=128: (events.append("propose"), propose(n))[1]
        return method

    class LoggedPotts(ChainPotts):
        def _score(self, designs):
            events.append(("score", len(designs)))
            return super()._score(designs)

    monkeypatch.setattr(runner, "make_method", logging_make_method)
    record, designs = run(LoggedPotts(), "matchopt", preset="quick")
    assert events == ["fit", "propose", ("score", 128)]
    assert record.scores == LoggedPotts().normalize(LoggedPotts().score(designs)).tolist()


def test_unknown_method_is_a_clear_error():
    with pytest.raises(MatchoptError, match="unknown method"):
        make_method("nope")


def _learned_state(method):
    return sorted(k for k in vars(method) if k.endswith("_") and not k.startswith("_"))


@pytest.mark.numerics
@pytest.mark.parametrize("method_name", list(METHODS))
def test_a_refit_that_fails_midway_leaves_no_fitted_state(method_name, tasks, monkeypatch):
    """Otherwise propose() would decode the old model with the new data's encoder, or return
    designs of a half-built (untrained) generator, as if fitted."""
    import torch

    import matchopt.methods.matchopt as matchopt_module

    task = tasks["potts"]
    method = make_method(method_name, "quick", seed=0)
    assert not is_fitted(method)
    method.fit(task.offline)
    assert is_fitted(method) and FITTED_ATTRIBUTE in _learned_state(method)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(torch.autograd, "backward", interrupted)
    monkeypatch.setattr(torch.autograd, "grad", interrupted)
    # MATCH-OPT computes its gradients itself. (Not Adam.step: optimizers created meanwhile
    # would wrap the patched step into their class for good.)
    monkeypatch.setattr(matchopt_module, "fused_loss_and_gradients", interrupted)
    try:
        method.fit(task.offline)
    except KeyboardInterrupt:
        pass
    else:
        pytest.skip(f"{method_name} fits without backpropagation: nothing to interrupt")
    assert _learned_state(method) == [] and not is_fitted(method)
    with pytest.raises(MatchoptError, match="must be fitted"):
        method.propose(8)


@pytest.mark.parametrize("method_name", list(METHODS))
def test_every_fit_and_propose_carries_its_decorators(method_name):
    # Written in each method's file (methods/wrappers.py), not injected: a new method that
    # forgets them would fit with every core and leave a half-fitted model behind a failure.
    cls = METHODS[method_name].cls
    for name in ("fit", "propose"):
        defined = next(vars(c)[name] for c in cls.__mro__ if name in vars(c))
        assert hasattr(defined, "__wrapped__"), f"{cls.__name__}.{name} is not decorated"


def test_fit_wrapping_keeps_what_a_subclass_sets_before_its_parents_fit():
    from matchopt.methods.random_designs import RandomDesigns
    from matchopt.methods.wrappers import fit_all_or_nothing

    class Labelled(RandomDesigns):
        @fit_all_or_nothing
        def fit(self, data):
            self.label_ = "set before the parent's fit"
            return super().fit(data)

    task = load_task("potts")
    method = Labelled(seed=0).fit(task.offline)
    assert method.label_ == "set before the parent's fit" and hasattr(method, "data_")
    assert "_fit_depth" not in vars(method)


@pytest.mark.numerics
@pytest.mark.parametrize("method_name", list(METHODS))
def test_propose_searches_where_fit_left_the_model(method_name, tasks, monkeypatch):
    """propose() works on the device of the fitted model, not on ``device_`` (which
    ``set_params(device=...)`` may change after fit): here ``device_`` may not be read at all."""
    task = tasks["potts"]
    method = make_method(method_name, "quick", seed=0).fit(task.offline)
    expected = method.propose(16)

    def unreadable(self):
        raise AssertionError("propose() read device_")

    monkeypatch.setattr(type(method), "device_", property(unreadable))
    np.testing.assert_array_equal(method.propose(16), expected)


def test_an_oracle_that_returns_nan_fails_the_run_without_a_record():
    class BrokenOracle(ChainPotts):
        def _score(self, designs):
            scores = super()._score(designs).astype(float)
            scores[3] = np.nan
            return scores

    with pytest.raises(MatchoptError, match="scored design 3 of random as nan; no record"):
        run(BrokenOracle(), "random", preset="quick")


#: The modules of the method contract: what a method inherits from them is what a person must
#: know to write one.
CONTRACT_MODULES = {
    f"matchopt.methods.{name}"
    for name in ("base", "engine", "persistence", "wrappers", "seed_batch", "training")
}
#: Most public or protected names a method may inherit from the contract.
MAX_INHERITED_NAMES = 15


def _names_defined(cls: type) -> set[str]:
    """Names ``cls`` itself defines (attributes and annotations), dunder names left out."""
    names = set(vars(cls)) | set(vars(cls).get("__annotations__", {}))
    return {name for name in names if not name.startswith("__")}


def inherited_contract_names(cls: type) -> set[str]:
    """Names the classes of the contract modules in ``cls``'s bases define, less those that
    the classes of ``cls``'s own module (its file) define."""
    own = set().union(*(_names_defined(c) for c in cls.__mro__ if c.__module__ == cls.__module__))
    contract = set().union(
        *(_names_defined(c) for c in cls.__mro__ if c.__module__ in CONTRACT_MODULES)
    )
    return contract - own


@pytest.mark.parametrize("method_name", list(METHODS))
def test_a_method_inherits_few_names_from_the_contract(method_name):
    names = inherited_contract_names(METHODS[method_name].cls)
    assert len(names) <= MAX_INHERITED_NAMES, sorted(names)


def test_the_inherited_name_count_sees_a_growing_base(monkeypatch):
    from matchopt.methods.base import Method
    from matchopt.methods.random_designs import RandomDesigns

    before = inherited_contract_names(RandomDesigns)
    assert {"config_", "save", "get_params", "run"} <= before and "fit" not in before
    monkeypatch.setattr(Method, "_helper", lambda self: None, raising=False)
    assert inherited_contract_names(RandomDesigns) == before | {"_helper"}
    # Every module of the contract exists (a renamed one would silently count nothing).
    import importlib

    for module in CONTRACT_MODULES:
        importlib.import_module(module)


def test_min_rows_is_part_of_every_methods_contract():
    from matchopt.methods.base import build_config

    for entry in METHODS.values():
        need, why = entry.cls.min_rows(build_config(entry, "paper"))
        assert need >= 2 and why
    matchopt = METHODS["matchopt"]
    assert matchopt.cls.min_rows(build_config(matchopt, "quick"))[0] == 32
    # 142 rows: 14 held out (round(0.1 * 142)) leave 128 for the rank buckets; 141 leave 127.
    assert matchopt.cls.min_rows(build_config(matchopt, "validated"))[0] == 142
