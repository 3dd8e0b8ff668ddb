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
#     long until it answers: Sundial GET /readyz = 200, Redis PING = PONG (not LOADING).
#  5. Starts a fresh Sundial with --fsync=always (as compare.sh's durable mode) and runs
#     dequeue-complete at one connection for 3 s on a queue prefilled with 10,000 messages, then
#     with N, and compares p50 and p99 (target: p50 at N within 1.5x of p50 at 10,000).
# The report replaces the part of docs/BENCHMARKS.md between "<!-- scale.sh:begin -->" and
# "<!-- scale.sh:end -->" (appended at the end when absent).
set -euo pipefail

MESSAGES=10000000
SMALL_PREFILL=10000                      # the reference queue size of the latency comparison
LATENCY_DURATION=3                       # seconds per dequeue-latency run
PAYLOAD_BYTES=100
LOAD_CONNECTIONS=8
LOAD_BATCH=100
READY_TIMEOUT_S=10                       # a fresh (empty) server must accept connections by then
RESTART_TIMEOUT_S=900                    # a restart with N messages must answer by then
STOP_TIMEOUT_S=120                       # SIGTERM, then SIGKILL after this

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
    --messages) (($# >= 2)) || usage; MESSAGES=${2//[,_]/}; shift ;;
    --keep-results) (($# >= 2)) || usage; KEEP_RESULTS=$2; shift ;;
    --from-results) (($# >= 2)) || usage; FROM_RESULTS=$2; shift ;;
    --output) (($# >= 2)) || usage; OUTPUT=$2; shift ;;
    -h | --help) usage ;;
    *) echo "scale.sh: unknown argument: $1" >&2; usage ;;
  esac
  shift
done
if ! [[ $MESSAGES =~ ^[0-9]+$ ]] || ((MESSAGES < LOAD_BATCH)); then
  echo "scale.sh: --messages wants a whole number ≥ $LOAD_BATCH" >&2
  exit 2
fi

# File arguments are relative to where the script was started; then work from the repository.
absolute() { if [[ -z $1 || $1 == /* ]]; then printf '%s' "$1"; else printf '%s' "$PWD/$1"; fi; }
OUTPUT=$(absolute "$OUTPUT") KEEP_RESULTS=$(absolute "$KEEP_RESULTS") FROM_RESULTS=$(absolute "$FROM_RESULTS")
BENCH=$(absolute "$BENCH") SUNDIALD=$(absolute "$SUNDIALD")
cd "$ROOT"

# The system python3 first: a version manager's shim (pyenv) costs ~0.3 s a call.
find_python() {
  if [[ -x /usr/bin/python3 ]]; then PYTHON=/usr/bin/python3; else PYTHON=$(command -v python3 || true); fi
}
PYTHON=
find_python

log() { printf '%s\n' "scale.sh: $*" >&2; }
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
    command -v redis-cli >/dev/null || missing+=(redis-tools)
  fi
  ((${#missing[@]} == 0)) && return 0
  log "installing from Debian: ${missing[*]}"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
  # The redis-server package may start a system service on 6379: it is left alone, never used.
  find_python
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

now() { printf '%s' "$EPOCHREALTIME"; }
seconds_since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }'; }

# wait_until NAME PID LOG TIMEOUT COMMAND...: until COMMAND succeeds, while PID lives.
wait_until() {
  local name=$1 pid=$2 logfile=$3 timeout=$4 start
  shift 4
  start=$SECONDS
  while :; do
    if ! alive "$pid"; then
      log "$name (pid $pid) exited; last lines of $logfile:"
      tail -n 20 "$logfile" >&2 || true
      exit 1
    fi
    "$@" && return 0
    if ((SECONDS - start >= timeout)); then
      log "$name (pid $pid) not ready after $timeout s; last lines of $logfile:"
      tail -n 20 "$logfile" >&2 || true
      exit 1
    fi
    sleep 0.05
  done
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
  local -a rest=()
  local p
  for p in "${SERVER_PIDS[@]}"; do [[ $p == "$pid" ]] || rest+=("$p"); done
  SERVER_PIDS=("${rest[@]}")
}

cleanup() {
  local rc=$? pid
  trap - EXIT INT TERM
  for pid in "${SERVER_PIDS[@]}"; do stop_pid "$pid"; done
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
  "${SUNDIAL_ARGV[@]}" >>"$SUNDIAL_LOG" 2>&1 &
  SUNDIAL_PID=$!
  SERVER_PIDS+=("$SUNDIAL_PID")
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
  "${REDIS_ARGV[@]}" >>"$dir/stdout.log" 2>&1 &
  REDIS_PID=$!
  SERVER_PIDS+=("$REDIS_PID")
}

# ---------------------------------------------------------------------------------------------
# Results: JSON lines; the report is made from them alone.

RESULTS=

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

write_report() {
  local results=$1 output=$2
  "$PYTHON" - "$results" "$output" <<'PY'
import json, os, sys, tempfile

results_path, output_path = sys.argv[1:3]
BEGIN, END = "<!-- scale.sh:begin -->", "<!-- scale.sh:end -->"

meta, servers, latency, end = {}, {}, {}, {}
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
w(BEGIN)
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
    w("```")
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
        print(f"scale.sh: {output_path}: {BEGIN} without {END}; appending a new section",
              file=sys.stderr)
    sep = "" if not doc else ("\n" if doc.endswith("\n") else "\n\n")
    new = doc + sep + section
directory = os.path.dirname(os.path.abspath(output_path))
fd, tmp = tempfile.mkstemp(dir=directory, prefix=".scale.")
with os.fdopen(fd, "w", encoding="utf-8") as f:
    f.write(new)
os.chmod(tmp, os.stat(output_path).st_mode & 0o7777 if os.path.exists(output_path) else 0o644)
os.replace(tmp, output_path)
print(f"scale.sh: wrote {output_path}", file=sys.stderr)
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
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sundial-scale.XXXXXX")
RESULTS=$WORK/results.jsonl
: >"$RESULTS"
DATE_START=$(date -u '+%Y-%m-%d %H:%M UTC')
LOADAVG_START=$(cut -d' ' -f1-3 /proc/loadavg)

# Rough rates on a 2-core VM: loading ~200K messages/s into each server, the durable prefill
# ~200K/s, Sundial recovery ~400K messages/s, Redis AOF load ~500K/s.
ESTIMATE=$((MESSAGES * 3 / 200000 + MESSAGES / 400000 + MESSAGES / 500000 + 2 * LATENCY_DURATION + 20))
log "$MESSAGES messages into Sundial and into Redis; estimated wall time about" \
  "$((ESTIMATE / 60)) min $((ESTIMATE % 60)) s, and up to ~$((MESSAGES * 500 / 1000000000 + 1)) GB of" \
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
  "${KEEP_FLAG[@]}")
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
T0=$(now)
stop_pid "$SUNDIAL_PID"
SUNDIAL_STOP_S=$(seconds_since "$T0")
SUNDIAL_DISK=$(du -sb "$WORK/sundial/data" | cut -f1)
T0=$(now)
start_sundial interval:1000 "$WORK/sundial" reuse
wait_until sundiald "$SUNDIAL_PID" "$SUNDIAL_LOG" "$RESTART_TIMEOUT_S" sundial_ready
SUNDIAL_READY_S=$(seconds_since "$T0")
sleep 1
SUNDIAL_RSS_RESTARTED=$(rss_kb "$SUNDIAL_PID")
read -r SUNDIAL_COUNT_RESTARTED _ <<<"$(sundial_counts)"
log "Sundial: stopped in ${SUNDIAL_STOP_S} s, ready again in ${SUNDIAL_READY_S} s with $SUNDIAL_COUNT_RESTARTED messages"
stop_pid "$SUNDIAL_PID"

T0=$(now)
stop_pid "$REDIS_PID"
REDIS_STOP_S=$(seconds_since "$T0")
REDIS_DISK=$(du -sb "$WORK/redis" | cut -f1)
T0=$(now)
start_redis "$WORK/redis" reuse
wait_until redis-server "$REDIS_PID" "$REDIS_LOG" "$RESTART_TIMEOUT_S" redis_ready
REDIS_READY_S=$(seconds_since "$T0")
sleep 1
REDIS_RSS_RESTARTED=$(rss_kb "$REDIS_PID")
REDIS_COUNT_RESTARTED=$(redis_count)
log "Redis: stopped in ${REDIS_STOP_S} s, ready again in ${REDIS_READY_S} s with $REDIS_COUNT_RESTARTED messages"
stop_pid "$REDIS_PID"
rm -rf "$WORK/sundial/data" "$WORK/redis"  # the disk for the next step

# 5. Dequeue latency, durable, at 10,000 and at N pending.
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

record server name=sundial "count=$SUNDIAL_COUNT" "rss_empty_kb=$SUNDIAL_RSS_EMPTY" \
  "rss_kb=$SUNDIAL_RSS" "engine_memory=$SUNDIAL_ENGINE_MEMORY" "load_s=$SUNDIAL_LOAD_S" \
  "disk_bytes=$SUNDIAL_DISK" "stop_s=$SUNDIAL_STOP_S" "ready_s=$SUNDIAL_READY_S" \
  "rss_restarted_kb=$SUNDIAL_RSS_RESTARTED" "count_restarted=$SUNDIAL_COUNT_RESTARTED"
record server name=redis "count=$REDIS_COUNT" "rss_empty_kb=$REDIS_RSS_EMPTY" \
  "rss_kb=$REDIS_RSS" "used_memory=$REDIS_USED_MEMORY" "load_s=$REDIS_LOAD_S" \
  "disk_bytes=$REDIS_DISK" "stop_s=$REDIS_STOP_S" "ready_s=$REDIS_READY_S" \
  "rss_restarted_kb=$REDIS_RSS_RESTARTED" "count_restarted=$REDIS_COUNT_RESTARTED"

COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
DIRTY=false
git -C "$ROOT" diff --quiet HEAD -- 2>/dev/null || DIRTY=true
COMMANDS_JSON=$("$PYTHON" -c 'import json, sys
keys = ["sundial", "redis", "load_sundial", "load_redis", "sundial_durable", "latency_small",
        "latency_large"]
print(json.dumps(dict(zip(keys, sys.argv[1:]))))' "$SUNDIAL_RELAXED_CMD" "$REDIS_CMD" \
  "$LOAD_SUNDIAL_CMD" "$LOAD_REDIS_CMD" "$SUNDIAL_DURABLE_CMD" "$LATENCY_SMALL_CMD" "$LATENCY_LARGE_CMD")
ELAPSED=$((SECONDS - START))
record meta "messages=$MESSAGES" "payload_bytes=$PAYLOAD_BYTES" "load_batch=$LOAD_BATCH" \
  "load_connections=$LOAD_CONNECTIONS" "latency_duration_s=$LATENCY_DURATION" \
  "date_utc=$DATE_START" "nproc=$(nproc)" \
  "cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)" "kernel=$(uname -r)" \
  "ram=$(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)" \
  "loadavg=$LOADAVG_START" "redis_version=$(redis-server --version 2>&1 | head -n 1)" \
  "sundial_commit=$COMMIT" "sundial_dirty_json=$DIRTY" "commands_json=$COMMANDS_JSON"
record end "elapsed_s=$ELAPSED"

if [[ -n $KEEP_RESULTS ]]; then
  cp "$RESULTS" "$KEEP_RESULTS"
  log "results (JSON lines) kept in $KEEP_RESULTS"
fi
write_report "$RESULTS" "$OUTPUT"
log "elapsed: $((ELAPSED / 60)) min $((ELAPSED % 60)) s (estimated $((ESTIMATE / 60)) min $((ESTIMATE % 60)) s)"
