"""The local watchdog's own log lines name the request and the consequence."""

from __future__ import annotations

import logging

import pytest

from gpuc.functions.server import READ_TIMEOUT_S, _Handler


def test_a_timed_out_connection_is_logged_with_who_and_what_it_cost(caplog: pytest.LogCaptureFixture) -> None:
    handler = _Handler.__new__(_Handler)
    handler.client_address = ("203.0.113.7", 51234)
    with caplog.at_level(logging.INFO, logger="gpuc.functions"):
        handler.log_message("Request timed out: %r", TimeoutError("timed out"))
    line = caplog.records[-1].getMessage()
    assert "203.0.113.7" in line and f"{READ_TIMEOUT_S:.0f} s" in line
    assert "nothing was stored" in line and "Request timed out" not in line
