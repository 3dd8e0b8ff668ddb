#!/usr/bin/env bash
# What one durable request costs sundiald, counted over a fixed number of requests.
#
#   bash bench/request_cost.sh [--messages N] [--conns "1 64"] [--workload W] [SUNDIALD...]
#
# For each sundiald binary (default: build/release/server/sundiald) and connection count, two
# runs of sundial-bench with exactly N messages (--fsync=always): the first under `perf stat -p`
# (context switches, task-clock), the second under `strace -c -f` (system calls by name; strace
# slows the server, so that run gives counts only). Prints per request: context switches, CPU
# µs, system calls, and the five most frequent calls. Compare two builds on one machine by
# naming both binaries. Needs perf (linux-perf) and strace (installed here when missing).
SCRIPT_NAME=request_cost.sh
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
STOP_TIMEOUT_S=10

messages=20000
conns="1 64"
workload=enqueue
servers=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --messages) messages=$2; shift 2 ;;
    --conns) conns=$2; shift 2 ;;
    --workload) workload=$2; shift 2 ;;
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

# measure SUNDIALD CONNS TOOL...: a fresh server, TOOL attached to it, one bench run of N
# messages, TOOL stopped with SIGINT (it writes its summary), the server stopped.
measure() {
  local sd=$1 c=$2 port http pid tool_pid
  shift 2
  read -r port http <<<"$(free_ports 2)"
  rm -rf "$WORK/data"
  spawn "$WORK/server.log" "$sd" --data-dir "$WORK/data" --port "$port" --http-port "$http" \
    --fsync=always
  pid=$!
  wait_until sundiald "$pid" "$WORK/server.log" 20 port_open "$port"
  "$@" -p "$pid" &
  tool_pid=$!
  sleep 0.5  # attached (perf and strace print nothing when they are)
  local -a prefill=()
  [[ $workload != enqueue ]] && prefill=(--prefill "$messages")
  "$BENCH" --target "sundial://127.0.0.1:$port" --workload "$workload" -c "$c" \
    --messages "$messages" "${prefill[@]}" --json >"$WORK/bench.json" ||
    die "sundial-bench failed: $(cat "$WORK/bench.json")"
  kill -INT "$tool_pid"
  wait "$tool_pid" 2>/dev/null || true
  stop_pid "$pid"
}

printf '%-28s %5s %8s %10s %8s  %s\n' server conns cs/req cpu_us/req sys/req \
  "most frequent system calls, per request"
for sd in "${servers[@]}"; do
  for c in $conns; do
    measure "$sd" "$c" perf stat -x, -e context-switches,task-clock -o "$WORK/perf.csv"
    measure "$sd" "$c" strace -c -f -o "$WORK/strace.txt"
    # With a prefill, the server also served N enqueues before the measured run.
    requests=$messages
    [[ $workload != enqueue ]] && requests=$((messages * 2))
    "$PYTHON" - "$sd" "$c" "$requests" "$WORK/perf.csv" "$WORK/strace.txt" <<'PY'
import sys
sd, c, n, perf, strace = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
cs = cpu_ms = 0.0
for line in open(perf):
    f = line.strip().split(",")
    if len(f) > 2 and f[2] == "context-switches": cs = float(f[0])
    if len(f) > 2 and f[2] == "task-clock": cpu_ms = float(f[0])
calls, total = {}, 0
for line in open(strace):
    f = line.split()
    # % time, seconds, usecs/call, calls, [errors], syscall
    if len(f) >= 5 and f[0][0].isdigit() and f[-1] != "total":
        calls[f[-1]] = int(f[3])
        total += int(f[3])
top = sorted(calls.items(), key=lambda kv: -kv[1])[:5]
name = "/".join(sd.split("/")[-4:])[-28:]
print(f"{name:<28} {c:>5} {cs / n:>8.2f} {cpu_ms * 1000 / n:>10.1f} {total / n:>8.2f}  "
      + " ".join(f"{k} {v / n:.2f}" for k, v in top))
PY
  done
done
