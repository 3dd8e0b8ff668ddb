#!/usr/bin/env bash
# Sundial side by side with Redis and beanstalkd, on this machine, in one run (issue 5).
#
#   bash bench/compare.sh [--quick] [--keep-results FILE] [--output FILE]
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
# --quick: 1 round of 1 s per run (about a third of the time; for trying the script, not for the
# record). DURATION, ROUNDS and the PREFILL_* variables below can be set in the environment.
# Needs python3 (standard library only) for the report; installs redis-server and beanstalkd
# from Debian when missing; runs `make build` when the binaries are missing.
set -euo pipefail

DURATION=${DURATION:-2}                  # seconds per run
ROUNDS=${ROUNDS:-3}
PAYLOAD_BYTES=${PAYLOAD_BYTES:-100}
# Messages enqueued (untimed) before a dequeue-type run, sized so that no target runs dry within
# DURATION: Sundial's durable dequeue+complete may pass 100K/s; beanstalkd -f 0 fsyncs every put
# (about 6K puts/s), so its durable prefill is small or the prefill alone would take minutes.
PREFILL_SUNDIAL=${PREFILL_SUNDIAL:-100000}
PREFILL_REDIS=${PREFILL_REDIS:-100000}
PREFILL_BEANSTALK_DURABLE=${PREFILL_BEANSTALK_DURABLE:-8000}
PREFILL_BEANSTALK_RELAXED=${PREFILL_BEANSTALK_RELAXED:-80000}
RUN_SLACK_S=${RUN_SLACK_S:-180}          # a run is killed after DURATION + this (prefill included)
READY_TIMEOUT_S=10                       # a server must accept connections within this
STOP_TIMEOUT_S=10                        # SIGTERM, then SIGKILL after this

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH=${SUNDIAL_BENCH:-$ROOT/build/release/bench/sundial-bench}  # other builds: set these two
SUNDIALD=${SUNDIALD:-$ROOT/build/release/server/sundiald}
OUTPUT=$ROOT/docs/BENCHMARKS.md
KEEP_RESULTS=
FROM_RESULTS=

usage() {
  sed -n '2,6p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

while (($#)); do
  case $1 in
    --quick) ROUNDS=1 DURATION=1 ;;
    --keep-results) (($# >= 2)) || usage; KEEP_RESULTS=$2; shift ;;
    --from-results) (($# >= 2)) || usage; FROM_RESULTS=$2; shift ;;
    --output) (($# >= 2)) || usage; OUTPUT=$2; shift ;;
    -h | --help) usage ;;
    *) echo "compare.sh: unknown argument: $1" >&2; usage ;;
  esac
  shift
done

# File arguments are relative to where the script was started; then work from the repository.
absolute() { if [[ -z $1 || $1 == /* ]]; then printf '%s' "$1"; else printf '%s' "$PWD/$1"; fi; }
OUTPUT=$(absolute "$OUTPUT") KEEP_RESULTS=$(absolute "$KEEP_RESULTS") FROM_RESULTS=$(absolute "$FROM_RESULTS")
BENCH=$(absolute "$BENCH") SUNDIALD=$(absolute "$SUNDIALD")
cd "$ROOT"

# The system python3 first: a version manager's shim (pyenv) costs ~0.3 s a call, once per run.
find_python() {
  if [[ -x /usr/bin/python3 ]]; then PYTHON=/usr/bin/python3; else PYTHON=$(command -v python3 || true); fi
}
PYTHON=
find_python

log() { printf '%s\n' "compare.sh: $*" >&2; }
die() { log "$*"; exit 1; }

# ---------------------------------------------------------------------------------------------
# Prerequisites

as_root() {
  if ((EUID == 0)); then "$@"; else sudo "$@"; fi
}

install_missing_packages() {
  local -a missing=()
  [[ -n $PYTHON ]] || missing+=(python3)
  if [[ -z $FROM_RESULTS ]]; then
    command -v redis-server >/dev/null || missing+=(redis-server)
    command -v beanstalkd >/dev/null || missing+=(beanstalkd)
  fi
  ((${#missing[@]} == 0)) && return 0
  log "installing from Debian: ${missing[*]}"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
  find_python
  # The redis-server package may start a system service on 6379: it is left alone, never used.
}

ensure_binaries() {
  if [[ ! -x $BENCH || ! -x $SUNDIALD ]]; then
    log "building (make build): $BENCH or $SUNDIALD is missing"
    make -C "$ROOT" build
  fi
  [[ -x $BENCH ]] || die "no $BENCH after make build"
  [[ -x $SUNDIALD ]] || die "no $SUNDIALD after make build"
}

# ---------------------------------------------------------------------------------------------
# Servers: started here, tracked by PID, stopped by PID.

WORK=
declare -a SERVER_PIDS=()

# Prints N distinct loopback ports that are free right now.
free_ports() {
  local n=$1
  if [[ -n $PYTHON ]]; then
    "$PYTHON" - "$n" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
    return
  fi
  # Fallback: scan below the kernel's ephemeral range for ports nobody answers on.
  local -a found=()
  local port=$((20000 + RANDOM % 10000)) tries=0
  while ((${#found[@]} < n && tries < 2000)); do
    port=$((port + 1)) tries=$((tries + 1))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then found+=("$port"); fi
  done
  ((${#found[@]} == n)) || die "cannot find $n free ports"
  echo "${found[*]}"
}

alive() {  # running and not a zombie
  local pid=$1 state
  [[ -r /proc/$pid/stat ]] || return 1
  state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || return 1
  [[ -n $state && $state != Z && $state != X ]]
}

port_open() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# wait_ready NAME PID PORT LOG: until PORT accepts a connection, bounded by READY_TIMEOUT_S.
wait_ready() {
  local name=$1 pid=$2 port=$3 logfile=$4 i
  for ((i = 0; i < READY_TIMEOUT_S * 20; i++)); do
    if ! alive "$pid"; then
      log "$name (pid $pid) exited during startup; last lines of $logfile:"
      tail -n 20 "$logfile" >&2 || true
      exit 1
    fi
    port_open "$port" && return 0
    sleep 0.05
  done
  log "$name (pid $pid) does not accept connections on 127.0.0.1:$port after ${READY_TIMEOUT_S} s;" \
    "last lines of $logfile:"
  tail -n 20 "$logfile" >&2 || true
  exit 1
}

stop_pid() {
  local pid=$1 i
  alive "$pid" || { wait "$pid" 2>/dev/null || true; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < STOP_TIMEOUT_S * 20; i++)); do
    alive "$pid" || break
    sleep 0.05
  done
  if alive "$pid"; then
    log "pid $pid still running ${STOP_TIMEOUT_S} s after SIGTERM: SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
}

stop_all_servers() {
  local pid
  for pid in "${SERVER_PIDS[@]}"; do stop_pid "$pid"; done
  SERVER_PIDS=()
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  stop_all_servers
  [[ -n $WORK && -d $WORK ]] && rm -rf "$WORK"
  exit "$rc"
}

# Shell-quoted command line, for the report (paths inside the repository made relative).
quote_command() {
  local out
  printf -v out '%q ' "$@"
  out=${out% }
  printf '%s' "${out//"$ROOT/"/}"
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
  "${cmd[@]}" >"$SUNDIAL_LOG" 2>&1 &
  SUNDIAL_PID=$!
  SERVER_PIDS+=("$SUNDIAL_PID")
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
  "${cmd[@]}" >"$dir/stdout.log" 2>&1 &
  REDIS_PID=$!
  SERVER_PIDS+=("$REDIS_PID")
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
  "${cmd[@]}" >"$BEANSTALK_LOG" 2>&1 &
  BEANSTALK_PID=$!
  SERVER_PIDS+=("$BEANSTALK_PID")
  wait_ready beanstalkd "$BEANSTALK_PID" "$BEANSTALK_PORT" "$BEANSTALK_LOG"
}

# ---------------------------------------------------------------------------------------------
# Runs

RESULTS=
declare -A DEAD_REPORTED=()
RUN_COUNT=0
FAIL_COUNT=0

# Appends one JSON object to RESULTS (the bench's --json line augmented with the case), and
# prints a one-line summary. Args: mode round name workload connections batch rc argv stdout-file.
record_run() {
  "$PYTHON" - "$@" >>"$RESULTS" <<'PY'
import json, sys
mode, rnd, name, workload, conns, batch, rc, argv, out_file = sys.argv[1:10]
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
print(json.dumps(obj, sort_keys=True))
tag = f"[{mode} round {rnd}] {workload} c={conns}" + (f" batch={batch}" if int(batch) > 1 else "")
if failed:
    msg = f"FAILED (exit {rc})"
else:
    msg = f"{obj['ops_per_sec']:,.0f} ops/s, p50 {obj.get('p50_us', 0):,.0f} us, p99 {obj.get('p99_us', 0):,.0f} us"
    if obj.get("empty"):
        msg += f", {obj['empty']} empty dequeues"
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
    --pipeline 1 --batch "$batch" --payload-bytes "$PAYLOAD_BYTES" --duration "$DURATION" --json)
  ((prefill > 0)) && cmd+=(--prefill "$prefill")
  local argv out="$WORK/bench.out" rc=0 limit
  argv=$(quote_command "${cmd[@]}")
  : >"$out"
  if alive "$pid"; then
    limit=$(awk -v d="$DURATION" -v s="$RUN_SLACK_S" 'BEGIN { print d + s }')
    {
      printf '\n### %s round %s: %s\n' "$mode" "$rnd" "$argv"
      timeout --kill-after=5 "$limit" "${cmd[@]}" >"$out" 2>&1 || rc=$?
      cat "$out"
    } >>"$WORK/bench.log"
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
  record_run "$mode" "$rnd" "$name" "$workload" "$conns" "$batch" "$rc" "$argv" "$out"
}

# The cases of a mode, one per line: WORKLOAD CONNECTIONS BATCH TARGETS (comma-separated).
cases_for_mode() {
  local c
  for c in 1 16 64; do echo "enqueue $c 1 sundial,redis,beanstalk"; done
  for c in 1 16 64; do echo "dequeue-complete $c 1 sundial,redis,beanstalk"; done
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
  for mode in durable relaxed; do
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

collect_meta() {
  local commit dirty=false
  commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
  git -C "$ROOT" diff --quiet HEAD -- 2>/dev/null || dirty=true
  "$PYTHON" - >>"$RESULTS" \
    "date_utc=$(date -u '+%Y-%m-%d %H:%M UTC')" \
    "nproc=$(nproc)" \
    "cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)" \
    "kernel=$(uname -r)" \
    "ram=$(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)" \
    "loadavg=$(cut -d' ' -f1-3 /proc/loadavg)" \
    "redis_version=$(redis-server --version 2>&1 | head -n 1)" \
    "beanstalkd_version=$(beanstalkd -v 2>&1 | head -n 1)" \
    "sundial_commit=$commit" "sundial_dirty=$dirty" \
    "rounds=$ROUNDS" "duration_s=$DURATION" "payload_bytes=$PAYLOAD_BYTES" \
    "prefill_sundial=$PREFILL_SUNDIAL" "prefill_redis=$PREFILL_REDIS" \
    "prefill_beanstalk_durable=$PREFILL_BEANSTALK_DURABLE" \
    "prefill_beanstalk_relaxed=$PREFILL_BEANSTALK_RELAXED" <<'PY'
import json, sys
meta = {"kind": "meta", "prefill": {}}
for arg in sys.argv[1:]:
    k, _, v = arg.partition("=")
    if k.startswith("prefill_"):
        meta["prefill"][k[len("prefill_"):]] = int(v)
    elif k == "sundial_dirty":
        meta[k] = v == "true"
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
# Report: markdown from the JSON lines, spliced between the markers of the output file.

write_report() {
  local results=$1 output=$2
  "$PYTHON" - "$results" "$output" <<'PY'
import json, os, statistics, sys, tempfile

results_path, output_path = sys.argv[1:3]
BEGIN, END = "<!-- compare.sh:begin -->", "<!-- compare.sh:end -->"
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
w(BEGIN)
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
for workload in ("enqueue", "dequeue-complete"):
    v = median_of(("durable", workload, 1, 16), "sundial", "p99_us")
    targets.append((f"durable {workload}, c=16: Sundial p99 ≤ 2 ms",
                    "no data" if v is None else fmt_us(v), None if v is None else v <= 2000))
ratio_target("relaxed", "enqueue", 64, 1.2)
ratio_target("relaxed", "dequeue-complete", 64, 1.2)
best = None
for c in (16, 64):
    v = median_of(("durable", "enqueue", 100, c), "sundial", "ops_per_sec")
    if v is not None and (best is None or v > best[0]):
        best = (v, c)
targets.append(("durable enqueue, batch 100: Sundial ≥ 500,000 messages/s (best of c=16, 64)",
                "no data" if best is None else f"{fmt_rate(best[0])} messages/s (c={best[1]})",
                None if best is None else best[0] >= 500000))

w("### Targets")
w("")
w("| target | measured | |")
w("| --- | --- | --- |")
for t in targets:
    target_row(*t)
w("")

# ---- Tables
WORKLOADS = (("enqueue", 1, "enqueue"),
             ("dequeue-complete", 1, "dequeue + complete (a worker's loop: dequeue one, complete it)"),
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
            head += [f"{NAMES[n]} {unit}", f"{NAMES[n]} p50 / p99 / p99.9"]
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
                    row += [st, st]
                    continue
                row.append(fmt_rate(median_of(k, n, "ops_per_sec")) + mark(k, n))
                row.append(" / ".join(fmt_us(median_of(k, n, f)) for f in ("p50_us", "p99_us", "p999_us")))
            for n in peers:
                row.append(fmt_ratio(ratio(k, "sundial", n)))
            w("| " + " | ".join(row) + " |")
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
w(END)
section = "\n".join(out) + "\n"

try:
    with open(output_path, encoding="utf-8") as f:
        doc = f.read()
except FileNotFoundError:
    doc = ""
lines = doc.splitlines(keepends=True)
begin = next((i for i, l in enumerate(lines) if l.strip() == BEGIN), None)
stop = None
if begin is not None:
    stop = next((i for i in range(begin + 1, len(lines)) if lines[i].strip() == END), None)
if begin is not None and stop is not None:
    new = "".join(lines[:begin]) + section + "".join(lines[stop + 1:])
else:
    if begin is not None:
        print(f"compare.sh: {output_path}: {BEGIN} without {END}; appending a new section",
              file=sys.stderr)
    sep = "" if not doc else ("\n" if doc.endswith("\n") else "\n\n")
    new = doc + sep + section
directory = os.path.dirname(os.path.abspath(output_path))
fd, tmp = tempfile.mkstemp(dir=directory, prefix=".compare.")
with os.fdopen(fd, "w", encoding="utf-8") as f:
    f.write(new)
if os.path.exists(output_path):
    os.chmod(tmp, os.stat(output_path).st_mode & 0o7777)
else:
    os.chmod(tmp, 0o644)
os.replace(tmp, output_path)
print(f"compare.sh: wrote {output_path}", file=sys.stderr)
PY
}

# ---------------------------------------------------------------------------------------------

if [[ -n $FROM_RESULTS ]]; then
  install_missing_packages
  [[ -r $FROM_RESULTS ]] || die "cannot read $FROM_RESULTS"
  write_report "$FROM_RESULTS" "$OUTPUT"
  exit 0
fi

START=$SECONDS
install_missing_packages
ensure_binaries
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sundial-compare.XXXXXX")
RESULTS=$WORK/results.jsonl
: >"$RESULTS"

read -r ESTIMATE TOTAL_RUNS <<<"$(estimate_seconds)"
LOAD1=$(cut -d' ' -f1 /proc/loadavg)
if awk -v l="$LOAD1" 'BEGIN { exit !(l >= 0.5) }'; then
  log "warning: load average $LOAD1 before the start: other work on this machine skews the figures"
fi
log "$TOTAL_RUNS runs ($ROUNDS rounds, ${DURATION} s each); estimated wall time about" \
  "$((ESTIMATE / 60)) min $((ESTIMATE % 60)) s; work dir $WORK"
collect_meta

for mode in durable relaxed; do
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
  log "mode $mode done at $(((SECONDS - START) / 60)) min $(((SECONDS - START) % 60)) s"
done

ELAPSED=$((SECONDS - START))
printf '{"kind": "end", "elapsed_s": %d, "runs": %d, "failed": %d}\n' \
  "$ELAPSED" "$RUN_COUNT" "$FAIL_COUNT" >>"$RESULTS"
if [[ -n $KEEP_RESULTS ]]; then
  cp "$RESULTS" "$KEEP_RESULTS"
  log "results (JSON lines) kept in $KEEP_RESULTS"
fi
write_report "$RESULTS" "$OUTPUT"
((FAIL_COUNT == 0)) || log "$FAIL_COUNT of $RUN_COUNT runs failed (see the report)"
log "elapsed: $((ELAPSED / 60)) min $((ELAPSED % 60)) s (estimated $((ESTIMATE / 60)) min $((ESTIMATE % 60)) s)"
