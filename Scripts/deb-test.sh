#!/usr/bin/env bash
# `make deb-test`: installs the packages `make deb` built on this machine, uses them as an
# operator would, removes and purges them, and leaves the machine as it found it. Needs root
# (re-runs itself with sudo otherwise). Not part of `make test`: it needs the release build.
#
#   1. dpkg -i both packages (apt-get install -f for missing dependencies, acl among them): the
#      user dopesync, a member of the group dopesync-producers; the spool root 0750
#      dopesync:dopesync-producers, tmp/ and incoming/ 3730 dopesync:dopesync-producers with the
#      default ACL user::rwx, user:dopesync:r--, group::---, mask::r--, other::--- (getfacl),
#      processing/, done/ and failed/ 0750 dopesync:dopesync; the job file 0640 root:dopesync
#      (a dpkg-statoverride); the units dopesync.service, dopesync.timer, dopesync.path,
#      dopesync-prune.service and dopesync-prune.timer installed, none enabled; postinst's line
#      `check the setup with: runuser -u dopesync -- dopesync check --job
#      /etc/dopesync/production.yaml`;
#   2. ldd of the installed binaries (dopesync-bundle's too): no Swift library;
#   3. dopesync --version, man -w dopesync (and dopesync-bundle), the completions, systemd-analyze verify on the five
#      installed units; the man page is the hand-written one (sections JOB FILE, ENVIRONMENT,
#      FILES, EXIT STATUS); /usr/share/doc/dopesync/ holds README.md and every docs/*.md in docs/;
#      /usr/share/dopesync/ holds the alerting rules, their tests and the Grafana dashboard of
#      jobs/ (0644 root:root, the same bytes), and `promtool check rules` and `promtool test
#      rules` pass on the installed copies (Scripts/rules-test.sh, which installs Debian's
#      prometheus package for promtool if missing: purged again by the clean-up);
#   4. two producers, users in group dopesync-producers, each with umask 022: as the first
#      (runuser), a bundle packed by the installed dopesync (which the installed dopesync-bundle
#      inspect finds valid: exit 0) is written into tmp/ (0640 and the ACL
#      user::rw-, user:dopesync:r--, group::---, mask::r--, other::---, group dopesync-producers
#      from the setgid folder) and renamed into incoming/; it cannot create a file in the spool
#      root, processing/, done/ or failed/. The second producer writes its own bundle into tmp/
#      and renames it into incoming/: the first cannot list tmp/ or incoming/ (ls, find), nor
#      read that bundle by its name in either (cat, tar xzOf ... session.json: the reported
#      attack), not even after its owner's chmod 0644, nor remove, rename, replace or write it
#      (the sticky bit); the first reads its own, user dopesync reads both; the second then
#      renames its bundle back into tmp/, where it waits for step 5;
#   5. the installed service's ExecStart run as the unit runs it (user dopesync, its working
#      folder, umask and LimitCORE, an empty environment, the token as a credential file, the
#      API URL in DOPESYNC_API_URL as a drop-in's Environment= would pass it), against the
#      installed dopesync-devserver on a free port: first one that fails every request, and the
#      producer's bundle goes back to incoming/, still the producer's file; then, the file
#      touched (retry now), a working one, and the bundle ends in done/; the checkpoint database
#      (dopesync.sqlite and its -wal, -shm, .lock) is dopesync's, mode 0600, and the producer
#      can read none of it; then the operator's `runuser -u dopesync -- dopesync check --job
#      /etc/dopesync/production.yaml`, in an empty environment: with the shipped job file (api:
#      empty) exit 78; with api: set to the dev server (the token file from the job file's
#      token-file:) exit 0, every line `ok`; with --token-file naming a wrong token exit 77; with
#      --api the URL plus /api exit 78; the job file then gets its shipped content back;
#      before the check, what dopesync.path does (systemd is not PID 1 here, so no path unit can
#      fire: the run it would start is started by hand): the second producer's bundle, written
#      more than min-age before, renamed in and the ExecStart run at once: it is in done/ when
#      the run ends, and the time from the rename to done/ is shown (done/ then holds both
#      producers' bundles, still their files); then a third bundle renamed into incoming/ the
#      moment it was written, and the ExecStart run at once with the shipped job file (min-age
#      30s): the run says it waits, uploads it once due, and the time from the rename to done/
#      (its last record on the server) is min-age plus a few seconds, shown;
#      dopesync-prune.service's ExecStart run as that unit runs it (user dopesync, no token, no
#      API): exit 0, nothing younger than 30 days deleted; then against PostgreSQL (a throwaway
#      cluster from Scripts/pg-cluster.sh, database: in the job file, a spool of its own): the
#      unit has no PrivateNetwork= and allows AF_INET, a run syncs a bundle, and the prune's
#      ExecStart exits 0 and deletes a bundle done 40 days ago;
#      the operator's `systemctl enable dopesync.timer` (offline: the links alone) enables
#      dopesync.path and dopesync-prune.timer with it (its Also=);
#   6. upgrades fix what is wrong: an upgrade to a repacked version whose job file changed is
#      unpacked (dpkg --unpack) with the job file already 0640 root:dopesync; then the spool made
#      as an older version made it (2770 dopesync:dopesync everywhere, the database 0660, one of
#      its files root's), the job file edited and made 0644 root:root, and dopesync taken out of
#      dopesync-producers: installing the package again gives every owner, mode and membership
#      back, keeps the edit, and tells the operator to move the producers to the new group (and
#      postinst suggests the check again, after the upgrade as after the installation); then the
#      spool as the previous package left it (tmp/ and incoming/ 3770 without ACL, the second
#      producer's bundles waiting in tmp/, incoming/, processing/ and failed/, 0640 group
#      dopesync-producers, which the first producer lists and reads: the attack, shown first),
#      with a hard link to a file not a producer's and a producer's symlink among them:
#      installing again makes the folders 3730 with the default ACL, gives each waiting bundle
#      the ACL a new one gets (user dopesync reads it, the first producer cannot list the
#      folders nor read it), leaves the hard link's file and the symlink alone (with a warning
#      for the link), and tells the operator; the same again through postinst's fallback, run
#      with a PATH that lacks systemd-tmpfiles and systemd-sysusers (mkdir, perl and setfacl;
#      usermod puts dopesync back into dopesync-producers);
#   7. dpkg -r: the spool, its bundle and the checkpoint database are still there;
#   8. dpkg --purge: the spool is still there, and postrm says so; the statoverride is gone, and
#      so are the links that enabled the timer, the path unit and the prune timer;
#   9. clean-up: the spool, /etc/dopesync, the producers, the user dopesync, the groups
#      dopesync and dopesync-producers, and any package apt-get installed for the test (acl,
#      where it was missing) are removed again.
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

VERSION=$(sed -n 's/^ *public static let version = "\([^"]*\)".*/\1/p' Sources/DopeSyncSupport/DopeSyncInfo.swift)
ARCH=$(dpkg --print-architecture)
DEB="dist/dopesync_${VERSION}_${ARCH}.deb"
DEVDEB="dist/dopesync-devserver_${VERSION}_${ARCH}.deb"
for f in "$DEB" "$DEVDEB"; do [ -f "$f" ] || fail "$f is missing: run \`make deb\` first"; done

SPOOL=/var/spool/dopesync
JOB=/etc/dopesync/production.yaml
REPO=$PWD
PG_DIR=""
TOKEN=deb-test-token
SAMPLE=jobs/samples/range-day-1
SECOND_SAMPLE=jobs/samples/range-day-2
# Two producers (users in group dopesync-producers), made for the test and deleted at its end.
PRODUCER=dopesync-test-producer
OTHER_PRODUCER=dopesync-test-producer2

# --- What the machine looks like before ------------------------------------------------------------
for p in dopesync dopesync-devserver; do
  if dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null | grep -qv '^not-installed$'; then
    fail "$p is already on this machine (dpkg -l $p); this test installs and purges it"
  fi
done
for d in "$SPOOL" /var/spool/dopesync-pg /etc/dopesync; do
  [ ! -e "$d" ] || fail "$d already exists; this test would delete it at the end"
done
for u in "$PRODUCER" "$OTHER_PRODUCER"; do
  ! getent passwd "$u" > /dev/null && ! getent group "$u" > /dev/null ||
    fail "the user or group $u already exists; this test makes it and deletes it at the end"
done
! dpkg-statoverride --list "$JOB" > /dev/null ||
  fail "dpkg-statoverride already lists $JOB; this test would delete that override at the end"
# The links `systemctl enable dopesync.timer` makes (the test makes them; purge must remove them).
UNITS=/usr/lib/systemd/system
WANTS=(timers.target.wants/dopesync.timer timers.target.wants/dopesync-prune.timer paths.target.wants/dopesync.path)
for link in "${WANTS[@]}"; do
  [ ! -e "/etc/systemd/system/$link" ] && [ ! -L "/etc/systemd/system/$link" ] ||
    fail "/etc/systemd/system/$link already exists; this test would delete it at the end"
done
PATHS_WANTS_BEFORE=0; [ -d /etc/systemd/system/paths.target.wants ] && PATHS_WANTS_BEFORE=1
USER_BEFORE=0; getent passwd dopesync > /dev/null && USER_BEFORE=1
GROUP_BEFORE=0; getent group dopesync > /dev/null && GROUP_BEFORE=1
PRODUCERS_GROUP_BEFORE=0; getent group dopesync-producers > /dev/null && PRODUCERS_GROUP_BEFORE=1
# The formatted pages man-db keeps in /var/cache/man (`man dopesync` at 80 columns saves one).
# man uses one while its time equals the page's, and every build of a version dates its files
# from the changelog: a page left by an earlier package of the same version would be shown
# instead of the new one. With dopesync not installed, any such file is stale: deleted before the
# test reads the page, and at its end.
cat_pages() {
  find /var/cache/man -path '*/cat1/*' \( -name 'dopesync.1*' -o -name 'dopesync-devserver.1*' \) -print "$@" 2> /dev/null || true
}
drop_cat_pages() { cat_pages -delete; }
# enablement_links: lists the links of WANTS that exist (status 0 when there is one).
enablement_links() {
  local link found=1
  for link in "${WANTS[@]}"; do
    if [ -L "/etc/systemd/system/$link" ]; then echo "/etc/systemd/system/$link"; found=0; fi
  done
  return $found
}
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
  if [ -n "$PG_DIR" ] && [ -d "$PG_DIR" ]; then "$REPO/Scripts/pg-cluster.sh" stop "$PG_DIR" > /dev/null; fi
  rm -rf /var/spool/dopesync-pg
  # Only what this test made: both folders, both producers and the override were checked absent
  # at the start.
  rm -rf "$SPOOL" /etc/dopesync
  for link in "${WANTS[@]}"; do
    if [ -L "/etc/systemd/system/$link" ]; then say "rm /etc/systemd/system/$link"; rm -f "/etc/systemd/system/$link"; fi
  done
  [ "$PATHS_WANTS_BEFORE" = 1 ] || rmdir /etc/systemd/system/paths.target.wants 2> /dev/null
  drop_cat_pages | sed 's/^/   removed the formatted page /'
  if dpkg-statoverride --list "$JOB" > /dev/null; then say "dpkg-statoverride --remove $JOB"; dpkg-statoverride --remove "$JOB"; fi
  for u in "$PRODUCER" "$OTHER_PRODUCER"; do
    if getent passwd "$u" > /dev/null; then say "userdel $u"; userdel "$u"; fi
    if getent group "$u" > /dev/null; then groupdel "$u"; fi
  done
  if [ "$USER_BEFORE" = 0 ] && getent passwd dopesync > /dev/null; then say "userdel dopesync"; userdel dopesync; fi
  if [ "$GROUP_BEFORE" = 0 ] && getent group dopesync > /dev/null; then say "groupdel dopesync"; groupdel dopesync; fi
  if [ "$PRODUCERS_GROUP_BEFORE" = 0 ] && getent group dopesync-producers > /dev/null; then
    say "groupdel dopesync-producers"; groupdel dopesync-producers
  fi
  local added
  added=$(LC_ALL=C comm -13 <(echo "$PACKAGES_BEFORE") <(installed_packages))
  if [ -n "$added" ]; then
    say "apt-get purge (installed for the test): $(echo $added)"
    DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq -o DPkg::Lock::Timeout=120 $added > /dev/null
  fi
  rm -rf "$WORK"
  if [ "$(installed_packages)" = "$PACKAGES_BEFORE" ] && [ ! -e "$SPOOL" ] && [ ! -e /etc/dopesync ] &&
    { [ "$USER_BEFORE" = 1 ] || ! getent passwd dopesync > /dev/null; } &&
    { [ "$PRODUCERS_GROUP_BEFORE" = 1 ] || ! getent group dopesync-producers > /dev/null; } &&
    ! getent passwd "$PRODUCER" > /dev/null && ! getent passwd "$OTHER_PRODUCER" > /dev/null &&
    ! dpkg-statoverride --list "$JOB" > /dev/null && [ -z "$(cat_pages)" ] && ! enablement_links &&
    { [ "$PATHS_WANTS_BEFORE" = 1 ] || [ ! -e /etc/systemd/system/paths.target.wants ]; }; then
    say "the machine is as before: same packages, no $SPOOL, no /etc/dopesync, no user dopesync, no group dopesync-producers, no producer, no statoverride, no formatted man page, no unit enabled"
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
# What postinst suggests after every installation and upgrade.
CHECK_HINT="check the setup with: runuser -u dopesync -- dopesync check --job $JOB"
if ! dpkg -i "$DEB" "$DEVDEB" 2>&1 | tee "$WORK/install.out"; then
  say "apt-get install -f (dependencies)"
  # (apt-get runs dpkg on a terminal of its own: its lines end in \r\n)
  DEBIAN_FRONTEND=noninteractive apt-get install -f -y -qq -o DPkg::Lock::Timeout=120 2>&1 | tr -d '\r' |
    tee -a "$WORK/install.out"
fi
for p in dopesync dopesync-devserver; do
  [ "$(dpkg-query -W -f='${db:Status-Status}' "$p")" = installed ] || fail "$p is not installed"
done
grep -qxF "$CHECK_HINT" "$WORK/install.out" || fail "postinst did not print '$CHECK_HINT'"
say "postinst said: $CHECK_HINT"

getent passwd dopesync | grep -q ':/var/spool/dopesync:/usr/sbin/nologin$' ||
  fail "no system user dopesync with home $SPOOL and shell nologin: $(getent passwd dopesync)"
say "user: $(getent passwd dopesync)"

# acl_of [getfacl's -a or -d] PATH...: PATH's ACL entries (getfacl's lines, joined with commas).
acl_of() { getfacl -cp "$@" 2> /dev/null | grep -v '^$' | paste -sd, -; }
# tmp/'s and incoming/'s own ACL (their mode, 3730: nothing more), and their default ACL, which
# every file created in them gets (a file created with mode 0666 or 0644: FILE_ACL, shown 0640).
FOLDER_ACL="user::rwx,group::-wx,other::---"
FOLDER_DEFAULT_ACL="user::rwx,user:dopesync:r--,group::---,mask::r--,other::---"
FILE_ACL="user::rw-,user:dopesync:r--,group::---,mask::r--,other::---"
# The owners, modes, ACLs and memberships the package promises; run again after the upgrades below.
check_layout() {
  local d got want
  getent group dopesync-producers > /dev/null || fail "no group dopesync-producers"
  id -nG dopesync | tr ' ' '\n' | grep -qx dopesync-producers ||
    fail "user dopesync is not in group dopesync-producers (its groups: $(id -nG dopesync))"
  runuser -u dopesync -- id -nG | tr ' ' '\n' | grep -qx dopesync-producers ||
    fail "a process of user dopesync does not get group dopesync-producers"
  for d in "" /tmp /incoming /processing /done /failed; do
    case "$d" in
    "") want="750 dopesync:dopesync-producers" ;;
    /tmp | /incoming) want="3730 dopesync:dopesync-producers" ;;
    *) want="750 dopesync:dopesync" ;;
    esac
    got=$(stat -c '%a %U:%G' "$SPOOL$d")
    [ "$got" = "$want" ] || fail "$SPOOL$d is $got, not $want"
  done
  for d in /tmp /incoming; do
    got=$(acl_of -a "$SPOOL$d")
    [ "$got" = "$FOLDER_ACL" ] || fail "$SPOOL$d's ACL is $got, not $FOLDER_ACL"
    got=$(acl_of -d "$SPOOL$d")
    [ "$got" = "$FOLDER_DEFAULT_ACL" ] || fail "$SPOOL$d's default ACL is ${got:-none}, not $FOLDER_DEFAULT_ACL"
  done
  got=$(stat -c '%a %U:%G' "$JOB")
  [ "$got" = "640 root:dopesync" ] || fail "$JOB is $got, not 640 root:dopesync"
  [ "$(dpkg-statoverride --list "$JOB")" = "root dopesync 640 $JOB" ] ||
    fail "dpkg-statoverride does not record $JOB as root dopesync 0640: $(dpkg-statoverride --list "$JOB")"
  for f in "$SPOOL"/dopesync.sqlite*; do
    [ -e "$f" ] || continue
    got=$(stat -c '%a %U' "$f")
    [ "$got" = "600 dopesync" ] || fail "$f is $got, not 600 dopesync"
  done
}
check_layout
say "groups: $(getent group dopesync-producers) (user dopesync is a member); $(getent group dopesync)"
say "spool: $SPOOL 0750 dopesync:dopesync-producers; tmp/, incoming/ 3730 dopesync:dopesync-producers, default ACL $FOLDER_DEFAULT_ACL; processing/, done/, failed/ 0750 dopesync:dopesync"
dpkg-query -W -f='${Depends}\n' dopesync | grep -Eq '(^|, )acl(,|$| )' || fail "the package does not depend on acl"
say "acl (setfacl, getfacl): $(dpkg-query -W -f='${Version}' acl), a dependency of the package"
say "job file: $(stat -c '%a %U:%G' "$JOB") $JOB (dpkg-statoverride: $(dpkg-statoverride --list "$JOB"))"
ALL_UNITS=(dopesync.service dopesync.timer dopesync.path dopesync-prune.service dopesync-prune.timer)
for unit in "${ALL_UNITS[@]}"; do [ -f "$UNITS/$unit" ] || fail "$UNITS/$unit is not installed"; done
say "units: ${ALL_UNITS[*]} in $UNITS"
for unit in dopesync.timer dopesync.path dopesync-prune.timer; do
  enabled=$(systemctl is-enabled "$unit" 2>&1 || true)
  [ "$enabled" = disabled ] || fail "$unit is '$enabled' after installation, not disabled"
done
! enablement_links || fail "the package enabled the units above"
say "dopesync.timer, dopesync.path, dopesync-prune.timer: disabled (nothing runs until the operator enables dopesync.timer)"
dpkg-query -W -f='${Conffiles}\n' dopesync | grep -q '^ /etc/dopesync/production.yaml ' ||
  fail "/etc/dopesync/production.yaml is not a conffile"
say "conffile: /etc/dopesync/production.yaml, shipped with \"$(grep '^api:' /etc/dopesync/production.yaml)\" (empty: set by the operator)"

# --- 2. ldd ---------------------------------------------------------------------------------------
step "ldd of the installed binaries (no Swift library may appear)"
for bin in dopesync dopesync-bundle dopesync-devserver; do
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
# `say "$(man -w …)"` would pass whatever man said: set -e ignores a substitution in an argument.
for page in dopesync dopesync-bundle dopesync-devserver; do
  found=$(man -w "$page") || fail "man -w $page: no man page installed"
  say "man -w $page: $found"
done
drop_cat_pages | sed 's/^/   removed a stale formatted page (an earlier package of this version): /'
page=$(MANWIDTH=80 man -P cat dopesync 2> /dev/null)
grep -q -- '--token-file' <<< "$page" || fail "man dopesync does not describe run's --token-file"
# The hand-written page (docs/dopesync.1): generate-manual's, made from the options, has none
# of these sections.
sections=$(grep -E '^(FILES|ENVIRONMENT|EXIT STATUS|JOB FILE)$' <<< "$page" | LC_ALL=C sort | paste -sd, -)
[ "$sections" = "ENVIRONMENT,EXIT STATUS,FILES,JOB FILE" ] ||
  fail "man dopesync lacks a section: it has [$sections] of ENVIRONMENT, EXIT STATUS, FILES, JOB FILE"
say "man dopesync: the hand-written page, with the sections $sections"
# The documentation, in the repository's layout (README.md's links go to docs/NAME.md).
DOC=/usr/share/doc/dopesync
for f in README.md docs/*.md; do
  [ -s "$DOC/$f" ] || fail "$DOC/$f is missing$(grep -hs '^path-exclude' /etc/dpkg/dpkg.cfg.d/* | sed 's/^/ (dpkg: /; s/$/)/' | head -1)"
done
[ -f "$DOC/docs/spool.md" ] || fail "$DOC/docs/spool.md is missing"
for f in copyright changelog.gz examples/cron.example; do [ -f "$DOC/$f" ] || fail "$DOC/$f is missing"; done
say "$DOC: $(cd "$DOC" && find . -type f -printf '%P\n' | LC_ALL=C sort | paste -sd' ' -)"
bash -c 'source /usr/share/bash-completion/completions/dopesync && complete -p dopesync' > /dev/null ||
  fail "the bash completion does not load"
for f in /usr/share/zsh/vendor-completions/_dopesync /usr/share/fish/vendor_completions.d/dopesync.fish; do
  [ -s "$f" ] || fail "$f is missing"
done
say "completions: bash, zsh, fish"
verify=$(cd "$UNITS" && systemd-analyze verify "${ALL_UNITS[@]}" 2>&1) || fail "systemd-analyze verify: $verify"
[ -z "$verify" ] || fail "systemd-analyze verify printed: $verify"
say "systemd-analyze verify: the five installed units, no complaint"

# The monitoring files, as in jobs/, and the installed rules' own tests run where they are (the
# tests load the rules by their file name). Scripts/rules-test.sh installs Debian's prometheus
# package for promtool when it is missing; the clean-up purges it with anything else installed.
MONITORING=/usr/share/dopesync
for pair in prometheus/dopesync.rules.yml:jobs/prometheus/dopesync.rules.yml \
  prometheus/dopesync.rules.test.yml:jobs/prometheus/dopesync.rules.test.yml \
  grafana/dopesync-dashboard.json:jobs/grafana/dopesync-dashboard.json; do
  installed="$MONITORING/${pair%%:*}"
  [ -f "$installed" ] || fail "$installed is missing"
  [ "$(stat -c '%a %U:%G' "$installed")" = "644 root:root" ] || fail "$installed is $(stat -c '%a %U:%G' "$installed"), not 644 root:root"
  cmp -s "$installed" "${pair#*:}" || fail "$installed differs from ${pair#*:}"
done
Scripts/rules-test.sh "$MONITORING/prometheus" 2>&1 | sed 's/^/     /' ||
  fail "promtool check or test rules failed on the installed rules (above)"
say "monitoring: $MONITORING/prometheus/dopesync.rules.yml passes promtool check and its installed tests; $MONITORING/grafana/dopesync-dashboard.json"

# --- 4. and 5. Producers, and one run as the installed service would run it -----------------------------
# start_devserver [OPTION...]: the installed dopesync-devserver as user nobody on a free port,
# with these options; sets SERVER_PID and URL. stop_devserver stops it.
start_devserver() {
  # Emptied here, before the server starts: the shell empties it for `>` only in the child, so the
  # loop below could otherwise read the last server's line first and take its (closed) port.
  : > "$WORK/devserver.out"
  setpriv --reuid=nobody --regid=nogroup --clear-groups \
    /usr/bin/dopesync-devserver --port 0 --token "$TOKEN" "$@" > "$WORK/devserver.out" 2> "$WORK/devserver.log" &
  SERVER_PID=$!
  URL=""
  for _ in $(seq 300); do
    URL=$(sed -n 's/^listening on \(http:[^ ]*\)$/\1/p' "$WORK/devserver.out")
    [ -n "$URL" ] && break
    kill -0 "$SERVER_PID" 2> /dev/null || { cat "$WORK/devserver.log" >&2; fail "the dev server exited"; }
    sleep 0.1
  done
  [ -n "$URL" ] || fail "the dev server printed no 'listening on' line within 30 s"
  say "the installed dopesync-devserver${*:+ $*}: listening on $URL (pid $SERVER_PID, as user nobody)"
}
stop_devserver() { kill -TERM "$SERVER_PID"; wait "$SERVER_PID" || true; SERVER_PID=""; }

step "Producers: $PRODUCER and $OTHER_PRODUCER, in group dopesync-producers"
for u in "$PRODUCER" "$OTHER_PRODUCER"; do
  useradd --system --user-group --groups dopesync-producers --no-create-home --home-dir /nonexistent \
    --shell /usr/sbin/nologin "$u"
done
# as_producer USER COMMAND...: the command as USER, with the umask most users have, 022: the
# folders' default ACL, not the umask, keeps the other producers out.
as_producer() { local user=$1; shift; runuser -u "$user" -- sh -c 'umask 022 && exec "$@"' sh "$@"; }
# refused WHAT COMMAND...: the command must fail (its error is shown), else the test fails.
refused() {
  local what=$1 out; shift
  if out=$("$@" 2>&1); then fail "a producer could $what"; fi
  say "refused: $what ($(echo "$out" | head -1))"
}
say "$(id "$PRODUCER")"

step "A bundle into $SPOOL/incoming/, as $PRODUCER: written into tmp/, then renamed"
cp -r "$SAMPLE" "$WORK/sample"
chmod -R a+rX "$WORK/sample"
/usr/bin/dopesync pack "$WORK/sample/session.json" --output "$WORK/bundle.tar.gz" | sed 's/^/   /'
# The producers' half of dopesync, as a producer's machine checks a bundle before it delivers it.
/usr/bin/dopesync-bundle inspect "$WORK/bundle.tar.gz" > "$WORK/bundle-inspect.out" ||
  fail "the installed dopesync-bundle inspect exited $? on the bundle dopesync packed: $(cat "$WORK/bundle-inspect.out")"
say "dopesync-bundle inspect (exit 0): $(head -1 "$WORK/bundle-inspect.out")"
BUNDLE=$(basename "$SAMPLE").tar.gz
as_producer "$PRODUCER" cp "$WORK/bundle.tar.gz" "$SPOOL/tmp/$BUNDLE"
got=$(stat -c '%a %U:%G' "$SPOOL/tmp/$BUNDLE")
[ "$got" = "640 $PRODUCER:dopesync-producers" ] ||
  fail "tmp/$BUNDLE is $got, not 640 $PRODUCER:dopesync-producers (setgid folder; the default ACL's mask)"
got=$(acl_of "$SPOOL/tmp/$BUNDLE")
[ "$got" = "$FILE_ACL" ] || fail "tmp/$BUNDLE's ACL is $got, not $FILE_ACL"
as_producer "$PRODUCER" mv "$SPOOL/tmp/$BUNDLE" "$SPOOL/incoming/$BUNDLE"
[ -f "$SPOOL/incoming/$BUNDLE" ] && [ ! -e "$SPOOL/tmp/$BUNDLE" ] || fail "the rename into incoming/ did not happen"
say "incoming/$BUNDLE ($(stat -c '%a %U:%G' "$SPOOL/incoming/$BUNDLE"), ACL $(acl_of "$SPOOL/incoming/$BUNDLE")), written into tmp/ and renamed"
as_producer "$PRODUCER" ls "$SPOOL" > /dev/null || fail "a producer cannot list the spool root"

step "What a producer may not do"
for d in "" /processing /done /failed; do
  refused "create a file in $SPOOL$d/" as_producer "$PRODUCER" touch "$SPOOL$d/producer-was-here"
  [ ! -e "$SPOOL$d/producer-was-here" ] || fail "$SPOOL$d/producer-was-here exists"
done
refused "create a folder in the spool root" as_producer "$PRODUCER" mkdir "$SPOOL/producer-was-here"
refused "rename a bundle out of incoming/ into the spool root" \
  as_producer "$PRODUCER" mv "$SPOOL/incoming/$BUNDLE" "$SPOOL/$BUNDLE"

step "What a producer may not do with another producer's bundle, in tmp/ and incoming/"
# $OTHER_PRODUCER's own bundle (another session), created in tmp/ and renamed into incoming/ as
# the rules say. $PRODUCER knows its name (as the reported attack did: alice2.tar.gz) but may not
# list either folder, nor read, change, rename or remove the bundle in either.
SECOND=$(basename "$SECOND_SAMPLE").tar.gz
cp -r "$SECOND_SAMPLE" "$WORK/sample2"
chmod -R a+rX "$WORK/sample2"
/usr/bin/dopesync pack "$WORK/sample2/session.json" --output "$WORK/bundle2.tar.gz" > /dev/null
as_producer "$OTHER_PRODUCER" cp "$WORK/bundle2.tar.gz" "$SPOOL/tmp/$SECOND"
[ "$(acl_of "$SPOOL/tmp/$SECOND")" = "$FILE_ACL" ] || fail "tmp/$SECOND's ACL is $(acl_of "$SPOOL/tmp/$SECOND")"
refused "list tmp/" as_producer "$PRODUCER" ls "$SPOOL/tmp"
refused "read $OTHER_PRODUCER's tmp/$SECOND" as_producer "$PRODUCER" cat "$SPOOL/tmp/$SECOND"
as_producer "$OTHER_PRODUCER" mv "$SPOOL/tmp/$SECOND" "$SPOOL/incoming/$SECOND"
refused "list incoming/" as_producer "$PRODUCER" ls "$SPOOL/incoming"
refused "list incoming/ (find)" as_producer "$PRODUCER" find "$SPOOL/incoming" -mindepth 1
refused "read $OTHER_PRODUCER's incoming/$SECOND" as_producer "$PRODUCER" cat "$SPOOL/incoming/$SECOND"
refused "read session.json out of $OTHER_PRODUCER's incoming/$SECOND (the reported attack)" \
  as_producer "$PRODUCER" tar xzOf "$SPOOL/incoming/$SECOND" session.json
# Its owner opening it to others changes nothing: every producer is in its group, which may do
# nothing with it (the group entry, not other's, is the one that applies to them).
as_producer "$OTHER_PRODUCER" chmod 0644 "$SPOOL/incoming/$SECOND"
refused "read $OTHER_PRODUCER's incoming/$SECOND after its owner's chmod 0644" \
  as_producer "$PRODUCER" cat "$SPOOL/incoming/$SECOND"
as_producer "$OTHER_PRODUCER" chmod 0640 "$SPOOL/incoming/$SECOND"
refused "remove another producer's file in incoming/" as_producer "$PRODUCER" rm -f "$SPOOL/incoming/$SECOND"
refused "rename another producer's file in incoming/" \
  as_producer "$PRODUCER" mv "$SPOOL/incoming/$SECOND" "$SPOOL/tmp/stolen.tar.gz"
refused "replace another producer's file in incoming/ by a rename" \
  as_producer "$PRODUCER" sh -c 'echo mine > "$1" && mv -f "$1" "$2"' sh "$SPOOL/tmp/mine.part" "$SPOOL/incoming/$SECOND"
as_producer "$PRODUCER" rm -f "$SPOOL/tmp/mine.part"
refused "write into another producer's file in incoming/" \
  as_producer "$PRODUCER" sh -c 'echo mine >> "$1"' sh "$SPOOL/incoming/$SECOND"
cmp -s "$SPOOL/incoming/$SECOND" "$WORK/bundle2.tar.gz" || fail "incoming/$SECOND was changed"
as_producer "$PRODUCER" cat "$SPOOL/incoming/$BUNDLE" > /dev/null || fail "$PRODUCER cannot read its own incoming/$BUNDLE"
for f in "incoming/$BUNDLE" "incoming/$SECOND"; do
  runuser -u dopesync -- cat "$SPOOL/$f" > /dev/null || fail "user dopesync cannot read $f"
done
say "$PRODUCER reads its own incoming/$BUNDLE; user dopesync reads both"
# Its owner may take it back (its own file: the sticky bit allows it); it waits in tmp/, which no
# run reads, until the steps below that follow what dopesync.path does.
as_producer "$OTHER_PRODUCER" mv "$SPOOL/incoming/$SECOND" "$SPOOL/tmp/$SECOND" ||
  fail "a producer cannot rename its own file out of incoming/"
say "$OTHER_PRODUCER renamed its own incoming/$SECOND back into tmp/"
# The job file's min-age is 30s: a bundle dropped two minutes ago is due.
touch -d '2 minutes ago' "$SPOOL/incoming/$BUNDLE"

step "The operator's token, and the service's ExecStart as the unit runs it"
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
say "User=$(unit_value User) WorkingDirectory=$(unit_value WorkingDirectory) UMask=$(unit_value UMask) LimitCORE=$(unit_value LimitCORE)"
# run_as_unit [VAR=VALUE...]: ExecStart once, with these environment variables besides
# DOPESYNC_API_URL=$URL; its exit status in RUN_STATUS, its output shown and in $WORK/run.log.
run_as_unit() {
  say "DOPESYNC_API_URL=$URL ${*:+$* }${argv[*]}"
  RUN_STATUS=0
  (cd "$(unit_value WorkingDirectory)" && umask "$(unit_value UMask)" && ulimit -c "$(unit_value LimitCORE)" &&
    exec runuser -u "$(unit_value User)" -- env -i PATH=/usr/bin:/bin DOPESYNC_API_URL="$URL" "$@" "${argv[@]}") \
    > "$WORK/run.out" 2> "$WORK/run.err" || RUN_STATUS=$?
  cat "$WORK/run.err" "$WORK/run.out" > "$WORK/run.log"
  sed 's/^/   | /' "$WORK/run.log"
}

step "A run against an API that fails every request: the producer's bundle goes back to incoming/"
start_devserver --fail-rate 1.0 --retry-after 0
run_as_unit
stop_devserver
[ "$RUN_STATUS" = 0 ] || [ "$RUN_STATUS" = 75 ] || fail "the run exited $RUN_STATUS, not 0 or 75 (API unreachable)"
grep -q 'run finished: 1 claimed, 0 done, 1 deferred, 0 failed' "$WORK/run.log" ||
  fail "no 'run finished: 1 claimed, 0 done, 1 deferred, 0 failed' line"
[ -f "$SPOOL/incoming/$BUNDLE" ] || fail "the deferred $BUNDLE is not back in incoming/"
got=$(stat -c '%a %U:%G' "$SPOOL/incoming/$BUNDLE")
[ "$got" = "640 $PRODUCER:dopesync-producers" ] || fail "the deferred incoming/$BUNDLE is $got, not the producer's file"
[ "$(acl_of "$SPOOL/incoming/$BUNDLE")" = "$FILE_ACL" ] || fail "the deferred incoming/$BUNDLE's ACL is $(acl_of "$SPOOL/incoming/$BUNDLE")"
say "exit $RUN_STATUS; incoming/$BUNDLE ($got) waits for its next attempt"

step "The operator retries it now (touch), against a working API"
# A file modified after the run gave it back is due at once; min-age (30s in the job file)
# would hold a file touched just now, so this run is told 0, as a drop-in's Environment= could.
touch "$SPOOL/incoming/$BUNDLE"
start_devserver
run_as_unit DOPESYNC_MIN_AGE=0s
[ "$RUN_STATUS" = 0 ] || fail "the run exited $RUN_STATUS"
grep -q 'run finished: 1 claimed, 1 done, 0 deferred, 0 failed' "$WORK/run.log" || fail "no 'run finished: 1 claimed, 1 done' line"
[ -f "$SPOOL/done/$BUNDLE" ] || fail "$BUNDLE is not in done/"
left=$(find "$SPOOL/incoming" "$SPOOL/processing" "$SPOOL/failed" -mindepth 1)
[ -z "$left" ] || fail "incoming/, processing/ or failed/ is not empty: $left"
[ -f "$SPOOL/dopesync.sqlite" ] || fail "no checkpoint database $SPOOL/dopesync.sqlite"
say "done/$BUNDLE ($(stat -c '%a %U:%G' "$SPOOL/done/$BUNDLE"))"
check_layout
for f in "$SPOOL"/dopesync.sqlite*; do
  say "$(stat -c '%a %U:%G' "$f") ${f#"$SPOOL"/}"
  refused "read ${f#"$SPOOL"/}" as_producer "$PRODUCER" cat "$f"
done
refused "look into done/" as_producer "$PRODUCER" ls "$SPOOL/done"
runuser -u dopesync -- /usr/bin/dopesync status --job /etc/dopesync/production.yaml | sed 's/^/   | /'
if command -v curl > /dev/null; then
  say "the dev server's counts: $(curl -fsS -H "Authorization: Bearer $TOKEN" "$URL/admin/stats" | tr -d '\n' | cut -c1-300)"
fi

# --- What dopesync.path does, by hand -------------------------------------------------------------
# systemd is not PID 1 here: no path unit can watch incoming/ and start the service. What it would
# do at a producer's rename (start dopesync.service at once; see the comments in dopesync.path) is
# done by hand: the service's ExecStart, run as the unit runs it right after the rename.
# The bundle is $OTHER_PRODUCER's, waiting in tmp/ since step 4.
step "A bundle written more than min-age before its rename, and a run at once (as dopesync.path starts it)"
# $OTHER_PRODUCER's bundle, waiting in tmp/ since step 4, dated as written two minutes ago; the
# time runs from the rename to the end of the run.
as_producer "$OTHER_PRODUCER" touch -d '2 minutes ago' "$SPOOL/tmp/$SECOND"
renamed=$(date +%s%N)
as_producer "$OTHER_PRODUCER" mv "$SPOOL/tmp/$SECOND" "$SPOOL/incoming/$SECOND"
run_as_unit
finished=$(date +%s%N)
[ "$RUN_STATUS" = 0 ] || fail "the run exited $RUN_STATUS"
grep -q 'run finished: 1 claimed, 1 done, 0 deferred, 0 failed' "$WORK/run.log" || fail "no 'run finished: 1 claimed, 1 done' line"
[ -f "$SPOOL/done/$SECOND" ] || fail "$SECOND is not in done/"
got="$(stat -c %U "$SPOOL/done/$BUNDLE") $(stat -c %U "$SPOOL/done/$SECOND")"
[ "$got" = "$PRODUCER $OTHER_PRODUCER" ] || fail "done/$BUNDLE and done/$SECOND are $got's, not $PRODUCER's and $OTHER_PRODUCER's"
say "both producers' bundles synced: done/$BUNDLE ($PRODUCER's), done/$SECOND ($OTHER_PRODUCER's)"
MV_TO_DONE=$(awk -v a="$renamed" -v b="$finished" 'BEGIN { printf "%.2f", (b - a) / 1e9 }')
say "rename into incoming/ -> done/$SECOND, the run started right after it: $MV_TO_DONE s (the run's own count: $(grep '^run finished: ' "$WORK/run.log" | grep -oE '[0-9]+\.[0-9]+ s(;|$)' | tr -d ';'))"

# --- What dopesync.path does, by hand -------------------------------------------------------------
# systemd is not PID 1 here: no path unit can watch incoming/ and start the service. What it would
# do at a producer's rename (start dopesync.service at once; see the comments in dopesync.path) is
# done by hand: the service's ExecStart, run as the unit runs it right after the rename, with the
# shipped job file (min-age 30s, max-time 4m).
step "A bundle renamed into incoming/ the moment it was written, and a run at once: it waits out min-age"
# A third session of $OTHER_PRODUCER's (the second's, under a new id), written now.
THIRD=third-$(basename "$SECOND_SAMPLE").tar.gz
cp -r "$WORK/sample2" "$WORK/sample3"
python3 - "$WORK/sample3/session.json" <<'PY'
import json, sys, uuid
path = sys.argv[1]
session = json.load(open(path))
session["id"] = str(uuid.uuid4())
json.dump(session, open(path, "w"))
PY
chmod -R a+rX "$WORK/sample3"
/usr/bin/dopesync pack "$WORK/sample3/session.json" --output "$WORK/bundle3.tar.gz" > /dev/null
as_producer "$OTHER_PRODUCER" cp "$WORK/bundle3.tar.gz" "$SPOOL/tmp/$THIRD"   # written now
written=$(date -r "$SPOOL/tmp/$THIRD" +%s%N)
renamed=$(date +%s%N)
as_producer "$OTHER_PRODUCER" mv "$SPOOL/tmp/$THIRD" "$SPOOL/incoming/$THIRD"
run_as_unit
finished=$(date +%s%N)
[ "$RUN_STATUS" = 0 ] || fail "the run exited $RUN_STATUS"
grep -q 'nothing due yet: waiting for a bundle modified within min-age' "$WORK/run.log" ||
  fail "the run did not say it waits for the bundle held by min-age"
grep -q 'run finished: 1 claimed, 1 done, 0 deferred, 0 failed' "$WORK/run.log" ||
  fail "the run did not upload the bundle once min-age had passed"
[ -f "$SPOOL/done/$THIRD" ] || fail "$THIRD is not in done/"
DROP_TO_DONE=$(awk -v a="$renamed" -v b="$finished" 'BEGIN { printf "%.2f", (b - a) / 1e9 }')
WRITE_TO_DONE=$(awk -v a="$written" -v b="$finished" 'BEGIN { printf "%.2f", (b - a) / 1e9 }')
min_age=$(sed -n 's/^min-age: \([0-9]*\)s$/\1/p' "$JOB")
# min-age counts from the file's write (its mtime), a moment before the rename.
awk -v w="$WRITE_TO_DONE" -v t="$DROP_TO_DONE" -v m="$min_age" 'BEGIN { exit !(w >= m && t < m + 15) }' ||
  fail "write -> done/ took $WRITE_TO_DONE s and rename -> done/ $DROP_TO_DONE s, not min-age ($min_age s) plus a few seconds"
say "drop (rename into incoming/) -> done/$THIRD, its last record on the server: $DROP_TO_DONE s with the shipped min-age ${min_age}s (the run's own count: $(grep '^run finished: ' "$WORK/run.log" | grep -oE '[0-9]+\.[0-9]+ s(;|$)' | tr -d ';'))"

step "dopesync-prune.service's ExecStart, as that unit runs it"
PRUNE_UNIT=$UNITS/dopesync-prune.service
prune_value() { sed -n "s/^$1=//p" "$PRUNE_UNIT"; }
[ "$(prune_value User)" = dopesync ] || fail "dopesync-prune.service's User= is not dopesync"
[ -z "$(prune_value LoadCredential)" ] || fail "dopesync-prune.service loads a credential: a prune needs no token"
read -r -a prune_argv <<< "$(prune_value ExecStart)"
say "User=$(prune_value User) WorkingDirectory=$(prune_value WorkingDirectory) UMask=$(prune_value UMask): ${prune_argv[*]}"
PRUNE_STATUS=0
(cd "$(prune_value WorkingDirectory)" && umask "$(prune_value UMask)" && ulimit -c "$(prune_value LimitCORE)" &&
  exec runuser -u "$(prune_value User)" -- env -i PATH=/usr/bin:/bin "${prune_argv[@]}") > "$WORK/prune.log" 2>&1 ||
  PRUNE_STATUS=$?
sed 's/^/   | /' "$WORK/prune.log"
[ "$PRUNE_STATUS" = 0 ] || fail "dopesync-prune.service's ExecStart exited $PRUNE_STATUS"
grep -q '^pruned 0 bundles from done/' "$WORK/prune.log" || fail "the prune deleted bundles done minutes ago (prune-after is 30d)"
[ -f "$SPOOL/done/$BUNDLE" ] && [ -f "$SPOOL/done/$SECOND" ] || fail "the prune deleted a bundle from done/"
say "exit 0; done/$BUNDLE and done/$SECOND kept (younger than prune-after, 30d by default)"

step "dopesync-prune.service's ExecStart against PostgreSQL, as on several hosts"
# With database: set, prune reads done times from the database and forgets rows there: the unit
# must reach it (no PrivateNetwork=, AF_INET in RestrictAddressFamilies=). systemd is not PID 1
# here, so its sandbox is read from the unit, not applied: a PrivateNetwork=yes would be run as
# `unshare --net` would, and fail. A spool of its own, bound to a throwaway cluster.
grep -q '^PrivateNetwork=yes' "$PRUNE_UNIT" && fail "dopesync-prune.service has PrivateNetwork=yes: it cannot reach a database"
prune_value RestrictAddressFamilies | grep -qw AF_INET || fail "dopesync-prune.service's RestrictAddressFamilies= lacks AF_INET"
if ! ls /usr/lib/postgresql/*/bin/initdb > /dev/null 2>&1; then
  say "apt-get install -y postgresql (for this step only)"
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -q postgresql > /dev/null
fi
PG_DIR=$(mktemp -u /tmp/dopesync-deb-test-pg.XXXXXX)
pg_env=$("$REPO/Scripts/pg-cluster.sh" start "$PG_DIR") || fail "Scripts/pg-cluster.sh could not start a cluster"
eval "$pg_env"
PG_SPOOL=/var/spool/dopesync-pg
install -d -o dopesync -g dopesync -m 0750 "$PG_SPOOL"
install -o dopesync -g dopesync -m 0600 "$PG_PASSWORD_FILE" /etc/dopesync/database-password
cp -p "$JOB" "$WORK/job.before-pg"
sed -i "s|^spool: .*|spool: $PG_SPOOL|" "$JOB"
printf 'database: %s\ndatabase-password-file: /etc/dopesync/database-password\n' "$PG_URL" >> "$JOB"
install -d -o dopesync -g dopesync -m 0750 "$PG_SPOOL/incoming"
install -o dopesync -g dopesync -m 0640 "$WORK/bundle3.tar.gz" "$PG_SPOOL/incoming/pg-$THIRD"
touch -d '2 minutes ago' "$PG_SPOOL/incoming/pg-$THIRD"
run_as_unit
[ "$RUN_STATUS" = 0 ] || fail "the run on PostgreSQL exited $RUN_STATUS"
[ -f "$PG_SPOOL/done/pg-$THIRD" ] || fail "pg-$THIRD is not in $PG_SPOOL/done/"
# A bundle done long ago that the database does not know: prune goes by its mtime.
install -o dopesync -g dopesync -m 0640 "$WORK/bundle3.tar.gz" "$PG_SPOOL/done/old.tar.gz"
touch -d '40 days ago' "$PG_SPOOL/done/old.tar.gz"
PRUNE_STATUS=0
(cd "$(prune_value WorkingDirectory)" && umask "$(prune_value UMask)" && ulimit -c "$(prune_value LimitCORE)" &&
  exec runuser -u "$(prune_value User)" -- env -i PATH=/usr/bin:/bin "${prune_argv[@]}") > "$WORK/prune.log" 2>&1 ||
  PRUNE_STATUS=$?
sed 's/^/   | /' "$WORK/prune.log"
cp -p "$WORK/job.before-pg" "$JOB"
rm -f /etc/dopesync/database-password
"$REPO/Scripts/pg-cluster.sh" stop "$PG_DIR" > /dev/null
rm -rf "$PG_SPOOL"
[ "$PRUNE_STATUS" = 0 ] || fail "dopesync-prune.service's ExecStart on PostgreSQL exited $PRUNE_STATUS"
grep -q '^pruned 1 bundle' "$WORK/prune.log" || fail "the prune on PostgreSQL did not delete the bundle done 40 days ago"
say "exit 0; the prune reached PostgreSQL, deleted done/old.tar.gz (40 days) and kept done/pg-$THIRD"

step "The operator enables dopesync.timer: dopesync.path and dopesync-prune.timer with it (Also=)"
# Offline (systemd is not PID 1): systemctl makes the links only, which is what a purge must undo.
systemctl enable dopesync.timer 2>&1 | sed 's/^/   | /'
for link in "${WANTS[@]}"; do
  # (to /lib/systemd/system/ or /usr/lib/systemd/system/: one folder where /usr is merged)
  [ -L "/etc/systemd/system/$link" ] || fail "no link /etc/systemd/system/$link"
  target=$(readlink -f "/etc/systemd/system/$link")
  [ "$target" = "$(readlink -f "$UNITS/$(basename "$link")")" ] || fail "/etc/systemd/system/$link leads to $target"
done
for unit in dopesync.timer dopesync.path dopesync-prune.timer; do
  enabled=$(systemctl is-enabled "$unit" 2>&1 || true)
  [ "$enabled" = enabled ] || fail "$unit is '$enabled' after systemctl enable dopesync.timer"
done
say "enabled: dopesync.timer, dopesync.path, dopesync-prune.timer (left so for the removal and the purge below)"

step "dopesync check, as the operator runs it (postinst's line), against the same dev server"
# In an empty environment, as from a login shell: no DOPESYNC_* variable or proxy of the caller's
# may decide the outcome. The job file's token-file: names /etc/dopesync/api-token, written above.
# operator_check [OPTION...]: the check with these options; its exit status in CHECK_STATUS, its
# output (standard error and output) shown and in $WORK/check.out.
operator_check() {
  say "runuser -u dopesync -- dopesync check --job $JOB${*:+ $*}"
  CHECK_STATUS=0
  env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
    runuser -u dopesync -- dopesync check --job "$JOB" "$@" > "$WORK/check.out" 2>&1 || CHECK_STATUS=$?
  sed 's/^/   | /' "$WORK/check.out"
}
# expect_check STATUS WHAT: the last check exited STATUS, and one of its lines is `FAIL WHAT: ...`.
expect_check() {
  [ "$CHECK_STATUS" = "$1" ] || fail "dopesync check exited $CHECK_STATUS, not $1"
  grep -q "^FAIL $2: " "$WORK/check.out" || fail "dopesync check printed no 'FAIL $2:' line"
  say "exit $CHECK_STATUS, as expected"
}
cp -p "$JOB" "$WORK/job.shipped"
# As shipped, api: is empty: the check says so, as a run would.
operator_check
expect_check 78 configuration
grep -q "the API's URL is not set" "$WORK/check.out" || fail "the check of the shipped job file does not say the API's URL is not set"
# api: set, as the operator sets it (the file rewritten in place: its owner and mode stay).
sed "s|^api:.*|api: $URL|" "$WORK/job.shipped" > "$JOB"
grep -qxF "api: $URL" "$JOB" || fail "could not set api: in $JOB"
operator_check
[ "$CHECK_STATUS" = 0 ] || fail "dopesync check exited $CHECK_STATUS, not 0"
[ -s "$WORK/check.out" ] || fail "dopesync check printed nothing"
! grep -v '^ok' "$WORK/check.out" || fail "dopesync check printed the lines above, which do not start with 'ok'"
for what in configuration api token spool folders database; do
  grep -Eq "^ok +$what: " "$WORK/check.out" || fail "dopesync check printed no 'ok  $what:' line"
done
grep -Eq '^ok +token: accepted' "$WORK/check.out" || fail "dopesync check did not verify the token"
say "exit 0, every line ok"
# A wrong token, on the command line (which wins over the job file's token-file:): 77.
install -o dopesync -g dopesync -m 0600 /dev/stdin "$WORK/wrong-token" <<< "not-$TOKEN"
operator_check --token-file "$WORK/wrong-token"
expect_check 77 token
# A URL one path segment off (the API's URL plus /api): 78.
operator_check --api "$URL/api"
expect_check 78 api
# The shipped content back: the upgrade below replaces an unedited conffile without asking.
cat "$WORK/job.shipped" > "$JOB"
shipped_md5=$(dpkg-query -W -f='${Conffiles}\n' dopesync | awk -v f="$JOB" '$1 == f { print $2 }')
[ "$(md5sum < "$JOB" | cut -d' ' -f1)" = "$shipped_md5" ] || fail "$JOB is not as shipped again"
say "$JOB as shipped again ($(stat -c '%a %U:%G' "$JOB"))"
stop_devserver

# --- 6. Upgrades fix what is wrong -------------------------------------------------------------------
step "An upgrade whose job file changed: dpkg --unpack gives it 0640 root:dopesync, before postinst"
# The same package repacked as a later version whose job file differs, so that dpkg replaces the
# (unedited) conffile when it unpacks it.
UPGRADE_DEB="$WORK/dopesync_${VERSION}+debtest1_${ARCH}.deb"
dpkg-deb -R "$DEB" "$WORK/upgrade"
echo "# (changed by deb-test's upgrade)" >> "$WORK/upgrade$JOB"
sed -i "s/^Version: .*/Version: ${VERSION}+debtest1/" "$WORK/upgrade/DEBIAN/control"
dpkg-deb --root-owner-group -Znone --build "$WORK/upgrade" "$UPGRADE_DEB" > /dev/null
dpkg --unpack "$UPGRADE_DEB" | sed 's/^/   /'
# dpkg unpacks a conffile beside the old one, as NAME.dpkg-new, and puts it in place when it
# configures the package, before postinst runs.
grep -q "changed by deb-test's upgrade" "$JOB.dpkg-new" || fail "dpkg --unpack did not unpack the upgrade's job file"
got=$(stat -c '%a %U:%G' "$JOB.dpkg-new")
[ "$got" = "640 root:dopesync" ] || fail "dpkg --unpack made the upgrade's $JOB.dpkg-new $got, not 640 root:dopesync"
say "unpacked, not configured: $JOB.dpkg-new is $got (dpkg applied the statoverride)"
dpkg --configure dopesync 2>&1 | tee "$WORK/configure.out" | sed 's/^/   /'
grep -q "changed by deb-test's upgrade" "$JOB" || fail "dpkg --configure did not put the upgrade's job file in place"
grep -qxF "$CHECK_HINT" "$WORK/configure.out" || fail "postinst did not print '$CHECK_HINT' after the upgrade"
check_layout
say "configured: the new $JOB in place, owners and modes as promised"

step "A spool as an older version left it, the job file edited and 0644: installing again fixes them"
for d in "" /tmp /incoming /processing /done /failed; do
  chown dopesync:dopesync "$SPOOL$d"; chmod 2770 "$SPOOL$d"; setfacl -b "$SPOOL$d"
done
chmod 0660 "$SPOOL"/dopesync.sqlite*
ROOTS=""
for f in "$SPOOL/dopesync.sqlite.lock" "$SPOOL/dopesync.sqlite-shm"; do
  if [ -f "$f" ]; then chown root:root "$f"; ROOTS="$ROOTS ${f#"$SPOOL"/}"; fi
done
# A symlink where postinst looks for a database file: it must not follow it.
echo "not dopesync's" > "$WORK/target"; chmod 0644 "$WORK/target"
ln -s "$WORK/target" "$SPOOL/dopesync.sqlite-journal"
echo "# proxy: http://user:secret@proxy.internal.example:3128 (edited by deb-test)" >> "$JOB"
chown root:root "$JOB"; chmod 0644 "$JOB"
gpasswd -d dopesync dopesync-producers > /dev/null
say "spool 2770 dopesync:dopesync, database 0660 (root's:${ROOTS:- none}), a symlink dopesync.sqlite-journal, $JOB edited and $(stat -c '%a %U:%G' "$JOB"), dopesync out of dopesync-producers"
dpkg -i "$UPGRADE_DEB" 2>&1 | tee "$WORK/reinstall.out" | sed 's/^/   /'
grep -q 'now belong to group dopesync-producers' "$WORK/reinstall.out" ||
  fail "postinst did not tell the operator that producers now belong to group dopesync-producers"
grep -qxF "$CHECK_HINT" "$WORK/reinstall.out" || fail "postinst did not print '$CHECK_HINT' when installed again"
[ "$(stat -c '%a %U:%G' "$WORK/target")" = "644 root:root" ] || fail "postinst followed the symlink dopesync.sqlite-journal"
[ -L "$SPOOL/dopesync.sqlite-journal" ] || fail "the symlink dopesync.sqlite-journal is gone"
rm "$SPOOL/dopesync.sqlite-journal"
grep -q 'edited by deb-test' "$JOB" || fail "installing again lost the edit of $JOB"
check_layout
runuser -u dopesync -- /usr/bin/dopesync status --job "$JOB" > "$WORK/status.out" 2>&1 ||
  { cat "$WORK/status.out" >&2; fail "dopesync status cannot read the checkpoint database after the fix"; }
say "fixed: every owner, mode and membership as promised, the edit kept, the symlink not followed; dopesync status reads the database"

# previous_layout: tmp/ and incoming/ as the previous package made them (3770, no ACL), and
# bundles of $OTHER_PRODUCER waiting in tmp/, incoming/, processing/ and failed/ as it made them
# by its rules (umask 027: 0640, group dopesync-producers from the setgid folder): what every
# producer could list and read. $PRODUCER then shows the attack: it lists incoming/ and reads
# session.json out of the other's bundle. Also a symlink (made by $PRODUCER) and a hard link (to
# a file that is not a producer's) among them, which postinst must not follow nor change.
WAITING=(tmp/waiting.tar.gz incoming/waiting.tar.gz processing/waiting.tar.gz failed/waiting.tar.gz)
previous_layout() {
  local d f
  for d in /tmp /incoming; do setfacl -b "$SPOOL$d"; chmod 3770 "$SPOOL$d"; done
  for f in "${WAITING[@]}"; do
    case "$f" in
    tmp/* | incoming/*)
      runuser -u "$OTHER_PRODUCER" -- sh -c 'umask 027 && cp "$1" "$2"' sh "$WORK/bundle2.tar.gz" "$SPOOL/$f" ;;
    *) install -o "$OTHER_PRODUCER" -g dopesync-producers -m 0640 "$WORK/bundle2.tar.gz" "$SPOOL/$f" ;;
    esac
    got="$(stat -c '%a %U:%G' "$SPOOL/$f") $(acl_of "$SPOOL/$f")"
    [ "$got" = "640 $OTHER_PRODUCER:dopesync-producers user::rw-,group::r--,other::---" ] || fail "$f is $got"
  done
  as_producer "$PRODUCER" ls "$SPOOL/incoming" | grep -qx waiting.tar.gz ||
    fail "the previous layout did not let $PRODUCER list incoming/"
  as_producer "$PRODUCER" tar xzOf "$SPOOL/incoming/waiting.tar.gz" session.json | grep -q '"id"' ||
    fail "the previous layout did not let $PRODUCER read another's bundle"
  say "as the previous package left it: tmp/, incoming/ $(stat -c '%a' "$SPOOL/incoming"), no ACL; ${WAITING[*]} $OTHER_PRODUCER's, 640; $PRODUCER lists incoming/ and reads session.json out of incoming/waiting.tar.gz"
  printf 'not a producer'"'"'s\n' > "$WORK/linked-target"; chmod 0644 "$WORK/linked-target"
  ln "$WORK/linked-target" "$SPOOL/incoming/linked.tar.gz"
  as_producer "$PRODUCER" ln -s "$WORK/linked-target" "$SPOOL/incoming/symlink.tar.gz"
  say "and incoming/linked.tar.gz, a hard link to $WORK/linked-target; incoming/symlink.tar.gz, $PRODUCER's symlink to it"
}
# closed_for_producers OUTPUT: postinst (its output in OUTPUT) closed the waiting bundles and left
# the links alone; then they are removed.
closed_for_producers() {
  local f
  grep -q 'producers can no longer list /var/spool/dopesync/tmp/ and incoming/' "$1" ||
    fail "postinst did not tell the operator that producers can no longer list tmp/ and incoming/"
  grep -q 'incoming/linked.tar.gz has 2 links: left as it is' "$1" || fail "postinst did not warn of the hard link"
  check_layout
  refused "list incoming/ after the upgrade" as_producer "$PRODUCER" ls "$SPOOL/incoming"
  refused "list tmp/ after the upgrade" as_producer "$PRODUCER" ls "$SPOOL/tmp"
  for f in "${WAITING[@]}"; do
    got="$(stat -c '%a %U:%G' "$SPOOL/$f") $(acl_of "$SPOOL/$f")"
    [ "$got" = "640 $OTHER_PRODUCER:dopesync-producers $FILE_ACL" ] || fail "$f is $got after the upgrade"
    runuser -u dopesync -- cat "$SPOOL/$f" > /dev/null || fail "user dopesync cannot read $f after the upgrade"
    cmp -s "$SPOOL/$f" "$WORK/bundle2.tar.gz" || fail "$f changed"
  done
  refused "read $OTHER_PRODUCER's tmp/waiting.tar.gz after the upgrade" as_producer "$PRODUCER" cat "$SPOOL/tmp/waiting.tar.gz"
  refused "read $OTHER_PRODUCER's incoming/waiting.tar.gz after the upgrade" \
    as_producer "$PRODUCER" tar xzOf "$SPOOL/incoming/waiting.tar.gz" session.json
  got="$(stat -c '%a %h %U:%G' "$WORK/linked-target") $(acl_of "$WORK/linked-target")"
  [ "$got" = "644 2 root:root user::rw-,group::r--,other::r--" ] || fail "postinst changed the hard link's file: $got"
  [ -L "$SPOOL/incoming/symlink.tar.gz" ] || fail "the symlink incoming/symlink.tar.gz is gone"
  say "closed: ${WAITING[*]} are $FILE_ACL (user dopesync reads them, $PRODUCER cannot); the hard link and the symlink left alone"
  rm -f "${WAITING[@]/#/$SPOOL/}" "$SPOOL/incoming/linked.tar.gz" "$SPOOL/incoming/symlink.tar.gz" "$WORK/linked-target"
}

step "A spool as the previous package left it (tmp/, incoming/ 3770, bundles waiting group-readable): installing again closes them"
previous_layout
dpkg -i "$UPGRADE_DEB" 2>&1 | tee "$WORK/reinstall2.out" | sed 's/^/   /'
closed_for_producers "$WORK/reinstall2.out"

step "The same, configured by postinst's fallback where systemd-tmpfiles and systemd-sysusers are missing"
# A PATH with every command of this machine but those two, and postinst run with it as dpkg
# runs it to configure an upgrade; dopesync out of dopesync-producers, for the fallback's usermod.
NOSYSTEMD="$WORK/path-without-systemd"
mkdir "$NOSYSTEMD"
for dir in /usr/local/sbin /usr/local/bin /usr/sbin /usr/bin /sbin /bin; do
  [ -d "$dir" ] && [ ! -L "$dir" ] || continue
  for tool in "$dir"/*; do
    case "${tool##*/}" in systemd-tmpfiles | systemd-sysusers) continue ;; esac
    [ -x "$tool" ] && [ ! -e "$NOSYSTEMD/${tool##*/}" ] && ln -s "$tool" "$NOSYSTEMD/${tool##*/}"
  done
done
! PATH=$NOSYSTEMD command -v systemd-tmpfiles > /dev/null || fail "systemd-tmpfiles is still on the fallback's PATH"
previous_layout
gpasswd -d dopesync dopesync-producers > /dev/null
env -i PATH="$NOSYSTEMD" /var/lib/dpkg/info/dopesync.postinst configure "${VERSION}+debtest1" > "$WORK/fallback.out" 2>&1 ||
  { sed 's/^/   /' "$WORK/fallback.out"; fail "postinst's fallback failed"; }
sed 's/^/   /' "$WORK/fallback.out"
closed_for_producers "$WORK/fallback.out"
say "the fallback (groupadd/useradd/usermod, mkdir and perl, setfacl) gives the same spool"

# --- 7. Remove -----------------------------------------------------------------------------------
step "dpkg -r dopesync dopesync-devserver"
dpkg -r dopesync-devserver dopesync
[ ! -e /usr/bin/dopesync ] && [ ! -e /usr/bin/dopesync-bundle ] && [ ! -e /usr/bin/dopesync-devserver ] ||
  fail "a binary is still installed"
[ -f "$SPOOL/done/$BUNDLE" ] || fail "removing the package lost done/$BUNDLE"
[ -f "$SPOOL/dopesync.sqlite" ] || fail "removing the package lost the checkpoint database"
[ -f /etc/dopesync/production.yaml ] || fail "removing the package deleted the conffile (only purge should)"
getent passwd dopesync > /dev/null || fail "removing the package deleted the user dopesync"
say "still there after dpkg -r:"
ls -la "$SPOOL" "$SPOOL/done" /etc/dopesync | sed 's/^/     /'

# --- 8. Purge ------------------------------------------------------------------------------------
step "dpkg --purge dopesync"
dpkg --purge dopesync | tee "$WORK/purge.out"   # dpkg -r already took all of dopesync-devserver (no conffiles)
grep -q 'Kept on purpose: the spool /var/spool/dopesync' "$WORK/purge.out" || fail "postrm purge did not say the spool is kept"
[ -f "$SPOOL/done/$BUNDLE" ] && [ -f "$SPOOL/dopesync.sqlite" ] || fail "purging lost the spool"
[ ! -e /etc/dopesync ] || fail "/etc/dopesync is still there after purge: $(ls -A /etc/dopesync)"
! dpkg-statoverride --list "$JOB" > /dev/null || fail "purging left the statoverride of $JOB"
links=$(enablement_links) && fail "purging left the links that enable the units: $links"
[ "$PATHS_WANTS_BEFORE" = 1 ] || [ ! -e /etc/systemd/system/paths.target.wants ] ||
  fail "purging left /etc/systemd/system/paths.target.wants"
say "still there after dpkg --purge: $SPOOL/done/$BUNDLE, $SPOOL/dopesync.sqlite; /etc/dopesync, its statoverride and the links enabling the units are gone"
