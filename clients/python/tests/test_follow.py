"""follow.py's rules, without a server: what is sent again after which failure, and how a
Cluster answer is read (the cluster tests drive them against real nodes)."""

import pytest

from sundial import codec, follow
from sundial.errors import SundialError, unavailable
from sundial.records import Cluster, ClusterMember


def test_what_is_sent_again_after_a_failure():
    enqueue = codec.enqueue("q", codec.enqueue_item(b"", 0, None, "m", None, None, None))
    delete = codec.delete_queue("q")
    assert enqueue.resend and not delete.resend
    refused = SundialError("NOT_PRIMARY", "standby", primary="b:1")
    for call in (enqueue, delete):  # NOT_PRIMARY applied nothing: always again, there
        r = follow.failure(call, refused, sent=True, from_server=True, address="a:1")
        assert (r.again, r.hint, r.lost) == (True, "b:1", True)
    # Named itself, or nobody: again, after a backoff.
    r = follow.failure(delete, SundialError("NOT_PRIMARY", "x", primary="a:1"), sent=True,
                       from_server=True, address="a:1")
    assert (r.again, r.hint) == (True, None)
    # Unknown outcomes: only what a repeat cannot harm.
    busy = SundialError("UNAVAILABLE", "no synchronous standby")
    lost = unavailable("connection lost")
    for error, from_server in ((busy, True), (lost, False)):
        assert follow.failure(enqueue, error, sent=True, from_server=from_server,
                              address="a:1").again
        assert not follow.failure(delete, error, sent=True, from_server=from_server,
                                  address="a:1").again
    # Never written: anything may go again.
    assert follow.failure(delete, lost, sent=False, from_server=False, address="a:1").again
    # Other errors are the caller's.
    for code in ("NOT_FOUND", "FAILED_PRECONDITION", "UNAUTHENTICATED"):
        r = follow.failure(enqueue, SundialError(code, "x"), sent=True, from_server=True,
                           address="a:1")
        assert not r.again and not r.lost


def test_a_primary_answers_at_an_epoch_no_older_than_one_seen():
    view = Cluster(cluster="c", node="n1", epoch=5, primary="n1", primary_addr="a:1",
                   members=[])
    assert follow.answers_as_primary(view, 5) and not follow.answers_as_primary(view, 6)
    assert follow.answers_as_primary(Cluster(cluster="", node="x", epoch=0, primary="",
                                             members=[]), 9)
    search = follow.PrimarySearch([("a", 1, "a:1"), ("b", 2, "b:2")], 0)
    standby = Cluster(cluster="c", node="n2", epoch=7, primary="n3", primary_addr="c:3",
                      members=[])
    assert not search.answered(standby) and search.highest_epoch == 7
    search.add_seeds()
    assert [t for _, _, t in search.order] == ["c:3", "a:1", "b:2"]
    error = search.error()
    assert error.code == "NOT_PRIMARY" and "n2 names n3" in error.message


def test_the_primary_http_address_is_its_members():
    members = [ClusterMember(node="n1", http_addr="h:1"), ClusterMember(node="n2",
                                                                        http_addr="h:2")]
    view = Cluster(cluster="c", node="n1", epoch=3, primary="n2", members=members)
    assert follow.primary_http(view) == ("h", 2, "h:2")
    assert follow.primary_http(Cluster(cluster="c", node="n1", epoch=3, primary="",
                                       members=members)) is None


def test_backoff_doubles_to_two_seconds_and_gave_up_says_so():
    b = follow.Backoff()
    waits = [b.next(100) for _ in range(8)]
    assert 0.025 <= waits[0] <= 0.05 and all(w <= 2.0 for w in waits) and waits[-1] >= 1.0
    assert b.next(0.01) <= 0.01
    e = follow.gave_up(unavailable("x"), 3, 1.25)
    assert e.code == "UNAVAILABLE" and e.message.endswith("after 3 tries in 1.2 s)")


def test_retry_budget_is_checked():
    assert follow.retry_budget_s(0) == 0.0
    with pytest.raises(SundialError):
        follow.retry_budget_s(-1)
