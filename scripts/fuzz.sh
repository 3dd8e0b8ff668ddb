#!/usr/bin/env bash
# Runs every libFuzzer target of the `fuzz` preset (tests/fuzz) for FUZZ_SECONDS each (default
# 60), one after the other. Called by `make fuzz` after the build; FUZZ_TARGETS="a b" runs a
# subset. Per target: the checked-in seeds (tests/fuzz/<t>/corpus) and regressions are read,
# new inputs go to build/fuzz/corpus/<t> (kept between runs, never checked in wholesale), and
# a finding is written to build/fuzz/findings/<t>/ and fails the run.
#
# Limits that make findings of what would hurt a server: an input that runs longer than
# -timeout seconds is a hang, a process above -rss_limit_mb (or one malloc above it) is an
# over-limit allocation; ASan reports leaks at exit of each input batch.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${FUZZ_SECONDS:-60}
targets=${FUZZ_TARGETS:-"tcp_frame ws_json http_api wal_segment snapshot config replication_stream"}
bin=build/fuzz/tests/fuzz

max_len() {
  case $1 in
    tcp_frame | ws_json | http_api) echo 16384 ;;
    wal_segment | snapshot) echo 65536 ;;
    config | replication_stream) echo 4096 ;;
  esac
}

status=0
for t in $targets; do
  corpus=build/fuzz/corpus/$t findings=build/fuzz/findings/$t
  mkdir -p "$corpus" "$findings"
  inputs=("$corpus" "tests/fuzz/$t/corpus")
  [[ -d tests/fuzz/$t/regressions ]] && inputs+=("tests/fuzz/$t/regressions")
  echo "fuzz: $t for ${seconds}s (log: build/fuzz/$t.log)"
  if "$bin/${t}_fuzz" -max_total_time="$seconds" -max_len="$(max_len "$t")" -timeout=10 \
      -rss_limit_mb=2048 -malloc_limit_mb=1024 -print_final_stats=1 \
      -dict="tests/fuzz/$t.dict" -artifact_prefix="$findings/" "${inputs[@]}" \
      >"build/fuzz/$t.log" 2>&1; then
    grep -E "^#[0-9]+.*(DONE|pulse|NEW|REDUCE)" "build/fuzz/$t.log" | tail -1 || true
    grep -E "stat::(number_of_executed_units|average_exec_per_sec)" "build/fuzz/$t.log" || true
  else
    echo "fuzz: $t FOUND SOMETHING: see build/fuzz/$t.log and $findings/"
    tail -40 "build/fuzz/$t.log"
    status=1
  fi
  # Each run's log kept, for the figures docs/testing.md quotes (seconds, execs/s, edges).
  mkdir -p build/fuzz/logs
  cp "build/fuzz/$t.log" "build/fuzz/logs/$t-$(date -u +%Y%m%dT%H%M%SZ)-${seconds}s.log"
done
exit $status
