"""Config fields declare what they mean in their metadata; the checks read only that."""

import dataclasses
import math
import re
import typing
from typing import Optional, get_type_hints

import pytest

from matchopt.config_fields import (
    check_config,
    convert_option,
    count,
    number,
    optional_count,
    undeclared_fields,
    widths,
)
from matchopt.errors import ConfigError
from matchopt.methods import METHODS
from matchopt.methods.base import build_config


def config_classes() -> dict[str, type]:
    """Every config class a registered method builds, under every preset with the entry's fixed
    fields, by its name."""
    classes: dict[str, type] = {}
    for entry in METHODS.values():
        for preset in entry.cls.presets:
            config_class = type(build_config(entry, preset))
            classes.setdefault(config_class.__name__, config_class)
        classes.setdefault(entry.cls.config_class.__name__, entry.cls.config_class)
    return classes


CONFIGS = config_classes()


def counts(config_class: type) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(config_class) if f.metadata.get("kind") == "count"]


@dataclasses.dataclass(frozen=True)
class Plain:
    """Fields that declare nothing: typed as numbers, named as counts, checked as neither."""

    epochs: int = 0
    hidden: tuple[int, ...] = (0, -3)
    n_models: int | None = -1
    lr: float = math.nan


@dataclasses.dataclass(frozen=True)
class Declared:
    epochs: int = count(3)
    steps: int = count(0, minimum=0)
    length: int = count(4, minimum=2)
    hidden: tuple[int, ...] = widths((8, 4))
    rows: int | None = optional_count()
    kappa: int = number(5, 1, 1000)
    level: int = dataclasses.field(default=1, metadata={"choices": (1, 2)})


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_every_numeric_field_of_a_method_config_declares_what_it_means(name):
    assert undeclared_fields(CONFIGS[name]) == []


def test_the_declaration_check_finds_undeclared_fields():
    assert undeclared_fields(Plain) == ["epochs", "hidden", "n_models"]
    assert undeclared_fields(Declared) == []


def test_the_declared_configs_include_every_method_and_its_base_classes():
    assert {"MatchOptConfig", "MatchOptEnsembleConfig", "GradientAscentConfig"} <= set(CONFIGS)
    assert {"BoQeiConfig", "CmaEsConfig", "BONETConfig", "AutoConfig"} <= set(CONFIGS)
    assert all(not undeclared_fields(base) for c in CONFIGS.values() for base in c.__mro__[:-1])


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_counts_refuse_zero_and_negative_values_as_before(name):
    config_class = CONFIGS[name]
    for f in counts(config_class):
        minimum = f.metadata["minimum"]
        for value in sorted({minimum - 1, -1}):
            config = dataclasses.replace(config_class(), **{f.name: value})
            with pytest.raises(ConfigError, match=rf"^config field {f.name}={value}: "):
                check_config(config)
            with pytest.raises(ConfigError, match=f"must be an integer >= {minimum}$"):
                check_config(config)
            if value < 0:
                with pytest.raises(ConfigError, match="must be an integer >= 0$"):
                    check_config(config, allow_zero_counts=True)
            else:
                check_config(config, allow_zero_counts=True)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_widths_refuse_zero_and_negative_widths(name):
    config_class = CONFIGS[name]
    hints = get_type_hints(config_class)
    fields = [f for f in dataclasses.fields(config_class) if f.metadata.get("kind") == "widths"]
    assert all(typing.get_origin(hints[f.name]) is tuple for f in fields)
    for f in fields:
        for bad in [(0,), (8, -5)]:
            config = dataclasses.replace(config_class(), **{f.name: bad})
            shown = ",".join(map(str, bad))
            with pytest.raises(ConfigError, match=rf"^config field {f.name}={shown}: widths"):
                check_config(config, allow_zero_counts=True)


def test_the_counts_of_every_config_are_counts_of_today():
    """Every count is >= 1 unless it says so; the ones that allow 0 or need 2 are named."""
    lower = {
        (name, f.name, f.metadata["minimum"])
        for name, c in CONFIGS.items()
        for f in counts(c)
        if f.metadata["minimum"] != 1
    }
    assert {n for _, n, m in lower if m == 0} == {
        "search_steps",
        "depth",
        "warmup_epochs",
        "bold_designs",
    }
    assert {n for _, n, m in lower if m == 2} == {"trajectory_length"}


def test_only_declared_fields_are_range_checked():
    check_config(Plain(lr=0.1))  # an int 0, widths 0 and -3, a count -1: nothing declared
    with pytest.raises(ConfigError, match="lr=nan: must be a finite number"):
        check_config(Plain())
    check_config(Declared())
    for field, value, message in [
        ("epochs", 0, "must be an integer >= 1"),
        ("steps", -1, "must be an integer >= 0"),
        ("length", 1, "must be an integer >= 2"),
        ("hidden", (8, 0), "widths must be >= 1"),
        ("rows", 0, "must be an integer >= 1"),
        ("kappa", 0, "must be in [1, 1000]"),
    ]:
        with pytest.raises(ConfigError, match=re.escape(message)):
            check_config(Declared(**{field: value}))
    check_config(Declared(rows=None))
    check_config(Declared(epochs=0, length=0, rows=0), allow_zero_counts=True)


@pytest.mark.parametrize(
    "hint, text, expected",
    [
        (int, "12", 12),
        (int | None, "none", None),
        (Optional[int], "None", None),  # noqa: UP045 (typing.Union reads the same)
        (int | None, "7", 7),
        (float, "1e-3", 1e-3),
        (float | None, "none", None),
        (bool, "yes", True),
        (bool | None, "off", False),
        (bool | None, "none", None),
        (tuple[int, ...], "8, 16,", (8, 16)),
        (str, "none", "none"),
        (str, " topk ", "topk"),
        (typing.Any, "12", "12"),
    ],
)
def test_set_text_is_read_by_the_type_of_the_field(hint, text, expected):
    assert convert_option(text, hint, "key") == expected


@pytest.mark.parametrize(
    "hint, text, message",
    [
        (int, "none", "'none' is not an integer"),
        (int, "1.5", "'1.5' is not an integer"),
        (int | None, "ten", "'ten' is not an integer (or none)"),
        (float | None, "big", "'big' is not a number (or none)"),
        (tuple[int, ...], "8,x", "'8,x' is not integers separated by commas"),
        (bool, "maybe", "'maybe' is not true or false"),
    ],
)
def test_set_text_that_is_not_of_the_type_is_refused(hint, text, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        convert_option(text, hint, "key")
