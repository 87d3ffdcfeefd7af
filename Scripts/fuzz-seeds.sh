#!/usr/bin/env bash
# Builds the fuzzers' seed corpora into OUT (default .fuzz/seeds), from what the test suite
# itself uses: the sample sessions of jobs/samples/ archived by the real producers the tests
# drive (GNU tar, bsdtar, Info-ZIP zip, Python's tarfile and zipfile; gzip, bzip2, xz, zstd),
# the hostile shapes of RefusedBundlesTests (links, devices, `..`, duplicates, bombs, nested
# compression...), and the JSON documents of Tests/SessionValidationTests.
#
#   OUT/bundle/   archives, for bundle-reader-fuzz
#   OUT/session/  JSON documents, for session-fuzz
#
# Made afresh at fuzz time (nothing binary is committed); the tools are what `make deps` installs.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/.fuzz/seeds}"
rm -rf "$out"
mkdir -p "$out/bundle" "$out/session"
out="$(cd "$out" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# --- session.json seeds ------------------------------------------------------------------
for sample in "$root"/jobs/samples/*/; do
    name="$(basename "$sample")"
    cp "$sample/session.json" "$out/session/sample-$name.json"
done
# The JSON texts of the session and parser tests: raw multi-line literals (#"""...."""#) and
# one-line raw literals (#"..."#), as written in the Swift sources.
python3 - "$root/Tests/SessionValidationTests" "$out/session" <<'EOF'
import hashlib, pathlib, re, sys, textwrap
source, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
seen = set()
for swift in sorted(source.glob("*.swift")):
    text = swift.read_text()
    found = [textwrap.dedent(m) for m in re.findall(r'#"""\n(.*?)\n\s*"""#', text, re.S)]
    found += re.findall(r'#"(.*?)"#', text)
    for document in found:
        data = document.encode()
        digest = hashlib.sha1(data).hexdigest()[:12]
        if data and digest not in seen:
            seen.add(digest)
            (out / f"test-{swift.stem}-{digest}.json").write_bytes(data)
EOF

# --- bundle seeds ---------------------------------------------------------------------------
# A small valid session with one image of each type, names in several scripts included: the
# shapes of GoodBundlesTests, small enough for the fuzzer to mutate quickly.
mkdir -p "$work/mini/images"
python3 - "$work/mini" <<'EOF'
import json, pathlib, sys
folder = pathlib.Path(sys.argv[1])
images = {
    "g1.jpg": bytes([0xFF, 0xD8, 0xFF, 0xE0, 0, 0x10]) + b"JFIF" + bytes(22),
    "g1-target.png": bytes([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) + bytes(24),
    "Scheibe-1-\u00fc1.webp": b"RIFF\0\0\0\0WEBPVP8 " + bytes(16),
    "\u9776\u7d19-2-1.heic": bytes([0, 0, 0, 0x18]) + b"ftypheic" + bytes(20),
}
for name, data in images.items():
    (folder / "images" / name).write_bytes(data)
session = {
    "id": "6f1c2a4e-8b3d-4c5e-9f7a-1b2c3d4e5f60", "createdAt": "2026-05-04T09:30:00Z",
    "sessionDate": "2026-05-04T11:30:00.250+02:00", "rifleSetupId": 1,
    "dopeEntries": [{"id": "d0000000-0000-4000-8000-000000000001", "distance": 100}],
    "chronoSessions": [{"id": "c0000000-0000-4000-8000-000000000001", "velocityReadings": [
        {"id": "c0000000-0000-4000-8000-000000000011", "shotNumber": 1, "velocity": 2700, "isExcluded": False}]}],
    "groupEntries": [
        {"id": "a0000000-0000-4000-8000-000000000001", "groupNumber": 1, "distance": 100, "numberOfShots": 5,
         "imageFileNames": ["g1.jpg", "Scheibe-1-\u00fc1.webp"],
         "measurement": {"holePositions": [{"x": 0.1, "y": -0.2}], "bulletDiameter": 0.308,
                         "calibrationMethod": "manual", "originalImageFileName": "g1-target.png"}},
        {"id": "a0000000-0000-4000-8000-000000000002", "groupNumber": 2, "distance": 300, "numberOfShots": 3,
         "imageFileNames": ["\u9776\u7d19-2-1.heic"]}],
}
(folder / "session.json").write_text(json.dumps(session, ensure_ascii=False))
EOF
cp "$work/mini/session.json" "$out/session/mini.json"

# Every producer of ArchiveProducer.swift, on one folder; $1 = folder, $2 = seed name prefix.
archive_all() {
    local source="$1" prefix="$2" members
    members=$(cd "$source" && ls -A)
    (cd "$source" && tar -cf "$out/bundle/$prefix-gnutar.tar" $members)
    (cd "$source" && tar -czf "$out/bundle/$prefix-gnutar.tar.gz" $members)
    (cd "$source" && tar -cjf "$out/bundle/$prefix-gnutar.tar.bz2" $members)
    (cd "$source" && tar -cJf "$out/bundle/$prefix-gnutar.tar.xz" $members)
    (cd "$source" && tar --zstd -cf "$out/bundle/$prefix-gnutar.tar.zst" $members)
    (cd "$source" && bsdtar -czf "$out/bundle/$prefix-bsdtar.tar.gz" $members)
    (cd "$source" && bsdtar --format pax --zstd -cf "$out/bundle/$prefix-bsdtar-pax.tar.zst" $members)
    (cd "$source" && bsdtar --format ustar -cf "$out/bundle/$prefix-bsdtar-ustar.tar" $members)
    (cd "$source" && bsdtar --format zip -cf "$out/bundle/$prefix-bsdtar.zip" $members)
    (cd "$source" && zip -qrX "$out/bundle/$prefix-infozip.zip" $members)
    (cd "$source" && zip -qrX0 "$out/bundle/$prefix-infozip-stored.zip" $members)
    (cd "$source" && python3 - "$out/bundle/$prefix-python" $members <<'EOF'
import os, sys, tarfile, zipfile
out, members = sys.argv[1], sys.argv[2:]
with tarfile.open(out + ".tar.xz", "w:xz") as t:
    for m in members: t.add(m)
with zipfile.ZipFile(out + ".zip", "w", zipfile.ZIP_DEFLATED) as z:
    for m in members:
        if os.path.isdir(m):
            for top, dirs, files in os.walk(m):
                for f in sorted(files): z.write(os.path.join(top, f))
        else:
            z.write(m)
EOF
    )
    # Layouts: `./session.json` and `mysession/session.json`.
    (cd "$source" && tar -czf "$out/bundle/$prefix-dotslash.tar.gz" .)
    (cd "$source/.." && tar -czf "$out/bundle/$prefix-topfolder.tar.gz" "$(basename "$source")")
    (cd "$source/.." && zip -qrX "$out/bundle/$prefix-topfolder.zip" "$(basename "$source")")
}

for sample in "$root"/jobs/samples/*/; do
    name="$(basename "$sample")"
    cp -r "$sample" "$work/$name"
    archive_all "$work/$name" "sample-$name"
done
archive_all "$work/mini" "mini"

# With a manifest.json, as `dopesync pack` writes it: one right, one wrong, one of version 2.
python3 - "$work/mini" <<'EOF'
import hashlib, json, pathlib, sys
folder = pathlib.Path(sys.argv[1])
files = {}
for path in sorted(folder.rglob("*")):
    if path.is_file() and path.name != "manifest.json":
        data = path.read_bytes()
        files[str(path.relative_to(folder))] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
manifest = {"format": "truedope-session-bundle", "version": 1, "files": files}
(folder / "manifest.json").write_text(json.dumps(manifest))
EOF
(cd "$work/mini" && tar -czf "$out/bundle/mini-manifest.tar.gz" session.json manifest.json images)
(cd "$work/mini" && zip -qrX "$out/bundle/mini-manifest.zip" session.json manifest.json images)
sed -i 's/"version": 1/"version": 2/' "$work/mini/manifest.json"
(cd "$work/mini" && tar -cf "$out/bundle/mini-manifest-v2.tar" session.json manifest.json images)
rm "$work/mini/manifest.json"

# Hostile shapes (HostileArchive.swift), written by Python, which writes whatever it is told.
python3 -W ignore - "$work/mini" "$out/bundle" <<'EOF'
import io, pathlib, sys, tarfile, zipfile
folder, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
session = (folder / "session.json").read_bytes()
jpeg = (folder / "images" / "g1.jpg").read_bytes()
base = [("session.json", "file", session, ""), ("images/g1.jpg", "file", jpeg, "")]
kinds = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE, "hardlink": tarfile.LNKTYPE,
         "chr": tarfile.CHRTYPE, "blk": tarfile.BLKTYPE, "fifo": tarfile.FIFOTYPE}
cases = {
    "symlink": [("images/link.jpg", "symlink", b"", "/etc/passwd")],
    "hardlink": [("images/hard.jpg", "hardlink", b"", "session.json")],
    "chardev": [("dev-null", "chr", b"", "")],
    "fifo": [("a-fifo", "fifo", b"", "")],
    "absolute": [("/etc/cron.d/x", "file", b"x", "")],
    "traversal": [("../../evil", "file", b"x", "")],
    "duplicate": [("session.json", "file", session, "")],
    "backslash": [("images\\g2.jpg", "file", jpeg, "")],
    "directories": [("images/", "dir", b"", ""), ("extra/", "dir", b"", "")],
    "long-name": [("images/" + "n" * 300 + ".jpg", "file", jpeg, "")],
}
for name, extra in cases.items():
    entries = base + extra
    with tarfile.open(out / f"hostile-{name}.tar.gz", "w:gz", format=tarfile.PAX_FORMAT) as t:
        for path, kind, data, link in entries:
            info = tarfile.TarInfo(path)
            info.type, info.linkname = kinds[kind], link
            info.size = len(data) if kind == "file" else 0
            t.addfile(info, io.BytesIO(data) if kind == "file" else None)
    if all(kind in ("file", "dir", "symlink") for _, kind, _, _ in entries):
        with zipfile.ZipFile(out / f"hostile-{name}.zip", "w", zipfile.ZIP_DEFLATED) as z:
            for path, kind, data, link in entries:
                info = zipfile.ZipInfo(path)
                info.external_attr = {"file": 0o100644, "dir": 0o040755, "symlink": 0o120777}[kind] << 16
                z.writestr(info, link.encode() if kind == "symlink" else data)
# A small decompression bomb: session.json, then 4 MiB of zeros as an image.
with tarfile.open(out / "hostile-bomb.tar.gz", "w:gz", compresslevel=9) as t:
    info = tarfile.TarInfo("session.json"); info.size = len(session); t.addfile(info, io.BytesIO(session))
    info = tarfile.TarInfo("images/zeros.jpg"); info.size = 4 << 20; t.addfile(info, io.BytesIO(bytes(4 << 20)))
# A GNU-format tar with a long name (././@LongLink), and one session.json only.
with tarfile.open(out / "hostile-gnu-longlink.tar", "w", format=tarfile.GNU_FORMAT) as t:
    for path, data in [("session.json", session), ("images/" + "x" * 120 + ".jpg", jpeg)]:
        info = tarfile.TarInfo(path); info.size = len(data); t.addfile(info, io.BytesIO(data))
EOF
mini_tgz="$out/bundle/mini-gnutar.tar.gz"
head -c $(( $(stat -c %s "$mini_tgz") / 2 )) "$mini_tgz" > "$out/bundle/hostile-truncated.tar.gz"
gzip -9c "$work/mini/session.json" > "$out/bundle/hostile-bare-session.json.gz"
gzip -9c "$mini_tgz" > "$out/bundle/hostile-gzip-in-gzip.tar.gz.gz"
xz -c "$out/bundle/mini-gnutar.tar" | gzip -9c > "$out/bundle/hostile-xz-in-gzip.tar.xz.gz"
(cd "$work/mini" && zip -qrX -P secret "$out/bundle/hostile-encrypted.zip" session.json images)
(cd "$work/mini" && bsdtar --format cpio -cf "$out/bundle/hostile-cpio.cpio" session.json images)
(cd "$work/mini" && bsdtar --format mtree -cf "$out/bundle/hostile-mtree.mtree" session.json images)
(cd "$work/mini" && tar -cf - session.json images | lz4 -q > "$out/bundle/hostile-lz4.tar.lz4") 2>/dev/null || true
: > "$out/bundle/hostile-empty"

echo "seeds: $(ls "$out/bundle" | wc -l) bundles in $out/bundle, $(ls "$out/session" | wc -l) documents in $out/session"
