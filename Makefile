# Thin wrapper over CMake presets. See README.md.
#   make deps   install missing Debian build dependencies (quiet when all present)
#   make build  release build (build/release)
#   make test   deps + release, asan and tsan builds, every test suite and the thread-safety check
#   make test-thread-safety  clang -Wthread-safety on the product's sources, nothing linked
#               (cmake/thread_safety.cmake, docs/testing.md "Thread-safety analysis")
#   make run    deps + build, then start sundiald with data in ./data (ARGS='--fsync=never' adds flags)
#   make package  the Debian package: build/release/package/sundial_<version>_amd64.deb (docs/packaging.md)
#   make bench  engine and WAL microbenchmarks (release build)
#   make bench-recovery  recovery/checkpoint benchmarks at 1M and 10M messages (~6 min, ~6 GB disk)
#   make fuzz   every libFuzzer target (tests/fuzz) for FUZZ_SECONDS (default 60) each (clang)
#   make torture  crash torture: TORTURE_ROUNDS (1000) rounds of SIGKILLs of a real sundiald under
#                 client processes, at random and at every failpoint, then the checker (~3 min)
#   make failover-torture  failover torture: etcd and three nodes on loopback under a seeded nemesis
#                 (kill -9, SIGSTOP, partitions, switchover...) for FAILOVER_ROUNDS (100) faults,
#                 FAILOVER_SEED (the time), then the checker (~10 min)
#   make failover-torture-controls  its two negative controls, which must find violations (~1 min)
#   make format clang-format every source file

.PHONY: all deps build test test-release test-thread-safety test-asan test-tsan run package bench \
        bench-recovery fuzz torture failover-torture failover-torture-controls format clean

all: build

deps:
	@scripts/deps.sh

build: deps
	@cmake --preset release >/dev/null
	@cmake --build --preset release

test: test-release test-thread-safety test-asan test-tsan

test-release: build
	@ctest --preset release

test-thread-safety: deps
	@cmake --preset release >/dev/null
	@cmake --build --preset release --target thread_safety

test-asan: deps
	@cmake --preset asan >/dev/null
	@cmake --build --preset asan
	@ctest --preset asan

test-tsan: deps
	@cmake --preset tsan >/dev/null
	@cmake --build --preset tsan
	@ctest --preset tsan

run: build
	@mkdir -p data
	@echo "Starting sundiald: binary TCP on 127.0.0.1:7400, HTTP/WebSocket on 127.0.0.1:7401, data in ./data."
	@echo "In another shell (Ctrl-C here stops the server cleanly):"
	@echo "  build/release/tools/sundial enqueue emails --payload 'hello' --priority 5"
	@echo "  build/release/tools/sundial dequeue emails --lease-ms 30000"
	@echo "  build/release/tools/sundial complete emails ID LEASE_TOKEN"
	@echo "  curl -s 127.0.0.1:7401/metrics | grep sundial_messages"
	@exec build/release/server/sundiald --data-dir ./data $(ARGS)

package: deps
	@cmake --preset release >/dev/null
	@cmake --build --preset release --target sundiald sundial sundial-wal sundial-bench sundial_deb_files
	@cd build/release && cpack -G DEB
	@ls build/release/package/sundial_*_amd64.deb

bench: build
	@build/release/bench/engine_bench
	@build/release/bench/wal_bench

bench-recovery: build
	@build/release/bench/recovery_bench

fuzz: deps
	@cmake --preset fuzz >/dev/null
	@cmake --build --preset fuzz
	@scripts/fuzz.sh

TORTURE_ROUNDS ?= 1000
TORTURE_CLIENTS ?= 4
TORTURE_SEED ?= $(shell date +%s)
torture: deps
	@cmake --preset release >/dev/null
	@cmake --build --preset release --target torture sundiald-failpoints
	@nice -n 10 build/release/tests/torture/torture run \
	  --server build/release/tests/torture/sundiald-failpoints --dir build/release/torture-run \
	  --rounds $(TORTURE_ROUNDS) --clients $(TORTURE_CLIENTS) --seed $(TORTURE_SEED)

# docs/testing.md, "Failover torture".
FAILOVER_ROUNDS ?= 100
FAILOVER_SEED ?= $(shell date +%s)
FAILOVER_TORTURE = build/release/tests/torture/failover_torture
failover-torture: deps
	@cmake --preset release >/dev/null
	@cmake --build --preset release --target failover_torture sundiald
	@nice -n 10 $(FAILOVER_TORTURE) run --server build/release/server/sundiald \
	  --dir build/release/failover-torture-run --rounds $(FAILOVER_ROUNDS) --seed $(FAILOVER_SEED)

# (a) async replication, standbys 300 ms behind, kill -9 of the primary: acknowledged writes are
# lost. (b) the planted bug no_fencing (sundiald-failpoints) under SIGSTOPs of the primary.
# Each passes when the checker finds what it must.
failover-torture-controls: deps
	@cmake --preset release >/dev/null
	@cmake --build --preset release --target failover_torture sundiald sundiald-failpoints
	@nice -n 10 $(FAILOVER_TORTURE) run --server build/release/server/sundiald \
	  --dir build/release/failover-control-async --rounds 2 --seed $(FAILOVER_SEED) \
	  --replication async --replication-delay-ms 300 --nemesis kill-primary \
	  --restart-delay-ms 4000 --expect lost
	@nice -n 10 $(FAILOVER_TORTURE) run --server build/release/tests/torture/sundiald-failpoints \
	  --dir build/release/failover-control-fencing --rounds 4 --seed $(FAILOVER_SEED) \
	  --bug no_fencing --nemesis pause-primary --expect violations

format:
	@git ls-files '*.h' '*.cc' | xargs clang-format -i

clean:
	@rm -rf build
