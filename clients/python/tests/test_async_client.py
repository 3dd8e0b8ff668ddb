"""AsyncClient: the same methods as coroutines, pipelined on one connection."""

import asyncio
import inspect

import pytest

from sundial import AsyncClient, Client, SundialError
from sundial.operations import OPERATION_NAMES


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def test_every_method_of_client_is_a_coroutine_function_of_async_client():
    for name in OPERATION_NAMES:
        assert inspect.iscoroutinefunction(getattr(AsyncClient, name)), name
        assert inspect.signature(getattr(AsyncClient, name)) == \
            inspect.signature(getattr(Client, name)), name
    assert {"enqueue", "enqueue_batch", "dequeue", "complete", "fail", "extend", "cancel",
            "get", "count", "create_queue"} <= set(OPERATION_NAMES)


def test_round_trip(server, queue):
    async def main():
        async with AsyncClient(server.addr) as c:
            q = await c.create_queue(queue, lease_ms=5000, max_attempts=2)
            assert q.lease_ms == 5000
            r = await c.enqueue(queue, b"hello", priority=3, metadata={"t": "a"}, id="m")
            assert (r.id, r.duplicate) == ("m", False)
            results = await c.enqueue_batch(queue, [dict(payload=b"%d" % i) for i in range(1500)])
            assert len(results) == 1500 and all(x.error is None for x in results)
            leased = await c.dequeue(queue, max=2, filter={"t": "a"})
            assert [m.id for m in leased] == ["m"]
            m = leased[0]
            assert await c.extend(queue, m.id, m.lease_token, 10000) > m.lease_expires_at
            assert (await c.fail(queue, m.id, m.lease_token, error="x",
                                 retry_delay_ms=0)).state in ("pending", "invisible")
            batch = await c.dequeue(queue, max=1000)
            assert await c.complete_batch(queue, [(x.id, x.lease_token) for x in batch]) == \
                [None] * len(batch)
            counts = await c.count(queue)
            assert counts.completed == len(batch)
            assert (await c.get(queue, batch[0].id)).state == "completed"
            assert (await c.stats()).queues >= 1
            assert (await c.health()).ready

    run(main())


def test_errors_are_raised_at_await_with_their_code(server, queue):
    async def main():
        c = AsyncClient(server.addr)
        with pytest.raises(SundialError) as e:
            await c.get_queue(queue)
        assert e.value.code == "NOT_FOUND"
        coroutine = c.enqueue(queue, priority="high")  # checked inside the coroutine
        with pytest.raises(SundialError) as e:
            await coroutine
        assert (e.value.code, e.value.origin) == ("INVALID_ARGUMENT", "local")
        await c.enqueue(queue, id="m")
        (m,) = await c.dequeue(queue)
        with pytest.raises(SundialError) as e:
            await c.complete(queue, m.id, m.lease_token + 1)
        assert e.value.code == "FAILED_PRECONDITION"
        await c.close()
        with pytest.raises(SundialError) as e:
            await c.stats()
        assert e.value.code == "UNAVAILABLE"

    run(main())


def test_many_tasks_pipeline_and_a_long_poll_holds_back_nothing(server, queue):
    async def main():
        async with AsyncClient(server.addr) as c:
            poll = asyncio.ensure_future(c.dequeue(queue + "-p", wait_ms=30000))
            results = await asyncio.gather(*(c.enqueue(queue, b"%d" % i, id=str(i))
                                             for i in range(300)))
            assert sorted(int(r.id) for r in results) == list(range(300))
            assert not poll.done()
            await c.enqueue(queue + "-p", b"wake")
            assert [m.payload for m in await poll] == [b"wake"]

    run(main())


def test_unreachable_server_is_unavailable():
    async def main():
        c = AsyncClient("127.0.0.1:1", timeout=0.3)
        with pytest.raises(SundialError) as e:
            await c.stats()
        assert (e.value.code, e.value.origin) == ("UNAVAILABLE", "connection")

    run(main())


def test_reconnects_after_a_server_restart(make_server, queue):
    server = make_server()

    async def before(c):
        await c.enqueue(queue, b"x", id="a")

    async def after(c):
        # A mutation first: the old connection is dead, and the client must see that before
        # writing on it (else the enqueue would fail as possibly applied).
        await c.enqueue(queue, b"y", id="b")
        assert (await c.get(queue, "a")).payload == b"x"
        return (await c.count(queue)).pending

    async def main():
        c = AsyncClient(server.addr, timeout=20)
        await before(c)
        await asyncio.get_running_loop().run_in_executor(None, server.terminate)
        await asyncio.get_running_loop().run_in_executor(None, server.restart)
        assert await after(c) == 2
        await c.close()

    run(main())


def test_token(make_server, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("s3cret")
    server = make_server(["--auth-token-file", str(token_file)], fixed_port=False)

    async def main():
        with pytest.raises(SundialError) as e:
            await AsyncClient(server.addr, token="nope").stats()
        assert e.value.code == "UNAUTHENTICATED"
        async with AsyncClient(server.addr, token="s3cret") as c:
            assert (await c.health()).live

    run(main())


def test_a_client_used_from_a_second_event_loop_connects_again(server, queue):
    c = AsyncClient(server.addr)
    assert asyncio.run(c.enqueue(queue, id="a")).id == "a"
    assert asyncio.run(c.count(queue)).pending == 1  # a new loop: a new connection
    asyncio.run(c.close())
