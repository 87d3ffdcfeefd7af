#!/usr/bin/env bash
# `make rules-test`: checks the Prometheus alerting rules and runs their unit tests with promtool.
#
#   Scripts/rules-test.sh [DIR]
#
# DIR (or RULES_DIR) holds dopesync.rules.yml and dopesync.rules.test.yml: jobs/prometheus/ of
# this repository by default; /usr/share/dopesync/prometheus/ to test what the package installed
# (Scripts/deb-test.sh does). Without promtool, it installs Debian's `prometheus` package, which
# ships it (apt-get, as root or through sudo). Runs `promtool check rules` on the rule file (syntax,
# templates, PromQL), then `promtool test rules` on the tests (each alert fires and clears).
set -euo pipefail
cd "$(dirname "$0")/.."

DIR=${1:-${RULES_DIR:-jobs/prometheus}}
RULES="$DIR/dopesync.rules.yml"
TESTS="$DIR/dopesync.rules.test.yml"
for f in "$RULES" "$TESTS"; do
  [ -f "$f" ] || { echo "rules-test: $f is missing" >&2; exit 1; }
done

if ! command -v promtool > /dev/null; then
  echo "rules-test: promtool is missing: installing Debian's prometheus package (apt-get)"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq -o DPkg::Lock::Timeout=120 prometheus > /dev/null
  command -v promtool > /dev/null || { echo "rules-test: promtool is still missing" >&2; exit 1; }
fi
echo "rules-test: $(promtool --version 2>&1 | head -1)"

promtool check rules "$RULES"
# promtool reads rule_files relative to the test file's folder.
promtool test rules "$TESTS"
