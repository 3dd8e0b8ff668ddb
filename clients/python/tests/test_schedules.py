"""Schedules against a real sundiald (docs/semantics.md, "Schedules"): the client's methods,
fires named name@T made by the server's timer, a kill -9 and restart that neither loses nor
doubles a fire, and the CLI's `sundial schedule` round trip."""

import json
import os
import subprocess

import pytest
from conftest import ROOT, wait_for

from sundial import Client, Schedule, SundialError, TriggerResult

SUNDIAL_CLI = os.environ.get("SUNDIAL_CLI") or os.path.join(ROOT, "build", "release", "tools",
                                                            "sundial")


def fire_times(client, queue, name):
    """The T of every message name@T in `queue` (any state), sorted."""
    times = []
    for state in ("pending", "running", "completed"):
        cursor = None
        while True:
            try:
                page = client.browse(queue, state=state, cursor=cursor, limit=1000)
            except SundialError as e:
                if e.code == "NOT_FOUND":  # no fire has created the queue yet
                    return []
                raise
            for m in page.messages:
                prefix, _, t = m.id.partition("@")
                assert prefix == name, m.id
                times.append(int(t))
            cursor = page.next_cursor
            if not cursor:
                break
    return sorted(times)


def test_upsert_get_list_pause_resume_trigger_delete(client, queue):
    s = client.upsert_schedule(queue, "nightly", cron="30 2 * * *", tz="Europe/Paris",
                               payload=b"{}", metadata={"kind": "nightly"},
                               priority_offset_ms=600000, misfire="one",
                               overlap="skip_if_active")
    assert isinstance(s, Schedule)
    assert s.created and s.cron == "30 2 * * *" and s.tz == "Europe/Paris"
    assert s.misfire == "one" and s.overlap == "skip_if_active"
    assert s.metadata == {"kind": "nightly"} and s.payload == b"{}"
    assert s.next_fire_at > 0
    again = client.upsert_schedule(queue, "nightly", cron="30 2 * * *", tz="Europe/Paris")
    assert not again.created
    assert client.get_schedule(queue, "nightly").next_fire_at == s.next_fire_at

    paused = client.pause_schedule(queue, "nightly")
    assert paused.paused and paused.next_fire_at == 0
    fired = client.trigger_schedule(queue, "nightly")
    assert isinstance(fired, TriggerResult)
    assert fired.id == f"nightly@{fired.fire_at}" and not fired.duplicate
    assert client.get(queue, fired.id).state == "pending"
    assert not client.resume_schedule(queue, "nightly").paused

    assert [x.name for x in client.list_schedules(queue)] == ["nightly"]
    assert queue in {x.queue for x in client.list_schedules()}
    client.delete_schedule(queue, "nightly")
    with pytest.raises(SundialError) as e:
        client.get_schedule(queue, "nightly")
    assert e.value.code == "NOT_FOUND"
    with pytest.raises(SundialError) as e:
        client.upsert_schedule(queue, "bad", every_ms=1000, tz="UTC")
    assert e.value.code == "INVALID_ARGUMENT"


def test_every_ms_fires_name_at_t_and_a_kill_restart_neither_loses_nor_doubles_one(make_server):
    server = make_server(fixed_port=False)
    queue, name, every = "ticks", "tick", 200
    with Client(server.addr, timeout=20) as c:
        s = c.upsert_schedule(queue, name, every_ms=every, misfire="all")
        first = s.next_fire_at
        wait_for(lambda: len(fire_times(c, queue, name)) >= 5, message="five fires")
    server.kill()  # kill -9: whatever was logged is what the restart has
    server.restart()
    with Client(server.addr, timeout=20) as c:
        before = c.get_schedule(queue, name).fires
        wait_for(lambda: c.get_schedule(queue, name).fires >= before + 5,
                 message="five more fires after the restart")
        c.pause_schedule(queue, name)
        times = fire_times(c, queue, name)
        schedule = c.get_schedule(queue, name)
    # Every fire on the grid first + k * every_ms, once each (ids are unique), none missing:
    # the restart came within the misfire grace, so the fires due meanwhile were made.
    assert times[0] == first
    assert times == list(range(first, times[-1] + 1, every))
    assert schedule.fires == len(times)


@pytest.mark.skipif(not os.access(SUNDIAL_CLI, os.X_OK), reason="no sundial CLI built")
def test_cli_schedule_round_trip(server, queue):
    def cli(*args):
        out = subprocess.run([SUNDIAL_CLI, "--addr", server.addr, "schedule", *args],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        return [json.loads(line) for line in out.stdout.splitlines()]

    [s] = cli("upsert", queue, "daily", "--cron", "0 6 * * MON-FRI", "--tz", "America/New_York",
              "--payload", "hello", "--meta", "k=v", "--priority-offset-ms", "60000",
              "--misfire", "all", "--overlap", "skip_if_active")
    assert s["created"] and s["cron"] == "0 6 * * MON-FRI" and s["tz"] == "America/New_York"
    assert s["payload"] == "hello" and s["metadata"] == {"k": "v"} and s["misfire"] == "all"
    [got] = cli("get", queue, "daily")
    assert got["next_fire_at"] == s["next_fire_at"] and not got["created"]
    assert cli("pause", queue, "daily")[0]["paused"]
    [fired] = cli("trigger", queue, "daily")
    assert fired["id"] == f"daily@{fired['fire_at']}"
    assert not cli("resume", queue, "daily")[0]["paused"]
    assert [x["name"] for x in cli("list", queue)] == ["daily"]
    assert cli("delete", queue, "daily")[0]["deleted"]
    assert cli("list", queue) == []
    bad = subprocess.run([SUNDIAL_CLI, "--addr", server.addr, "schedule", "upsert", queue, "x"],
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode != 0 and "--cron or --every-ms" in bad.stderr
