#!/usr/bin/env bash
# What one request costs sundiald (durable, or --fsync MODE), counted over a fixed number of requests.
#
#   bash bench/request_cost.sh [--messages N] [--conns "1 64"] [--workload W] [--fsync MODE] [SUNDIALD...]
#
# For each sundiald binary (default: build/release/server/sundiald) and connection count, two
# runs of sundial-bench with exactly N messages (--fsync=always, or MODE: interval:1000 is the
# relaxed path compare.sh measures): the first under `perf stat -p`
# (context switches, task-clock), the second under `strace -c -f` (system calls by name; strace
# slows the server, so that run gives counts only). Prints per request: context switches, CPU
# µs, system calls, and the five most frequent calls (a prefill's requests are in the counts
# but not in the divisor: use --workload enqueue for exact figures). Compare two builds on one machine by
# naming both binaries. Needs perf (linux-perf) and strace (installed here when missing).
SCRIPT_NAME=request_cost.sh
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
STOP_TIMEOUT_S=10

messages=20000
conns="1 64"
workload=enqueue
fsync=always
servers=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --messages) messages=$2; shift 2 ;;
    --conns) conns=$2; shift 2 ;;
    --workload) workload=$2; shift 2 ;;
    --fsync) fsync=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    -*) die "unknown flag $1" ;;
    *) servers+=("$(absolute "$1")"); shift ;;
  esac
done
enter_repository
((${#servers[@]})) || servers=("$SUNDIALD")
install_missing_packages perf:linux-perf strace:strace
ensure_binaries
trap cleanup EXIT
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sundial-request-cost.XXXXXX")

# measure TAG SUNDIALD CONNS TOOL...: a fresh server, TOOL attached to it, one bench run of N
# messages (its JSON in TAG.json), TOOL stopped with SIGINT (it writes its summary), the server
# stopped.
measure() {
  local tag=$1 sd=$2 c=$3 port http pid tool_pid
  shift 3
  read -r port http <<<"$(free_ports 2)"
  rm -rf "$WORK/data"
  spawn "$WORK/server.log" "$sd" --data-dir "$WORK/data" --port "$port" --http-port "$http" \
    --fsync="$fsync"
  pid=$!
  wait_until sundiald "$pid" "$WORK/server.log" 20 port_open "$port"
  "$@" -p "$pid" &
  tool_pid=$!
  sleep 0.5  # attached (perf and strace print nothing when they are)
  local -a prefill=()
  [[ $workload != enqueue ]] && prefill=(--prefill "$messages")
  "$BENCH" --target "sundial://127.0.0.1:$port" --workload "$workload" -c "$c" \
    --messages "$messages" --duration 3600 "${prefill[@]}" --json >"$WORK/$tag.json" ||
    die "sundial-bench failed: $(cat "$WORK/$tag.json")"
  kill -INT "$tool_pid"
  wait "$tool_pid" 2>/dev/null || true
  stop_pid "$pid"
}

printf '%-40s %5s %8s %10s %8s  %s\n' server conns cs/req cpu_us/req sys/req \
  "most frequent system calls, per request"
for sd in "${servers[@]}"; do
  for c in $conns; do
    measure perf "$sd" "$c" perf stat -x, -e context-switches,task-clock -o "$WORK/perf.csv"
    measure strace "$sd" "$c" strace -q -c -f -o "$WORK/strace.txt"
    "$PYTHON" - "$sd" "$c" "$WORK" <<'PY'
import json, sys
sd, c, work = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def requests(tag):  # the requests of the measured run (a prefill's are not counted)
    o = json.load(open(f"{work}/{tag}.json"))
    return o["requests_per_sec"] * o["seconds"]
cs = cpu_ms = 0.0
for line in open(f"{work}/perf.csv"):
    f = line.strip().split(",")
    if len(f) > 2 and f[2] == "context-switches": cs = float(f[0])
    if len(f) > 2 and f[2] == "task-clock": cpu_ms = float(f[0])
calls, total = {}, 0
for line in open(f"{work}/strace.txt"):
    f = line.split()
    # % time, seconds, usecs/call, calls, [errors], syscall
    if len(f) >= 5 and f[0][0].isdigit() and f[-1] != "total":
        calls[f[-1]] = int(f[3])
        total += int(f[3])
n, m = requests("perf"), requests("strace")
top = sorted(calls.items(), key=lambda kv: -kv[1])[:5]
name = sd if len(sd) <= 40 else "…" + sd[-39:]
print(f"{name:<40} {c:>5} {cs / n:>8.2f} {cpu_ms * 1000 / n:>10.1f} {total / m:>8.2f}  "
      + " ".join(f"{k} {v / m:.2f}" for k, v in top))
PY
  done
done
