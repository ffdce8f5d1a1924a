#!/usr/bin/env python3
"""Writes small learnable classification data in the layouts of the [data] kinds npy, cifar10 and image_folder,
with the standard library only (no NumPy), so that projects and tests need nothing downloaded.

  scripts/make_image_data.py npy OUT_DIR [--samples N] [--dim D] [--classes K]
      OUT_DIR/train_x.npy (float32 [N, D]), train_y.npy (int64 [N]): class c is a fixed random prototype plus
      unit noise, as Tessera's synthetic digits.
  scripts/make_image_data.py cifar10 OUT_DIR [--samples N]
      OUT_DIR/data_batch_1.bin and test_batch.bin: records of 1 label byte + 3072 pixel bytes (CHW, 32x32x3), each
      class a coloured shape (square, disc, bars, ...) on noise.
  scripts/make_image_data.py image_folder OUT_DIR [--samples N] [--size S]
      OUT_DIR/<class>/<i>.png: the same shapes as 8-bit RGB PNGs, one folder per class.
"""
import argparse
import math
import os
import random
import struct
import zlib

CLASSES = ["square", "disc", "hbars", "vbars", "cross", "ring", "diag", "corner", "dots", "frame"]


def npy_bytes(descr, shape, payload):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr, "".join("%d, " % d for d in shape) if len(shape) != 1 else "%d," % shape[0])
    header = header.ljust(64 * ((len(header) + 11 + 63) // 64) - 11) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + payload


def write_npy(out, n, dim, classes, seed):
    rng = random.Random(seed)
    protos = [[rng.gauss(0, 1) for _ in range(dim)] for _ in range(classes)]
    xs, ys = bytearray(), bytearray()
    scale = 3.0 / math.sqrt(dim)
    for _ in range(n):
        c = rng.randrange(classes)
        xs += struct.pack("<%df" % dim, *[p * scale + rng.gauss(0, 1) for p in protos[c]])
        ys += struct.pack("<q", c)
    with open(os.path.join(out, "train_x.npy"), "wb") as f:
        f.write(npy_bytes("<f4", (n, dim), bytes(xs)))
    with open(os.path.join(out, "train_y.npy"), "wb") as f:
        f.write(npy_bytes("<i8", (n,), bytes(ys)))


def shape_image(label, size, rng):
    """An [size, size, 3] image (rows of RGB tuples) of class `label`: a coloured shape on dim noise."""
    colour = [(230, 60, 60), (60, 200, 60), (60, 90, 230), (220, 200, 40), (200, 60, 200), (40, 200, 200),
              (240, 140, 30), (150, 150, 150), (250, 250, 250), (120, 70, 20)][label]
    c = size / 2 + rng.uniform(-size / 8, size / 8)
    r = size / 4
    img = []
    for y in range(size):
        row = []
        for x in range(size):
            dx, dy = x - c, y - c
            d = math.hypot(dx, dy)
            inside = [abs(dx) < r and abs(dy) < r, d < r, (y // 3) % 2 == 0, (x // 3) % 2 == 0,
                      abs(dx) < r / 3 or abs(dy) < r / 3, r * 0.6 < d < r, abs(dx - dy) < r / 3,
                      x < size / 2 and y < size / 2, (x % 6 < 2) and (y % 6 < 2),
                      x < 3 or y < 3 or x >= size - 3 or y >= size - 3][label]
            noise = rng.randrange(40)
            row.append(tuple(min(255, v + noise) for v in colour) if inside else (noise, noise, noise))
        img.append(row)
    return img


def write_cifar(out, n, seed):
    rng = random.Random(seed)
    for name, count in (("data_batch_1.bin", n), ("test_batch.bin", max(n // 5, 1))):
        with open(os.path.join(out, name), "wb") as f:
            for _ in range(count):
                label = rng.randrange(10)
                img = shape_image(label, 32, rng)
                planes = bytes(img[y][x][ch] for ch in range(3) for y in range(32) for x in range(32))
                f.write(bytes([label]) + planes)


def png_bytes(img):
    h, w = len(img), len(img[0])
    raw = b"".join(b"\x00" + bytes(v for px in row for v in px) for row in img)
    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def write_image_folder(out, n, size, seed):
    rng = random.Random(seed)
    for i in range(n):
        label = i % 10
        folder = os.path.join(out, CLASSES[label])
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "%05d.png" % i), "wb") as f:
            f.write(png_bytes(shape_image(label, size, rng)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kind", choices=["npy", "cifar10", "image_folder"])
    ap.add_argument("out")
    ap.add_argument("--samples", type=int, default=512)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.kind == "npy":
        write_npy(a.out, a.samples, a.dim, a.classes, a.seed)
    elif a.kind == "cifar10":
        write_cifar(a.out, a.samples, a.seed)
    else:
        write_image_folder(a.out, a.samples, a.size, a.seed)


if __name__ == "__main__":
    main()
