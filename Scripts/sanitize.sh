#!/usr/bin/env bash
# `make sanitize`: the whole test suite once under AddressSanitizer, in its own scratch folder
# (.build-asan), so it never disturbs the ordinary .build. The tests that run the built
# `dopesync` find the one beside the test runner (BuiltProducts.swift): the ASan build.
set -euo pipefail
cd "$(dirname "$0")/.."
scratch=.build-asan
# Swift's backtracer and ASan both want a crashing process; let ASan report.
export SWIFT_BACKTRACE=enable=no
# Leak checking stays on, for the test runner and every `dopesync` it starts, less two false
# positives of LSan on Swift's packed pointers (see the file).
export LSAN_OPTIONS="suppressions=$PWD/Scripts/lsan-suppressions.txt${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
swift build --scratch-path "$scratch" --build-tests --sanitize=address
swift test --scratch-path "$scratch" --skip-build --sanitize=address --parallel
