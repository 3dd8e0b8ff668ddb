"""Dependencies against a real sundiald (docs/semantics.md, "Dependencies"): enqueue with
depends_on makes a waiting message; completing its dependency releases it, and dequeue or get
with include_dependency_results carries the dependency's result; policies and bad input."""

import threading

import pytest
from conftest import wait_for

from sundial import Outcome, SundialError, Worker


def test_a_dependent_waits_then_carries_its_dependencys_result(client, queue):
    client.enqueue(queue, b"parent", id="parent")
    client.enqueue(queue, b"child", id="child", depends_on=["parent"])
    assert client.get(queue, "child").state == "waiting"
    counts = client.count(queue)
    assert (counts.waiting, counts.pending) == (1, 1)
    why = client.explain(queue, "child")
    assert why.reason == "waiting_on_dependencies"
    assert (why.dependencies, why.unfinished) == (1, 1)
    assert why.waiting_on == [f"{queue}/parent"]
    parent_why = client.explain(queue, "parent")
    assert (parent_why.dependents, parent_why.waiting_dependents) == ([f"{queue}/child"], 1)
    assert client.explain(queue, "child").dependents == []

    leased = client.dequeue(queue)
    assert [m.id for m in leased] == ["parent"]
    assert client.dequeue(queue) == []
    client.complete(queue, "parent", leased[0].lease_token, result=b"42")

    [child] = client.dequeue(queue, include_dependency_results=True)
    assert child.id == "child"
    [dep] = child.dependency_results
    assert isinstance(dep, Outcome)
    assert (dep.id, dep.state, dep.result, dep.error) == (f"{queue}/parent", "completed", b"42",
                                                          None)
    got = client.get(queue, "child", include_dependency_results=True)
    assert got.dependency_results[0].result == b"42"
    assert client.get(queue, "child").dependency_results is None


def test_a_dequeue_without_the_flag_carries_none(client, queue):
    client.enqueue(queue, id="p")
    client.enqueue(queue, id="c", depends_on=[f"{queue}/p"])
    [p] = client.dequeue(queue)
    client.complete(queue, p.id, p.lease_token)
    [c] = client.dequeue(queue)
    assert c.id == "c" and c.dependency_results is None


def test_policies_and_batches(client, queue):
    results = client.enqueue_batch(queue, [
        dict(id="p"),
        dict(id="released", depends_on=["p"], on_dependency_failure="release"),
        dict(id="errored", depends_on=["p"], on_dependency_failure="error"),
        dict(id="canceled", depends_on=["p"]),
    ])
    assert [r.error for r in results] == [None] * 4
    client.cancel(queue, "p")
    assert client.get(queue, "released").state == "pending"
    assert client.get(queue, "errored").state == "errored"
    assert client.get(queue, "canceled").state == "canceled"
    deps = client.get(queue, "released", include_dependency_results=True).dependency_results
    assert [(d.id, d.state) for d in deps] == [(f"{queue}/p", "canceled")]


def test_bad_dependencies_are_typed_errors(client, queue):
    client.enqueue(queue, id="p")
    with pytest.raises(SundialError) as e:
        client.enqueue(queue, id="c", depends_on=["missing"])
    assert e.value.code == "NOT_FOUND" and "depends_on" in e.value.message
    with pytest.raises(SundialError) as e:
        client.enqueue(queue, id="c", depends_on=["c"])  # itself: not there before its enqueue
    assert e.value.code == "NOT_FOUND"
    with pytest.raises(SundialError) as e:
        client.enqueue(queue, id="c", depends_on=[""])
    assert e.value.code == "INVALID_ARGUMENT" and "depends_on" in e.value.message
    with pytest.raises(SundialError) as e:
        client.enqueue(queue, id="c", depends_on=["p"] * 100_001)
    assert e.value.code == "INVALID_ARGUMENT" and "depends_on" in e.value.message
    # Checked by the client before anything is sent.
    with pytest.raises(SundialError) as e:
        client.enqueue(queue, id="c", depends_on=["p"], on_dependency_failure="retry")
    assert e.value.code == "INVALID_ARGUMENT" and "on_dependency_failure" in e.value.message
    with pytest.raises(SundialError) as e:
        client.enqueue(queue, id="c", depends_on="p")
    assert e.value.code == "INVALID_ARGUMENT"
    with pytest.raises(SundialError):
        client.get(queue, "c")  # nothing was kept


async def _async_round_trip(server, queue):
    from sundial import AsyncClient
    c = AsyncClient(server.addr)
    try:
        await c.enqueue(queue, id="p")
        await c.enqueue(queue, id="c", depends_on=["p"], on_dependency_failure="release")
        [p] = await c.dequeue(queue)
        await c.complete(queue, p.id, p.lease_token, result="r")
        [m] = await c.dequeue(queue, include_dependency_results=True)
        return m
    finally:
        await c.close()


def test_the_async_client_takes_the_same_options(server, queue):
    import asyncio
    m = asyncio.run(_async_round_trip(server, queue))
    assert m.id == "c"
    assert m.dependency_results[0].result == b"r"


def test_a_worker_can_hand_its_handler_the_dependency_results(server, client, queue):
    client.enqueue(queue, b"p", id="p")
    [p] = client.dequeue(queue)
    client.complete(queue, p.id, p.lease_token, result=b"parent's")
    client.enqueue(queue, b"c", id="c", depends_on=["p"])
    seen = []

    def handler(message):
        seen.append([(d.id, d.result) for d in message.dependency_results])
        return b"done"

    w = Worker(server.addr, queue, handler, concurrency=1, handle_signals=False, poll_ms=200,
               include_dependency_results=True)
    t = threading.Thread(target=w.run, daemon=True)
    t.start()
    try:
        wait_for(lambda: client.get(queue, "c").state == "completed", message="c completed")
    finally:
        w.stop()
        t.join(30)
    assert seen == [[(f"{queue}/p", b"parent's")]]


def test_a_worker_leasing_through_complete_and_next_still_hands_the_dependency_results(
        server, client, queue):
    # p runs first; its complete carries `next`, which leases c (released by that very
    # complete): c must still come with p's result.
    client.enqueue(queue, b"p", id="p")
    client.enqueue(queue, b"c", id="c", depends_on=["p"])
    seen = {}

    def handler(message):  # dependency_results: None for a message without dependencies
        seen[message.id] = [(d.id, d.result) for d in message.dependency_results or []]
        return b"from " + message.id.encode()

    w = Worker(server.addr, queue, handler, concurrency=1, handle_signals=False, poll_ms=200,
               include_dependency_results=True)
    t = threading.Thread(target=w.run, daemon=True)
    t.start()
    try:
        wait_for(lambda: client.get(queue, "c").state == "completed", message="c completed")
    finally:
        w.stop()
        t.join(30)
    assert seen == {"p": [], "c": [(f"{queue}/p", b"from p")]}
