"""`gpuc watchdog serve --host 0.0.0.0` warns that plain HTTP carries the admin token, and says how to put
TLS in front. On loopback it says nothing of the kind."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_links_never_logged import start_serve, wait_for_url

from gpuc.functions.server import plain_http_warning


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20", "203.0.113.7", "watchdog.example.com"])
def test_any_host_beyond_loopback_is_warned(host: str) -> None:
    warning = plain_http_warning(host, 8787)
    assert warning is not None
    assert "plain HTTP" in warning and "admin token" in warning
    assert "TLS" in warning and "127.0.0.1:8787" in warning and "gpuc watchdog deploy" in warning


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"])
def test_loopback_is_not_warned(host: str) -> None:
    assert plain_http_warning(host) is None


def test_serve_on_every_interface_warns_on_stderr(tmp_path: Path) -> None:
    process, stderr = start_serve(tmp_path, "--host", "0.0.0.0")
    try:
        wait_for_url(stderr, process)
    finally:
        process.terminate()
        process.wait(timeout=30)
    said = stderr.read_text()
    assert "WARNING: listening on 0.0.0.0 in plain HTTP" in said, said
    assert "caddy reverse-proxy" in said and "loopback: local pods only" not in said
    assert said.count("plain HTTP") == 2  # the banner, and the log a later reader sees


def test_serve_on_loopback_does_not_warn(tmp_path: Path) -> None:
    process, stderr = start_serve(tmp_path)
    try:
        wait_for_url(stderr, process)
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert "plain HTTP" not in stderr.read_text()
