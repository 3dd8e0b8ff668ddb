"""Fixtures: a real sundiald in a temporary data directory on a loopback port.

The binary is $SUNDIALD (ctest sets it) or build/release/server/sundiald of this checkout. A
server is ready when its --ready-file exists (it writes the file once both ports listen), so
no test guesses how long a start takes. Waits are bounded polls on a condition (`wait_for`),
never a sleep that hopes.

Most tests share one server per session and use their own queue (`queue` fixture); the
tests that restart or kill the server get their own (`make_server`), on a fixed port below
the kernel's ephemeral range so that a restart can listen on it again and clients reconnect
to the same address.
"""

import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
SUNDIALD = os.environ.get("SUNDIALD") or os.path.join(ROOT, "build", "release", "server",
                                                      "sundiald")
START_TIMEOUT_S = 30
# Below 32768, the usual start of net.ipv4.ip_local_port_range: no outgoing connection takes
# one of these as its source port while a test restarts its server.
FIXED_PORTS = range(20000, 32000)


def wait_for(condition, timeout=15.0, interval=0.01, message="condition"):
    """Polls `condition()` until it returns a true value (returned), or fails the test after
    `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {message}")
        time.sleep(interval)


def _port_is_free(port):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class Server:
    """One sundiald process over a data directory that outlives restarts."""

    def __init__(self, data_dir, flags=(), fixed_port=False):
        self.data_dir = data_dir
        self.flags = list(flags)
        self.fixed_port = fixed_port
        self.port = None
        self.http_port = None
        self.proc = None
        self.log_path = data_dir + ".log"

    @property
    def addr(self):
        return f"127.0.0.1:{self.port}"

    @property
    def http_addr(self):
        return f"127.0.0.1:{self.http_port}"

    def start(self):
        if self.port is None and self.fixed_port:
            self._start_on_some_fixed_port()
        else:
            self._start(self.port if self.fixed_port else 0)
        return self

    def _start_on_some_fixed_port(self):
        rng = random.Random()
        for _ in range(50):
            port = rng.choice(FIXED_PORTS)
            if _port_is_free(port) and self._start(port, required=False):
                return
        pytest.fail("no free port below the ephemeral range for a restartable server")

    def _start(self, port, required=True):
        ready = self.data_dir + ".ready"
        if os.path.exists(ready):
            os.unlink(ready)
        args = [SUNDIALD, "--data-dir", self.data_dir, "--port", str(port), "--http-port", "0",
                "--ready-file", ready, "--io-threads", "2"] + self.flags
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=log)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if os.path.exists(ready):
                with open(ready) as f:
                    text = f.read()
                try:
                    info = json.loads(text)
                except ValueError:  # written atomically, but be safe
                    info = {}
                if info.get("port"):
                    self.port, self.http_port = info["port"], info["http_port"]
                    return True
            if self.proc.poll() is not None:
                if not required:
                    return False
                pytest.fail(f"sundiald exited with {self.proc.returncode}: {self.log()}")
            time.sleep(0.005)
        self.kill()
        pytest.fail(f"sundiald not ready after {START_TIMEOUT_S} s: {self.log()}")

    def restart(self):
        """Starts it again on the same data directory (and port, if fixed)."""
        assert self.proc is None or self.proc.poll() is not None, "stop or kill it first"
        if self.fixed_port:
            # The port is ours; a listener of the old process may linger for a moment.
            deadline = time.monotonic() + START_TIMEOUT_S
            while not self._start(self.port, required=False):
                if time.monotonic() > deadline:
                    pytest.fail(f"sundiald cannot listen on {self.port} again: {self.log()}")
                time.sleep(0.05)
        else:
            self._start(0)
        return self

    def terminate(self, timeout=60):
        """SIGTERM; its exit status."""
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-4000:]
        except OSError:
            return ""


@pytest.fixture(scope="session")
def tmp_root():
    root = tempfile.mkdtemp(prefix="sundial-pytest-")
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def server(tmp_root):
    """One server for the session; tests use their own queues."""
    if not os.access(SUNDIALD, os.X_OK):
        pytest.fail(f"no sundiald at {SUNDIALD}: build it (make build) or set SUNDIALD")
    s = Server(os.path.join(tmp_root, "shared")).start()
    yield s
    s.kill()


@pytest.fixture
def make_server(tmp_root):
    """make_server(flags=(), fixed_port=True): a server of the test's own, killed after it."""
    made = []

    def make(flags=(), fixed_port=True):
        s = Server(os.path.join(tmp_root, uuid.uuid4().hex[:12]), flags, fixed_port).start()
        made.append(s)
        return s

    yield make
    for s in made:
        s.kill()


@pytest.fixture
def queue(request):
    """A queue name no other test uses."""
    name = re.sub(r"[^A-Za-z0-9.:-]", "-", request.node.name[:60])
    return f"t-{name}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def client(server):
    from sundial import Client
    c = Client(server.addr, timeout=20)
    yield c
    c.close()


def python_env():
    """The environment for a child Python that imports this checkout's sundial."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env


class TestPki:
    """Certificates made at test time with Debian's openssl CLI, as tests/e2e/tls_certs.h
    makes them: a CA, a server certificate it signs for 127.0.0.1 and localhost, and a second
    CA that signs nothing the server shows. EC P-256 keys: quick to make."""

    def __init__(self, directory):
        self.dir = directory
        self.make_ca("ca")
        self.make_ca("other-ca")
        self.make_server("server", "ca")

    def path(self, name):
        return os.path.join(self.dir, name)

    def _openssl(self, *args):
        r = subprocess.run(["openssl", *args], capture_output=True, text=True)
        assert r.returncode == 0, f"openssl {' '.join(args)}: {r.stderr}"

    def make_ca(self, name):
        self._openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                      "-nodes", "-keyout", self.path(f"{name}.key"), "-out",
                      self.path(f"{name}.pem"), "-days", "2", "-subj", f"/CN={name}",
                      "-addext", "basicConstraints=critical,CA:TRUE",
                      "-addext", "keyUsage=critical,keyCertSign,cRLSign")

    def make_server(self, name, ca, alt_names="DNS:localhost,IP:127.0.0.1"):
        with open(self.path(f"{name}.ext"), "w") as f:
            f.write(f"subjectAltName={alt_names}\nbasicConstraints=CA:FALSE\n"
                    "extendedKeyUsage=serverAuth\n")
        self._openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                      "-nodes", "-keyout", self.path(f"{name}.key"), "-out",
                      self.path(f"{name}.csr"), "-subj", f"/CN={name}")
        self._openssl("x509", "-req", "-in", self.path(f"{name}.csr"), "-CA",
                      self.path(f"{ca}.pem"), "-CAkey", self.path(f"{ca}.key"),
                      "-CAcreateserial", "-out", self.path(f"{name}.pem"), "-days", "2",
                      "-extfile", self.path(f"{name}.ext"))

    @property
    def ca(self):
        return self.path("ca.pem")

    @property
    def other_ca(self):
        return self.path("other-ca.pem")

    def server_flags(self):
        return ["--tls-cert", self.path("server.pem"), "--tls-key", self.path("server.key")]


TLS_TOKEN = "tls-test-token"


@pytest.fixture(scope="session")
def pki(tmp_root):
    directory = os.path.join(tmp_root, "pki")
    os.mkdir(directory)
    return TestPki(directory)


@pytest.fixture(scope="session")
def tls_server(tmp_root, pki):
    """A server with TLS on both ports and a token (TLS_TOKEN), for the session."""
    token_file = os.path.join(tmp_root, "tls-token")
    with open(token_file, "w") as f:
        f.write(TLS_TOKEN + "\n")
    s = Server(os.path.join(tmp_root, "tls"),
               pki.server_flags() + ["--auth-token-file", token_file]).start()
    yield s
    s.kill()
