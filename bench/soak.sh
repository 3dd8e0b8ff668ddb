#!/usr/bin/env bash
# Soak: a durable sundiald under a mixed workload at half its measured maximum, sampled every chunk.
#
#   bash bench/soak.sh [--minutes N] [--rate OPS] [--connections N] [--out DIR] [--smoke]
#   bash bench/soak.sh --report CSV                     (plot and verdict of an earlier run only)
#
# SOAK_MINUTES (env) is the default of --minutes (60). Steps (docs/testing.md "Soak"):
#  1. Starts sundiald from build/release (`make build` when missing): --fsync=always and the
#     checkpoint defaults, a temp data dir, free ports.
#  2. Measures the maximum: sundial-bench --workload mixed, closed loop, MAX_RUNS runs of MAX_S s
#     (--connections, default 64; batch 1); the median of the runs' msg/s is "the maximum". Each of those runs
#     deletes its own queue.
#  3. Runs the mixed workload open loop at RATE = maximum / 2 (or --rate) on the queue "soak" in
#     consecutive chunks of CHUNK_S s (one sundial-bench each, with --keep: a chunk's end neither
#     drains nor deletes the queue; the first enqueues STANDING messages, which the mixed
#     workload's alternating enqueue and dequeue+complete keep as the depth). Meanwhile a side loop leases a few messages each second
#     with a 1 s lease and abandons them (the lease expires, the message is delivered again) and
#     leases a few more and fails them (retried after 200 ms).
#  4. After each chunk, one CSV row: that chunk's latency (p50, p99, p99.9, max) and msg/s, the
#     server's VmRSS and its own memory account (stats memory_bytes), open fds, data-dir bytes
#     and WAL segments (at the sample, and the most seen every 2 s during the chunk),
#     snapshots, the queue's depth, the machine's load average.
#  5. At the end: a plot (SVG, bench/soak_report.py) and the verdict (flat or not), both in DIR.
# The CSV, plot and verdict stay in DIR (default build/soak/<UTC time>); the data dir is removed.
set -euo pipefail

SCRIPT_NAME=soak.sh
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CLI=${SUNDIAL_CLI:-$ROOT/build/release/tools/sundial}
MINUTES=${SOAK_MINUTES:-60}
CHUNK_S=60          # one sample per chunk
MAX_RUNS=3          # closed-loop runs measuring the maximum
MAX_S=10            # seconds each
CONNECTIONS=${SOAK_CONNECTIONS:-64}  # compare.sh's best: group commit needs requests in flight
RATE=
OUT=
REPORT_FROM=
SMOKE=false
CHAOS_EVERY_S=1     # the side loop's period
STOP_TIMEOUT_S=60
QUEUE=soak
STANDING=1000       # messages enqueued before the first chunk: the depth the mixed workload keeps
MAX_PREFILL=10000   # the queue depth of the maximum's runs

while (($#)); do
  case $1 in
    --minutes) (($# >= 2)) || usage; MINUTES=$2; shift ;;
    --rate) (($# >= 2)) || usage; RATE=$2; shift ;;
    --connections) (($# >= 2)) || usage; CONNECTIONS=$2; shift ;;
    --out) (($# >= 2)) || usage; OUT=$2; shift ;;
    --report) (($# >= 2)) || usage; REPORT_FROM=$2; shift ;;
    --smoke) SMOKE=true ;;
    -h | --help) usage ;;
    *) log "unknown argument: $1"; usage ;;
  esac
  shift
done
# --smoke: the whole path in seconds (ctest soak_smoke): 2 chunks of 4 s, a 2 s maximum.
if $SMOKE; then MINUTES=2 CHUNK_S=4 MAX_RUNS=1 MAX_S=2 CHAOS_EVERY_S=0.5; fi
if ! [[ $MINUTES =~ ^[0-9]+$ ]] || ((MINUTES < 1)); then log "--minutes wants a whole number ≥ 1"; exit 2; fi
[[ -z $RATE || $RATE =~ ^[0-9]+([.][0-9]+)?$ ]] || { log "--rate wants a number of ops/s"; exit 2; }
[[ -n $PYTHON ]] || die "python3 is needed (Debian: apt-get install python3)"
OUT=$(absolute "$OUT") REPORT_FROM=$(absolute "$REPORT_FROM") CLI=$(absolute "$CLI")
enter_repository

REPORTER=(nice -n 0 "$PYTHON" "$ROOT/bench/soak_report.py")
if [[ -n $REPORT_FROM ]]; then
  dir=$(dirname "$REPORT_FROM")
  exec "${REPORTER[@]}" "$REPORT_FROM" --svg "$dir/soak.svg"
fi

ensure_binaries
[[ -x $CLI ]] || die "no $CLI (make build makes it)"
[[ -n $OUT ]] || OUT=$ROOT/build/soak/$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$OUT"
CSV=$OUT/soak.csv

CHAOS_PID=
SAMPLER_PID=
soak_cleanup() {
  local rc=$?
  if [[ -n $SAMPLER_PID ]]; then kill "$SAMPLER_PID" 2>/dev/null || true; wait "$SAMPLER_PID" 2>/dev/null || true; fi
  if [[ -n $CHAOS_PID ]]; then kill "$CHAOS_PID" 2>/dev/null || true; wait "$CHAOS_PID" 2>/dev/null || true; fi
  set +e  # under errexit, the (exit) below would end this trap before cleanup
  (exit "$rc")  # cleanup (lib.sh) exits with $?
  cleanup
}
trap soak_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sundial-soak.XXXXXX")
DATA=$WORK/data
mkdir -p "$DATA"

# ---------------------------------------------------------------------------------------------
# The server

read -r PORT HTTP_PORT < <(free_ports 2)
READY=$WORK/ready.json
SERVER_LOG=$OUT/sundiald.log
spawn "$SERVER_LOG" "$SUNDIALD" --data-dir "$DATA" --port "$PORT" --http-port "$HTTP_PORT" \
  --ready-file "$READY"
PID=$!
wait_until sundiald "$PID" "$SERVER_LOG" 20 test -s "$READY"
ADDR=127.0.0.1:$PORT
log "sundiald pid $PID on $ADDR (http $HTTP_PORT), data dir $DATA, --fsync=always (default)"

rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }
fds() { find "/proc/$1/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l; }
disk_bytes() { du -sb "$DATA" | awk '{ print $1 }'; }
# The data dir's largest size and segment count within a chunk, sampled every DISK_EVERY_S: a
# checkpoint cycle can be shorter than a chunk, and one sample a minute would miss its peak.
DISK_EVERY_S=2
disk_sampler() {  # OUT_FILE: rewritten with "MAX_BYTES MAX_SEGMENTS" after each sample
  local most=0 segs=0 b n
  trap 'exit 0' TERM
  while :; do
    b=$(disk_bytes 2>/dev/null || echo 0) n=$(count_files 'wal-*.log' 2>/dev/null || echo 0)
    ((b > most)) && most=$b
    ((n > segs)) && segs=$n
    echo "$most $segs" >"$1.tmp" && mv "$1.tmp" "$1"
    sleep "$DISK_EVERY_S"
  done
}
count_files() { find "$DATA" -maxdepth 1 -name "$1" | wc -l; }
newest_snapshot() { find "$DATA" -maxdepth 1 -name 'snapshot-*.snap' -printf '%f\n' | sort | tail -n 1; }

bench() {  # sundial-bench's JSON line on stdout
  "$BENCH" --target "sundial://$ADDR" --workload mixed --connections "$CONNECTIONS" --json \
    --cpu-pid "$PID" "$@"
}
json_field() {  # JSON FIELD: a number field of a one-line JSON object
  "$PYTHON" -c 'import json, sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"
}

# ---------------------------------------------------------------------------------------------
# The maximum

if [[ -z $RATE ]]; then
  declare -a maxes=()
  for ((r = 1; r <= MAX_RUNS; r++)); do
    line=$(bench --duration "$MAX_S" --queue "soak-max-$r" --prefill "$MAX_PREFILL")
    printf '%s\n' "$line" >>"$OUT/max.jsonl"
    maxes+=("$(json_field "$line" ops_per_sec)")
    log "maximum run $r/$MAX_RUNS: ${maxes[-1]} msg/s closed loop (p99 $(json_field "$line" p99_us) us)"
  done
  MAX=$(printf '%s\n' "${maxes[@]}" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
  RATE=$(awk -v m="$MAX" 'BEGIN { printf "%.0f", m / 2 }')
  log "maximum (median of $MAX_RUNS): $MAX msg/s; soak rate: $RATE ops/s open loop"
else
  MAX=
  log "soak rate: $RATE ops/s open loop (given)"
fi

# ---------------------------------------------------------------------------------------------
# The side loop: leases that expire, fails that retry

CHAOS_COUNTS=$WORK/chaos.counts
echo "0 0" >"$CHAOS_COUNTS"
chaos_loop() {
  local abandoned=0 failed=0 line id token
  trap 'exit 0' TERM
  while :; do
    # Leased for 1 s and never completed: expires, then someone else gets it.
    abandoned=$((abandoned + $("$CLI" --addr "$ADDR" dequeue "$QUEUE" --max 2 --lease-ms 1000 2>/dev/null | wc -l)))
    # Leased and failed: invisible for 200 ms, then delivered again.
    while IFS= read -r line; do
      id=$(sed -E 's/.*"id":"([^"]*)".*/\1/' <<<"$line")
      token=$(sed -E 's/.*"lease_token":([0-9]+).*/\1/' <<<"$line")
      if "$CLI" --addr "$ADDR" fail "$QUEUE" "$id" "$token" --error soak --retry-delay-ms 200 \
        >/dev/null 2>&1; then
        failed=$((failed + 1))
      fi
    done < <("$CLI" --addr "$ADDR" dequeue "$QUEUE" --max 2 --lease-ms 30000 2>/dev/null)
    echo "$abandoned $failed" >"$CHAOS_COUNTS.tmp" && mv "$CHAOS_COUNTS.tmp" "$CHAOS_COUNTS"
    sleep "$CHAOS_EVERY_S"
  done
}

# ---------------------------------------------------------------------------------------------
# The soak

{
  echo "# soak.sh $(date -u '+%Y-%m-%d %H:%M UTC') commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "# machine: $(nproc) cores, $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo), $(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo), kernel $(uname -r)"
  echo "# max_msg_per_s=${MAX:-given} rate=$RATE chunk_s=$CHUNK_S connections=$CONNECTIONS minutes=$MINUTES"
  echo "minute,elapsed_s,utc,rate,msg_per_s,p50_us,p99_us,p999_us,max_us,errors,empty,rss_kb,fds,disk_bytes,wal_segments,snapshots,snapshot,depth,errored,load1,server_cpu_s,abandoned,failed,engine_bytes,disk_max_bytes,wal_segments_max"
} >"$CSV"

# The queue exists before the side loop starts (a second create by the bench is not an error).
"$CLI" --addr "$ADDR" create-queue "$QUEUE" --retention-ms 0 --lease-ms 30000 >/dev/null
chaos_loop &
CHAOS_PID=$!

START=$SECONDS
log "soak: $MINUTES chunks of $CHUNK_S s at $RATE ops/s; CSV $CSV"
for ((m = 1; m <= MINUTES; m++)); do
  # Each chunk's ids and priorities start past the last chunk's (no id reused, FIFO across
  # chunks); only the first enqueues the standing messages.
  # A chunk whose requests failed exits 1 but still reports: its errors go into the CSV (and
  # first_error into chunks.jsonl) and the soak goes on; no report at all ends it.
  rc=0
  echo "0 0" >"$WORK/disk.max"
  disk_sampler "$WORK/disk.max" &
  SAMPLER_PID=$!
  line=$(bench --duration "$CHUNK_S" --rate "$RATE" --queue "$QUEUE" --keep \
    --prefill $((m == 1 ? STANDING : 0)) --sequence-start $((m * 1000000000))) || rc=$?
  kill "$SAMPLER_PID" 2>/dev/null || true
  wait "$SAMPLER_PID" 2>/dev/null || true
  SAMPLER_PID=
  read -r disk_max segs_max <"$WORK/disk.max"
  disk_now=$(disk_bytes) segs_now=$(count_files 'wal-*.log')
  ((disk_now > disk_max)) && disk_max=$disk_now
  ((segs_now > segs_max)) && segs_max=$segs_now
  [[ $line == "{"* ]] || die "chunk $m: sundial-bench exited $rc without a report"
  ((rc == 0)) || log "chunk $m: sundial-bench exited $rc: $line"
  printf '%s\n' "$line" >>"$OUT/chunks.jsonl"
  alive "$PID" || die "sundiald exited during chunk $m; see $SERVER_LOG"
  counts=$("$CLI" --addr "$ADDR" count "$QUEUE")
  stats=$("$CLI" --addr "$ADDR" stats)
  read -r abandoned failed <"$CHAOS_COUNTS"
  row=$("$PYTHON" - "$line" "$counts" "$stats" <<'PY'
import json, sys
b, c, s = (json.loads(a) for a in sys.argv[1:4])
depth = c["pending"] + c["invisible"] + c["running"]
print(",".join(str(x) for x in [b["ops_per_sec"], b["p50_us"], b["p99_us"], b["p999_us"], b["max_us"],
                                b["errors"], b["empty"]]), depth, c["errored"], b["server_cpu_s"],
      s["memory_bytes"], sep=" ")
PY
)
  read -r bench_fields depth errored cpu engine_bytes <<<"$row"
  printf '%d,%d,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n' "$m" $((SECONDS - START)) \
    "$(date -u +%H:%M:%S)" "$RATE" "$bench_fields" "$(rss_kb "$PID")" "$(fds "$PID")" \
    "$disk_now" "$segs_now" "$(count_files 'snapshot-*.snap')" \
    "$(newest_snapshot)" "$depth" "$errored" "$(cut -d' ' -f1 /proc/loadavg)" "$cpu" \
    "$abandoned" "$failed" "$engine_bytes" "$disk_max" "$segs_max" >>"$CSV"
  log "chunk $m/$MINUTES: $(tail -n 1 "$CSV")"
done

kill "$CHAOS_PID" 2>/dev/null || true
wait "$CHAOS_PID" 2>/dev/null || true
CHAOS_PID=
"$CLI" --addr "$ADDR" stats >"$OUT/stats.json" || true
stop_pid "$PID"
log "sundiald stopped; last lines of its log:"
tail -n 3 "$SERVER_LOG" >&2 || true

if $SMOKE; then
  "${REPORTER[@]}" "$CSV" --svg "$OUT/soak.svg" --smoke | tee "$OUT/verdict.txt"
else
  "${REPORTER[@]}" "$CSV" --svg "$OUT/soak.svg" | tee "$OUT/verdict.txt"
fi
