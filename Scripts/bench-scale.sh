#!/usr/bin/env bash
# Benchmark: several hosts sharing one spool through one PostgreSQL database (issue 26).
#
#   scale   1, 2 and 4 `dopesync run` processes (SCALE_WORKERS), each --concurrency 8 under its
#           own DOPESYNC_HOST, draining ONE spool of SCALE_BUNDLES bundles with ONE database,
#           against the dev server adding SCALE_LATENCY_MS (default 100) to every POST.
#           bundles/s R(N) and the scaling efficiency R(N) / (N x R(1)), medians of SCALE_RUNS.
#   single  one worker at SINGLE_CONCURRENCY (default 32), LATENCY_MS (default 20) a POST: the spool's own
#           SQLite file against PostgreSQL, SINGLE_PAIRS alternating pairs, the ratio PG/SQLite.
#
# Every measurement gets a fresh copy of the same bundles, a fresh dev server (its database in
# /dev/shm, as in bench-run.sh's latency case: a stand-in for a remote API must not stall on the
# workers' disk) and a fresh database in one throwaway cluster (Scripts/pg-cluster.sh). Besides
# the rates it records the CPU seconds of the workers, the dev server, PostgreSQL and the whole
# machine, and PostgreSQL's transactions per bundle: what to look at when the rates fall short.
# Release binaries in $BIN; results in bench-results/scale; SECTIONS picks the parts.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.build/release}
WORK=${BENCH_DIR:-bench-results}/scale
SECTIONS=${SECTIONS:-scale single}
section() { [[ " $SECTIONS " == *" $1 "* ]]; }

SCALE_WORKERS=${SCALE_WORKERS:-1 2 4}
SCALE_CONCURRENCY=${SCALE_CONCURRENCY:-8}
SCALE_LATENCY_MS=${SCALE_LATENCY_MS:-100}
SCALE_RUNS=${SCALE_RUNS:-3}
# A realistic bundle is about 50 POSTs one after another, so at 100 ms it takes a slot about
# 5 s whatever else happens: a run is a number of waves of 8 x N bundles. 32 bundles make whole
# waves for 1, 2 and 4 workers (4, 2 and 1 of them: about 20, 10 and 5 s). A count that leaves
# the last wave part full (24, say) would measure the bench's granularity, not the workers.
SCALE_BUNDLES=${SCALE_BUNDLES:-32}
LEASE=${LEASE:-30s}

SINGLE_CONCURRENCY=${SINGLE_CONCURRENCY:-32}
LATENCY_MS=${LATENCY_MS:-20}
# Ten bundles per connection, as bench-run.sh's latency case: about 10 s a run at 20 ms.
SINGLE_BUNDLES=${SINGLE_BUNDLES:-$((SINGLE_CONCURRENCY * 10))}
SINGLE_PAIRS=${SINGLE_PAIRS:-3}

for tool in dopesync dopesync-devserver dopesync-bench; do
  [ -x "$BIN/$tool" ] || { echo "no $BIN/$tool: build with 'swift build -c release' first" >&2; exit 1; }
done
# Without a PostgreSQL server there is nothing to measure here: say so and let `make bench` go on.
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  echo "PostgreSQL is not installed (make deps installs it): the several-hosts benchmark is skipped"
  exit 0
fi

rm -rf "$WORK"; mkdir -p "$WORK"
RESULTS="$WORK/results.tsv"
: > "$RESULTS"

# --- clean-up: whatever this script started goes when it ends, however it ends -----------------
SERVER_PID=""
WORKER_PIDS=()
PG_DIR=""
SERVER_DB_DIR=""
cleanup() {
  local pid
  # Each worker runs under /usr/bin/time, which does not pass a signal on: the worker itself
  # (time's child) is told to stop, and gives back what it holds; time then ends with it.
  # shellcheck disable=SC2046 # one pid per child
  for pid in "${WORKER_PIDS[@]}"; do kill -TERM $(ps -o pid= --ppid "$pid") "$pid" 2>/dev/null || true; done
  [ -z "$SERVER_PID" ] || kill -TERM "$SERVER_PID" 2>/dev/null || true
  wait 2>/dev/null || true
  [ -z "$PG_DIR" ] || [ ! -e "$PG_DIR" ] || Scripts/pg-cluster.sh stop "$PG_DIR" || true
  [ -z "$SERVER_DB_DIR" ] || rm -rf "$SERVER_DB_DIR"
  rm -rf "$WORK/spool" "$WORK"/pristine-*
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the cluster: one for the whole script, a fresh database per measurement -------------------
# Its folder under /tmp itself: as root, pg-cluster.sh runs the server as `postgres`, which must be
# able to enter the parent (mktemp -d would make a 0700 folder of root's).
PG_DIR=$(mktemp -u /tmp/dopesync-bench-pg.XXXXXX)
eval "$(Scripts/pg-cluster.sh start "$PG_DIR")"
PG_PASSWORD=$(cat "$PG_PASSWORD_FILE")
PG_PORT=${PG_URL##*:}; PG_PORT=${PG_PORT%%/*}
# The superuser over the cluster's own socket (trust for local connections): to create and drop
# the measurements' databases, and to read the server's statistics.
pg_admin() { psql -X -q -At -v ON_ERROR_STOP=1 -h "$PG_DIR" -p "$PG_PORT" -U postgres "$@"; }
DB_SERIAL=0
# fresh_database → sets DB_NAME and DB_URL: an empty database owned by the `dopesync` role.
fresh_database() {
  DB_SERIAL=$((DB_SERIAL + 1))
  DB_NAME="bench_$DB_SERIAL"
  pg_admin -d postgres -c "CREATE DATABASE $DB_NAME OWNER dopesync"
  DB_URL="${PG_URL%/*}/$DB_NAME"
}
drop_database() { pg_admin -d postgres -c "DROP DATABASE IF EXISTS $DB_NAME WITH (FORCE)"; }
# Transactions committed in a database so far (each autocommitted statement is one).
database_commits() { pg_admin -d postgres -c "SELECT xact_commit FROM pg_stat_database WHERE datname = '$1'"; }

# --- CPU accounting, from /proc ----------------------------------------------------------------
# CPU seconds (user + system) of the given processes; with --children, also what their reaped
# children used. PostgreSQL's backends exit with their connections, and their time then shows in
# the postmaster's children's time, so the postmaster with --children plus its live children is
# the whole server's CPU.
cpu_seconds() {
  python3 - "$@" <<'PY'
import os, sys
tick = os.sysconf("SC_CLK_TCK")
children = sys.argv[1] == "--children"
total = 0
for pid in sys.argv[2:] if children else sys.argv[1:]:
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        continue  # gone since it was listed
    # utime, stime, cutime, cstime are fields 14-17; after the command's ")" they are 11-14 here.
    total += int(fields[11]) + int(fields[12])
    if children:
        total += int(fields[13]) + int(fields[14])
print(f"{total / tick:.2f}")
PY
}
postmaster_pid() { head -1 "$PG_DIR/data/postmaster.pid"; }
pg_cpu() {
  local pm; pm=$(postmaster_pid)
  # shellcheck disable=SC2046 # one argument per child
  echo "$(cpu_seconds --children "$pm") $(cpu_seconds 0 $(ps -o pid= --ppid "$pm"))" | awk '{ printf "%.2f\n", $1 + $2 }'
}
# The machine's busy CPU seconds so far, every process's (other work on a shared machine too).
machine_cpu() {
  awk -v tick="$(getconf CLK_TCK)" '/^cpu / { printf "%.2f\n", ($2 + $3 + $4 + $7 + $8 + $9) / tick }' /proc/stat
}
now() { date +%s.%N; }
minus() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f\n", a - b }'; }

# --- the dev server ------------------------------------------------------------------------------
if [ -d /dev/shm ] && [ -w /dev/shm ]; then SERVER_DB_DIR=$(mktemp -d /dev/shm/dopesync-bench-scale.XXXXXX); else SERVER_DB_DIR=$WORK; fi
source "$(dirname "$0")/lib/devserver.sh"
start_server() {  # start_server NAME LATENCY_MS → sets URL and SERVER_PID; logs to $WORK/NAME.server.log
  start_devserver "$WORK/$1.server" "$SERVER_DB_DIR/$1.sqlite" --latency-ms "$2" --request-log-capacity 1000000
}
stop_server() {
  kill -TERM "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=""
  [ "$SERVER_DB_DIR" = "$WORK" ] || rm -f "$SERVER_DB_DIR"/*.sqlite*
}

# pristine NAME COUNT: COUNT realistic bundles in $WORK/pristine-NAME, made once per section.
pristine() {
  "$BIN/dopesync-bench" make-bundles --spool "$WORK/make-$1" --count "$2" --seed 7000 > "$WORK/make-$1.txt"
  mv "$WORK/make-$1/incoming" "$WORK/pristine-$1"; rm -rf "$WORK/make-$1"
  echo "$2 bundles: $(cat "$WORK/make-$1.txt")"
}
fresh_spool() { rm -rf "$WORK/spool"; mkdir -p "$WORK/spool"; cp -a "$WORK/pristine-$1" "$WORK/spool/incoming"; }

# measure SECTION LABEL NAME WORKERS CONCURRENCY LATENCY STORE: one drain of a fresh copy of the
# bundles by WORKERS processes started together, STORE `postgres` or `sqlite`; appends one line to
# $RESULTS. Wall time runs from the first start to the last exit; every exit status is kept.
measure() {
  local section=$1 label=$2 name=$3 workers=$4 concurrency=$5 latency=$6 store=$7 bundles
  bundles=$(ls "$WORK/pristine-$section" | wc -l)
  fresh_spool "$section"
  local database=()
  if [ "$store" = postgres ]; then fresh_database; database=(--database "$DB_URL" --lease "$LEASE"); fi
  start_server "$name" "$latency"
  local pg_before machine_before commits_before=0 started ended log_before
  pg_before=$(pg_cpu); machine_before=$(machine_cpu)
  # Where PostgreSQL's log stands: what it says during the measurement (a deadlock, say) is counted.
  log_before=$(stat -c %s "$PG_DIR/server.log")
  [ "$store" != postgres ] || commits_before=$(database_commits "$DB_NAME")
  started=$(now)
  WORKER_PIDS=()
  local i
  for i in $(seq "$workers"); do
    env DOPESYNC_API_TOKEN=bench DOPESYNC_HOST="bench-host-$i" DOPESYNC_DATABASE_PASSWORD="$PG_PASSWORD" \
      /usr/bin/time -f "%e %U %S" -o "$WORK/$name-w$i.time" \
      "$BIN/dopesync" run --spool "$WORK/spool" --api "$URL" --min-age 0 --concurrency "$concurrency" \
      --progress never "${database[@]}" > "$WORK/$name-w$i.txt" 2> "$WORK/$name-w$i.log" &
    WORKER_PIDS+=($!)
  done
  local codes=() pid code
  for pid in "${WORKER_PIDS[@]}"; do
    code=0; wait "$pid" || code=$?
    codes+=("$code")
  done
  WORKER_PIDS=()
  ended=$(now)
  local server_cpu pg_after machine_after commits=0
  server_cpu=$(cpu_seconds "$SERVER_PID"); pg_after=$(pg_cpu); machine_after=$(machine_cpu)
  # From the server's request log: the window from the first request to the last answer (the rest
  # of the wall time is the workers' start and end), the gaps between a bundle's steps, the time
  # a POST spent in the server (see Scripts/request-timeline.py).
  Scripts/request-timeline.py "$URL" "$SERVER_DB_DIR/$name.sqlite" $((workers * concurrency)) > "$WORK/$name.timeline"
  # Deadlocks PostgreSQL broke meanwhile: each cost a transaction up to deadlock_timeout (1 s)
  # of waiting before it was cancelled (and retried by the worker).
  # PostgreSQL's log of the measurement is kept beside the workers' ($WORK/NAME.postgres.log).
  local deadlocks
  tail -c +$((log_before + 1)) "$PG_DIR/server.log" > "$WORK/$name.postgres.log"
  deadlocks=$(grep -c "deadlock detected" "$WORK/$name.postgres.log" || true)
  if [ "$store" = postgres ]; then
    commits=$(( $(database_commits "$DB_NAME") - commits_before ))
    # Each host's share, from the runs it recorded: an even split says the claims were fair.
    pg_admin -d "$DB_NAME" -F ' ' -c "SELECT host, claimed, done, requests, exit_code FROM dopesync.runs ORDER BY host" > "$WORK/$name.runs"
  fi
  stop_server
  [ "$store" != postgres ] || drop_database
  local worker_cpu requests=0 done_count=0 f
  worker_cpu=$(cat "$WORK/$name"-w*.time | awk '{ s += $2 + $3 } END { printf "%.2f\n", s }')
  for f in "$WORK/$name"-w*.txt; do
    requests=$(( requests + $(grep -o '[0-9]* requests' "$f" | head -1 | cut -d' ' -f1 || echo 0) ))
  done
  done_count=$(ls "$WORK/spool/done" | wc -l)
  local left; left=$(( $(ls "$WORK/spool/incoming" | wc -l) + $(ls "$WORK/spool/processing" | wc -l) + $(ls "$WORK/spool/failed" | wc -l) ))
  local wall; wall=$(minus "$ended" "$started")
  # Anything a worker logged at warning or above is worth a look: say so now, not only in the log.
  local warnings; warnings=$(cat "$WORK/$name"-w*.log | grep -c -E ' (warning|error|critical) ' || true)
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$section" "$label" "$name" "$workers" \
    "$wall" "$bundles" "$done_count" "$left" "$requests" "$worker_cpu" "$server_cpu" \
    "$(minus "$pg_after" "$pg_before")" "$(minus "$machine_after" "$machine_before")" \
    "$commits" "$(IFS=,; echo "${codes[*]}")" "$deadlocks" "$warnings" >> "$RESULTS"
  echo "$name: $workers worker(s), $wall s, $done_count of $bundles done, exit $(IFS=,; echo "${codes[*]}"), $warnings warning lines in the workers' logs, $deadlocks deadlocks in PostgreSQL's"
}

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores (other work on the machine skews every figure)"

if section scale; then
  pristine scale "$SCALE_BUNDLES"
  # The points interleaved (1, 2, 4, 1, 2, 4, ...) rather than one after another, so a quarter
  # hour's change in the machine's load falls on all of them alike.
  for run in $(seq "$SCALE_RUNS"); do
    for n in $SCALE_WORKERS; do
      measure scale "$n" "scale-n$n-r$run" "$n" "$SCALE_CONCURRENCY" "$SCALE_LATENCY_MS" postgres
    done
  done
fi

if section single; then
  pristine single "$SINGLE_BUNDLES"
  for pair in $(seq "$SINGLE_PAIRS"); do
    measure single sqlite "single-sqlite-p$pair" 1 "$SINGLE_CONCURRENCY" "$LATENCY_MS" sqlite
    measure single postgres "single-postgres-p$pair" 1 "$SINGLE_CONCURRENCY" "$LATENCY_MS" postgres
  done
fi

python3 - "$RESULTS" "$WORK" "$SCALE_CONCURRENCY" "$SCALE_LATENCY_MS" "$LATENCY_MS" "$SINGLE_CONCURRENCY" <<'PY'
import collections, os, statistics, sys
results, work, scale_c, scale_ms, single_ms = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
single_c = int(sys.argv[6])
cores = len(os.sched_getaffinity(0))
rows = collections.defaultdict(list)
import json
for line in open(results):
    (section, label, name, workers, wall, bundles, done, left, requests, wcpu, scpu, pcpu, mcpu, commits, codes,
     deadlocks, warnings) = line.rstrip("\n").split("\t")
    wall = float(wall)
    rows[(section, label)].append(dict(
        name=name, workers=int(workers), wall=wall, bundles=int(bundles), done=int(done), left=int(left),
        requests=int(requests), rate=int(done) / wall, rps=int(requests) / wall, wcpu=float(wcpu), scpu=float(scpu),
        pcpu=float(pcpu), mcpu=float(mcpu), commits=int(commits), codes=codes, deadlocks=int(deadlocks), warnings=int(warnings),
        timeline=json.load(open(f"{work}/{name}.timeline"))))
med = lambda rs, k: statistics.median(r[k] for r in rs)
def busy(r):
    # Cores kept busy: each party's CPU seconds per wall second; "other" is the rest of the
    # machine's (other work on a shared machine), which the bench cannot control.
    other = max(r["mcpu"] - r["wcpu"] - r["scpu"] - r["pcpu"], 0)
    return (f"cores busy: workers {r['wcpu'] / r['wall']:.2f}, dev server {r['scpu'] / r['wall']:.2f}, "
            f"PostgreSQL {r['pcpu'] / r['wall']:.2f}, other {other / r['wall']:.2f} (of {cores})")
def window(r):
    # The API's window (first request to last answer) against the wall time, and the run's pace
    # inside it: a shortfall outside the window is the workers' start and exit, a fixed cost that
    # weighs more on a shorter run; inside it, the gaps between a bundle's steps and the time
    # outside a bundle's POSTs (claim, read, move: betweenMs) are the workers' own.
    t = r["timeline"]
    return (f"API window {t['wallMs'] / 1000:.2f} s of {r['wall']:.2f} (start and exit {r['wall'] - t['wallMs'] / 1000:.2f} s), "
            f"{r['done'] / (t['wallMs'] / 1000):.2f} bundles/s inside it; a POST {t['serverMs']:.1f} ms in the server, "
            f"gap between steps {t['gapMs']:.2f} ms (p99 {t['gapP99Ms']:.1f}), outside a bundle's POSTs {t['betweenMs']:.0f} ms a bundle")
def problems(r):
    notes = []
    if r["codes"].strip("0,"): notes.append(f"exit statuses {r['codes']}")
    if r["done"] != r["bundles"] or r["left"]: notes.append(f"{r['done']} of {r['bundles']} in done/, {r['left']} elsewhere")
    if r["deadlocks"]: notes.append(f"{r['deadlocks']} deadlocks broken by PostgreSQL (up to 1 s of waiting each)")
    if r["warnings"]: notes.append(f"{r['warnings']} warning lines in the workers' logs")
    return ("; " + "; ".join(notes)) if notes else ""

scale = sorted((int(label), rs) for (section, label), rs in rows.items() if section == "scale")
if scale:
    one = statistics.median(r["rate"] for r in dict(scale)[1]) if 1 in dict(scale) else None
    # POSTs a bundle, from the server's log: the latency bound counts those (the lookups are GETs
    # without the added latency).
    posts = statistics.median(r["timeline"]["requests"] / r["timeline"]["bundles"] for _, rs in scale for r in rs)
    print(f"\nscale-out: {scale_c} slots a worker, {scale_ms} ms a POST, {scale[0][1][0]['bundles']} bundles of {posts:.0f} POSTs")
    for n, rs in scale:
        for r in rs:
            print(f"  N={n} {r['name']}: {r['rate']:.2f} bundles/s in {r['wall']:.2f} s; "
                  f"{r['commits'] / max(r['done'], 1):.0f} PostgreSQL transactions a bundle; {busy(r)}{problems(r)}")
            print(f"    {window(r)}")
            try:
                print("    hosts (host claimed done requests exit): " + "; ".join(l.strip() for l in open(f"{work}/{r['name']}.runs") if l.strip()))
            except OSError:
                pass
    print("scale-out summary (medians):")
    for n, rs in scale:
        rate = statistics.median(r["rate"] for r in rs)
        bound = n * scale_c / (posts * scale_ms / 1000)  # every slot busy, each POST exactly the latency
        eff = f"efficiency R({n})/({n} x R(1)) {rate / (n * one):.3f}" if one else ""
        inside = statistics.median(r["done"] / (r["timeline"]["wallMs"] / 1000) for r in rs)
        if one:
            one_inside = statistics.median(r["done"] / (r["timeline"]["wallMs"] / 1000) for r in dict(scale)[1])
            eff += f"; inside the API's window {inside:.2f} bundles/s, efficiency {inside / (n * one_inside):.3f}"
        each = ", ".join(f"{r['rate']:.2f}" for r in rs)
        print(f"  N={n}: {rate:.2f} bundles/s (of {each}), "
              f"{rate / bound:.2f} of the latency bound ({bound:.2f}); {eff}")

single = {label: rs for (section, label), rs in rows.items() if section == "single"}
if single:
    print(f"\none worker, concurrency {single_c}, {single_ms} ms a POST: the spool's SQLite file against PostgreSQL")
    for label in ("sqlite", "postgres"):
        for r in single.get(label, []):
            extra = f"; {r['commits'] / max(r['done'], 1):.0f} PostgreSQL transactions a bundle" if label == "postgres" else ""
            print(f"  {r['name']}: {r['rate']:.2f} bundles/s, {r['rps']:.0f} requests/s in {r['wall']:.2f} s; "
                  f"worker CPU {r['wcpu'] / r['requests'] * 1000:.2f} s per 1000 requests{extra}; {busy(r)}{problems(r)}")
            print(f"    {window(r)}")
    if "sqlite" in single and "postgres" in single:
        ratios = [p["rate"] / s["rate"] for s, p in zip(single["sqlite"], single["postgres"])]
        for label in ("sqlite", "postgres"):
            print(f"  {label}: median {med(single[label], 'rate'):.2f} bundles/s, {med(single[label], 'rps'):.0f} requests/s")
        print(f"  ratio PG/SQLite (bundles/s, per pair): median {statistics.median(ratios):.3f} of "
              f"{', '.join(f'{x:.3f}' for x in ratios)} (goal >= 0.9)")
PY
