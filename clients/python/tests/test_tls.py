"""TLS (docs/clients/python.md, "TLS"): Client, AsyncClient and Worker against a real sundiald
with --tls-cert, certificates made at test time (conftest.TestPki); a certificate from another
CA, or for another name, is refused at once; a plain server is named as such."""

import asyncio
import threading

import pytest
from conftest import TLS_TOKEN, wait_for

from sundial import AsyncClient, Client, SundialError, Worker


@pytest.fixture
def tls_client(tls_server, pki):
    c = Client(tls_server.addr, TLS_TOKEN, ca_file=pki.ca, timeout=20)
    yield c
    c.close()


def test_operations_round_trip_over_tls(tls_client, queue):
    r = tls_client.enqueue(queue, b"secret", metadata={"k": "v"})
    [m] = tls_client.dequeue(queue, lease_ms=30000)
    assert (m.id, m.payload, m.metadata) == (r.id, b"secret", {"k": "v"})
    tls_client.complete(queue, m.id, m.lease_token)
    assert tls_client.count(queue).completed == 1


def test_many_threads_share_one_tls_connection(tls_client, queue):
    """Callers on many threads while the I/O thread reads and writes: every reply reaches its
    own caller, and a long poll holds back nobody."""
    errors = []
    poll = []

    def long_poll():
        poll.append(tls_client.dequeue(queue + "-idle", wait_ms=60000))

    def work(k):
        try:
            for i in range(100):
                r = tls_client.enqueue(queue, f"{k}-{i}", id=f"{k}-{i}")
                assert r.id == f"{k}-{i}"
                assert tls_client.get(queue, r.id).payload == f"{k}-{i}".encode()
        except Exception as e:  # noqa: BLE001 - collected for the assertion below
            errors.append(e)

    poller = threading.Thread(target=long_poll)
    poller.start()
    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert tls_client.count(queue).pending == 800
    assert poll == []  # all that while, the long poll waited
    tls_client.enqueue(queue + "-idle", b"wake", id="wake")
    poller.join(30)
    assert [[m.id for m in p] for p in poll] == [["wake"]]


def test_large_payloads_cross_many_tls_records(tls_client, queue):
    # 8 messages of 1 MiB (the largest payload): requests and a reply of hundreds of 16 KiB
    # records, written in parts as the socket fills.
    payload = bytes(range(256)) * 4096
    items = [{"payload": payload, "id": f"big-{i}"} for i in range(8)]
    assert [r.error for r in tls_client.enqueue_batch(queue, items)] == [None] * 8
    messages = tls_client.dequeue(queue, max=8)
    assert sorted(m.id for m in messages) == [f"big-{i}" for i in range(8)]
    assert all(m.payload == payload for m in messages)


def test_a_certificate_from_another_ca_is_refused_at_once(tls_server, pki):
    with Client(tls_server.addr, TLS_TOKEN, ca_file=pki.other_ca, timeout=60) as c:
        with pytest.raises(SundialError) as e:
            c.health()
    assert e.value.code == "UNAVAILABLE" and e.value.origin == "connection"
    assert "the server's certificate was refused" in e.value.message
    assert "unable to get local issuer certificate" in e.value.message


def test_a_certificate_for_another_name_is_refused(tls_server, pki):
    with Client(tls_server.addr, TLS_TOKEN, ca_file=pki.ca, server_hostname="sundial.example",
                timeout=60) as c:
        with pytest.raises(SundialError) as e:
            c.health()
    assert "the server's certificate was refused" in e.value.message
    assert "sundial.example" in e.value.message or "mismatch" in e.value.message


def test_the_name_given_is_the_one_checked(tls_server, pki):
    with Client(tls_server.addr, TLS_TOKEN, ca_file=pki.ca, server_hostname="localhost") as c:
        assert c.health().ready


def test_the_system_cas_do_not_trust_a_private_ca(tls_server):
    with Client(tls_server.addr, TLS_TOKEN, tls=True, timeout=60) as c:
        with pytest.raises(SundialError) as e:
            c.health()
    assert "the server's certificate was refused" in e.value.message


def test_tls_to_a_plain_server_says_so(server, pki):
    with Client(server.addr, ca_file=pki.ca, timeout=60) as c:
        with pytest.raises(SundialError) as e:
            c.health()
    assert e.value.code == "UNAVAILABLE"
    assert "is TLS on at the server" in e.value.message


def test_an_unreadable_ca_file_is_a_local_error(tmp_path):
    bad = tmp_path / "not-a-ca.pem"
    bad.write_text("hello\n")
    for path in [str(bad), str(tmp_path / "missing.pem")]:
        with pytest.raises(SundialError) as e:
            Client("127.0.0.1:7400", ca_file=path)
        assert (e.value.code, e.value.origin) == ("INVALID_ARGUMENT", "local")
        assert path in e.value.message


def test_a_wrong_token_over_tls_is_unauthenticated(tls_server, pki):
    with Client(tls_server.addr, "wrong", ca_file=pki.ca, timeout=20) as c:
        with pytest.raises(SundialError) as e:
            c.health()
    assert e.value.code == "UNAUTHENTICATED"


def test_a_restarted_tls_server_is_reconnected_to(make_server, pki, queue):
    s = make_server(pki.server_flags())
    with Client(s.addr, ca_file=pki.ca, timeout=20) as c:
        c.enqueue(queue, b"before")
        assert s.terminate() == 0
        s.restart()
        # A mutation on the idle connection to the server that went away: not written there
        # (the I/O thread saw the end, or the hang-up check did), so sent on a new connection.
        c.enqueue(queue, b"after")
        assert c.count(queue).pending == 2


def test_a_mutation_written_before_the_server_died_is_not_sent_again(make_server, pki, queue):
    """The I/O thread counts what it wrote: a long-poll dequeue that reached the socket is a
    maybe-applied mutation (UNAVAILABLE), not retried."""
    s = make_server(pki.server_flags())
    with Client(s.addr, ca_file=pki.ca, timeout=20) as c:
        c.health()
        result = []

        def poll():
            try:
                result.append(c.dequeue(queue, wait_ms=30000))
            except SundialError as e:
                result.append(e)

        t = threading.Thread(target=poll)
        t.start()
        wait_for(lambda: _written(c), message="the long poll written to the socket")
        s.kill()
        t.join(30)
        assert len(result) == 1 and isinstance(result[0], SundialError), result
        assert (result[0].code, result[0].origin) == ("UNAVAILABLE", "connection")


def _written(c):
    conn = c._conn
    with conn._lock:
        return conn._written >= conn._queued and len(conn._pending) == 1


def test_async_client_over_tls(tls_server, pki, queue):
    async def main():
        async with AsyncClient(tls_server.addr, TLS_TOKEN, ca_file=pki.ca) as c:
            await asyncio.gather(*(c.enqueue(queue, f"m{i}") for i in range(50)))
            assert (await c.count(queue)).pending == 50
        async with AsyncClient(tls_server.addr, TLS_TOKEN, ca_file=pki.other_ca,
                               timeout=60) as c:
            with pytest.raises(SundialError) as e:
                await c.health()
            assert "the server's certificate was refused" in e.value.message

    asyncio.run(main())


def test_a_worker_over_tls(tls_server, pki, queue):
    with Client(tls_server.addr, TLS_TOKEN, ca_file=pki.ca) as c:
        c.enqueue(queue, b"job")
        done = []
        worker = Worker(tls_server.addr, queue, lambda m: done.append(m.payload), token=TLS_TOKEN,
                        ca_file=pki.ca, concurrency=2, handle_signals=False, poll_ms=500)
        t = threading.Thread(target=worker.run)
        t.start()
        try:
            wait_for(lambda: c.count(queue).completed == 1, message="the job completed")
        finally:
            worker.stop()
            t.join(30)
        assert done == [b"job"]
