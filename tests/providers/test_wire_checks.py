"""The providers' answers are read by pydantic models (core/providers/runpod.py, vast.py, on the base
`ProviderAnswer` of core/providers/common.py). The plain lax models below are the REFERENCE they are held
to: what gpuc read before (first through these very models, then through hand checks held to them). The
providers' models read what the reference reads, with the same values, and refuse what it refuses; the
intended differences are stricter: a bool where a number belongs is refused (lax mode counts it as 1), and
so is a float that is NaN or infinite (lax mode reads "nan" as text as NaN, which passes every guard).
The documented answers (fixtures) read the same in both. An unknown field is ignored in both: providers
add fields over time.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from fakes.providers import FIXTURES
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, ValidationError

from gpuc.core.errors import ProviderSchemaError
from gpuc.core.providers import runpod_catalog, runpod_graphql, runpod_pods, vast_instances, vast_offers
from gpuc.core.providers.common import ProviderAnswer


class Wire(BaseModel):
    model_config = ConfigDict(extra="ignore")


class V2Port(Wire):
    private: int | None = None
    public: int | None = None
    type: str | None = None
    ip: str | None = None


class V2RuntimeGpu(Wire):
    id: str | None = None
    util: float | None = None


class V2Runtime(Wire):
    uptime: float | None = None
    ports: list[V2Port] | None = None
    gpus: list[V2RuntimeGpu] | None = None


class V2Gpu(Wire):
    id: str | None = None
    count: int | None = None


class V2Endpoint(Wire):
    host: str | None = None
    port: int | None = None


class V2Ssh(Wire):
    direct: V2Endpoint | None = None


class V2Persistent(Wire):
    size: float | None = None


class V2Mounts(Wire):
    persistent: V2Persistent | None = None


class V2Pod(Wire):
    id: str
    name: str | None = None
    status: str | None = None
    env: dict[str, Any] | None = None
    gpu: V2Gpu | None = None
    cost: float | None = None
    createdAt: str | None = None
    runtime: V2Runtime | None = None
    ssh: V2Ssh | None = None
    mounts: V2Mounts | None = None


class CatalogPrice(Wire):
    secure: float | None = None
    community: float | None = None


class CatalogMax(Wire):
    secure: int | None = None
    community: int | None = None


class CatalogGpu(Wire):
    id: str
    name: str | None = None
    memory: float | None = None
    secure: bool | None = None
    community: bool | None = None
    price: CatalogPrice | None = None
    maxCount: CatalogMax | None = None
    availability: str | None = None


class UserBalance(Wire):
    clientBalance: float
    currentSpendPerHr: float | None = None
    spendLimit: float | None = None
    notifyPodsStale: bool | None = None
    notifyPodsGeneral: bool | None = None
    notifyLowBalance: bool | None = None


class VastInstance(Wire):
    id: int
    actual_status: str | None = None
    intended_status: str | None = None
    cur_state: str | None = None
    status_msg: str | None = None
    label: str | None = None
    extra_env: list[Any] | None = None
    gpu_name: str | None = None
    num_gpus: int | None = None
    gpu_util: float | None = None
    dph_total: float | None = None
    storage_total_cost: float | None = None
    disk_space: float | None = None
    storage_cost: float | None = None
    start_date: float | None = None
    uptime_mins: float | None = None
    is_bid: bool | None = None
    ssh_host: str | None = None
    ssh_port: int | None = None
    public_ipaddr: str | None = None
    ports: dict[str, Any] | list[Any] | None = None


class VastOffer(Wire):
    id: int
    gpu_name: str
    num_gpus: int = 1
    dph_total: float
    min_bid: float | None = None
    reliability2: float | None = None
    reliability: float | None = None
    inet_down: float | None = None
    gpu_mem_bw: float | None = None
    cuda_max_good: float | None = None
    geolocation: str | None = None
    verification: str | None = None
    inet_down_cost: float | None = None
    storage_cost: float | None = None


class VastUser(Wire):
    credit: float


PAIRS: list[tuple[type[ProviderAnswer], type[BaseModel]]] = [
    (runpod_pods.V2Pod, V2Pod),
    (runpod_catalog.CatalogGpu, CatalogGpu),
    (runpod_graphql.UserBalance, UserBalance),
    (vast_instances.VastInstance, VastInstance),
    (vast_offers.VastOffer, VastOffer),
    (vast_instances.VastUser, VastUser),
]


def plain(value: Any) -> Any:
    """Both readings as JSON-like values (records as dicts), to compare them with their types."""
    if isinstance(value, BaseModel):
        return {name: plain(getattr(value, name)) for name in type(value).model_fields}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def bools_as_numbers(raw: Any) -> Any:
    if isinstance(raw, bool):
        return int(raw)
    if isinstance(raw, list):
        return [bools_as_numbers(v) for v in raw]
    if isinstance(raw, dict):
        return {k: bools_as_numbers(v) for k, v in raw.items()}
    return raw


def read(light: type[ProviderAnswer], raw: Any) -> ProviderAnswer | None:
    try:
        return light.model_validate(raw)
    except ValidationError:
        return None


def refused_only_for_a_bool(light: type[ProviderAnswer], raw: Any) -> bool:
    """The one intended difference: with every true/false written 1/0 instead, the provider's model reads
    it (a bool field takes 1/0 too, so only a bool in a number field made the difference)."""
    return read(light, bools_as_numbers(raw)) is not None


def not_finite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, list):
        return any(not_finite(v) for v in value)
    if isinstance(value, dict):
        return any(not_finite(v) for v in value.values())
    return False


def compare(light: type[ProviderAnswer], model: type[BaseModel], raw: Any) -> None:
    ours = read(light, raw)
    try:
        theirs: Any = model.model_validate(raw)
    except ValidationError:
        theirs = None
    if ours is not None:
        assert theirs is not None, f"the provider's model read what the reference refused: {raw!r}"
        assert plain(ours) == plain(theirs)
    elif theirs is not None and not not_finite(plain(theirs)):
        assert refused_only_for_a_bool(light, raw), f"the provider's model refused what the reference read: {raw!r}"


# R5's fields (runpodctl's GetUser), as the emulator answers them: no balance fixture was captured.
BALANCE = {"clientBalance": 41.5, "currentSpendPerHr": 0.69, "spendLimit": 80, "notifyPodsStale": True,
           "notifyPodsGeneral": False, "notifyLowBalance": True}  # fmt: skip


def fixture_objects(value: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if isinstance(value, dict):
        found.append(value)
        for inner in value.values():
            found += fixture_objects(inner)
    elif isinstance(value, list):
        for inner in value:
            found += fixture_objects(inner)
    return found


@pytest.mark.parametrize(("light", "model"), PAIRS, ids=[p[0].__name__ for p in PAIRS])
def test_every_documented_answer_reads_as_pydantic_read_it(light: type[ProviderAnswer], model: type[BaseModel]) -> None:
    read = 0
    documents = [(p.name, json.loads(p.read_text(encoding="utf-8"))) for p in sorted(FIXTURES.glob("*.json"))]
    for name, document in [*documents, ("balance", BALANCE)]:
        for item in fixture_objects(document):
            compare(light, model, item)
            try:
                model.model_validate(item)
            except ValidationError:
                continue
            read += 1
            assert plain(light.model_validate(item)) == plain(model.model_validate(item)), name
    assert read > 0


JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=False),
    st.sampled_from(["", "0", "1", "2.5", "7", " 3 ", "true", "no", "x", "1e3", "-4", "4.0"]),
    st.text(max_size=4),
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=6,
)


def documents(model: type[BaseModel]) -> st.SearchStrategy[dict[str, Any]]:
    names = list(model.model_fields)
    return st.dictionaries(st.sampled_from([*names, "unknown"]), JSON_VALUES, max_size=len(names) + 1)


@pytest.mark.parametrize(("light", "model"), PAIRS, ids=[p[0].__name__ for p in PAIRS])
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_never_more_lenient_than_pydantic(
    light: type[ProviderAnswer], model: type[BaseModel], data: st.DataObject
) -> None:
    compare(light, model, data.draw(documents(model)))


def test_the_references_here_are_the_models_the_providers_read() -> None:
    for light, model in PAIRS:
        assert list(light.model_fields) == list(model.model_fields), light.__name__
        required = [name for name, f in light.model_fields.items() if f.is_required()]
        assert required == [n for n, f in model.model_fields.items() if f.is_required()], light.__name__
        assert light.model_config.get("extra") == "ignore", light.__name__  # providers add fields over time


@pytest.mark.parametrize("bad", [True, False, "1.2.3", [], {}, "nan?", "nan", "-inf", float("nan"), "1e999"])
def test_a_price_that_is_not_a_number_raises_never_reads_as_none(bad: Any) -> None:
    with pytest.raises(ProviderSchemaError, match=r"unexpected v2 pod: cost") as caught:
        runpod_pods.parse(runpod_pods.V2Pod, {"id": "p1", "cost": bad}, "v2 pod")
    assert "API may have changed" in str(caught.value.hint)


NUMBERS = (int, float, int | None, float | None)


@pytest.mark.parametrize(("light", "model"), PAIRS, ids=[p[0].__name__ for p in PAIRS])
def test_a_bool_where_a_number_belongs_is_refused_never_counted_as_one(
    light: type[ProviderAnswer], model: type[BaseModel]
) -> None:
    """Every number field the reference declares (a price, a count, an id), whatever the check above drew."""
    base = {name: MINIMAL[name] for name in model.model_fields if name in MINIMAL}
    if "id" in base and model.model_fields["id"].annotation is int:
        base["id"] = 12
    assert read(light, base) is not None
    numbers = [name for name, f in model.model_fields.items() if f.annotation in NUMBERS]
    for name in numbers:
        assert read(light, {**base, name: 1}) is not None, name
        for flag in (True, False):
            assert read(light, {**base, name: flag}) is None, (light.__name__, name, flag)


NESTED: list[Any] = [
    {"gpu": {"count": 1}}, {"runtime": {"uptime": 1}}, {"runtime": {"ports": [{"private": 22, "public": 1}]}},
    {"runtime": {"gpus": [{"util": 1}]}}, {"ssh": {"direct": {"port": 1}}}, {"mounts": {"persistent": {"size": 1}}},
]  # fmt: skip


@pytest.mark.parametrize("doc", NESTED, ids=[next(iter(d)) + str(n) for n, d in enumerate(NESTED)])
def test_a_bool_in_a_nested_number_is_refused(doc: dict[str, Any]) -> None:
    assert read(runpod_pods.V2Pod, {"id": "p1", **doc}) is not None
    assert read(runpod_pods.V2Pod, {"id": "p1", **json.loads(json.dumps(doc).replace(": 1", ": true"))}) is None
    assert read(runpod_catalog.CatalogGpu, {"id": "g", "price": {"secure": True}}) is None


def test_an_unreadable_answer_raises_never_reads_as_nothing() -> None:
    unreadable: list[object] = [[], None, "pods", {"id": None}, {"cost": 1.0}]
    for raw in unreadable:
        with pytest.raises(ProviderSchemaError, match="unexpected v2 pod"):
            runpod_pods.parse(runpod_pods.V2Pod, raw, "v2 pod")
    with pytest.raises(ProviderSchemaError, match="unexpected user: credit"):
        vast_instances.parse(vast_instances.VastUser, {"balance": 3.0}, "user")


def test_a_read_answer_is_read_only_and_prints_no_value() -> None:
    """A pod's env travels in its listing (and Vast's /users/current holds the key): never in a repr."""
    pod = runpod_pods.V2Pod.model_validate({"id": "p1", "env": {"HF_TOKEN": "hf_s3cret"}, "cost": "0.5"})
    assert pod.cost == 0.5 and pod.env == {"HF_TOKEN": "hf_s3cret"}
    for shown in (repr(pod), str(pod), f"{pod}", repr([pod])):
        assert "s3cret" not in shown and "0.5" not in shown and "env" in shown
    with pytest.raises(ValidationError):
        pod.cost = 1.0  # type: ignore[misc]
    with pytest.raises(ProviderSchemaError) as caught:
        runpod_pods.parse(runpod_pods.V2Pod, {"id": "p1", "env": "hf_s3cret"}, "v2 pod")
    assert "s3cret" not in str(caught.value)


TRICKY: list[Any] = [
    None, True, False, 0, 1, 2, -3, 2**53, 2.5, 4.0, -0.0, 1e300, 2.0**63, 2.0**62,
    "", "0", "1", "2.5", "4.0", " 7 ", "4.", "4.00", "+4", "1_000", "1e3", "\u0663", "0x10",
    "inf", "-inf", "nan", "NaN", "1e999", float("inf"), float("nan"),
    "yes", "off", " true ", "TRUE", "x",
    [], [1], ["a"], [{}], {}, {"a": 1}, {"22/tcp": [{"HostPort": "1"}]},
]  # fmt: skip
MINIMAL: dict[str, Any] = {"id": "p1", "clientBalance": 1.0, "gpu_name": "RTX 4090", "dph_total": 0.5, "credit": 3.0}


@pytest.mark.parametrize(("light", "model"), PAIRS, ids=[p[0].__name__ for p in PAIRS])
def test_each_field_against_each_tricky_value(light: type[ProviderAnswer], model: type[BaseModel]) -> None:
    """Deterministic, every field times every value: the random test above may miss a rare one."""
    base = {name: MINIMAL[name] for name in model.model_fields if name in MINIMAL}
    if "id" in base and model.model_fields["id"].annotation is int:
        base["id"] = 12
    for name in model.model_fields:
        for value in TRICKY:
            compare(light, model, {**base, name: value})
        compare(light, model, {k: v for k, v in base.items() if k != name})
