#!/usr/bin/env bash
# A/B of worker builds in the latency case: `dopesync run` at CONCURRENCY (default 64) over the
# same pristine bundles (ten per connection), each pass against a fresh dev server adding
# LATENCY_MS (default 20) to every POST, its database in /dev/shm, as Scripts/bench-run.sh runs
# that case. The variants alternate pass by pass for ROUNDS rounds (default 4), so the machine's
# drift falls on each alike; the medians of each variant's wall and CPU seconds close the report.
#
#   Scripts/ab-latency.sh LABEL=BINARY[,NAME=VALUE...] ...
#
# BINARY is a `dopesync` executable (a release build of another commit, say); NAME=VALUE pairs go
# to its environment (a scratch build's switch). The label `raw` runs `dopesync-bench
# raw-capacity` instead, whose wall time is its own clock's (from its first request). The dev
# server and the bench tool come from BIN (default .build/release). Differences of a few percent
# need several rounds: the same binary's CPU moves by 5% from one pass to the next here.
set -euo pipefail
BIN=${BIN:-.build/release}
WORK=${BENCH_DIR:-bench-results}/ab
ROUNDS=${ROUNDS:-4}
CONCURRENCY=${CONCURRENCY:-64}
LATENCY_MS=${LATENCY_MS:-20}
[[ $# -gt 0 ]] || { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 64; }
rm -rf "$WORK"; mkdir -p "$WORK"
DB_DIR=$(mktemp -d /dev/shm/dopesync-ab.XXXXXX 2>/dev/null || mktemp -d "$WORK/db.XXXXXX")
trap 'kill ${SERVER_PID:-} 2>/dev/null || true; rm -rf "$DB_DIR"' EXIT

"$BIN/dopesync-bench" make-bundles --spool "$WORK/make" --count $((CONCURRENCY * 10)) --seed 5000 > /dev/null
mv "$WORK/make/incoming" "$WORK/pristine"

source "$(dirname "$0")/lib/devserver.sh"
start_server() { start_devserver "$WORK/$1.server" "$DB_DIR/$1.sqlite" --latency-ms "$LATENCY_MS"; }  # → URL
stop_server() { kill -TERM "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true; rm -f "$DB_DIR"/*; }

for round in $(seq "$ROUNDS"); do
  line="round $round:"
  for variant in "$@"; do
    label=${variant%%=*}; spec=${variant#*=}; binary=${spec%%,*}
    settings=(); [[ "$spec" == *,* ]] && IFS=, read -r -a settings <<< "${spec#*,}"
    name="$label-$round"
    rm -rf "$WORK/spool"; mkdir -p "$WORK/spool"; cp -a "$WORK/pristine" "$WORK/spool/incoming"
    start_server "$name"
    if [[ "$label" == raw ]]; then
      /usr/bin/time -f "%e %U %S" -o "$WORK/$name.time" "$BIN/dopesync-bench" raw-capacity \
        --spool "$WORK/spool" --api "$URL" --token bench --concurrency "$CONCURRENCY" > "$WORK/$name.txt"
      wall=$(grep -o "in [0-9.]* s" "$WORK/$name.txt" | grep -o "[0-9.]*")
    else
      /usr/bin/time -f "%e %U %S" -o "$WORK/$name.time" env DOPESYNC_API_TOKEN=bench "${settings[@]}" \
        "$binary" run --spool "$WORK/spool" --api "$URL" --min-age 0 --concurrency "$CONCURRENCY" \
        --progress never 2> "$WORK/$name.log" > "$WORK/$name.txt"
      grep -q "$((CONCURRENCY * 10)) done" "$WORK/$name.txt" || { echo "$name did not sync every bundle:" >&2; cat "$WORK/$name.txt" >&2; exit 1; }
      wall=$(awk '{ print $1 }' "$WORK/$name.time")
    fi
    stop_server
    cpu=$(awk '{ printf "%.2f", $2 + $3 }' "$WORK/$name.time")
    printf '%s\t%s\t%s\n' "$label" "$wall" "$cpu" >> "$WORK/passes.tsv"
    line+=" $label ${wall} s ${cpu} CPU;"
  done
  echo "$line"
done

python3 - "$WORK/passes.tsv" <<'PY'
import collections, statistics, sys
passes = collections.defaultdict(lambda: ([], []))
for line in open(sys.argv[1]):
    label, wall, cpu = line.split()
    passes[label][0].append(float(wall)); passes[label][1].append(float(cpu))
for label, (wall, cpu) in passes.items():
    print(f"{label}: wall median {statistics.median(wall):.2f} s ({min(wall):.2f}-{max(wall):.2f}), "
          f"CPU median {statistics.median(cpu):.2f} s ({min(cpu):.2f}-{max(cpu):.2f}), {len(wall)} passes")
PY
