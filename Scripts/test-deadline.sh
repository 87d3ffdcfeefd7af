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
# Exits with the command's status, or 124 past the deadline (as timeout(1) does). Once the
# command has ended, processes it left that still hold its output get DRAIN (30) seconds. Needs
# procps (`ps`), which `make deps` installs when missing. Tested by TestDeadlineScriptTests.
set -uo pipefail

deadline=$1
log=$2
shift 2
progress=${PROGRESS:-15}
[ "$progress" -ge 1 ] 2>/dev/null || progress=15
# Once the command has ended, how long the processes it left may hold its output open: the
# PostgreSQL clusters' watchdogs keep it while they stop their servers and delete their folders,
# which took 0.2 s after a one-test run here.
drain=${DRAIN:-30}

# The processes of the run: what is under this script but not under the watch ($1), the watch's
# own commands included, from one listing.
run_processes() {
    ps -eo pid=,ppid= | awk -v root=$$ -v watch="$1" '
        { parent[$1] = $2; order[NR] = $1 }
        END {
            under[root] = 1; mine[watch] = 1
            do {
                grown = 0
                for (i = 1; i <= NR; i++) {
                    p = order[i]
                    if (!(p in under) && (parent[p] in under)) { under[p] = 1; grown = 1 }
                    if (!(p in mine) && (parent[p] in mine)) { mine[p] = 1; grown = 1 }
                }
            } while (grown)
            for (p in under) if (p != root && !(p in mine)) print p
        }'
}

command_line() { # of process $1, its arguments joined by spaces; nothing once it is gone
    { tr '\0' ' ' <"/proc/$1/cmdline"; } 2>/dev/null
}

# "◇ Test NAME started." without a "✔ Test NAME …" or "✘ Test NAME …" that ends it. (Names
# alone: two tests of one name in two suites count as one.)
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

diagnose() { # run by the watch, whose pid is $1
    local pids
    pids=$(echo $(run_processes "$1"))
    echo
    echo "test-deadline: the suite is still running after ${deadline} s; what it is doing:"
    echo "tests started and not ended:"
    unfinished
    echo "processes under the run (state, kernel wait, seconds):"
    [ -n "$pids" ] && ps -o pid,ppid,stat,wchan:28,etimes,args -p "${pids// /,}" 2>/dev/null | cut -c1-220
    # A process in the kernel (D) waits on something outside it: a file system, a lock.
    for pid in $([ -n "$pids" ] && ps -o pid=,stat= -p "${pids// /,}" | awk '$2 ~ /^D/ { print $1 }'); do
        echo "kernel stack of $pid:"
        sed 's/^/  /' "/proc/$pid/stack" 2>/dev/null
    done
    echo "FUSE and tmpfs mounts under /tmp:"
    awk '{ split($0, halves, " - "); split(halves[1], mount, " "); split(halves[2], kind, " ")
           if (mount[5] ~ "^/tmp/" && kind[1] ~ /^(fuse|tmpfs)/) print "  " mount[5], kind[1] }' /proc/self/mountinfo
    for pid in $pids; do
        case "$(command_line "$pid")" in
        *.xctest\ *)
            echo "threads of the test process $pid:"
            for task in /proc/"$pid"/task/*; do
                printf '  %s %s %s\n' "${task##*/}" "$(cat "$task/comm" 2>/dev/null)" "$(cat "$task/wchan" 2>/dev/null)"
            done
            if command -v gdb >/dev/null; then
                timeout 120 gdb -p "$pid" -batch -nx -ex 'set pagination off' -ex 'thread apply all bt 25' \
                    2>/dev/null | grep -E '^(Thread|#)' | cut -c1-200
            fi
            ;;
        esac
    done
}

# Ends the run: every process under it as listed now, but the PostgreSQL clusters' watchdogs,
# which ignore SIGTERM on purpose and stop their servers once the test process is gone.
end_run() {
    for pid in $(run_processes "$1"); do
        case "$(command_line "$pid")" in
        *postgres-cluster-watchdog*) ;;
        *) kill -KILL "$pid" 2>/dev/null ;;
        esac
    done
}

mkdir -p "$(dirname "$log")"
rm -f "$log.deadline" "$log.status"
# The watch, in the background, ticking once a second; the run stays in the foreground, so a
# terminal's Ctrl-C reaches it (a background command of a script ignores SIGINT).
(
    trap 'kill $! 2>/dev/null; exit 0' TERM
    elapsed=0 ended_for=0
    while :; do
        sleep 1 &
        wait $!
        elapsed=$((elapsed + 1))
        kill -0 $$ 2>/dev/null || exit 0 # the script was ended meanwhile: nothing to say
        if [ -e "$log.status" ]; then
            # The command ended; what it left may still hold its output (and so the pipe) open.
            ended_for=$((ended_for + 1))
            if [ "$ended_for" -ge "$drain" ]; then
                echo "test-deadline: the run ended, but processes it left held its output open ${drain} s longer: ended here" >&2
                end_run "$BASHPID"
                exit 0
            fi
        elif [ "$elapsed" -ge "$deadline" ]; then
            diagnose "$BASHPID" >&2
            touch "$log.deadline"
            end_run "$BASHPID"
            exit 0
        elif [ $((elapsed % progress)) -eq 0 ]; then
            ended=$(grep -E '^(✔|✘) Test .* (passed|failed) after ' "$log" 2>/dev/null | grep -vc ' Test run with ')
            echo "test-deadline: ${elapsed} s, ${ended:-0} tests ended, $(unfinished | wc -l) running" >&2
        fi
    done
) &
watch=$!
trap 'kill "$watch" 2>/dev/null' EXIT
# Line by line (stdbuf): the test process's own output to a pipe is kept in a buffer that a
# process ended here never writes, and the last lines are those that tell where it hung. All of
# it is kept in LOG; the console gets all but the line each test starts and passes with (some
# 1,900 lines, 200 kB, a run), so that what failed is what a CI log shows. The command's status
# goes through a file: the pipeline ends only once nothing holds the output open.
{
    stdbuf -oL -eL "$@" 2>&1
    echo $? >"$log.status"
} | tee "$log" | sed -u -E '
    /^◇ (Test|Suite) .* started\.$/d
    /^✔ Test run with /b
    /^✔ (Test|Suite) .* passed after [0-9.]+ seconds\.$/d'
if [ -e "$log.deadline" ]; then
    wait "$watch" # it is ending the run's processes: let it finish
    rm -f "$log.deadline" "$log.status"
    echo "test-deadline: ended after ${deadline} s" >&2
    exit 124
fi
kill "$watch" 2>/dev/null
status=$(cat "$log.status" 2>/dev/null || echo 1)
rm -f "$log.status"
exit "$status"
