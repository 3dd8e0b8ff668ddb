"""Operating a cluster (docs/operations.md, "High availability"; docs/replication.md): on a real
etcd and three real sundiald nodes on loopback, /readyz answers 200 only where writes are taken
and /metrics tells each node's role, epoch and replication figures, through a kill -9 of the
primary, the old primary's return as a standby, and a pause of the primary longer than its TTL.

Run by ctest (tests/CMakeLists.txt, label replication); alone:
  SUNDIALD=build/release/server/sundiald SUNDIAL_CLI=build/release/tools/sundial \\
      /usr/bin/python3 -m pytest -q tests/replication/ha_ops_test.py
"""

import json
import os
import re
import signal
import subprocess
import time

import pytest

from cluster_harness import Cluster, parse_metrics, wait_for

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SUNDIALD = os.environ.get("SUNDIALD") or os.path.join(ROOT, "build", "release", "server",
                                                      "sundiald")
CLI = os.environ.get("SUNDIAL_CLI") or os.path.join(ROOT, "build", "release", "tools", "sundial")
TTL_S = 2


def cli(node, *args, ok=True):
    r = subprocess.run([CLI, "--addr", node.addr, *args], capture_output=True, text=True,
                       timeout=30)
    assert (r.returncode == 0) == ok, f"sundial {' '.join(args)} on {node.name}: {r.stderr}"
    return [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]


def metrics(node):
    return parse_metrics(node.metrics())


def role_of(m):
    roles = [r for r in ("standalone", "primary", "standby", "unknown")
             if m.get(f'sundial_role{{role="{r}"}}') == 1]
    assert len(roles) == 1, f"one role is 1, not {roles}"
    return roles[0]


def sync_standby_of(m):
    names = [re.search(r'standby="([^"]*)"', k).group(1) for k, v in m.items()
             if k.startswith("sundial_replication_sync_standby{") and v == 1]
    return names[0] if names else None


@pytest.fixture(scope="module")
def cluster(request):
    for path in (SUNDIALD, CLI):
        if not os.access(path, os.X_OK):
            pytest.fail(f"no {path}: build the release preset (make build)")
    c = Cluster(SUNDIALD, nodes=3, ttl_s=TTL_S, flags=["--ha-loop-ms", "100"]).start()
    yield c
    c.stop()
    if request.session.testsfailed:
        print(f"\nthe cluster's directory is kept: {c.root}\n{c.logs()}")
    else:
        c.cleanup()


def settled(c, primary):
    """The primary's view once every live standby is connected and caught up, and a
    synchronous standby is published: its metrics."""
    standbys = c.standbys(primary)

    def check():
        m = metrics(primary)
        for s in standbys:
            if m.get(f'sundial_replication_standby_connected{{standby="{s.name}"}}') != 1:
                return None
            if m.get(f'sundial_replication_lag_records{{standby="{s.name}"}}') != 0:
                return None
        return m if m.get("sundial_replication_sync_standby_connected") == 1 else None

    return wait_for(check, 30, f"{primary.name}'s standbys connected, caught up, one sync")


def test_readyz_and_metrics_tell_the_primary_from_the_standbys(cluster):
    primary = cluster.wait_primary()
    status, body = primary.readyz()
    assert (status, body) == (200, "ready\n")
    m = settled(cluster, primary)
    assert role_of(m) == "primary"
    assert m["sundial_ready"] == 1
    assert m["sundial_etcd_reachable"] == 1
    assert m['sundial_cluster_info{cluster="test",node="%s",replication="sync"}' % primary.name]
    assert m["sundial_promotions_total"] == 1
    epoch = m["sundial_epoch"]
    assert epoch > 0
    assert sync_standby_of(m) in {s.name for s in cluster.standbys(primary)}
    for s in cluster.standbys(primary):
        status, body = s.readyz()
        assert status == 503, (s.name, status, body)
        assert body.startswith(f"not primary: {s.name} is a standby; the primary is "
                               f"{primary.name} at {primary.addr}"), body
        sm = wait_for(lambda: (lambda x: x if x.get("sundial_standby_connected") == 1 else None)(
            metrics(s)), 30, f"{s.name} connected")
        assert role_of(sm) == "standby"
        assert sm["sundial_ready"] == 0
        assert sm["sundial_epoch"] == epoch
        assert not any(k.startswith("sundial_replication_lag_records") for k in sm)


def test_a_write_shows_as_lag_until_acknowledged_and_reaches_every_standby(cluster):
    primary = cluster.wait_primary()
    settled(cluster, primary)
    cli(primary, "enqueue", "ops", "--id", "before-kill", "--payload", "x")
    # Durable: the synchronous standby acknowledged it, so its lag (as the primary sees it)
    # is already 0; the other standby catches up within moments.
    m = settled(cluster, primary)
    assert m[f'sundial_replication_lag_records{{standby="{sync_standby_of(m)}"}}'] == 0
    for s in cluster.standbys(primary):
        wait_for(lambda: metrics(s).get("sundial_standby_lag_records") == 0, 30,
                 f"{s.name}'s own lag at 0")
        got = cli(s, "get", "ops", "before-kill")
        assert got and got[0]["id"] == "before-kill", got
    # A standby refuses the write, naming the primary.
    other = cluster.standbys(primary)[0]
    r = subprocess.run([CLI, "--addr", other.addr, "enqueue", "ops", "--payload", "y"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    assert "NOT_PRIMARY" in r.stderr and primary.name in r.stderr, r.stderr


def test_kill_of_the_primary_promotes_the_synchronous_standby(cluster):
    old = cluster.wait_primary()
    m = settled(cluster, old)
    sync = sync_standby_of(m)
    epoch = m["sundial_epoch"]
    cluster.kill(old)
    killed = time.monotonic()
    new = cluster.wait_primary(exclude=old, timeout=TTL_S * 5 + 10)
    took = time.monotonic() - killed
    print(f"failover: {old.name} killed, {new.name} ready {took:.2f} s later")
    assert new.name == sync, f"{new.name} took over; the synchronous standby was {sync}"
    assert took < TTL_S + 5, f"failover took {took:.1f} s with a {TTL_S} s TTL"
    nm = metrics(new)
    assert role_of(nm) == "primary"
    assert nm["sundial_epoch"] > epoch
    assert nm["sundial_promotions_total"] == 1
    # Everything acknowledged before the kill is there.
    assert cli(new, "get", "ops", "before-kill")[0]["id"] == "before-kill"
    # The third node follows the new primary.
    third = [n for n in cluster.standbys(new)][0]
    wait_for(lambda: metrics(third).get("sundial_epoch") == nm["sundial_epoch"] and
             metrics(third).get("sundial_standby_connected") == 1, 30,
             f"{third.name} following {new.name}")
    status, body = third.readyz()
    assert status == 503 and f"the primary is {new.name}" in body, body


def test_the_old_primary_rejoins_as_a_standby(cluster):
    primary = cluster.wait_primary()
    down = [n for n in cluster.nodes.values() if not n.alive]
    assert len(down) == 1, "the previous test killed one node"
    old = cluster.restart(down[0])
    m = wait_for(lambda: (lambda x: x if x.get("sundial_standby_connected") == 1 and
                          role_of(x) == "standby" else None)(metrics(old)), 30,
                 f"{old.name} back as a standby")
    assert m["sundial_ready"] == 0
    assert old.readyz()[0] == 503
    settled(cluster, primary)
    assert cli(old, "get", "ops", "before-kill")[0]["id"] == "before-kill"


def test_a_paused_primary_is_not_ready_when_it_wakes_and_steps_down(cluster):
    old = cluster.wait_primary()
    settled(cluster, old)
    old.send_signal(signal.SIGSTOP)
    try:
        new = cluster.wait_primary(exclude=old, timeout=TTL_S * 5 + 10)
    finally:
        old.send_signal(signal.SIGCONT)
    # Its leadership's deadline passed while it slept: it takes no write from the moment it
    # wakes, before its HA loop has even looked at etcd.
    status, body = old.readyz()
    assert status == 503, body
    m = wait_for(lambda: (lambda x: x if role_of(x) == "standby" and
                          x.get("sundial_standby_connected") == 1 else None)(metrics(old)), 30,
                 f"{old.name} following {new.name}")
    assert m["sundial_demotions_total"] == 1
    assert cluster.ready_nodes() == [new]
    cli(new, "enqueue", "ops", "--id", "after-pause", "--payload", "z")
    settled(cluster, new)
