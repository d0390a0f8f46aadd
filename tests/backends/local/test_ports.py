"""The rendezvous ports of live gangs: never one a live gang holds (issue 30 item 8)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from gpufleet.backends.local.ports import MAX_DRAWS, PortBook


def probe_of(*ports: int) -> Callable[[], int]:
    """A fake kernel that hands out ``ports`` in turn (then the last again and again)."""
    given: Iterator[int] = iter(ports)
    last = [ports[-1]]

    def probe() -> int:
        last[0] = next(given, last[0])
        return last[0]

    return probe


@pytest.mark.parametrize(
    ("kernel", "holders", "expected"),
    [
        pytest.param((5000, 5001), ["a", "b"], {"a": 5000, "b": 5001}, id="fresh-ports"),
        pytest.param(
            (5000, 5000, 5001), ["a", "b"], {"a": 5000, "b": 5001}, id="repeat-drawn-again"
        ),
        pytest.param(
            (5000, 5000, 5001, 5000, 5001, 5002),
            ["a", "b", "c"],
            {"a": 5000, "b": 5001, "c": 5002},
            id="every-held-port-skipped",
        ),
        pytest.param((5000, 5000, 5001), ["a", "a"], {"a": 5001}, id="redraw-differs"),
    ],
)
def test_a_draw_never_gives_a_port_a_live_gang_holds(
    kernel: tuple[int, ...], holders: list[str], expected: dict[str, int]
) -> None:
    book = PortBook(probe_of(*kernel))
    for holder in holders:
        book.draw(holder)
    assert {h: book.port_of(h) for h in expected} == expected
    assert book.held == frozenset(expected.values())


def test_a_port_is_drawn_again_only_once_its_gang_has_ended() -> None:
    book = PortBook(probe_of(5000, 5000))
    book.hold("recovered", 5000)  # a running gang found again at a restart
    with pytest.raises(OSError, match=f"after {MAX_DRAWS} draws"):
        book.draw("new")
    assert book.port_of("new") is None
    book.release("recovered")
    assert book.draw("new") == 5000


def test_many_draws_from_the_kernel_never_repeat_a_live_gangs_port() -> None:
    # Without the book, 2,000 draws of port 0 gave 121 repeats on a Linux box.
    book = PortBook()
    for number in range(2000):
        book.draw(f"gang-{number}")
    assert len(book.held) == 2000
