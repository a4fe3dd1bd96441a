#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets into fuzz/corpus/NAME_fuzz/.

Run from the repository root: python3 fuzz/make_corpus.py. Deterministic: the same bytes every
time (the gzip header's mtime is 0). The frame and HELLO layouts are the ones documented in
real_runtime/frame.h and real_runtime/handshake.h; each target's mode byte is documented at the
top of fuzz/NAME_fuzz.cc.
"""
import gzip
import os
import shutil
import struct
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "fuzz", "corpus")


def put(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def header(typ, length, seq=0, sender=1, epoch=0, version=2, flags=0, magic=0x4E445350):
    b = struct.pack("<IHBBIQII", magic, version, typ, flags, sender, seq, length, epoch)
    return b + struct.pack("<I", zlib.crc32(b) & 0xFFFFFFFF)


def fixed(frm, to, clock, chunk, layer, step, payload_bytes, nfloats):
    return struct.pack("<iiqiiiqI", frm, to, clock, chunk, layer, step, payload_bytes, nfloats)


def frames():
    t = "frame_fuzz"
    # mode 0: header as is, expect seq 0 / epoch 0; body decoded with explicit type + length.
    put(t, "valid_header_hello", bytes([0]) + header(16, 60))
    put(t, "valid_push_phantom", bytes([4]) + header(3, 40) + fixed(1, 0, 7, 2, 5, 0, 4096, 0))
    put(t, "valid_push_floats", bytes([4]) + header(3, 48) + fixed(1, 0, 7, 2, 5, 0, 8, 2))
    put(t, "valid_seq_epoch", bytes([6]) + header(4, 40, seq=9, epoch=3) +
        fixed(0, 1, 1, 0, 0, 1, 0, 0))
    put(t, "bad_magic", bytes([0]) + header(3, 40, magic=0x12345678))
    put(t, "bad_crc", bytes([0]) + header(3, 40)[:28] + b"\0\0\0\0")
    put(t, "bad_version", bytes([1]) + header(3, 40, version=1))
    put(t, "too_long", bytes([5]) + header(3, 0xFFFFFFF0))
    put(t, "explicit_body", bytes([0]) + header(3, 40) + bytes([2]) + struct.pack("<I", 40) +
        fixed(1, 2, 3, 4, 5, 6, 0, 0))
    put(t, "float_count_mismatch", bytes([0]) + header(3, 40) + bytes([3]) +
        struct.pack("<I", 44) + fixed(1, 2, 3, 4, 5, 6, 4, 2))
    put(t, "unknown_type", bytes([1]) + header(99, 40) + bytes([99]) + struct.pack("<I", 40) +
        fixed(1, 2, 3, 4, 5, 6, 0, 0))


def hello(version, rank, epoch, job, nonce=bytes(range(32)), declared=None, role=1, peer=0):
    n = len(job) if declared is None else declared
    return (struct.pack("<HBIII", version, role, rank, epoch, peer) + nonce + struct.pack("<H", n)
            + job)


def handshakes():
    t = "handshake_fuzz"
    # mode 0: a HELLO body (version 2: role, rank, epoch, peer rank, nonce, job id).
    put(t, "hello_valid", bytes([0]) + hello(2, 3, 0, b"job-42"))
    put(t, "hello_passes_rules", bytes([0]) + hello(2, 1, 0, b"fuzz-job", role=2))
    put(t, "hello_empty_job", bytes([0]) + hello(2, 0, 0, b""))
    put(t, "hello_long_job", bytes([0]) + hello(2, 1, 2, b"j" * 256))
    put(t, "hello_job_too_long", bytes([0]) + hello(2, 1, 2, b"j" * 257))
    put(t, "hello_bad_version", bytes([0]) + hello(7, 1, 0, b"job"))
    put(t, "hello_version_1", bytes([0]) + struct.pack("<HII", 1, 1, 0) + bytes(32) +
        struct.pack("<H", 3) + b"job")
    put(t, "hello_bad_role", bytes([0]) + hello(2, 1, 0, b"job", role=9))
    put(t, "hello_length_lies", bytes([0]) + hello(2, 1, 0, b"job", declared=200))
    put(t, "hello_short", bytes([0]) + hello(2, 1, 0, b"")[:20])
    # mode 1: an AUTH body; mode 2: frame bytes and a 16-byte tag.
    put(t, "auth_zero_mac", bytes([1]) + bytes(32))
    put(t, "auth_short", bytes([1]) + bytes(31))
    put(t, "tag_zero", bytes([2]) + header(3, 40) + fixed(1, 0, 7, 2, 5, 0, 4096, 0) + bytes(16))
    put(t, "tag_short", bytes([2]) + bytes(15))


def mutated(t, name, config):
    put(t, name, bytes([config]) + b"".join(
        bytes([0, 0, 0, 0]) + bytes([1, i % 256, i % 8, 1]) for i in range(300)))


def protocol_seeds(t, configs, forged_config, mutated_config):
    # Byte 0: the job's configuration (fuzz/protocol_fuzz.cc); then 4-byte steps. The seeds run
    # a job in order: deliver the oldest message sent, then finish a task of every stream.
    streams = 6 * 3
    for config in configs:
        steps = []
        for i in range(900):
            steps.append(bytes([0, 0, 0, 0]))
            steps.append(bytes([3, i % streams, 0, 0]))
            if i % 25 == 0:
                steps.append(bytes([4, 0, 0, 0]))
        put(t, "inorder_%d" % config, bytes([config]) + b"".join(steps))
    put(t, "forged_only", bytes([forged_config]) + b"".join(bytes([2, i, 255 - i, i * 7 % 256])
                                                            for i in range(256)))
    mutated(t, "mutated", mutated_config)


def protocols():
    protocol_seeds("protocol_fuzz", [0, 1, 2, 4, 8, 16, 32, 33, 34, 96], 0, 1)
    # The baselines' job (FuzzCollectives): DDP / Horovod, ring / tree / auto (bit 4),
    # 3 x 1 / 2 x 2 workers.
    protocol_seeds("collectives_fuzz", range(32), 2, 3)
    mutated("collectives_fuzz", "mutated_auto", 16)
    mutated("collectives_fuzz", "mutated_auto_horovod", 21)


def controls():
    t = "control_fuzz"
    # Byte 0 % 7: hello, peer table, loss, i64, f64, pong, status (real_runtime/control.h).
    put(t, "hello", bytes([0]) + struct.pack("<H", 7070) + b"10.0.0.7")
    put(t, "hello_no_host", bytes([0]) + struct.pack("<H", 7070))
    table = struct.pack("<I", 2)
    for rank, host in [(1, b"10.0.0.1"), (3, b"node-3")]:
        table += struct.pack("<IHB", rank, 7000 + rank, len(host)) + host
    put(t, "peers", bytes([1]) + table)
    put(t, "peers_rank0", bytes([1]) + struct.pack("<IIHB", 1, 0, 1, 1) + b"h")
    put(t, "peers_trailing", bytes([1]) + table + b"x")
    put(t, "loss", bytes([2]) + struct.pack("<qd", 12, 0.53))
    put(t, "loss_short", bytes([2]) + struct.pack("<q", 12))
    put(t, "i64", bytes([3]) + struct.pack("<q", -5))
    put(t, "f64_nan", bytes([4]) + struct.pack("<Q", 0x7FF8000000000001))
    put(t, "pong", bytes([5]) + struct.pack("<qq", 1, 2))
    put(t, "status", bytes([6]) + b"worker 0: at clock 3, waiting for fresh parameters")
    put(t, "status_long", bytes([6]) + b"s" * 4097)


def idx_bytes(dims, data):
    return bytes([0, 0, 8, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + data


def gz(b):
    return gzip.compress(b, mtime=0)


def idx():
    t = "idx_fuzz"
    images = idx_bytes([2, 3, 3], bytes(range(18)))
    labels = idx_bytes([4], bytes([0, 9, 3, 1]))
    # mode bit 0 clear: written as is; set: the harness gzips the rest.
    put(t, "plain_images", bytes([0]) + images)
    put(t, "plain_labels", bytes([0]) + labels)
    put(t, "gzip_by_harness", bytes([1]) + images)
    put(t, "gzip_in_input", bytes([0]) + gz(labels))
    put(t, "gzip_truncated", bytes([0]) + gz(images)[:-10])
    put(t, "truncated_data", bytes([0]) + images[:-4])
    put(t, "trailing_bytes", bytes([0]) + labels + b"\1")
    put(t, "bad_type", bytes([0]) + bytes([0, 0, 0x0D, 1, 0, 0, 0, 1, 0, 0, 0, 0]))
    put(t, "zero_dims", bytes([0]) + bytes([0, 0, 8, 0]))
    put(t, "huge_dims", bytes([0]) + idx_bytes([0x7FFF, 0x7FFF, 2], b""))
    put(t, "bad_magic", bytes([0]) + b"\x1f\x8b\x08\x00notgzip")


def yamls():
    for name in ["demo.yaml", "live/fmnist_mlp.yaml", "experiments/paper2015_cifar10.yaml"]:
        src = os.path.join(ROOT, "scenarios", name)
        put("scenario_fuzz", os.path.basename(name), open(src, "rb").read())
    put("scenario_fuzz", "no_schema.yaml", b"name: x\nmodel: cifar10_quick\n")
    put("scenario_fuzz", "bad_yaml.yaml", b"schema_version: 1\ncluster: [workers: {\n")
    for name in ["fmnist_mlp", "fmnist_cnn", "cifar10_quick", "alexnet", "googlenet"]:
        src = os.path.join(ROOT, "scenarios", "models", name + ".yaml")
        put("model_fuzz", name + ".yaml", open(src, "rb").read())
    put("model_fuzz", "unknown_kind.yaml",
        b"schema_version: 1\nname: m\ninput: {channels: 1, height: 8, width: 8}\nnum_classes: 2\n"
        b"layers:\n  - {name: a, type: nope}\n")


if __name__ == "__main__":
    for t in ["frame_fuzz", "handshake_fuzz", "idx_fuzz", "scenario_fuzz", "model_fuzz",
              "protocol_fuzz", "collectives_fuzz", "control_fuzz"]:
        shutil.rmtree(os.path.join(OUT, t), ignore_errors=True)
    frames()
    handshakes()
    protocols()
    controls()
    idx()
    yamls()
