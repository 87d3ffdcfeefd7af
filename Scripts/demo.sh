#!/usr/bin/env bash
# The whole job end to end on one machine: `make demo` (which ran `make deps` first).
#
#   1. builds dopesync and dopesync-devserver (debug);
#   2. starts the dev server on a free port, with a little fault injection so retries show;
#   3. packs the sample sessions of jobs/samples/ into a fresh demo spool (one invalid, made with
#      plain `tar czf`; one naming an ammunition id the server's reference list lacks, failed
#      before anything of it is sent);
#   4. runs `dopesync run` once, shows each spool folder and the failure sidecars;
#   5. shows one synced session tree as the server stores it;
#   6. fixes the server's reference data, puts the rejected bundle back, and runs again: it
#      resumes without sending what is already on the server.
#
# The demo spool and the server's database live in a temporary folder, removed at exit, so the
# demo can run any number of times and never touches ./spool. KEEP=1 keeps the folder.
# SKIP_BUILD=1 skips `swift build` (when .build/debug is already up to date).
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=.build/debug
TOKEN=demo-token
SAMPLES=jobs/samples

heading() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
say() { printf '   %s\n' "$*"; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/dopesync-demo.XXXXXX")
SPOOL="$WORK/spool"
SERVER_PID=""
cleanup() {
  local status=$?
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  if [ "${KEEP:-0}" = 1 ]; then
    echo "kept: $WORK (spool, server database and log)"
  else
    rm -rf "$WORK"
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  heading "Building (swift build)"
  swift build
fi

heading "Starting the dev server (the TrueDope API on loopback, 5% errors and 5% rate limits)"
"$BIN/dopesync-devserver" --port 0 --db "$WORK/devserver.sqlite" --token "$TOKEN" \
  --fail-rate 0.05 --rate-limit-rate 0.05 --seed 7 \
  > "$WORK/devserver.out" 2> "$WORK/devserver.log" &
SERVER_PID=$!
# Wait for its readiness line (it prints it once it accepts connections), 30 s at most.
URL=""
for _ in $(seq 300); do
  URL=$(sed -n 's/^listening on \(http:[^ ]*\)$/\1/p' "$WORK/devserver.out")
  [ -n "$URL" ] && break
  if ! kill -0 "$SERVER_PID" 2>/dev/null; then
    echo "the dev server exited before it was ready:" >&2
    cat "$WORK/devserver.log" >&2
    exit 1
  fi
  sleep 0.1
done
if [ -z "$URL" ]; then
  echo "the dev server did not print its 'listening on' line within 30 s" >&2
  exit 1
fi
say "listening on $URL (pid $SERVER_PID, log: $WORK/devserver.log)"

heading "Packing the sample sessions into the demo spool: $SPOOL"
mkdir -p "$SPOOL"/{tmp,incoming,processing,done,failed}   # `dopesync pack --spool` expects the folders
for name in range-day-1 range-day-2 unknown-ammo; do
  say "dopesync pack $SAMPLES/$name/session.json --spool \$SPOOL"
  "$BIN/dopesync" pack "$SAMPLES/$name/session.json" --images "$SAMPLES/$name/images" --spool "$SPOOL" | sed 's/^/     /'
done
# A bundle any tool can make: tar into tmp/, then an atomic rename into incoming/.
# `dopesync pack` refuses this one (humidity 140), so the worker must catch it.
say "tar czf \$SPOOL/tmp/bad-humidity.tar.gz -C $SAMPLES bad-humidity; mv it into incoming/"
tar czf "$SPOOL/tmp/bad-humidity.tar.gz" -C "$SAMPLES" bad-humidity
mv "$SPOOL/tmp/bad-humidity.tar.gz" "$SPOOL/incoming/bad-humidity.tar.gz"
ls -l "$SPOOL/incoming" | sed 's/^/     /'

show_spool() {
  for folder in incoming processing done failed; do
    echo "   $folder/:"
    ls -1 "$SPOOL/$folder" | sed 's/^/     /'
  done
}

# The session ids of the samples (their bundles are named SESSIONID.tar.gz).
session_id() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$SAMPLES/$1/session.json"; }

api_get() { curl -fsS -H "Authorization: Bearer $TOKEN" "$URL$1"; }

# The job file jobs/local.yaml holds the settings; the options given here win over it (this demo's
# own spool and server port, no min-age wait), and DOPESYNC_API_TOKEN wins over its token-file.
run_dopesync() {
  DOPESYNC_API_TOKEN=$TOKEN "$BIN/dopesync" run --job jobs/local.yaml --spool "$SPOOL" --api "$URL" --min-age 0 \
    --metrics-file "$WORK/dopesync.prom"
}

heading "dopesync run --job jobs/local.yaml --spool \$SPOOL --api $URL --min-age 0 --metrics-file \$WORK/dopesync.prom"
status=0
run_dopesync || status=$?
case $status in
  0) say "exit 0: every bundle synced" ;;
  1) say "exit 1: the run finished and at least one bundle went to failed/ (expected here)" ;;
  *) echo "dopesync run exited $status (docs/exit-codes.md says what it means)" >&2; exit "$status" ;;
esac

heading "The spool after the run"
show_spool

heading "dopesync status --spool \$SPOOL"
"$BIN/dopesync" status --spool "$SPOOL" | sed 's/^/   /'

heading "What monitoring sees: the metrics file (Prometheus textfile), a few lines"
grep -E '^dopesync_(last_run_bundles|last_run_exit_code|spool_bundles)' "$WORK/dopesync.prom" | sed 's/^/   /'

heading "Why bundles failed: failed/*.error"
for sidecar in "$SPOOL"/failed/*.error; do
  [ -e "$sidecar" ] || continue
  echo "   $(basename "$sidecar"):"
  sed 's/^/     /' "$sidecar"
done

heading "One synced session as the server stores it (range-day-1)"
client_id=$(session_id range-day-1)
say "GET /api/sessions?clientId=$client_id"
server_id=$(api_get "/api/sessions?clientId=$client_id" | python3 -c 'import json,sys; items=json.load(sys.stdin)["items"]; print(items[0]["id"] if items else "")')
if [ -n "$server_id" ]; then
  say "GET /api/sessions/$server_id"
  api_get "/api/sessions/$server_id" | python3 -m json.tool
else
  say "not on the server yet (was its bundle deferred? see incoming/ above)"
fi

heading "Fixing the rejected bundle: the server learns ammunition 9999, the bundle goes back to incoming/"
unknown=$(session_id unknown-ammo).tar.gz
if [ -e "$SPOOL/failed/$unknown" ]; then
  say "dopesync inspect failed/$unknown (the ids the server's lists, as the run kept them, lack):"
  "$BIN/dopesync" inspect --spool "$SPOOL" "$SPOOL/failed/$unknown" |
    awk '/^  references/ { shown = 1; print "   " $0; next } shown && /^    / { print "   " $0; next } { shown = 0 }' || true
  api_get "/admin/requests?limit=0" > "$WORK/seq.json"
  since=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["nextSeq"])' "$WORK/seq.json")
  curl -fsS -X POST -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
    -d '{"ammunition": [9999]}' "$URL/admin/references" > /dev/null
  say "POST /admin/references {\"ammunition\": [9999]}"
  heading "dopesync requeue $unknown"
  "$BIN/dopesync" requeue --spool "$SPOOL" "$unknown"
  status=0
  run_dopesync || status=$?
  say "exit $status"
  say "requests the server saw in this second run (the lists revalidated, then the whole bundle, once):"
  api_get "/admin/requests?since=$since" | python3 -c '
import json, sys
for r in json.load(sys.stdin)["requests"]:
  if r["path"].startswith("/api/"):
      note = "  (injected fault: " + str(r["fault"]) + ")" if r.get("fault") else ""
      print("     %-5s %-45s %s%s%s" % (r["method"], r["path"], r["status"], "  (replayed)" if r.get("replayed") else "", note))'
  show_spool
else
  say "the bundle is not in failed/ (see above), nothing to fix"
fi

heading "Done"
say "the dev server stops now; the demo spool and database are removed (KEEP=1 keeps them)"
