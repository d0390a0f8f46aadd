"""The one error type of bad input (which file, where in it, which field, what is wrong), and
how an error quotes what it found: never more than about :data:`MAX_QUOTED` characters of it.

A bad value may be a whole file (a 135 MB line of base64 read as one YAML scalar): an error
quotes its start and says how long it was (:func:`quoted`, :func:`shorten`), and
:class:`InputError` bounds each of its parts, whatever its caller put in them.
"""

from __future__ import annotations

#: The most characters of a found value an error quotes.
MAX_QUOTED = 200
#: The most characters of an error's message (its quoted values are short already; this bounds
#: messages that list many things, and any caller that quoted a value whole).
MAX_MESSAGE = 1000
#: The most characters of the place (``document 2 (line 14), Pod ml/x``) or the field.
MAX_PLACE = 300


def shorten(text: str, limit: int = MAX_QUOTED) -> str:
    """``text``, or its first ``limit`` characters and ``... (N characters)``."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text):,} characters)"


def quoted(value: object, limit: int = MAX_QUOTED) -> str:
    """``repr(value)``, shortened: a long string is cut before it is quoted (so a huge one is
    never copied whole), anything else after."""
    if isinstance(value, str):
        if len(value) <= limit:
            return repr(value)
        return f"{value[:limit]!r}... ({len(value):,} characters)"
    return shorten(repr(value), limit)


class InputError(ValueError):
    """Bad input. ``str()`` reads like ``pods.csv:17: num_gpu: expected ... got 'x'``."""

    def __init__(
        self, source: str, message: str, location: str | None = None, field: str | None = None
    ) -> None:
        self.source = shorten(source, MAX_PLACE)
        self.location = None if location is None else shorten(location, MAX_PLACE)
        self.field = None if field is None else shorten(field, MAX_PLACE)
        self.reason = shorten(message, MAX_MESSAGE)
        where = self.source if self.location is None else f"{self.source}:{self.location}"
        what = self.reason if self.field is None else f"{self.field}: {self.reason}"
        super().__init__(f"{where}: {what}")
