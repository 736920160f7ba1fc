"""User-facing errors.

Anything a user can cause (bad data, unknown names, bad options) raises :class:`MatchoptError`
with a one-line message naming the problem. The CLI prints that line and exits non-zero, without
a traceback.
"""


class MatchoptError(Exception):
    """An error caused by input (data, names, options), with a message meant for the user."""


class ConfigError(MatchoptError):
    """A bad config field or setting: names the field (library wording, no command-line flag).

    The CLI shows it as the option the user typed (``--set key=value``, or ``--key`` for
    settings that are options of their own).

    Attributes:
        key: the config field or setting.
        value: the value given (None when the key itself is the problem).
        problem: what is wrong, in words.
    """

    def __init__(self, key: str, value: object, problem: str):
        self.key, self.value, self.problem = key, value, problem
        shown = f"{key}={value}" if value is not None else repr(key)
        super().__init__(f"config field {shown}: {problem}")


def printable(text: object) -> str:
    """``text`` safe to print on a terminal or in one line of a message: control characters and
    other characters that do not print (ESC, newlines, tabs, bidirectional overrides) become
    their escapes as ``repr`` writes them (``\\x1b``, ``\\n``, ``\\u202e``); everything else,
    non-ASCII letters included, is left alone.

    For text read from files (column names, saved models, results folders): an escape
    sequence in it must not drive the terminal, and a newline must not forge a line.
    """
    text = str(text)
    if text.isprintable():  # the usual case, fast
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
