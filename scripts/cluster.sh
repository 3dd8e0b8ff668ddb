#!/usr/bin/env bash
# A local three-node Sundial cluster on loopback, for trying high availability in one command
# (docs/operations.md, "High availability"): one etcd (Debian's etcd-server) and three sundiald
# nodes, each with its own data directory under DIR. Ctrl-C stops them all cleanly.
#
#   bash scripts/cluster.sh [--dir DIR] [--base-port PORT] [-- extra sundiald flags]
#
# Node i (1..3) listens on PORT+10(i-1) (binary TCP), +1 (HTTP/dashboard), +2 (replication);
# etcd on PORT+50 (clients) and PORT+51 (peers). Defaults: DIR=./data/cluster, PORT=7400, so the
# nodes are 127.0.0.1:7400, :7410 and :7420 and the CLI reaches whichever is primary with
#   build/release/tools/sundial --addr 127.0.0.1:7400,127.0.0.1:7410,127.0.0.1:7420 cluster status
set -euo pipefail

dir=./data/cluster
base=7400
extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dir) dir="$2"; shift 2 ;;
    --base-port) base="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "cluster.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done

root="$(cd "$(dirname "$0")/.." && pwd)"
sundiald="${SUNDIALD:-$root/build/release/server/sundiald}"
etcd_bin="${SUNDIAL_ETCD_BIN:-/usr/bin/etcd}"
if [[ ! -x "$sundiald" ]]; then
  echo "cluster.sh: $sundiald is not built: run 'make build' first" >&2
  exit 1
fi
if [[ ! -x "$etcd_bin" ]]; then
  echo "cluster.sh: $etcd_bin is missing: run 'make deps' (it installs Debian's etcd-server)" >&2
  exit 1
fi

mkdir -p "$dir"
pids=()
stop() {
  trap - INT TERM EXIT
  echo
  echo "Stopping the cluster..."
  # Nodes first (a primary gives its lease back), etcd last.
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill -TERM "${pids[$i]}" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap stop INT TERM EXIT

etcd_client="http://127.0.0.1:$((base + 50))"
etcd_peer="http://127.0.0.1:$((base + 51))"
"$etcd_bin" --name sundial-local --data-dir "$dir/etcd" \
  --listen-client-urls "$etcd_client" --advertise-client-urls "$etcd_client" \
  --listen-peer-urls "$etcd_peer" --initial-advertise-peer-urls "$etcd_peer" \
  --initial-cluster "sundial-local=$etcd_peer" --log-level warn >"$dir/etcd.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  curl -sf -X POST -d '{}' "$etcd_client/v3/maintenance/status" >/dev/null 2>&1 && break
  sleep 0.1
done

addrs=()
for i in 1 2 3; do
  port=$((base + 10 * (i - 1)))
  mkdir -p "$dir/n$i"
  rm -f "$dir/n$i.ready"
  "$sundiald" --data-dir "$dir/n$i" --port "$port" --http-port $((port + 1)) \
    --replication-port $((port + 2)) --cluster local --node-name "n$i" --etcd "$etcd_client" \
    --ready-file "$dir/n$i.ready" "${extra[@]}" >"$dir/n$i.log" 2>&1 &
  pids+=($!)
  addrs+=("127.0.0.1:$port")
done
for i in 1 2 3; do
  for _ in $(seq 100); do [[ -s "$dir/n$i.ready" ]] && break; sleep 0.1; done
  [[ -s "$dir/n$i.ready" ]] || { echo "cluster.sh: node n$i did not start; see $dir/n$i.log" >&2; exit 1; }
done

list="$(IFS=,; echo "${addrs[*]}")"
cat <<EOF
A three-node cluster "local" is up (etcd at $etcd_client, logs and data in $dir):
  n1  127.0.0.1:$base        dashboard http://127.0.0.1:$((base + 1))/
  n2  127.0.0.1:$((base + 10))        dashboard http://127.0.0.1:$((base + 11))/
  n3  127.0.0.1:$((base + 20))        dashboard http://127.0.0.1:$((base + 21))/
In another shell:
  build/release/tools/sundial --addr $list cluster status
  build/release/tools/sundial --addr $list enqueue emails --payload hello
  kill -9 <the primary's pid, from 'cluster status'>   # a standby takes over within seconds
Ctrl-C here stops everything.
EOF
# A node killed on purpose does not end the cluster: wait until Ctrl-C (or every process ended).
wait || true
