"""The client and the Worker following a cluster's primary (docs/clients/python.md, "Clusters"),
against a real cluster: Debian's etcd ($SUNDIAL_ETCD_BIN, default /usr/bin/etcd) and three
sundiald nodes on loopback, started per test (`cluster` fixture). Registered in ctest as
python_client_cluster (label "cluster"), apart from the single-server suite.

Failovers use --leader-ttl-s 2. Every wait is a bounded poll on a condition (wait_for, or
`until` inside an event loop; a watch's next(timeout) with a deadline).
"""

import asyncio
import json
import os
import random
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.request

import pytest

from conftest import SUNDIALD, START_TIMEOUT_S, FIXED_PORTS, _port_is_free, wait_for
from sundial import AsyncClient, Client, MessageEvent, Resubscribed, SundialError, Worker

ETCD = os.environ.get("SUNDIAL_ETCD_BIN") or "/usr/bin/etcd"

pytestmark = pytest.mark.skipif(not os.path.exists(ETCD), reason=f"no etcd at {ETCD}")


def _free_ports(n, rng):
    """`n` distinct free loopback ports below the ephemeral range (a node that reloads its
    state re-executes itself on the same ones)."""
    ports = []
    while len(ports) < n:
        port = rng.choice(FIXED_PORTS)
        if port not in ports and _port_is_free(port):
            ports.append(port)
    return ports


class Cluster:
    """etcd and three sundiald nodes (n1..n3) in one temporary directory."""

    def __init__(self, root):
        self.root = root
        self.procs = {}
        self.etcd = None
        self.nodes = {}  # name -> {"port", "http_port", "replication_port"}
        self.rng = random.Random()

    def start(self):
        client_port, peer_port = _free_ports(2, self.rng)
        self.etcd_url = f"http://127.0.0.1:{client_port}"
        peer = f"http://127.0.0.1:{peer_port}"
        name = "sundial-py-" + os.path.basename(self.root)
        env = {k: v for k, v in os.environ.items() if not k.startswith("ETCD_")}
        with open(os.path.join(self.root, "etcd.log"), "ab") as log:
            self.etcd = subprocess.Popen(
                [ETCD, f"--name={name}", f"--data-dir={self.root}/etcd",
                 f"--listen-client-urls={self.etcd_url}",
                 f"--advertise-client-urls={self.etcd_url}", f"--listen-peer-urls={peer}",
                 f"--initial-advertise-peer-urls={peer}", f"--initial-cluster={name}={peer}",
                 f"--initial-cluster-token={name}", "--heartbeat-interval=50",
                 "--election-timeout=500"], stdout=log, stderr=log, env=env)

        def etcd_healthy():
            try:
                with urllib.request.urlopen(self.etcd_url + "/health", timeout=1) as r:
                    return b'"true"' in r.read()
            except OSError:
                return False

        wait_for(etcd_healthy, timeout=START_TIMEOUT_S, interval=0.05, message="etcd")
        for i in (1, 2, 3):
            self.start_node(f"n{i}")

    def start_node(self, name):
        if name not in self.nodes:
            port, http_port, replication_port = _free_ports(3, self.rng)
            self.nodes[name] = {"port": port, "http_port": http_port,
                                "replication_port": replication_port}
        n = self.nodes[name]
        data = os.path.join(self.root, name)
        ready = data + ".ready"
        if os.path.exists(ready):
            os.unlink(ready)
        args = [SUNDIALD, "--data-dir", data, "--port", str(n["port"]),
                "--http-port", str(n["http_port"]), "--replication-port",
                str(n["replication_port"]), "--cluster", "py", "--node-name", name,
                "--etcd", self.etcd_url, "--leader-ttl-s", "2", "--ready-file", ready,
                "--io-threads", "2"]
        with open(data + ".log", "ab") as log:
            self.procs[name] = subprocess.Popen(args, stdout=log, stderr=log)
        wait_for(lambda: os.path.exists(ready) or self.procs[name].poll() is not None,
                 timeout=START_TIMEOUT_S, message=f"{name} ready")
        if self.procs[name].poll() is not None:
            pytest.fail(f"{name} exited: {self.log(name)}")

    def addr(self, name):
        return f"127.0.0.1:{self.nodes[name]['port']}"

    @property
    def addrs(self):
        return [self.addr(name) for name in sorted(self.nodes)]

    def log(self, name):
        with open(os.path.join(self.root, name + ".log"), "rb") as f:
            return f.read().decode("utf-8", "replace")

    def primary(self, with_sync_standby=True):
        """The name of the node that answers as primary (with a published synchronous
        standby), or None."""
        for name in sorted(self.nodes):
            if self.procs[name].poll() is not None:
                continue
            try:
                with Client(self.addr(name), timeout=1.0) as c:
                    view = c.cluster()
            except SundialError:
                continue
            if view.primary == name and (view.sync_standby or not with_sync_standby):
                return name
        return None

    def wait_for_primary(self, with_sync_standby=True):
        return wait_for(lambda: self.primary(with_sync_standby), timeout=30,
                        interval=0.05, message="a primary")

    def kill(self, name):
        self.procs[name].kill()
        self.procs[name].wait()

    def stop(self):
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if self.etcd is not None and self.etcd.poll() is None:
            self.etcd.send_signal(signal.SIGKILL)
            self.etcd.wait()


@pytest.fixture
def cluster(request):
    root = tempfile.mkdtemp(prefix="sundial-py-cluster-")
    c = Cluster(root)
    try:
        c.start()
        c.wait_for_primary()
        yield c
    finally:
        c.stop()
        failed = getattr(request.node, "rep_call", None)
        if failed is not None and failed.failed:
            for name in sorted(c.nodes):
                print(f"---- {name} ----\n{c.log(name)}")
        shutil.rmtree(root, ignore_errors=True)


def test_a_client_given_every_address_finds_the_primary_and_is_redirected_from_a_standby(cluster):
    primary = cluster.primary()
    standbys = [name for name in sorted(cluster.nodes) if name != primary]
    # One standby's address alone: the single-server client, refused with NOT_PRIMARY naming
    # the primary.
    with Client(cluster.addr(standbys[0])) as single:
        assert not single.follows_primary
        with pytest.raises(SundialError) as refused:
            single.enqueue("jobs", b"x", id="a")
        assert refused.value.code == "NOT_PRIMARY"
        assert refused.value.primary == cluster.addr(primary)
    # The standbys first: the client goes where they say.
    with Client([cluster.addr(n) for n in standbys] + [cluster.addr(primary)]) as c:
        assert c.follows_primary
        assert c.enqueue("jobs", b"x", id="a").id == "a"
        assert c.address == cluster.addr(primary)
        view = c.cluster()
        assert view.primary == primary and view.node == primary
        assert len(view.members) == 3
        assert sorted(m.role for m in view.members) == ["primary", "standby", "standby"]
    # A list of standbys only (no primary named in it): found through them.
    with Client(",".join(cluster.addr(n) for n in standbys)) as c:
        assert c.get("jobs", "a").id == "a"
        assert c.address == cluster.addr(primary)


def test_enqueues_survive_a_kill_of_the_primary_without_loss_or_duplicates(cluster):
    old = cluster.primary()
    acked_ids, acked_no_id, errors = set(), [], []
    stop = threading.Event()

    def produce():
        with Client(cluster.addrs, timeout=5.0) as c:
            i = 0
            while not stop.is_set():
                try:
                    if i % 2 == 0:
                        acked_ids.add(c.enqueue("with-ids", f"p{i}", id=f"m-{i}").id)
                    else:
                        acked_no_id.append(c.enqueue("no-ids", f"p{i}").id)
                except SundialError as e:
                    errors.append(e)
                i += 1

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        wait_for(lambda: len(acked_ids) + len(acked_no_id) >= 100, timeout=15,
                 message="100 enqueues before the kill")
        cluster.kill(old)
        at_kill = len(acked_ids) + len(acked_no_id)
        wait_for(lambda: len(acked_ids) + len(acked_no_id) >= at_kill + 100, timeout=30,
                 message="100 enqueues after the kill")
    finally:
        stop.set()
        producer.join()
    assert not errors, errors[:3]
    new = cluster.wait_for_primary(with_sync_standby=False)
    assert new != old
    with Client(cluster.addrs) as c:
        for message_id in acked_ids:
            assert c.get("with-ids", message_id).id == message_id
        assert c.count("with-ids").pending == len(acked_ids)
        assert c.count("no-ids").pending == len(acked_no_id), "an enqueue was applied twice"
        assert len(set(acked_no_id)) == len(acked_no_id)


def test_the_worker_keeps_working_across_a_failover(cluster):
    n = 150
    with Client(cluster.addrs) as c:
        c.create_queue("work", lease_ms=10000)
        c.enqueue_batch("work", [dict(id=f"job-{i}", payload=str(i)) for i in range(n)])
    handled = []
    lock = threading.Lock()

    def handler(message):
        with lock:
            handled.append(message.id)
        time.sleep(0.005)  # a little work, so the kill lands while jobs run
        return message.payload

    worker = Worker(cluster.addrs, "work", handler, concurrency=4, poll_ms=2000,
                    handle_signals=False)
    runner = threading.Thread(target=worker.run)
    runner.start()
    try:
        wait_for(lambda: len(handled) >= 30, timeout=15, message="30 jobs handled")
        cluster.kill(cluster.primary())

        def all_completed():
            try:
                with Client(cluster.addrs, retry_budget=2.0) as c:
                    return c.count("work").completed == n
            except SundialError:
                return False

        wait_for(all_completed, timeout=45, interval=0.2, message="every job completed")
    finally:
        worker.stop()
        runner.join(timeout=60)
    assert not runner.is_alive()
    with lock:
        seen = set(handled)
    assert seen == {f"job-{i}" for i in range(n)}, "a job was never run"
    # At least once: a job whose complete was lost with the primary may run again; each run is
    # counted, and every job ends completed exactly once.
    with Client(cluster.addrs) as c:
        counts = c.count("work")
        assert counts.completed == n
        assert counts.pending == counts.running == counts.errored == 0
    metrics = worker.metrics()
    assert metrics["sundial_worker_completed_total"] >= n


def test_switchover_moves_the_primary_and_loses_no_acknowledged_write(cluster):
    old = cluster.primary()
    acked, errors = [], []
    stop = threading.Event()

    def produce():
        with Client(cluster.addrs) as c:
            i = 0
            while not stop.is_set():
                try:
                    acked.append(c.enqueue("q", b"x", id=f"s-{i}").id)
                except SundialError as e:
                    errors.append(e)
                i += 1

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        wait_for(lambda: len(acked) >= 50, timeout=15, message="50 enqueues")
        with Client(cluster.addrs) as c:
            c.switchover()
        # The old primary's view can name itself for one more coordinator round.
        wait_for(lambda: cluster.primary(with_sync_standby=False) not in (None, old),
                 timeout=30, interval=0.05, message="a new primary")
        at = len(acked)
        wait_for(lambda: len(acked) >= at + 50, timeout=30, message="50 more enqueues")
    finally:
        stop.set()
        producer.join()
    assert not errors, errors[:3]
    with Client(cluster.addrs) as c:
        assert c.count("q").pending == len(acked)
        for message_id in acked:
            c.get("q", message_id)


async def until(condition, timeout, message):
    """wait_for inside an event loop: polls `condition()` every 10 ms until it is true."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {message}")
        await asyncio.sleep(0.01)


def test_the_async_client_and_its_watch_follow_the_primary_across_a_kill(cluster):
    old = cluster.primary()
    acked, completed, errors, events = set(), set(), [], []

    async def main():
        stop = asyncio.Event()
        async with AsyncClient(cluster.addrs, timeout=5.0) as c:
            assert c.follows_primary
            await c.create_queue("aq", lease_ms=10000)
            assert c.address == cluster.addr(old)

            async def produce(k):
                i = 0
                while not stop.is_set():
                    try:
                        if i % 2:  # no id of ours: the client gives it one, so a resend is a
                            r = await c.enqueue("aq", f"{k}-{i}")  # duplicate, not a second
                        else:
                            r = await c.enqueue("aq", f"{k}-{i}", id=f"a-{k}-{i}")
                        acked.add(r.id)
                    except SundialError as e:
                        errors.append(e)
                    i += 1

            async def consume():
                while not (stop.is_set() and acked <= completed):
                    try:
                        for m in await c.dequeue("aq", max=10, wait_ms=300):
                            await c.complete("aq", m.id, m.lease_token)
                            completed.add(m.id)
                    except SundialError as e:
                        errors.append(e)

            async def watch(w):
                async for e in w:
                    events.append(e)

            w = await c.watch("aq")
            watcher = asyncio.ensure_future(watch(w))
            tasks = [asyncio.ensure_future(produce(k)) for k in range(3)] + \
                [asyncio.ensure_future(consume()) for _ in range(2)]
            try:
                await until(lambda: len(acked) >= 100, 15, "100 enqueues before the kill")
                cluster.kill(old)
                at_kill = len(acked)
                await until(lambda: len(acked) >= at_kill + 100, 30,
                            "100 enqueues after the kill")
                assert c.address != cluster.addr(old)
                # The watch subscribed again on the new primary and goes on with events there.
                await until(lambda: any(isinstance(e, Resubscribed) for e in events), 30,
                            "the watch's Resubscribed marker")
                marker = next(i for i, e in enumerate(events) if isinstance(e, Resubscribed))
                await until(lambda: any(isinstance(e, MessageEvent)
                                        for e in events[marker + 1:]), 15,
                            "an event after the marker")
                assert w.resubscriptions >= 1 and events[marker].address == w.address
                assert events[marker].node != old and events[marker].error.code == "UNAVAILABLE"
                stop.set()
                # Leases carried by dequeue replies lost with the old primary end after 10 s.
                await asyncio.wait_for(asyncio.gather(*tasks), 60)
            finally:
                stop.set()
                for task in tasks:
                    task.cancel()
                await w.close()
                watcher.cancel()
            assert not errors, errors[:3]
            counts = await c.count("aq")
            assert counts.completed == len(acked), "an acknowledged enqueue was lost or doubled"
            assert counts.pending == counts.running == counts.invisible == 0
            for message_id in list(acked)[:300]:
                assert (await c.get("aq", message_id)).state == "completed"

    asyncio.run(asyncio.wait_for(main(), 180))


def next_event(watch, matches, timeout, message):
    """The first event of `watch` that `matches`, within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            pytest.fail(f"timed out after {timeout} s waiting for {message}")
        e = watch.next(timeout=remaining)
        if e is not None and matches(e):
            return e


def test_a_watch_keeps_delivering_events_after_a_failover(cluster):
    old = cluster.primary()
    with Client(cluster.addrs, timeout=5.0) as c, c.watch("wq") as w:
        c.enqueue("wq", b"", id="before")
        next_event(w, lambda e: isinstance(e, MessageEvent) and e.id == "before", 15,
                   "the event of an enqueue before the kill")
        cluster.kill(old)
        c.enqueue("wq", b"", id="during")  # waits for the new primary; its event may be missed
        marker = next_event(w, lambda e: isinstance(e, Resubscribed), 30, "the marker")
        assert marker.node != old and marker.node == c.cluster().primary
        assert w.address == marker.address and w.resubscriptions == 1
        assert marker.error.code == "UNAVAILABLE" and marker.time > 0
        c.enqueue("wq", b"", id="after")
        e = next_event(w, lambda e: isinstance(e, MessageEvent) and e.id == "after", 15,
                       "the event of an enqueue after the resubscription")
        assert (e.cause, e.to_state) == ("enqueued", "pending")


def test_a_watch_on_a_paused_primary_moves_to_the_new_one(cluster):
    # A paused primary closes nothing: the watch hears nothing for `timeout` seconds, asks
    # who leads, and subscribes on the new primary.
    old = cluster.primary()
    with Client(cluster.addrs, timeout=2.0) as c, c.watch("pq") as w:
        c.enqueue("pq", b"", id="before")
        next_event(w, lambda e: isinstance(e, MessageEvent) and e.id == "before", 15,
                   "the event of an enqueue before the pause")
        cluster.procs[old].send_signal(signal.SIGSTOP)
        try:
            c.enqueue("pq", b"", id="during")  # on the new primary, once elected
            marker = next_event(w, lambda e: isinstance(e, Resubscribed), 30, "the marker")
            assert marker.node != old and marker.error.code == "NOT_PRIMARY"
            c.enqueue("pq", b"", id="after")
            next_event(w, lambda e: isinstance(e, MessageEvent) and e.id == "after", 15,
                       "the event of an enqueue after the resubscription")
        finally:
            cluster.procs[old].send_signal(signal.SIGCONT)


def test_the_async_client_given_standbys_finds_the_primary(cluster):
    primary = cluster.primary()
    standbys = [cluster.addr(n) for n in sorted(cluster.nodes) if n != primary]

    async def main():
        async with AsyncClient(standbys[0]) as single:  # one address: not followed
            assert not single.follows_primary
            with pytest.raises(SundialError) as refused:
                await single.enqueue("jobs", b"x", id="a")
            assert refused.value.code == "NOT_PRIMARY"
            assert refused.value.primary == cluster.addr(primary)
        async with AsyncClient(",".join(standbys)) as c:  # the primary is in neither
            assert c.follows_primary
            assert (await c.enqueue("jobs", b"x", id="a")).id == "a"
            assert c.address == cluster.addr(primary) and c.connected
            view = await c.cluster()
            assert view.primary == view.node == primary and len(view.members) == 3
            r = await c.enqueue("jobs", b"y")  # an id of the client's own
            assert len(r.id) == 26 and not r.duplicate
            assert (await c.get("jobs", r.id)).payload == b"y"

    asyncio.run(asyncio.wait_for(main(), 60))


def test_an_async_watch_on_a_paused_primary_moves_to_the_new_one(cluster):
    old = cluster.primary()

    async def next_async_event(w, matches, timeout, message):
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                pytest.fail(f"timed out after {timeout} s waiting for {message}")
            e = await w.next(timeout=remaining)
            if e is not None and matches(e):
                return e

    async def main():
        async with AsyncClient(cluster.addrs, timeout=2.0) as c, c.watch("apq") as w:
            await c.enqueue("apq", b"", id="before")
            await next_async_event(w, lambda e: isinstance(e, MessageEvent) and
                                   e.id == "before", 15, "the event before the pause")
            cluster.procs[old].send_signal(signal.SIGSTOP)
            try:
                await c.enqueue("apq", b"", id="during")
                marker = await next_async_event(w, lambda e: isinstance(e, Resubscribed), 30,
                                                "the marker")
                assert marker.node != old and marker.error.code == "NOT_PRIMARY"
                assert w.resubscriptions == 1 and w.address == marker.address
                await c.enqueue("apq", b"", id="after")
                await next_async_event(w, lambda e: isinstance(e, MessageEvent) and
                                       e.id == "after", 15, "the event after the marker")
            finally:
                cluster.procs[old].send_signal(signal.SIGCONT)

    asyncio.run(asyncio.wait_for(main(), 120))
