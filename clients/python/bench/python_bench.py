#!/usr/bin/env python3
"""The Python client's throughput, and its Worker side by side with RQ (issue 16).

    flock /work/.bench.lock python3 clients/python/bench/python_bench.py [--rounds 3] [--jobs 20000]

Starts, on 127.0.0.1 and free ports, in one temp dir: sundiald --fsync=always and
redis-server --appendonly yes --appendfsync always (both durable: a reply means fsynced).
Then, per round:

  enqueue    one Python process, one Client: --enqueue-messages messages of 100 bytes with
             enqueue_batch (1000 per request, 10 requests pipelined per call); and the same
             number with enqueue() from 8 threads on one Client (pipelined singles).
  worker     --jobs no-op jobs prefilled (untimed), then a sundial.Worker with concurrency 8
             and a no-op handler until all are completed; once with the default prefetch 0
             (at most 8 messages leased), once with prefetch 8.
  rq         the same number of no-op jobs prefilled in RQ (python3-rq), then 8 RQ
             SimpleWorker processes in burst mode (RQ's concurrency is processes; SimpleWorker
             runs jobs in-process, without RQ's fork per job, so this is RQ at its fastest).

Jobs per second are counted over the same window for both: from the first job started to the
last one done (Sundial: the Worker's counter of acknowledged completes, polled every 10 ms;
RQ: the jobs' own started_at/ended_at). Every figure is the median over the rounds; the
ratio is the median of the per-round ratios. Needs Debian's python3-flatbuffers, python3-rq
and redis-server, and a built sundiald (make build); prints a markdown report.
"""

import argparse
import importlib.util
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
sys.path.insert(1, os.path.join(ROOT, "build", "release", "clients", "python", "gen"))
sys.path.insert(0, HERE)

from sundial import Client, Worker  # noqa: E402

SUNDIALD = os.environ.get("SUNDIALD") or os.path.join(ROOT, "build", "release", "server",
                                                      "sundiald")
PAYLOAD = b"x" * 100


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(condition, timeout, what):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            sys.exit(f"python_bench: timed out waiting for {what}")
        time.sleep(0.01)


class Servers:
    def __init__(self, workdir):
        self.workdir = workdir
        ready = os.path.join(workdir, "sundiald.ready")
        self.sundiald_cmd = [SUNDIALD, "--data-dir", os.path.join(workdir, "sundial"), "--port",
                             "0", "--http-port", "0", "--ready-file", ready, "--fsync=always"]
        self.sundiald = subprocess.Popen(self.sundiald_cmd,
                                         stderr=open(os.path.join(workdir, "sundiald.log"), "w"))
        wait_until(lambda: os.path.exists(ready), 30, "sundiald")
        import json
        with open(ready) as f:
            self.sundial_addr = "127.0.0.1:%d" % json.load(f)["port"]
        self.redis_port = free_port()
        redis_dir = os.path.join(workdir, "redis")
        os.makedirs(redis_dir)
        self.redis_cmd = ["redis-server", "--port", str(self.redis_port), "--bind", "127.0.0.1",
                          "--dir", redis_dir, "--appendonly", "yes", "--appendfsync", "always",
                          "--save", "", "--daemonize", "no", "--protected-mode", "no",
                          "--logfile", os.path.join(redis_dir, "redis.log")]
        self.redis = subprocess.Popen(self.redis_cmd)
        import redis
        self.redis_conn = redis.Redis(port=self.redis_port)
        wait_until(self._redis_up, 30, "redis-server")

    def _redis_up(self):
        try:
            return self.redis_conn.ping()
        except Exception:  # noqa: BLE001 - not up yet
            return False

    def close(self):
        for p in (self.sundiald, self.redis):
            p.terminate()
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()


def bench_enqueue_batch(addr, n):
    queue = "enq-" + uuid.uuid4().hex[:8]
    c = Client(addr, timeout=120)
    c.create_queue(queue)
    items = [dict(payload=PAYLOAD, priority=i) for i in range(10000)]
    start = time.perf_counter()
    sent = 0
    while sent < n:
        k = min(10000, n - sent)
        results = c.enqueue_batch(queue, items[:k])
        assert len(results) == k and results[-1].error is None
        sent += k
    elapsed = time.perf_counter() - start
    assert c.count(queue).pending == n
    c.close()
    return n / elapsed


def bench_enqueue_threads(addr, n, threads=8):
    queue = "enq1-" + uuid.uuid4().hex[:8]
    c = Client(addr, timeout=120)
    c.create_queue(queue)
    per = n // threads

    def produce():
        for i in range(per):
            c.enqueue(queue, PAYLOAD, priority=i)

    ts = [threading.Thread(target=produce) for _ in range(threads)]
    start = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    elapsed = time.perf_counter() - start
    assert c.count(queue).pending == per * threads
    c.close()
    return per * threads / elapsed


def bench_worker(addr, jobs, concurrency, prefetch=0):
    queue = "work-" + uuid.uuid4().hex[:8]
    c = Client(addr, timeout=120)
    c.create_queue(queue)
    for i in range(0, jobs, 10000):
        c.enqueue_batch(queue, [dict(payload=PAYLOAD) for _ in range(min(10000, jobs - i))])
    first = []

    def handler(message):
        if not first:
            first.append(time.perf_counter())

    w = Worker(addr, queue, handler, concurrency=concurrency, prefetch=prefetch,
               handle_signals=False)
    t = threading.Thread(target=w.run)
    t.start()
    while w.metrics()["sundial_worker_completed_total"] < jobs:
        time.sleep(0.01)
    end = time.perf_counter()
    w.stop()
    t.join()
    assert c.count(queue).completed == jobs
    c.close()
    return jobs / (end - first[0])


def bench_rq(servers, jobs, workers):
    import redis
    from rq import Queue
    from rq.job import Job
    conn = redis.Redis(port=servers.redis_port)
    name = "rq-" + uuid.uuid4().hex[:8]
    q = Queue(name, connection=conn)
    ids = []
    for i in range(0, jobs, 1000):
        with conn.pipeline() as pipe:
            batch = [Queue.prepare_data("rq_jobs.noop", args=(PAYLOAD,))
                     for _ in range(min(1000, jobs - i))]
            for job in q.enqueue_many(batch, pipeline=pipe):
                ids.append(job.id)
            pipe.execute()
    assert q.count == jobs
    env = dict(os.environ, PYTHONPATH=HERE)
    procs = [subprocess.Popen([sys.executable, "-m", "rq.cli", "worker", "--burst", "--quiet",
                               "--worker-class", "rq.worker.SimpleWorker", "--url",
                               f"redis://127.0.0.1:{servers.redis_port}", name],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
             for _ in range(workers)]
    for p in procs:
        _, err = p.communicate(timeout=1800)
        if p.returncode != 0:
            sys.exit(f"python_bench: rq worker exited {p.returncode}: {err.decode()[-2000:]}")
    started, ended = [], []
    for i in range(0, len(ids), 1000):
        for job in Job.fetch_many(ids[i:i + 1000], connection=conn):
            assert job.get_status() == "finished", job.get_status()
            started.append(job.started_at)
            ended.append(job.ended_at)
    return jobs / (max(ended) - min(started)).total_seconds()


def fmt(x):
    return f"{x:,.0f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--enqueue-messages", type=int, default=200000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--skip-rq", action="store_true")
    args = parser.parse_args()
    if not os.access(SUNDIALD, os.X_OK):
        sys.exit(f"python_bench: no {SUNDIALD}: run make build")
    if not args.skip_rq:
        if shutil.which("redis-server") is None or importlib.util.find_spec("rq") is None:
            sys.exit("python_bench: needs redis-server and python3-rq (apt-get install "
                     "redis-server python3-rq), or --skip-rq")
    workdir = tempfile.mkdtemp(prefix="sundial-python-bench-")
    servers = Servers(workdir)
    rows = {"batch": [], "threads": [], "worker": [], "prefetch": [], "rq": [], "ratio": []}
    try:
        for r in range(args.rounds):
            rows["batch"].append(bench_enqueue_batch(servers.sundial_addr, args.enqueue_messages))
            rows["threads"].append(bench_enqueue_threads(servers.sundial_addr,
                                                         args.enqueue_messages // 4))
            rows["worker"].append(bench_worker(servers.sundial_addr, args.jobs, args.concurrency))
            rows["prefetch"].append(bench_worker(servers.sundial_addr, args.jobs,
                                                 args.concurrency, args.concurrency))
            if not args.skip_rq:
                rows["rq"].append(bench_rq(servers, args.jobs, args.concurrency))
                rows["ratio"].append(rows["worker"][-1] / rows["rq"][-1])
            shown = (f"{k} {fmt(v[-1]) if k != 'ratio' else f'{v[-1]:.2f}x'}"
                     for k, v in rows.items() if v)
            print(f"round {r + 1}: " + ", ".join(shown), file=sys.stderr, flush=True)
    finally:
        servers.close()
        shutil.rmtree(workdir, ignore_errors=True)

    med = {k: statistics.median(v) for k, v in rows.items() if v}
    each = {k: " / ".join(fmt(x) if k != "ratio" else f"{x:.2f}×" for x in v)
            for k, v in rows.items() if v}
    print(f"Machine: {platform.node()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, load average {os.getloadavg()[0]:.1f} at the "
          f"end; {args.rounds} rounds, medians.\n")
    print("| what | median | each round |")
    print("| --- | ---: | ---: |")
    print(f"| enqueue_batch, 1 process, 1000 per request, 10 requests pipelined (messages/s) "
          f"| {fmt(med['batch'])} | {each['batch']} |")
    print(f"| enqueue() from 8 threads on one Client, pipelined (messages/s) "
          f"| {fmt(med['threads'])} | {each['threads']} |")
    print(f"| Worker, concurrency {args.concurrency}, no-op handler (jobs/s) "
          f"| {fmt(med['worker'])} | {each['worker']} |")
    print(f"| Worker, concurrency {args.concurrency}, prefetch {args.concurrency}, no-op handler "
          f"(jobs/s) | {fmt(med['prefetch'])} | {each['prefetch']} |")
    if rows["rq"]:
        print(f"| RQ 1.13, {args.concurrency} SimpleWorker processes, no-op job (jobs/s) "
              f"| {fmt(med['rq'])} | {each['rq']} |")
        print(f"| Sundial Worker / RQ | {med['ratio']:.2f}× | {each['ratio']} |")
    print("\nCommands: " + " ".join(servers.sundiald_cmd) + "\n" + " ".join(servers.redis_cmd))


if __name__ == "__main__":
    main()
