#!/usr/bin/env python3
"""Write a self-reproducing gzip file (a "gzip quine") to argv[1].

Decompressing the file yields the file itself, byte for byte, with a
correct CRC32 and ISIZE trailer.  A decompressor that keeps sniffing its
output for compressed formats therefore sees the same gzip stream forever.
Used as a hostile test fixture (recursive.gz).

Construction (after Russ Cox, "Zip Files All The Way Down", 2010):

The deflate stream is a program made of two kinds of instruction, each
encoded in exactly 5 bytes so that sizes can be counted in "units":

  L n  stored (uncompressed) block: header byte 0x00, LEN, NLEN, then n
       bytes that are copied to the output verbatim.
  R n  fixed-Huffman block(s) holding LZ77 back-references with distance
       n and total length n, i.e. "repeat the last n bytes of output".
       The copy is split into pieces (and, if needed, empty fixed blocks
       are added) so the bit count is exactly 40; the search is below.

With P = gzip header (p bytes) and S = gzip trailer (s = 8 bytes) the
program is (each line's output is what the file contains at that point):

  L[p+5] P L[p+5]          -> P L[p+5]
  R[p+5]                   -> P L[p+5]        (the literal just read)
  L1 R[p+5]                -> R[p+5]
  L1 L1                    -> L1
  L4 R[p+5] L1 L1 L4       -> R[p+5] L1 L1 L4
  R4                       -> R[p+5] L1 L1 L4
  L4 R4 L4 R4 L4           -> R4 L4 R4 L4      (the classic quine core)
  R4                       -> R4 L4 R4 L4
  L4 R4 L0 L0 L[s+5]       -> R4 L0 L0 L[s+5]
  R4                       -> R4 L0 L0 L[s+5]
  L0                       (no output)
  L0                       (no output)
  L[s+5] R[s+5]' S         -> R[s+5]' S
  R[s+5]'  (final block)   -> R[s+5]' S
  S                        (the real gzip trailer, not deflate data)

("L4" etc. count units of 5 bytes; "L[p+5]" means p+5 bytes.)

CRC: the trailer's CRC32 appears twice in the file (in the last literal
and in the real trailer), so the file is an affine function of the CRC
value x (and of the header's 4-byte MTIME m).  CRC32 is affine over GF(2)
for a fixed length, so crc(file(x, m)) == x is a linear system of 32
equations in 64 unknown bits, solved by Gaussian elimination.

Standard library only.  Usage: make-gzip-quine.py OUTPUT
"""
import struct
import sys
import zlib

UNIT = 5  # every instruction is exactly 5 bytes


class BitWriter:
    """LSB-first bit packer, as deflate requires."""

    def __init__(self):
        self.bits = []

    def put(self, value, n):  # n bits of value, least significant first
        for i in range(n):
            self.bits.append((value >> i) & 1)

    def put_code(self, code, n):  # Huffman codes go most significant first
        for i in reversed(range(n)):
            self.bits.append((code >> i) & 1)

    def getbytes(self, nbytes):
        assert len(self.bits) <= 8 * nbytes
        bits = self.bits + [0] * (8 * nbytes - len(self.bits))
        return bytes(sum(bits[8 * i + j] << j for j in range(8))
                     for i in range(nbytes))


# (base, extra bits) tables from RFC 1951 section 3.2.5
LEN_BASE = [3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43,
            51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258]
LEN_EXTRA = [0] * 8 + [1] * 4 + [2] * 4 + [3] * 4 + [4] * 4 + [5] * 4 + [0]
DIST_BASE = [1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257,
             385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289,
             16385, 24577]
DIST_EXTRA = [0, 0, 0, 0] + [i // 2 for i in range(2, 28)]


def code_for(value, base, extra):
    for i in reversed(range(len(base))):
        if value >= base[i]:
            assert value - base[i] < (1 << extra[i]) or base[i] == 258
            return i, value - base[i], extra[i]
    raise ValueError(value)


def put_copy(w, length, dist):
    sym, xv, xn = code_for(length, LEN_BASE, LEN_EXTRA)
    sym += 257
    if sym <= 279:
        w.put_code(sym - 256, 7)            # fixed code 0000000..0010111
    else:
        w.put_code(0b11000000 + sym - 280, 8)
    w.put(xv, xn)
    dsym, dxv, dxn = code_for(dist, DIST_BASE, DIST_EXTRA)
    w.put_code(dsym, 5)
    w.put(dxv, dxn)


def copy_bits(length, dist):
    w = BitWriter()
    put_copy(w, length, dist)
    return len(w.bits)


def partitions(n, parts, lo=3, hi=258):
    """Ordered splittings of n into `parts` pieces, each in [lo, hi]."""
    if parts == 1:
        if lo <= n <= hi:
            yield [n]
        return
    for first in range(lo, min(hi, n - lo * (parts - 1)) + 1):
        for rest in partitions(n - first, parts - 1, lo, hi):
            yield [first] + rest


def rep(n, final=False):
    """R n: copy n bytes from distance n, in exactly 40 bits (5 bytes).

    One fixed-Huffman block carries the copy, split into 1..4 pieces; 0..2
    empty fixed blocks (3+7 bits each) may follow. For the final instruction
    33..39 bits are also allowed (the rest of the 5th byte is padding, and
    the inflater still consumes all 5 bytes)."""
    for want in [40] + (list(range(39, 32, -1)) if final else []):
        for pieces in range(1, 5):
            for split in partitions(n, pieces):
                for empties in range(3):
                    total = 3 + sum(copy_bits(x, n) for x in split) + 7 \
                        + 10 * empties
                    if total == want:
                        w = BitWriter()
                        w.put(1 if final and empties == 0 else 0, 1)  # BFINAL
                        w.put(1, 2)                                   # fixed
                        for x in split:
                            put_copy(w, x, n)
                        w.put_code(0, 7)                              # EOB
                        for e in range(empties):
                            w.put(1 if final and e == empties - 1 else 0, 1)
                            w.put(1, 2)
                            w.put_code(0, 7)
                        return w.getbytes(UNIT)
    return None


def lit(n, final=False):
    """L n: stored-block header for n following literal bytes."""
    return bytes([1 if final else 0]) + struct.pack("<HH", n, n ^ 0xFFFF)


def gzip_header(mtime, name):
    flags = 0x08 if name is not None else 0  # FNAME
    hdr = b"\x1f\x8b\x08" + bytes([flags]) + struct.pack("<I", mtime) \
        + b"\x00\xff"                        # XFL=0, OS=unknown
    if name is not None:
        hdr += name + b"\x00"
    return hdr


def build(mtime, crc, name):
    P = gzip_header(mtime, name)
    p = len(P)
    rp = rep(p + UNIT)
    if rp is None:
        return None
    r4 = rep(4 * UNIT)
    L0, L1, L4 = lit(0), lit(UNIT), lit(4 * UNIT)
    S = struct.pack("<II", crc, 0)  # ISIZE patched below (length is fixed)
    s = len(S)
    rs = rep(s + UNIT, final=True)
    ls = lit(s + UNIT)

    def assemble(S):
        lp = lit(p + UNIT)
        d = b"".join([
            lp, P, lp,
            rp,
            L1, rp,
            L1, L1,
            L4, rp, L1, L1, L4,
            r4,
            L4, r4, L4, r4, L4,
            r4,
            L4, r4, L0, L0, ls,
            r4,
            L0,
            L0,
            ls, rs, S,
            rs,
        ])
        return P + d + S

    size = len(assemble(S))
    return assemble(struct.pack("<II", crc, size))


def solve_crc(name):
    """Find (mtime, crc) with crc32(build(mtime, crc)) == crc."""
    base = build(0, 0, name)
    c0 = zlib.crc32(base)
    # Unknown vector: bits 0..31 = crc value x, bits 32..63 = mtime m.
    # crc32(file(x, m)) = c0 ^ sum(col_i); we need that to equal x, i.e.
    # for each output bit j: sum_i (col_i[j] ^ [i == j and i < 32]) = c0[j].
    cols = []
    for i in range(64):
        x, m = (1 << i, 0) if i < 32 else (0, 1 << (i - 32))
        col = zlib.crc32(build(m, x, name)) ^ c0
        if i < 32:
            col ^= 1 << i
        cols.append(col)
    # Rows: equation j is a 64-bit mask of variables plus right-hand side.
    rows = []
    for j in range(32):
        mask = sum(((cols[i] >> j) & 1) << i for i in range(64))
        rows.append([mask, (c0 >> j) & 1])
    pivots = []
    r = 0
    for v in range(64):
        piv = next((k for k in range(r, 32) if (rows[k][0] >> v) & 1), None)
        if piv is None:
            continue
        rows[r], rows[piv] = rows[piv], rows[r]
        for k in range(32):
            if k != r and (rows[k][0] >> v) & 1:
                rows[k][0] ^= rows[r][0]
                rows[k][1] ^= rows[r][1]
        pivots.append(v)
        r += 1
    if any(row[0] == 0 and row[1] for row in rows):
        return None
    sol = 0  # free variables = 0
    for k, v in enumerate(pivots):
        sol |= rows[k][1] << v
    return (sol >> 32) & 0xFFFFFFFF, sol & 0xFFFFFFFF


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make-gzip-quine.py OUTPUT")
    # Pick the shortest header whose R[p+5] encodes in exactly 40 bits:
    # no file name, or FNAME of growing length.
    for name in [None] + [b"r" * k for k in range(0, 64)]:
        if build(0, 0, name) is None:
            continue
        solved = solve_crc(name)
        if solved is None:
            continue
        data = build(solved[0], solved[1], name)
        break
    else:
        sys.exit("no construction found")

    # Self-check: raw inflate of the deflate data must give the whole file.
    hdr_len = len(gzip_header(0, name))
    d = zlib.decompressobj(-15)
    out = d.decompress(data[hdr_len:])
    assert d.eof and out == data, "not a quine"
    assert d.unused_data == data[-8:]
    crc, size = struct.unpack("<II", data[-8:])
    assert crc == zlib.crc32(data) and size == len(data)

    with open(sys.argv[1], "wb") as f:
        f.write(data)
    print("wrote %s: %d bytes, crc32 %08x" % (sys.argv[1], len(data), crc))


if __name__ == "__main__":
    main()
