# dopesync: `make demo` runs the whole job end to end; `make test` runs every test.
SWIFT ?= swift
SYSTEM_PACKAGES := libarchive-dev libsqlite3-dev pkg-config libfuse3-dev
# Tools the tests drive as real archive producers (GNU tar, bsdtar, zip, zstd, xz, bzip2), what
# the demo and the benchmark's plain-script comparison call (curl, jq, python3), the C compiler
# that builds the tests' preloaded libraries and, with libfuse3, the stalling file system
# (StalledSpoolTests), and `nm`,
# which reads which modules `dopesync-bundle` links (BundleToolLinkageTests).
TEST_TOOLS := libarchive-tools zip unzip zstd xz-utils bzip2 python3 curl jq

.PHONY: deps build lint format test demo bench fuzz sanitize clean deb deb-test rules-test

# Installs the C libraries (and the archive tools the tests use) when they are missing, and the
# PostgreSQL server and client whose throwaway clusters the tests, the demo and the benchmark start
# (PostgresCluster, Scripts/pg-cluster.sh; Debian's layout, /usr/lib/postgresql/VERSION/bin).
deps:
	@missing=""; \
	for p in $(SYSTEM_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	for t in bsdtar:libarchive-tools zip:zip unzip:unzip zstd:zstd xz:xz-utils bzip2:bzip2 /usr/bin/time:time python3:python3 curl:curl jq:jq /usr/bin/cc:gcc nm:binutils ps:procps; do \
	  command -v $${t%%:*} >/dev/null 2>&1 || missing="$$missing $${t#*:}"; done; \
	{ ls /usr/lib/postgresql/*/bin/initdb && ls /usr/lib/postgresql/*/bin/psql; } >/dev/null 2>&1 || \
	  missing="$$missing postgresql postgresql-client"; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  SUDO=""; [ "$$(id -u)" -ne 0 ] && SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

build: deps
	$(SWIFT) build

# swift-format ships with the toolchain; the rules are in .swift-format (120 columns).
FORMATTED := Sources Tests Fuzz Package.swift
lint:
	$(SWIFT) format lint --strict --parallel --recursive $(FORMATTED)

# Rewrites the sources as the linter wants them (then review the diff).
format:
	$(SWIFT) format format --in-place --parallel --recursive $(FORMATTED)

# Exit tests (`#expect(processExitsWith:)`, in suites named `…ExitTests`) run in a process of
# their own. On Linux, swift-testing's exit-test monitor waits with `waitid(P_ALL, …, WNOWAIT)`,
# which returns at once, again and again, while any child of the process is a zombie not yet
# reaped; in one process with the suites that start hundreds of children it spun for a tenth of
# the suite's CPU (BENCHMARKS.md). The second run fails if it finds no exit test to run.
EXIT_TESTS := ExitTests/
# At most this many test cases at once. Unbounded, they all start together, and their set-up
# (packing bundles, starting dev servers) held both threads of Swift's cooperative pool for
# seconds: the dev servers and proxies in the same process stopped answering, and tests with a
# deadline failed. The figures, and the suite's time at 16 and 32, are in BENCHMARKS.md, "The
# suite's stalls, and the day's changes at 64".
TEST_WIDTH ?= 32
# Seconds each of the two runs may take (about 80 and 10 here) before Scripts/test-deadline.sh
# prints the tests still running, the processes under it and their threads, and ends it: a hang
# fails CI with what it was doing, not silently at CI's own limit.
TEST_DEADLINE ?= 900
test: deps lint
	$(SWIFT) build --build-tests
	SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH=$(TEST_WIDTH) ./Scripts/test-deadline.sh $(TEST_DEADLINE) \
	  .build/tests.log $(SWIFT) test --skip-build --parallel --skip '$(EXIT_TESTS)'
	SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH=$(TEST_WIDTH) ./Scripts/test-deadline.sh $(TEST_DEADLINE) \
	  .build/exit-tests.log $(SWIFT) test --skip-build --filter '$(EXIT_TESTS)'
	@grep -q 'Test run with [1-9][0-9]* test' .build/exit-tests.log || \
	  { echo "make test: no exit test ran (suites named …ExitTests)" >&2; exit 1; }

# The Prometheus alerting rules of jobs/prometheus/: `promtool check rules` and their unit tests
# (Scripts/rules-test.sh; installs Debian's prometheus package, which has promtool, if missing).
rules-test:
	./Scripts/rules-test.sh

bench: deps
	$(SWIFT) build -c release
	./Scripts/bench.sh

demo: deps
	./Scripts/demo.sh

# libFuzzer on the bundle reader and the session.json parser, FUZZ_SECONDS each (Scripts/fuzz.sh).
FUZZ_SECONDS ?= 180
fuzz: deps
	FUZZ_SECONDS=$(FUZZ_SECONDS) ./Scripts/fuzz.sh

# Every test once under AddressSanitizer, built in .build-asan (Scripts/sanitize.sh).
sanitize: deps
	./Scripts/sanitize.sh

# Debian packages (Scripts/deb-build.sh): dist/dopesync_VERSION_ARCH.deb and
# dist/dopesync-devserver_VERSION_ARCH.deb, from a release build with the Swift runtime linked
# statically, in .build-deb (15-25 minutes the first time), checked by lintian.
DEB_TOOLS := dpkg-dev lintian man-db
deb: deps
	@missing=""; \
	for p in $(DEB_TOOLS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  SUDO=""; [ "$$(id -u)" -ne 0 ] && SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi
	./Scripts/deb-build.sh

# Installs the packages `make deb` built, syncs a bundle with them, removes and purges them, and
# leaves the machine as it was (Scripts/deb-test.sh; root, through sudo). Not part of `make test`.
deb-test:
	./Scripts/deb-test.sh

clean:
	rm -rf .build .build-fuzz .build-asan .build-deb dist
