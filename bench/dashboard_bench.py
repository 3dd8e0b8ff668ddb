#!/usr/bin/python3
"""The dashboard's targets (issue 13; results in docs/BENCHMARKS.md, "Dashboard"):

  with 1,000 queues and 10,000,000 messages
  - first render of / and of a queue page, each <= 1 s (Chromium's performance timings: the
    page's `sundial:*-rendered` marks, set in the frame after the figures reached the DOM, and
    first-contentful-paint), on a fresh load, idle and under load;
  - on-screen counts <= 2 s behind the server under 20,000 transitions a second (the page
    records each tick's server time and when its figures were on screen; a number stays on
    screen until the next tick's, so "behind" is the next render's time minus the tick's);
  - 10 open dashboards cost sundiald <= 5% of one core (utime+stime from /proc/PID/stat over
    a minute, 10 tabs against none, idle and under load).

The queues: q0000 holds 1,009,000 messages (the queue page's worst case, and the load's
supply), q0001..q0999 hold 9,000 each. Payloads are 16 bytes. sundiald runs with
--fsync never (the load measures the dashboard, not the disk). The load is sundial-bench's
mixed workload at 13,334 operations a second on one more queue, `load` (half enqueues, half
dequeue + complete: 20,000 transitions a second), measured from the ticks' totals.

Run it under the shared lock (about 8 minutes, ~4 GB of memory):
  flock /work/.bench.lock /usr/bin/python3 bench/dashboard_bench.py --build build/release
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "browser"))
from sundial_harness import Server, Ws, start_chromium, wait_for  # noqa: E402

QUEUES = 1000
BIG = 1_009_000
SMALL = 9_000
# mixed: operations alternate between an enqueue (1 transition) and a dequeue + complete (2).
LOAD_OPS_PER_SEC = 13_334


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fill(bench, server, queues, big, small):
    started = time.monotonic()
    procs = []

    def run(queue, n):
        return subprocess.Popen(
            [bench, "--target", f"sundial://127.0.0.1:{server.port}", "--workload", "enqueue",
             "--queue", queue, "--messages", str(n), "--batch", "1000", "--connections", "2",
             "--threads", "1", "--pipeline", "4", "--payload-bytes", "16", "--relaxed",
             "--keep", "--duration", "600", "--json"], stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE)

    procs.append(run("q0000", big))
    for i in range(1, queues):
        procs.append(run(f"q{i:04d}", small))
        while sum(p.poll() is None for p in procs) >= 4:
            time.sleep(0.01)
    for p in procs:
        if p.wait() != 0:
            raise RuntimeError(p.stderr.read().decode())
    return time.monotonic() - started


def render_times(driver, url, mark, samples):
    out = []
    for _ in range(samples):
        driver.get("about:blank")
        driver.get(url)
        value = wait_for(lambda: driver.execute_script(
            "const m = performance.getEntriesByName(arguments[0])[0];"
            "const p = performance.getEntriesByName('first-contentful-paint')[0];"
            "return m ? {mark: m.startTime, fcp: p ? p.startTime : null} : null;", mark),
            60, mark)
        out.append(value)
    return out


def summary(values):
    values = sorted(values)
    return {"median": round(statistics.median(values), 1), "max": round(values[-1], 1),
            "n": len(values)}


def tick_lag(driver):
    renders = driver.execute_script("return window.sundial.renders")
    lags = [r["at"] - r["tick"] for r in renders]
    behind = [renders[i + 1]["at"] - renders[i]["tick"] for i in range(len(renders) - 1)]
    return summary(lags), summary(behind)


def measure_cpu(server, seconds):
    before = cpu_seconds(server.proc.pid)
    t0 = time.monotonic()
    time.sleep(seconds)
    return (cpu_seconds(server.proc.pid) - before) / (time.monotonic() - t0)


def settle(server, limit=0.05, timeout=300):
    """Waits until sundiald is idle (under `limit` of a core over 3 s): the fill's checkpoint
    writes a snapshot of 10M messages, which must not count as the dashboards' cost."""
    deadline = time.monotonic() + timeout
    while True:
        used = measure_cpu(server, 3)
        if used < limit or time.monotonic() > deadline:
            return used


def transitions_per_sec(ws, seconds=5):
    def total():
        ticks = []
        ws.call("Subscribe", {"queue": "*", "queue_stats": True, "max_events_per_sec": 0})
        while len(ticks) < 1:
            msg = ws.read_message()
            body = msg.get("body", {})
            if body.get("event_type") == "StatsTick" and "queues" in body["event"]:
                ticks.append(body["event"])
        tick = ticks[0]
        t = sum(q.get("enqueued", 0) + q.get("dequeued", 0) + q.get("completed", 0)
                for q in tick["queues"])
        ws.call("Unsubscribe", {"queue": "*"})
        return tick["time"], t

    t0, n0 = total()
    time.sleep(seconds)
    t1, n1 = total()
    return (n1 - n0) / ((t1 - t0) / 1000)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default="build/release")
    parser.add_argument("--cpu-seconds", type=float, default=60)
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--out", default="build/release/dashboard-bench",
                        help="screenshots go here")
    parser.add_argument("--queues", type=int, default=QUEUES, help="smaller for a dry run")
    parser.add_argument("--big", type=int, default=BIG)
    parser.add_argument("--small", type=int, default=SMALL)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    sundiald = os.path.join(args.build, "server", "sundiald")
    bench = os.path.join(args.build, "bench", "sundial-bench")
    results = {"machine": f"{os.cpu_count()} cores, {os.uname().release}"}

    server = Server(sundiald, ["--fsync", "never"]).start()
    driver = None
    load = None
    try:
        results["fill_seconds"] = round(fill(bench, server, args.queues, args.big, args.small), 1)
        ws = Ws(server.http_port)
        stats = ws.call("Stats")
        results["queues"] = stats["queues"]
        results["messages"] = sum(stats["messages"].get(s, 0) for s in
                                  ("invisible", "pending", "running", "completed", "canceled",
                                   "errored"))
        results["memory_bytes"] = stats.get("memory_bytes", 0)
        print(json.dumps(results), flush=True)

        # Idle: CPU with no dashboard, first renders, then 10 dashboards.
        results["settled_at"] = round(settle(server), 4)
        results["cpu_idle_no_dashboard"] = round(measure_cpu(server, args.cpu_seconds), 4)
        results["loadavg_idle"] = os.getloadavg()[0]
        driver = start_chromium()
        url = server.url + "/"
        results["idle_overview_ms"] = render_times(driver, url, "sundial:overview-rendered",
                                                   args.samples)
        results["idle_queue_big_ms"] = render_times(
            driver, url + "#/q/q0000", "sundial:queue-rendered", args.samples)
        results["idle_queue_small_ms"] = render_times(
            driver, url + f"#/q/q{args.queues // 2:04d}", "sundial:queue-rendered", args.samples)
        print(json.dumps(results), flush=True)

        tabs = [driver.current_window_handle]
        driver.get(url)
        for _ in range(9):
            driver.switch_to.new_window("tab")
            driver.get(url)
            tabs.append(driver.current_window_handle)
        for handle in tabs:
            driver.switch_to.window(handle)
            wait_for(lambda: driver.execute_script(
                "return window.sundial && window.sundial.store.ticks.length > 2"), 60, "ticks")
        results["cpu_idle_10_dashboards"] = round(measure_cpu(server, args.cpu_seconds), 4)
        print(json.dumps(results), flush=True)
        driver.save_screenshot(os.path.join(args.out, "dashboard-1000-queues.png"))

        # Under load: 20,000 transitions a second.
        load = subprocess.Popen(
            [bench, "--target", f"sundial://127.0.0.1:{server.port}", "--workload", "mixed",
             "--queue", "load", "--prefill", "5000", "--rate", str(LOAD_OPS_PER_SEC),
             "--connections", "8", "--threads", "1", "--relaxed", "--keep",
             "--duration", str(3 * args.cpu_seconds + 180), "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(5)
        if load.poll() is not None:
            raise RuntimeError("the load stopped: " + load.stderr.read().decode())
        results["load_transitions_per_sec"] = round(transitions_per_sec(ws), 0)
        results["loadavg_load_10_dashboards"] = os.getloadavg()[0]
        results["cpu_load_10_dashboards"] = round(measure_cpu(server, args.cpu_seconds), 4)
        # One page from here on: 10 tabs share this VM's 2 cores with the load and sundiald.
        for handle in tabs[1:]:
            driver.switch_to.window(handle)
            driver.close()
        driver.switch_to.window(tabs[0])
        driver.get(url)  # a fresh page, in front: its renders are not throttled
        wait_for(lambda: driver.execute_script(
            "return window.sundial && window.sundial.renders.length > 30"), 120, "30 renders")
        lag, behind = tick_lag(driver)
        results["load_tick_to_screen_ms"] = lag
        results["load_counts_behind_ms"] = behind
        results["loadavg_load_1_dashboard"] = os.getloadavg()[0]
        results["load_overview_ms"] = render_times(driver, url, "sundial:overview-rendered",
                                                   args.samples)
        results["load_queue_big_ms"] = render_times(driver, url + "#/q/q0000",
                                                    "sundial:queue-rendered", args.samples)
        driver.get(url + "#/q/load")
        wait_for(lambda: driver.execute_script(
            "return performance.getEntriesByName('sundial:queue-rendered').length"), 60, "load")
        time.sleep(20)  # 20 points on the charts
        driver.save_screenshot(os.path.join(args.out, "dashboard-queue-under-load.png"))
        driver.get("about:blank")
        time.sleep(2)
        results["cpu_load_no_dashboard"] = round(measure_cpu(server, args.cpu_seconds), 4)
        results["load_transitions_per_sec_end"] = round(transitions_per_sec(ws), 0)
    finally:
        if load:
            load.terminate()
            load.wait()
        if driver:
            driver.quit()
        server.cleanup()
    # Flatten the render samples.
    for key in [k for k in results if k.endswith("_ms") and isinstance(results[k], list)]:
        samples = results[key]
        results[key] = {"mark": summary([s["mark"] for s in samples]),
                        "fcp": summary([s["fcp"] for s in samples if s["fcp"] is not None])}
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
