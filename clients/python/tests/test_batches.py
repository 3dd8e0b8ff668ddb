"""Batches against a real sundiald (docs/semantics.md, "Batches"): create (idempotent,
ALREADY_EXISTS on another callback), enqueue with batch, seal, get; the callback enqueued once,
with the members' counts in its metadata; unknown and sealed batches refused."""

import pytest
from conftest import wait_for

from sundial import Batch, SundialError


def finish(client, queue, cancel=False):
    leased = wait_for(lambda: client.dequeue(queue, wait_ms=1000), message="a message")
    assert len(leased) == 1
    if cancel:
        client.cancel(queue, [leased[0].id])
    else:
        client.complete(queue, leased[0].id, leased[0].lease_token)


def test_a_sealed_batch_enqueues_its_callback_once_with_the_counts(client, queue):
    callback = {"queue": queue + "-done", "payload": b"report", "metadata": {"tenant": "acme"}}
    batch_id = queue + "-batch"
    b = client.create_batch(batch_id, callback)
    assert isinstance(b, Batch)
    assert (b.id, b.sealed, b.done, b.members) == (batch_id, False, False, 0)
    assert b.callback["id"] == "batch:" + batch_id
    assert client.create_batch(batch_id, callback).id == batch_id
    with pytest.raises(SundialError) as e:
        client.create_batch(batch_id, {"queue": "elsewhere"})
    assert e.value.code == "ALREADY_EXISTS"

    client.enqueue(queue, b"one", id="m1", batch=batch_id)
    client.enqueue(queue, b"two", id="m2", batch=batch_id)
    client.enqueue_batch(queue, [{"id": "m3", "batch": batch_id}])
    sealed = client.seal_batch(batch_id)
    assert (sealed.sealed, sealed.members, sealed.active) == (True, 3, 3)
    with pytest.raises(SundialError) as e:
        client.enqueue(queue, id="m4", batch=batch_id)
    assert e.value.code == "FAILED_PRECONDITION"

    finish(client, queue)
    finish(client, queue, cancel=True)
    assert client.get_batch(batch_id).done is False
    finish(client, queue)
    done = client.get_batch(batch_id)
    assert (done.done, done.active, done.completed, done.canceled, done.errored) == \
        (True, 0, 2, 1, 0)
    cb = client.get(queue + "-done", "batch:" + batch_id)
    assert (cb.state, cb.payload, cb.version) == ("pending", b"report", 1)
    assert cb.metadata == {"tenant": "acme", "x-batch-id": batch_id, "x-batch-total": "3",
                           "x-batch-completed": "2", "x-batch-canceled": "1",
                           "x-batch-errored": "0"}


def test_unknown_batches_are_not_found(client, queue):
    with pytest.raises(SundialError) as e:
        client.enqueue(queue, id="x", batch="no-such-batch")
    assert e.value.code == "NOT_FOUND"
    with pytest.raises(SundialError) as e:
        client.get_batch("no-such-batch")
    assert e.value.code == "NOT_FOUND"
    with pytest.raises(SundialError) as e:
        client.seal_batch("no-such-batch")
    assert e.value.code == "NOT_FOUND"
