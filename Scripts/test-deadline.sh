#!/usr/bin/env bash
# Runs one `swift test` with a deadline, its output kept in LOG and shown but for the lines of
# tests that start and pass, with a progress line every PROGRESS (15) seconds.
#
#   Scripts/test-deadline.sh SECONDS LOG COMMAND [ARGUMENT...]
#
# A suite that hangs must fail CI with what it was doing, not sit until CI's own limit with
# nothing said (one did: a run past 5400 s, its last lines a minute into a 77 s suite). Past
# SECONDS this prints the tests that started and never ended, the processes under the run with
# their states and kernel waits, the test process's threads (gdb, when present), and ends them.
# Exits with the command's status, or 124 past the deadline (as timeout(1) does).
set -uo pipefail

deadline=$1
log=$2
shift 2

descendants() { # the processes under $1, breadth first
    ps -eo pid=,ppid= | awk -v root="$1" '
        { parent[$1] = $2; order[NR] = $1 }
        END {
            keep[root] = 1
            do {
                grown = 0
                for (i = 1; i <= NR; i++) {
                    p = order[i]
                    if (!(p in keep) && (parent[p] in keep)) { keep[p] = 1; grown = 1 }
                }
            } while (grown)
            for (p in keep) if (p != root) print p
        }'
}

# "◇ Test NAME started." without a "✔ Test NAME …" or "✘ Test NAME …" that ends it.
unfinished() {
    awk '
        /^◇ Test .* started\.$/ && !/^◇ Test (case .*|run) started\.$/ {
            name = substr($0, length("◇ Test ") + 1); sub(/ started\.$/, "", name); running[name] = NR
        }
        /^(✔|✘) Test .* (passed|failed) after / {
            name = substr($0, index($0, "Test ") + 5)
            sub(/ (with [0-9]+ test cases? )?(passed|failed) after .*$/, "", name); delete running[name]
        }
        END { for (name in running) print "  " name }' "$log" 2>/dev/null
}

diagnose() { # run by the watch: the run is what is under this script but the watch
    local self=$BASHPID pids watch
    watch=$(echo "$self" $(descendants "$self"))
    pids=$(for pid in $(descendants $$); do [[ " $watch " == *" $pid "* ]] || echo "$pid"; done)
    pids=$(echo $pids)
    {
        echo
        echo "test-deadline: the suite is still running after ${deadline} s; what it is doing:"
        echo "tests started and not ended:"
        unfinished
        echo "processes under the run (state, kernel wait, seconds):"
        [ -n "$pids" ] && ps -o pid,ppid,stat,wchan:28,etimes,args -p "${pids// /,}" 2>/dev/null | cut -c1-220
        for pid in $pids; do
            # A process in the kernel (D) waits on something outside it: a file system, a lock.
            if [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" = D ]; then
                echo "kernel stack of $pid:"
                sed 's/^/  /' "/proc/$pid/stack" 2>/dev/null
            fi
        done
        echo "FUSE and tmpfs mounts under /tmp:"
        awk '$5 ~ "^/tmp/" { print "  " $5, $9 }' /proc/self/mountinfo
        for pid in $pids; do
            case "$(cat "/proc/$pid/cmdline" 2>/dev/null | tr '\0' ' ')" in
            *.xctest\ *)
                echo "threads of the test process $pid:"
                for task in /proc/"$pid"/task/*; do
                    printf '  %s %s %s\n' "${task##*/}" "$(cat "$task/comm")" "$(cat "$task/wchan")"
                done
                if command -v gdb >/dev/null; then
                    timeout 120 gdb -p "$pid" -batch -nx -ex 'set pagination off' -ex 'thread apply all bt 25' \
                        2>/dev/null | grep -E '^(Thread|#)' | cut -c1-200
                fi
                ;;
            esac
        done
    } >&2
    kill -KILL $pids 2>/dev/null
}

# A plain line every PROGRESS seconds while the run goes on (the console shows no line per test).
progress=${PROGRESS:-15}
rm -f "$log.deadline"
# The watch, in the background; the run stays in the foreground, so a terminal's Ctrl-C reaches
# it (a background command of a script ignores SIGINT). Each wait is a sleep of its own, waited
# for, so that the run's end ends the watch at once.
(
    elapsed=0
    while [ "$elapsed" -lt "$deadline" ]; do
        step=$((deadline - elapsed < progress ? deadline - elapsed : progress))
        sleep "$step" &
        wait $!
        elapsed=$((elapsed + step))
        kill -0 $$ 2>/dev/null || exit 0 # the script was ended meanwhile: nothing to say
        ended=$(grep -E '^(✔|✘) Test .* (passed|failed) after ' "$log" 2>/dev/null | grep -vc ' Test run with ')
        echo "test-deadline: ${elapsed} s, ${ended:-0} tests ended, $(unfinished | wc -l) running" >&2
    done
    diagnose
    touch "$log.deadline"
) &
watch=$!
# Line by line (stdbuf): the test process's own output to a pipe is kept in a buffer that a
# process ended here never writes, and the last lines are those that tell where it hung. All of
# it is kept in LOG; the console gets all but the line each test starts and passes with (some
# 1,900 lines, 200 kB, a run), so that what failed is what a CI log shows.
stdbuf -oL -eL "$@" 2>&1 | tee "$log" | sed -u -E '
    /^◇ (Test|Suite) .* started\.$/d
    /^✔ Test run with /b
    /^✔ (Test|Suite) .* passed after [0-9.]+ seconds\.$/d'
status=${PIPESTATUS[0]}
# The watch first, then its sleep (which holds this script's output open until it ends).
sleeper=$(pgrep -P "$watch" sleep)
kill "$watch" $sleeper 2>/dev/null
wait "$watch" 2>/dev/null
if [ -e "$log.deadline" ]; then
    rm -f "$log.deadline"
    echo "test-deadline: ended after ${deadline} s" >&2
    exit 124
fi
exit "$status"
