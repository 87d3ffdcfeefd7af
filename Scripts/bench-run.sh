#!/usr/bin/env bash
# Benchmark: `dopesync run` over realistic bundles (about 50 requests each, a few images) with
# checkpoints on, next to (a) the dev server's raw capacity for the same request mix and
# concurrency, measured in the same run, and (b) a plain tar/jq/curl script on a subset.
# Also the memory check: one bundle of 200 images of 5 MB, peak RSS of the run.
set -euo pipefail
BIN=${BIN:-.build/release}
WORK=${BENCH_DIR:-bench-results}/run
BUNDLES=${BUNDLES:-300}
SUBSET=${SUBSET:-10}
CONCURRENCY=${CONCURRENCY:-4}
rm -rf "$WORK"; mkdir -p "$WORK"

start_server() {  # start_server NAME → sets URL; the server logs to $WORK/NAME.log
  rm -f "$WORK/$1.out"
  "$BIN/dopesync-devserver" --port 0 --db "$WORK/$1.sqlite" --token bench --log-level warning > "$WORK/$1.out" 2> "$WORK/$1.log" &
  SERVER_PID=$!
  for _ in $(seq 200); do grep -q "listening on" "$WORK/$1.out" 2>/dev/null && break; sleep 0.05; done
  URL=$(grep -o "http://[0-9.:]*" "$WORK/$1.out")
}
stop_server() { kill -TERM "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true; }
trap 'kill $SERVER_PID 2>/dev/null || true' EXIT

echo "making $BUNDLES realistic bundles..."
"$BIN/dopesync-bench" make-bundles --spool "$WORK/spool" --count "$BUNDLES"
cp -a "$WORK/spool/incoming" "$WORK/pristine"

start_server raw
"$BIN/dopesync-bench" raw-capacity --spool "$WORK/spool" --api "$URL" --token bench --concurrency "$CONCURRENCY" | tee "$WORK/raw.txt"
stop_server

start_server worker
/usr/bin/time -f "%e s, peak RSS %M KiB" -o "$WORK/run.time" \
  env DOPESYNC_API_TOKEN=bench "$BIN/dopesync" run --spool "$WORK/spool" --api "$URL" --min-age 0 --concurrency "$CONCURRENCY" --progress never 2> "$WORK/run.log" | tee "$WORK/run.txt"
stop_server
echo "dopesync run: $(cat "$WORK/run.time")"

start_server naive
# An array slice, not `ls | head`: under pipefail, ls killed by head's early exit (SIGPIPE) aborts the script.
pristine=("$WORK"/pristine/*)
subset=("${pristine[@]:0:$SUBSET}")
/usr/bin/time -f "%e" -o "$WORK/naive.time" Scripts/naive-sync.sh "$URL" bench "${subset[@]}"
stop_server
echo "naive tar/jq/curl script: $SUBSET bundles in $(cat "$WORK/naive.time") s"

python3 - "$WORK" "$BUNDLES" "$SUBSET" <<'PY'
import re, sys
work, bundles, subset = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
raw = open(f"{work}/raw.txt").read()
raw_bps = float(re.search(r"([\d.]+) bundles/s", raw).group(1)); raw_rps = float(re.search(r"([\d.]+) requests/s", raw).group(1))
run = open(f"{work}/run.txt").read()
requests = int(re.search(r"(\d+) requests", run).group(1)); seconds = float(re.search(r"; ([\d.]+) s", run).group(1))
done = int(re.search(r"(\d+) done", run).group(1))
naive = float(open(f"{work}/naive.time").read().split()[0])
bps, rps = done / seconds, requests / seconds
print(f"dopesync run: {done} bundles, {requests} requests in {seconds:.2f} s: {bps:.1f} bundles/s, {rps:.0f} requests/s")
print(f"raw capacity (same mix, concurrency, no worker): {raw_bps:.1f} bundles/s, {raw_rps:.0f} requests/s")
print(f"ratio run/raw: {bps / raw_bps:.2f} (target >= 0.8)")
print(f"naive script: {subset / naive:.2f} bundles/s; ratio run/script: {bps / (subset / naive):.0f}x (target >= 30x)")
PY

echo "memory: one bundle of 200 images of 5 MB..."
rm -rf "$WORK/big"; "$BIN/dopesync-bench" make-bundles --spool "$WORK/big" --count 1 --groups 20 --images-per-group 10 --image-bytes 5000000
start_server big
/usr/bin/time -f "%e s, peak RSS %M KiB" -o "$WORK/big.time" env DOPESYNC_API_TOKEN=bench "$BIN/dopesync" run --spool "$WORK/big" --api "$URL" --min-age 0 --progress never 2>/dev/null
stop_server
echo "200 x 5 MB bundle synced: $(cat "$WORK/big.time") (target < 100 MiB = 102400 KiB)"
