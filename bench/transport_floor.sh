#!/usr/bin/env bash
# The transport's floor: a request's cost with nothing behind it, over epoll and io_uring, beside sundiald and Redis.
#
#   bash bench/transport_floor.sh [--rounds N] [--connections "1 16 64"] [--duration S] [--modes "relaxed durable"] [--smoke]
#
# Each round starts every server afresh for each mode and runs `sundial-bench --workload enqueue`
# against it at each connection count (100-byte payloads, one request per round trip): the three
# shapes of sundial-transport-floor (bench/transport_floor.cc: epoll, uring, and uring-inline,
# durable only), sundiald (--fsync=always, relaxed: interval:1000) and redis-server (appendfsync
# always / everysec). Prints one markdown table of medians over the rounds: requests/s, the
# server's CPU per request and its ratio to redis-server's, p99, and system calls and context
# switches per request (perf stat on the server, all its threads). --smoke: one short round of
# the floor's shapes only, failing unless every request was answered (the test suite runs it).
SCRIPT_NAME=transport_floor.sh
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
STOP_TIMEOUT_S=10
FLOOR=${SUNDIAL_TRANSPORT_FLOOR:-$ROOT/build/release/bench/sundial-transport-floor}

rounds=3
connections="1 16 64"
duration=3
modes="relaxed durable"
smoke=
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --connections) connections=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    --smoke) smoke=1 rounds=1 connections=2 duration=0.3; shift ;;
    -h | --help) usage ;;
    *) die "unknown argument $1" ;;
  esac
done
FLOOR=$(absolute "$FLOOR")
enter_repository
servers="floor-epoll floor-uring floor-uring-inline sundiald redis"
if [[ -n $smoke ]]; then
  servers="floor-epoll floor-uring floor-uring-inline"
else
  install_missing_packages perf:linux-perf redis-server:redis-server
fi
ensure_binaries
[[ -x $FLOOR ]] || die "no $FLOOR (make build)"
probe=0
"$FLOOR" --probe-uring || probe=$?
if ((probe == 77)); then
  log "io_uring is refused on this machine: the uring shapes are left out"
  servers=${servers//floor-uring-inline/}
  servers=${servers//floor-uring/}
elif ((probe != 0)); then
  die "$FLOOR --probe-uring failed"
fi
trap cleanup EXIT
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sundial-transport-floor.XXXXXX")
: >"$WORK/results.jsonl"

# start SERVER MODE PORT HTTP_PORT: the server in the background, serving PORT (sundiald's
# HTTP on HTTP_PORT); its PID in $!.
start() {
  local server=$1 mode=$2 port=$3 http=$4 fsync=always appendfsync=always
  [[ $mode == relaxed ]] && fsync=interval:1000 appendfsync=everysec
  rm -rf "$WORK/data" && mkdir -p "$WORK/data"
  case $server in
    floor-*) spawn "$WORK/server.log" "$FLOOR" "${server#floor-}" "$mode" "$port" "$WORK/data/log" ;;
    sundiald)
      spawn "$WORK/server.log" "$SUNDIALD" --data-dir "$WORK/data" --port "$port" \
        --http-port "$http" --fsync="$fsync" ;;
    redis)
      spawn "$WORK/server.log" redis-server --port "$port" --bind 127.0.0.1 --dir "$WORK/data" \
        --appendonly yes --appendfsync "$appendfsync" --save '' --daemonize no \
        --protected-mode no ;;
  esac
}

for ((round = 1; round <= rounds; round++)); do
  for mode in $modes; do
    for server in $servers; do
      # uring-inline differs from uring only in how the log is synced.
      [[ $server == floor-uring-inline && $mode == relaxed ]] && continue
      # Both from one call: two calls could each be handed the same free port.
      read -r port http <<<"$(free_ports 2)"
      start "$server" "$mode" "$port" "$http"
      pid=$!
      wait_until "$server" "$pid" "$WORK/server.log" 60 port_open "$port"
      scheme=sundial
      [[ $server == redis ]] && scheme=redis
      for c in $connections; do
        perf_pid=
        if [[ -z $smoke ]]; then
          perf stat -x, -e raw_syscalls:sys_enter,context-switches -p "$pid" \
            -o "$WORK/perf.csv" &
          perf_pid=$!
          sleep 0.3  # attached
        fi
        "$BENCH" --target "$scheme://127.0.0.1:$port" --workload enqueue -c "$c" \
          --duration "$duration" --cpu-pid "$pid" --json >"$WORK/run.json" ||
          die "sundial-bench against $server ($mode, c=$c) failed: $(cat "$WORK/run.json")"
        if [[ -n $perf_pid ]]; then
          kill -INT "$perf_pid"
          wait "$perf_pid" 2>/dev/null || true
        fi
        "$PYTHON" - "$WORK" "$server" "$mode" "$c" "$round" "$perf_pid" <<'PY'
import json, sys
work, server, mode, c, rnd, perf = sys.argv[1:7]
run = json.load(open(f"{work}/run.json"))
row = {"server": server, "mode": mode, "c": int(c), "round": int(rnd),
       "ops": run["ops_per_sec"], "cpu": run["server_cpu_us_per_op"], "p99": run["p99_us"],
       "errors": run["errors"], "answered": run["ops"], "first_error": run["first_error"]}
if perf:
    counts = {}
    for line in open(f"{work}/perf.csv"):
        f = line.strip().split(",")
        if len(f) > 2 and f[0].replace(".", "").isdigit():
            counts[f[2]] = float(f[0])
    # perf counted from its start to the bench's end: the bench's requests are nearly all of
    # it (the server is idle before), so divide by them.
    requests = run["requests_per_sec"] * run["seconds"]
    row["syscalls"] = counts.get("raw_syscalls:sys_enter", 0) / requests
    row["switches"] = counts.get("context-switches", 0) / requests
open(f"{work}/results.jsonl", "a").write(json.dumps(row) + "\n")
PY
      done
      stop_pid "$pid"
    done
  done
done

"$PYTHON" - "$WORK/results.jsonl" "$smoke" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
if sys.argv[2]:
    bad = [r for r in rows if r["errors"] or r["answered"] == 0]
    for r in rows:
        print(f"{r['server']} {r['mode']} c={r['c']}: {r['answered']} answered, {r['errors']} errors {r['first_error']}")
    sys.exit(1 if bad or not rows else 0)
med = lambda xs: statistics.median(xs) if xs else None
cases = {}
for r in rows:
    cases.setdefault((r["mode"], r["c"], r["server"]), []).append(r)
print("| mode | connections | server | requests/s | CPU µs/request | / Redis's CPU | p99 | syscalls/request | switches/request |")
print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
order = ["floor-epoll", "floor-uring", "floor-uring-inline", "sundiald", "redis"]
for mode in ("relaxed", "durable"):
    for c in sorted({k[1] for k in cases}):
        redis_cpu = med([r["cpu"] for r in cases.get((mode, c, "redis"), [])])
        for server in order:
            rs = cases.get((mode, c, server))
            if not rs:
                continue
            cpu = med([r["cpu"] for r in rs])
            ratio = f"{cpu / redis_cpu:.2f}×" if redis_cpu else "—"
            sys_ = med([r["syscalls"] for r in rs if "syscalls" in r])
            sw = med([r["switches"] for r in rs if "switches" in r])
            print(f"| {mode} | {c} | {server} | {med([r['ops'] for r in rs]):,.0f} | {cpu:.1f} | {ratio} "
                  f"| {med([r['p99'] for r in rs]) / 1000:.2f} ms | "
                  f"{'—' if sys_ is None else f'{sys_:.2f}'} | {'—' if sw is None else f'{sw:.2f}'} |")
PY
