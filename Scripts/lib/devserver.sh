# Sourced by the benchmark scripts (Scripts/bench-run.sh, bench-scale.sh, ab-latency.sh): their one
# way to start the dev server and learn its URL.
#
# start_devserver PREFIX DATABASE [OPTION...]: $BIN/dopesync-devserver on a port the system picks,
# token `bench`, its database DATABASE (removed first), its standard output in PREFIX.out and its
# log in PREFIX.log, with OPTIONs added; sets SERVER_PID, and URL once it says it listens (within
# 10 s).
start_devserver() {
  local prefix=$1 database=$2
  shift 2
  rm -f "$prefix.out" "$database"*
  "$BIN/dopesync-devserver" --port 0 --db "$database" --token bench --log-level warning "$@" \
    > "$prefix.out" 2> "$prefix.log" &
  SERVER_PID=$!
  for _ in $(seq 200); do grep -q "listening on" "$prefix.out" 2>/dev/null && break; sleep 0.05; done
  URL=$(grep -o "https*://[0-9.:]*" "$prefix.out")
}
