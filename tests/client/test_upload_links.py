"""A link the laptop sends, the pod makes: the pod makes links only by core.untar's
rule, judged without following the other links; a link the laptop accepted and the pod refused (`x ->
b/../c`) failed `up` after the rent, a pod billed for nothing. The laptop now judges each link by the same
rule before anything is rented, and refuses one that fails it, naming it and why."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuc.client.onpod.upload import collect, prepare, upload
from gpuc.core.errors import ConfigError, GpucError
from gpuc.core.models import PodSpec
from gpuc.core.providers.local import LocalProvider
from gpuc.core.settings import Settings


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "b").mkdir(parents=True)
    (root / "sub" / "deep").mkdir(parents=True)
    (root / "c").write_text("c\n")
    (root / "train.py").write_text("print('hi')\n")
    return root


def test_a_link_with_dotdot_after_a_name_is_refused_before_anything_is_rented(project: Path) -> None:
    (project / "x").symlink_to("b/../c")  # resolves to c on the laptop; the pod refuses to make it
    with pytest.raises(ConfigError) as caught:
        prepare(project, max_mb=10)
    said = caught.value.message
    assert "x -> 'b/../c'" in said and "`..` after a name" in said and "nothing was rented" in said
    assert ".gpucignore" in (caught.value.hint or "") and "b/../c` is `c`" in (caught.value.hint or "")


@pytest.fixture
def local_pod(tmp_path: Path) -> tuple[LocalProvider, str]:
    home = tmp_path / "home"
    provider = LocalProvider(home, settings=Settings(home=home, local_boot_s=0.0))
    pod = provider.create(PodSpec(experiment="up", run_id="run0001", provider="local", gpu_type="RTX 4090"))
    return provider, pod.id


# (link, target): each resolves inside the project on the laptop
LINKS = [
    ("x", "c"),
    ("x", "./c"),
    ("x", "b/../c"),
    ("sub/x", "../c"),
    ("sub/deep/x", "../../c"),
    ("sub/x", "../b/../c"),
    ("sub/deep/x", "../../sub/../c"),
    ("sub/x", "deep/.."),
]


@pytest.mark.parametrize(("name", "target"), LINKS, ids=[f"{n}->{t}" for n, t in LINKS])
def test_every_link_the_laptop_accepts_the_pod_makes(
    project: Path, local_pod: tuple[LocalProvider, str], name: str, target: str
) -> None:
    """What the laptop lets through, the pod's real unpack makes: no link can fail `up` after the rent."""
    (project / name).symlink_to(target)
    try:
        bundle = collect(project)
    except ConfigError as refused:
        assert name in refused.message  # refused on the laptop, named: nothing rented
        return
    assert bundle.links == {name: target}
    provider, pod_id = local_pod
    try:
        upload(provider.access(pod_id), bundle, lambda _line: None)
    except GpucError as exc:
        pytest.fail(f"the laptop sent {name} -> {target}, the pod refused it after the rent: {exc.message}")
    made = provider.paths(pod_id).workspace / name
    assert made.is_symlink() and (made.read_text() == "c\n" or made.is_dir())
