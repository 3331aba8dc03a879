#!/usr/bin/env python3
"""png_blank.py FILE.png: exit 0 when the screenshot shows something (at least 1% of its pixels
differ from its most common colour, and at least 8 colours), 1 when it is blank (printing why),
2 when it cannot be read. A small PNG decoder (8-bit RGB or RGBA, non-interlaced, the five
filters): no third-party module."""
import struct
import sys
import zlib


def pixels(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG file")
    pos, idat, hdr = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            hdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    w, h, depth, ctype, _, _, interlace = hdr
    if depth != 8 or ctype not in (2, 6) or interlace:
        raise ValueError("unsupported PNG: depth %d, colour type %d, interlace %d" % (depth, ctype, interlace))
    bpp = 3 if ctype == 2 else 4
    raw, stride, prev, rows, at = zlib.decompress(idat), w * bpp, bytearray(w * bpp), [], 0
    for _ in range(h):
        f, line = raw[at], bytearray(raw[at + 1:at + 1 + stride])
        at += 1 + stride
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return w, h, bpp, rows


def main():
    try:
        w, h, bpp, rows = pixels(sys.argv[1])
    except Exception as e:
        print("cannot read %s: %s" % (sys.argv[1], e))
        return 2
    counts = {}
    for r in rows[::2]:
        for x in range(0, w * bpp, bpp * 2):
            px = r[x:x + 3]
            counts[px] = counts.get(px, 0) + 1
    total = sum(counts.values())
    top = max(counts.values())
    ink = 1 - top / total
    if ink < 0.01 or len(counts) < 8:
        print("blank: %.2f%% of the pixels differ from the background, %d colours" % (100 * ink, len(counts)))
        return 1
    print("not blank: %.1f%% ink, %d colours" % (100 * ink, len(counts)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
