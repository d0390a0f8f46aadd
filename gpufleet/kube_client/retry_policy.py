"""The one policy on sending a request to the API server again, for both of our own HTTP
clients: :class:`~gpufleet.kube_client.api.JsonPoster` (the scheduler's Bindings, Evictions
and Events) and :class:`~gpufleet.kube_client.light_api.LightKubeApi` (the node agent).

A request is sent at most twice, and the second time only where a repeat is harmless or
detected:

* a request on a kept-alive connection that fails with a ``ConnectionError`` (reset, broken
  pipe, closed with no answer) is sent again on a new connection, whatever it is: the server
  almost always closed the idle connection before it read the request, and every request sent
  through these clients has a harmless repeat or a detected one (below);
* a request whose answer is otherwise lost (a timeout, a connection dropped on its first
  request, any other I/O error once it may have gone out) is sent again only when a repeat is
  *detected*: a ``POST`` of a Binding or an Eviction, whose repeat's answer says whether the
  first was carried out. Any other request is not: the server may still be working on it;
* a request the server answered, with any status, is never sent again here (the callers retry
  as they see fit: an informer with back-off, the lease at its next round, the backend's
  binder by reading the pod).

Harmless repeats: a GET or a watch; the clients' PATCHes (strategic merge patches that set
fields: written twice, they leave what one leaves); an Event's POST (a second notice, or 409
AlreadyExists for a named one, which its senders ignore). Detected repeats, read by
:func:`settle_binding` and :func:`settle_eviction` when the answer to the second send is an
error:

* Binding: 409 (the pod is already bound) means the first went through when the pod is bound to
  the node asked for, and is a conflict, reported as one (409 ``Conflict`` naming the node), when
  bound to another;
* Eviction: 404 (the pod is gone) means the first went through. A pod the first left
  terminating is evicted again with a 2xx by the API server (it skips the disruption budgets of
  a terminating pod), a success anyway.

Requests sent through the official client (the scheduler's other calls, and its POSTs when it
speaks through a proxy) are not sent again: its urllib3 pool has retries off (see
:mod:`gpufleet.kube_client.api`).
"""

from __future__ import annotations

import enum
import http.client
import re
from collections.abc import Callable
from typing import TypeVar

from gpufleet.kube_client.api_types import ApiError, Obj

__all__ = [
    "MAX_SENDS",
    "AnswerLostError",
    "Repeat",
    "repeat_of",
    "send_under_policy",
    "settle_binding",
    "settle_eviction",
]

#: The first send and at most one repeat.
MAX_SENDS = 2

Answer = TypeVar("Answer")

_DETECTED_PATH = re.compile(r"/namespaces/[^/]+/pods/[^/]+/(binding|eviction)$")


class Repeat(enum.Enum):
    """What sending a request a second time does (see the module docstring)."""

    #: Leaves what one send leaves: sent again only on a stale kept-alive connection.
    HARMLESS = "harmless"
    #: Its answer says whether the first send was carried out: sent again after any lost answer.
    DETECTED = "detected"


def repeat_of(method: str, path: str) -> Repeat:
    """The repeat of a request of ``method`` to ``path`` (a query string is ignored)."""
    if method.upper() == "POST" and _DETECTED_PATH.search(path.split("?", 1)[0]):
        return Repeat.DETECTED
    return Repeat.HARMLESS


class AnswerLostError(Exception):
    """One send that got no answer: ``error`` is why, ``reused`` whether it went on a
    kept-alive connection that had carried a request before, ``message`` what the caller is
    told (an :class:`ApiError` of status 0) if it is not sent again."""

    def __init__(
        self, error: OSError | http.client.HTTPException, reused: bool, message: str
    ) -> None:
        super().__init__(message)
        self.error = error
        self.reused = reused
        self.message = message


def may_send_again(repeat: Repeat, lost: AnswerLostError) -> bool:
    """Whether a request whose send ended in ``lost`` is sent once more (not counting sends)."""
    stale = lost.reused and isinstance(lost.error, ConnectionError)
    return stale or repeat is Repeat.DETECTED


def send_under_policy(
    repeat: Repeat,
    send_once: Callable[[], Answer],
    settle: Callable[[ApiError], Answer] | None = None,
) -> Answer:
    """The answer to a request sent by ``send_once`` (which raises :class:`AnswerLostError` when no
    answer came, :class:`ApiError` for an error answer), sent again as the policy allows. An
    error answer to a repeat goes to ``settle``, which says what it means (returns the answer,
    or raises); without one it is raised as it is. No answer at the end: ``ApiError`` 0."""
    for sends in range(1, MAX_SENDS + 1):
        try:
            return send_once()
        except AnswerLostError as lost:
            if sends < MAX_SENDS and may_send_again(repeat, lost):
                continue
            raise ApiError(0, "Unreachable", lost.message) from None
        except ApiError as error:
            if sends > 1 and settle is not None:
                return settle(error)
            raise
    raise AssertionError("unreachable")  # pragma: no cover


def settle_binding(error: ApiError, node: str, read_pod: Callable[[], Obj | None]) -> None:
    """The error answer to a repeated Binding to ``node``, read: returns when it says the first
    send bound the pod there; raises otherwise (409 ``Conflict`` when the pod is bound to
    another node, else ``error`` itself). ``read_pod``: the pod as the API server holds it now
    (None: gone)."""
    if error.status != 409:
        raise error
    try:
        pod = read_pod()
    except ApiError:
        raise error from None  # not known: the caller learns it as after any 409
    bound_to = str(((pod or {}).get("spec") or {}).get("nodeName") or "")
    if bound_to == node:
        return
    if bound_to:
        message = f"the pod is already bound to node {bound_to!r}, not {node!r}"
        raise ApiError(409, "Conflict", message) from None
    raise error


def settle_eviction(error: ApiError) -> None:
    """The error answer to a repeated Eviction, read: returns when it says the first send
    removed the pod (404: gone); raises ``error`` otherwise."""
    if error.status != 404:
        raise error
