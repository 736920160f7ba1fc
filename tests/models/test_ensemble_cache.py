"""The shared-ensemble cache reads back only what it could have written."""

import io

import pytest
import torch

from matchopt.models.ensemble_cache import CACHE_KIND, EnsembleCache
from matchopt.state import state_bytes


class Members(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.members = torch.nn.ModuleList([torch.nn.Linear(3, 1) for _ in range(2)])


def write(cache: EnsembleCache, key: str, entry: dict) -> None:
    cache.folder.mkdir(parents=True, exist_ok=True)
    cache.path(key).write_bytes(state_bytes(entry, CACHE_KIND))


def good_entry(key: str) -> dict:
    state = {k: v.clone() for k, v in Members().state_dict().items()}
    return {"key": key, "n_models": 2, "train_seconds": 1.5, "state": state}


def test_a_stored_entry_loads(tmp_path):
    cache, key = EnsembleCache(tmp_path), "k" * 64
    cache.store(key, Members(), 2, 1.5)
    assert cache.load(key, Members()) == (2, 1.5)


@pytest.mark.parametrize(
    "change, words",
    [
        ({"train_seconds": "soon"}, "train_seconds"),
        ({"n_models": 2.5}, "n_models"),
        ({"state": {"members.0.weight": [1, 2]}}, "not named tensors"),
        ("huge", "beyond"),
        ("nan", "not finite"),
    ],
)
def test_a_bad_entry_is_set_aside_named_and_trained_again(tmp_path, change, words):
    cache, key = EnsembleCache(tmp_path), "k" * 64
    entry = good_entry(key)
    if change == "huge":
        entry["state"]["members.0.weight"].fill_(1e30)
    elif change == "nan":
        entry["state"]["members.1.bias"].fill_(float("nan"))
    else:
        entry.update(change)
    write(cache, key, entry)
    with pytest.warns(UserWarning, match=words) as caught:
        assert cache.load(key, Members()) == (0, 0.0)
    assert str(cache.path(key)) in str(caught[0].message)
    assert not cache.path(key).exists()
    assert cache.path(key).with_name(cache.path(key).name + ".rejected").exists()
    assert cache.load(key, Members()) == (0, 0.0)  # a rerun trains it: no error, no warning


def test_a_file_of_the_older_format_is_set_aside_unread(tmp_path, monkeypatch):
    """A cache file written with torch.save (matchopt before the state-file format) is never
    unpickled: set aside with a warning, and the ensemble trained again."""
    cache, key = EnsembleCache(tmp_path), "k" * 64
    buffer = io.BytesIO()
    torch.save(good_entry(key), buffer)
    cache.path(key).write_bytes(buffer.getvalue())
    monkeypatch.setattr(torch, "load", lambda *a, **k: pytest.fail("torch.load was called"))
    with pytest.warns(UserWarning, match="older matchopt"):
        assert cache.load(key, Members()) == (0, 0.0)
    assert cache.path(key).with_name(cache.path(key).name + ".rejected").exists()


def test_a_cache_of_weights_just_under_the_cap_gives_designs_that_are_refused_unscored(
    tmp_path, monkeypatch
):
    """The issue's edit: every weight scaled to just under MAX_WEIGHT passes the cache's checks;
    the designs it gives lie far outside the task's space, which the oracle never scores."""
    import matchopt.models.gaussian as gaussian
    from matchopt.errors import MatchoptError
    from matchopt.methods import RunContext
    from matchopt.models.ensemble_cache import MAX_WEIGHT
    from matchopt.runner import run
    from matchopt.state import load_state

    monkeypatch.setattr(gaussian, "GROUPED_MAX_WIDTH", 0)  # members shared as a prefix
    context = RunContext.of(ensemble_folder=tmp_path)
    run("styblinski-tang", "ens-mean", 0, "quick", threads=1, context=context)
    (path,) = tmp_path.glob("*.pt")
    entry = load_state(path.read_bytes(), CACHE_KIND)
    largest = max(float(t.abs().max()) for t in entry["state"].values())
    entry["state"] = {k: t * (0.99 * MAX_WEIGHT / largest) for k, t in entry["state"].items()}
    path.write_bytes(state_bytes(entry, CACHE_KIND))
    with pytest.raises(MatchoptError, match="outside the space of task 'styblinski-tang'"):
        run("styblinski-tang", "ens-min", 0, "quick", threads=1, context=context)
