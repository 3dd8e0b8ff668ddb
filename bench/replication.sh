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
while (($#)); do
  case $1 in
    --quick) ROUNDS=1 DURATION=1 PREFILL=20000 ;;
    --output) (($# >= 2)) || usage; OUTPUT=$2; shift ;;
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

# etcd, then the primary (it wins the election alone), then its standby; ready once the
# standby is published as synchronous (a durable write then needs it).
start_cluster() {
  local dir=$WORK/cluster client peer
  mkdir -p "$dir"
  read -r client peer <<<"$(free_ports 2)"
  spawn "$dir/etcd.log" "$ETCD" --name bench --data-dir "$dir/etcd" \
    --listen-client-urls "http://127.0.0.1:$client" --advertise-client-urls "http://127.0.0.1:$client" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "bench=http://127.0.0.1:$peer" --log-level warn
  wait_port etcd "$!" "$dir/etcd.log" "$client"
  local i http repl
  for i in 1 2; do
    read -r port http repl <<<"$(free_ports 3)"
    spawn "$dir/n$i.log" "$SUNDIALD" --data-dir "$dir/n$i" --port "$port" --http-port "$http" \
      --replication-port "$repl" --cluster bench --node-name "n$i" \
      --etcd "http://127.0.0.1:$client" --fsync=always
    local pid=$!
    wait_port "sundiald n$i" "$pid" "$dir/n$i.log" "$port"
    if ((i == 1)); then
      SYNC_PORT=$port SYNC_PID=$pid
      wait_until "n1 leading" "$pid" "$dir/n1.log" "$READY_TIMEOUT_S" grep -q "promoted" "$dir/n1.log"
    fi
  done
  wait_until "sync standby" "$SYNC_PID" "$dir/n1.log" "$READY_TIMEOUT_S" \
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
    sh -c "redis-cli -p $REDIS_PORT info replication | grep -q 'connected_slaves:1'"
}

# run SYSTEM TARGET PID WORKLOAD CONNECTIONS [extra bench flags]
run() {
  local system=$1 target=$2 pid=$3 workload=$4 c=$5
  shift 5
  local -a extra=("$@")
  [[ $workload == dequeue-complete ]] && extra+=(--prefill "$PREFILL")
  local out
  if out=$("$BENCH" --target "$target" --workload "$workload" -c "$c" --threads 2 \
    --duration "$DURATION" --cpu-pid "$pid" --json "${extra[@]}" 2>"$WORK/bench.err"); then
    printf '{"system":"%s","round":%d,"result":%s}\n' "$system" "$ROUND" "$out" >>"$RESULTS"
  else
    log "$system $workload c=$c failed: $(tail -n 3 "$WORK/bench.err")"
  fi
}

start_single
start_cluster
start_redis_pair
log "servers up; $ROUNDS rounds of ${DURATION}s per run"
for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
  for workload in enqueue dequeue-complete; do
    for c in 1 16 64; do
      run single "sundial://127.0.0.1:$SINGLE_PORT" "$SINGLE_PID" "$workload" "$c"
      run sync "sundial://127.0.0.1:$SYNC_PORT" "$SYNC_PID" "$workload" "$c"
      run redis "redis://127.0.0.1:$REDIS_PORT" "$REDIS_PID" "$workload" "$c" --redis-wait 1
    done
  done
  log "round $ROUND done"
done

"$PYTHON" - "$RESULTS" "$(machine_meta | tr '\n' ' ')" >"$WORK/report.md" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def med(system, workload, c, key):
    v = [r["result"][key] for r in rows if r["system"] == system
         and r["result"]["workload"] == workload and r["result"]["connections"] == c]
    return statistics.median(v) if v else float("nan")
print(f"Machine: {sys.argv[2]}\n")
print("| workload | c | single ops/s | sync ops/s | redis+WAIT ops/s | sync / single | sync / redis | single p50 µs | sync p50 µs | redis p50 µs |")
print("|---|---|---|---|---|---|---|---|---|---|")
for w in ("enqueue", "dequeue-complete"):
    for c in (1, 16, 64):
        s, y, r = (med(x, w, c, "ops_per_sec") for x in ("single", "sync", "redis"))
        ps, py, pr = (med(x, w, c, "p50_us") for x in ("single", "sync", "redis"))
        print(f"| {w} | {c} | {s:,.0f} | {y:,.0f} | {r:,.0f} | {y/s:.2f} | {y/r:.2f} | {ps:.0f} | {py:.0f} | {pr:.0f} |")
PY
cat "$WORK/report.md"
[[ -n $OUTPUT ]] && cp "$WORK/report.md" "$OUTPUT"
exit 0
