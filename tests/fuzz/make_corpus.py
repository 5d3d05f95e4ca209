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
#      [u32 stale error kind][i32 stale error code][u8 stale message fill][u32 config_in_frame]
#      [blob] --------------------------------------------------------------------------------------
# The leaf's behaviour is digest % 5: 0 returns, 1 throws, 2 throws a long message, 3 throws a
# non-std exception, 4 throws a DeviceError whose status is digest >> 32.

def call_config():
    c = struct.pack("<6i", 0, 3, 0, 0, 0, 0) + bytes(1024) + bytes(96) + struct.pack("<q", 0)
    assert len(c) == SIZEOF_CALL_CONFIG
    return c


def frame(b, digest, blob_bytes=None, hint=0, stale=(0, 0, 0), config_in_frame=1):
    n = len(b) if blob_bytes is None else blob_bytes
    kind, code, fill = stale
    return (struct.pack("<IQI", n, digest, hint) + call_config() +
            struct.pack("<IiBI", kind, code, fill, config_in_frame) + b)


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
    w("default_config", frame(good, 0, config_in_frame=0))
    w("default_config_throws", frame(good, 1, config_in_frame=0))
    w("bad_config_flag", frame(good, 0, config_in_frame=7))


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


# ---- remote frames: a stream of [40-byte header][payload] (include/simpler/remote/wire.hpp,
#      docs/remote.md "Wire protocol"). All integers little-endian. The first header fixes the
#      link's session, worker and first sequence number; each later frame carries the next one.

MAGIC, VERSION = 0x524D5053, 2
(AUTH_BEGIN, AUTH_CHALLENGE, AUTH_PROOF, HELLO, TASK, COMPLETION, CONTROL, CONTROL_REPLY,
 HEARTBEAT, SHUTDOWN) = range(1, 11)
ALLOC, FREE, COPY_TO, COPY_FROM, PING = range(1, 6)
OK, FAILED = 0, 1
KIND_DEVICE, KIND_REMOTE = 6, 7
FLOAT16, INT64, BFLOAT16 = 1, 7, 6


def header(ftype, session, worker, seq, length, magic=MAGIC, version=VERSION, flags=0, r0=0, r1=0):
    return struct.pack("<IHBBQIIQII", magic, version, ftype, flags, session, worker, r0, seq, length,
                       r1)


def wstr(b):
    return struct.pack("<I", len(b)) + bytes(b)


def frames(session, worker, seq, items):
    """items: (type, payload) or (type, payload, declared length); sequence numbers count up."""
    out = b""
    for i, item in enumerate(items):
        ftype, payload = item[0], item[1]
        length = len(payload) if len(item) < 3 else item[2]
        out += header(ftype, session, worker, (seq + i) & U64_MAX, length) + payload
    return out


def auth_begin(nonce, period_ms, timeout_ms):
    return bytes(nonce) + struct.pack("<II", period_ms, timeout_ms)


def hello(served, level=3, max_payload=1 << 20, max_buffer=1 << 30, pool=1 << 32, served_count=None,
          st=None):
    """st: the status block after the served list (default: ok)."""
    n = len(served) if served_count is None else served_count
    out = struct.pack("<iIQQI", level, max_payload, max_buffer, pool, n)
    out += b"".join(struct.pack("<Q", d) + wstr(name) for d, name in served)
    return out + (status(OK, 0, 0, b"") if st is None else st)


def remote_config(block_dim=0, threads=3, knobs=(0, 0, 0, 0), prefix=b"", env=(0,) * 12, timeout=0):
    return (struct.pack("<6i", block_dim, threads, *knobs) + wstr(prefix) +
            struct.pack("<12Q", *env) + struct.pack("<q", timeout))


def remote_tensor(buffer_id, offset, shape, dtype, child=1, ndims=None):
    nd = len(shape) if ndims is None else ndims
    return (struct.pack("<QBBBB", (buffer_id << 40) | offset, dtype, nd, child, 0) +
            struct.pack("<%dI" % len(shape), *shape))


def task(digest, config, tensors, scalars, trace_level=0, trace_limit=0):
    out = (struct.pack("<Q", digest) + config + struct.pack("<I", len(tensors)) +
           b"".join(tensors) + struct.pack("<I", len(scalars)) +
           b"".join(struct.pack("<Q", v) for v in scalars) + struct.pack("<B", trace_level))
    return out + (struct.pack("<I", trace_limit) if trace_level else b"")


def status(st, kind, code, message):
    return struct.pack("<BBi", st, kind, code) + wstr(message)


def completion(answers, st=OK, kind=0, code=0, message=b"", trace=None):
    """trace: (rx, begin, end, tx, lost, records) of a traced TASK's answer, or None."""
    out = struct.pack("<Q", answers) + status(st, kind, code, message)
    if trace is None:
        return out + b"\x00"
    rx, begin, end, tx, lost, records = trace
    return out + struct.pack("<BqqqqQI", 1, rx, begin, end, tx, lost, len(records)) + records


def control(op, a=0, b=0, n=0, data=b""):
    return struct.pack("<IIQQQ", op, 0, a, b, n) + data


def control_reply(answers, op, st=OK, kind=0, code=0, message=b"", r=(0, 0, 0), data=b""):
    return (struct.pack("<QI", answers, op) + status(st, kind, code, message) +
            struct.pack("<3Q", *r) + data)


def remote_frame():
    w = lambda n, d: write("fuzz_remote_frame", n, d)
    s, wk = 0x5E55_1017_0000_00A1, 3
    busy = remote_config(24, 4, (2, 1, 3, 1), b"/var/tmp/simpler-diag",
                         (4, 1024, 0, 1 << 20, 1024, 0, 1 << 30, 4096, 0, 4, 65536, 7), 1500)
    args = [remote_tensor(1, 0, [16], FLOAT32), remote_tensor(2, 0x100, [3, 5], FLOAT16),
            remote_tensor(3, 8, [1, 2, 3], INT64), remote_tensor(4, 0, [7, 1, 1, 1, 9], BFLOAT16)]
    w("empty", b"")
    w("client_session", frames(s, wk, 0, [
        (AUTH_BEGIN, auth_begin(range(32), 250, 2000)),
        (AUTH_PROOF, bytes(range(0x40, 0x60))),
        (CONTROL, control(ALLOC, 4096, 1)),
        (CONTROL, control(COPY_TO, 1, 64, 16, bytes(range(16)))),
        (TASK, task(0xC0FFEE, remote_config(), [remote_tensor(1, 64, [4], INT32)], [7])),
        (CONTROL, control(COPY_FROM, 1, 0, 32)),
        (CONTROL, control(PING)),
        (HEARTBEAT, b""),
        (CONTROL, control(FREE, 1)),
        (SHUTDOWN, b""),
    ]))
    w("server_session", frames(s, wk, 0, [
        (AUTH_CHALLENGE, bytes(range(0x80, 0xC0))),
        (HELLO, hello([(0x1111, b"vector_add"), (0x2222, b"orch/matmul")])),
        (CONTROL_REPLY, control_reply(2, ALLOC, r=(1, 1 << 40, 4096))),
        (CONTROL_REPLY, control_reply(3, COPY_TO)),
        (COMPLETION, completion(4)),
        (CONTROL_REPLY, control_reply(5, COPY_FROM, r=(8, 0, 0), data=bytes(range(8)))),
        (COMPLETION, completion(6, FAILED, KIND_DEVICE, -120, b"chip 0: kernel faulted")),
        (CONTROL_REPLY, control_reply(7, FREE, FAILED, KIND_REMOTE, 0, b"no buffer 9")),
        (HEARTBEAT, b""),
    ]))
    w("task_busy", frames(s, wk, 41, [(TASK, task(0x0123456789ABCDEF, busy, args,
                                                  [0, 1, U64_MAX]))]))
    w("task_bad_dtype", frames(s, wk, 0, [(TASK, task(9, remote_config(),
                                                      [remote_tensor(1, 0, [4], 200)], []))]))
    w("task_local_tensor", frames(s, wk, 0, [(TASK, task(9, remote_config(),
                                                         [remote_tensor(1, 0, [4], 0, 0)], []))]))
    w("task_negative_block_dim", frames(s, wk, 0, [(TASK, task(9, remote_config(-1), [], []))]))
    w("sequence_wraps", frames(s, wk, U64_MAX, [(HEARTBEAT, b""), (HEARTBEAT, b""),
                                                (CONTROL, control(PING))]))
    w("out_of_order", frames(s, wk, 5, [(HEARTBEAT, b"")]) + frames(s, wk, 7, [(HEARTBEAT, b"")]))
    w("other_session", frames(s, wk, 0, [(HEARTBEAT, b"")]) +
      frames(s + 1, wk, 1, [(HEARTBEAT, b"")]))
    w("bad_magic", header(HEARTBEAT, s, wk, 0, 0, magic=0x52504D53))
    w("reserved_set", header(HEARTBEAT, s, wk, 0, 0, r1=1))
    w("length_over_limit", header(CONTROL, s, wk, 0, (1 << 16) + 1) + control(PING))
    w("payload_cut_short", header(HELLO, s, wk, 0, 100) + hello([])[:10])
    w("copy_to_short", frames(s, wk, 0, [(CONTROL, control(COPY_TO, 1, 0, 8, bytes(4)))]))
    w("hello_count_unfit", frames(s, wk, 0, [(HELLO, hello([], served_count=1000))]))
    w("hello_failed", frames(s, wk, 1, [
        (AUTH_CHALLENGE, bytes(range(0x80, 0xC0))),
        (HELLO, hello([], st=status(FAILED, KIND_REMOTE, 0,
                                    b"setup or init() of the inner Worker failed: no chip 3"))),
    ]))
    w("hello_ok_with_error", frames(s, wk, 0, [(HELLO, hello([(5, b"x")],
                                                           st=status(OK, KIND_DEVICE, 0, b"")))]))
    w("alloc_ids", frames(s, wk, 3, [
        (CONTROL, control(ALLOC, 64, (1 << 24) - 1)),
        (CONTROL, control(ALLOC, 64, 0)),
    ]))
    w("alloc_id_past_24_bits", frames(s, wk, 0, [(CONTROL, control(ALLOC, 64, 1 << 24))]))
    w("task_traced", frames(s, wk, 0, [(TASK, task(7, remote_config(), [], [1], 2, 1 << 24))]))
    # A traced COMPLETION; its records are opaque to the frame codec (a trace_wire blob).
    w("completion_traced", frames(s, wk, 0, [(COMPLETION, completion(
        1, trace=(1000, 1200, 5200, 5300, 2, struct.pack("<II", 0x53545231, 0))))]))
    w("completion_trace_out_of_order", frames(s, wk, 0, [(COMPLETION, completion(
        1, trace=(1000, 900, 5200, 5300, 0, b"")))]))
    w("completion_long_message", frames(s, wk, 0, [(COMPLETION, completion(
        1, FAILED, KIND_REMOTE, 5, b"m" * 16384))]))


if __name__ == "__main__":
    args_blob()
    mailbox_frame()
    device()
    remote_frame()
