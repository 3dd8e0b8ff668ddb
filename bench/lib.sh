# shellcheck shell=bash
# What bench/compare.sh and bench/scale.sh share. Each script starts with
#
#   SCRIPT_NAME=compare.sh
#   # shellcheck source-path=SCRIPTDIR source=lib.sh
#   source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#
# SCRIPT_NAME begins every log line and names the report's markers ("<!-- compare.sh:begin -->"
# and "<!-- compare.sh:end -->") and the work dir. The script sets STOP_TIMEOUT_S, and defines
# report_body RESULTS (the markdown of the report, without its markers, on stdout) for
# write_report.
: "${SCRIPT_NAME:?set SCRIPT_NAME before sourcing lib.sh}"

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH=${SUNDIAL_BENCH:-$ROOT/build/release/bench/sundial-bench}  # other builds: set these two
SUNDIALD=${SUNDIALD:-$ROOT/build/release/server/sundiald}
OUTPUT=$ROOT/docs/BENCHMARKS.md
KEEP_RESULTS=
FROM_RESULTS=

usage() {  # lines 2 to 6 of the script: its usage
  sed -n '2,6p' "${BASH_SOURCE[-1]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

log() { printf '%s\n' "$SCRIPT_NAME: $*" >&2; }
die() { log "$*"; exit 1; }

min_s() { printf '%d min %d s' $(($1 / 60)) $(($1 % 60)); }  # SECONDS as "M min S s"

# File arguments are relative to where the script was started; then work from the repository.
absolute() { if [[ -z $1 || $1 == /* ]]; then printf '%s' "$1"; else printf '%s' "$PWD/$1"; fi; }
enter_repository() {
  OUTPUT=$(absolute "$OUTPUT") KEEP_RESULTS=$(absolute "$KEEP_RESULTS") FROM_RESULTS=$(absolute "$FROM_RESULTS")
  BENCH=$(absolute "$BENCH") SUNDIALD=$(absolute "$SUNDIALD")
  cd "$ROOT" || exit
}

# The system python3 first: a version manager's shim (pyenv) costs ~0.3 s a call.
find_python() {
  if [[ -x /usr/bin/python3 ]]; then PYTHON=/usr/bin/python3; else PYTHON=$(command -v python3 || true); fi
}
PYTHON=
find_python

# ---------------------------------------------------------------------------------------------
# Prerequisites

as_root() {
  if ((EUID == 0)); then "$@"; else sudo "$@"; fi
}

# install_missing_packages [COMMAND:PACKAGE...]: installs from Debian python3 when there is none,
# and PACKAGE for each COMMAND that is not on the PATH.
install_missing_packages() {
  local -a missing=()
  local need
  [[ -n $PYTHON ]] || missing+=(python3)
  for need in "$@"; do
    command -v "${need%%:*}" >/dev/null || missing+=("${need#*:}")
  done
  ((${#missing[@]} == 0)) && return 0
  log "installing from Debian: ${missing[*]}"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
  find_python
  # The redis-server package may start a system service on 6379: it is left alone, never used.
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
    if ! port_open "$port"; then found+=("$port"); fi
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

# spawn LOG COMMAND...: starts COMMAND in the background, its output appended to LOG; its PID,
# in $! after the call, is stopped at exit if still running.
spawn() {
  local logfile=$1
  shift
  "$@" >>"$logfile" 2>&1 &
  SERVER_PIDS+=("$!")
}

# wait_until NAME PID LOG TIMEOUT COMMAND...: until COMMAND succeeds, while PID lives. When PID
# exits first, or TIMEOUT seconds pass: a message, the last lines of LOG, and exit 1. The message
# says "exited" / "not ready", or what the caller has in EXITED_SAYS / NOT_READY_SAYS.
wait_until() {
  local name=$1 pid=$2 logfile=$3 timeout=$4 start
  shift 4
  start=$SECONDS
  while :; do
    if ! alive "$pid"; then
      log "$name (pid $pid) ${EXITED_SAYS:-exited}; last lines of $logfile:"
      tail -n 20 "$logfile" >&2 || true
      exit 1
    fi
    "$@" && return 0
    if ((SECONDS - start >= timeout)); then
      log "$name (pid $pid) ${NOT_READY_SAYS:-not ready} after $timeout s; last lines of $logfile:"
      tail -n 20 "$logfile" >&2 || true
      exit 1
    fi
    sleep 0.05
  done
}

stop_pid() {  # SIGTERM, SIGKILL after STOP_TIMEOUT_S; then no longer in SERVER_PIDS
  local pid=$1 i
  if alive "$pid"; then
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < STOP_TIMEOUT_S * 20; i++)); do
      alive "$pid" || break
      sleep 0.05
    done
    if alive "$pid"; then
      log "pid $pid still running ${STOP_TIMEOUT_S} s after SIGTERM: SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  wait "$pid" 2>/dev/null || true
  local -a rest=()
  local p
  for p in "${SERVER_PIDS[@]}"; do [[ $p == "$pid" ]] || rest+=("$p"); done
  SERVER_PIDS=("${rest[@]}")
}

stop_all_servers() {
  local pid
  for pid in "${SERVER_PIDS[@]}"; do stop_pid "$pid"; done
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  stop_all_servers
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

# ---------------------------------------------------------------------------------------------
# A run: results as JSON lines in RESULTS; the report is made from them alone.

RESULTS=

# start_run COMMAND:PACKAGE...: with --from-results, only rewrites the report from that file, and
# exits. Else installs what is missing, checks the binaries, and makes WORK, the work dir (removed
# at exit, once the servers still running are stopped), and RESULTS, an empty file in it.
start_run() {
  if [[ -n $FROM_RESULTS ]]; then
    install_missing_packages
    [[ -r $FROM_RESULTS ]] || die "cannot read $FROM_RESULTS"
    write_report "$FROM_RESULTS" "$OUTPUT"
    exit 0
  fi
  install_missing_packages "$@"
  ensure_binaries
  trap cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/sundial-${SCRIPT_NAME%.sh}.XXXXXX")
  RESULTS=$WORK/results.jsonl
  : >"$RESULTS"
}

# The machine, Redis's version and Sundial's commit now, as KEY=VALUE lines for the results' meta
# line (sundial_dirty_json: true when the working tree has uncommitted changes).
machine_meta() {
  local dirty=false
  git -C "$ROOT" diff --quiet HEAD -- 2>/dev/null || dirty=true
  printf '%s\n' \
    "date_utc=$(date -u '+%Y-%m-%d %H:%M UTC')" \
    "nproc=$(nproc)" \
    "cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)" \
    "kernel=$(uname -r)" \
    "ram=$(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)" \
    "loadavg=$(cut -d' ' -f1-3 /proc/loadavg)" \
    "redis_version=$(redis-server --version 2>&1 | head -n 1)" \
    "sundial_commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)" \
    "sundial_dirty_json=$dirty"
}

# finish_run: copies RESULTS to KEEP_RESULTS when asked, and writes the report.
finish_run() {
  if [[ -n $KEEP_RESULTS ]]; then
    cp "$RESULTS" "$KEEP_RESULTS"
    log "results (JSON lines) kept in $KEEP_RESULTS"
  fi
  write_report "$RESULTS" "$OUTPUT"
}

# ---------------------------------------------------------------------------------------------
# Report

# write_report RESULTS OUTPUT: the script's report_body RESULTS, between the markers, replaces the
# part of OUTPUT from one marker to the other (or, without both, is appended). OUTPUT is replaced
# in one step (a temp file renamed), its mode kept; it is made if missing. Nothing is written when
# report_body fails.
write_report() {
  local results=$1 output=$2 body
  body=$(report_body "$results")
  "$PYTHON" - "$output" "$SCRIPT_NAME" 3<<<"$body" <<'PY'
import os, sys, tempfile

output_path, script = sys.argv[1:3]
BEGIN, END = f"<!-- {script}:begin -->", f"<!-- {script}:end -->"
with open(3, encoding="utf-8") as f:
    section = "\n".join([BEGIN, f.read().rstrip("\n"), END]) + "\n"

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
        print(f"{script}: {output_path}: {BEGIN} without {END}; appending a new section",
              file=sys.stderr)
    sep = "" if not doc else ("\n" if doc.endswith("\n") else "\n\n")
    new = doc + sep + section
directory = os.path.dirname(os.path.abspath(output_path))
fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.splitext(script)[0] + ".")
with os.fdopen(fd, "w", encoding="utf-8") as f:
    f.write(new)
os.chmod(tmp, os.stat(output_path).st_mode & 0o7777 if os.path.exists(output_path) else 0o644)
os.replace(tmp, output_path)
print(f"{script}: wrote {output_path}", file=sys.stderr)
PY
}
