#!/usr/bin/env bash
# Installs the Debian packages Sundial builds with, only those that are missing.
# Quiet when everything is present. Called by `make deps` (and so by `make run` / `make test`).
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config clang-format
  libboost1.81-dev libboost-json1.81-dev libflatbuffers-dev flatbuffers-compiler libxxhash-dev
  libgtest-dev libgmock-dev libbenchmark-dev librapidcheck-dev
  libcli11-dev libfmt-dev libspdlog-dev libhiredis-dev
  liburing-dev  # bench/transport_floor.cc: the transport's floor over io_uring (docs/BENCHMARKS.md)
  libhowardhinnant-date-dev tzdata  # cron schedules' time zones (engine/cron.cc): the tz database
  libssl-dev openssl  # TLS (server/tls.h, the clients); tests/e2e/tls_test.cc makes certificates with openssl
  python3-flatbuffers python3-pytest  # the Python client (clients/python) and its tests
  nodejs node-typescript  # the TypeScript client (clients/node): node and npm, Debian's tsc 4.8; npm packages from its package-lock.json
  chromium chromium-driver python3-selenium  # the dashboard's browser tests (tests/browser)
  clang libclang-rt-14-dev  # the fuzz targets (tests/fuzz, `make fuzz`): libFuzzer
  etcd-server etcd-client  # HA coordination (docs/replication.md); tests start their own etcd
  python3-wsproto  # the Python client's watch (WebSocket subscribe)
  prometheus python3-yaml  # promtool and YAML for tests/monitoring (contrib/monitoring)
  lintian help2man adduser  # the Debian package (`make package`): its check (tests/packaging), man pages, its Depends
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
((${#missing[@]} == 0)) && exit 0

echo "deps: installing ${missing[*]}"
sudo=()
if ((EUID != 0)); then sudo=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
