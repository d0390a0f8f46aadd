"""The one error type of bad input: which file, where in it, which field, what is wrong."""

from __future__ import annotations


class InputError(ValueError):
    """Bad input. ``str()`` reads like ``pods.csv:17: num_gpu: expected ... got 'x'``."""

    def __init__(
        self, source: str, message: str, location: str | None = None, field: str | None = None
    ) -> None:
        self.source = source
        self.location = location
        self.field = field
        self.reason = message
        where = source if location is None else f"{source}:{location}"
        what = message if field is None else f"{field}: {message}"
        super().__init__(f"{where}: {what}")
