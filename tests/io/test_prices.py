"""The price list file: the defaults gpufleet ships (sourced and dated), a user's own list,
and bad input refused with the file, the place and the field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpufleet.economics import CapacityType, MissingPriceError
from gpufleet.io.errors import InputError
from gpufleet.io.fleet.prices import default_prices, default_prices_path, read_prices
from gpufleet.io.readers import read_cluster
from tests.io.conftest import WriteFile

GOOD = """
apiVersion: gpufleet.dev/v1alpha1
kind: PriceList
metadata: {name: ours}
spec:
  currency: EUR
  cpu: {on-demand: 0.04, spot: 0.01}
  memory: {on-demand: 0.005}
  estimates: {spot: 0.5}
  gpus:
    - model: H100
      on-demand: 9.5
      reserved: 4
      source: our contract
      asOf: "2026-01-01"
    - model: A100-SXM4-80GB
      on-demand: 4
"""


def test_the_default_prices_are_sourced_dated_and_match_gpu_products() -> None:
    prices = default_prices()
    assert prices.currency == "USD"
    assert prices.gpus, "the defaults price some GPUs"
    for gpu in prices.gpus:
        assert gpu.source, f"{gpu.model} says where its price comes from"
        assert gpu.as_of, f"{gpu.model} says when its price was valid"
    h100 = prices.gpu_rate("NVIDIA-H100-80GB-HBM3", CapacityType.ON_DEMAND)
    assert h100.hourly > prices.gpu_rate("NVIDIA-A100-SXM4-40GB", CapacityType.ON_DEMAND).hourly
    assert prices.gpu_rate("NVIDIA-H100-80GB-HBM3", CapacityType.SPOT).estimated
    # Every number the file ships comes with a date it was read.
    raw = yaml.safe_load(default_prices_path().read_text(encoding="utf-8"))
    assert all(gpu.get("retrieved") for gpu in raw["spec"]["gpus"])


def test_a_users_price_list_is_read(write_file: WriteFile) -> None:
    prices = read_prices(write_file("prices.yaml", GOOD))
    assert prices.name == "ours"
    assert prices.currency == "EUR"
    assert prices.gpu_rate("NVIDIA-A100-SXM4-80GB", CapacityType.SPOT).hourly == 2.0
    assert prices.gpu_rate("NVIDIA-H100-80GB-HBM3", CapacityType.RESERVED).hourly == 4.0
    assert prices.cpu_rate(CapacityType.SPOT).hourly == 0.01
    assert prices.memory_rate(CapacityType.SPOT).hourly == pytest.approx(0.0025)
    assert prices.gpu_price("H100").as_of == "2026-01-01"
    with pytest.raises(MissingPriceError, match="no reserved price"):
        prices.gpu_rate("NVIDIA-A100-SXM4-80GB", CapacityType.RESERVED)


BAD = {
    "negative-price": (
        ("      on-demand: 9.5", "      on-demand: -1"),
        "spec.gpus[0].on-demand",
        "greater than or equal to 0",
    ),
    "not-a-number": (
        ("cpu: {on-demand: 0.04", "cpu: {on-demand: cheap"),
        "spec.cpu.on-demand",
        "'cheap'",
    ),
    "missing-on-demand": (
        ("memory: {on-demand: 0.005}", "memory: {spot: 0.005}"),
        "spec.memory.on-demand",
        "required, but missing",
    ),
    "unknown-capacity-type": (
        ("memory: {on-demand: 0.005}", "memory: {on-demand: 0.005, preemptible: 0.001}"),
        "spec.memory.preemptible",
        "unknown field",
    ),
    "misspelt-field": (("      asOf:", "      as_of:"), "spec.gpus[0].as_of", "asOf"),
    "bad-date": (('asOf: "2026-01-01"', 'asOf: "last year"'), "spec.gpus[0].asOf", "date"),
    "estimate-above-one": (
        ("{spot: 0.5}", "{spot: 1.5}"),
        "spec.estimates.spot",
        "less than or equal to 1",
    ),
    "bad-currency": (("currency: EUR", "currency: euro"), "spec.currency", "pattern"),
    "same-model-twice": (
        ("model: A100-SXM4-80GB", "model: nvidia h100"),
        "spec.gpus[1].model",
        "priced already, in spec.gpus[0]",
    ),
    "wrong-kind": (("kind: PriceList", "kind: ConfigMap"), "kind", "expected a PriceList"),
    "wrong-api-version": (("gpufleet.dev/v1alpha1", "gpufleet.dev/v9"), "apiVersion", "v9"),
}


@pytest.mark.parametrize(("edit", "field", "message"), BAD.values(), ids=BAD.keys())
def test_a_bad_price_list_names_the_file_and_field(
    write_file: WriteFile, edit: tuple[str, str], field: str, message: str
) -> None:
    old, new = edit
    assert old in GOOD
    path = write_file("prices.yaml", GOOD.replace(old, new, 1))
    with pytest.raises(InputError) as error:
        read_prices(path)
    assert error.value.source == str(path)
    assert error.value.field == field
    assert message in error.value.reason


@pytest.mark.parametrize(
    ("text", "message"),
    [("", "found no objects"), (GOOD + "---\n" + GOOD, "found 2 objects")],
    ids=["empty-file", "two-lists"],
)
def test_a_price_file_holds_one_list(write_file: WriteFile, text: str, message: str) -> None:
    path = write_file("prices.yaml", text)
    with pytest.raises(InputError, match=message) as error:
        read_prices(path)
    assert error.value.source == str(path)


def test_a_missing_file_is_an_input_error() -> None:
    with pytest.raises(InputError, match="cannot open"):
        read_prices("/nonexistent/prices.yaml")


#: Every cluster the examples and ``serve`` use (a GPU model the default list does not price
#: would make every run of it warn "no price for GPU model ...", and bill its GPUs at nothing).
#: The Alibaba-like cluster is left out: it keeps the trace's own model codes (G2, G3, P100,
#: V100M16...), which no public price list names.
BUNDLED_CLUSTERS = sorted(
    str(path)
    for root in (Path("examples"), Path("gpufleet/data/serve"))
    for path in root.rglob("*.yaml")
    if "kind: ClusterSpec" in path.read_text(encoding="utf-8")
    or ("kind: Node\n" in path.read_text(encoding="utf-8") and "cluster" in str(path))
)


@pytest.mark.parametrize("path", BUNDLED_CLUSTERS, ids=BUNDLED_CLUSTERS)
def test_the_default_prices_price_every_gpu_model_a_bundled_cluster_uses(path: str) -> None:
    prices = default_prices()
    models = {node.gpu_model for node in read_cluster(path) if node.gpu_model}
    for model in sorted(models):
        for capacity in (CapacityType.ON_DEMAND, CapacityType.SPOT):
            assert prices.gpu_rate(model, capacity).hourly > 0, f"{path}: {model} {capacity}"


def test_the_bundled_clusters_are_found() -> None:
    assert "examples/clusters/small.yaml" in BUNDLED_CLUSTERS
    assert "gpufleet/data/serve/cluster.yaml" in BUNDLED_CLUSTERS
