"""watch (docs/clients/python.md, "Watching"): Subscribe over the WebSocket port of a real
sundiald, blocking and asyncio, plain and over TLS with a token."""

import asyncio
import signal
import threading

import pytest
from conftest import TLS_TOKEN, wait_for

from sundial import (AsyncClient, Client, MessageEvent, StatsTick, SundialError)

EVENT_TIMEOUT_S = 15


def collect(watch, n):
    """The next `n` events, each within a generous deadline."""
    events = []
    for _ in range(n):
        event = watch.next(timeout=EVENT_TIMEOUT_S)
        assert event is not None, f"no event after {len(events)}: {events}"
        events.append(event)
    return events


@pytest.fixture
def wclient(server):
    c = Client(server.addr, http_addr=server.http_addr, timeout=20)
    yield c
    c.close()


def test_a_message_is_seen_from_enqueue_to_completion(wclient, queue):
    with wclient.watch(queue) as w:
        r = wclient.enqueue(queue, b"x", id="m1")
        [m] = wclient.dequeue(queue)
        wclient.complete(queue, m.id, m.lease_token)
        events = collect(w, 3)
    assert all(isinstance(e, MessageEvent) for e in events)
    assert [(e.queue, e.id, e.cause, e.from_state, e.to_state) for e in events] == [
        (queue, "m1", "enqueued", "pending", "pending"),
        (queue, "m1", "leased", "pending", "running"),
        (queue, "m1", "completed", "running", "completed")]
    assert events[0].version == r.version
    assert events[0].time <= events[1].time <= events[2].time


def test_only_changes_after_the_subscription_are_sent(wclient, queue):
    wclient.enqueue(queue, b"before", id="before")
    with wclient.watch(queue) as w:
        wclient.enqueue(queue, b"after", id="after")
        [e] = collect(w, 1)
    assert e.id == "after"


def test_filter_and_ids_choose_the_messages(wclient, queue):
    with wclient.watch(queue, {"tenant": "acme"}) as by_filter, \
            wclient.watch(queue, ids=["b"]) as by_id:
        wclient.enqueue(queue, id="a", metadata={"tenant": "acme"})
        wclient.enqueue(queue, id="b", metadata={"tenant": "other"})
        wclient.enqueue(queue, id="c", metadata={"tenant": "acme"})
        assert [e.id for e in collect(by_filter, 2)] == ["a", "c"]
        assert [e.id for e in collect(by_id, 1)] == ["b"]
        assert by_id.next(timeout=0.2) is None  # nothing else came for it meanwhile


def test_every_queue_with_a_star(wclient, queue):
    with wclient.watch("*") as w:
        wclient.enqueue(queue + "-1", id="x")
        wclient.enqueue(queue + "-2", id="y")
        seen = set()
        while len(seen) < 2:  # other tests' queues may show up too
            e = w.next(timeout=EVENT_TIMEOUT_S)
            assert e is not None
            if e.queue.startswith(queue):
                seen.add((e.queue, e.id))
    assert seen == {(queue + "-1", "x"), (queue + "-2", "y")}


def test_stats_ticks_with_every_queue(wclient, queue):
    wclient.enqueue(queue, b"x")
    with wclient.watch(queue, queue_stats=True, max_events_per_sec=0) as w:
        tick = w.next(timeout=EVENT_TIMEOUT_S)
    assert isinstance(tick, StatsTick)
    assert tick.stats.queues >= 1 and tick.time > 0
    mine = [q for q in tick.queues if q.queue.name == queue]
    assert len(mine) == 1 and mine[0].enqueued == 1 and mine[0].queue.counts.pending == 1


def test_close_from_another_thread_ends_the_iteration(wclient, queue):
    close_from_another_thread(wclient, queue)


def test_close_from_another_thread_ends_a_tls_watch(tls_server, pki, queue):
    """The iterating thread is inside SSL_read when close() shuts the socket down."""
    with Client(tls_server.addr, TLS_TOKEN, ca_file=pki.ca, http_addr=tls_server.http_addr,
                timeout=20) as c:
        close_from_another_thread(c, queue)


def close_from_another_thread(wclient, queue):
    w = wclient.watch(queue)
    seen, ended = [], threading.Event()

    def consume():
        for event in w:
            seen.append(event)
        ended.set()

    t = threading.Thread(target=consume)
    t.start()
    wclient.enqueue(queue, id="one")
    wait_for(lambda: seen, message="the event")
    w.close()
    t.join(EVENT_TIMEOUT_S)
    assert ended.is_set() and [e.id for e in seen] == ["one"]
    with pytest.raises(StopIteration):
        w.next()


def test_bad_arguments(wclient, queue):
    with pytest.raises(SundialError) as e:
        wclient.watch(queue, ids=[])
    assert (e.value.code, e.value.origin) == ("INVALID_ARGUMENT", "local")
    with pytest.raises(SundialError) as e:
        wclient.watch(queue, {f"k{i}": "v" for i in range(5)})
    assert (e.value.code, e.value.origin) == ("INVALID_ARGUMENT", "server")
    assert "filter" in e.value.message


def test_no_server_is_unavailable():
    c = Client("127.0.0.1:1", http_addr="127.0.0.1:1", timeout=5)
    with pytest.raises(SundialError) as e:
        c.watch("q")
    assert (e.value.code, e.value.origin) == ("UNAVAILABLE", "connection")


def test_the_end_of_the_server_ends_the_watch(make_server, queue):
    s = make_server(fixed_port=False)
    c = Client(s.addr, http_addr=s.http_addr)
    w = c.watch(queue)
    s.proc.send_signal(signal.SIGTERM)  # a drain: the server closes the WebSocket
    with pytest.raises(SundialError) as e:
        w.next(timeout=EVENT_TIMEOUT_S)
    assert (e.value.code, e.value.origin) == ("UNAVAILABLE", "connection")
    assert "the server closed the watch (WebSocket close 1001)" in e.value.message
    assert s.proc.wait(60) == 0  # the watch answered the close: nothing held the drain
    w.close()
    c.close()


def test_over_tls_with_a_token(tls_server, pki, queue):
    with Client(tls_server.addr, TLS_TOKEN, ca_file=pki.ca, http_addr=tls_server.http_addr,
                timeout=20) as c:
        with c.watch(queue) as w:
            c.enqueue(queue, id="secret")
            [e] = collect(w, 1)
        assert (e.id, e.cause) == ("secret", "enqueued")


def test_a_wrong_token_is_refused_at_the_upgrade(tls_server, pki, queue):
    c = Client(tls_server.addr, "wrong", ca_file=pki.ca, http_addr=tls_server.http_addr)
    with pytest.raises(SundialError) as e:
        c.watch(queue)
    assert (e.value.code, e.value.origin) == ("UNAUTHENTICATED", "server")
    assert "HTTP 401" in e.value.message


def test_over_tls_a_certificate_from_another_ca_is_refused(tls_server, pki, queue):
    c = Client(tls_server.addr, TLS_TOKEN, ca_file=pki.other_ca, http_addr=tls_server.http_addr)
    with pytest.raises(SundialError) as e:
        c.watch(queue)
    assert e.value.code == "UNAVAILABLE"
    assert "the server's certificate was refused" in e.value.message


def test_async_watch(server, tls_server, pki, queue):
    async def main():
        async with AsyncClient(server.addr, http_addr=server.http_addr) as c:
            async with c.watch(queue) as w:
                await c.enqueue(queue, id="a")
                await c.enqueue(queue, id="b")
                events = [await w.next(timeout=EVENT_TIMEOUT_S) for _ in range(2)]
            assert [(e.id, e.cause) for e in events] == [("a", "enqueued"), ("b", "enqueued")]
            with pytest.raises(StopAsyncIteration):
                await w.next()
        async with AsyncClient(tls_server.addr, TLS_TOKEN, ca_file=pki.ca,
                               http_addr=tls_server.http_addr) as c:
            w = await c.watch(queue)
            await c.enqueue(queue, id="t")
            async for e in w:
                assert (e.id, e.cause) == ("t", "enqueued")
                break
            # close() from another task ends an iteration waiting for the next event.
            waiting = asyncio.ensure_future(w.next())
            await asyncio.sleep(0)
            await w.close()
            with pytest.raises(StopAsyncIteration):
                await asyncio.wait_for(waiting, EVENT_TIMEOUT_S)
            with pytest.raises(SundialError) as e:
                await AsyncClient(tls_server.addr, TLS_TOKEN, ca_file=pki.other_ca,
                                  http_addr=tls_server.http_addr).watch(queue)
            assert "the server's certificate was refused" in e.value.message

    asyncio.run(main())
