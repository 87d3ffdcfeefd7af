#!/usr/bin/env bash
# `make sanitize`: the whole test suite once under AddressSanitizer, in its own scratch folder
# (.build-asan), so it never disturbs the ordinary .build. The tests that run the built
# `dopesync` find the one beside the test runner (BuiltProducts.swift): the ASan build.
set -euo pipefail
cd "$(dirname "$0")/.."
scratch=.build-asan
# Swift's backtracer and ASan both want a crashing process; let ASan report.
export SWIFT_BACKTRACE=enable=no
swift build --scratch-path "$scratch" --build-tests --sanitize=address
swift test --scratch-path "$scratch" --skip-build --sanitize=address --parallel
