"""A fake kubelet on unix sockets in a short temporary directory, stopped after each test."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from gpufleet.testing.fake_kubelet import FakeKubelet, short_tmp_root


@pytest.fixture
def kubelet() -> Iterator[FakeKubelet]:
    root = short_tmp_root()
    fake = FakeKubelet(root).start()
    try:
        yield fake
    finally:
        fake.stop()
        shutil.rmtree(root, ignore_errors=True)
