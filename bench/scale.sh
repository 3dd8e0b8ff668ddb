#!/usr/bin/env bash
# Sundial and Redis holding N pending 100-byte messages: memory, restart time, dequeue latency
# (issue 5, "scale figures").
#
#   bash bench/scale.sh [--messages N] [--keep-results FILE] [--output FILE]
#   bash bench/scale.sh --from-results FILE [--output FILE]     (rewrite the report only)
#
# N defaults to 10,000,000 (try 200000 first). Steps:
#  1. Starts Sundial (--fsync=interval:1000) and Redis (appendonly yes, appendfsync everysec) on
#     127.0.0.1, on free ports, each with its own data dir under one temp dir (TMPDIR decides
#     where: at 10M, about 2 GB of disk per server), and notes the RSS of each empty server.
#  2. Loads N messages into each: sundial-bench --workload enqueue --batch 100 --connections 8
#     --messages N, then checks that N messages are pending.
#  3. Reports RSS (VmRSS), Redis `INFO memory` used_memory, Sundial's sundial_memory_bytes, and
#     bytes per message ((RSS - RSS when empty) / N).
#  4. Restarts each (SIGTERM, wait for the exit, start again on the same data dir) and times how
#     long until it answers: Sundial GET /readyz = 200, Redis PING = PONG (not LOADING). Then
#     deletes Sundial's queue and notes its RSS (memory must go back: within 20% of the empty
#     server's).
#  5. A second Sundial with SMALL_RESTART (1,000,000) messages: load, restart (timed), then drain
#     the queue with dequeue-complete (retention 0) and note the RSS again.
#  6. Starts a fresh Sundial with --fsync=always (as compare.sh's durable mode) and runs
#     dequeue-complete at one connection for 3 s on a queue prefilled with 10,000 messages, then
#     with N, and compares p50 and p99 (target: p50 at N within 1.5x of p50 at 10,000).
# The report replaces the part of docs/BENCHMARKS.md between "<!-- scale.sh:begin -->" and
# "<!-- scale.sh:end -->" (appended at the end when absent).
set -euo pipefail

SCRIPT_NAME=scale.sh
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MESSAGES=10000000
SMALL_PREFILL=10000                      # the reference queue size of the latency comparison
SMALL_RESTART=1000000                    # the second restart measured (target: ready in 1 s)
QUEUE=scale                              # Sundial's queue (deleted in step 4)
LATENCY_DURATION=3                       # seconds per dequeue-latency run
PAYLOAD_BYTES=100
LOAD_CONNECTIONS=8
LOAD_BATCH=100
READY_TIMEOUT_S=10                       # a fresh (empty) server must accept connections by then
RESTART_TIMEOUT_S=900                    # a restart with N messages must answer by then
STOP_TIMEOUT_S=120                       # SIGTERM, then SIGKILL after this

while (($#)); do
  case $1 in
    --messages) (($# >= 2)) || usage; MESSAGES=${2//[,_]/}; shift ;;
    --keep-results) (($# >= 2)) || usage; KEEP_RESULTS=$2; shift ;;
    --from-results) (($# >= 2)) || usage; FROM_RESULTS=$2; shift ;;
    --output) (($# >= 2)) || usage; OUTPUT=$2; shift ;;
    -h | --help) usage ;;
    *) log "unknown argument: $1"; usage ;;
  esac
  shift
done
if ! [[ $MESSAGES =~ ^[0-9]+$ ]] || ((MESSAGES < LOAD_BATCH)); then
  log "--messages wants a whole number ≥ $LOAD_BATCH"
  exit 2
fi
enter_repository

# ---------------------------------------------------------------------------------------------
# Servers (see lib.sh for the start, the bookkeeping by PID and the stop)

now() { printf '%s' "$EPOCHREALTIME"; }
seconds_since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }'; }

rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }

http_get() {  # URL: the body on stdout; fails unless the status is 2xx
  if command -v curl >/dev/null; then
    curl -sf --max-time 5 "$1"
  else
    "$PYTHON" -c 'import sys, urllib.request
sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' "$1" 2>/dev/null
  fi
}

sundial_ready() {
  if command -v curl >/dev/null || [[ -n $PYTHON ]]; then
    http_get "http://127.0.0.1:$SUNDIAL_HTTP_PORT/readyz" >/dev/null
  else
    port_open "$SUNDIAL_PORT"  # sundiald listens only once recovery is done
  fi
}

CLI=${SUNDIAL_CLI:-$ROOT/build/release/tools/sundial}
DRAIN=${SUNDIAL_DRAIN:-$ROOT/build/release/bench/sundial-drain}

# RSS (kB) once it has settled: the smallest reading, sampled every 0.5 s until none lower has
# come for 10 s (at most 180 s). Memory goes back asynchronously: a checkpoint started by the
# load or the drain holds a second copy of the state until it finishes (docs/wal-format.md).
settled_rss_kb() {
  local pid=$1 best='' r i since=0
  for ((i = 0; i < 360 && since < 20; i++)); do
    sleep 0.5
    r=$(rss_kb "$pid")
    if [[ -z $best ]] || ((r < best)); then
      best=$r
      since=0
    else
      since=$((since + 1))
    fi
  done
  printf '%s' "$best"
}

# Prints "PENDING_MESSAGES ENGINE_MEMORY_BYTES" from Sundial's /metrics (all queues summed).
sundial_counts() {
  http_get "http://127.0.0.1:$SUNDIAL_HTTP_PORT/metrics" |
    awk '/^sundial_messages\{/ && /state="pending"/ { n += $NF }
         /^sundial_memory_bytes / { m = $NF }
         END { printf "%d %d\n", n, m }'
}

redis_ready() { [[ $(redis-cli -p "$REDIS_PORT" ping 2>/dev/null) == PONG ]]; }

redis_info() {  # FIELD: from INFO
  redis-cli -p "$REDIS_PORT" info | tr -d '\r' | awk -F: -v f="$1" '$1 == f { print $2 }'
}

# Members of every sorted set (the queue is a sorted set; see bench/protocols.h).
redis_count() {
  redis-cli -p "$REDIS_PORT" eval "local n = 0
for _, k in ipairs(redis.call('KEYS', '*')) do
  if redis.call('TYPE', k).ok == 'zset' then n = n + redis.call('ZCARD', k) end
end
return n" 0
}

# start_sundial FSYNC DIR [reuse]: sets SUNDIAL_PID (and, unless reusing, the ports and _CMD).
start_sundial() {
  local fsync=$1 dir=$2
  if [[ ${3:-} != reuse ]]; then
    mkdir -p "$dir/data"
    read -r SUNDIAL_PORT SUNDIAL_HTTP_PORT <<<"$(free_ports 2)"
    SUNDIAL_ARGV=("$SUNDIALD" --data-dir "$dir/data" --port "$SUNDIAL_PORT"
      --http-port "$SUNDIAL_HTTP_PORT" "--fsync=$fsync")
    SUNDIAL_LOG=$dir/sundiald.log
  fi
  SUNDIAL_CMD=$(quote_command "${SUNDIAL_ARGV[@]}")
  spawn "$SUNDIAL_LOG" "${SUNDIAL_ARGV[@]}"
  SUNDIAL_PID=$!
}

start_redis() {
  local dir=$1
  if [[ ${2:-} != reuse ]]; then
    mkdir -p "$dir"
    REDIS_PORT=$(free_ports 1)
    REDIS_LOG=$dir/redis.log
    REDIS_ARGV=(redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$dir"
      --appendonly yes --appendfsync everysec --save '' --daemonize no --protected-mode no
      --logfile "$REDIS_LOG")
  fi
  REDIS_CMD=$(quote_command "${REDIS_ARGV[@]}")
  spawn "$dir/stdout.log" "${REDIS_ARGV[@]}"
  REDIS_PID=$!
}

# restart_timed PREFIX NAME DIR READY START...: stops the server in ${PREFIX}_PID, then starts it
# again on the same data (START..., which sets ${PREFIX}_PID anew) and waits until READY
# succeeds. Sets ${PREFIX}_STOP_S (SIGTERM to exit), ${PREFIX}_DISK (bytes under DIR while
# stopped), ${PREFIX}_READY_S (start to ready) and ${PREFIX}_RSS_RESTARTED (1 s after ready).
restart_timed() {
  local prefix=$1 name=$2 dir=$3 ready=$4 pid_var=$1_PID log_var=$1_LOG t0 stop_s disk ready_s rss
  shift 4
  t0=$(now)
  stop_pid "${!pid_var}"
  stop_s=$(seconds_since "$t0")
  disk=$(du -sb "$dir" | cut -f1)
  t0=$(now)
  "$@"
  wait_until "$name" "${!pid_var}" "${!log_var}" "$RESTART_TIMEOUT_S" "$ready"
  ready_s=$(seconds_since "$t0")
  sleep 1
  rss=$(rss_kb "${!pid_var}")
  printf -v "${prefix}_STOP_S" '%s' "$stop_s"
  printf -v "${prefix}_DISK" '%s' "$disk"
  printf -v "${prefix}_READY_S" '%s' "$ready_s"
  printf -v "${prefix}_RSS_RESTARTED" '%s' "$rss"
}

# ---------------------------------------------------------------------------------------------
# Results

record() {  # KIND key=value...: one JSON object (numbers where a value looks like one)
  "$PYTHON" - "$@" >>"$RESULTS" <<'PY'
import json, re, sys
obj = {"kind": sys.argv[1]}
for arg in sys.argv[2:]:
    k, _, v = arg.partition("=")
    if k.endswith("_json"):
        try:
            obj[k[:-5]] = json.loads(v)
        except ValueError:
            obj[k[:-5]] = None
    elif re.fullmatch(r"-?[0-9]+", v):
        obj[k] = int(v)
    elif re.fullmatch(r"-?[0-9]*\.[0-9]+", v):
        obj[k] = float(v)
    else:
        obj[k] = v
print(json.dumps(obj, sort_keys=True))
PY
}

last_json_line() {  # FILE: the last line that starts with "{"
  grep '^{' "$1" | tail -n 1 || true
}

# run_bench NAME TIMEOUT_S ARGS...: runs sundial-bench, output in $WORK/NAME.out; sets BENCH_RC,
# BENCH_JSON (its --json line) and BENCH_ARGV.
run_bench() {
  local name=$1 limit=$2
  shift 2
  local -a cmd=("$BENCH" "$@")
  BENCH_ARGV=$(quote_command "${cmd[@]}")
  log "running: $BENCH_ARGV"
  BENCH_RC=0
  timeout --kill-after=10 "$limit" "${cmd[@]}" >"$WORK/$name.out" 2>"$WORK/$name.err" || BENCH_RC=$?
  BENCH_JSON=$(last_json_line "$WORK/$name.out")
  if ((BENCH_RC != 0)); then
    log "$name: sundial-bench exited with $BENCH_RC; last lines of its stderr:"
    tail -n 10 "$WORK/$name.err" | sed 's/^/    /' >&2 || true
  fi
}

# ---------------------------------------------------------------------------------------------
# Report

report_body() {  # RESULTS: markdown (write_report, in lib.sh, puts it between the markers)
  "$PYTHON" - "$1" <<'PY'
import json, sys

results_path = sys.argv[1]

meta, servers, latency, end, second = {}, {}, {}, {}, {}
with open(results_path, encoding="utf-8") as f:
    for n, line in enumerate(f, 1):
        line = line.strip()
        if not line:
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            print(f"scale.sh: {results_path}:{n}: not JSON, skipped", file=sys.stderr)
            continue
        kind = obj.get("kind")
        if kind == "meta":
            meta = obj
        elif kind == "server":
            servers[obj["name"]] = obj
        elif kind == "latency":
            latency[obj["label"]] = obj
        elif kind == "end":
            end = obj
        elif kind == "small":
            second = obj

def num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)

def mib_bytes(b):
    if not num(b):
        return "–"
    m = b / 1048576
    return f"{m:,.0f} MiB" if m >= 10 else f"{m:.1f} MiB"

def mib(kb):
    return "–" if not num(kb) else mib_bytes(kb * 1024)

def secs(v):
    return "–" if not num(v) else f"{v:.1f} s"

def us(v):
    if not num(v):
        return "–"
    return f"{v:.0f} µs" if v < 1000 else f"{v / 1000:.2f} ms"

N = meta.get("messages")
out = []
w = out.append
w(f"## Scale: {N:,} pending messages (bench/scale.sh)" if num(N) else "## Scale (bench/scale.sh)")
w("")
w("Written by `bench/scale.sh`; rerun it rather than editing this section by hand.")
w("")
if meta:
    w("| | |")
    w("| --- | --- |")
    w(f"| date | {meta.get('date_utc', '?')} (load average at start: {meta.get('loadavg', '?')}) |")
    w(f"| CPU | `nproc` = {meta.get('nproc', '?')}, {meta.get('cpu', '?')} |")
    w(f"| kernel, RAM | {meta.get('kernel', '?')}, {meta.get('ram', '?')} |")
    dirty = " (plus uncommitted changes in the working tree)" if meta.get("sundial_dirty") else ""
    w(f"| Sundial | commit `{meta.get('sundial_commit', '?')}`{dirty}, release build |")
    w(f"| Redis | {meta.get('redis_version', '?')} |")
    if num(end.get("elapsed_s")):
        e = int(end["elapsed_s"])
        w(f"| wall time | {e // 60} min {e % 60} s |")
    w("")

w("### Memory and restart")
w("")
w(f"Each server holds the same {N:,} pending messages with "
  f"{meta.get('payload_bytes', '?')}-byte payloads, loaded by `sundial-bench --workload enqueue "
  f"--batch {meta.get('load_batch', '?')} --connections {meta.get('load_connections', '?')}`. "
  "RSS is the server process's `VmRSS`; bytes per message is (RSS − RSS of the same server "
  "when empty, just after start) / messages. Restart: SIGTERM, wait for the exit, start again "
  "on the same data directory; \"ready\" is the time from the new process's start until Sundial "
  "answers `GET /readyz` with 200 / Redis answers `PING` with `PONG` (not `LOADING`)."
  if num(N) else "")
w("")
w("| server | messages | RSS empty | RSS loaded | bytes / message | own accounting | load | "
  "on disk | stop | restart to ready | RSS after restart | messages after restart |")
w("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
LABEL = {"sundial": "Sundial (`--fsync=interval:1000`)",
         "redis": "Redis (`appendonly yes`, `appendfsync everysec`)"}
for name in ("sundial", "redis"):
    s = servers.get(name)
    if not s:
        w(f"| {LABEL[name]} | not run | | | | | | | | | | |")
        continue
    bpm = "–"
    if num(s.get("rss_kb")) and num(s.get("rss_empty_kb")) and s.get("count"):
        bpm = f"{(s['rss_kb'] - s['rss_empty_kb']) * 1024 / s['count']:,.0f}"
    own = (f"{mib_bytes(s.get('used_memory'))} `used_memory`" if name == "redis"
           else f"{mib_bytes(s.get('engine_memory'))} `sundial_memory_bytes`")
    load = "–"
    if num(s.get("load_s")):
        load = f"{s['load_s']:.1f} s"
        if num(s.get("count")) and s["load_s"] > 0:
            load += f" ({s['count'] / s['load_s']:,.0f}/s)"
    w(f"| {LABEL[name]} | {s.get('count', 0):,} | {mib(s.get('rss_empty_kb'))} | {mib(s.get('rss_kb'))} "
      f"| {bpm} | {own} | {load} | {mib_bytes(s.get('disk_bytes'))} | {secs(s.get('stop_s'))} "
      f"| {secs(s.get('ready_s'))} | {mib(s.get('rss_restarted_kb'))} "
      f"| {s.get('count_restarted', '–') if not num(s.get('count_restarted')) else format(s['count_restarted'], ',')} |")
w("")

s, r = servers.get("sundial", {}), servers.get("redis", {})
empty_kb = s.get("rss_empty_kb")
w("### Memory given back, and a restart at a smaller size")
w("")
w("RSS of Sundial's restarted server once its queue of "
  f"{N:,} messages is deleted (`sundial delete-queue`), and of a second server loaded with "
  f"{second.get('count', 0):,} messages, restarted, then drained by workers (`sundial-drain`: "
  "dequeue 1000, complete them, until none is left; the queue has retention 0, so completed "
  "messages go at once). Compared with "
  "the empty server's RSS (target: within 20% of it, plus what remains: nothing)."
  if num(N) else "")
w("")
w("| | messages | restart to ready | RSS after restart | RSS after delete / drain | vs empty server |")
w("| --- | ---: | ---: | ---: | ---: | ---: |")
def ratio(kb):
    return f"{kb / empty_kb:.2f}×" if num(kb) and num(empty_kb) and empty_kb > 0 else "–"
if s:
    w(f"| delete | {s.get('count', 0):,} | {secs(s.get('ready_s'))} | {mib(s.get('rss_restarted_kb'))} "
      f"| {mib(s.get('rss_deleted_kb'))} | {ratio(s.get('rss_deleted_kb'))} |")
if second:
    w(f"| drain | {second.get('count', 0):,} | {secs(second.get('ready_s'))} "
      f"| {mib(second.get('rss_restarted_kb'))} | {mib(second.get('rss_drained_kb'))} "
      f"({second.get('count_drained', '?')} left) | {ratio(second.get('rss_drained_kb'))} |")
w("")

w("### Dequeue latency against queue size")
w("")
w(f"A fresh Sundial with `--fsync=always` (as in compare.sh's durable mode); "
  f"`sundial-bench --workload dequeue-complete --connections 1 --duration "
  f"{meta.get('latency_duration_s', '?')} --prefill P`, the prefill untimed, once per size.")
w("")
w("| pending (prefill) | ops/s | p50 | p99 | p99.9 |")
w("| ---: | ---: | ---: | ---: | ---: |")
order = ["small", "large"]
for label in order:
    r = latency.get(label)
    if not r:
        continue
    res = r.get("result") or {}
    if r.get("rc") != 0 or not res:
        w(f"| {r.get('prefill', 0):,} | fail (exit {r.get('rc')}) | | | |")
        continue
    w(f"| {r.get('prefill', 0):,} | {res.get('ops_per_sec', 0):,.0f} | {us(res.get('p50_us'))} "
      f"| {us(res.get('p99_us'))} | {us(res.get('p999_us'))} |")
small = (latency.get("small") or {}).get("result") or {}
large = (latency.get("large") or {}).get("result") or {}
ok_lat = (latency.get("small", {}).get("rc") == 0 and latency.get("large", {}).get("rc") == 0
          and num(small.get("p50_us")) and num(large.get("p50_us")) and small["p50_us"] > 0)
if ok_lat:
    r50 = large["p50_us"] / small["p50_us"]
    r99 = large["p99_us"] / small["p99_us"] if num(large.get("p99_us")) and small.get("p99_us") else None
    w(f"| ratio large / small | | {r50:.2f}× | {'–' if r99 is None else f'{r99:.2f}×'} | |")
w("")

w("### Targets")
w("")
w("| target | measured | |")
w("| --- | --- | --- |")
s, r = servers.get("sundial", {}), servers.get("redis", {})
if num(s.get("rss_kb")) and num(r.get("rss_kb")) and r["rss_kb"] > 0:
    q = s["rss_kb"] / r["rss_kb"]
    w(f"| Sundial RSS ≤ 0.75× Redis RSS, {N:,} messages | {q:.2f}× "
      f"({mib(s['rss_kb'])} vs {mib(r['rss_kb'])}) | {'met' if q <= 0.75 else '**NOT met**'} |")
else:
    w("| Sundial RSS ≤ 0.75× Redis RSS | no data | – |")
if num(s.get("ready_s")) and num(r.get("ready_s")) and r["ready_s"] > 0:
    q = s["ready_s"] / r["ready_s"]
    ok = s["ready_s"] <= 10 and q <= 0.5
    w(f"| Sundial restart to ready at {N:,} ≤ 10 s and ≤ 0.5× Redis's | {s['ready_s']:.1f} s, "
      f"{q:.2f}× ({r['ready_s']:.1f} s) | {'met' if ok else '**NOT met**'} |")
if num(second.get("ready_s")):
    w(f"| Sundial restart to ready at {second.get('count', 0):,} ≤ 1 s | {second['ready_s']:.2f} s "
      f"| {'met' if second['ready_s'] <= 1 else '**NOT met**'} |")
for label, kb in (("deleted", s.get("rss_deleted_kb")), ("drained", second.get("rss_drained_kb"))):
    if num(kb) and num(empty_kb) and empty_kb > 0:
        w(f"| RSS after the queue is {label} ≤ 1.2× the empty server's | {kb / empty_kb:.2f}× "
          f"({mib(kb)} vs {mib(empty_kb)}) | {'met' if kb <= 1.2 * empty_kb else '**NOT met**'} |")
if ok_lat:
    w(f"| dequeue p50 at {latency['large'].get('prefill', 0):,} pending "
      f"≤ 1.5× p50 at {latency['small'].get('prefill', 0):,} | {r50:.2f}× "
      f"({us(large['p50_us'])} vs {us(small['p50_us'])}) | {'met' if r50 <= 1.5 else '**NOT met**'} |")
else:
    w("| dequeue p50 at N pending ≤ 1.5× p50 at 10,000 | no data | – |")
w("")

cmds = meta.get("commands") or {}
if cmds:
    w("### Commands")
    w("")
    w("```sh")
    for key in ("sundial", "redis", "load_sundial", "load_redis", "sundial_durable",
                "latency_small", "latency_large"):
        if cmds.get(key):
            w(cmds[key])
    if second.get("drain_argv"):
        w(second["drain_argv"])
    w("```")
    w("")
if out[-1] == "":
    out.pop()
print("\n".join(out))
PY
}

# ---------------------------------------------------------------------------------------------

START=$SECONDS
start_run redis-server:redis-server redis-cli:redis-tools
mapfile -t MACHINE_META < <(machine_meta)  # as at the start

# Rough rates on a 2-core VM: loading ~200K messages/s into each server, the durable prefill
# ~200K/s, Sundial recovery ~400K messages/s, Redis AOF load ~500K/s.
ESTIMATE=$((MESSAGES * 3 / 200000 + MESSAGES / 400000 + MESSAGES / 500000 + 2 * LATENCY_DURATION + 20))
log "$MESSAGES messages into Sundial and into Redis; estimated wall time about" \
  "$(min_s "$ESTIMATE"), and up to ~$((MESSAGES * 500 / 1000000000 + 1)) GB of" \
  "RAM and ~$((MESSAGES * 300 / 1000000000 + 1)) GB of disk under $WORK"

# Passed when the bench has it: the load must leave its messages in place after the run.
declare -a KEEP_FLAG=()
if "$BENCH" --help 2>&1 | grep -q -- '--keep\b'; then KEEP_FLAG=(--keep); fi

# 1. Empty servers.
start_sundial interval:1000 "$WORK/sundial"
start_redis "$WORK/redis"
wait_until sundiald "$SUNDIAL_PID" "$SUNDIAL_LOG" "$READY_TIMEOUT_S" sundial_ready
wait_until redis-server "$REDIS_PID" "$REDIS_LOG" "$READY_TIMEOUT_S" redis_ready
SUNDIAL_RELAXED_CMD=$SUNDIAL_CMD
sleep 1
SUNDIAL_RSS_EMPTY=$(rss_kb "$SUNDIAL_PID")
REDIS_RSS_EMPTY=$(rss_kb "$REDIS_PID")
log "empty: Sundial RSS ${SUNDIAL_RSS_EMPTY} kB, Redis RSS ${REDIS_RSS_EMPTY} kB"

# 2. Load. The count is what the run must stop at; --duration only bounds it.
LOAD_LIMIT=$((MESSAGES / 10000 + 300))
((LOAD_LIMIT <= 3600)) || LOAD_LIMIT=3600  # sundial-bench's --duration maximum
declare -a LOAD_ARGS=(--workload enqueue --batch "$LOAD_BATCH" --connections "$LOAD_CONNECTIONS"
  --payload-bytes "$PAYLOAD_BYTES" --messages "$MESSAGES" --duration "$LOAD_LIMIT" --json
  --queue "$QUEUE" "${KEEP_FLAG[@]}")
T0=$(now)
run_bench load_sundial $((LOAD_LIMIT + 60)) --target "sundial://127.0.0.1:$SUNDIAL_PORT" "${LOAD_ARGS[@]}"
SUNDIAL_LOAD_S=$(seconds_since "$T0")
LOAD_SUNDIAL_CMD=$BENCH_ARGV
((BENCH_RC == 0)) || die "loading Sundial failed"
T0=$(now)
run_bench load_redis $((LOAD_LIMIT + 60)) --target "redis://127.0.0.1:$REDIS_PORT" "${LOAD_ARGS[@]}"
REDIS_LOAD_S=$(seconds_since "$T0")
LOAD_REDIS_CMD=$BENCH_ARGV
((BENCH_RC == 0)) || die "loading Redis failed"

read -r SUNDIAL_COUNT SUNDIAL_ENGINE_MEMORY <<<"$(sundial_counts)"
REDIS_COUNT=$(redis_count)
log "loaded: Sundial ${SUNDIAL_COUNT} pending in ${SUNDIAL_LOAD_S} s, Redis ${REDIS_COUNT} in ${REDIS_LOAD_S} s"
if ((SUNDIAL_COUNT < MESSAGES || REDIS_COUNT < MESSAGES)); then
  die "after the load Sundial holds $SUNDIAL_COUNT and Redis $REDIS_COUNT messages, not $MESSAGES:" \
    "sundial-bench must leave the messages of an enqueue run in place (no teardown of the queue)" \
    "and stop after --messages messages"
fi

# 3. Memory, once background work (Redis's AOF rewrite) has settled.
for ((i = 0; i < 600; i++)); do
  [[ $(redis_info aof_rewrite_in_progress) == 0 && $(redis_info aof_rewrite_scheduled) == 0 ]] && break
  sleep 0.5
done
sleep 2
SUNDIAL_RSS=$(rss_kb "$SUNDIAL_PID")
REDIS_RSS=$(rss_kb "$REDIS_PID")
REDIS_USED_MEMORY=$(redis_info used_memory)
read -r _ SUNDIAL_ENGINE_MEMORY <<<"$(sundial_counts)"
log "loaded: Sundial RSS ${SUNDIAL_RSS} kB, Redis RSS ${REDIS_RSS} kB (used_memory ${REDIS_USED_MEMORY})"

# 4. Restarts. Sundial first, then Redis, so that each restart has the machine to itself.
restart_timed SUNDIAL sundiald "$WORK/sundial/data" sundial_ready \
  start_sundial interval:1000 "$WORK/sundial" reuse
read -r SUNDIAL_COUNT_RESTARTED _ <<<"$(sundial_counts)"
log "Sundial: stopped in ${SUNDIAL_STOP_S} s, ready again in ${SUNDIAL_READY_S} s with $SUNDIAL_COUNT_RESTARTED messages"
# Memory goes back: delete the queue of N messages.
"$CLI" --addr "127.0.0.1:$SUNDIAL_PORT" delete-queue "$QUEUE" >/dev/null ||
  die "sundial delete-queue $QUEUE failed"
SUNDIAL_RSS_DELETED=$(settled_rss_kb "$SUNDIAL_PID")
log "Sundial: RSS ${SUNDIAL_RSS_DELETED} kB after deleting the queue (empty: ${SUNDIAL_RSS_EMPTY} kB)"
stop_pid "$SUNDIAL_PID"

restart_timed REDIS redis-server "$WORK/redis" redis_ready start_redis "$WORK/redis" reuse
REDIS_COUNT_RESTARTED=$(redis_count)
log "Redis: stopped in ${REDIS_STOP_S} s, ready again in ${REDIS_READY_S} s with $REDIS_COUNT_RESTARTED messages"
stop_pid "$REDIS_PID"
rm -rf "$WORK/sundial/data" "$WORK/redis"  # the disk for the next step
record server name=sundial "count=$SUNDIAL_COUNT" "rss_empty_kb=$SUNDIAL_RSS_EMPTY" \
  "rss_kb=$SUNDIAL_RSS" "engine_memory=$SUNDIAL_ENGINE_MEMORY" "load_s=$SUNDIAL_LOAD_S" \
  "disk_bytes=$SUNDIAL_DISK" "stop_s=$SUNDIAL_STOP_S" "ready_s=$SUNDIAL_READY_S" \
  "rss_restarted_kb=$SUNDIAL_RSS_RESTARTED" "count_restarted=$SUNDIAL_COUNT_RESTARTED" \
  "rss_deleted_kb=$SUNDIAL_RSS_DELETED"
record server name=redis "count=$REDIS_COUNT" "rss_empty_kb=$REDIS_RSS_EMPTY" \
  "rss_kb=$REDIS_RSS" "used_memory=$REDIS_USED_MEMORY" "load_s=$REDIS_LOAD_S" \
  "disk_bytes=$REDIS_DISK" "stop_s=$REDIS_STOP_S" "ready_s=$REDIS_READY_S" \
  "rss_restarted_kb=$REDIS_RSS_RESTARTED" "count_restarted=$REDIS_COUNT_RESTARTED"


# 5. Restart and drain at SMALL_RESTART messages.
if ((SMALL_RESTART < MESSAGES)); then
  start_sundial interval:1000 "$WORK/sundial-small"
  wait_until sundiald "$SUNDIAL_PID" "$SUNDIAL_LOG" "$READY_TIMEOUT_S" sundial_ready
  declare -a SMALL_ARGS=(--target "sundial://127.0.0.1:$SUNDIAL_PORT" --batch "$LOAD_BATCH"
    --connections "$LOAD_CONNECTIONS" --payload-bytes "$PAYLOAD_BYTES" --messages "$SMALL_RESTART"
    --duration "$LOAD_LIMIT" --json --queue "$QUEUE" "${KEEP_FLAG[@]}")
  run_bench load_small $((LOAD_LIMIT + 60)) --workload enqueue "${SMALL_ARGS[@]}"
  ((BENCH_RC == 0)) || die "loading $SMALL_RESTART messages failed"
  restart_timed SUNDIAL sundiald "$WORK/sundial-small/data" sundial_ready \
    start_sundial interval:1000 "$WORK/sundial-small" reuse
  SMALL_READY_S=$SUNDIAL_READY_S SMALL_STOP_S=$SUNDIAL_STOP_S SMALL_DISK=$SUNDIAL_DISK
  SMALL_RSS_RESTARTED=$SUNDIAL_RSS_RESTARTED
  read -r SMALL_COUNT_RESTARTED _ <<<"$(sundial_counts)"
  log "Sundial ($SMALL_RESTART): ready again in ${SMALL_READY_S} s with $SMALL_COUNT_RESTARTED messages"
  # Workers drain it (sundial-drain: dequeue 1000, complete them, until none is left).
  DRAIN_CMD=$(quote_command "$DRAIN" "127.0.0.1:$SUNDIAL_PORT" "$QUEUE")
  log "running: $DRAIN_CMD"
  "$DRAIN" "127.0.0.1:$SUNDIAL_PORT" "$QUEUE" >"$WORK/drain.out" || die "draining failed"
  read -r SMALL_COUNT_DRAINED _ <<<"$(sundial_counts)"
  SMALL_RSS_DRAINED=$(settled_rss_kb "$SUNDIAL_PID")
  log "Sundial ($SMALL_RESTART): RSS ${SMALL_RSS_DRAINED} kB after the drain ($SMALL_COUNT_DRAINED pending)"
  stop_pid "$SUNDIAL_PID"
  rm -rf "$WORK/sundial-small"
  record small "count=$SMALL_RESTART" "ready_s=$SMALL_READY_S" "stop_s=$SMALL_STOP_S" \
    "disk_bytes=$SMALL_DISK" "rss_restarted_kb=$SMALL_RSS_RESTARTED" \
    "count_restarted=$SMALL_COUNT_RESTARTED" "rss_drained_kb=$SMALL_RSS_DRAINED" \
    "count_drained=$SMALL_COUNT_DRAINED" "drain_argv=$DRAIN_CMD"
fi

# 6. Dequeue latency, durable, at 10,000 and at N pending.
start_sundial always "$WORK/sundial-durable"
wait_until sundiald "$SUNDIAL_PID" "$SUNDIAL_LOG" "$READY_TIMEOUT_S" sundial_ready
SUNDIAL_DURABLE_CMD=$SUNDIAL_CMD
declare -a LATENCY_ARGS=(--target "sundial://127.0.0.1:$SUNDIAL_PORT" --workload dequeue-complete
  --connections 1 --pipeline 1 --payload-bytes "$PAYLOAD_BYTES" --duration "$LATENCY_DURATION" --json)
run_bench latency_small $((LATENCY_DURATION + 120)) "${LATENCY_ARGS[@]}" --prefill "$SMALL_PREFILL"
record latency label=small "prefill=$SMALL_PREFILL" "rc=$BENCH_RC" "argv=$BENCH_ARGV" "result_json=$BENCH_JSON"
LATENCY_SMALL_CMD=$BENCH_ARGV
run_bench latency_large $((LATENCY_DURATION + 300 + MESSAGES / 10000)) "${LATENCY_ARGS[@]}" --prefill "$MESSAGES"
record latency label=large "prefill=$MESSAGES" "rc=$BENCH_RC" "argv=$BENCH_ARGV" "result_json=$BENCH_JSON"
LATENCY_LARGE_CMD=$BENCH_ARGV
stop_pid "$SUNDIAL_PID"

COMMANDS_JSON=$("$PYTHON" -c 'import json, sys
keys = ["sundial", "redis", "load_sundial", "load_redis", "sundial_durable", "latency_small",
        "latency_large"]
print(json.dumps(dict(zip(keys, sys.argv[1:]))))' "$SUNDIAL_RELAXED_CMD" "$REDIS_CMD" \
  "$LOAD_SUNDIAL_CMD" "$LOAD_REDIS_CMD" "$SUNDIAL_DURABLE_CMD" "$LATENCY_SMALL_CMD" "$LATENCY_LARGE_CMD")
ELAPSED=$((SECONDS - START))
record meta "messages=$MESSAGES" "payload_bytes=$PAYLOAD_BYTES" "load_batch=$LOAD_BATCH" \
  "load_connections=$LOAD_CONNECTIONS" "latency_duration_s=$LATENCY_DURATION" \
  "${MACHINE_META[@]}" "commands_json=$COMMANDS_JSON"
record end "elapsed_s=$ELAPSED"

finish_run
log "elapsed: $(min_s "$ELAPSED") (estimated $(min_s "$ESTIMATE"))"
