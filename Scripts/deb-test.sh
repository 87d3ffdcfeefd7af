#!/usr/bin/env bash
# `make deb-test`: installs the packages `make deb` built on this machine, uses them as an
# operator would, removes and purges them, and leaves the machine as it found it. Needs root
# (re-runs itself with sudo otherwise). Not part of `make test`: it needs the release build.
#
#   1. dpkg -i both packages (apt-get install -f for missing dependencies): the user dopesync,
#      the spool with mode 2770, the timer installed but not enabled;
#   2. ldd of the installed binaries: no Swift library;
#   3. dopesync --version, man -w dopesync, the completions, systemd-analyze verify on the
#      installed units;
#   4. the installed dopesync-devserver on a free port; a bundle packed by the installed dopesync
#      into /var/spool/dopesync/incoming/; the installed service's ExecStart run once as the unit
#      runs it (user dopesync, its working folder and umask, an empty environment, the token as a
#      credential file, the API URL in DOPESYNC_API_URL as a drop-in's Environment= would pass
#      it): the bundle ends in done/;
#   5. dpkg -r: the spool, its bundle and the checkpoint database are still there;
#   6. dpkg --purge: the spool is still there, and postrm says so;
#   7. clean-up: the spool, /etc/dopesync, the user and group dopesync, and any package apt-get
#      installed for the test are removed again.
#
# systemd is usually not PID 1 where this runs (containers, CI): nothing here needs it to be.
# It refuses to run where dopesync is installed or /var/spool/dopesync or /etc/dopesync exist.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" -ne 0 ]; then
  exec sudo --preserve-env=PATH "$0" "$@"
fi

for tool in dpkg-deb apt-get systemd-analyze man runuser setpriv getent; do
  command -v "$tool" > /dev/null || { echo "deb-test: needs $tool" >&2; exit 1; }
done

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
say() { printf '   %s\n' "$*"; }
fail() { echo "deb-test: FAILED: $*" >&2; exit 1; }

VERSION=$(sed -n 's/^ *public static let version = "\([^"]*\)".*/\1/p' Sources/DopeSync/DopeSync.swift)
ARCH=$(dpkg --print-architecture)
DEB="dist/dopesync_${VERSION}_${ARCH}.deb"
DEVDEB="dist/dopesync-devserver_${VERSION}_${ARCH}.deb"
for f in "$DEB" "$DEVDEB"; do [ -f "$f" ] || fail "$f is missing: run \`make deb\` first"; done

SPOOL=/var/spool/dopesync
TOKEN=deb-test-token
SAMPLE=jobs/samples/range-day-1

# --- What the machine looks like before ------------------------------------------------------------
for p in dopesync dopesync-devserver; do
  if dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null | grep -qv '^not-installed$'; then
    fail "$p is already on this machine (dpkg -l $p); this test installs and purges it"
  fi
done
for d in "$SPOOL" /etc/dopesync; do
  [ ! -e "$d" ] || fail "$d already exists; this test would delete it at the end"
done
USER_BEFORE=0; getent passwd dopesync > /dev/null && USER_BEFORE=1
GROUP_BEFORE=0; getent group dopesync > /dev/null && GROUP_BEFORE=1
installed_packages() { dpkg-query -W -f='${db:Status-Status} ${Package}\n' | sed -n 's/^installed //p' | LC_ALL=C sort; }
PACKAGES_BEFORE=$(installed_packages)

WORK=$(mktemp -d "${TMPDIR:-/tmp}/dopesync-deb-test.XXXXXX")
chmod 0755 "$WORK"   # the dopesync user reads the sample and its credential below
SERVER_PID=""
cleanup() {
  local status=$?
  set +e
  step "Clean-up"
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null
  fi
  for p in dopesync-devserver dopesync; do
    if dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null | grep -qv '^not-installed$'; then
      say "dpkg --purge $p"; dpkg --purge "$p" > /dev/null
    fi
  done
  # Only what this test made: both folders were checked absent at the start.
  rm -rf "$SPOOL" /etc/dopesync
  if [ "$USER_BEFORE" = 0 ] && getent passwd dopesync > /dev/null; then say "userdel dopesync"; userdel dopesync; fi
  if [ "$GROUP_BEFORE" = 0 ] && getent group dopesync > /dev/null; then say "groupdel dopesync"; groupdel dopesync; fi
  local added
  added=$(LC_ALL=C comm -13 <(echo "$PACKAGES_BEFORE") <(installed_packages))
  if [ -n "$added" ]; then
    say "apt-get purge (installed for the test): $(echo $added)"
    DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq -o DPkg::Lock::Timeout=120 $added > /dev/null
  fi
  rm -rf "$WORK"
  if [ "$(installed_packages)" = "$PACKAGES_BEFORE" ] && [ ! -e "$SPOOL" ] && [ ! -e /etc/dopesync ] &&
    { [ "$USER_BEFORE" = 1 ] || ! getent passwd dopesync > /dev/null; }; then
    say "the machine is as before: same packages, no $SPOOL, no /etc/dopesync, no user dopesync"
  else
    echo "deb-test: the clean-up left something behind (above)" >&2
    [ "$status" = 0 ] && status=1
  fi
  if [ "$status" = 0 ]; then printf '\n\033[1mdeb-test: passed\033[0m\n'; fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- 1. Install ----------------------------------------------------------------------------------
step "dpkg -i $DEB $DEVDEB"
if ! dpkg -i "$DEB" "$DEVDEB"; then
  say "apt-get install -f (dependencies)"
  DEBIAN_FRONTEND=noninteractive apt-get install -f -y -qq -o DPkg::Lock::Timeout=120
fi
for p in dopesync dopesync-devserver; do
  [ "$(dpkg-query -W -f='${db:Status-Status}' "$p")" = installed ] || fail "$p is not installed"
done

getent passwd dopesync | grep -q ':/var/spool/dopesync:/usr/sbin/nologin$' ||
  fail "no system user dopesync with home $SPOOL and shell nologin: $(getent passwd dopesync)"
say "user: $(getent passwd dopesync)"
for d in "" /tmp /incoming /processing /done /failed; do
  got=$(stat -c '%a %U:%G' "$SPOOL$d")
  [ "$got" = "2770 dopesync:dopesync" ] || fail "$SPOOL$d is $got, not 2770 dopesync:dopesync"
done
say "spool: $SPOOL{,/tmp,/incoming,/processing,/done,/failed} are 2770 dopesync:dopesync"
enabled=$(systemctl is-enabled dopesync.timer 2>&1 || true)
[ "$enabled" = disabled ] || fail "dopesync.timer is '$enabled' after installation, not disabled"
[ ! -e /etc/systemd/system/timers.target.wants/dopesync.timer ] || fail "the timer was enabled"
say "dopesync.timer: $enabled (nothing runs until the operator enables it)"
dpkg-query -W -f='${Conffiles}\n' dopesync | grep -q '^ /etc/dopesync/production.yaml ' ||
  fail "/etc/dopesync/production.yaml is not a conffile"
say "conffile: /etc/dopesync/production.yaml, shipped with \"$(grep '^api:' /etc/dopesync/production.yaml)\" (empty: set by the operator)"

# --- 2. ldd ---------------------------------------------------------------------------------------
step "ldd of the installed binaries (no Swift library may appear)"
for bin in dopesync dopesync-devserver; do
  say "ldd /usr/bin/$bin:"
  ldd "/usr/bin/$bin" | sed 's/^/     /'
  ! ldd "/usr/bin/$bin" | grep -E 'libswift|libFoundation|lib_Foundation|libdispatch|libBlocksRuntime|/opt/swift|not found' ||
    fail "$bin needs a Swift library or a library this machine lacks"
done

# --- 3. What an operator looks at ------------------------------------------------------------------
step "dopesync --version, man -w, completions, systemd-analyze verify"
hash -r
[ "$(command -v dopesync)" = /usr/bin/dopesync ] || fail "dopesync resolves to $(command -v dopesync)"
printed=$(dopesync --version)
[ "$printed" = "$VERSION" ] || fail "dopesync --version printed '$printed', expected $VERSION"
say "dopesync --version: $printed"
say "man -w dopesync: $(man -w dopesync)"
say "man -w dopesync-devserver: $(man -w dopesync-devserver)"
page=$(MANWIDTH=80 man -P cat dopesync 2> /dev/null)
grep -q -- '--token-file' <<< "$page" || fail "man dopesync does not describe run's --token-file"
bash -c 'source /usr/share/bash-completion/completions/dopesync && complete -p dopesync' > /dev/null ||
  fail "the bash completion does not load"
for f in /usr/share/zsh/vendor-completions/_dopesync /usr/share/fish/vendor_completions.d/dopesync.fish; do
  [ -s "$f" ] || fail "$f is missing"
done
say "completions: bash, zsh, fish"
verify=$(systemd-analyze verify /usr/lib/systemd/system/dopesync.service /usr/lib/systemd/system/dopesync.timer 2>&1) ||
  fail "systemd-analyze verify: $verify"
[ -z "$verify" ] || fail "systemd-analyze verify printed: $verify"
say "systemd-analyze verify: the installed service and timer, no complaint"

# --- 4. One run, as the installed service would run it ------------------------------------------------
step "The installed dopesync-devserver"
setpriv --reuid=nobody --regid=nogroup --clear-groups \
  /usr/bin/dopesync-devserver --port 0 --token "$TOKEN" > "$WORK/devserver.out" 2> "$WORK/devserver.log" &
SERVER_PID=$!
URL=""
for _ in $(seq 300); do
  URL=$(sed -n 's/^listening on \(http:[^ ]*\)$/\1/p' "$WORK/devserver.out")
  [ -n "$URL" ] && break
  kill -0 "$SERVER_PID" 2> /dev/null || { cat "$WORK/devserver.log" >&2; fail "the dev server exited"; }
  sleep 0.1
done
[ -n "$URL" ] || fail "the dev server printed no 'listening on' line within 30 s"
say "listening on $URL (pid $SERVER_PID, as user nobody)"

step "A bundle into $SPOOL/incoming/ (dopesync pack, as a producer in group dopesync)"
cp -r "$SAMPLE" "$WORK/sample"
chmod -R a+rX "$WORK/sample"
runuser -u dopesync -- /usr/bin/dopesync pack "$WORK/sample/session.json" --spool "$SPOOL" | sed 's/^/   /'
BUNDLE=$(cd "$SPOOL/incoming" && ls)
[ "$(echo "$BUNDLE" | wc -w)" = 1 ] || fail "expected one bundle in incoming/, found: $BUNDLE"
# The job file's min-age is 30s: a bundle dropped two minutes ago is due.
touch -d '2 minutes ago' "$SPOOL/incoming/$BUNDLE"
say "incoming/$BUNDLE"

step "The operator's token, and the service's ExecStart once as the unit runs it"
install -o dopesync -g dopesync -m 0600 /dev/stdin /etc/dopesync/api-token <<< "$TOKEN"
UNIT=/usr/lib/systemd/system/dopesync.service
unit_value() { sed -n "s/^$1=//p" "$UNIT"; }
[ "$(unit_value User)" = dopesync ] || fail "the unit's User= is not dopesync"
# LoadCredential=api-token:/etc/dopesync/api-token: systemd copies the file into
# $CREDENTIALS_DIRECTORY (%d), readable by the service's user only.
credential=$(unit_value LoadCredential)
[ "$credential" = "api-token:/etc/dopesync/api-token" ] || fail "unexpected LoadCredential=$credential"
CREDENTIALS="$WORK/credentials"
install -d -o dopesync -g dopesync -m 0700 "$CREDENTIALS"
install -o dopesync -g dopesync -m 0400 /etc/dopesync/api-token "$CREDENTIALS/api-token"
exec_start=$(unit_value ExecStart)
read -r -a argv <<< "${exec_start//%d/$CREDENTIALS}"
say "User=$(unit_value User) WorkingDirectory=$(unit_value WorkingDirectory) UMask=$(unit_value UMask)"
say "DOPESYNC_API_URL=$URL ${argv[*]}"
status=0
(cd "$(unit_value WorkingDirectory)" && umask "$(unit_value UMask)" &&
  exec runuser -u "$(unit_value User)" -- env -i PATH=/usr/bin:/bin DOPESYNC_API_URL="$URL" "${argv[@]}") \
  > "$WORK/run.out" 2> "$WORK/run.err" || status=$?
sed 's/^/   | /' "$WORK/run.err" "$WORK/run.out"
[ "$status" = 0 ] || fail "the run exited $status"
cat "$WORK/run.out" "$WORK/run.err" | grep -q 'run finished: 1 claimed, 1 done, 0 deferred, 0 failed' || fail "no 'run finished: 1 claimed, 1 done' line"
[ -f "$SPOOL/done/$BUNDLE" ] || fail "$BUNDLE is not in done/"
left=$(find "$SPOOL/incoming" "$SPOOL/processing" "$SPOOL/failed" -mindepth 1)
[ -z "$left" ] || fail "incoming/, processing/ or failed/ is not empty: $left"
[ -f "$SPOOL/dopesync.sqlite" ] || fail "no checkpoint database $SPOOL/dopesync.sqlite"
say "done/$BUNDLE ($(stat -c '%a %U:%G' "$SPOOL/done/$BUNDLE"))"
runuser -u dopesync -- /usr/bin/dopesync status --job /etc/dopesync/production.yaml | sed 's/^/   | /'
if command -v curl > /dev/null; then
  say "the dev server's counts: $(curl -fsS -H "Authorization: Bearer $TOKEN" "$URL/admin/stats" | tr -d '\n' | cut -c1-300)"
fi
kill -TERM "$SERVER_PID"; wait "$SERVER_PID" || true; SERVER_PID=""

# --- 5. Remove -----------------------------------------------------------------------------------
step "dpkg -r dopesync dopesync-devserver"
dpkg -r dopesync-devserver dopesync
[ ! -e /usr/bin/dopesync ] && [ ! -e /usr/bin/dopesync-devserver ] || fail "a binary is still installed"
[ -f "$SPOOL/done/$BUNDLE" ] || fail "removing the package lost done/$BUNDLE"
[ -f "$SPOOL/dopesync.sqlite" ] || fail "removing the package lost the checkpoint database"
[ -f /etc/dopesync/production.yaml ] || fail "removing the package deleted the conffile (only purge should)"
getent passwd dopesync > /dev/null || fail "removing the package deleted the user dopesync"
say "still there after dpkg -r:"
ls -la "$SPOOL" "$SPOOL/done" /etc/dopesync | sed 's/^/     /'

# --- 6. Purge ------------------------------------------------------------------------------------
step "dpkg --purge dopesync"
dpkg --purge dopesync | tee "$WORK/purge.out"   # dpkg -r already took all of dopesync-devserver (no conffiles)
grep -q 'Kept on purpose: the spool /var/spool/dopesync' "$WORK/purge.out" || fail "postrm purge did not say the spool is kept"
[ -f "$SPOOL/done/$BUNDLE" ] && [ -f "$SPOOL/dopesync.sqlite" ] || fail "purging lost the spool"
[ ! -e /etc/dopesync ] || fail "/etc/dopesync is still there after purge: $(ls -A /etc/dopesync)"
say "still there after dpkg --purge: $SPOOL/done/$BUNDLE, $SPOOL/dopesync.sqlite; /etc/dopesync is gone"
