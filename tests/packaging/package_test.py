"""The Debian package (docs/packaging.md), installed for real: `cpack` builds
sundial_<version>_amd64.deb from the release build, lintian checks it, dpkg installs it, the
installed sundiald runs as its unit would (user, command line, limits and reload command read
from the installed unit), the installed CLI enqueues and dequeues through it, and `dpkg -r`
then `dpkg --purge` remove it, leaving no trace.

Installing changes the machine (a package, a system user), so that test runs only as root,
only where sundial is not installed already and no user sundial exists, and not while dpkg is
locked; otherwise it skips and says why. systemd need not run (CI's containers have none): the
unit is checked with `systemd-analyze verify`, and sundiald is started the way the unit says.
"""

import fcntl
import glob
import json
import grp
import os
import pwd
import re
import resource
import shlex
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
BUILD = os.environ.get("SUNDIAL_BUILD_DIR") or os.path.join(ROOT, "build", "release")
UNIT = "/lib/systemd/system/sundial.service"
CONFIG = "/etc/sundial/sundiald.toml"
DATA = "/var/lib/sundial"
PROGRAMS = ["sundiald", "sundial", "sundial-wal", "sundial-bench"]


def run(*args, ok=True, **kwargs):
    r = subprocess.run(args, capture_output=True, text=True, timeout=300, **kwargs)
    if ok:
        assert r.returncode == 0, f"{' '.join(args)} exited {r.returncode}:\n{r.stdout}{r.stderr}"
    return r


def wait_for(condition, timeout=30.0, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def deb():
    """The package, built by cpack from the release build (as `make package` does, into a
    directory of the test's own)."""
    config = os.path.join(BUILD, "CPackConfig.cmake")
    if not os.path.exists(config):
        pytest.fail(f"no {config}: configure the release preset (make build)")
    for program in PROGRAMS:
        path = glob.glob(os.path.join(BUILD, "*", program))
        assert path and os.access(path[0], os.X_OK), f"{program} is not built in {BUILD}"
    out = os.path.join(BUILD, "package-test")
    shutil.rmtree(out, ignore_errors=True)
    run("cpack", "--config", config, "-B", out)
    debs = glob.glob(os.path.join(out, "sundial_*_amd64.deb"))
    assert len(debs) == 1, os.listdir(out)
    return debs[0]


def deb_field(deb, field):
    return run("dpkg-deb", "--field", deb, field).stdout.strip()


def unit_service_section(path):
    """The [Service] settings of a unit file: key -> [values] (a key may repeat)."""
    section, settings = None, {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith(("#", ";")):
                continue
            if line.startswith("["):
                section = line.strip("[]")
                continue
            if section == "Service":
                key, _, value = line.partition("=")
                settings.setdefault(key.strip(), []).append(value.strip())
    return settings


# ---- The package file ---------------------------------------------------------------------

def test_the_package_is_named_and_described_for_debian(deb):
    version = deb_field(deb, "Version")
    assert os.path.basename(deb) == f"sundial_{version}_amd64.deb"
    assert deb_field(deb, "Package") == "sundial"
    assert deb_field(deb, "Architecture") == "amd64"
    depends = deb_field(deb, "Depends")
    for dependency in ["adduser", "libc6", "libssl3", "libstdc++6"]:
        assert dependency in depends, depends


def test_the_package_holds_the_programs_the_unit_and_the_conffile(deb):
    listing = run("dpkg-deb", "--contents", deb).stdout
    files = {line.split()[-1].lstrip(".") for line in listing.splitlines()}
    for program in PROGRAMS:
        assert f"/usr/bin/{program}" in files
    for path in [UNIT, CONFIG, "/usr/share/doc/sundial/copyright",
                 "/usr/share/doc/sundial/changelog.gz", "/usr/share/doc/sundial/packaging.md"] + [
                     f"/usr/share/man/man1/{p}.1.gz" for p in PROGRAMS]:
        assert path in files, path
    with tempfile.TemporaryDirectory() as control:
        run("dpkg-deb", "--control", deb, control)
        with open(os.path.join(control, "conffiles")) as f:
            assert f.read().split() == [CONFIG]
        for script in ["postinst", "prerm", "postrm"]:
            assert os.stat(os.path.join(control, script)).st_mode & 0o777 == 0o755


# The info-level tags docs/packaging.md explains; a new one fails until it is explained there.
EXPLAINED_INFO_TAGS = {"package-supports-alternative-init-but-no-init.d-script",
                       "hardening-no-bindnow", "hardening-no-fortify-functions",
                       "binary-has-unneeded-section"}


def test_lintian_finds_no_warning_and_only_explained_infos(deb):
    r = run("lintian", "--fail-on", "error,warning", "--display-info", deb, ok=False)
    assert r.returncode == 0, r.stdout + r.stderr
    tags = re.findall(r"^([EWIXP]): sundial: ([a-z0-9.+-]+)", r.stdout, re.M)
    assert [t for t in tags if t[0] != "I"] == []
    assert {tag for _, tag in tags} <= EXPLAINED_INFO_TAGS, r.stdout
    with open(os.path.join(ROOT, "docs", "packaging.md")) as f:
        doc = f.read()
    for tag in EXPLAINED_INFO_TAGS:
        assert f"`{tag}`" in doc, f"docs/packaging.md does not explain {tag}"


# ---- Installed ----------------------------------------------------------------------------

def require_dpkg_access():
    """Skips (with the reason) where installing is not this test's to do."""
    if os.geteuid() != 0:
        pytest.skip("not root: installing the package needs root (CI runs as root)")
    if shutil.which("dpkg") is None:
        pytest.skip("no dpkg: not a Debian machine")
    status = run("dpkg-query", "-W", "-f=${Status}", "sundial", ok=False).stdout
    if "installed" in status or "config-files" in status:
        pytest.skip(f"the package sundial is on this machine already ({status}): the test "
                    "would replace or remove it")
    try:
        pwd.getpwnam("sundial")
        pytest.skip("a user sundial exists already: the test would take it over")
    except KeyError:
        pass
    if os.path.exists(DATA):
        pytest.skip(f"{DATA} exists already: the test would take it over")
    for lock in ["/var/lib/dpkg/lock-frontend", "/var/lib/dpkg/lock"]:
        try:
            fd = os.open(lock, os.O_RDWR)
        except OSError:
            continue
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.lockf(fd, fcntl.LOCK_UN)
        except OSError:
            pytest.skip(f"dpkg is locked ({lock}): another apt or dpkg is running")
        finally:
            os.close(fd)


def dpkg(*args):
    r = run("dpkg", *args, ok=False, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    if r.returncode != 0 and "lock" in r.stderr and "dpkg" in r.stderr:
        pytest.skip(f"dpkg is locked: {r.stderr.strip()}")
    assert r.returncode == 0, f"dpkg {' '.join(args)}:\n{r.stdout}{r.stderr}"
    return r


def status():
    return run("dpkg-query", "-W", "-f=${Status}", "sundial", ok=False).stdout


def traces():
    """Whatever of the package could be left on the machine."""
    found = []
    for path in [DATA, "/etc/sundial", "/usr/share/doc/sundial", UNIT] + [
            f"/usr/bin/{p}" for p in PROGRAMS] + [f"/usr/share/man/man1/{p}.1.gz" for p in PROGRAMS]:
        if os.path.lexists(path):
            found.append(path)
    found += glob.glob("/etc/systemd/system/**/sundial.service", recursive=True)
    found += glob.glob("/var/lib/systemd/deb-systemd-helper-*/**/sundial.service*",
                       recursive=True)
    for db, name in [(pwd.getpwnam, "user"), (grp.getgrnam, "group")]:
        try:
            db("sundial")
            found.append(f"{name} sundial")
        except KeyError:
            pass
    return found


class Service:
    """sundiald started as the installed unit starts it, but with ports of its own (flags win
    over the config file, docs/operations.md) and a --ready-file, so that it cannot collide
    with anything else on the machine."""

    def __init__(self, unit):
        self.settings = unit_service_section(unit)
        self.tmp = tempfile.mkdtemp(prefix="sundial-package-")
        user = pwd.getpwnam(self.settings["User"][0])
        os.chown(self.tmp, user.pw_uid, user.pw_gid)
        self.ready = os.path.join(self.tmp, "ready.json")
        self.log_path = os.path.join(self.tmp, "sundiald.log")
        self.user = user

    def start(self):
        s = self.settings
        command = shlex.split(s["ExecStart"][0]) + [
            "--port", "0", "--http-port", "0", "--ready-file", self.ready]
        # systemd raises the limit; a container may forbid raising the hard one even to root,
        # so the test goes as far as it may.
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        limit = min(int(s["LimitNOFILE"][0]), hard)
        umask = int(s["UMask"][0], 8)

        def as_the_unit():  # in the child, before exec; setpriv then drops to the user
            resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
            os.umask(umask)

        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            ["setpriv", f"--reuid={s['User'][0]}", f"--regid={s['Group'][0]}",
             "--init-groups", "--no-new-privs", "--"] + command,
            stdout=self.log, stderr=self.log, cwd="/", preexec_fn=as_the_unit,
            env={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"})

        def ready():
            assert self.proc.poll() is None, f"sundiald exited: {self.read_log()}"
            if os.path.exists(self.ready):
                with open(self.ready) as f:
                    return json.load(f)
            return None

        info = wait_for(ready, what="the installed sundiald to listen")
        self.addr = f"127.0.0.1:{info['port']}"
        return self

    def reload(self):
        command = self.settings["ExecReload"][0].replace("$MAINPID", str(self.proc.pid))
        run(*shlex.split(command))

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)  # KillSignal's default
        code = self.proc.wait(60)
        self.log.close()
        return code

    def read_log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def cli(self, *args):
        r = run("/usr/bin/sundial", "--addr", self.addr, *args)
        return [json.loads(line) for line in r.stdout.splitlines()]

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)


def test_install_run_reload_remove_and_purge(deb):
    require_dpkg_access()
    assert traces() == [], "left over from something else"
    service = None
    try:
        dpkg("--install", deb)
        assert status() == "install ok installed"
        if os.path.isdir("/run/systemd/system"):
            # Where systemd runs, postinst started the unit: stop it, so that the server below
            # (on the same data directory) is the only one.
            run("systemctl", "stop", "sundial.service")
        owned = run("dpkg-query", "--listfiles", "sundial").stdout.split()

        # What postinst made: a system user without a login, its data directory.
        user = pwd.getpwnam("sundial")
        assert user.pw_uid < 1000 and user.pw_dir == DATA
        assert user.pw_shell in ("/usr/sbin/nologin", "/bin/false")
        st = os.stat(DATA)
        assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (user.pw_uid, user.pw_gid, 0o750)
        # Enabled for the next boot, as debhelper's scripts do; not started (no systemd here).
        assert os.path.islink("/etc/systemd/system/multi-user.target.wants/sundial.service")
        if shutil.which("systemd-analyze"):
            r = run("systemd-analyze", "verify", UNIT, ok=False)
            assert r.returncode == 0 and "sundial" not in r.stderr, r.stderr

        # Run as the unit would, with the packaged config.
        service = Service(UNIT).start()
        assert service.settings["User"] == ["sundial"]
        assert ["--config", CONFIG] == shlex.split(service.settings["ExecStart"][0])[1:]
        enqueued = service.cli("enqueue", "jobs", "--payload", "from the package",
                               "--priority", "5")[0]
        leased = service.cli("dequeue", "jobs", "--lease-ms", "30000")
        assert [m["id"] for m in leased] == [enqueued["id"]]
        service.cli("complete", "jobs", leased[0]["id"], str(leased[0]["lease_token"]))
        service.cli("enqueue", "jobs", "--payload", "kept across dpkg -r")
        segments = glob.glob(os.path.join(DATA, "wal-*.log"))
        assert segments, os.listdir(DATA)
        assert all(os.stat(p).st_uid == user.pw_uid for p in segments)
        assert all(os.stat(p).st_mode & 0o027 == 0 for p in segments)  # UMask=0027

        # systemctl reload: the unit's ExecReload; the server stays up and says so.
        service.reload()
        wait_for(lambda: "SIGHUP: nothing to reload" in service.read_log(),
                 what="the reload's log line")
        assert service.proc.poll() is None
        assert service.cli("count", "jobs")[0]["pending"] == 1

        assert service.stop() == 0
        run("/usr/bin/sundial-wal", "verify", DATA)

        # remove: the programs go; configuration, data and user stay.
        with open(CONFIG, "a") as f:
            f.write("# changed by the operator\n")
        dpkg("--remove", "sundial")
        assert status() == "deinstall ok config-files"
        assert not os.path.exists("/usr/bin/sundiald")
        with open(CONFIG) as f:
            assert f.read().endswith("# changed by the operator\n")
        assert glob.glob(os.path.join(DATA, "wal-*.log"))
        pwd.getpwnam("sundial")

        # purge: nothing left.
        dpkg("--purge", "sundial")
        assert status() == ""
        assert traces() == []
        left = [p for p in owned if os.path.lexists(p) and not os.path.isdir(p)]
        assert left == []
    finally:
        if service is not None:
            service.close()
        if status():
            subprocess.run(["dpkg", "--purge", "sundial"], capture_output=True)
