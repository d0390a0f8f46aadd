"""The binding signature: it verifies for the pod, node and devices it was made for, and for
nothing else; the key is read from a file and never shown."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.io.kube.annotations import (
    GPU_INDEX_ANNOTATION,
    GPU_SHARE_ANNOTATION,
    MIG_SLICES_ANNOTATION,
    VISIBLE_DEVICES_ANNOTATION,
)
from gpufleet.io.kube.binding_signature import (
    BINDING_SIGNATURE_ANNOTATION,
    SIGNED_ANNOTATIONS,
    BindingKey,
    BindingKeyError,
    binding_signature_problem,
    canonical_binding,
    sign_binding,
    signed_binding,
)
from gpufleet.testing.agent_builders import TEST_BINDING_KEY, write_binding_key

UID = "6b1f0c2e-0000-4000-8000-000000000001"
NODE = "gpu-1"
BINDING = {GPU_INDEX_ANNOTATION: "3", VISIBLE_DEVICES_ANNOTATION: "3"}
SIGNED = signed_binding(TEST_BINDING_KEY, UID, NODE, BINDING)
OTHER_KEY = BindingKey(b"another-clusters-key-that-is-long-enough-012345")


def test_a_signed_binding_verifies_for_its_pod_on_its_node() -> None:
    assert SIGNED[BINDING_SIGNATURE_ANNOTATION].startswith("v1.")
    assert binding_signature_problem(TEST_BINDING_KEY, UID, NODE, SIGNED) == ""


def test_annotations_outside_the_binding_are_not_signed() -> None:
    labelled = {**SIGNED, "gpufleet.dev/queue": "team-b", "note": "anything"}
    assert binding_signature_problem(TEST_BINDING_KEY, UID, NODE, labelled) == ""


@pytest.mark.parametrize(
    ("uid", "node", "annotations", "key", "why"),
    [
        pytest.param(UID, NODE, BINDING, TEST_BINDING_KEY, "carries no", id="unsigned"),
        pytest.param("another-uid", NODE, SIGNED, TEST_BINDING_KEY, "does not verify", id="uid"),
        pytest.param(UID, "gpu-2", SIGNED, TEST_BINDING_KEY, "does not verify", id="node"),
        pytest.param(
            UID,
            NODE,
            {**SIGNED, GPU_INDEX_ANNOTATION: "2"},
            TEST_BINDING_KEY,
            "does not verify",
            id="index-tampered",
        ),
        pytest.param(
            UID,
            NODE,
            {**SIGNED, GPU_SHARE_ANNOTATION: "100"},
            TEST_BINDING_KEY,
            "does not verify",
            id="share-added",
        ),
        pytest.param(
            UID,
            NODE,
            {k: v for k, v in SIGNED.items() if k != VISIBLE_DEVICES_ANNOTATION},
            TEST_BINDING_KEY,
            "does not verify",
            id="annotation-removed",
        ),
        pytest.param(UID, NODE, SIGNED, OTHER_KEY, "does not verify", id="another-key"),
        pytest.param(
            UID,
            NODE,
            {**SIGNED, BINDING_SIGNATURE_ANNOTATION: "v1.é" + "0" * 63},
            TEST_BINDING_KEY,
            "does not verify",
            id="not-ascii",
        ),
    ],
)
def test_a_binding_that_is_not_the_signed_one_does_not_verify(
    uid: str, node: str, annotations: dict[str, str], key: BindingKey, why: str
) -> None:
    assert why in binding_signature_problem(key, uid, node, annotations)


def test_the_canonical_form_tells_absent_from_empty_and_moved_separators() -> None:
    assert canonical_binding(UID, NODE, {}) != canonical_binding(
        UID, NODE, {GPU_SHARE_ANNOTATION: ""}
    )
    moved = {GPU_INDEX_ANNOTATION: "1,2", MIG_SLICES_ANNOTATION: "3:0"}
    other = {GPU_INDEX_ANNOTATION: "1", MIG_SLICES_ANNOTATION: "2,3:0"}
    assert canonical_binding(UID, NODE, moved) != canonical_binding(UID, NODE, other)


_text = st.text(st.characters(codec="utf-8"), max_size=12)
_bindings = st.dictionaries(st.sampled_from(SIGNED_ANNOTATIONS), _text)
_fields = st.sampled_from(("uid", "node", *SIGNED_ANNOTATIONS))


@given(uid=_text, node=_text, annotations=_bindings, field=_fields, new=st.none() | _text)
def test_any_change_to_a_signed_field_breaks_the_signature(
    uid: str, node: str, annotations: dict[str, str], field: str, new: str | None
) -> None:
    """Change the UID, the node, or one binding annotation (a new value, or removed when
    ``new`` is None): the signature made before no longer verifies, unless nothing changed."""
    signed = signed_binding(TEST_BINDING_KEY, uid, node, annotations)
    changed_uid, changed_node, changed = uid, node, dict(signed)
    if field == "uid":
        changed_uid = new or ""
    elif field == "node":
        changed_node = new or ""
    elif new is None:
        changed.pop(field, None)
    else:
        changed[field] = new
    problem = binding_signature_problem(TEST_BINDING_KEY, changed_uid, changed_node, changed)
    same = (changed_uid, changed_node, changed) == (uid, node, signed)
    assert (problem == "") == same


def test_signing_is_deterministic_and_keyed() -> None:
    assert sign_binding(TEST_BINDING_KEY, UID, NODE, BINDING) == sign_binding(
        TEST_BINDING_KEY, UID, NODE, dict(reversed(BINDING.items()))
    )
    assert sign_binding(TEST_BINDING_KEY, UID, NODE, BINDING) != sign_binding(
        OTHER_KEY, UID, NODE, BINDING
    )


def test_the_key_is_read_from_a_file_and_never_shown(tmp_path: Path) -> None:
    path = write_binding_key(tmp_path / "key")
    key = BindingKey.from_file(path)
    assert key == TEST_BINDING_KEY  # the Secret's trailing newline is not part of the key
    assert TEST_BINDING_KEY.secret.decode() not in repr(key)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(b"short\n", "at least 32 bytes, got 5", id="too-short"),
        pytest.param(b"   \n", "at least 32 bytes, got 0", id="empty"),
        pytest.param(None, "cannot read the binding key", id="missing"),
    ],
)
def test_a_bad_key_file_is_refused_with_its_path(
    tmp_path: Path, content: bytes | None, message: str
) -> None:
    path = tmp_path / "key"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(BindingKeyError, match=message) as caught:
        BindingKey.from_file(path)
    assert str(path) in str(caught.value)
