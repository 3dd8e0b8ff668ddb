#!/usr/bin/env bash
# Sundial side by side with Redis and beanstalkd, on this machine, in one run (issue 5).
#
#   bash bench/compare.sh [--quick] [--keep-results FILE] [--output FILE]
#        [--modes LIST --workloads LIST --connections LIST  (a subset; needs --output)]
#   bash bench/compare.sh --from-results FILE [--output FILE]     (rewrite the report only)
#
# Starts every server itself on 127.0.0.1, on free ports, each with its own data dir under one
# temp dir, in two durability modes:
#   durable  sundiald --fsync=always        redis appendfsync always     beanstalkd -f 0
#   relaxed  sundiald --fsync=interval:1000 redis appendfsync everysec   beanstalkd -f 50
# and runs build/release/bench/sundial-bench against the three in turn (A B C), ROUNDS rounds,
# one request per round trip (--pipeline 1), 100-byte payloads. Every figure in the report is the
# median over the rounds; a ratio is the median of the per-round ratios (A and B of one round ran
# seconds apart, so a ratio is fairer than two medians taken apart). The report replaces the part
# of docs/BENCHMARKS.md between "<!-- compare.sh:begin -->" and "<!-- compare.sh:end -->".
#
# Every run also reports the server's CPU time (utime+stime from /proc/PID/stat over the measured
# run, per operation). Sundial runs are checked for honest counting: the messages the bench saw
# acknowledged (enqueued, leased, completed, over all its phases) must equal what sundiald
# counted (sundial_messages_total before and after); a mismatch is reported loudly and the
# script exits non-zero.
#
# --quick: 1 round of 1 s per run (about a third of the time; for trying the script, not for the
# record). DURATION, ROUNDS and the PREFILL_* variables below can be set in the environment.
# --modes (durable,relaxed), --workloads (enqueue,dequeue-complete,worker,...) and --connections
# (1,16,64), comma-separated, run only the cases that match all three; such a partial report
# must go to its own --output (it would replace the whole one in docs/BENCHMARKS.md).
# Needs python3 (standard library only) for the report; installs redis-server and beanstalkd
# from Debian when missing; runs `make build` when the binaries are missing.
set -euo pipefail

SCRIPT_NAME=compare.sh
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DURATION=${DURATION:-2}                  # seconds per run
ROUNDS=${ROUNDS:-3}
PAYLOAD_BYTES=${PAYLOAD_BYTES:-100}
# Messages enqueued (untimed) before a dequeue-type run, sized so that no target runs dry within
# DURATION: Sundial's durable worker loop passed 75K/s at c=64 in a quiet moment; beanstalkd -f 0
# fsyncs every put (6K to 10K puts/s here) and its worker loop at c=1 reached 8K/s, so its
# durable prefill is what two seconds of that take, or the prefill alone would take minutes.
PREFILL_SUNDIAL=${PREFILL_SUNDIAL:-200000}
PREFILL_REDIS=${PREFILL_REDIS:-200000}
PREFILL_BEANSTALK_DURABLE=${PREFILL_BEANSTALK_DURABLE:-20000}
PREFILL_BEANSTALK_RELAXED=${PREFILL_BEANSTALK_RELAXED:-80000}
RUN_SLACK_S=${RUN_SLACK_S:-180}          # a run is killed after DURATION + this (prefill included)
READY_TIMEOUT_S=10                       # a server must accept connections within this
STOP_TIMEOUT_S=10                        # SIGTERM, then SIGKILL after this

ONLY_MODES='' ONLY_WORKLOADS='' ONLY_CONNECTIONS='' OUTPUT_GIVEN=''
while (($#)); do
  case $1 in
    --quick) ROUNDS=1 DURATION=1 ;;
    --keep-results) (($# >= 2)) || usage; KEEP_RESULTS=$2; shift ;;
    --from-results) (($# >= 2)) || usage; FROM_RESULTS=$2; shift ;;
    --output) (($# >= 2)) || usage; OUTPUT=$2; OUTPUT_GIVEN=1; shift ;;
    --modes) (($# >= 2)) || usage; ONLY_MODES=$2; shift ;;
    --workloads) (($# >= 2)) || usage; ONLY_WORKLOADS=$2; shift ;;
    --connections) (($# >= 2)) || usage; ONLY_CONNECTIONS=$2; shift ;;
    -h | --help) usage ;;
    *) log "unknown argument: $1"; usage ;;
  esac
  shift
done
if [[ -n $ONLY_MODES$ONLY_WORKLOADS$ONLY_CONNECTIONS && -z $OUTPUT_GIVEN && -z $FROM_RESULTS ]]; then
  log "--modes/--workloads/--connections run a subset: give it its own --output FILE"
  usage
fi
enter_repository

# ---------------------------------------------------------------------------------------------
# Servers (see lib.sh for the start, the bookkeeping by PID and the stop)

# wait_ready NAME PID PORT LOG: until PORT accepts a connection, bounded by READY_TIMEOUT_S.
wait_ready() {
  local EXITED_SAYS="exited during startup"  # the words of wait_until's messages (lib.sh)
  local NOT_READY_SAYS="does not accept connections on 127.0.0.1:$3"
  wait_until "$1" "$2" "$4" "$READY_TIMEOUT_S" port_open "$3"
}

# Each start_* sets <NAME>_PID, <NAME>_PORT, <NAME>_CMD and records the PID. Arg 1: the mode.
start_sundial() {
  local mode=$1 dir="$WORK/$1/sundial" fsync
  [[ $mode == durable ]] && fsync=always || fsync=interval:1000
  mkdir -p "$dir/data"
  read -r SUNDIAL_PORT SUNDIAL_HTTP_PORT <<<"$(free_ports 2)"
  local -a cmd=("$SUNDIALD" --data-dir "$dir/data" --port "$SUNDIAL_PORT"
    --http-port "$SUNDIAL_HTTP_PORT" "--fsync=$fsync")
  SUNDIAL_CMD=$(quote_command "${cmd[@]}")
  SUNDIAL_LOG=$dir/sundiald.log
  spawn "$SUNDIAL_LOG" "${cmd[@]}"
  SUNDIAL_PID=$!
  wait_ready sundiald "$SUNDIAL_PID" "$SUNDIAL_PORT" "$SUNDIAL_LOG"
}

start_redis() {
  local mode=$1 dir="$WORK/$1/redis" fsync
  [[ $mode == durable ]] && fsync=always || fsync=everysec
  mkdir -p "$dir"
  REDIS_PORT=$(free_ports 1)
  local -a cmd=(redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$dir"
    --appendonly yes --appendfsync "$fsync" --save '' --daemonize no --protected-mode no
    --logfile "$dir/redis.log")
  REDIS_CMD=$(quote_command "${cmd[@]}")
  REDIS_LOG=$dir/redis.log
  spawn "$dir/stdout.log" "${cmd[@]}"
  REDIS_PID=$!
  wait_ready redis-server "$REDIS_PID" "$REDIS_PORT" "$REDIS_LOG"
}

start_beanstalkd() {
  local mode=$1 dir="$WORK/$1/beanstalkd" fsync_ms
  [[ $mode == durable ]] && fsync_ms=0 || fsync_ms=50
  mkdir -p "$dir/binlog"
  BEANSTALK_PORT=$(free_ports 1)
  local -a cmd=(beanstalkd -l 127.0.0.1 -p "$BEANSTALK_PORT" -b "$dir/binlog" -f "$fsync_ms")
  BEANSTALK_CMD=$(quote_command "${cmd[@]}")
  BEANSTALK_LOG=$dir/beanstalkd.log
  spawn "$BEANSTALK_LOG" "${cmd[@]}"
  BEANSTALK_PID=$!
  wait_ready beanstalkd "$BEANSTALK_PID" "$BEANSTALK_PORT" "$BEANSTALK_LOG"
}

# ---------------------------------------------------------------------------------------------
# Runs

declare -A DEAD_REPORTED=()
RUN_COUNT=0
FAIL_COUNT=0
MISMATCH_COUNT=0

# sundial_messages_total of the Sundial under test, as "enqueue dequeue complete".
sundial_counts() {
  "$PYTHON" - "$SUNDIAL_HTTP_PORT" <<'PY'
import re, sys, urllib.request
text = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=10).read().decode()
counts = {op: 0 for op in ("enqueue", "dequeue", "complete")}
for m in re.finditer(r'^sundial_messages_total\{op="(\w+)"\} (\d+)$', text, re.M):
    if m.group(1) in counts:
        counts[m.group(1)] = int(m.group(2))
print(counts["enqueue"], counts["dequeue"], counts["complete"])
PY
}

# Appends one JSON object to RESULTS (the bench's --json line augmented with the case), and
# prints a one-line summary. Args: mode round name workload connections batch rc argv stdout-file
# server-counted (Sundial: "enqueued leased completed" deltas, else empty).
record_run() {
  "$PYTHON" - "$@" >>"$RESULTS" <<'PY'
import json, sys
mode, rnd, name, workload, conns, batch, rc, argv, out_file, counted = sys.argv[1:11]
obj = None
with open(out_file, encoding="utf-8", errors="replace") as f:
    for line in reversed(f.read().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                obj = json.loads(line)
                break
            except ValueError:
                pass
if not isinstance(obj, dict):
    obj = {}
rc = int(rc)
failed = rc != 0 or "ops_per_sec" not in obj
obj.update(kind="run", mode=mode, round=int(rnd), name=name, case_workload=workload,
           case_connections=int(conns), case_batch=int(batch), rc=rc, failed=failed, argv=argv)
if counted.strip():
    server = dict(zip(("enqueued", "leased", "completed"), map(int, counted.split())))
    obj["server_counted"] = server
    obj["count_mismatch"] = server != obj.get("acked")
print(json.dumps(obj, sort_keys=True))
tag = f"[{mode} round {rnd}] {workload} c={conns}" + (f" batch={batch}" if int(batch) > 1 else "")
if failed:
    msg = f"FAILED (exit {rc})"
else:
    msg = f"{obj['ops_per_sec']:,.0f} ops/s, p50 {obj.get('p50_us', 0):,.0f} us, p99 {obj.get('p99_us', 0):,.0f} us"
    if obj.get("empty"):
        msg += f", {obj['empty']} empty dequeues"
    if obj.get("server_cpu_us_per_op", -1) >= 0:
        msg += f", server {obj['server_cpu_us_per_op']:.1f} us CPU/op"
if obj.get("count_mismatch"):
    msg += (f"\n*** COUNT MISMATCH: the bench saw {obj.get('acked')} acknowledged, "
            f"sundiald counted {obj['server_counted']}")
print(f"{tag:<44} {name:<10} {msg}", file=sys.stderr)
PY
}

# run_one MODE ROUND NAME WORKLOAD CONNECTIONS BATCH
run_one() {
  local mode=$1 rnd=$2 name=$3 workload=$4 conns=$5 batch=$6
  local url pid logfile prefill=0
  case $name in
    sundial)
      url=sundial://127.0.0.1:$SUNDIAL_PORT pid=$SUNDIAL_PID logfile=$SUNDIAL_LOG
      prefill=$PREFILL_SUNDIAL
      ;;
    redis)
      url=redis://127.0.0.1:$REDIS_PORT pid=$REDIS_PID logfile=$REDIS_LOG
      prefill=$PREFILL_REDIS
      ;;
    beanstalk)
      url=beanstalk://127.0.0.1:$BEANSTALK_PORT pid=$BEANSTALK_PID logfile=$BEANSTALK_LOG
      [[ $mode == durable ]] && prefill=$PREFILL_BEANSTALK_DURABLE || prefill=$PREFILL_BEANSTALK_RELAXED
      ;;
  esac
  [[ $workload == enqueue ]] && prefill=0
  local -a cmd=("$BENCH" --target "$url" --workload "$workload" --connections "$conns"
    --pipeline 1 --batch "$batch" --payload-bytes "$PAYLOAD_BYTES" --duration "$DURATION" --json
    --cpu-pid "$pid")
  ((prefill > 0)) && cmd+=(--prefill "$prefill")
  local argv out="$WORK/bench.out" rc=0 limit counted="" before after
  argv=$(quote_command "${cmd[@]}")
  : >"$out"
  if alive "$pid"; then
    limit=$(awk -v d="$DURATION" -v s="$RUN_SLACK_S" 'BEGIN { print d + s }')
    [[ $name == sundial ]] && before=$(sundial_counts)
    {
      printf '\n### %s round %s: %s\n' "$mode" "$rnd" "$argv"
      timeout --kill-after=5 "$limit" "${cmd[@]}" >"$out" 2>&1 || rc=$?
      cat "$out"
    } >>"$WORK/bench.log"
    if [[ $name == sundial ]] && alive "$pid"; then
      after=$(sundial_counts)
      counted=$(paste -d' ' <(tr ' ' '\n' <<<"$before") <(tr ' ' '\n' <<<"$after") |
        awk '{ printf "%d ", $2 - $1 }')
    fi
  else
    if [[ -z ${DEAD_REPORTED[$pid]:-} ]]; then
      DEAD_REPORTED[$pid]=1
      log "$name (pid $pid) is no longer running: its runs are recorded as failed. Last lines of its log:"
      tail -n 20 "$logfile" | sed 's/^/    /' >&2 || true
    fi
    rc=255
  fi
  RUN_COUNT=$((RUN_COUNT + 1))
  if ((rc != 0)); then
    FAIL_COUNT=$((FAIL_COUNT + 1))
    grep -v '^{' "$out" | tail -n 5 | sed 's/^/    /' >&2 || true
  fi
  record_run "$mode" "$rnd" "$name" "$workload" "$conns" "$batch" "$rc" "$argv" "$out" "$counted"
  if tail -n 1 "$RESULTS" | grep -q '"count_mismatch": true'; then
    MISMATCH_COUNT=$((MISMATCH_COUNT + 1))
  fi
}

# in_list ITEM LIST: LIST (comma-separated) is empty or holds ITEM.
in_list() { [[ -z $2 || ,$2, == *,$1,* ]]; }

# The modes to run (--modes), one per line.
modes() {
  local mode
  for mode in durable relaxed; do in_list "$mode" "$ONLY_MODES" && echo "$mode"; done
  return 0
}

# The cases of a mode (those --workloads and --connections leave), one per line: WORKLOAD
# CONNECTIONS BATCH TARGETS (comma-separated).
cases_for_mode() {
  local workload conns batch targets
  all_cases_for_mode "$1" | while read -r workload conns batch targets; do
    in_list "$workload" "$ONLY_WORKLOADS" && in_list "$conns" "$ONLY_CONNECTIONS" &&
      echo "$workload $conns $batch $targets"
  done
  return 0
}

all_cases_for_mode() {
  local c
  for c in 1 16 64; do echo "enqueue $c 1 sundial,redis,beanstalk"; done
  for c in 1 16 64; do echo "dequeue-complete $c 1 sundial,redis,beanstalk"; done
  # A worker's loop: dequeue once, then complete-and-next (Redis: one script call that ZREMs
  # and leases; beanstalkd: delete then reserve, pipelined).
  for c in 1 16 64; do echo "worker $c 1 sundial,redis,beanstalk"; done
  [[ $1 == durable ]] || return 0
  for c in 16 64; do echo "mixed $c 1 sundial,redis,beanstalk"; done
  for c in 16 64; do echo "filter $c 1 sundial,redis,beanstalk"; done
  for c in 16 64; do echo "exclusive $c 1 sundial"; done  # the peers have no exclusive queues
  for c in 16 64; do echo "enqueue $c 100 sundial,redis,beanstalk"; done
}

# Prints the estimated wall time in seconds (runs x duration, prefills, process overheads).
estimate_seconds() {
  local mode workload conns batch targets name runs=0 prefill_s=0
  local -a names
  local -A rate=([sundial]=150000 [redis]=100000 [beanstalk_durable]=6000
    [beanstalk_relaxed]=60000)  # rough prefill messages/s
  for mode in $(modes); do
    while read -r workload conns batch targets; do
      IFS=, read -ra names <<<"$targets"
      for name in "${names[@]}"; do
        runs=$((runs + 1))
        if [[ $name == beanstalk && $mode == durable ]] && ((batch > 1)); then
          # every put of the requests in flight is fsynced after the end of the run
          prefill_s=$((prefill_s + conns * batch * 1000 / rate[beanstalk_durable]))
        fi
        [[ $workload == enqueue ]] && continue
        case $name in
          sundial) prefill_s=$((prefill_s + PREFILL_SUNDIAL * 1000 / rate[sundial])) ;;
          redis) prefill_s=$((prefill_s + PREFILL_REDIS * 1000 / rate[redis])) ;;
          beanstalk)
            if [[ $mode == durable ]]; then
              prefill_s=$((prefill_s + PREFILL_BEANSTALK_DURABLE * 1000 / rate[beanstalk_durable]))
            else
              prefill_s=$((prefill_s + PREFILL_BEANSTALK_RELAXED * 1000 / rate[beanstalk_relaxed]))
            fi
            ;;
        esac
      done
    done < <(cases_for_mode "$mode")
  done
  # prefill_s is in milliseconds here; 0.3 s per run for start, queue setup and teardown.
  awk -v r="$runs" -v n="$ROUNDS" -v d="$DURATION" -v p="$prefill_s" \
    'BEGIN { printf "%d %d\n", n * (r * (d + 0.3) + p / 1000) + 10, n * r }'
}

subset_text() {  # empty for a full run
  [[ -n $ONLY_MODES$ONLY_WORKLOADS$ONLY_CONNECTIONS ]] || return 0
  printf 'modes %s, workloads %s, connections %s' "${ONLY_MODES:-all}" "${ONLY_WORKLOADS:-all}" \
    "${ONLY_CONNECTIONS:-all}"
}

collect_meta() {
  local -a machine
  mapfile -t machine < <(machine_meta)
  "$PYTHON" - >>"$RESULTS" "${machine[@]}" \
    "beanstalkd_version=$(beanstalkd -v 2>&1 | head -n 1)" \
    "rounds=$ROUNDS" "duration_s=$DURATION" "payload_bytes=$PAYLOAD_BYTES" \
    "prefill_sundial=$PREFILL_SUNDIAL" "prefill_redis=$PREFILL_REDIS" \
    "prefill_beanstalk_durable=$PREFILL_BEANSTALK_DURABLE" \
    "prefill_beanstalk_relaxed=$PREFILL_BEANSTALK_RELAXED" \
    "subset=$(subset_text)" <<'PY'
import json, sys
meta = {"kind": "meta", "prefill": {}}
for arg in sys.argv[1:]:
    k, _, v = arg.partition("=")
    if k.startswith("prefill_"):
        meta["prefill"][k[len("prefill_"):]] = int(v)
    elif k.endswith("_json"):
        meta[k[:-len("_json")]] = json.loads(v)
    elif k in ("rounds", "payload_bytes"):
        meta[k] = int(v)
    elif k == "duration_s":
        meta[k] = float(v)
    else:
        meta[k] = v
print(json.dumps(meta, sort_keys=True))
PY
}

record_servers() {  # MODE: the exact commands, for the report
  "$PYTHON" - "$1" "$SUNDIAL_CMD" "$REDIS_CMD" "$BEANSTALK_CMD" >>"$RESULTS" <<'PY'
import json, sys
mode, sundial, redis, beanstalk = sys.argv[1:5]
print(json.dumps({"kind": "servers", "mode": mode, "sundial": sundial, "redis": redis,
                  "beanstalk": beanstalk}, sort_keys=True))
PY
}

# ---------------------------------------------------------------------------------------------
# Report: markdown from the JSON lines (write_report, in lib.sh, puts it between the markers).

report_body() {  # RESULTS
  "$PYTHON" - "$1" <<'PY'
import json, statistics, sys

results_path = sys.argv[1]
NAMES = {"sundial": "Sundial", "redis": "Redis", "beanstalk": "beanstalkd"}
PEERS = ("sundial", "redis", "beanstalk")

meta, servers, runs, end = {}, {}, [], {}
with open(results_path, encoding="utf-8") as f:
    for n, line in enumerate(f, 1):
        line = line.strip()
        if not line:
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            print(f"compare.sh: {results_path}:{n}: not JSON, skipped", file=sys.stderr)
            continue
        kind = obj.get("kind")
        if kind == "meta":
            meta = obj
        elif kind == "servers":
            servers[obj["mode"]] = obj
        elif kind == "end":
            end = obj
        elif kind == "run":
            runs.append(obj)

def key(r):
    return (r["mode"], r["case_workload"], r["case_batch"], r["case_connections"])

cells = {}  # key -> name -> [runs]
for r in runs:
    cells.setdefault(key(r), {}).setdefault(r["name"], []).append(r)

def ok_runs(k, name):
    return [r for r in cells.get(k, {}).get(name, []) if not r["failed"]]

def median_of(k, name, field):
    vals = [r[field] for r in ok_runs(k, name) if isinstance(r.get(field), (int, float))]
    return statistics.median(vals) if vals else None

def ratio(k, a, b):
    """Median over the rounds of the per-round ratio a/b of ops/s (rounds where both ran)."""
    by_round = {}
    for name in (a, b):
        for r in ok_runs(k, name):
            by_round.setdefault(r["round"], {})[name] = r.get("ops_per_sec")
    vals = [v[a] / v[b] for v in by_round.values() if v.get(a) and v.get(b)]
    return statistics.median(vals) if vals else None

def fmt_rate(v):
    return "–" if v is None else f"{v:,.0f}"

def fmt_us(v):
    if v is None:
        return "–"
    if v < 1000:
        return f"{v:.0f} µs"
    if v < 100000:
        return f"{v / 1000:.2f} ms" if v < 10000 else f"{v / 1000:.1f} ms"
    if v < 10000000:
        return f"{v / 1000:,.0f} ms"
    return f"{v / 1000000:,.1f} s"

def fmt_ratio(v):
    return "–" if v is None else f"{v:.2f}×"

notes = set()

def status(k, name):
    """None when the cell has figures; else the text to show."""
    all_runs = cells.get(k, {}).get(name, [])
    if not all_runs:
        return "not run"
    good = ok_runs(k, name)
    if not good:
        return "fail"
    return None

def mark(k, name):
    all_runs = cells.get(k, {}).get(name, [])
    good = ok_runs(k, name)
    m = ""
    if len(good) < len(all_runs):
        m += "†"
        notes.add("† some rounds of this run failed (non-zero exit): the figure is the median of "
                  "the rounds that ran.")
    if any(r.get("empty") for r in good) and k[1] != "exclusive":
        m += "‡"
        notes.add("‡ some dequeues found the queue empty (the prefill ran out, or the dequeuers "
                  "outran the enqueuers); the rate counts completed messages only.")
    return m

out = []
w = out.append
w("## Side by side: Sundial, Redis and beanstalkd (bench/compare.sh)")
w("")
w("Written by `bench/compare.sh`; rerun it rather than editing this section by hand. "
  "Same machine, same run, servers on loopback, each with its own data directory.")
w("")
if meta:
    w("### Machine and versions")
    w("")
    w("| | |")
    w("| --- | --- |")
    w(f"| date | {meta.get('date_utc', '?')} (load average at start: {meta.get('loadavg', '?')}) |")
    w(f"| CPU | `nproc` = {meta.get('nproc', '?')}, {meta.get('cpu', '?')} |")
    w(f"| kernel, RAM | {meta.get('kernel', '?')}, {meta.get('ram', '?')} |")
    commit = meta.get("sundial_commit", "?")
    dirty = " (plus uncommitted changes in the working tree)" if meta.get("sundial_dirty") else ""
    w(f"| Sundial | commit `{commit}`{dirty}, release build |")
    w(f"| Redis | {meta.get('redis_version', '?')} |")
    w(f"| beanstalkd | {meta.get('beanstalkd_version', '?')} |")
    elapsed = end.get("elapsed_s")
    if elapsed is not None:
        w(f"| wall time | {int(elapsed) // 60} min {int(elapsed) % 60} s |")
    w("")
    pre = meta.get("prefill", {})
    rounds = meta.get("rounds", "?")
    w(f"Method: {rounds} round{'' if rounds == 1 else 's'}; in each round every case runs against Sundial, "
      "Redis and beanstalkd in turn (A B C), "
      f"{meta.get('duration_s', '?')} s each, one request per round trip (`--pipeline 1`), "
      f"{meta.get('payload_bytes', '?')}-byte payloads, a fresh queue (Redis key, beanstalkd tube) "
      "per run. Every figure is the median over the rounds; a ratio is the median of the "
      "per-round ratios. Throughput counts messages: with `--batch 100` one request carries 100 "
      "(one multi-member `ZADD` for Redis, 100 pipelined `put`s for beanstalkd). Dequeue-type "
      "workloads start on a queue prefilled, untimed, with "
      f"{pre.get('sundial', '?'):,} messages (Sundial), {pre.get('redis', '?'):,} (Redis), "
      f"{pre.get('beanstalk_durable', '?'):,} (beanstalkd durable: it fsyncs every put) and "
      f"{pre.get('beanstalk_relaxed', '?'):,} (beanstalkd relaxed). The latencies are "
      "sundial-bench's percentiles (`p50_us`, `p99_us`, `p999_us`).")
    w("")
    if meta.get("subset"):
        w(f"**A subset of the cases** ({meta['subset']}): targets without data are left out.")
        w("")

MODES = (("durable", "durable: Sundial `--fsync=always`, Redis `appendfsync always`, beanstalkd `-f 0`"),
         ("relaxed", "relaxed: Sundial `--fsync=interval:1000`, Redis `appendfsync everysec`, beanstalkd `-f 50`"))

if servers:
    w("### Commands")
    w("")
    w("```sh")
    for mode, _ in MODES:
        s = servers.get(mode)
        if not s:
            continue
        w(f"# {mode}")
        for name in PEERS:
            w(s[name])
    w("```")
    w("")
    sample = next((r["argv"] for r in runs if r["name"] == "sundial"
                   and r["case_workload"] == "dequeue-complete"), None)
    if sample:
        w(f"A run, for example: `{sample}` (the other targets: `--target redis://…` / "
          "`--target beanstalk://…`).")
        w("")

# ---- Targets
def target_row(text, value_text, ok):
    verdict = "–" if ok is None else ("met" if ok else "**NOT met**")
    w(f"| {text} | {value_text} | {verdict} |")

targets = []
def ratio_target(mode, workload, conns, need):
    k = (mode, workload, 1, conns)
    r = ratio(k, "sundial", "redis")
    s, p = median_of(k, "sundial", "ops_per_sec"), median_of(k, "redis", "ops_per_sec")
    text = f"{mode} {workload}, c={conns}: Sundial ≥ {need:g}× Redis"
    val = "no data" if r is None else f"{fmt_ratio(r)} ({fmt_rate(s)} vs {fmt_rate(p)} ops/s)"
    targets.append((text, val, None if r is None else r >= need))

ratio_target("durable", "enqueue", 64, 2)
ratio_target("durable", "dequeue-complete", 64, 2)
k1 = ("durable", "enqueue", 1, 1)
s50, b50 = median_of(k1, "sundial", "p50_us"), median_of(k1, "beanstalk", "p50_us")
targets.append(("durable enqueue, c=1: Sundial p50 ≤ beanstalkd -f 0's p50",
                "no data" if None in (s50, b50) else f"{fmt_us(s50)} vs {fmt_us(b50)}",
                None if None in (s50, b50) else s50 <= b50))
def beanstalk_target(workload, need):
    k1 = ("durable", workload, 1, 1)
    r = ratio(k1, "sundial", "beanstalk")
    targets.append((f"durable {workload}, c=1: Sundial ≥ {need:g}× beanstalkd -f 0",
                    "no data" if r is None else
                    f"{fmt_ratio(r)} ({fmt_rate(median_of(k1, 'sundial', 'ops_per_sec'))} vs "
                    f"{fmt_rate(median_of(k1, 'beanstalk', 'ops_per_sec'))} ops/s)",
                    None if r is None else r >= need))

beanstalk_target("dequeue-complete", 1)
beanstalk_target("worker", 1.2)
ratio_target("durable", "worker", 64, 2)
ratio_target("relaxed", "enqueue", 64, 1.2)
ratio_target("relaxed", "dequeue-complete", 64, 1.2)
def cpu_target(mode, conns, need, prefix=""):
    k = (mode, "enqueue", 1, conns)
    cs, cr = median_of(k, "sundial", "server_cpu_us_per_op"), median_of(k, "redis", "server_cpu_us_per_op")
    targets.append((f"{prefix}{mode} enqueue, c={conns}: sundiald's CPU per request ≤ {need:g}× redis-server's",
                    "no data" if not cs or not cr else f"{cs / cr:.2f}× ({cs:.1f} vs {cr:.1f} µs)",
                    None if not cs or not cr else cs <= need * cr))
cpu_target("durable", 64, 0.5)
v = median_of(("durable", "enqueue", 1, 16), "sundial", "p99_us")
targets.append(("durable enqueue, c=16: Sundial p99 ≤ 2 ms",
                "no data" if v is None else fmt_us(v), None if v is None else v <= 2000))
k16 = ("durable", "dequeue-complete", 1, 16)
sv, rv = median_of(k16, "sundial", "p99_us"), median_of(k16, "redis", "p99_us")
targets.append(("durable dequeue-complete, c=16: Sundial p99 ≤ Redis's p99",
                "no data" if None in (sv, rv) else f"{fmt_us(sv)} vs {fmt_us(rv)}",
                None if None in (sv, rv) else sv <= rv))
def best_batch(value):
    """(the largest value(key) over batch-100 durable enqueue at c=16 and 64, its c), or None."""
    found = None
    for c in (16, 64):
        v = value(("durable", "enqueue", 100, c))
        if v is not None and (found is None or v > found[0]):
            found = (v, c)
    return found

best = best_batch(lambda k: ratio(k, "sundial", "redis"))
def batch_ratio_target(need, prefix=""):
    targets.append((f"{prefix}durable enqueue, batch 100: Sundial ≥ {need:g}× Redis's multi-member ZADD (best of c=16, 64)",
                    "no data" if best is None else f"{fmt_ratio(best[0])} (c={best[1]})",
                    None if best is None else best[0] >= need))
batch_ratio_target(2)

# Issue 25's (the worker loop, batches, the relaxed path): each judged by the same-run
# medians and per-round ratios as the rows above.
best_rate = best_batch(lambda k: median_of(k, "sundial", "ops_per_sec"))
targets.append(("issue 25: durable enqueue, batch 100: Sundial ≥ 1,500,000 msg/s (best of c=16, 64)",
                "no data" if best_rate is None else f"{fmt_rate(best_rate[0])} msg/s (c={best_rate[1]})",
                None if best_rate is None else best_rate[0] >= 1_500_000))
batch_ratio_target(3, "issue 25: ")
cpu_target("relaxed", 1, 1.0, "issue 25: ")
cpu_target("durable", 64, 0.75, "issue 25: ")
for c in (16, 64):
    k = ("relaxed", "enqueue", 1, c)
    r = ratio(k, "sundial", "redis")
    sp, rp = median_of(k, "sundial", "p99_us"), median_of(k, "redis", "p99_us")
    ok = None if None in (r, sp, rp) else (r >= 1.2 and sp <= 1.5 * rp)
    targets.append((f"issue 25: relaxed enqueue, c={c}: Sundial ≥ 1.2× Redis, p99 ≤ 1.5× Redis's",
                    "no data" if ok is None else f"{fmt_ratio(r)}, p99 {fmt_us(sp)} vs {fmt_us(rp)} ({sp / rp:.2f}×)",
                    ok))

w("### Targets")
w("")
w("| target | measured | |")
w("| --- | --- | --- |")
for t in targets:
    if meta.get("subset") and t[2] is None:
        continue
    target_row(*t)
w("")

# ---- Tables
WORKLOADS = (("enqueue", 1, "enqueue"),
             ("dequeue-complete", 1, "dequeue + complete (a worker's loop: dequeue one, complete it)"),
             ("worker", 1, "worker (dequeue once, then complete-and-next: Redis one script call "
              "that ZREMs and leases, beanstalkd delete then reserve pipelined)"),
             ("mixed", 1, "mixed"),
             ("filter", 1, "filter (dequeue with a metadata filter)"),
             ("exclusive", 1, "exclusive queue (Sundial only: the peers have none)"),
             ("enqueue", 100, "enqueue, 100 messages per request"))

for mode, mode_title in MODES:
    mode_keys = [k for k in cells if k[0] == mode]
    if not mode_keys:
        continue
    w(f"### {mode_title}")
    w("")
    for workload, batch, title in WORKLOADS:
        conns = sorted({k[3] for k in mode_keys if k[1] == workload and k[2] == batch})
        if not conns:
            continue
        names = [n for n in PEERS if any(n in cells[(mode, workload, batch, c)] for c in conns)]
        unit = "messages/s" if batch > 1 else "ops/s"
        w(f"#### {mode}: {title}")
        w("")
        head = ["connections"]
        for n in names:
            head += [f"{NAMES[n]} {unit}", f"{NAMES[n]} p50 / p99 / p99.9", f"{NAMES[n]} CPU/op"]
        peers = [n for n in names if n != "sundial"] if "sundial" in names else []
        head += [f"Sundial / {NAMES[n]}" for n in peers]
        w("| " + " | ".join(head) + " |")
        w("| " + " | ".join(["---:"] * len(head)) + " |")
        for c in conns:
            k = (mode, workload, batch, c)
            row = [str(c)]
            for n in names:
                st = status(k, n)
                if st:
                    row += [st, st, st]
                    continue
                row.append(fmt_rate(median_of(k, n, "ops_per_sec")) + mark(k, n))
                row.append(" / ".join(fmt_us(median_of(k, n, f)) for f in ("p50_us", "p99_us", "p999_us")))
                cpu = median_of(k, n, "server_cpu_us_per_op")
                row.append("–" if cpu is None or cpu < 0 else f"{cpu:.1f} µs")
            for n in peers:
                row.append(fmt_ratio(ratio(k, "sundial", n)))
            w("| " + " | ".join(row) + " |")
        w("")

mismatched = [r for r in runs if r.get("count_mismatch")]
if mismatched:
    w(f"**{len(mismatched)} Sundial runs did not count honestly**: the messages the bench saw "
      "acknowledged differ from what sundiald counted: " + "; ".join(
          f"{r['mode']} round {r['round']} {r['case_workload']} c={r['case_connections']}: bench "
          f"{r.get('acked')}, server {r.get('server_counted')}" for r in mismatched[:6]) + ".")
    w("")
checked = [r for r in runs if "server_counted" in r]
if checked and not mismatched:
    w(f"Counting checked: in each of the {len(checked)} Sundial runs, the messages the bench saw "
      "acknowledged (enqueued, leased, completed, over all its phases) equal what sundiald "
      "counted (`sundial_messages_total` before and after the run). CPU/op is the server "
      "process's utime+stime over the measured run divided by its operations (a request; for "
      "dequeue-complete, a dequeue and its complete; for worker, a complete-and-next).")
    w("")
failed = [r for r in runs if r["failed"]]
if failed:
    w(f"{len(failed)} of {len(runs)} runs failed: " + "; ".join(
        f"{r['mode']} round {r['round']} {r['case_workload']} c={r['case_connections']}"
        + (f" batch {r['case_batch']}" if r["case_batch"] > 1 else "")
        + f" {NAMES.get(r['name'], r['name'])} (exit {r['rc']}"
        + (f": {r['first_error']}" if r.get("first_error") else "") + ")" for r in failed[:12])
      + ("; …" if len(failed) > 12 else "") + ".")
    w("")
for n in sorted(notes):
    w(n)
    w("")
if out[-1] == "":
    out.pop()
print("\n".join(out))
PY
}

# ---------------------------------------------------------------------------------------------

START=$SECONDS
if [[ -z $FROM_RESULTS ]] && ! for m in $(modes); do cases_for_mode "$m"; done | grep -q .; then
  die "no case matches --modes '$ONLY_MODES' --workloads '$ONLY_WORKLOADS' --connections '$ONLY_CONNECTIONS'"
fi
start_run redis-server:redis-server beanstalkd:beanstalkd

read -r ESTIMATE TOTAL_RUNS <<<"$(estimate_seconds)"
LOAD1=$(cut -d' ' -f1 /proc/loadavg)
if awk -v l="$LOAD1" 'BEGIN { exit !(l >= 0.5) }'; then
  log "warning: load average $LOAD1 before the start: other work on this machine skews the figures"
fi
log "$TOTAL_RUNS runs ($ROUNDS rounds, ${DURATION} s each); estimated wall time about" \
  "$(min_s "$ESTIMATE"); work dir $WORK"
collect_meta

for mode in $(modes); do
  log "mode $mode: starting servers"
  start_sundial "$mode"
  start_redis "$mode"
  start_beanstalkd "$mode"
  record_servers "$mode"
  for ((round = 1; round <= ROUNDS; round++)); do
    while read -r workload conns batch targets; do
      IFS=, read -ra names <<<"$targets"
      for name in "${names[@]}"; do
        run_one "$mode" "$round" "$name" "$workload" "$conns" "$batch"
      done
    done < <(cases_for_mode "$mode")
  done
  stop_all_servers
  log "mode $mode done at $(min_s $((SECONDS - START)))"
done

ELAPSED=$((SECONDS - START))
printf '{"kind": "end", "elapsed_s": %d, "runs": %d, "failed": %d}\n' \
  "$ELAPSED" "$RUN_COUNT" "$FAIL_COUNT" >>"$RESULTS"
finish_run
((FAIL_COUNT == 0)) || log "$FAIL_COUNT of $RUN_COUNT runs failed (see the report)"
log "elapsed: $(min_s "$ELAPSED") (estimated $(min_s "$ESTIMATE"))"
if ((MISMATCH_COUNT > 0)); then
  log "*** $MISMATCH_COUNT Sundial runs counted messages the server did not (or missed some): see the report"
  exit 1
fi
