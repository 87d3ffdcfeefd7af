#!/usr/bin/env bash
# Benchmark: `dopesync status` (text and --json) on a spool with 100,000 bundles in incoming/ (a tenth of
# them waiting for retry: mtime in the future) and 1,000 in failed/ with their sidecars. Small files:
# status opens no bundle, so their size does not matter. Median of several runs (hyperfine when
# available, else /usr/bin/time). Release build expected in $BIN.
set -euo pipefail
BIN=${BIN:-.build/release}
RUNS=${RUNS:-5}
INCOMING=${INCOMING:-100000}
FAILED=${FAILED:-1000}
SPOOL=$(mktemp -d "${TMPDIR:-/tmp}/dopesync-bench-status.XXXXXX")
trap 'rm -rf "$SPOOL"' EXIT
mkdir -p "$SPOOL"/{tmp,incoming,processing,done,failed}

echo "making $INCOMING bundles in incoming/ and $FAILED in failed/ under $SPOOL..."
python3 - "$SPOOL" "$INCOMING" "$FAILED" <<'PY'
import os, sys, time
spool, incoming, failed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
now = time.time()
for i in range(incoming):
    path = f"{spool}/incoming/bundle-{i:06d}.tar.gz"
    with open(path, "wb") as f:
        f.write(b"x" * 64)
    if i % 10 == 0:  # deferred: next attempt in the future
        os.utime(path, (now, now + 600 + i))
for i in range(failed):
    name = f"failed-{i:05d}.tar.gz"
    with open(f"{spool}/failed/{name}", "wb") as f:
        f.write(b"x" * 64)
    with open(f"{spool}/failed/{name}.error", "w") as f:
        f.write(f"bundle: {name}\nsession: S-{i}\nfailed_at: 2026-01-01T00:00:00Z\nreason: http_422\n"
                f"http_status: 422\nmessage: ammunitionId: unknown_reference (was 9999)\nattempts: 0\n")
PY

"$BIN/dopesync" status --spool "$SPOOL" | head -12 || true
if command -v hyperfine >/dev/null; then
  hyperfine --warmup 1 --runs "$RUNS" --export-json "$SPOOL.json" \
    "$BIN/dopesync status --spool $SPOOL" "$BIN/dopesync status --json --spool $SPOOL"
  python3 - "$SPOOL.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    print(f"median {r['median']:.3f} s  {r['command']}")
PY
  rm -f "$SPOOL.json"
else
  for args in "" "--json"; do
    times=()
    for _ in $(seq "$RUNS"); do
      times+=("$( { /usr/bin/time -f %e "$BIN/dopesync" status $args --spool "$SPOOL" >/dev/null; } 2>&1 )")
    done
    printf 'median %s s  dopesync status %s\n' "$(printf '%s\n' "${times[@]}" | sort -n | sed -n "$(( (RUNS + 1) / 2 ))p")" "$args"
  done
fi
