#!/usr/bin/env bash
# Benchmark: `dopesync inspect` on a bundle of about 1 GiB of images, next to
# `bsdtar -xOf BUNDLE | sha256sum` on the same file. Reports median wall time and throughput of
# each over several runs, their ratio, and inspect's peak RSS. Release build expected in $BIN.
set -euo pipefail
BIN=${BIN:-.build/release}
WORK=${BENCH_DIR:-bench-results}/inspect
RUNS=${RUNS:-5}
IMAGES=${IMAGES:-200}
IMAGE_MIB=${IMAGE_MIB:-5}
mkdir -p "$WORK"
BUNDLE="$WORK/big-$IMAGES-x-${IMAGE_MIB}MiB.tar.gz"

if [ ! -f "$BUNDLE" ]; then
  echo "making $BUNDLE ($IMAGES images of $IMAGE_MIB MiB, incompressible like real photos)..."
  python3 - "$WORK/src" "$IMAGES" "$IMAGE_MIB" <<'PY'
import json, os, sys, uuid
src, n, mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.makedirs(f"{src}/images", exist_ok=True)
names = []
for i in range(n):
    name = f"photo-{i:04d}.jpg"
    with open(f"{src}/images/{name}", "wb") as f:
        f.write(b"\xff\xd8\xff\xe0" + os.urandom(mib * 1024 * 1024 - 4))
    names.append(name)
groups = [{"id": str(uuid.uuid4()), "groupNumber": g + 1, "distance": 100, "numberOfShots": 5,
           "imageFileNames": names[g * 10:(g + 1) * 10]} for g in range((n + 9) // 10)]
doc = {"id": str(uuid.uuid4()), "createdAt": "2026-05-04T09:30:00Z", "sessionDate": "2026-05-04T09:30:00Z",
       "rifleSetupId": 1, "dopeEntries": [], "chronoSessions": [], "groupEntries": groups}
json.dump(doc, open(f"{src}/session.json", "w"))
PY
  "$BIN/dopesync" pack "$WORK/src/session.json" --images "$WORK/src/images" --output "$BUNDLE"
  rm -rf "$WORK/src"
fi

UNPACKED=$((IMAGES * IMAGE_MIB * 1024 * 1024))
echo "bundle: $BUNDLE ($(du -h "$BUNDLE" | cut -f1) on disk, $((UNPACKED >> 20)) MiB of images)"
cat "$BUNDLE" > /dev/null  # warm the page cache for both contenders

times_inspect=(); times_bsdtar=(); rss=()
for run in $(seq "$RUNS"); do
  /usr/bin/time -f "%e %M" -o "$WORK/inspect.time" "$BIN/dopesync" inspect "$BUNDLE" > /dev/null
  /usr/bin/time -f "%e" -o "$WORK/bsdtar.time" bash -c "bsdtar -xOf '$BUNDLE' | sha256sum > /dev/null"
  read -r seconds kib < "$WORK/inspect.time"
  times_inspect+=("$seconds"); rss+=("$kib"); times_bsdtar+=("$(cat "$WORK/bsdtar.time")")
done

python3 - "$UNPACKED" "${times_inspect[*]}" "${times_bsdtar[*]}" "${rss[*]}" <<'PY'
import statistics, sys
size = int(sys.argv[1]) / 2**20
ti = [float(x) for x in sys.argv[2].split()]; tb = [float(x) for x in sys.argv[3].split()]
rss = [int(x) for x in sys.argv[4].split()]
mi, mb = statistics.median(ti), statistics.median(tb)
print(f"dopesync inspect         median {mi:.2f} s  {size / mi:7.0f} MiB/s  (runs: {', '.join(f'{t:.2f}' for t in ti)})")
print(f"bsdtar -xOf | sha256sum  median {mb:.2f} s  {size / mb:7.0f} MiB/s  (runs: {', '.join(f'{t:.2f}' for t in tb)})")
print(f"throughput ratio inspect/bsdtar: {mb / mi:.2f}  (target >= 0.8)")
print(f"inspect peak RSS: median {statistics.median(rss) / 1024:.1f} MiB, max {max(rss) / 1024:.1f} MiB  (target < 64 MiB)")
PY
