"""The codec without a server: requests are byte-identical to the FlatBuffers runtime's, and
they read back as what was asked (through the generated code)."""

import random

import flatbuffers
import pytest

from sundial import codec
from sundial.protocol import Dequeue, Enqueue, Request

RNG_SEEDS = range(40)


def random_text(rng, low=0, high=40):
    return "".join(rng.choice("abcdefXYZ019.:-é") for _ in range(rng.randint(low, high)))


def random_requests(rng):
    """One request of every kind the client makes, with random sizes (so every padding and
    alignment case of the builder comes up)."""
    q = "q" + random_text(rng, 0, 20).replace("é", "e")
    meta = {random_text(rng, 1, 9): random_text(rng) for _ in range(rng.randint(0, 4))}
    items = [dict(payload=bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 70))),
                  priority=rng.randint(-(1 << 63), (1 << 63) - 1),
                  metadata={random_text(rng, 1, 5): random_text(rng)
                            for _ in range(rng.randint(0, 3))},
                  id=rng.choice([None, random_text(rng, 1, 30)]),
                  **rng.choice([{}, {"delay_ms": rng.randint(0, 10**6)},
                                {"visible_at": rng.randint(0, 10**13)}]),
                  **rng.choice([{}, {"max_attempts": rng.randint(1, 1000)}]))
             for _ in range(rng.randint(1, 30))]
    token = rng.getrandbits(53)
    return [
        codec.create_queue(q, dict(type="exclusive", exclusivity_key="k", lease_ms=5,
                                   max_attempts=rng.randint(1, 9), dead_letter_queue="d",
                                   max_depth=rng.getrandbits(40), enqueue_paused=True)),
        codec.update_queue(q, dict(retention_ms=rng.randint(1, 10**9), dequeue_paused=False,
                                   dead_letter_queue="")),
        codec.get_queue(q), codec.delete_queue(q), codec.list_queues(),
        codec.purge_queue(q, rng.sample(["pending", "running", "errored"], rng.randint(1, 3))),
        *codec.enqueue_batch(q, items).calls,
        codec.dequeue(q, rng.randint(1, 1000), rng.choice([None, 300]), meta,
                      rng.randint(0, 60000)),
        *codec.complete_batch(q, [(random_text(rng, 1, 20), rng.getrandbits(53))
                                  for _ in range(rng.randint(1, 20))]).calls,
        codec.fail(q, "id", token, random_text(rng), rng.choice([None, 0, 5000])),
        codec.extend(q, "id", token, rng.randint(1, 10**6)),
        codec.cancel(q, [random_text(rng, 1, 9) for _ in range(rng.randint(1, 5))]),
        codec.cancel(q, filter=meta or {"a": "b"}),
        codec.reprioritize(q, "id", priority=rng.randint(-5, 5), visible_at=rng.randint(0, 9)),
        codec.redrive(q, all=True), codec.redrive(q, ["a", "b"]),
        codec.get(q, random_text(rng, 1, 30)),
        codec.browse(q, "errored", meta, rng.choice([None, "5.7"]), rng.randint(1, 1000)),
        codec.count(q, meta), codec.explain(q, "x"), codec.explain(q, filter={"a": "b"}),
        codec.stats(), codec.health(), codec.auth(random_text(rng, 1, 64)),
    ]


@pytest.mark.parametrize("seed", RNG_SEEDS)
def test_requests_are_byte_identical_to_the_flatbuffers_runtimes(seed, monkeypatch):
    calls = random_requests(random.Random(seed))
    fast = [c.encode(7 + k, codec.RELAXED) for k, c in enumerate(calls)]
    monkeypatch.setattr(codec.Call, "builder_class", flatbuffers.Builder)
    reference = [c.encode(7 + k, codec.RELAXED) for k, c in enumerate(calls)]
    for call, a, b in zip(calls, fast, reference):
        assert a == b, call.name


def test_a_request_reads_back_through_the_generated_code():
    frame = codec.enqueue_batch("emails", [
        dict(payload=b"hi", priority=-3, metadata={"tenant": "acme"}, id="m-1", delay_ms=5),
        dict(payload="é", max_attempts=9)]).calls[0].encode(42, codec.RELAXED)
    (length,) = codec.HEADER.unpack(frame[:4])
    body = frame[4:]
    assert length == len(body)
    assert Request.Request.RequestBufferHasIdentifier(body, 0)
    r = Request.Request.GetRootAs(body, 0)
    assert (r.RequestId(), r.Durability()) == (42, codec.RELAXED)
    op = Enqueue.Enqueue()
    op.Init(r.Op().Bytes, r.Op().Pos)
    assert op.Queue() == b"emails" and op.ItemsLength() == 2
    first, second = op.Items(0), op.Items(1)
    assert (first.Id(), first.Priority(), first.DelayMs(), first.VisibleAt()) == \
        (b"m-1", -3, 5, None)
    assert bytes(first.Payload(i) for i in range(first.PayloadLength())) == b"hi"
    assert (first.Metadata(0).Key(), first.Metadata(0).Value()) == (b"tenant", b"acme")
    assert (second.Id(), second.MaxAttempts(), second.PayloadLength()) == (None, 9, 2)


def test_durability_is_sent_only_on_mutations():
    for call, expected in [(codec.dequeue("q", wait_ms=5), codec.RELAXED), (codec.stats(), 0)]:
        body = call.encode(1, codec.RELAXED)[4:]
        assert Request.Request.GetRootAs(body, 0).Durability() == expected


def test_dequeue_defaults_are_left_to_the_server():
    body = codec.dequeue("q").encode(3, None)[4:]
    r = Request.Request.GetRootAs(body, 0)
    d = Dequeue.Dequeue()
    d.Init(r.Op().Bytes, r.Op().Pos)
    assert (d.Max(), d.LeaseMs(), d.FilterLength(), d.WaitMs()) == (1, None, 0, 0)


def test_more_than_1000_items_split_into_requests_of_1000():
    batch = codec.enqueue_batch("q", [dict()] * 2500)
    assert [len(c.encode(1, None)) > 0 for c in batch.calls] == [True] * 3
    assert len(codec.complete_batch("q", [("a", 1)] * 1001).calls) == 2


def test_only_calls_a_repeat_cannot_harm_are_resent_after_an_unknown_outcome():
    with_ids = codec.enqueue_item(b"x", id="a")
    without = codec.enqueue_item(b"x")
    assert codec.enqueue("q", with_ids).resend
    assert not codec.enqueue("q", without).resend, "it would be enqueued twice"
    for call in (codec.get("q", "a"), codec.complete("q", "a", 5), codec.fail("q", "a", 5),
                 codec.extend("q", "a", 5, 1000), codec.dequeue("q"), codec.cancel("q", ["a"]),
                 codec.cluster()):
        assert call.resend, call.name
    for call in (codec.delete_queue("q"), codec.redrive("q", all=True), codec.switchover()):
        assert not call.resend, call.name
    assert codec.cluster().any_node and not codec.get("q", "a").any_node


def test_new_message_ids_are_unique_ulids():
    ids = {codec.new_message_id() for _ in range(1000)}
    assert len(ids) == 1000
    for message_id in ids:
        assert len(message_id) == 26 and message_id[0] <= "7"
        assert set(message_id) <= set("0123456789ABCDEFGHJKMNPQRSTVWXYZ")


def test_a_list_of_addresses_is_a_cluster_and_one_address_is_not():
    from sundial import AsyncClient, Client, SundialError
    from sundial.client import cluster_addresses

    assert cluster_addresses("a:1") is None
    assert cluster_addresses(("a", 1)) is None
    assert [t for _, _, t in cluster_addresses("a:1, b:2,a:1")] == ["a:1", "b:2"]
    assert [t for _, _, t in cluster_addresses(["a:1", "b"])] == ["a:1", "b:7400"]
    for bad in ([], "a:1,,b:2", ["a:1", ""]):
        with pytest.raises(SundialError) as e:
            cluster_addresses(bad)
        assert e.value.code == "INVALID_ARGUMENT"
    assert Client(["a:1", "b:2"]).follows_primary
    assert not Client(["a:1"]).follows_primary, "one address: the single-server client"
    assert not Client("a:1").follows_primary
    assert AsyncClient(["a:1", "b:2"]).follows_primary
    assert AsyncClient("a:1,b:2").address == "a:1"
    assert not AsyncClient(["a:1"]).follows_primary
    # Following, an enqueue without an id gets one of the client's own (a resend is then a
    # duplicate); a single-server client leaves it to the server.
    for cls in (Client, AsyncClient):
        assert len(cls(["a:1", "b:2"])._default_id()) == 26
        assert cls("a:1")._default_id() is None
    for bad in (-1, True, "5"):
        for cls in (Client, AsyncClient):
            with pytest.raises(SundialError) as e:
                cls(["a:1", "b:2"], retry_budget=bad)
            assert e.value.code == "INVALID_ARGUMENT"
