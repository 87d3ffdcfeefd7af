#!/usr/bin/env bash
# `make bench` (after `swift build -c release`): every benchmark script, release binaries.
#   Scripts/bench-inspect.sh  first: `dopesync inspect` on ~1 GiB of images next to bsdtar | sha256sum
#   Scripts/bench-*.sh        then every other one present, in name order
# Results go to bench-results/ (ignored by git). Each script prints its own figures.
set -euo pipefail
cd "$(dirname "$0")/.."
export BIN=${BIN:-.build/release}

for tool in dopesync; do
  if [ ! -x "$BIN/$tool" ]; then
    echo "no $BIN/$tool: run 'make bench' (it builds with -c release first)" >&2
    exit 1
  fi
done

echo "== Scripts/bench-inspect.sh"
./Scripts/bench-inspect.sh

for script in Scripts/bench-*.sh; do
  [ "$script" = Scripts/bench-inspect.sh ] && continue
  [ -x "$script" ] || continue
  echo
  echo "== $script"
  "$script"
done
