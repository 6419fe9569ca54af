"""core/tls.py trusts what httpx's own context would (the roots gpuc's clients share)."""

from __future__ import annotations

from collections.abc import Iterator

import certifi
import httpx
import pytest

from gpuc.core.tls import tls_context


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    tls_context.cache_clear()
    yield
    tls_context.cache_clear()


@pytest.mark.parametrize("cert_file", [None, certifi.where()], ids=["certifi", "SSL_CERT_FILE"])
def test_the_shared_context_has_httpxs_roots(monkeypatch: pytest.MonkeyPatch, cert_file: str | None) -> None:
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    if cert_file is None:
        monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    else:
        monkeypatch.setenv("SSL_CERT_FILE", cert_file)
    ours, theirs = tls_context(), httpx.create_ssl_context()
    assert ours.get_ca_certs() == theirs.get_ca_certs() and ours.get_ca_certs()
    assert ours.verify_mode == theirs.verify_mode and ours.check_hostname == theirs.check_hostname
    assert tls_context() is ours  # loaded once per process
