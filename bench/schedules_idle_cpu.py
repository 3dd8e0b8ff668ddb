#!/usr/bin/env python3
"""Idle CPU of a sundiald holding many schedules (docs/BENCHMARKS.md, "Schedules: idle CPU").

Starts sundiald twice in a temporary data directory: once empty, once after creating N
schedules (every_ms one year and a yearly cron, alternately: nothing fires during the run),
then reads the process's CPU time (utime + stime, /proc/PID/stat) over a window of idle time
and prints both. The timer thread sleeps until the earliest fire (docs/server.md): a schedule
costs nothing until it is due.

Usage: schedules_idle_cpu.py [--sundiald PATH] [--port P] [--schedules N] [--seconds S]
PYTHONPATH must reach the client (clients/python) and its generated protocol
(build/release/clients/python/gen).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from sundial import Client

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime, stime


def start(sundiald, data_dir, port):
    ready = data_dir + ".ready"
    proc = subprocess.Popen([sundiald, "--data-dir", data_dir, "--bind", "127.0.0.1", "--port",
                             str(port), "--http-port", str(port + 1), "--ready-file", ready],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if os.path.exists(ready) and json.load(open(ready)).get("port"):
            return proc
        if proc.poll() is not None:
            sys.exit(f"sundiald exited with {proc.returncode}")
        time.sleep(0.05)
    proc.kill()
    sys.exit("sundiald not ready")


def measure(proc, seconds):
    time.sleep(2)  # let the start and the setup settle
    before, t0 = cpu_seconds(proc.pid), time.monotonic()
    time.sleep(seconds)
    return cpu_seconds(proc.pid) - before, time.monotonic() - t0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sundiald", default=os.path.join(ROOT, "build", "release", "server",
                                                           "sundiald"))
    parser.add_argument("--port", type=int, default=25100)
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=60)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="sundial-sched-bench-")
    try:
        results = {}
        for label, count in (("empty", 0), ("schedules", args.schedules)):
            data = os.path.join(root, label)
            proc = start(args.sundiald, data, args.port)
            try:
                if count:
                    with Client(f"127.0.0.1:{args.port}", timeout=60) as c:
                        for i in range(count):
                            if i % 2:
                                c.upsert_schedule(f"q{i % 100}", f"s{i}",
                                                  every_ms=365 * 86_400_000, durability="relaxed")
                            else:
                                c.upsert_schedule(f"q{i % 100}", f"s{i}", cron="0 0 1 1 *",
                                                  tz="Europe/Paris", durability="relaxed")
                        assert len(c.list_schedules()) == count
                cpu, wall = measure(proc, args.seconds)
                results[label] = (cpu, wall)
                print(f"{label}: {count} schedules, {cpu * 1000:.0f} ms CPU in {wall:.1f} s "
                      f"({100 * cpu / wall:.3f}% of a core)", flush=True)
            finally:
                proc.terminate()
                proc.wait(30)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
