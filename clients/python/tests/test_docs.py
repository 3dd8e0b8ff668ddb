"""The examples of docs/clients/python.md run as written (against a server of their own, the
address replaced), each in its own process like a user's script."""

import os
import re
import signal
import subprocess
import sys
import threading

import pytest
from conftest import ROOT, python_env, wait_for

from sundial import Client, SundialError

DOC = os.path.join(ROOT, "docs", "clients", "python.md")


def examples():
    text = open(DOC, encoding="utf-8").read()
    found = dict(re.findall(r"<!-- example: (\w+) -->\n```python\n(.*?)```", text, re.S))
    assert set(found) == {"worker", "enqueue", "async", "exclusive", "tls", "watch", "call",
                          "dependencies", "flows"}, sorted(found)
    return found


class Script:
    """An example running in a child process; its stdout lines collected."""

    def __init__(self, code, addr, tmp_path, name, replace=()):
        path = tmp_path / f"{name}.py"
        code = code.replace("127.0.0.1:7400", addr)
        for old, new in replace:
            code = code.replace(old, new)
        path.write_text(code)
        self.proc = subprocess.Popen([sys.executable, str(path)], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=python_env(), text=True)
        self.lines, self.errors = [], []
        threading.Thread(target=self._read, args=(self.proc.stdout, self.lines),
                         daemon=True).start()
        threading.Thread(target=self._read, args=(self.proc.stderr, self.errors),
                         daemon=True).start()

    @staticmethod
    def _read(stream, into):
        for line in stream:
            into.append(line.rstrip("\n"))

    def finish(self, timeout=30):
        code = self.proc.wait(timeout)
        return code

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def run_example(make_server, tmp_path):
    server = make_server(fixed_port=False)
    scripts = []

    def run(name, server=server, replace=()):
        s = Script(examples()[name], server.addr, tmp_path, name,
                   replace=[("127.0.0.1:7401", server.http_addr)] + list(replace))
        scripts.append(s)
        return s

    run.server = server
    yield run
    for s in scripts:
        s.kill()


def completed(client, queue):
    """Completed messages of a queue that the example may not have created yet."""
    try:
        return client.count(queue).completed
    except SundialError as e:
        if e.code == "NOT_FOUND":
            return 0
        raise


def test_the_ten_line_worker_runs_what_the_enqueue_example_puts(run_example):
    feeder = run_example("enqueue")
    assert feeder.finish() == 0, feeder.errors
    assert "pending=1" in feeder.lines[-1]
    worker = run_example("worker")
    wait_for(lambda: "to ada@example.com : Welcome!" in worker.lines, timeout=30,
             message="the worker's output")
    c = Client(run_example.server.addr)
    wait_for(lambda: completed(c, "emails") == 1, message="completed")
    worker.proc.send_signal(signal.SIGTERM)
    assert worker.finish() == 0, worker.errors
    assert any("worker stopped" in line for line in worker.errors)


def test_the_async_example(run_example):
    script = run_example("async")
    assert script.finish(60) == 0, script.errors
    assert "completed=100" in script.lines[-1]


def test_the_exclusive_queue_and_filter_example(run_example):
    script = run_example("exclusive")
    c = Client(run_example.server.addr)
    wait_for(lambda: completed(c, "builds") == 3, timeout=30, message="3 builds")
    script.proc.send_signal(signal.SIGTERM)
    assert script.finish() == 0, script.errors
    built = sorted(line.split(":")[-1] for line in script.errors if ":building " in line)
    assert built == ["building api c3", "building web a1", "building web b2"]
    assert c.count("builds").pending == 1  # d4, x86_64: not this worker's


def test_the_tls_example(run_example, make_server, pki):
    server = make_server(pki.server_flags(), fixed_port=False)
    script = run_example("tls", server=server, replace=[('"ca.pem"', repr(pki.ca))])
    assert script.finish(60) == 0, script.errors
    assert "ready=True" in script.lines[-1]
    assert Client(server.addr, ca_file=pki.ca).count("emails").pending == 1


def test_the_watch_example(run_example):
    script = run_example("watch")
    assert script.finish(60) == 0, script.errors
    assert script.lines == ["emails welcome-1 enqueued pending -> pending"]


def test_the_request_and_response_example(run_example):
    script = run_example("call")
    assert script.finish(60) == 0, script.errors
    assert script.lines[-1] == "completed b'thumb:cat.png'", script.lines


def test_the_dependencies_example(run_example):
    script = run_example("dependencies")
    assert script.finish(60) == 0, script.errors
    assert script.lines == ["waiting", "renders/render-1 completed b'rendered.pdf'"], script.lines


def test_the_flows_example(run_example):
    script = run_example("flows")
    assert script.finish(60) == 0, script.errors
    assert script.lines == ["[('reports', 'report-7'), ('images', 'image-1')]", "waiting",
                            "pending"], script.lines
