#!/usr/bin/env bash
# What TLS costs a durable enqueue, plain and TLS measured in the same run (same machine, same
# minute, rounds interleaved).
#
#   bash bench/tls_cost.sh [--rounds N] [--duration S] [--conns "1 64"] [--base SUNDIALD]
#
# For each round and connection count: a fresh sundiald (--fsync=always, 2 io threads) per
# variant, one sundial-bench run of S seconds (durable enqueue, 100-byte payloads): plain, TLS
# (the server with --tls-cert, the bench with --tls --ca-file), and, with --base, the plain path
# of another sundiald binary (a build before TLS: the plain path must not have slowed). Prints
# each run's JSON line and then the medians. Certificates are made here with the openssl CLI
# (EC P-256). Run it under `flock /work/.bench.lock` on a shared machine.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH=${SUNDIAL_BENCH:-$ROOT/build/release/bench/sundial-bench}
SUNDIALD=${SUNDIALD:-$ROOT/build/release/server/sundiald}
rounds=3
duration=4
conns="1 64"
base=
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --conns) conns=$2; shift 2 ;;
    --base) base=$2; shift 2 ;;
    *) sed -n '2,6p' "$0" >&2; exit 2 ;;
  esac
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/sundial-tls-cost.XXXXXX")
server_pid=
cleanup() {
  if [[ -n $server_pid ]]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

# A CA and a server certificate for 127.0.0.1.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
  -keyout "$WORK/ca.key" -out "$WORK/ca.pem" -subj '/CN=bench CA' \
  -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -keyout "$WORK/server.key" -out "$WORK/server.csr" -subj '/CN=bench' 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >"$WORK/ext.cnf"
openssl x509 -req -in "$WORK/server.csr" -CA "$WORK/ca.pem" -CAkey "$WORK/ca.key" \
  -CAcreateserial -days 2 -extfile "$WORK/ext.cnf" -out "$WORK/server.pem" 2>/dev/null

# run VARIANT CONNS: one fresh server and one bench run; its JSON line on stdout, tagged.
run() {
  local variant=$1 c=$2 bin=$SUNDIALD
  local -a server_flags=() bench_flags=()
  case $variant in
    base) bin=$base ;;
    tls)
      server_flags=(--tls-cert "$WORK/server.pem" --tls-key "$WORK/server.key")
      bench_flags=(--tls --ca-file "$WORK/ca.pem") ;;
  esac
  rm -rf "$WORK/data" "$WORK/ready"
  "$bin" --data-dir "$WORK/data" --port 0 --http-port 0 --io-threads 2 --fsync always \
    --ready-file "$WORK/ready" "${server_flags[@]}" 2>"$WORK/server.log" &
  server_pid=$!
  for _ in $(seq 1 1200); do
    [[ -s $WORK/ready ]] && break
    kill -0 "$server_pid" 2>/dev/null || { cat "$WORK/server.log" >&2; exit 1; }
    sleep 0.05
  done
  [[ -s $WORK/ready ]] || { echo "tls_cost.sh: $bin did not start" >&2; exit 1; }
  local port
  port=$(sed -E 's/.*"port":([0-9]+).*/\1/' "$WORK/ready")
  local json
  json=$("$BENCH" --target "sundial://127.0.0.1:$port" --workload enqueue --connections "$c" \
    --duration "$duration" --json --cpu-pid "$server_pid" "${bench_flags[@]}")
  kill "$server_pid"
  wait "$server_pid" || true
  server_pid=
  printf '{"variant":"%s","c":%s,"run":%s}\n' "$variant" "$c" "$json"
}

variants="plain tls"
[[ -n $base ]] && variants="base plain tls"
results=$WORK/results.jsonl
for r in $(seq 1 "$rounds"); do
  for c in $conns; do
    for v in $variants; do
      run "$v" "$c" | tee -a "$results"
    done
  done
done

/usr/bin/python3 - "$results" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("\n| connections | variant | ops/s (median) | p50 µs | p99 µs | server CPU µs/op | vs plain |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for c in sorted({r["c"] for r in rows}):
    med = {}
    for v in ["base", "plain", "tls"]:
        runs = [r["run"] for r in rows if r["c"] == c and r["variant"] == v]
        if not runs:
            continue
        med[v] = {k: statistics.median(x[k] for x in runs)
                  for k in ["ops_per_sec", "p50_us", "p99_us", "server_cpu_us_per_op"]}
    for v, m in med.items():
        ratio = m["ops_per_sec"] / med["plain"]["ops_per_sec"]
        print(f"| {c} | {v} | {m['ops_per_sec']:,.0f} | {m['p50_us']:.0f} | {m['p99_us']:.0f} "
              f"| {m['server_cpu_us_per_op']:.1f} | {ratio:.3f} |")
EOF
