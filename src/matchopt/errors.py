"""User-facing errors.

Anything a user can cause (bad data, unknown names, bad options) raises :class:`MatchoptError`
with a one-line message naming the problem. The CLI prints that line and exits non-zero, without
a traceback.
"""


class MatchoptError(Exception):
    """An error caused by input (data, names, options), with a message meant for the user."""
