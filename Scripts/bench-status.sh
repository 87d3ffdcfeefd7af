#!/usr/bin/env bash
# Benchmark: `dopesync status` (text and --json) on a spool with 100,000 bundles in incoming/ (a tenth of
# them waiting for retry: mtime in the future) and 1,000 in failed/ with their sidecars. Small files:
# status opens no bundle, so their size does not matter. With sqlite3 at hand, the checkpoint database
# holds rows for them and 100,000 bundles of history. Median of several runs (hyperfine when
# available, else /usr/bin/time). Release build expected in $BIN.
# Then the same spool with its checkpoints in a shared PostgreSQL database (`status --database`, as
# from any host of several), in a throwaway cluster (Scripts/pg-cluster.sh) filled with the same
# rows, each known bundle's steps and a history of runs, and a few live claims in processing/.
# POSTGRES=no skips that part; it is skipped anyway, with a word, when PostgreSQL is not installed.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.build/release}
RUNS=${RUNS:-5}
INCOMING=${INCOMING:-100000}
FAILED=${FAILED:-1000}
POSTGRES=${POSTGRES:-yes}
# Steps recorded for each bundle of history (and as many done for each waiting or failed one, a
# part of theirs): a worker keeps a bundle's steps until `prune` forgets it, so months of runs
# leave millions of rows. status reads none of them, but they share PostgreSQL's cache.
STEPS=${STEPS:-20}
# Bundles in processing/ whose claims another host holds, for the PostgreSQL case only.
CLAIMED=${CLAIMED:-16}
SPOOL=$(mktemp -d "${TMPDIR:-/tmp}/dopesync-bench-status.XXXXXX")
PG_DIR=""
# The spool and, when one was started, the cluster go whatever way the script ends.
trap 'rm -rf "$SPOOL" "$SPOOL.json"; [ -z "$PG_DIR" ] || [ ! -e "$PG_DIR" ] || Scripts/pg-cluster.sh stop "$PG_DIR"' EXIT
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
INSERT INTO bundles (name, first_seen, last_outcome, updated_at)
SELECT printf('old-%06d.tar.gz', i), unixepoch() - 86400, 'done', unixepoch() - 86400 FROM n;
SQL
fi

# time_status LABEL [OPTION...]: the median of RUNS timings of `dopesync status OPTION... --spool
# $SPOOL`, text and --json, printed after LABEL.
time_status() {
  local label=$1; shift
  local options="$*"
  if command -v hyperfine >/dev/null; then
    hyperfine --warmup 1 --runs "$RUNS" --export-json "$SPOOL.json" \
      "$BIN/dopesync status $options --spool $SPOOL" "$BIN/dopesync status --json $options --spool $SPOOL"
    python3 - "$SPOOL.json" "$label" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    print(f"{sys.argv[2]}: median {r['median']:.3f} s  {r['command']}")
PY
    rm -f "$SPOOL.json"
  else
    local json times
    for json in "" "--json"; do
      times=()
      for _ in $(seq "$RUNS"); do
        # shellcheck disable=SC2086 # the options are words
        times+=("$( { /usr/bin/time -f %e "$BIN/dopesync" status $json $options --spool "$SPOOL" >/dev/null; } 2>&1 )")
      done
      printf '%s: median %s s (of %s)  dopesync status %s\n' "$label" \
        "$(printf '%s\n' "${times[@]}" | sort -n | sed -n "$(( (RUNS + 1) / 2 ))p")" "${times[*]}" "$json $options"
    done
  fi
}

"$BIN/dopesync" status --spool "$SPOOL" | head -12 || true
time_status "SQLite"

[ "$POSTGRES" = yes ] || exit 0
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  echo "PostgreSQL is not installed (make deps installs it): the shared database's case is skipped"
  exit 0
fi

# A cluster under /tmp itself: as root, pg-cluster.sh runs the server as `postgres`, which must be
# able to enter the folder's parent.
PG_DIR=$(mktemp -u /tmp/dopesync-bench-status-pg.XXXXXX)
eval "$(Scripts/pg-cluster.sh start "$PG_DIR")"
export DOPESYNC_DATABASE_PASSWORD
DOPESYNC_DATABASE_PASSWORD=$(cat "$PG_PASSWORD_FILE")
PG_PORT=${PG_URL##*:}; PG_PORT=${PG_PORT%%/*}

# A real run creates the schema (nothing is due: it only finds the API missing, exit 75 as above).
status=0
DOPESYNC_API_TOKEN=bench DOPESYNC_HOST=bench-setup "$BIN/dopesync" run --spool "$SPOOL" --api http://127.0.0.1:9 \
  --min-age 100d --progress never --database "$PG_URL" >/dev/null 2>&1 || status=$?
[ "$status" -eq 75 ] || { echo "bench-status: the setup run with --database exited $status, not 75" >&2; exit 1; }

# Claims held by another host, made after the setup run (which would take back orphans in processing/).
for i in $(seq 0 $((CLAIMED - 1))); do printf 'x%.0s' {1..64} > "$SPOOL/processing/$(printf 'claimed-%03d.tar.gz' "$i")"; done

echo "filling PostgreSQL: the same bundles as the SQLite file, $STEPS steps for each of history, runs, claims..."
started=$(date +%s)
# As the `dopesync` role, the tables' owner, over TCP as a worker connects. The names and the mix
# are those of the SQLite file above; every bundle ever claimed has a claims row (its epoch only
# grows, and the row stays after the claim ends); the runs are three hosts' months of timers.
PGPASSWORD=$DOPESYNC_DATABASE_PASSWORD psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PG_PORT" -U dopesync -d dopesync \
  -v incoming="$INCOMING" -v failed="$FAILED" -v steps="$STEPS" -v claimed="$CLAIMED" <<'SQL'
SET synchronous_commit = off;
CREATE TEMPORARY TABLE t AS SELECT extract(epoch FROM now())::double precision AS now;
-- The tenth of incoming/ waiting for retry, part way through their steps.
INSERT INTO dopesync.bundles (name, session_id, attempts, first_seen, next_attempt_at, last_error_reason,
    last_error_step, last_error_message, last_outcome, updated_at, steps_total)
SELECT format('bundle-%s.tar.gz', lpad(i::text, 6, '0')), format('S-in-%s', i), 1 + i % 5, t.now - 3600,
    t.now + 600 + i, 'unreachable', 'dope:7', 'connection refused', 'deferred', t.now, :steps
FROM generate_series(0, :incoming - 1, 10) AS i, t;
-- failed/, with why.
INSERT INTO dopesync.bundles (name, session_id, attempts, first_seen, last_error_reason, last_error_step,
    last_error_http_status, last_error_message, last_error_field, last_outcome, updated_at, steps_total)
SELECT format('failed-%s.tar.gz', lpad(i::text, 5, '0')), format('S-f-%s', i), 1, t.now - 7200, 'http_422', 'dope:3',
    422, 'ammunitionId: unknown_reference (was 9999)', 'dope[2].ammunitionId', 'failed', t.now - 60, :steps
FROM generate_series(0, :failed - 1) AS i, t;
-- 100,000 bundles long done, over the last 90 days.
INSERT INTO dopesync.bundles (name, session_id, attempts, first_seen, last_outcome, updated_at, steps_total)
SELECT format('old-%s.tar.gz', lpad(i::text, 6, '0')), format('S-old-%s', i), 1, t.now - 86400 - i * 77.76, 'done',
    t.now - 86400 - i * 77.76 + 30, :steps
FROM generate_series(0, 99999) AS i, t;
-- Each bundle's steps done so far (half of a deferred one's, two of a failed one's, all of a done
-- one's), as a run records them (keys and digests of the real lengths).
INSERT INTO dopesync.steps (session_id, step_key, idempotency_key, request_fingerprint, content_digest, state,
    server_id, sent_at, done_at, bundle_name)
SELECT b.session_id, CASE WHEN s = 0 THEN 'session' ELSE format('dope:%s', s) END,
    'dopesync-v1-' || md5(b.session_id || s) || md5(s || b.session_id), md5(b.name || s) || md5(s || b.name),
    md5(b.session_id || s || 'c') || md5('c' || s || b.session_id), 'done', 1000000 + s,
    b.updated_at - 30 + s, b.updated_at - 29.9 + s, b.name
FROM dopesync.bundles AS b,
    generate_series(0, CASE b.last_outcome WHEN 'deferred' THEN :steps / 2 WHEN 'failed' THEN 2 ELSE :steps END - 1) AS s;
-- Every bundle known was claimed once or more; none of those claims is held now.
INSERT INTO dopesync.claims (bundle_name, epoch, run_id, host, pid, claimed_at, renewed_at, lease_expires_at)
SELECT name, attempts, NULL, format('host-%s', chr(97 + abs(hashtext(name)) % 3)), 4242, updated_at - 30, updated_at - 5, NULL
FROM dopesync.bundles;
-- The CLAIMED bundles in processing/, held now by host-b with time left on their leases.
INSERT INTO dopesync.claims (bundle_name, epoch, run_id, host, pid, claimed_at, renewed_at, lease_expires_at)
SELECT format('claimed-%s.tar.gz', lpad(i::text, 3, '0')), 1, 'run-host-b-now', 'host-b', 4343, t.now - 5, t.now - 1, t.now + 29
FROM generate_series(0, :claimed - 1) AS i, t;
-- Three hosts' timers: a run every 13 minutes or so each, over 90 days.
INSERT INTO dopesync.runs (run_id, host, pid, started_at, finished_at, claimed, done, deferred, failed, requests, bytes,
    seconds, exit_code, healthy, api_lookups)
SELECT format('run-%s', i), format('host-%s', chr(97 + i % 3)), 1000 + i, t.now - 86400 * 90 + i * 259.2,
    t.now - 86400 * 90 + i * 259.2 + 12, 11, 10, 1, 0, 520, 2000000, 12, 0, true, true
FROM generate_series(0, 29999) AS i, t;
SQL
# As after autovacuum has been by: the planner's statistics and the visibility map.
PGPASSWORD=$DOPESYNC_DATABASE_PASSWORD psql -X -q -h 127.0.0.1 -p "$PG_PORT" -U dopesync -d dopesync -c "VACUUM ANALYZE dopesync.bundles, dopesync.steps, dopesync.claims, dopesync.runs"
PGPASSWORD=$DOPESYNC_DATABASE_PASSWORD psql -X -At -h 127.0.0.1 -p "$PG_PORT" -U dopesync -d dopesync -F ' ' -c "
  SELECT 'bundles', count(*) FROM dopesync.bundles UNION ALL SELECT 'steps', count(*) FROM dopesync.steps
  UNION ALL SELECT 'claims', count(*) FROM dopesync.claims UNION ALL SELECT 'runs', count(*) FROM dopesync.runs
  UNION ALL SELECT 'database MB', pg_database_size('dopesync') / 1000000" | tr '\n' ';' | sed 's/;$/\n/; s/;/; /g'
echo "filled in $(( $(date +%s) - started )) s"

"$BIN/dopesync" status --spool "$SPOOL" --database "$PG_URL" | head -16 || true
time_status "PostgreSQL" --database "$PG_URL"
