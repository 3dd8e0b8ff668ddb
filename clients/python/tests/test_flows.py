"""Flows against a real sundiald (docs/semantics.md, "Flows"): enqueue_flow makes a tree across
queues in one request, each parent waiting on its children; all or nothing; a resend is a
duplicate."""

import pytest

from sundial import FlowNodeResult, SundialError


def tree(queue, root_id="root"):
    return {"queue": f"{queue}-r", "id": root_id, "payload": b"root",
            "children": [{"queue": f"{queue}-a", "id": "a",
                          "children": [{"queue": f"{queue}-t", "payload": "t1"},
                                       {"queue": f"{queue}-t", "payload": "t2"}]},
                         {"queue": f"{queue}-b", "id": "b", "metadata": {"k": "v"}}]}


def finish_one(client, queue):
    [m] = client.dequeue(queue)
    client.complete(queue, m.id, m.lease_token)
    return m


def test_a_tree_is_answered_in_pre_order_and_its_root_released_last(client, queue):
    nodes = client.enqueue_flow(tree(queue))
    assert all(isinstance(n, FlowNodeResult) for n in nodes)
    assert [(n.queue, n.version, n.duplicate) for n in nodes] == [
        (f"{queue}-r", 1, False), (f"{queue}-a", 1, False), (f"{queue}-t", 1, False),
        (f"{queue}-t", 1, False), (f"{queue}-b", 1, False)]
    assert [nodes[0].id, nodes[1].id, nodes[4].id] == ["root", "a", "b"]
    assert len(nodes[2].id) == 26  # generated
    assert client.get(f"{queue}-r", "root").state == "waiting"
    assert client.get(f"{queue}-a", "a").state == "waiting"

    finish_one(client, f"{queue}-t")
    finish_one(client, f"{queue}-t")
    assert client.get(f"{queue}-a", "a").state == "pending"
    finish_one(client, f"{queue}-b")
    assert client.get(f"{queue}-r", "root").state == "waiting"
    finish_one(client, f"{queue}-a")
    [root] = client.dequeue(f"{queue}-r", include_dependency_results=True)
    assert root.id == "root" and root.version == 3  # released once, then leased
    assert [d.id for d in root.dependency_results] == [f"{queue}-a/a", f"{queue}-b/b"]


def test_a_refused_node_enqueues_nothing(client, queue):
    client.create_queue(f"{queue}-paused", enqueue_paused=True)
    flow = tree(queue)
    flow["children"][1]["children"] = [{"queue": f"{queue}-paused", "id": "x"}]
    with pytest.raises(SundialError) as e:
        client.enqueue_flow(flow)
    assert e.value.code == "FAILED_PRECONDITION"
    assert e.value.message == "nodes[5]: queue: enqueue is paused"
    names = {q.name for q in client.list_queues()}
    assert f"{queue}-r" not in names and f"{queue}-t" not in names


def test_a_resend_is_a_duplicate_and_other_content_already_exists(client, queue):
    first = client.enqueue_flow([tree(queue)])
    again = client.enqueue_flow([tree(queue)])
    assert all(n.duplicate for n in again)
    assert [n.id for n in again][:2] == [first[0].id, first[1].id]
    changed = tree(queue)
    changed["payload"] = b"other"
    with pytest.raises(SundialError) as e:
        client.enqueue_flow(changed)
    assert e.value.code == "ALREADY_EXISTS"


def test_bad_nodes_are_refused_by_the_client(client, queue):
    for bad, text in [([], "nodes: a flow has 1-1000 nodes"),
                      ({"id": "x"}, "a node is a dict with at least 'queue'"),
                      ({"queue": queue, "colour": "red"}, "unknown keys ['colour']"),
                      ({"queue": queue, "children": "x"}, "must be a list of nodes")]:
        with pytest.raises(SundialError) as e:
            client.enqueue_flow(bad)
        assert e.value.code == "INVALID_ARGUMENT"
        assert text in e.value.message, e.value.message
    deep = {"queue": queue}
    for _ in range(32):
        deep = {"queue": queue, "children": [deep]}
    with pytest.raises(SundialError) as e:
        client.enqueue_flow(deep)
    assert "at most 32 levels" in e.value.message
