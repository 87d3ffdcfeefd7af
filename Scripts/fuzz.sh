#!/usr/bin/env bash
# `make fuzz`: builds the two libFuzzer targets with `-sanitize=fuzzer,address`, makes the seed
# corpus (Scripts/fuzz-seeds.sh), and runs each target for FUZZ_SECONDS (default 180).
# Exits non-zero, naming each file, if any crash, ASan report, leak, timeout or out-of-memory
# was found.
#
#   FUZZ_SECONDS=900 ./Scripts/fuzz.sh         # 15 minutes per target
#   FUZZ_TARGETS=session-fuzz ./Scripts/fuzz.sh
#   SKIP_BUILD=1 ./Scripts/fuzz.sh              # reuse the last build
#
# Everything goes under .fuzz/ (git-ignored): seeds/ (made afresh), corpus/TARGET/ (what the
# fuzzer found interesting, kept from run to run), artifacts/TARGET/ (crashers: crash-*,
# leak-*, timeout-*, oom-*), logs/TARGET.log. Replay one file: `.build-fuzz/release/TARGET FILE`.
#
# Each target runs in libFuzzer's fork mode: a timeout or an out-of-memory is written to
# artifacts/ and fuzzing goes on (so one slow input does not end the run); a crash stops that
# target at once.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
seconds="${FUZZ_SECONDS:-180}"
targets="${FUZZ_TARGETS:-bundle-reader-fuzz session-fuzz}"
scratch="$root/.build-fuzz"
state="$root/.fuzz"

if [ -z "${SKIP_BUILD:-}" ]; then
    for target in $targets; do
        # The fuzz targets exist only with DOPESYNC_FUZZ=1 (Package.swift). lld, because gold
        # fails on libFuzzer's whole-archive link with an internal error.
        DOPESYNC_FUZZ=1 swift build --scratch-path "$scratch" -c release \
            -Xswiftc -sanitize=fuzzer,address -Xswiftc -use-ld=lld --product "$target"
    done
fi

./Scripts/fuzz-seeds.sh "$state/seeds"

# The bundle target writes its input to one file in TMPDIR: keep it in memory.
scratch_files="$(mktemp -d /dev/shm/dopesync-fuzz.XXXXXX 2>/dev/null || mktemp -d)"
trap 'rm -rf "$scratch_files"' EXIT
export TMPDIR="$scratch_files"
# Crashes are reported by libFuzzer and ASan, not by Swift's backtracer (which would hold the
# process for seconds per crash).
export SWIFT_BACKTRACE=enable=no

status=0
for target in $targets; do
    case "$target" in
        bundle-reader-fuzz) seeds=bundle; dict=Fuzz/bundle.dict; max_len=65536 ;;
        session-fuzz) seeds=session; dict=Fuzz/session.dict; max_len=32768 ;;
        *) echo "unknown fuzz target: $target" >&2; exit 2 ;;
    esac
    corpus="$state/corpus/$target"
    artifacts="$state/artifacts/$target"
    log="$state/logs/$target.log"
    mkdir -p "$corpus" "$artifacts" "$(dirname "$log")"
    before="$(mktemp)"
    ls "$artifacts" > "$before"

    echo "== $target: ${seconds}s, corpus $corpus, log $log"
    set +e
    "$scratch/release/$target" "$corpus" "$state/seeds/$seeds" \
        -dict="$dict" -max_len="$max_len" -max_total_time="$seconds" \
        -rss_limit_mb=2048 -timeout=20 \
        -fork=1 -ignore_timeouts=1 -ignore_ooms=1 \
        -artifact_prefix="$artifacts/" -print_final_stats=1 > "$log" 2>&1
    code=$?
    set -e

    grep -E '^#[0-9]+' "$log" | tail -n 1 | sed 's/^/   last: /' || true
    new="$(ls "$artifacts" | grep -vxF -f "$before" || true)"
    rm -f "$before"
    if [ -n "$new" ]; then
        status=1
        echo "   FOUND (replay with: $scratch/release/$target FILE):"
        for file in $new; do echo "   $artifacts/$file"; done
        grep -E 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|Fatal error|SUMMARY' "$log" | sort | uniq -c | head -n 20 | sed 's/^/   /' || true
    elif [ "$code" -ne 0 ]; then
        status=1
        echo "   $target exited with $code and left no artifact; see $log"
    else
        echo "   nothing found"
    fi
done
exit "$status"
