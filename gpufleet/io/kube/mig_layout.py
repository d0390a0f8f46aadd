"""MIG layouts of a node: which profiles sit on which partitioned GPU.

Owns the text form of a layout (the ``gpufleet.dev/mig-layout`` annotation,
``0:3g.40gb,2g.20gb,1g.10gb,1g.10gb;1:7g.80gb``), the check that a device's profiles fit in its
seven compute slices, and the first-fit-decreasing spread of advertised slice counts over
partitioned devices when no layout is given. Raises :class:`ValueError`; callers name the file
and field. It does not model real MIG placement rules (memory slices, start offsets): only the
compute-slice budget is checked.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from gpufleet.io.errors import quoted
from gpufleet.model.gpu import MIG_COMPUTE_SLICES, parse_mig_profile

MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
LAYOUT_EXAMPLE = "0:3g.40gb,2g.20gb,1g.10gb,1g.10gb;1:7g.80gb"


def check_device_fits(profiles: Iterable[str]) -> tuple[str, ...]:
    """Bare profile names of one device, after checking they fit in 7 compute slices."""
    parsed = [parse_mig_profile(p) for p in profiles]
    used = sum(p.compute_slices for p in parsed)
    if used > MIG_COMPUTE_SLICES:
        names = ", ".join(p.name for p in parsed)
        raise ValueError(f"{names} need {used} compute slices; one GPU has {MIG_COMPUTE_SLICES}")
    return tuple(p.name for p in parsed)


def parse_mig_layout(text: str) -> dict[int, tuple[str, ...]]:
    """``0:3g.40gb,1g.10gb;1:7g.80gb`` -> ``{0: ("3g.40gb", "1g.10gb"), 1: ("7g.80gb",)}``."""
    layout: dict[int, tuple[str, ...]] = {}
    for part in (p.strip() for p in text.split(";")):
        if not part:
            continue
        index_text, colon, profiles_text = part.partition(":")
        index_text = index_text.strip()
        if not colon or not index_text.isdigit():
            raise ValueError(
                f"expected '<device index>:<profile>,<profile>...' per device, separated by ';' "
                f"(e.g. {quoted(LAYOUT_EXAMPLE)}), got {quoted(part)}"
            )
        index = int(index_text)
        if index in layout:
            raise ValueError(f"device {index} appears twice")
        profiles = [p.strip() for p in profiles_text.split(",")]
        if not all(profiles):
            raise ValueError(f"device {index}: empty profile in {quoted(profiles_text.strip())}")
        try:
            layout[index] = check_device_fits(profiles)
        except ValueError as error:
            raise ValueError(f"device {index}: {error}") from None
    if not layout:
        raise ValueError(
            f"expected at least one device, e.g. {quoted(LAYOUT_EXAMPLE)}, got {quoted(text)}"
        )
    return layout


def format_mig_layout(layout: Mapping[int, Iterable[str]]) -> str:
    """The annotation text of a layout (inverse of :func:`parse_mig_layout`)."""
    return ";".join(f"{i}:{','.join(layout[i])}" for i in sorted(layout))


def summarize(counts: Mapping[str, int]) -> str:
    """``2x 3g.40gb, 1x 1g.10gb`` for messages."""
    return ", ".join(f"{n}x {p}" for p, n in sorted(counts.items()) if n)


def first_fit_decreasing(counts: Mapping[str, int], devices: int | None) -> list[tuple[str, ...]]:
    """Spread slice counts over devices, biggest slices first, each device to the first that fits.

    ``devices`` caps how many partitioned GPUs there are (None: as many as needed). Devices that
    would stay empty are not returned. Raises ValueError when the slices do not fit.
    """
    items = sorted(
        (parse_mig_profile(p) for p, n in counts.items() for _ in range(n)),
        key=lambda p: (-p.compute_slices, p.name),
    )
    used: list[int] = []
    placed: list[list[str]] = []
    for profile in items:
        for position, load in enumerate(used):
            if load + profile.compute_slices <= MIG_COMPUTE_SLICES:
                used[position] += profile.compute_slices
                placed[position].append(profile.name)
                break
        else:
            if devices is not None and len(used) >= devices:
                raise ValueError(
                    f"the MIG slices ({summarize(counts)}) do not fit on {devices} partitioned "
                    f"GPU(s) of {MIG_COMPUTE_SLICES} compute slices each"
                )
            used.append(profile.compute_slices)
            placed.append([profile.name])
    return [tuple(device) for device in placed]


def layout_counts(layout: Mapping[int, Iterable[str]]) -> Counter[str]:
    """How many slices of each profile a layout has."""
    return Counter(p for profiles in layout.values() for p in profiles)
