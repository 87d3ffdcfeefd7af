#!/usr/bin/env bash
# Benchmark: `dopesync status` (text and --json) on a spool with 100,000 bundles in incoming/ (a tenth of
# them waiting for retry: mtime in the future) and 1,000 in failed/ with their sidecars. Small files:
# status opens no bundle, so their size does not matter. With sqlite3 at hand, the checkpoint database
# holds rows for them and 100,000 bundles of history. Median of several runs (hyperfine when
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

# The checkpoint database as after months of runs: a run that claims nothing creates it, then rows for the
# 10,000 waiting bundles (deferred), the failed ones, and 100,000 bundles long done (history).
if command -v sqlite3 >/dev/null; then
  # Nothing is due (min-age 100d), so the run only checks the API, which is not there: exit 75, as expected.
  status=0
  DOPESYNC_API_TOKEN=bench "$BIN/dopesync" run --spool "$SPOOL" --api http://127.0.0.1:9 --min-age 100d --progress never >/dev/null 2>&1 || status=$?
  [ "$status" -eq 75 ] || { echo "bench-status: the setup run exited $status, not 75" >&2; exit 1; }
  sqlite3 "$SPOOL/dopesync.sqlite" <<SQL
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < $INCOMING - 1)
INSERT INTO bundles (name, attempts, first_seen, next_attempt_at, last_error_reason, last_error_message, last_outcome, updated_at)
SELECT printf('bundle-%06d.tar.gz', i), 1 + i % 5, unixepoch(), unixepoch() + 600 + i, 'unreachable', 'connection refused', 'deferred', unixepoch()
FROM n WHERE i % 10 = 0;
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < $FAILED - 1)
INSERT INTO bundles (name, first_seen, last_error_reason, last_outcome, updated_at)
SELECT printf('failed-%05d.tar.gz', i), unixepoch(), 'http_422', 'failed', unixepoch() FROM n;
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 99999)
INSERT INTO bundles (name, first_seen, last_outcome, updated_at, steps_done)
SELECT printf('old-%06d.tar.gz', i), unixepoch() - 86400, 'done', unixepoch() - 86400, 20 FROM n;
SQL
fi

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
