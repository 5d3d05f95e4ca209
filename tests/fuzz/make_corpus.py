#!/usr/bin/env python3
"""Writes the seed corpus of each fuzz target into tests/fuzz/corpus/<target>/.

Run from anywhere: python3 tests/fuzz/make_corpus.py. The files are committed; rerun this only
when an input format changes (the formats are described at the top of each tests/fuzz/fuzz_*.cpp
and in tests/device/orchestration/fuzz_program.hpp). Crash inputs a fuzzer finds go to
tests/fuzz/regressions/<target>/ instead, by hand.
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))

U64_MAX = (1 << 64) - 1
SIZEOF_CALL_CONFIG = 6 * 4 + 1024 + 3 * 4 * 8 + 8  # simpler::CallConfig (timeout last)
FLOAT32, INT32, UINT8 = 0, 2, 5


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(bytes(data))


# ---- args blob: [i32 T][i32 S][T x 40-byte ContinuousTensor][S x u64] --------------------------

def tensor(data, shape, dtype, ndims=None):
    shapes = list(shape) + [0] * (5 - len(shape))
    nd = len(shape) if ndims is None else ndims
    return struct.pack("<Q5IIBB6x", data, *shapes, nd, dtype, 0)


def blob(tensors, scalars, t=None, s=None):
    head = struct.pack("<ii", len(tensors) if t is None else t, len(scalars) if s is None else s)
    return head + b"".join(tensors) + b"".join(struct.pack("<Q", v) for v in scalars)


def args_blob():
    w = lambda n, d: write("fuzz_args_blob", n, d)
    w("empty", b"")
    w("no_args", blob([], []))
    w("one_tensor_two_scalars", blob([tensor(0x10000, [4], FLOAT32)], [1, 2]))
    w("three_dims", blob([tensor(0x20000, [2, 3, 4], INT32), tensor(0, [8], UINT8)], [7]))
    w("negative_count", blob([], [], t=-1, s=0))
    w("truncated", blob([tensor(0x10000, [4], FLOAT32)], [], t=3))
    w("bad_dtype", blob([tensor(0x10000, [4], 200)], []))
    w("size_overflows", blob([tensor(0x10000, [65536] * 5, 8)], []))


# ---- mailbox frame: [u32 blob_bytes][u64 digest][u32 index_hint][CallConfig]
#      [u32 stale error kind][i32 stale error code][u8 stale message fill][blob] -----------------
# The leaf's behaviour is digest % 5: 0 returns, 1 throws, 2 throws a long message, 3 throws a
# non-std exception, 4 throws a DeviceError whose status is digest >> 32.

def call_config():
    c = struct.pack("<6i", 0, 3, 0, 0, 0, 0) + bytes(1024) + bytes(96) + struct.pack("<q", 0)
    assert len(c) == SIZEOF_CALL_CONFIG
    return c


def frame(b, digest, blob_bytes=None, hint=0, stale=(0, 0, 0)):
    n = len(b) if blob_bytes is None else blob_bytes
    kind, code, fill = stale
    return (struct.pack("<IQI", n, digest, hint) + call_config() +
            struct.pack("<IiB", kind, code, fill) + b)


def mailbox_frame():
    w = lambda n, d: write("fuzz_mailbox_frame", n, d)
    good = blob([tensor(0x10000, [4], FLOAT32)], [5])
    w("runs", frame(good, 0))
    w("leaf_throws", frame(good, 1))
    w("leaf_throws_long", frame(good, 2))
    w("leaf_throws_int", frame(good, 3, hint=7))
    w("blob_past_capacity", frame(good, 0, blob_bytes=0xFFFFFFFF))
    w("blob_shorter_than_claim", frame(good, 0, blob_bytes=len(good) - 8))
    w("empty_blob", frame(b"", 5))
    w("leaf_device_error", frame(good, (0xFFFFFF88 << 32) | 4))  # status -120
    w("stale_known_kind", frame(good, 0, stale=(6, -120, ord("x"))))
    w("stale_unknown_kind", frame(good, 1, stale=(200, 7, 0)))
    w("stale_huge_kind", frame(good, 0, stale=(0xFFFFFFFF, -1, 0xFF)))


# ---- device: [u8 config][u8 ring][u8 buffers][buffers][u8 scalars][scalars][program] -----------
# Program ops (fuzz_program.hpp): 0 submit, 1 read, 2 alloc, 3 scope_begin, 4 scope_end,
# 5 read with NULL. Compact numbers: b < 0xf0 is b, 0xf0 + raw little-endian, 0xf1.. = max - k.

def compact(v, size=8):
    if v < 0xF0:
        return bytes([v])
    return bytes([0xF0]) + v.to_bytes(size, "little")


def shape_fields(shape, dtype):
    s = list(shape) + [0] * (5 - len(shape))
    return bytes([len(shape), dtype]) + b"".join(compact(x, 4) for x in s)


def buffer(kind, shape, dtype):
    return bytes([kind]) + shape_fields(shape, dtype)


def alloc(shape, dtype):
    return bytes([2]) + shape_fields(shape, dtype)


def read(k, mode, first, count, off, n):
    return bytes([1, k, mode]) + compact(first) + compact(count) + compact(off) + compact(n)


def submit(lanes, tensors, scalars=()):
    """tensors: (tag, source-bytes); lanes: three lane bytes (0xff = unused)."""
    out = bytes([0]) + bytes(lanes) + bytes([len(tensors)])
    for tag, src in tensors:
        out += bytes([tag]) + src
    return out + bytes([len(scalars)]) + bytes(scalars)


KNOWN = lambda k: bytes([0, k])
DESCRIBE = lambda shape, dtype: bytes([2]) + shape_fields(shape, dtype)
RAW_VIEW = lambda k, off, owner, shape, dtype: (bytes([1, k]) + compact(off) + compact(owner) +
                                                shape_fields(shape, dtype))
IN, OUT, INOUT, OUT_EXISTING, NODEP = 0, 1, 2, 3, 4


def run(config, ring, buffers, scalars, program, config_extra=b""):
    return (bytes([config, ring]) + config_extra + bytes([len(buffers)]) + b"".join(buffers) +
            bytes([len(scalars)]) + bytes(scalars) + program)


def device():
    w = lambda n, d: write("fuzz_device", n, d)
    data = [buffer(0, [16], INT32)]
    w("empty", run(0, 0, [], [], b""))
    w("alloc_read", run(1, 0, [], [], alloc([16], INT32) + read(0, 0, 0, 16, 60, 4)))
    w("chain", run(0, 0, data, [3],
                   submit([0xFF, 0, 0xFF], [(IN, KNOWN(0)), (OUT, DESCRIBE([16], INT32))], [1]) +
                   read(1, 0, 0, 16, 0, 64) + bytes([3]) +
                   submit([0, 1, 0xFF], [(INOUT, KNOWN(1))]) + bytes([4]) +
                   read(1, 0, 4, 4, 0, 16)))
    w("read_wraps", run(0, 0, data, [], read(0, 1, 3, 3, 0, 4) +
                        read(0, 0, 0, 16, U64_MAX - 7, 16)))
    w("forged_owner", run(0, 0, data, [],
                          submit([0xFF, 0, 0xFF],
                                 [(IN, RAW_VIEW(0, 0, 0xFFFFFFFE00000000, [16], INT32))])))
    w("small_rings", run(2, 0, data, [],
                         bytes([3]) + submit([0xFF, 0, 0xFF], [(OUT, DESCRIBE([64], INT32))]) * 6 +
                         bytes([4])))
    w("huge_heap", run(4, 1, [], [], alloc([4], INT32), config_extra=compact(1 << 63)))
    w("bad_run_tensor", run(0, 0, [buffer(1, [65536] * 4, INT32)], [], b""))
    w("null_reads", run(0, 0, data, [], bytes([5, 0, 0, 5, 0, 1])))


if __name__ == "__main__":
    args_blob()
    mailbox_frame()
    device()
