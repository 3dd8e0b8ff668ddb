"""Expiry, dedupe while_active and debounce against a real sundiald (docs/semantics.md, "Flow
control"): ttl_ms and dedupe as queue settings, a short ttl canceled as expired by the server's
timer (polled with a deadline), a debounce replacing a pending message, a released id."""

import pytest
from conftest import wait_for

from sundial import SundialError


def test_queue_settings_carry_ttl_and_dedupe(client, queue):
    q = client.create_queue(queue, ttl_ms=60000, dedupe="while_active")
    assert (q.ttl_ms, q.dedupe) == (60000, "while_active")
    assert client.update_queue(queue, ttl_ms=0, dedupe="keep").settings["dedupe"] == "keep"
    with pytest.raises(SundialError) as e:
        client.create_queue(queue + "-bad", dedupe="sometimes")
    assert e.value.code == "INVALID_ARGUMENT"


def test_a_message_past_its_ttl_is_canceled_as_expired(client, queue):
    client.enqueue(queue, b"job", id="short", ttl_ms=200)
    m = client.get(queue, "short")
    assert m.expires_at == m.enqueued_at + 200
    wait_for(lambda: client.get(queue, "short").state == "canceled", timeout=10)
    m = client.get(queue, "short")
    assert m.last_error == "expired"
    assert [e.event for e in client.history(queue, "short").entries] == ["enqueued", "expired"]


def test_debounce_replaces_a_pending_message_and_dedupe_releases_a_terminal_id(client, queue):
    client.create_queue(queue, dedupe="while_active")
    client.enqueue(queue, b"first", id="a")
    r = client.enqueue(queue, b"second", id="a", debounce_ms=60000)
    assert (r.duplicate, r.version) == (False, 2)
    m = client.get(queue, "a")
    assert (m.state, m.payload) == ("invisible", b"second")
    [s] = client.browse(queue, "invisible").messages
    assert s.expires_at == 0
    client.cancel(queue, "a")
    r = client.enqueue(queue, b"third", id="a")
    assert (r.duplicate, r.version) == (False, 1)
    assert client.get(queue, "a").state == "pending"
