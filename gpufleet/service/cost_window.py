"""The window of a cost report as people write it (``7d``, ``2w``, ``24h``, ``90m``, ``1d12h``).

Its own module (it reads a duration and nothing else) so that ``gpufleet cost`` refuses a bad
window before asking the server without importing what the server prices runs with.
"""

from __future__ import annotations

import math

from gpufleet.io.quantities import parse_long_duration

_WINDOW_HINT = "a duration such as 7d, 24h, 90m or 1d12h"


def parse_window(text: str) -> float:
    """Seconds of a window written ``7d``, ``2w``, ``24h``, ``90m``, ``1d12h`` or plain seconds;
    a ValueError naming what is wrong otherwise (it must be more than 0)."""
    try:
        seconds = parse_long_duration(text)
    except ValueError:
        raise ValueError(f"window: expected {_WINDOW_HINT}, got {text!r}") from None
    if not 0 < seconds < math.inf:
        raise ValueError(f"window: expected {_WINDOW_HINT} (more than 0), got {text!r}")
    return seconds
