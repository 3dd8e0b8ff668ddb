"""A Sundial cluster on loopback for the Python tests (docs/replication.md, docs/operations.md
"High availability"): one etcd (Debian's /usr/bin/etcd, or $SUNDIAL_ETCD_BIN) on two free
loopback ports and N sundiald nodes with ephemeral ports, each in its own directory under one
temporary directory. The standard library only (the browser and monitoring tests import it).

Every wait polls a condition with a deadline; nothing sleeps and hopes. Processes are ended by
their own PIDs.

    with Cluster(sundiald, nodes=3) as c:
        primary = c.wait_primary()
        c.kill(primary)                  # kill -9
        new = c.wait_primary(exclude=primary)
        c.restart(primary)               # it rejoins as a standby
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

ETCD = os.environ.get("SUNDIAL_ETCD_BIN", "/usr/bin/etcd")


def wait_for(condition, timeout=30.0, what="a condition", interval=0.05):
    """Polls `condition` until it returns a truthy value (returned) or `timeout` passes."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def free_ports(count):
    """Loopback ports nobody listens on right now (bound, read, closed)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def http_get(port, path, timeout=2.0):
    """(status, body) of GET http://127.0.0.1:PORT/PATH; status 0 when nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except (OSError, ValueError):
        return 0, ""


def parse_metrics(text):
    """{series (name plus labels, as exported): value} of a /metrics text."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        series, _, value = line.rpartition(" ")
        out[series] = float(value)
    return out


class Etcd:
    def __init__(self, root):
        self.dir = os.path.join(root, "etcd")
        self.client_port, self.peer_port = free_ports(2)
        self.url = f"http://127.0.0.1:{self.client_port}"
        self.proc = None

    def start(self):
        if not os.access(ETCD, os.X_OK):
            raise RuntimeError(f"{ETCD} is missing: run scripts/deps.sh (Debian's etcd-server)")
        peer = f"http://127.0.0.1:{self.peer_port}"
        self.log = open(self.dir + ".log", "ab")
        self.proc = subprocess.Popen(
            [ETCD, "--name", "sundial-test", "--data-dir", self.dir,
             "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", f"sundial-test={peer}",
             "--heartbeat-interval", "50", "--election-timeout", "500", "--log-level", "warn"],
            stdout=self.log, stderr=self.log)

        def up():
            if self.proc.poll() is not None:
                raise RuntimeError(f"etcd exited with {self.proc.returncode}; see {self.dir}.log")
            try:
                req = urllib.request.Request(self.url + "/v3/maintenance/status", data=b"{}",
                                             method="POST")
                with urllib.request.urlopen(req, timeout=1) as r:
                    return r.status == 200
            except OSError:
                return False

        wait_for(up, 30, "etcd to answer")
        return self

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


class Node:
    """One sundiald of the cluster; its ports are known once it started (its --ready-file)."""

    def __init__(self, cluster, name):
        self.cluster = cluster
        self.name = name
        self.dir = os.path.join(cluster.root, name)
        self.data = os.path.join(self.dir, "data")
        self.log_path = os.path.join(self.dir, "sundiald.log")
        self.proc = None
        self.port = self.http_port = self.replication_port = 0
        os.makedirs(self.dir, exist_ok=True)

    def start(self, timeout=30.0):
        ready = os.path.join(self.dir, "ready.json")
        if os.path.exists(ready):
            os.remove(ready)
        c = self.cluster
        # The same ports again after a restart: what the other nodes and clients know.
        args = [c.sundiald, "--data-dir", self.data, "--port", str(self.port),
                "--http-port", str(self.http_port),
                "--replication-port", str(self.replication_port),
                "--cluster", c.name, "--node-name", self.name, "--etcd", c.etcd.url,
                "--ready-file", ready, "--io-threads", "2"] + c.flags
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=log)

        def started():
            if self.proc.poll() is not None:
                raise RuntimeError(f"sundiald {self.name} exited {self.proc.returncode}:\n"
                                   + self.log_tail())
            try:
                with open(ready) as f:
                    return json.load(f)
            except (OSError, ValueError):
                return None

        info = wait_for(started, timeout, f"{self.name}'s --ready-file")
        self.port, self.http_port = info["port"], info["http_port"]
        self.replication_port = info.get("replication_port", self.replication_port)
        return self

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    @property
    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    @property
    def url(self):
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def addr(self):
        return f"127.0.0.1:{self.port}"

    def readyz(self):
        return http_get(self.http_port, "/readyz") if self.alive else (0, "")

    def metrics(self):
        status, text = http_get(self.http_port, "/metrics", timeout=5)
        assert status == 200, f"{self.name} /metrics: {status}"
        return text

    def send_signal(self, sig):
        if self.alive:
            os.kill(self.proc.pid, sig)

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if not self.alive:
            self.proc = None
            return None
        os.kill(self.proc.pid, sig)
        code = self.proc.wait(timeout)
        self.proc = None
        return code

    def log_tail(self, lines=40):
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""


class Cluster:
    def __init__(self, sundiald, nodes=3, flags=(), name="test", ttl_s=2, root=None):
        self.sundiald = sundiald
        self.name = name
        self.own_root = root is None
        self.root = root or tempfile.mkdtemp(prefix="sundial-cluster-")
        self.flags = ["--leader-ttl-s", str(ttl_s), "--fsync", "always"] + list(flags)
        self.etcd = Etcd(self.root)
        self.nodes = {f"n{i + 1}": Node(self, f"n{i + 1}") for i in range(nodes)}

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        if exc[0] is None:
            self.cleanup()
        return False

    def start(self):
        self.etcd.start()
        for node in self.nodes.values():
            node.start()
        return self

    def stop(self):
        for node in self.nodes.values():
            if node.alive:
                try:
                    node.stop(signal.SIGTERM, timeout=30)
                except subprocess.TimeoutExpired:
                    node.stop(signal.SIGKILL)
        self.etcd.stop()

    def cleanup(self):
        if self.own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __getitem__(self, name):
        return self.nodes[name]

    def addrs(self):
        return ",".join(n.addr for n in self.nodes.values())

    def ready_nodes(self):
        return [n for n in self.nodes.values() if n.readyz()[0] == 200]

    def wait_primary(self, exclude=(), timeout=30.0):
        """The one node whose /readyz says it takes writes (not one of `exclude`)."""
        exclude = {n.name if isinstance(n, Node) else n for n in
                   (exclude if isinstance(exclude, (list, tuple, set)) else [exclude])}

        def one():
            ready = [n for n in self.ready_nodes() if n.name not in exclude]
            return ready[0] if len(ready) == 1 else None

        return wait_for(one, timeout, f"one primary (not {sorted(exclude)})",
                        interval=0.02)

    def standbys(self, primary):
        return [n for n in self.nodes.values() if n is not primary and n.alive]

    def kill(self, node):
        node.stop(signal.SIGKILL)

    def restart(self, node):
        return node.start()

    def logs(self):
        return "\n".join(f"--- {n.name} ({n.log_path}):\n{n.log_tail()}"
                         for n in self.nodes.values())
