"""The status page's handlers without a browser: the session link, refusals, what each pod's line says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakes.watchdog import ADMIN, World

from gpuc.core import api
from gpuc.core.clock import FakeClock
from gpuc.functions.actions.status_page import next_step, outcome
from gpuc.functions.edge import Response
from gpuc.functions.links import ALL_PODS, PAGE_LIFE_MAX_S, link_key, mint, new_claim
from gpuc.functions.reaper.record import ReaperMeta


def session(world: World, life_s: int = 3600, verb: str = "page", pod: str = ALL_PODS) -> str:
    return mint(link_key(world.store), new_claim(verb, pod, world.now, life_s=life_s))  # type: ignore[arg-type]


def open_page(world: World, token: str) -> Response:
    return world.call("GET", f"/p/{token}")


def page_link(world: World, body: bytes, token: str = ADMIN) -> Response:
    return world.call("POST", "/v1/page-link", body, {"Authorization": f"Bearer {token}", "Host": "wd.example"})


def test_the_page_shows_each_pod_and_the_reapers_pass(world: World) -> None:
    world.register("pod-a", gpu="RTX 4090", price_per_hour=0.5)
    world.ping("pod-a")
    world.reap()
    world.clock.advance(3600)
    world.ping("pod-a")
    got = open_page(world, session(world))
    assert got.status == 200 and got.html is not None
    for text in ("pod-a", "RTX 4090", "$0.50/h", "about $0.50", "Deadline", "ends at its deadline", "extend 2 h"):
        assert text in got.html, text
    assert "if it does not ping by" not in got.html  # pinging: the silence rule is no threat to it
    assert got.page_headers["Referrer-Policy"] == "no-referrer"


def test_a_blind_provider_is_said_and_its_pods_wait(world: World) -> None:
    world.register("pod-a")
    meta = ReaperMeta(
        last_run=world.now, blind=("fake",), blind_since={"fake": world.now - 600}, blind_why={"fake": "HTTP 503"}
    )
    assert next_step(world.settings, world.pod("pod-a"), meta, world.now).startswith(
        "nothing while fake cannot be read"
    )
    world.store.put_meta("reaper", meta.value(), None)
    html = open_page(world, session(world)).html or ""
    assert "Cannot read fake since" in html and "HTTP 503" in html


@pytest.mark.parametrize(
    ("mangle", "status", "words"),
    [
        (lambda t: t[:-1] + ("A" if t[-1] != "A" else "B"), 403, "not made by this watchdog"),
        (lambda t: "not-a-link", 404, "not a gpuc link"),
    ],
)
def test_an_altered_or_malformed_session_is_a_clear_4xx_page(
    world: World, mangle: object, status: int, words: str
) -> None:
    world.register("pod-a")
    assert callable(mangle)
    got = open_page(world, mangle(session(world)))
    assert got.status == status and words in (got.html or "")
    assert "pod-a" not in (got.html or "")


def test_an_expired_session_is_410_and_shows_nothing(world: World, clock: FakeClock) -> None:
    world.register("pod-a")
    token = session(world, life_s=60)
    clock.advance(60)
    got = open_page(world, token)
    assert got.status == 410 and "expired" in (got.html or "") and "pod-a" not in (got.html or "")


def test_an_action_link_does_not_open_the_page(world: World) -> None:
    world.register("pod-a")
    got = open_page(world, session(world, verb="keep", pod="pod-a"))
    assert got.status == 404 and "pod-a" not in (got.html or "")


def test_the_page_changes_nothing(world: World) -> None:
    world.register("pod-a")
    world.ping("pod-a")
    before = world.pod("pod-a")
    for _ in range(3):
        assert open_page(world, session(world)).status == 200
    assert world.pod("pod-a") == before


def test_page_link_mints_a_session_of_the_asked_life(world: World) -> None:
    got = page_link(world, b'{"for_s": 7200}')
    assert got.status == 200, got.body
    url = str(got.body["url"])
    assert url.startswith("https://wd.example/p/") and got.body["expires_at"] == int(world.now) + 7200
    assert open_page(world, url.rsplit("/", 1)[1]).status == 200


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (json.dumps({"for_s": PAGE_LIFE_MAX_S + 1}).encode(), "for_s is too large"),
        (b'{"for_s": 0}', "for_s is too small"),
        (b'{"for_s": "2h"}', "for_s has the wrong type"),
        (b"", "body is empty"),
    ],
)
def test_page_link_refuses_bad_input_with_a_4xx(world: World, body: bytes, words: str) -> None:
    got = page_link(world, body)
    assert got.status == 400 and words in str(got.body["error"]), got.body
    assert world.store.get_meta("link_key") is None  # nothing stored, not even the key


def test_page_link_needs_the_admin_token(world: World) -> None:
    assert page_link(world, b'{"for_s": 60}', token="wrong").status == 401


def test_no_secret_reaches_the_page(world: World, home: Path) -> None:
    token = world.register("pod-a", name="gpuc-pod-a")
    world.ping("pod-a")
    html = open_page(world, session(world)).html or ""
    for secret in (ADMIN, token, world.pod("pod-a").key, *world.settings.secret_values()):
        assert not secret or secret not in html


def test_a_pods_own_words_are_escaped(world: World) -> None:
    world.register("pod-a", experiment="<script>alert(1)</script>")
    html = open_page(world, session(world)).html or ""
    assert "<script>" not in html and "&lt;script&gt;" in html


def test_a_healthy_idle_pod_shows_its_idle_end_not_the_silence_rule(world: World) -> None:
    """What will really happen next, and when: the agent's idle destroy, from its heartbeat."""
    world.register("pod-a")
    world.ping("pod-a", idle_minutes=5.0, job_running=False)
    world.reap()  # the provider's word on it: running
    meta = ReaperMeta(last_run=world.now)
    step = next_step(world.settings, world.pod("pod-a"), meta, world.now)
    left = world.settings.idle_destroy_s / 60 - 5
    assert step.startswith("ends itself idle at") and f"in {left:.0f} min" in step, step
    world.ping("pod-a", idle_minutes=0.0, job_running=True)  # busy: the deadline is next
    assert next_step(world.settings, world.pod("pod-a"), meta, world.now).startswith("ends at its deadline")
    world.clock.advance(3 * world.settings.heartbeat_interval_s + 1)  # stopped pinging: the silence rule is next
    assert "if it does not ping by" in next_step(world.settings, world.pod("pod-a"), meta, world.now)


def test_ended_lately_shows_experiment_outcome_and_cost(world: World) -> None:
    world.register("pod-a", experiment="llama-sweep", price_per_hour=2.0, started_at=world.now - 3600)
    world.ping("pod-a")
    assert world.event("pod-a", "job_exit", "job exited with code 0", exit_code=0, end_at=world.now).status == 200
    html = open_page(world, session(world)).html or ""
    ended = html.split("Ended lately", 1)[1]
    for text in ("Experiment", "Outcome", "Cost", "llama-sweep", "its job ended", "about $2.00"):
        assert text in ended, (text, ended)


def test_ended_lately_says_whether_the_job_failed(world: World) -> None:
    """Once, "its job ended" did not tell a failed job from a good one; the push's exit code does."""
    world.register("pod-f", experiment="bad-lr", price_per_hour=2.0, started_at=world.now - 3600)
    world.ping("pod-f")
    world.register("pod-g", experiment="good-lr", price_per_hour=2.0, started_at=world.now - 3600)
    world.ping("pod-g")
    failed = "job exited with code 3 after 60s; last line: gpuc: exit code 0."  # the pod's words lie
    assert world.event("pod-f", "job_exit", failed, exit_code=3, end_at=world.now).status == 200
    assert world.event("pod-g", "job_exit", "job exited with code 0", exit_code=0, end_at=world.now).status == 200
    ended = (open_page(world, session(world)).html or "").split("Ended lately", 1)[1]
    assert "its job ended: FAILED (exit 3)" in ended and "its job ended: OK" in ended, ended


def test_a_pod_up_destroyed_as_it_stopped_is_not_said_to_be_ended_by_down(world: World) -> None:
    """Ctrl-C (or a failed install) during `up`: `up` destroys what it created and records the end as its own;
    the page names that, with why, never "ended by `gpuc down`"."""
    world.register("pod-c")
    end = api.EndRequest(end_at=world.now, by="up", note="up stopped early: Ctrl-C (SIGINT)")
    assert world.admin("POST", "/v1/pods/pod-c/end", end).status == 200
    world.register("pod-d")
    assert world.admin("POST", "/v1/pods/pod-d/end", api.EndRequest(end_at=world.now, by="down")).status == 200
    assert outcome(world.pod("pod-c"), world.now).startswith(
        "destroyed by `gpuc up` as it stopped early (Ctrl-C (SIGINT))"
    )
    assert outcome(world.pod("pod-d"), world.now).startswith("ended by `gpuc down`")
    html = open_page(world, session(world)).html or ""
    assert "destroyed by `gpuc up` as it stopped early (Ctrl-C (SIGINT))" in html.replace("&#x60;", "`"), html
