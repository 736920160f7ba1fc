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


def printable(text: object, limit: int = 1000) -> str:
    """``text`` safe to print on a terminal or in one line of a message: control characters and
    other characters that do not print (ESC, newlines, tabs, bidirectional overrides) become
    their escapes as ``repr`` writes them (``\\x1b``, ``\\n``, ``\\u202e``); everything else,
    non-ASCII letters included, is left alone. Text longer than ``limit`` characters keeps its
    start and end around a note of how much was cut (a 100 MB cell is not echoed whole).

    For text read from files (column names, saved models, results folders) and names given on
    the command line: an escape sequence in it must not drive the terminal, and a newline must
    not forge a line.
    """
    text = str(text)
    if len(text) > limit:
        keep = max(limit // 2 - 20, 1)
        text = f"{text[:keep]}...({len(text) - 2 * keep:,} characters cut)...{text[-keep:]}"
    if text.isprintable():  # the usual case, fast
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
