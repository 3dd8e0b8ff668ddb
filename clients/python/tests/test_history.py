"""History against a real sundiald (docs/semantics.md, "History"): a dequeue's worker_id, a
note and the completion in ``Client.history``; a Worker's leases name it; history_max 0."""

import threading

import pytest
from conftest import wait_for

from sundial import History, SundialError, Worker


def test_worker_id_note_and_completion_are_in_the_history(client, queue):
    client.enqueue(queue, b"job", id="a")
    [m] = client.dequeue(queue, worker_id="host-7")
    client.note(queue, "a", m.lease_token, "half way")
    client.complete(queue, "a", m.lease_token)
    h = client.history(queue, "a")
    assert isinstance(h, History)
    assert h.dropped == 0
    assert [(e.event, e.actor, e.worker_id, e.text) for e in h.entries] == [
        ("enqueued", "request", None, None),
        ("leased", "worker", "host-7", "host-7"),
        ("noted", "worker", "host-7", "half way"),
        ("completed", "worker", "host-7", None),
    ]
    assert [e.lease_token for e in h.entries[1:]] == [m.lease_token] * 3
    assert (h.entries[1].from_state, h.entries[1].to_state, h.entries[1].attempt) == (
        "pending", "running", 1)


def test_note_needs_the_lease_and_a_queue_that_keeps_history(client, queue):
    client.enqueue(queue, id="a")
    [m] = client.dequeue(queue)
    with pytest.raises(SundialError) as e:
        client.note(queue, "a", m.lease_token + 1, "x")
    assert e.value.code == "FAILED_PRECONDITION"
    quiet = queue + "-quiet"
    assert client.create_queue(quiet, history_max=0).history_max == 0
    client.enqueue(quiet, id="b")
    [q] = client.dequeue(quiet)
    with pytest.raises(SundialError) as e:
        client.note(quiet, "b", q.lease_token, "x")
    assert e.value.code == "FAILED_PRECONDITION"
    assert client.history(quiet, "b").entries == []


def test_a_worker_names_itself_in_the_history_of_what_it_leases(server, client, queue):
    client.enqueue(queue, id="a")
    w = Worker(server.addr, queue, lambda message: "ok", worker_id="pool-1", poll_ms=200,
               handle_signals=False)
    t = threading.Thread(target=w.run, daemon=True)
    t.start()
    try:
        wait_for(lambda: client.get(queue, "a").state == "completed", message="completed")
    finally:
        w.stop()
        t.join(30)
    events = {e.event: e for e in client.history(queue, "a").entries}
    assert events["leased"].worker_id == "pool-1"
    assert events["completed"].worker_id == "pool-1"
