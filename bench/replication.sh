#!/usr/bin/env bash
# What synchronous replication costs (docs/BENCHMARKS.md, "High availability: the cost of a
# synchronous standby"), in one run on this machine:
#
#   bash bench/replication.sh [--quick] [--output FILE]
#
#   single  sundiald --fsync=always, alone
#   sync    a cluster primary with one synchronous standby (--replication sync; etcd on loopback):
#           a durable reply waits for the primary's fdatasync and the standby's fsync
#   redis   redis-server appendfsync always with one replica, every write followed by
#           WAIT 1 0 (Redis's closest analogue: the replica received the write, not fsynced it)
# Workloads: durable enqueue and dequeue+complete, at 1, 16 and 64 connections, one request per
# round trip, 100-byte payloads; ROUNDS rounds of DURATION s, A B C in turn within a round.
# Every figure is the median over the rounds. All processes share this machine's cores and
# disk: the standby's fsync competes with the primary's, which a real deployment does not.
#   --tmpfs-standby  adds "sync-tmpfs": the same cluster with the standby's data on /dev/shm,
#                    so its fsync no longer queues behind the primary's on the one disk: what
#                    is left of the extra latency is the protocol's own (hops, wake-ups, CPU).
# CPU µs per operation: the primary's (sundial-bench --cpu-pid) and, for the clusters, the
# standby's (its /proc/PID/stat over the same run).
# Installs redis-server from Debian when missing; runs `make build` when binaries are missing.
set -euo pipefail

SCRIPT_NAME=replication.sh
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DURATION=${DURATION:-2}
ROUNDS=${ROUNDS:-3}
PREFILL=${PREFILL:-60000}
READY_TIMEOUT_S=15
STOP_TIMEOUT_S=10
OUTPUT=""
TMPFS_STANDBY=0
while (($#)); do
  case $1 in
    --quick) ROUNDS=1 DURATION=1 PREFILL=20000 ;;
    --output) (($# >= 2)) || usage; OUTPUT=$2; shift ;;
    --tmpfs-standby) TMPFS_STANDBY=1 ;;
    -h | --help) usage ;;
    *) log "unknown argument: $1"; usage ;;
  esac
  shift
done
enter_repository
install_missing_packages redis-server:redis-server
ensure_binaries
ETCD=${SUNDIAL_ETCD_BIN:-/usr/bin/etcd}
[[ -x $ETCD ]] || die "$ETCD is missing: run 'make deps'"
SERVER_PIDS=()
WORK=$(mktemp -d /tmp/sundial-replication-bench.XXXXXX)
trap cleanup EXIT INT TERM
RESULTS=$WORK/results.jsonl

wait_port() { wait_until "$1" "$2" "$3" "$READY_TIMEOUT_S" port_open "$4"; }

start_single() {
  local dir=$WORK/single
  mkdir -p "$dir"
  read -r SINGLE_PORT http <<<"$(free_ports 2)"
  spawn "$dir/log" "$SUNDIALD" --data-dir "$dir/data" --port "$SINGLE_PORT" --http-port "$http" \
    --fsync=always
  SINGLE_PID=$!
  wait_port sundiald "$SINGLE_PID" "$dir/log" "$SINGLE_PORT"
}

start_etcd() {
  local dir=$WORK/etcd client peer
  mkdir -p "$dir"
  read -r client peer <<<"$(free_ports 2)"
  spawn "$dir/etcd.log" "$ETCD" --name bench --data-dir "$dir/data" \
    --listen-client-urls "http://127.0.0.1:$client" --advertise-client-urls "http://127.0.0.1:$client" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "bench=http://127.0.0.1:$peer" --log-level warn
  wait_port etcd "$!" "$dir/etcd.log" "$client"
  ETCD_URL=http://127.0.0.1:$client
}

# start_cluster NAME STANDBY_DATA_PARENT: the primary (it wins the election alone), then its
# standby; ready once the standby is published as synchronous (a durable write then needs it).
# Sets CLUSTER_PORT, CLUSTER_PID (the primary) and CLUSTER_STANDBY_PID.
start_cluster() {
  local name=$1 standby_parent=$2 dir=$WORK/$1 i port http repl data
  mkdir -p "$dir"
  for i in 1 2; do
    read -r port http repl <<<"$(free_ports 3)"
    data=$dir/n$i
    ((i == 2)) && data=$standby_parent/n$i
    spawn "$dir/n$i.log" "$SUNDIALD" --data-dir "$data" --port "$port" --http-port "$http" \
      --replication-port "$repl" --cluster "$name" --node-name "n$i" \
      --etcd "$ETCD_URL" --fsync=always
    local pid=$!
    wait_port "sundiald $name n$i" "$pid" "$dir/n$i.log" "$port"
    if ((i == 1)); then
      CLUSTER_PORT=$port CLUSTER_PID=$pid
      wait_until "$name n1 leading" "$pid" "$dir/n1.log" "$READY_TIMEOUT_S" grep -q "promoted" "$dir/n1.log"
    else
      CLUSTER_STANDBY_PID=$pid
    fi
  done
  wait_until "$name sync standby" "$CLUSTER_PID" "$dir/n1.log" "$READY_TIMEOUT_S" \
    grep -q "synchronous standby is now n2" "$dir/n1.log"
}

start_redis_pair() {
  local dir=$WORK/redis
  mkdir -p "$dir/p" "$dir/r"
  read -r REDIS_PORT replica <<<"$(free_ports 2)"
  spawn "$dir/p.out" redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$dir/p" \
    --appendonly yes --appendfsync always --save '' --daemonize no --protected-mode no
  REDIS_PID=$!
  wait_port redis "$REDIS_PID" "$dir/p.out" "$REDIS_PORT"
  spawn "$dir/r.out" redis-server --port "$replica" --bind 127.0.0.1 --dir "$dir/r" \
    --appendonly yes --appendfsync always --save '' --daemonize no --protected-mode no \
    --replicaof 127.0.0.1 "$REDIS_PORT"
  wait_port "redis replica" "$!" "$dir/r.out" "$replica"
  wait_until "redis replica" "$REDIS_PID" "$dir/p.out" "$READY_TIMEOUT_S" \
    sh -c "redis-cli -p $REDIS_PORT info replication | grep -q 'slave0:.*state=online'"
}

# CPU seconds (user + system) a process has used so far.
cpu_seconds() {
  awk -v hz="$(getconf CLK_TCK)" '{ printf "%.3f", ($14 + $15) / hz }' "/proc/$1/stat"
}

# run SYSTEM TARGET PID STANDBY_PID WORKLOAD CONNECTIONS [extra bench flags] (STANDBY_PID 0: none)
run() {
  local system=$1 target=$2 pid=$3 standby=$4 workload=$5 c=$6
  shift 6
  local -a extra=("$@")
  [[ $workload == dequeue-complete ]] && extra+=(--prefill "$PREFILL")
  local out before=0 standby_cpu=0
  ((standby > 0)) && before=$(cpu_seconds "$standby")
  if out=$("$BENCH" --target "$target" --workload "$workload" -c "$c" --threads 2 \
    --duration "$DURATION" --cpu-pid "$pid" --json "${extra[@]}" 2>"$WORK/bench.err"); then
    ((standby > 0)) && standby_cpu=$(awk -v a="$before" -v b="$(cpu_seconds "$standby")" 'BEGIN { printf "%.3f", b - a }')
    printf '{"system":"%s","round":%d,"standby_cpu_s":%s,"result":%s}\n' "$system" "$ROUND" \
      "$standby_cpu" "$out" >>"$RESULTS"
  else
    log "$system $workload c=$c failed: $(tail -n 3 "$WORK/bench.err")"
  fi
}

start_single
start_etcd
start_cluster sync "$WORK/sync"
SYNC_PORT=$CLUSTER_PORT SYNC_PID=$CLUSTER_PID SYNC_STANDBY_PID=$CLUSTER_STANDBY_PID
SYSTEMS="single sync redis"
if ((TMPFS_STANDBY)); then
  [[ -d /dev/shm ]] || die "--tmpfs-standby needs /dev/shm"
  SHM=$(mktemp -d /dev/shm/sundial-replication-bench.XXXXXX)
  trap 'cleanup; rm -rf "$SHM"' EXIT INT TERM
  start_cluster sync-tmpfs "$SHM"
  TMPFS_PORT=$CLUSTER_PORT TMPFS_PID=$CLUSTER_PID TMPFS_STANDBY_PID=$CLUSTER_STANDBY_PID
  SYSTEMS="single sync sync-tmpfs redis"
fi
start_redis_pair
log "servers up; $ROUNDS rounds of ${DURATION}s per run"
for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
  for workload in enqueue dequeue-complete; do
    for c in 1 16 64; do
      run single "sundial://127.0.0.1:$SINGLE_PORT" "$SINGLE_PID" 0 "$workload" "$c"
      run sync "sundial://127.0.0.1:$SYNC_PORT" "$SYNC_PID" "$SYNC_STANDBY_PID" "$workload" "$c"
      if ((TMPFS_STANDBY)); then
        run sync-tmpfs "sundial://127.0.0.1:$TMPFS_PORT" "$TMPFS_PID" "$TMPFS_STANDBY_PID" \
          "$workload" "$c"
      fi
      run redis "redis://127.0.0.1:$REDIS_PORT" "$REDIS_PID" 0 "$workload" "$c" --redis-wait 1
    done
  done
  log "round $ROUND done"
done

"$PYTHON" - "$RESULTS" "$(machine_meta | tr '\n' ' ')" "$SYSTEMS" >"$WORK/report.md" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
systems = sys.argv[3].split()
def values(system, workload, c):
    return [r for r in rows if r["system"] == system
            and r["result"]["workload"] == workload and r["result"]["connections"] == c]
def med(system, workload, c, key):
    v = [r["result"][key] for r in values(system, workload, c)]
    return statistics.median(v) if v else float("nan")
def standby_us(system, workload, c):
    # The standby's CPU per operation: its CPU over the run, in the primary's ops.
    v = [r["standby_cpu_s"] * r["result"]["server_cpu_us_per_op"] / r["result"]["server_cpu_s"]
         for r in values(system, workload, c) if r["result"].get("server_cpu_s", 0) > 0]
    return statistics.median(v) if v else float("nan")
print(f"Machine: {sys.argv[2]}\n")
print("| workload | c | system | ops/s | × single | × redis+WAIT | p50 µs | p50 − single µs | p99 µs | primary CPU µs/op | standby CPU µs/op |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for w in ("enqueue", "dequeue-complete"):
    for c in (1, 16, 64):
        single, redis = med("single", w, c, "ops_per_sec"), med("redis", w, c, "ops_per_sec")
        single_p50 = med("single", w, c, "p50_us")
        for x in systems:
            ops, p50 = med(x, w, c, "ops_per_sec"), med(x, w, c, "p50_us")
            cluster = x.startswith("sync")
            standby = f"{standby_us(x, w, c):.1f}" if cluster else ""
            print(f"| {w} | {c} | {x} | {ops:,.0f} | {ops/single:.2f} | {ops/redis:.2f} | {p50:.0f} "
                  f"| {p50 - single_p50:+.0f} | {med(x, w, c, 'p99_us'):.0f} "
                  f"| {med(x, w, c, 'server_cpu_us_per_op'):.1f} | {standby} |")
PY
cat "$WORK/report.md"
[[ -n $OUTPUT ]] && cp "$WORK/report.md" "$OUTPUT"
exit 0
