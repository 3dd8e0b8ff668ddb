#!/usr/bin/env bash
# The examples of docs/http-api.md run as written (the ```sh blocks, in order) against a fresh
# sundiald on ephemeral ports; every `# prints: TEXT` line of a block must appear in that block's
# output. Usage: http_api_doc_test.sh SUNDIALD DOC
set -euo pipefail
sundiald=$1 doc=$2
work=$(mktemp -d)
pid=
cleanup() {
  [[ -n $pid ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

"$sundiald" --data-dir "$work/data" --bind 127.0.0.1 --port 0 --http-port 0 \
  --ready-file "$work/ready" 2>"$work/log" &
pid=$!
for _ in $(seq 300); do  # up to 30 s for the ready file
  [[ -s $work/ready ]] && break
  kill -0 "$pid" 2>/dev/null || { cat "$work/log"; exit 1; }
  sleep 0.1
done
http_port=$(grep -o '"http_port":[0-9]*' "$work/ready" | cut -d: -f2)
[[ -n $http_port ]] || { echo "no ready file"; cat "$work/log"; exit 1; }

# The blocks, one file each.
awk -v dir="$work" '
  /^```sh$/ { n++; file = sprintf("%s/block%02d.sh", dir, n); inside = 1; next }
  /^```$/ { inside = 0; next }
  inside { print > file }
' "$doc"
blocks=("$work"/block*.sh)
[[ ${#blocks[@]} -ge 5 ]] || { echo "expected at least 5 examples, found ${#blocks[@]}"; exit 1; }

failed=0
cd "$work"
for block in "${blocks[@]}"; do
  sed -i "s/127\.0\.0\.1:7401/127.0.0.1:$http_port/g" "$block"
  if ! out=$(bash -euo pipefail "$block" 2>&1); then
    echo "FAIL: $(basename "$block") exited non-zero:"; cat "$block"; echo "--- output:"; echo "$out"
    failed=1
    continue
  fi
  while IFS= read -r want; do
    if ! grep -qF -- "$want" <<<"$out"; then
      echo "FAIL: $(basename "$block") does not print: $want"; echo "--- output:"; echo "$out"
      failed=1
    fi
  done < <(sed -n 's/^# prints: //p' "$block")
done
echo "http_api_doc: ${#blocks[@]} examples run"
exit $failed
