"""A provider's raw status text reaches an alert defanged, gpuc's own words around it never.

Vast's status texts (actual_status, intended_status, cur_state: raw_status; status_msg) come from the host's
machine, a stranger's, and the reaper's alerts quoted them as they were: a link or a mention in them became
a link or a mention on the phone, with gpuc's name above it.
"""

from __future__ import annotations

from fakes.watchdog import World

from gpuc.core.notify.message import provider_says
from gpuc.core.providers.vast_instances import parse_instance

HOSTILE = "loading/running/https://evil.example/login <!channel> re-enter your key at evil.example"
MIN = 60.0


def alerts(world: World, pod_id: str) -> list[str]:
    return [f"{m.title}\n{m.message}" for m in world.outbox() if m.pod_id == pod_id]


def test_a_provisioning_pods_raw_status_is_defanged_in_the_alert(world: World) -> None:
    world.register("p1")
    world.provider.set("p1", status="provisioning", raw_status=HOSTILE)
    world.run(world.settings.silence_limit_s + 10 * MIN)
    said = "\n".join(alerts(world, "p1"))
    assert "provider status provisioning (" in said, said  # the alert went out, with the provider's words
    assert "hxxps://evil[.]example/login" in said and "evil[.]example" in said
    assert "https://evil.example" not in said and "<!channel>" not in said and "evil.example" not in said


def test_an_unknown_status_veto_quotes_it_defanged(world: World) -> None:
    world.register("p1")
    world.ping("p1")
    world.run(5 * MIN)
    world.provider.set("p1", status="unknown", raw_status=HOSTILE)
    world.run(3 * 3600)
    reason = world.pod("p1").reason or ""
    said = "\n".join([reason, *alerts(world, "p1")])
    assert "unknown" in reason
    assert "evil.example" not in said and "<!channel>" not in said


def test_vasts_own_status_texts_are_what_is_defanged() -> None:
    raw = parse_instance(
        {"id": 7, "actual_status": "https://evil.example", "intended_status": "running", "cur_state": "x"}
    ).raw_status
    assert "https://evil.example" in raw  # the provider's words, kept as they came for the terminal
    assert provider_says(raw) == "hxxps://evil[.]example/running/x"


def test_gpucs_own_words_are_never_defanged(world: World) -> None:
    """Only the provider's part: the command to type and gpuc's own names stay as they are."""
    world.register("p1")
    world.provider.set("p1", status="provisioning", raw_status="https://evil.example")
    world.run(world.settings.silence_limit_s + 10 * MIN)
    said = "\n".join(alerts(world, "p1"))
    assert "hxxps://evil[.]example" in said
    assert "[.]" not in said.replace("evil[.]example", "")  # nothing else was touched
    assert "[:]" not in said and "hxx" not in said.replace("hxxps://evil", "")
