#!/usr/bin/env bash
# `make deb`: builds dist/dopesync_VERSION_ARCH.deb (dopesync and dopesync-bundle) and
# dist/dopesync-devserver_VERSION_ARCH.deb with dpkg-deb, then runs lintian on both (failing on
# any error or warning).
#
#   1. VERSION is DopeSyncInfo.version (Sources/DopeSyncSupport/DopeSyncInfo.swift), what `dopesync
#      --version` prints; packaging/deb/changelog must have an entry for it (its date and author
#      become the packages' timestamps and Maintainer).
#   2. The binaries: `swift build -c release --static-swift-stdlib` (the Swift runtime and
#      Foundation linked in; libarchive, SQLite, zlib and the C/C++ runtimes stay Debian's shared
#      libraries), in SCRATCH (default .build-deb, so it never fights `make build`/`make bench`
#      over .build's lock). Checked: `ldd` names no Swift library. Then stripped.
#   3. Man pages: dopesync's is docs/dopesync.1, written by hand (commands, the job file, the
#      environment, the files, exit status; its .TH must name this version). dopesync-bundle's and
#      dopesync-devserver's are made from their command definitions by the tool of
#      swift-argument-parser's generate-manual plugin, run on the binary being packaged, as the
#      plugin runs it.
#      (`swift package --scratch-path SCRATCH generate-manual` works too, but it first builds
#      every product without --static-swift-stdlib, which SwiftPM also passes to every compile:
#      the plugin's build and this one would recompile everything, 7-15 minutes, at each switch.)
#   4. Completions from the binaries (`--generate-completion-script bash|zsh|fish`).
#   5. The file trees under SCRATCH/deb/, Depends from dpkg-shlibdeps, dpkg-deb --build, lintian.
#      /usr/share/doc/dopesync/ holds README.md and docs/*.md (uncompressed, in that layout, so
#      the README's links to docs/NAME.md work there), besides copyright, changelog.gz, examples/.
#      /usr/share/dopesync/ holds the monitoring files of jobs/: prometheus/dopesync.rules.yml
#      and its tests dopesync.rules.test.yml, grafana/dopesync-dashboard.json.
#
# A fresh build takes 10-20 minutes on 2 cores; later ones only what changed.
# SKIP_BUILD=1 packs what SCRATCH already holds (after a successful run).
set -euo pipefail
cd "$(dirname "$0")/.."
umask 022

SWIFT=${SWIFT:-swift}
SCRATCH=${SCRATCH:-.build-deb}
DIST=dist
PKG=packaging/deb
# The executables, and the packages: dopesync-bundle (inspect and pack, for producers' machines)
# ships in dopesync, beside it.
PRODUCTS=(dopesync dopesync-bundle dopesync-devserver)
PACKAGES=(dopesync dopesync-devserver)
# --disable-local-rpath: no RUNPATH $ORIGIN (nothing to find beside /usr/bin; lintian flags it).
# -z now: full RELRO. Both are link flags only: the objects of an earlier build in SCRATCH are reused.
BUILD_FLAGS=(-c release --static-swift-stdlib --disable-local-rpath -Xlinker -z -Xlinker now --scratch-path "$SCRATCH")

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
fail() { echo "deb-build: $*" >&2; exit 1; }

# --- 1. Version, date, maintainer ---------------------------------------------------------------
VERSION=$(sed -n 's/^ *public static let version = "\([^"]*\)".*/\1/p' Sources/DopeSyncSupport/DopeSyncInfo.swift)
[ -n "$VERSION" ] && [ "$(printf '%s\n' "$VERSION" | wc -l)" = 1 ] ||
  fail "cannot read DopeSyncInfo.version from Sources/DopeSyncSupport/DopeSyncInfo.swift"
CHANGELOG_VERSION=$(dpkg-parsechangelog -l "$PKG/changelog" -S Version)
[ "$CHANGELOG_VERSION" = "$VERSION" ] ||
  fail "packaging/deb/changelog's latest entry is $CHANGELOG_VERSION, the package is $VERSION: add an entry (dch -c packaging/deb/changelog -v $VERSION)"
MAINTAINER=$(dpkg-parsechangelog -l "$PKG/changelog" -S Maintainer)
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(dpkg-parsechangelog -l "$PKG/changelog" -S Timestamp)}
export SOURCE_DATE_EPOCH
ARCH=$(dpkg --print-architecture)
echo "dopesync $VERSION ($ARCH), dated $(date -u -d "@$SOURCE_DATE_EPOCH" +%F), by $MAINTAINER"

RELEASE="$SCRATCH/release"
MAN_OUT="$SCRATCH/manual"
GENERATE_MANUAL="$SCRATCH/generate-manual/debug/generate-manual"
# The man page of each product: dopesync's written by hand, the others generated (step 3).
declare -A MAN_PAGE=([dopesync]=docs/dopesync.1
  [dopesync-bundle]="$MAN_OUT/dopesync-bundle/dopesync-bundle.1"
  [dopesync-devserver]="$MAN_OUT/dopesync-devserver/dopesync-devserver.1")
GENERATED_MAN=(dopesync-bundle dopesync-devserver)
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  # --- 2. Binaries --------------------------------------------------------------------------------
  for product in "${PRODUCTS[@]}"; do
    step "swift build ${BUILD_FLAGS[*]} --product $product"
    "$SWIFT" build "${BUILD_FLAGS[@]}" --product "$product"
  done

  # --- 3. Man pages -------------------------------------------------------------------------------
  # The plugin's tool, from the swift-argument-parser the package resolved (the checkout the
  # build above used), built on its own in SCRATCH/generate-manual (debug: half a minute).
  step "Man pages: generate-manual (swift-argument-parser $(git -C "$SCRATCH/checkouts/swift-argument-parser" describe --tags 2> /dev/null || echo '?'))"
  "$SWIFT" build --package-path "$SCRATCH/checkouts/swift-argument-parser" \
    --scratch-path "$SCRATCH/generate-manual" --product generate-manual
  rm -rf "$MAN_OUT"
  for product in "${GENERATED_MAN[@]}"; do
    mkdir -p "$MAN_OUT/$product"
    "$GENERATE_MANUAL" "$RELEASE/$product" --output-directory "$MAN_OUT/$product" \
      --date "$(date -u -d "@$SOURCE_DATE_EPOCH" +%F)" --section 1
  done
fi

for product in "${PRODUCTS[@]}"; do
  [ -x "$RELEASE/$product" ] || fail "$RELEASE/$product is missing (run without SKIP_BUILD=1)"
  [ -f "${MAN_PAGE[$product]}" ] || fail "${MAN_PAGE[$product]} is missing (generate-manual writes the dev server's)"
  # No Swift library may be needed at run time: the server has no toolchain.
  if ldd "$RELEASE/$product" | grep -E 'libswift|libFoundation|lib_Foundation|libdispatch|libBlocksRuntime|/opt/swift'; then
    fail "$product still needs the Swift libraries above"
  fi
done
for product in dopesync dopesync-bundle; do
  printed=$("$RELEASE/$product" --version)
  [ "$printed" = "$VERSION" ] || fail "$product --version prints '$printed', DopeSyncInfo.version says '$VERSION'"
done
# The hand-written page says which version it describes: `.TH DOPESYNC 1 DATE "dopesync VERSION" ...`.
th=$(sed -n 's/^\.TH //p' docs/dopesync.1)
case "$th" in
*'"dopesync '"$VERSION"'"'*) ;;
*) fail "docs/dopesync.1's .TH line ($th) does not name \"dopesync $VERSION\": update it for this version" ;;
esac
for section in 'JOB FILE' ENVIRONMENT FILES 'EXIT STATUS'; do
  grep -Eq "^\.SH \"?$section\"?\$" docs/dopesync.1 || fail "docs/dopesync.1 has no $section section"
done

# --- 4. File trees --------------------------------------------------------------------------------
STAGE="$SCRATCH/deb"
rm -rf "$STAGE"
mkdir -p "$DIST" "$STAGE"

# install_binary PRODUCT ROOT: stripped as dh_strip does (the Swift metadata sections stay).
install_binary() {
  install -D -m 0755 "$RELEASE/$1" "$2/usr/bin/$1"
  strip --remove-section=.comment --remove-section=.note --strip-unneeded "$2/usr/bin/$1"
}

# install_manual ROOT PRODUCT: the product's man page and completions.
install_manual() {
  local root=$1 product=$2 bin="$1/usr/bin/$2"
  install -d "$root/usr/share/man/man1"
  gzip -9n < "${MAN_PAGE[$product]}" > "$root/usr/share/man/man1/$product.1.gz"
  install -d "$root/usr/share/bash-completion/completions" "$root/usr/share/zsh/vendor-completions" \
    "$root/usr/share/fish/vendor_completions.d"
  # bash-completion sources the file: no #! line (lintian: bash-completion-with-hashbang).
  "$bin" --generate-completion-script bash | sed '1{/^#!/d}' > "$root/usr/share/bash-completion/completions/$product"
  "$bin" --generate-completion-script zsh > "$root/usr/share/zsh/vendor-completions/_$product"
  "$bin" --generate-completion-script fish > "$root/usr/share/fish/vendor_completions.d/$product.fish"
}

# install_common PACKAGE ROOT PRODUCT: man page, completions, copyright, changelog.
install_common() {
  local package=$1 root=$2 product=$3
  install_manual "$root" "$product"
  install -D -m 0644 "$PKG/copyright" "$root/usr/share/doc/$package/copyright"
  gzip -9n < "$PKG/changelog" > "$root/usr/share/doc/$package/changelog.gz"
  if [ -f "$PKG/$package/lintian-overrides" ]; then
    install -D -m 0644 "$PKG/$package/lintian-overrides" "$root/usr/share/lintian/overrides/$package"
  fi
}

# --- dopesync
step "Staging dopesync"
ROOT="$STAGE/debian/dopesync"
install_binary dopesync "$ROOT"
"$ROOT/usr/bin/dopesync" --version > /dev/null || fail "the stripped dopesync does not start"
install_common dopesync "$ROOT" dopesync
install_binary dopesync-bundle "$ROOT"
"$ROOT/usr/bin/dopesync-bundle" --version > /dev/null || fail "the stripped dopesync-bundle does not start"
install_manual "$ROOT" dopesync-bundle

# The units: the service is jobs/systemd/dopesync.service (one source for its sandboxing) with
# the package's header, /usr/bin instead of /usr/local/bin, and a Documentation= line.
UNITS="$ROOT/usr/lib/systemd/system"
install -d "$UNITS"
{
  cat "$PKG/dopesync/service-header"
  echo
  sed -e '1,/^$/d' \
    -e 's|/usr/local/bin/dopesync|/usr/bin/dopesync|g' \
    -e 's|see the install lines above|see /usr/lib/tmpfiles.d/dopesync.conf|' \
    -e '/^Description=/a Documentation=man:dopesync(1)' \
    jobs/systemd/dopesync.service
} > "$UNITS/dopesync.service"
grep -q '^ExecStart=/usr/bin/dopesync run --job /etc/dopesync/production.yaml ' "$UNITS/dopesync.service" ||
  fail "the packaged dopesync.service has no ExecStart=/usr/bin/dopesync run --job /etc/dopesync/production.yaml"
! grep -n '/usr/local' "$UNITS/dopesync.service" || fail "the packaged dopesync.service still names /usr/local"
! grep -n '2770\|see the install lines' "$UNITS/dopesync.service" ||
  fail "the packaged dopesync.service still names the old mode 2770 or the source's install lines"
# The other units as they are in jobs/systemd/ (their comments fit both), with /usr/bin and a
# Documentation= line: the timer, the path unit that starts a run as soon as a bundle is renamed
# into incoming/, and the daily prune (a timer and its service). dopesync.timer's Also= names the
# path unit and the prune timer: enabling it enables them.
for unit in dopesync.timer dopesync.path dopesync-prune.timer dopesync-prune.service; do
  sed -e 's|/usr/local/bin/dopesync|/usr/bin/dopesync|g' \
    -e '/^Description=/a Documentation=man:dopesync(1)' \
    "jobs/systemd/$unit" > "$UNITS/$unit"
  chmod 0644 "$UNITS/$unit"
  ! grep -n '/usr/local' "$UNITS/$unit" || fail "the packaged $unit still names /usr/local"
  grep -q '^Documentation=man:dopesync(1)$' "$UNITS/$unit" || fail "jobs/systemd/$unit has no Description= line"
done
grep -qx 'ExecStart=/usr/bin/dopesync prune --job /etc/dopesync/production.yaml' "$UNITS/dopesync-prune.service" ||
  fail "the packaged dopesync-prune.service has no ExecStart=/usr/bin/dopesync prune --job /etc/dopesync/production.yaml"
grep -qx 'Also=dopesync.path dopesync-prune.timer' "$UNITS/dopesync.timer" ||
  fail "the packaged dopesync.timer does not enable dopesync.path and dopesync-prune.timer with it (Also=)"
# The prune service keeps dopesync.service's sandbox: every one of its sandboxing lines (from
# NoNewPrivileges= on) is in dopesync-prune.service too, but for those a prune does not need
# (the network, the metrics folder).
sandbox() { sed -n '/^NoNewPrivileges=/,$p' "$1" | grep -v '^#\|^$'; }
missing=$(LC_ALL=C comm -23 <(sandbox "$UNITS/dopesync.service" | LC_ALL=C sort) \
  <(sandbox "$UNITS/dopesync-prune.service" | LC_ALL=C sort) |
  grep -vx 'RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX\|ReadWritePaths=-/var/lib/prometheus/node-exporter' || true)
[ -z "$missing" ] || fail "dopesync-prune.service lacks dopesync.service's sandboxing lines: $missing"

install -D -m 0644 "$PKG/dopesync/sysusers.conf" "$ROOT/usr/lib/sysusers.d/dopesync.conf"
install -D -m 0644 "$PKG/dopesync/tmpfiles.conf" "$ROOT/usr/lib/tmpfiles.d/dopesync.conf"

# The job file, a conffile: jobs/production.yaml with `api:` left empty, so that a run before the
# operator sets it exits 78 ("the API's URL is not set") instead of calling an example host.
install -d "$ROOT/etc/dopesync"
awk '
  NR == 1 && /^# dopesync job file for a production machine/ {
    print "# dopesync job file, as dopesync.service and the cron example use it (installed by the dopesync"
    print "# package, which keeps your edits across upgrades): set `api:`, then enable the timer."
    getline; next
  }
  /^# The TrueDope API\.$/ {
    print "# The TrueDope API (https://...): set it. While it is empty, `dopesync run` uploads nothing"
    print "# and exits 78 (\"api: the API'"'"'s URL is not set\")."
    next
  }
  /^api: / { print "api:"; replaced = 1; next }
  { print }
  END { if (!replaced) exit 1 }
' jobs/production.yaml > "$ROOT/etc/dopesync/production.yaml" ||
  fail "jobs/production.yaml has no 'api: ' line to empty"
# 0644 root:root in the archive (lintian wants 0644; this shipped copy holds no secret). postinst
# makes it 0640 root:dopesync, as it may come to hold a proxy's credentials, and records that
# with dpkg-statoverride, so dpkg unpacks every later version of it with that owner and mode.
chmod 0644 "$ROOT/etc/dopesync/production.yaml"

install -D -m 0644 jobs/cron.example "$ROOT/usr/share/doc/dopesync/examples/cron.example"

# Monitoring, as in jobs/: the Prometheus alerting rules over the metrics file with their promtool
# unit tests beside them (the tests name the rules by their file name: `promtool test rules` runs
# where they are installed), and the Grafana dashboard. Data for other programs to load, not
# examples: under /usr/share/dopesync/, where `rule_files:` and a dashboard provider can point.
install -D -m 0644 jobs/prometheus/dopesync.rules.yml "$ROOT/usr/share/dopesync/prometheus/dopesync.rules.yml"
install -D -m 0644 jobs/prometheus/dopesync.rules.test.yml "$ROOT/usr/share/dopesync/prometheus/dopesync.rules.test.yml"
install -D -m 0644 jobs/grafana/dopesync-dashboard.json "$ROOT/usr/share/dopesync/grafana/dopesync-dashboard.json"

# The documentation, as in the repository: README.md, and docs/*.md (and api.yaml) in docs/, so that
# the README's links (docs/spool.md, ...) and the docs' links to each other work where installed.
# Not compressed (dh_compress would, above 4 kB): a link to docs/spool.md must find that name.
DOC="$ROOT/usr/share/doc/dopesync"
install -m 0644 README.md "$DOC/README.md"
install -d "$DOC/docs"
install -m 0644 docs/*.md docs/*.png docs/api.yaml "$DOC/docs/"   # the pictures they show, the API's description
# Relative links the installed documents hold that lead to no installed file (information only:
# ARCHITECTURE.md, the man page's source, are not installed there).
(cd "$DOC" && for md in README.md docs/*.md; do
  { grep -oE '\]\([^)#: ]+(#[^)]*)?\)' "$md" || true; } | sed -E 's/^\]\(//; s/[#)].*//' | sort -u |
    while read -r target; do
      [ -e "$(dirname "$md")/$target" ] || echo "   note: $md links to $target, which the package does not install"
    done
done)

# --- dopesync-devserver
step "Staging dopesync-devserver"
ROOT="$STAGE/debian/dopesync-devserver"
install_binary dopesync-devserver "$ROOT"
"$ROOT/usr/bin/dopesync-devserver" --help > /dev/null || fail "the stripped dopesync-devserver does not start"
install_common dopesync-devserver "$ROOT" dopesync-devserver

# --- 5. Control files, Depends, build ----------------------------------------------------------------
# dpkg-shlibdeps wants a debian/control naming the packages, whose trees are debian/PACKAGE.
printf 'Source: dopesync\n\nPackage: dopesync\nArchitecture: any\n\nPackage: dopesync-devserver\nArchitecture: any\n' \
  > "$STAGE/debian/control"

rm -f "$DIST"/dopesync_*.deb "$DIST"/dopesync-devserver_*.deb
for package in "${PACKAGES[@]}"; do
  step "Building $DIST/${package}_${VERSION}_${ARCH}.deb"
  ROOT="$STAGE/debian/$package"
  install -d "$ROOT/DEBIAN"
  # Every binary the package ships (dopesync's two) goes into its Depends.
  binaries=()
  for binary in "$ROOT"/usr/bin/*; do binaries+=(-e"debian/$package/usr/bin/${binary##*/}"); done
  depends=$(cd "$STAGE" && dpkg-shlibdeps -O "${binaries[@]}" | sed -n 's/^shlibs:Depends=//p')
  [ -n "$depends" ] || fail "dpkg-shlibdeps found no dependencies for $package"
  echo "Depends: $depends"
  case "$package" in
  dopesync)
    for lib in libarchive13 libsqlite3-0; do
      case ", $depends" in *", $lib "* | *", $lib,"* | *", $lib") ;; *) fail "Depends lacks $lib" ;; esac
    done ;;
  esac

  for script in postinst prerm postrm; do
    if [ -f "$PKG/$package/$script" ]; then install -m 0755 "$PKG/$package/$script" "$ROOT/DEBIAN/$script"; fi
  done
  if [ -f "$PKG/$package/conffiles" ]; then install -m 0644 "$PKG/$package/conffiles" "$ROOT/DEBIAN/conffiles"; fi
  # md5sums of every shipped file but the conffiles (dpkg tracks those itself).
  (cd "$ROOT" && find . -path ./DEBIAN -prune -o -type f -printf '%P\n' | LC_ALL=C sort |
    grep -vxF -f <(sed 's|^/||' DEBIAN/conffiles 2>/dev/null || true) | xargs -r md5sum) > "$ROOT/DEBIAN/md5sums"
  chmod 0644 "$ROOT/DEBIAN/md5sums"
  size=$(du -sk --apparent-size --exclude=DEBIAN "$ROOT" | cut -f1)
  sed -e "s|@VERSION@|$VERSION|" -e "s|@ARCH@|$ARCH|" -e "s|@MAINTAINER@|$MAINTAINER|" \
    -e "s|@INSTALLED_SIZE@|$size|" -e "s|@DEPENDS@|$depends|" "$PKG/$package/control.in" > "$ROOT/DEBIAN/control"
  ! grep -n '@[A-Z_]*@' "$ROOT/DEBIAN/control" || fail "unfilled placeholder in $package's control"
  chmod 0644 "$ROOT/DEBIAN/control"

  # Reproducible: every file dated from the changelog, owned by root in the archive.
  find "$ROOT" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
  dpkg-deb --root-owner-group -Zxz --build "$ROOT" "$DIST/${package}_${VERSION}_${ARCH}.deb"
done

step "Packages"
ls -l "$DIST"/*_"${VERSION}_${ARCH}".deb
for package in "${PACKAGES[@]}"; do
  dpkg-deb --info "$DIST/${package}_${VERSION}_${ARCH}.deb" | sed -n 's/^ \(Installed-Size\|Depends\):/  \1:/p'
done

# --- lintian ---------------------------------------------------------------------------------------
step "lintian"
# As an unprivileged user when run as root (lintian advises against root).
LINTIAN=(lintian)
[ "$(id -u)" = 0 ] && LINTIAN=(setpriv --reuid=nobody --regid=nogroup --clear-groups env HOME=/tmp lintian)
if "${LINTIAN[@]}" --display-info --fail-on error,warning "$DIST"/*_"${VERSION}_${ARCH}".deb | tee "$DIST/lintian.txt"; then
  echo "lintian: no error or warning (all of its output, info tags included, is in $DIST/lintian.txt)"
else
  fail "lintian reported errors or warnings (above; also in $DIST/lintian.txt)"
fi
