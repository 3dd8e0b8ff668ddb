"""Client against a real sundiald: every method, every error code, pipelining, reconnects."""

import os
import socket
import struct
import threading
import time

import pytest
from conftest import wait_for

from sundial import Client, Message, SundialError
from sundial.address import parse_address


def now_ms():
    return int(time.time() * 1000)


# ---- Queues --------------------------------------------------------------------------------


def test_create_queue_round_trips_every_setting(client, queue):
    dlq = queue + ".dlq"
    client.create_queue(dlq)
    q = client.create_queue(queue, lease_ms=60000, invisibility_ms=5, max_attempts=3,
                            retry_backoff_ms=500, retry_backoff_max_ms=9000,
                            dead_letter_queue=dlq, retention_ms=120000, max_depth=50,
                            enqueue_paused=False, dequeue_paused=True)
    assert (q.name, q.type, q.exclusivity_key) == (queue, "simple", None)
    assert q.settings == dict(type="simple", exclusivity_key=None, lease_ms=60000,
                              invisibility_ms=5, max_attempts=3, retry_backoff_ms=500,
                              retry_backoff_max_ms=9000, dead_letter_queue=dlq,
                              retention_ms=120000, max_depth=50, enqueue_paused=False,
                              dequeue_paused=True, history_max=32, flow_key=None,
                              key_concurrency=0, ttl_ms=0, dedupe="keep", rate_per_s=0,
                              burst=1, key_rate_per_s=0, key_burst=1, fairness="none",
                              overdue_first_ms=0)
    assert q.counts.pending == 0
    assert client.get_queue(queue) == q


def test_create_queue_defaults_are_specs(client, queue):
    q = client.create_queue(queue)
    assert q.settings == dict(type="simple", exclusivity_key=None, lease_ms=30000,
                              invisibility_ms=0, max_attempts=5, retry_backoff_ms=1000,
                              retry_backoff_max_ms=300000, dead_letter_queue=None,
                              retention_ms=3600000, max_depth=0, enqueue_paused=False,
                              dequeue_paused=False, history_max=32, flow_key=None,
                              key_concurrency=0, ttl_ms=0, dedupe="keep", rate_per_s=0,
                              burst=1, key_rate_per_s=0, key_burst=1, fairness="none",
                              overdue_first_ms=0)


def test_create_queue_again_identical_succeeds_different_is_already_exists(client, queue):
    client.create_queue(queue, max_attempts=3)
    assert client.create_queue(queue, max_attempts=3).max_attempts == 3
    with pytest.raises(SundialError) as e:
        client.create_queue(queue, max_attempts=4)
    assert (e.value.code, e.value.origin) == ("ALREADY_EXISTS", "server")
    assert "settings" in e.value.message


def test_create_queue_refuses_bad_names_and_values(client):
    with pytest.raises(SundialError) as e:
        client.create_queue("no spaces")
    assert e.value.code == "INVALID_ARGUMENT" and "name" in e.value.message
    with pytest.raises(SundialError) as e:
        client.create_queue("x", lease_ms=0)
    assert e.value.code == "INVALID_ARGUMENT" and "lease_ms" in e.value.message
    with pytest.raises(SundialError) as e:
        client.create_queue("x", type="fifo")
    assert (e.value.code, e.value.origin) == ("INVALID_ARGUMENT", "local")
    with pytest.raises(TypeError, match="unknown setting 'lease'"):
        client.create_queue("x", lease=5)
    with pytest.raises(SundialError) as e:
        client.create_queue("x", dead_letter_queue="does-not-exist-anywhere")
    assert e.value.code == "NOT_FOUND"


def test_exclusive_queue_needs_its_key_in_every_message(client, queue):
    q = client.create_queue(queue, type="exclusive", exclusivity_key="repo")
    assert (q.type, q.exclusivity_key) == ("exclusive", "repo")
    with pytest.raises(SundialError) as e:
        client.enqueue(queue, b"x")
    assert e.value.code == "INVALID_ARGUMENT"
    client.enqueue(queue, b"a", priority=1, metadata={"repo": "web"})
    client.enqueue(queue, b"b", priority=2, metadata={"repo": "web"})
    client.enqueue(queue, b"c", priority=3, metadata={"repo": "api"})
    leased = client.dequeue(queue, max=10)
    assert [m.payload for m in leased] == [b"a", b"c"]  # b waits for web's lease
    assert client.count(queue).blocked == 1
    assert client.explain(queue, client.browse(queue).messages[0].id).reason == \
        "exclusivity_held"


def test_flow_key_and_key_concurrency_round_trip_with_the_engines_rules(client, queue):
    q = client.create_queue(queue, flow_key="tenant", key_concurrency=2)
    assert (q.flow_key, q.key_concurrency) == ("tenant", 2)
    assert client.create_queue(queue, flow_key="tenant", key_concurrency=2) == q
    with pytest.raises(SundialError) as e:
        client.create_queue(queue, flow_key="region", key_concurrency=2)
    assert e.value.code == "ALREADY_EXISTS"
    assert client.update_queue(queue, key_concurrency=0).key_concurrency == 0
    got = client.get_queue(queue)
    assert (got.flow_key, got.key_concurrency) == ("tenant", 0)
    assert got.settings["flow_key"] == "tenant"
    with pytest.raises(TypeError, match="fixed at creation"):
        client.update_queue(queue, flow_key="region")
    with pytest.raises(SundialError) as e:
        client.update_queue(queue, key_concurrency=1_000_001)
    assert (e.value.code, e.value.origin) == ("INVALID_ARGUMENT", "server")
    assert e.value.message == "key_concurrency: must be 0 (no limit) to 1000000"
    with pytest.raises(SundialError) as e:
        client.create_queue(queue + "-nokey", key_concurrency=3)
    assert (e.value.code, e.value.message) == ("INVALID_ARGUMENT",
                                               "key_concurrency: needs a flow_key")
    with pytest.raises(SundialError) as e:
        client.create_queue(queue + "-ex", type="exclusive", exclusivity_key="repo",
                            flow_key="repo", key_concurrency=2)
    assert (e.value.code, e.value.message) == (
        "INVALID_ARGUMENT", "key_concurrency: an exclusive queue runs one message per value")
    ex = client.create_queue(queue + "-ex", type="exclusive", exclusivity_key="repo",
                             flow_key="repo", key_concurrency=1)
    assert (ex.flow_key, ex.key_concurrency) == ("repo", 1)
    with pytest.raises(SundialError) as e:
        client.create_queue(queue + "-neg", flow_key="tenant", key_concurrency=-1)
    assert (e.value.code, e.value.origin) == ("INVALID_ARGUMENT", "local")


def test_rates_round_trip_throttle_a_key_and_are_checked(client, queue):
    q = client.create_queue(queue, flow_key="merchant", key_rate_per_s=0.001, key_burst=2,
                            rate_per_s=2.5, burst=10)
    assert (q.key_rate_per_s, q.key_burst, q.rate_per_s, q.burst) == (0.001, 2, 2.5, 10)
    assert q.settings["key_rate_per_s"] == 0.001
    u = client.update_queue(queue, rate_per_s=0)  # 0 must reach the server: no queue bucket
    assert (u.rate_per_s, u.burst, u.key_rate_per_s) == (0, 10, 0.001)
    for i in ("a1", "a2", "a3"):
        client.enqueue(queue, b"x", id=i, metadata={"merchant": "acme"})
    assert sorted(m.id for m in client.dequeue(queue, max=10)) == ["a1", "a2"]
    why = client.explain(queue, "a3")
    assert (why.reason, why.exclusivity_value) == ("key_rate", "acme")
    with pytest.raises(SundialError) as e:
        client.update_queue(queue, key_rate_per_s=0.0005)
    assert (e.value.code, e.value.origin, e.value.message) == (
        "INVALID_ARGUMENT", "server",
        "key_rate_per_s: must be 0.001-1000000 with at most 3 decimals")
    with pytest.raises(SundialError) as e:
        client.update_queue(queue, rate_per_s="fast")
    assert (e.value.code, e.value.origin) == ("INVALID_ARGUMENT", "local")


def test_fairness_round_trips_and_takes_turns(client, queue):
    q = client.create_queue(queue, flow_key="tenant", fairness="weighted", overdue_first_ms=5000)
    assert (q.fairness, q.overdue_first_ms) == ("weighted", 5000)
    # Priorities 0-100 are long overdue as deadlines: they would all jump the turns.
    client.update_queue(queue, overdue_first_ms=0)
    for i in range(3):
        client.enqueue(queue, b"x", id=f"big{i}", priority=i, metadata={"tenant": "big"})
    client.enqueue(queue, b"x", id="small0", priority=100, metadata={"tenant": "small"})
    assert client.explain(queue, "small0").reason == "fair_share"
    assert [m.id for m in client.dequeue(queue, max=3)] == ["big0", "small0", "big1"]
    assert client.update_queue(queue, fairness="none", overdue_first_ms=0).fairness == "none"
    with pytest.raises(SundialError) as e:
        client.update_queue(queue, fairness="loud")
    assert (e.value.code, e.value.origin) == ("INVALID_ARGUMENT", "local")
    with pytest.raises(SundialError) as e:
        client.create_queue(queue + "-plain", fairness="weighted")
    assert (e.value.code, e.value.message) == ("INVALID_ARGUMENT", "fairness: needs a flow_key")


def test_key_limits_override_one_value_and_list_keys_shows_it(client, queue):
    client.create_queue(queue, flow_key="studio", key_concurrency=1)
    for i in range(3):
        client.enqueue(queue, b"x", id=f"a{i}", metadata={"studio": "acme"})
    client.enqueue(queue, b"x", id="b0", metadata={"studio": "bolt"})
    k = client.set_key_limits(queue, "acme", concurrency=2, rate_per_s=0.5, weight=3)
    assert (k.value, k.concurrency, k.rate_per_s, k.burst, k.weight) == ("acme", 2, 0.5, 1, 3)
    assert k.overrides == {"concurrency": 2, "rate_per_s": 0.5, "weight": 3}
    assert len(client.dequeue(queue, max=10)) == 2  # acme's one token, and bolt
    keys = client.list_keys(queue)
    assert [x.value for x in keys] == ["acme", "bolt"]
    assert (keys[0].pending, keys[0].running) == (2, 1)
    assert keys[0].next_token > 0
    assert [x.value for x in client.list_keys(queue, order="running", limit=1)] == ["acme"]
    back = client.set_key_limits(queue, "acme")
    assert back.overrides == {} and back.concurrency == 1 and back.held
    assert client.get_key_limits(queue, "nobody").pending == 0
    with pytest.raises(SundialError) as e:
        client.set_key_limits(queue, "acme", weight=0)
    assert (e.value.code, e.value.message) == ("INVALID_ARGUMENT", "weight: must be 1-1000")
    with pytest.raises(SundialError) as e:
        client.list_keys(queue, order="loudest")
    assert (e.value.code, e.value.origin) == ("INVALID_ARGUMENT", "local")
    client.create_queue(queue + "-plain")
    with pytest.raises(SundialError) as e:
        client.list_keys(queue + "-plain")
    assert e.value.code == "FAILED_PRECONDITION"


def test_update_queue_changes_settings_and_keeps_type(client, queue):
    client.create_queue(queue, lease_ms=1000)
    q = client.update_queue(queue, lease_ms=2000, dequeue_paused=True)
    assert (q.lease_ms, q.dequeue_paused) == (2000, True)
    with pytest.raises(TypeError, match="fixed at creation"):
        client.update_queue(queue, type="exclusive")
    with pytest.raises(SundialError) as e:
        client.update_queue(queue + "-missing", lease_ms=5)
    assert e.value.code == "NOT_FOUND"


def test_get_list_delete_purge_queue(client, queue):
    client.create_queue(queue)
    client.enqueue(queue, b"1")
    client.enqueue(queue, b"2")
    names = [q.name for q in client.list_queues()]
    assert queue in names and names == sorted(names)
    assert client.get_queue(queue).counts.pending == 2
    assert client.purge_queue(queue, ["pending"]) == 2
    assert client.purge_queue(queue, "completed") == 0
    assert client.delete_queue(queue) is None
    with pytest.raises(SundialError) as e:
        client.get_queue(queue)
    assert (e.value.code, e.value.message) == ("NOT_FOUND", "queue: no such queue")
    with pytest.raises(SundialError) as e:
        client.purge_queue(queue, ["bogus"])
    assert (e.value.code, e.value.origin) == ("INVALID_ARGUMENT", "local")


# ---- Enqueue -------------------------------------------------------------------------------


def test_enqueue_returns_id_version_and_duplicate(client, queue):
    r = client.enqueue(queue, b"hello", priority=7, metadata={"tenant": "acme"}, id="m-1")
    assert (r.id, r.version, r.duplicate, r.error) == ("m-1", 1, False, None)
    again = client.enqueue(queue, b"hello", priority=7, metadata={"tenant": "acme"}, id="m-1")
    assert again.duplicate is True
    with pytest.raises(SundialError) as e:
        client.enqueue(queue, b"other", priority=7, id="m-1")
    assert e.value.code == "ALREADY_EXISTS"
    generated = client.enqueue(queue, "text payload")
    assert len(generated.id) == 26 and generated.id != "m-1"
    m = client.get(queue, generated.id)
    assert isinstance(m, Message)
    assert (m.payload, m.state, m.priority) == (b"text payload", "pending", 0)
    m = client.get(queue, "m-1")
    assert (m.payload, m.priority, m.metadata, m.version) == (b"hello", 7,
                                                             {"tenant": "acme"}, 1)


def test_enqueue_with_delay_visible_at_and_max_attempts(client, queue):
    client.enqueue(queue, id="later", delay_ms=60000)
    client.enqueue(queue, id="at", visible_at=now_ms() + 60000, max_attempts=9)
    later, at = client.get(queue, "later"), client.get(queue, "at")
    assert later.state == at.state == "invisible"
    assert later.visible_at > now_ms() + 50000
    assert at.max_attempts == 9
    with pytest.raises(SundialError) as e:
        client.enqueue(queue, id="both", delay_ms=1, visible_at=1)
    assert (e.value.code, e.value.origin) == ("INVALID_ARGUMENT", "local")


def test_enqueue_checks_argument_types_locally(client, queue):
    for kwargs, field in [(dict(priority="1"), "priority"), (dict(payload=5), "payload"),
                          (dict(metadata={"k": 1}), "metadata"), (dict(priority=1 << 63),
                                                                  "priority")]:
        with pytest.raises(SundialError) as e:
            client.enqueue(queue, **kwargs)
        assert (e.value.code, e.value.origin) == ("INVALID_ARGUMENT", "local")
        assert field in e.value.message


def test_enqueue_batch_splits_into_pipelined_requests_and_answers_per_item(client, queue):
    client.enqueue(queue, b"taken", id="dup")
    items = [dict(payload=b"%d" % i, priority=i) for i in range(2500)]
    items[1234] = dict(payload=b"different", id="dup")
    results = client.enqueue_batch(queue, items)
    assert len(results) == 2500
    assert results[1234].error.code == "ALREADY_EXISTS"
    assert all(r.error is None for k, r in enumerate(results) if k != 1234)
    assert len({r.id for r in results}) == 2500
    assert client.count(queue).pending == 2500  # 2499 new and the earlier one
    with pytest.raises(SundialError) as e:
        client.enqueue_batch(queue, [dict(payload=b"x", colour="red")])
    assert "colour" in e.value.message


def test_enqueue_paused_is_failed_precondition_and_max_depth_resource_exhausted(client, queue):
    client.create_queue(queue, max_depth=1)
    client.enqueue(queue)
    with pytest.raises(SundialError) as e:
        client.enqueue(queue)
    assert e.value.code == "RESOURCE_EXHAUSTED"
    assert "max_depth" in e.value.message
    client.update_queue(queue, enqueue_paused=True, max_depth=0)
    with pytest.raises(SundialError) as e:
        client.enqueue(queue)
    assert e.value.code == "FAILED_PRECONDITION"


def test_relaxed_durability_is_accepted_per_call_and_per_client(server, client, queue):
    assert client.enqueue(queue, b"x", durability="relaxed").version == 1
    with Client(server.addr, durability="relaxed") as relaxed:
        relaxed.enqueue(queue, b"y")
    assert client.count(queue).pending == 2
    with pytest.raises(SundialError) as e:
        client.enqueue(queue, durability="sometimes")
    assert e.value.code == "INVALID_ARGUMENT"


# ---- Dequeue, complete, fail, extend -------------------------------------------------------


def test_dequeue_leases_earliest_priority_first(client, queue):
    client.enqueue_batch(queue, [dict(payload=b"%d" % p, priority=p) for p in (5, 1, 3, 1)])
    leased = client.dequeue(queue, max=3, lease_ms=5000)
    assert [m.priority for m in leased] == [1, 1, 3]
    for m in leased:
        assert (m.state, m.attempts, m.queue) == ("running", 1, queue)
        assert m.lease_token > 0
        assert m.lease_expires_at - m.updated_at == 5000
    assert client.dequeue(queue, max=5)[0].priority == 5
    assert client.dequeue(queue) == []


def test_dequeue_with_filter(client, queue):
    client.enqueue(queue, b"a", metadata={"tenant": "acme", "kind": "x"})
    client.enqueue(queue, b"g", metadata={"tenant": "globex"})
    assert [m.payload for m in client.dequeue(queue, max=10, filter={"tenant": "globex"})] == \
        [b"g"]
    assert client.dequeue(queue, filter=[("tenant", "acme"), ("kind", "y")]) == []
    with pytest.raises(SundialError) as e:
        client.dequeue(queue, filter={f"k{i}": "v" for i in range(5)})
    assert e.value.code == "INVALID_ARGUMENT" and "filter" in e.value.message


def test_dequeue_refuses_out_of_range_arguments(client, queue):
    for kwargs in (dict(max=0), dict(max=1001), dict(wait_ms=60001), dict(lease_ms=0)):
        with pytest.raises(SundialError) as e:
            client.dequeue(queue, **kwargs)
        assert e.value.code == "INVALID_ARGUMENT", kwargs


def test_long_poll_is_woken_by_an_enqueue_and_empty_when_it_runs_out(client, queue):
    assert client.dequeue(queue, wait_ms=50) == []
    got = []
    t = threading.Thread(target=lambda: got.append(client.dequeue(queue, wait_ms=30000)))
    t.start()
    wait_for(lambda: client.stats().connections >= 1)
    client.enqueue(queue, b"wake up")
    t.join(25)
    assert not t.is_alive()
    assert [m.payload for m in got[0]] == [b"wake up"]


def test_complete_and_its_errors(client, queue):
    client.enqueue(queue, id="a")
    (m,) = client.dequeue(queue)
    assert client.complete(queue, m.id, m.lease_token) is None
    assert client.complete(queue, m.id, m.lease_token) is None  # idempotent
    assert client.get(queue, "a").state == "completed"
    with pytest.raises(SundialError) as e:
        client.complete(queue, m.id, m.lease_token + 1)
    assert e.value.code == "FAILED_PRECONDITION"
    with pytest.raises(SundialError) as e:
        client.complete(queue, "nope", 1)
    assert e.value.code == "NOT_FOUND"


def test_complete_batch_answers_per_item(client, queue):
    client.enqueue_batch(queue, [dict(id=f"m{i}") for i in range(3)])
    leased = client.dequeue(queue, max=3)
    items = [(m.id, m.lease_token) for m in leased] + [("ghost", 5)]
    items[1] = (items[1][0], items[1][1] + 1)
    results = client.complete_batch(queue, items)
    assert results[0] is None and results[2] is None
    assert results[1].code == "FAILED_PRECONDITION" and results[3].code == "NOT_FOUND"


def test_complete_and_next_completes_and_leases_in_one_request(client, queue):
    client.enqueue_batch(queue, [dict(id=f"m{i}", priority=i) for i in range(4)])
    (m,) = client.dequeue(queue)
    r = client.complete_and_next(queue, [(m.id, m.lease_token, "done")], max=2)
    assert r.items == [None] and r.next_error is None
    assert [n.id for n in r.messages] == ["m1", "m2"]
    assert all(n.state == "running" for n in r.messages)
    assert client.get(queue, "m0").state == "completed"
    # The next runs whatever the items' outcomes: a stale token is that item's error.
    stale = (r.messages[0].id, r.messages[0].lease_token + 1)
    r = client.complete_and_next(queue, [stale], max=5)
    assert r.items[0].code == "FAILED_PRECONDITION"
    assert [n.id for n in r.messages] == ["m3"]
    # A refused next (a bad filter) refuses the completes too, per item and in next_error.
    m2 = client.get(queue, "m2")
    r = client.complete_and_next(queue, [("m2", m2.lease_token)],
                                 filter={f"k{i}": "v" for i in range(5)})
    assert r.next_error.code == "INVALID_ARGUMENT" and r.items[0].code == "INVALID_ARGUMENT"
    assert r.messages == []
    assert client.get(queue, "m2").state == "running"


def test_fail_retries_with_backoff_then_errors_or_dead_letters(client, queue):
    dlq = queue + ".dlq"
    client.create_queue(dlq)
    client.create_queue(queue, max_attempts=2, retry_backoff_ms=60000, dead_letter_queue=dlq)
    client.enqueue(queue, id="m")
    (m,) = client.dequeue(queue)
    r = client.fail(queue, m.id, m.lease_token, error="SMTP 451")
    assert r.state == "invisible" and r.visible_at >= now_ms() + 50000
    got = client.get(queue, "m")
    assert (got.state, got.last_error, got.attempts) == ("invisible", "SMTP 451", 1)
    client.reprioritize(queue, "m", visible_at=0)  # due now
    (m,) = wait_for(lambda: client.dequeue(queue))
    r = client.fail(queue, m.id, m.lease_token, error="again", retry_delay_ms=0)
    assert (r.state, r.dead_letter_queue) == ("errored", dlq)
    moved = client.get(dlq, "m")
    assert moved.state == "pending" and moved.metadata["x-origin-queue"] == queue
    with pytest.raises(SundialError) as e:
        client.fail(queue, m.id, m.lease_token)
    assert e.value.code in ("FAILED_PRECONDITION", "NOT_FOUND")


def test_fail_with_retry_delay_zero_is_pending_at_once(client, queue):
    client.enqueue(queue, id="m")
    (m,) = client.dequeue(queue)
    assert client.fail(queue, m.id, m.lease_token, retry_delay_ms=0).state in ("pending",
                                                                               "invisible")
    (again,) = wait_for(lambda: client.dequeue(queue))
    assert again.attempts == 2 and again.lease_token != m.lease_token


def test_extend_moves_the_expiry_and_refuses_a_stale_token(client, queue):
    client.enqueue(queue, id="m")
    (m,) = client.dequeue(queue, lease_ms=1000)
    expires = client.extend(queue, m.id, m.lease_token, 60000)
    assert expires >= m.lease_expires_at + 50000
    assert client.get(queue, "m").lease_expires_at == expires
    with pytest.raises(SundialError) as e:
        client.extend(queue, m.id, m.lease_token + 1, 1000)
    assert e.value.code == "FAILED_PRECONDITION"


def test_an_expired_lease_makes_the_message_pending_again(client, queue):
    client.enqueue(queue, id="m")
    (m,) = client.dequeue(queue, lease_ms=50)
    (again,) = wait_for(lambda: client.dequeue(queue))
    assert again.attempts == 2
    with pytest.raises(SundialError) as e:
        client.complete(queue, m.id, m.lease_token)
    assert e.value.code == "FAILED_PRECONDITION"


# ---- Cancel, reprioritize, redrive, get, browse, count, explain ---------------------------


def test_cancel_by_ids_one_id_and_filter(client, queue):
    client.enqueue_batch(queue, [dict(id="a"), dict(id="b", metadata={"t": "x"}),
                                 dict(id="c", metadata={"t": "x"})])
    assert client.cancel(queue, ["a", "ghost"])[0] is None
    assert client.cancel(queue, ["ghost"])[0].code == "NOT_FOUND"
    with pytest.raises(SundialError) as e:
        client.cancel(queue, "ghost")
    assert e.value.code == "NOT_FOUND"
    assert client.cancel(queue, filter={"t": "x"}) == 2
    assert client.count(queue).canceled == 3
    with pytest.raises(SundialError):
        client.cancel(queue)


def test_reprioritize_by_id_and_filter(client, queue):
    client.enqueue_batch(queue, [dict(id="a", priority=5), dict(id="b", priority=6,
                                                                metadata={"t": "x"})])
    version = client.reprioritize(queue, "b", priority=1)
    assert version == 2 and client.dequeue(queue)[0].id == "b"
    assert client.reprioritize(queue, filter={"t": "nobody"}, priority=0) == 0
    with pytest.raises(SundialError) as e:
        client.reprioritize(queue, "b", priority=0)  # running now
    assert e.value.code == "FAILED_PRECONDITION"


def test_redrive_by_ids_all_and_filter(client, queue):
    client.create_queue(queue, max_attempts=1)
    client.enqueue_batch(queue, [dict(id=i, metadata={"t": i}) for i in ("a", "b", "c")])
    for m in client.dequeue(queue, max=3):
        client.fail(queue, m.id, m.lease_token, error="no")
    assert client.count(queue).errored == 3
    assert client.redrive(queue, ["a"]) == [None]
    assert client.redrive(queue, filter={"t": "b"}) == 1
    assert client.redrive(queue, all=True) == 1
    assert client.count(queue).pending == 3
    with pytest.raises(SundialError) as e:
        client.redrive(queue, "a")
    assert e.value.code == "FAILED_PRECONDITION"


def test_get_unknown_message_is_not_found(client, queue):
    client.create_queue(queue)
    with pytest.raises(SundialError) as e:
        client.get(queue, "nope")
    assert (e.value.code, e.value.message, e.value.origin) == ("NOT_FOUND",
                                                              "id: no such message", "server")
    assert str(e.value) == "NOT_FOUND: id: no such message"


def test_browse_pages_in_dequeue_order(client, queue):
    client.enqueue_batch(queue, [dict(id=f"m{p}", priority=p, metadata={"even": str(p % 2 == 0)})
                                 for p in range(7)])
    seen, cursor = [], None
    while True:
        page = client.browse(queue, state="pending", limit=3, cursor=cursor)
        seen += [m.id for m in page.messages]
        if not page.next_cursor:
            break
        cursor = page.next_cursor
    assert seen == [f"m{p}" for p in range(7)]
    evens = client.browse(queue, filter={"even": "True"})
    assert [m.id for m in evens.messages] == ["m0", "m2", "m4", "m6"]
    assert evens.messages[0].state == "pending" and evens.messages[0].version == 1
    with pytest.raises(SundialError) as e:
        client.browse(queue, cursor="not-a-cursor")
    assert e.value.code == "INVALID_ARGUMENT"
    with pytest.raises(SundialError) as e:
        client.browse(queue, state="gone")
    assert e.value.origin == "local"


def test_count_with_and_without_filter(client, queue):
    client.enqueue_batch(queue, [dict(metadata={"t": "a"}), dict(metadata={"t": "b"}),
                                 dict(metadata={"t": "a"}, delay_ms=60000)])
    c = client.count(queue)
    assert (c.pending, c.invisible, c.running) == (2, 1, 0)
    assert client.count(queue, {"t": "a"}).as_dict() == dict(invisible=1, pending=1, running=0,
                                                             completed=0, canceled=0,
                                                             errored=0, waiting=0,
                                                             blocked=0)


def test_explain_by_id_and_filter(client, queue):
    client.enqueue(queue, id="later", delay_ms=60000, metadata={"t": "a"})
    e = client.explain(queue, "later")
    assert (e.reason, e.id, e.state) == ("invisible", "later", "invisible")
    assert e.until > now_ms()
    assert client.explain(queue, filter={"t": "zzz"}).reason == "no_match"
    with pytest.raises(SundialError):
        client.explain(queue)


def test_stats_and_health(client, queue):
    client.enqueue(queue)
    s = client.stats()
    assert s.queues >= 1 and s.messages.pending >= 1 and s.connections >= 1
    assert s.wal_durable_lsn > 0 and s.wal_failed is False
    assert client.health().as_dict() == dict(live=True, ready=True, reason="")


# ---- Pipelining and concurrency -----------------------------------------------------------


def test_many_threads_pipeline_on_one_connection(client, queue):
    errors = []

    def producer(k):
        try:
            for i in range(100):
                r = client.enqueue(queue, b"%d-%d" % (k, i), id=f"{k}-{i}")
                assert r.id == f"{k}-{i}"
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=producer, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert client.count(queue).pending == 800
    assert client.stats().connections >= 1


def test_a_long_poll_does_not_hold_back_other_threads_calls(client, queue):
    client.create_queue(queue)
    result = []
    poller = threading.Thread(target=lambda: result.append(client.dequeue(queue, wait_ms=30000)))
    poller.start()
    wait_for(lambda: client._conn is not None and len(client._conn._pending) == 1,
             message="the poll written")
    # While the poll waits on the same connection, other calls are answered.
    for i in range(20):
        client.enqueue(queue + "-other", b"x")
        client.get_queue(queue)
    assert poller.is_alive() and not result
    client.enqueue(queue, b"now")
    poller.join(25)
    assert [m.payload for m in result[0]] == [b"now"]


# ---- Connections: refusals, deadlines, restarts --------------------------------------------


def test_unreachable_server_is_unavailable_after_the_deadline():
    with socket.socket() as s:  # a port that refuses: bound, never listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        c = Client(f"127.0.0.1:{port}", timeout=0.3)
        with pytest.raises(SundialError) as e:
            c.stats()
    assert (e.value.code, e.value.origin) == ("UNAVAILABLE", "connection")
    assert "cannot connect" in e.value.message


class FakeServer:
    """A listener that answers each frame with `reply(frame_bytes)` (None: no answer)."""

    def __init__(self, reply):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.addr = "127.0.0.1:%d" % self.sock.getsockname()[1]
        self.reply = reply
        self.conns = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            threading.Thread(target=self._talk, args=(conn,), daemon=True).start()

    def _talk(self, conn):
        f = conn.makefile("rb")
        try:
            while True:
                head = f.read(4)
                if len(head) < 4:
                    return
                body = f.read(struct.unpack("<I", head)[0])
                out = self.reply(body)
                if out is not None:
                    conn.sendall(out)
        except OSError:
            return

    def close(self):
        self.sock.close()
        for c in self.conns:
            c.close()


def test_no_reply_within_the_deadline_is_unavailable_and_the_connection_stays():
    fake = FakeServer(lambda frame: None)
    try:
        c = Client(fake.addr, timeout=0.2)
        with pytest.raises(SundialError) as e:
            c.stats()
        assert (e.value.code, e.value.origin) == ("UNAVAILABLE", "connection")
        assert "no reply" in e.value.message
        assert c.connected
    finally:
        fake.close()


def test_an_unreadable_reply_is_internal_and_closes_the_connection():
    fake = FakeServer(lambda frame: struct.pack("<I", 8) + b"\xff" * 8)
    try:
        c = Client(fake.addr, timeout=5)
        with pytest.raises(SundialError) as e:
            c.stats()
        assert (e.value.code, e.value.origin) == ("INTERNAL", "connection")
        wait_for(lambda: not c.connected)
    finally:
        fake.close()


def test_a_token_is_required_and_checked(make_server, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("s3cret\n")
    server = make_server(["--auth-token-file", str(token_file)], fixed_port=False)
    with pytest.raises(SundialError) as e:
        Client(server.addr).stats()
    assert e.value.code == "UNAUTHENTICATED"
    with pytest.raises(SundialError) as e:
        Client(server.addr, token="wrong").stats()
    assert e.value.code == "UNAUTHENTICATED"
    with Client(server.addr, token="s3cret") as c:
        assert c.health().ready


def test_reconnects_after_a_server_restart(make_server, queue):
    server = make_server()
    c = Client(server.addr, timeout=20)
    c.enqueue(queue, b"before", id="a")
    assert server.terminate() == 0
    server.restart()
    # A read is sent again on a new connection; the data survived.
    assert c.get(queue, "a").payload == b"before"
    c.enqueue(queue, b"after", id="b")
    assert c.count(queue).pending == 2
    c.close()


def test_a_mutation_in_flight_when_the_server_dies_is_unavailable(make_server, queue):
    server = make_server()
    c = Client(server.addr, timeout=30)
    c.create_queue(queue)
    failure = []

    def poll():
        try:
            c.dequeue(queue, wait_ms=30000)
        except SundialError as e:
            failure.append(e)

    t = threading.Thread(target=poll)
    t.start()
    wait_for(lambda: c._conn is not None and len(c._conn._pending) == 1,
             message="the poll written")
    c.stats()  # answered after the poll on the same connection: the server has it
    server.kill()
    t.join(25)
    assert failure and (failure[0].code, failure[0].origin) == ("UNAVAILABLE", "connection")
    server.restart()
    assert c.count(queue).pending == 0  # and the client works again
    c.close()


def test_a_call_during_a_restart_waits_for_the_server_within_its_deadline(make_server, queue):
    server = make_server()
    c = Client(server.addr, timeout=30)
    c.enqueue(queue, id="a")
    server.kill()
    done = []
    t = threading.Thread(target=lambda: done.append(c.enqueue(queue, id="b")))
    t.start()
    wait_for(lambda: not c.connected)
    server.restart()
    t.join(30)
    assert done and done[0].id == "b"
    assert c.count(queue).pending == 2
    c.close()


def test_a_closed_client_refuses_calls(server):
    c = Client(server.addr)
    c.stats()
    c.close()
    with pytest.raises(SundialError) as e:
        c.stats()
    assert e.value.code == "UNAVAILABLE" and "closed" in e.value.message


# ---- Addresses and errors ------------------------------------------------------------------


@pytest.mark.parametrize("text,expected", [
    ("127.0.0.1:7400", ("127.0.0.1", 7400)), ("example.com", ("example.com", 7400)),
    (":9000", ("127.0.0.1", 9000)), ("", ("127.0.0.1", 7400)), ("[::1]:7", ("::1", 7)),
    ("[::1]", ("::1", 7400))])
def test_addresses_parse_like_the_cli(text, expected):
    assert parse_address(text) == expected


@pytest.mark.parametrize("text", ["host:0", "host:70000", "host:x", "::1", "[::1", "[::1]x"])
def test_bad_addresses_are_invalid_argument(text):
    with pytest.raises(SundialError) as e:
        Client(text)
    assert (e.value.code, e.value.origin) == ("INVALID_ARGUMENT", "local")


def test_sundial_error_pickles_and_compares():
    import pickle
    e = SundialError("NOT_FOUND", "queue: no such queue")
    assert pickle.loads(pickle.dumps(e)) == e
    assert e.origin == "server" and isinstance(e, Exception)


def test_protocol_code_is_generated_not_kept():
    import sundial.protocol.Request as generated
    assert "automatically generated by the FlatBuffers compiler" in open(generated.__file__).read()
    source_dir = os.path.join(os.path.dirname(__file__), "..", "sundial")
    assert not os.path.exists(os.path.join(source_dir, "protocol"))


def test_a_forked_child_makes_its_own_connection_and_leaves_the_parents(client, queue):
    client.enqueue(queue, id="a")
    pid = os.fork()
    if pid == 0:  # the child: the inherited connection has no reader thread here
        try:
            ok = client.get(queue, "a").id == "a" and client.enqueue(queue, id="b").id == "b"
        except BaseException:  # noqa: B902 - reported through the exit status
            ok = False
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert client.count(queue).pending == 2  # the parent's connection still works
