"""Results and waiting against a real sundiald (docs/semantics.md, "Results and waiting"):
complete's result, wait (woken by the completing request on another connection), call, and
the Worker's return value as the result."""

import threading
import time

import pytest
from conftest import wait_for

from sundial import Client, Outcome, SundialError, Worker


@pytest.fixture
def start_worker():
    """start_worker(*args, **kwargs): a Worker running on a thread, stopped after the test."""
    started = []

    def start(*args, **kwargs):
        w = Worker(*args, **kwargs)
        t = threading.Thread(target=w.run, daemon=True)
        t.start()
        started.append((w, t))
        return w

    yield start
    for w, t in started:
        w.stop()
        t.join(30)


def lease_one(client, queue):
    leased = wait_for(lambda: client.dequeue(queue, wait_ms=1000), message="a message")
    assert len(leased) == 1
    return leased[0]


def test_complete_stores_a_result_that_get_and_wait_return(client, queue):
    client.enqueue(queue, b"job", id="a")
    m = lease_one(client, queue)
    client.complete(queue, m.id, m.lease_token, result=b"bin\x00ary")
    assert client.get(queue, "a").result == b"bin\x00ary"
    outcome = client.wait(queue, "a")
    assert isinstance(outcome, Outcome)
    assert (outcome.state, outcome.result, outcome.done) == ("completed", b"bin\x00ary", True)


def test_results_of_str_and_json_values(client, queue):
    client.enqueue(queue, id="s")
    client.enqueue(queue, id="j")
    m = lease_one(client, queue)
    client.complete(queue, m.id, m.lease_token, result="héllo")
    m = lease_one(client, queue)
    client.complete(queue, m.id, m.lease_token, result={"n": [1, 2]})
    assert client.get(queue, "s").result == "héllo".encode()
    assert client.get(queue, "j").result == b'{"n":[1,2]}'
    with pytest.raises(SundialError) as e:
        client.complete(queue, "x", 1, result=object())
    assert e.value.code == "INVALID_ARGUMENT"


def test_wait_lists_every_id_in_order_and_names_the_missing(client, queue):
    client.enqueue(queue, id="a")
    outcomes = client.wait(queue, ["a", "nope"])
    assert [o.id for o in outcomes] == ["a", "nope"]
    assert outcomes[0].state == "pending" and not outcomes[0].done
    assert outcomes[1].error.code == "NOT_FOUND" and outcomes[1].done


def test_wait_is_woken_by_a_complete_on_another_connection(server, client, queue):
    client.enqueue(queue, id="a")
    m = lease_one(client, queue)
    other = Client(server.addr)
    got = []
    t = threading.Thread(target=lambda: got.append(other.wait(queue, "a", wait_ms=30000)))
    t.start()
    time.sleep(0.05)  # not a synchronisation: the wait holds either way
    start = time.monotonic()
    client.complete(queue, m.id, m.lease_token, result=b"done")
    t.join(30)
    assert got and got[0].state == "completed" and got[0].result == b"done"
    assert time.monotonic() - start < 20  # woken, not answered at the 30 s wait_ms
    other.close()


def test_enqueue_with_wait_ms_carries_the_outcome(client, queue):
    r = client.enqueue(queue, b"x", id="a", wait_ms=50)
    assert r.id == "a" and r.outcome.state == "pending" and not r.outcome.done


def test_call_runs_through_a_worker_and_returns_its_result(server, client, queue, start_worker):
    start_worker(server.addr, queue, lambda m: b"echo:" + m.payload, concurrency=2,
                 handle_signals=False)
    outcome = client.call(queue, b"ping", timeout=20)
    assert (outcome.state, outcome.result) == ("completed", b"echo:ping")


def test_call_reports_a_failed_job_and_a_timeout(server, client, queue, start_worker):
    with pytest.raises(SundialError):
        client.call(queue, timeout=61)
    client.create_queue(queue, max_attempts=1)

    def handler(message):
        if message.payload == b"bad":
            raise ValueError("no good")
        time.sleep(5)

    start_worker(server.addr, queue, handler, concurrency=2, handle_signals=False)
    failed = client.call(queue, b"bad", timeout=20)
    assert failed.state == "errored" and "no good" in failed.last_error
    slow = client.call(queue, b"slow", timeout=0.2)
    assert not slow.done


def test_a_result_above_the_limit_fails_the_worker_message(make_server, queue, start_worker):
    server = make_server(flags=["--max-result-bytes", "8"], fixed_port=False)
    c = Client(server.addr)
    c.create_queue(queue, max_attempts=1)
    start_worker(server.addr, queue, lambda m: b"x" * 9, concurrency=1, handle_signals=False)
    outcome = c.call(queue, timeout=20)
    assert outcome.state == "errored"
    assert "result refused" in outcome.last_error
