"""The signature that proves a pod's device binding was written by gpufleet's scheduler.

Any pod author can write ``gpufleet.dev/gpu-index`` on a pod; only the scheduler holds the
binding key (a Secret mounted into the scheduler's and the agents' pods). Owns that key
(:class:`BindingKey`, read from a file), the canonical text a signature covers (the pod's UID,
the node it is bound to and every binding annotation of :data:`SIGNED_ANNOTATIONS`, present
or absent, in sorted order: :func:`canonical_binding`), and signing and checking it
(HMAC-SHA256, compared in constant time): :func:`signed_binding` adds
``gpufleet.dev/binding-signature`` to the annotations the scheduler writes with the Binding,
:func:`binding_signature_problem` says why a pod's annotations are not that (or nothing).

A signature binds the devices to one pod on one node: copied onto another pod, or with any
device annotation changed, it no longer verifies. Pure: no I/O beyond reading the key file.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gpufleet.io.kube.annotations import (
    GPU_INDEX_ANNOTATION,
    GPU_SHARE_ANNOTATION,
    MIG_SLICES_ANNOTATION,
    VISIBLE_DEVICES_ANNOTATION,
)

BINDING_SIGNATURE_ANNOTATION = "gpufleet.dev/binding-signature"
#: Every annotation of a binding the signature covers (absent ones too: adding one breaks it).
SIGNED_ANNOTATIONS = tuple(
    sorted(
        (
            GPU_INDEX_ANNOTATION,
            GPU_SHARE_ANNOTATION,
            MIG_SLICES_ANNOTATION,
            VISIBLE_DEVICES_ANNOTATION,
        )
    )
)
#: Every annotation only the scheduler may write (what the admission policy guards).
BINDING_ANNOTATIONS = (*SIGNED_ANNOTATIONS, BINDING_SIGNATURE_ANNOTATION)
#: Names the form of the signature, so that another form can follow without ambiguity.
SIGNATURE_VERSION = "v1"
#: The fewest bytes a key may have (``openssl rand -hex 32`` gives 64).
MIN_KEY_BYTES = 32


class BindingKeyError(ValueError):
    """The key file is missing, unreadable or too short."""


@dataclass(frozen=True, slots=True)
class BindingKey:
    """The secret shared by the scheduler and the agents (never printed)."""

    secret: bytes

    def __post_init__(self) -> None:
        if len(self.secret) < MIN_KEY_BYTES:
            raise BindingKeyError(
                f"a binding key needs at least {MIN_KEY_BYTES} bytes, got {len(self.secret)} "
                "(make one with: openssl rand -hex 32)"
            )

    def __repr__(self) -> str:
        return "BindingKey(<secret>)"

    @classmethod
    def from_file(cls, path: Path) -> BindingKey:
        """The key in ``path`` (surrounding whitespace, a Secret's trailing newline, ignored)."""
        try:
            secret = path.read_bytes().strip()
        except OSError as error:
            raise BindingKeyError(f"cannot read the binding key {path}: {error.strerror}") from None
        try:
            return cls(secret)
        except BindingKeyError as error:
            raise BindingKeyError(f"{path}: {error}") from None


def read_binding_key(path: Path | None, insecure_unsigned: bool) -> BindingKey | None:
    """The key of ``--binding-key-file``; None only when ``--insecure-unsigned-bindings`` says
    to go without one (the scheduler and the agent refuse to start otherwise)."""
    if path is not None:
        if insecure_unsigned:
            raise BindingKeyError(
                "--binding-key-file and --insecure-unsigned-bindings: give one, not both"
            )
        return BindingKey.from_file(path)
    if not insecure_unsigned:
        raise BindingKeyError(
            "--binding-key-file is required: the key the scheduler signs device bindings with "
            "and the node agents verify them with (the gpufleet-binding-key Secret; make one "
            "with: openssl rand -hex 32). --insecure-unsigned-bindings runs without one, for "
            "tests and demos only: any pod author can then claim any GPU of a node"
        )
    return None


def canonical_binding(uid: str, node: str, annotations: Mapping[str, str]) -> bytes:
    """The text a signature covers: one JSON object with sorted keys, so that no two bindings
    (an annotation absent or empty, a comma moved between fields) read the same."""
    signed = {key: annotations[key] for key in SIGNED_ANNOTATIONS if key in annotations}
    text = json.dumps(
        {"version": SIGNATURE_VERSION, "uid": uid, "node": node, "annotations": signed},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=True,
    )
    return text.encode("ascii")


def sign_binding(key: BindingKey, uid: str, node: str, annotations: Mapping[str, str]) -> str:
    digest = hmac.new(key.secret, canonical_binding(uid, node, annotations), hashlib.sha256)
    return f"{SIGNATURE_VERSION}.{digest.hexdigest()}"


def signed_binding(
    key: BindingKey, uid: str, node: str, annotations: Mapping[str, str]
) -> dict[str, str]:
    """``annotations`` with the signature of the binding of pod ``uid`` to ``node`` added."""
    return {**annotations, BINDING_SIGNATURE_ANNOTATION: sign_binding(key, uid, node, annotations)}


def binding_signature_problem(
    key: BindingKey, uid: str, node: str, annotations: Mapping[str, str]
) -> str:
    """Why the binding annotations of pod ``uid`` on ``node`` are not the scheduler's (empty
    when the signature verifies)."""
    given = annotations.get(BINDING_SIGNATURE_ANNOTATION)
    if not given:
        return f"its binding carries no {BINDING_SIGNATURE_ANNOTATION}"
    expected = sign_binding(key, uid, node, annotations)
    if not hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode("ascii")):
        return (
            f"its {BINDING_SIGNATURE_ANNOTATION} does not verify (the annotations were not "
            "written by gpufleet's scheduler for this pod on this node)"
        )
    return ""
