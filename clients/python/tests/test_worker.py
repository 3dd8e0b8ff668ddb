"""Worker against a real sundiald: concurrency, outcomes, retries by the server's backoff,
lease extension and loss, shutdown (stop(), SIGTERM, a handler that never returns), and a
server killed under it."""

import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
from conftest import python_env, wait_for

from sundial import Client, SundialError, Worker

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture
def start_worker():
    """start_worker(*args, **kwargs): a Worker running on a thread, stopped after the test."""
    started = []

    def start(*args, **kwargs):
        w = Worker(*args, **kwargs)
        errors = []

        def run():
            try:
                w.run()
            except Exception as e:  # noqa: BLE001 - the test reads it
                errors.append(e)

        t = threading.Thread(target=run, daemon=True)
        t.start()
        started.append((w, t))
        w.thread, w.errors = t, errors
        return w

    yield start
    for w, t in started:
        w.stop()
        t.join(30)


def stop(w):
    w.stop()
    w.thread.join(30)
    assert not w.thread.is_alive(), "run() did not return"


def test_runs_at_most_concurrency_handlers_and_leases_no_more(server, client, queue,
                                                               start_worker):
    lock = threading.Lock()
    state = {"running": 0, "peak": 0}
    release = threading.Event()

    def handler(m):
        with lock:
            state["running"] += 1
            state["peak"] = max(state["peak"], state["running"])
        release.wait(30)
        with lock:
            state["running"] -= 1

    client.enqueue_batch(queue, [dict(payload=b"%d" % i) for i in range(10)])
    w = start_worker(server.addr, queue, handler, concurrency=4)
    wait_for(lambda: state["running"] == 4, message="4 handlers running")
    assert client.count(queue).running == 4  # nothing leased to wait behind them
    release.set()
    wait_for(lambda: client.count(queue).completed == 10, message="10 completed")
    stop(w)
    assert state["peak"] == 4
    m = w.metrics()
    assert (m["sundial_worker_leased_total"], m["sundial_worker_completed_total"]) == (10, 10)
    assert m["sundial_worker_running"] == 0


def dequeue_requests(server):
    """The server's Dequeue requests answered so far (sundial_operations_total)."""
    text = urllib.request.urlopen(f"http://{server.http_addr}/metrics", timeout=10).read()
    pattern = rb'^sundial_operations_total\{op="dequeue",[^}]*\} (\d+)$'
    return sum(int(n) for n in re.findall(pattern, text, re.M))


def test_a_finished_message_asks_for_the_next_in_its_complete(server, client, queue,
                                                              start_worker):
    # One handler at a time: each finished message's complete carries the next dequeue
    # (complete-and-next), so the worker sends a plain dequeue only to start and once the
    # queue is empty (its long poll), not one per message.
    client.enqueue_batch(queue, [dict(id=f"j{i}", payload=b"%d" % i) for i in range(50)])
    before = dequeue_requests(server)
    w = start_worker(server.addr, queue, lambda m: m.payload, concurrency=1, poll_ms=1000)
    wait_for(lambda: client.count(queue).completed == 50, message="50 completed")
    stop(w)
    assert dequeue_requests(server) - before < 10
    m = w.metrics()
    assert (m["sundial_worker_leased_total"], m["sundial_worker_completed_total"]) == (50, 50)
    assert client.get(queue, "j7").result == b"7"  # the result travels in the complete


def test_a_handler_that_raises_fails_the_message_and_the_servers_backoff_brings_it_back(
        server, client, queue, start_worker):
    client.create_queue(queue, retry_backoff_ms=200, max_attempts=5)
    client.enqueue(queue, b"job", id="m")
    seen, errors = [], []

    def handler(message):
        seen.append((message.attempts, time.monotonic()))
        if message.attempts < 3:
            raise RuntimeError(f"try {message.attempts}")

    w = start_worker(server.addr, queue, handler,
                     on_error=lambda m, e: errors.append((m.attempts, str(e))))
    wait_for(lambda: client.get(queue, "m").state == "completed", message="completed")
    stop(w)
    assert [a for a, _ in seen] == [1, 2, 3]
    # Backoff 200 ms · 2^(attempts−1), ±10%, never early: measured from before each fail.
    # (Less 10 ms: visible_at is whole milliseconds of the server's clock.)
    assert seen[1][1] - seen[0][1] >= 0.17
    assert seen[2][1] - seen[1][1] >= 0.35
    assert errors == [(1, "try 1"), (2, "try 2")]
    m = client.get(queue, "m")
    assert (m.attempts, m.last_error) == (3, "RuntimeError: try 2")
    metrics = w.metrics()
    assert (metrics["sundial_worker_failed_total"], metrics["sundial_worker_completed_total"]) \
        == (2, 1)


def test_attempts_spent_moves_the_message_to_the_dead_letter_queue(server, client, queue,
                                                                   start_worker):
    dlq = queue + ".dlq"
    client.create_queue(dlq)
    client.create_queue(queue, max_attempts=2, retry_backoff_ms=1, dead_letter_queue=dlq)
    client.enqueue(queue, b"poison", id="p")

    def handler(message):
        raise ValueError("cannot parse " + message.payload.decode())

    w = start_worker(server.addr, queue, handler)
    wait_for(lambda: client.count(dlq).pending == 1, message="dead-lettered")
    stop(w)
    moved = client.get(dlq, "p")
    assert moved.last_error == "ValueError: cannot parse poison"
    assert moved.metadata["x-origin-queue"] == queue


def test_the_lease_is_extended_while_a_long_handler_runs(server, client, queue, start_worker):
    client.create_queue(queue, lease_ms=1500)
    client.enqueue(queue, b"slow", id="s")

    def handler(message):
        time.sleep(4.5)  # the work itself: three leases long

    w = start_worker(server.addr, queue, handler)
    wait_for(lambda: client.get(queue, "s").state == "completed", timeout=30,
             message="completed")
    stop(w)
    assert client.get(queue, "s").attempts == 1
    assert w.metrics()["sundial_worker_extended_total"] >= 4  # every 0.75 s
    assert w.metrics()["sundial_worker_lease_lost_total"] == 0


def test_a_lost_lease_is_reported_and_the_result_not_sent(server, client, queue, start_worker):
    client.create_queue(queue, lease_ms=1000)
    client.enqueue(queue, id="c")
    running, release, lost = threading.Event(), threading.Event(), []

    def handler(message):
        running.set()
        release.wait(30)

    w = start_worker(server.addr, queue, handler, on_lease_lost=lambda m: lost.append(m.id))
    wait_for(running.is_set)
    assert client.cancel(queue, ["c"]) == [None]  # the lease's token is stale now
    wait_for(lambda: lost, message="the lease keeper noticing")
    release.set()
    wait_for(lambda: w.metrics()["sundial_worker_running"] == 0)
    stop(w)
    assert lost == ["c"]
    assert client.get(queue, "c").state == "canceled"
    metrics = w.metrics()
    assert (metrics["sundial_worker_lease_lost_total"],
            metrics["sundial_worker_completed_total"]) == (1, 0)


def test_stop_lets_running_handlers_finish_and_completes_them(server, client, queue,
                                                              start_worker):
    client.create_queue(queue, lease_ms=5000)
    client.enqueue_batch(queue, [dict(id="a", priority=1), dict(id="b", priority=2)])
    running, release = threading.Event(), threading.Event()

    def handler(message):
        running.set()
        release.wait(30)

    w = start_worker(server.addr, queue, handler, concurrency=1, shutdown_timeout_s=30)
    wait_for(running.is_set)
    w.stop()
    wait_for(lambda: not w._fetch_client.connected, message="fetching stopped")
    assert w.thread.is_alive()  # waiting for the handler
    release.set()
    w.thread.join(30)
    assert not w.thread.is_alive()
    assert client.get(queue, "a").state == "completed"
    b = client.get(queue, "b")
    assert (b.state, b.attempts) == ("pending", 0)  # never fetched after stop()


def test_a_handler_that_never_returns_is_left_to_its_lease(server, client, queue,
                                                           start_worker):
    client.create_queue(queue, lease_ms=1000)
    client.enqueue(queue, id="h")
    running, release, returned = threading.Event(), threading.Event(), threading.Event()

    def handler(message):
        running.set()
        release.wait(60)
        returned.set()

    w = start_worker(server.addr, queue, handler, shutdown_timeout_s=0.3)
    wait_for(running.is_set)
    stop(w)  # returns after the timeout though the handler still runs
    assert w.metrics()["sundial_worker_abandoned_total"] == 1
    assert not returned.is_set()
    # No more extends: the lease runs out and the message is pending again.
    wait_for(lambda: client.get(queue, "h").state == "pending", message="lease expiry")
    release.set()
    wait_for(returned.is_set)
    m = client.get(queue, "h")
    assert (m.state, m.attempts) == ("pending", 1)  # its late result was not sent


def test_a_bad_filter_stops_run_with_the_servers_error(server, queue):
    w = Worker(server.addr, queue, lambda m: None,
               filter={f"k{i}": "v" for i in range(5)})
    with pytest.raises(SundialError) as e:
        w.run()
    assert e.value.code == "INVALID_ARGUMENT" and "filter" in e.value.message


def test_bad_arguments_fail_in_the_constructor(server, queue):
    with pytest.raises(SundialError):
        Worker(server.addr, queue, "not callable")
    with pytest.raises(SundialError):
        Worker(server.addr, queue, print, concurrency=0)
    with pytest.raises(SundialError):
        Worker(server.addr, "bad name", print, lease_ms="long")


def test_the_worker_survives_a_server_killed_under_it(make_server, queue, start_worker):
    server = make_server()
    c = Client(server.addr, timeout=30)
    c.create_queue(queue, lease_ms=1000)
    c.enqueue_batch(queue, [dict(id=f"a{i}") for i in range(50)])
    done = set()
    lock = threading.Lock()

    def handler(message):
        with lock:
            done.add(message.id)

    w = start_worker(server.addr, queue, handler, concurrency=4)
    wait_for(lambda: c.count(queue).completed >= 10, message="10 completed")
    server.kill()
    server.restart()
    c.enqueue_batch(queue, [dict(id=f"b{i}") for i in range(50)])
    # Leases lost with the server come back when they expire; everything ends completed.
    wait_for(lambda: c.count(queue).completed == 100, timeout=45, message="100 completed")
    assert w.thread.is_alive()
    stop(w)
    assert done == {f"a{i}" for i in range(50)} | {f"b{i}" for i in range(50)}
    c.close()


def test_metrics_in_prometheus_text(server, queue):
    w = Worker(server.addr, queue, lambda m: None, concurrency=3)
    text = w.prometheus_text()
    assert f'sundial_worker_completed_total{{queue="{queue}"}} 0' in text
    assert "# TYPE sundial_worker_completed_total counter" in text
    assert f'sundial_worker_concurrency{{queue="{queue}"}} 3' in text


# ---- Signals: a worker in its own process --------------------------------------------------


class WorkerProcess:
    def __init__(self, tmp_path, addr, queue, mode, shutdown_timeout_s):
        self.release = tmp_path / "release"
        self.stderr_path = tmp_path / "worker.log"
        self.stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "worker_process.py"), addr, queue, mode,
             str(shutdown_timeout_s), str(self.release)],
            stdout=subprocess.PIPE, stderr=self.stderr, env=python_env(), text=True)
        self.lines = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.strip())

    def log(self):
        return self.stderr_path.read_text(errors="replace")

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.stderr.close()


@pytest.fixture
def worker_process(tmp_path):
    made = []

    def make(*args):
        p = WorkerProcess(tmp_path, *args)
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


def test_sigterm_lets_the_running_handler_finish_completes_it_and_exits_0(
        server, client, queue, worker_process):
    client.create_queue(queue, lease_ms=5000)
    client.enqueue_batch(queue, [dict(id="first", priority=1), dict(id="second", priority=2)])
    p = worker_process(server.addr, queue, "finish", 30)
    wait_for(lambda: "started first" in p.lines, timeout=30, message="handler started")
    p.proc.send_signal(signal.SIGTERM)
    wait_for(lambda: "worker stopping" in p.log(), message="the worker seeing SIGTERM")
    assert p.proc.poll() is None  # still waiting for its handler
    p.release.touch()
    assert p.proc.wait(30) == 0, p.log()
    assert "run returned" in p.lines
    assert client.get(queue, "first").state == "completed"
    second = client.get(queue, "second")
    assert (second.state, second.attempts) == ("pending", 0)


def test_sigterm_with_a_handler_that_never_returns_exits_0_after_the_timeout(
        server, client, queue, worker_process):
    client.create_queue(queue, lease_ms=1000)
    client.enqueue(queue, id="stuck")
    p = worker_process(server.addr, queue, "hang", 0.5)
    wait_for(lambda: "started stuck" in p.lines, timeout=30, message="handler started")
    p.proc.send_signal(signal.SIGTERM)
    assert p.proc.wait(30) == 0, p.log()
    assert "left to its lease" in p.log()
    wait_for(lambda: client.get(queue, "stuck").state == "pending", message="lease expiry")
    assert client.get(queue, "stuck").attempts == 1


def test_prefetch_leases_more_than_it_runs_and_gives_them_back_at_stop(server, client, queue,
                                                                      start_worker):
    client.create_queue(queue, lease_ms=30000)
    client.enqueue_batch(queue, [dict(id=f"m{i}", priority=i) for i in range(10)])
    lock, release = threading.Lock(), threading.Event()
    started = []

    def handler(message):
        with lock:
            started.append(message.id)
        release.wait(30)

    w = start_worker(server.addr, queue, handler, concurrency=2, prefetch=3)
    wait_for(lambda: len(started) == 2 and client.count(queue).running == 5,
             message="2 running and 3 prefetched")
    w.stop()
    # The 3 waiting are given back now, long before their 30 s lease would end.
    wait_for(lambda: client.count(queue).pending == 8, message="prefetched given back")
    release.set()
    w.thread.join(30)
    assert not w.thread.is_alive()
    assert sorted(started) == ["m0", "m1"]
    assert client.count(queue).completed == 2
    assert w.metrics()["sundial_worker_released_total"] == 3
    given_back = client.get(queue, "m2")
    assert (given_back.state, given_back.attempts) == ("pending", 1)


def test_stop_cancels_a_waiting_long_poll_so_nothing_is_leased_for_it(server, client, queue,
                                                                     start_worker):
    client.create_queue(queue)
    w = start_worker(server.addr, queue, lambda m: None, poll_ms=60000)
    wait_for(lambda: w._fetches_in_flight == 1, message="a long poll sent")
    # The server runs a connection's requests in order: once a request sent after the poll
    # is answered on the same connection, the poll is waiting there.
    w._fetch_client.stats()
    stop(w)  # returns without waiting out the 60 s poll
    client.enqueue(queue, id="after")
    m = client.get(queue, "after")
    assert (m.state, m.attempts) == ("pending", 0)  # the dropped poll leased nothing
    (leased,) = client.dequeue(queue)
    assert leased.id == "after"


def test_a_second_sigterm_skips_the_wait_and_leaves_the_handler_to_its_lease(
        server, client, queue, worker_process):
    client.create_queue(queue, lease_ms=1000)
    client.enqueue(queue, id="slow")
    p = worker_process(server.addr, queue, "finish", 60)  # would wait 60 s for the handler
    wait_for(lambda: "started slow" in p.lines, timeout=30, message="handler started")
    p.proc.send_signal(signal.SIGTERM)
    wait_for(lambda: "worker stopping" in p.log(), message="the worker seeing SIGTERM")
    p.proc.send_signal(signal.SIGTERM)
    assert p.proc.wait(30) == 0, p.log()
    assert "left to its lease" in p.log()
    wait_for(lambda: client.get(queue, "slow").state == "pending", message="lease expiry")
