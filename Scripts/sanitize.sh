#!/usr/bin/env bash
# `make sanitize`: the whole test suite once under AddressSanitizer, in its own scratch folder
# (.build-asan), so it never disturbs the ordinary .build. The tests that run the built
# `dopesync` find the one beside the test runner (BuiltProducts.swift): the ASan build.
set -euo pipefail
cd "$(dirname "$0")/.."
scratch=.build-asan
# Swift's backtracer and ASan both want a crashing process; let ASan report.
export SWIFT_BACKTRACE=enable=no
# Leak checking stays on, for the test runner and every `dopesync` it starts; the suppressions of
# LSan's false positives on Swift are built into the binaries (Sources/CLeakSuppressions).
# Tests that measure memory allow for ASan's own (shadow memory, quarantine).
export DOPESYNC_SANITIZER=address
# Named, so that a child started with an empty environment (`env -i`, as cron does) can be given it.
ASAN_SYMBOLIZER_PATH="$(command -v llvm-symbolizer || echo /opt/swift/usr/bin/llvm-symbolizer)"
export ASAN_SYMBOLIZER_PATH
swift build --scratch-path "$scratch" --build-tests --sanitize=address
# The exit tests in a process of their own, as `make test` runs them (the Makefile says why: here
# the spinning monitor also slowed every other test of the process, and once hung it).
# Two tests at a time (swift-testing's default is twice the cores): under ASan's slowdown, four
# at once on two cores failed eight tests on their timing and once stopped making progress
# (BENCHMARKS.md, 2026-11-28). SANITIZE_WIDTH changes it.
SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH=${SANITIZE_WIDTH:-2} swift test --scratch-path "$scratch" --skip-build --sanitize=address --parallel --skip 'ExitTests/'
swift test --scratch-path "$scratch" --skip-build --sanitize=address --filter 'ExitTests/'
