#!/usr/bin/env python3
"""Writes the seed corpora in fuzz/corpus/<target>/ (committed; rerun after a
wire format change). A few valid inputs per target and a few broken ones.

    python3 fuzz/make_seeds.py

Protobuf messages are encoded by hand (store.proto is small) so that this
needs nothing beyond Python.
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def varint(n):
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field_varint(num, n):
    return varint(num << 3) + varint(n)


def field_bytes(num, b):
    return varint((num << 3) | 2) + varint(len(b)) + b


def frame(payload):
    return struct.pack("<I", len(payload)) + payload


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- store_request: Request frames after the handshake ----

def request(rid, op_field, op_msg, timeout_ms=0):
    msg = field_varint(1, rid)
    if timeout_ms:
        msg += field_varint(2, timeout_ms)
    return msg + field_bytes(op_field, op_msg)


def set_req(rid, key, value):
    return frame(request(rid, 10, field_bytes(1, key) + field_bytes(2, value)))


def get_req(rid, key, timeout_ms=0):
    return frame(request(rid, 11, field_bytes(1, key), timeout_ms))


def add_req(rid, key, delta):
    return frame(request(rid, 12, field_bytes(1, key) + field_varint(2, delta)))


def keys_req(rid, field, keys, timeout_ms=0):
    return frame(request(rid, field, b"".join(field_bytes(1, k) for k in keys), timeout_ms))


S = "store_request"
write(S, "set_get", set_req(1, b"hcomm/addr/0", b"127.0.0.1:4000 host 12") + get_req(2, b"hcomm/addr/0"))
write(S, "add", add_req(1, b"arrivals", 1) + add_req(2, b"arrivals", -3) + get_req(3, b"arrivals"))
write(S, "wait_check", set_req(1, b"a", b"1") + keys_req(2, 13, [b"a"], 10) + keys_req(3, 14, [b"a", b"b"]))
write(S, "get_timeout", get_req(1, b"never", 1))
write(S, "wait_timeout", set_req(1, b"x", b"") + keys_req(2, 13, [b"x", b"y", b"z\x00\xff"], 2))
write(S, "get_parks", get_req(7, b"later", 60000) + set_req(8, b"later", b"v"))
write(S, "add_overflow", add_req(1, b"c", (1 << 63) - 1) + add_req(2, b"c", 1))
write(S, "add_not_number", set_req(1, b"c", b"abc") + add_req(2, b"c", 1))
write(S, "bad_keys", set_req(1, b"", b"v") + get_req(2, b"k" * 4097) + keys_req(3, 14, [b"ok", b""]))
write(S, "no_op", frame(field_varint(1, 5)))
write(S, "junk_payload", frame(b"\xff\xff\xff\xff\x0f garbage"))
write(S, "truncated", struct.pack("<I", 100) + b"0123456789")
write(S, "oversize", struct.pack("<I", 0xFFFFFFFF) + b"x")
write(S, "empty_frame", frame(b"") + get_req(1, b"a"))

# ---- tcp_frames: chunking seed + wire frames ----

MAGIC = 0x464D4348


def wire(payload, meta0=0, length=None, magic=MAGIC, piece=0, piece_len=None):
    """A wire header (tcp_transport.cc's WireHeader: magic, piece, payload
    length, piece length, meta) and `payload`. piece 0: a whole frame, of
    `length` bytes (default: the payload's); otherwise one piece of frame
    `piece`, whose whole payload is `length` bytes. piece_len defaults to
    `length` for a whole frame and to the payload's size for a piece."""
    meta = bytes([meta0]) + bytes(range(1, 40))
    n = len(payload) if length is None else length
    if piece_len is None:
        piece_len = n if piece == 0 else len(payload)
    return struct.pack("<IIQQ", magic, piece, n, piece_len) + meta + payload


PIECE = 256 * 1024  # TcpTransport::kPieceBytes: larger frames move in pieces


def piece(pid, data, frame_len, meta0=0, piece_len=None):
    return wire(data, meta0=meta0, length=frame_len, piece=pid, piece_len=piece_len)


T = "tcp_frames"
small = struct.pack("<I", 7)
big = struct.pack("<I", 0x80000001)
write(T, "one_frame", small + wire(b"hello, rank 0"))
write(T, "discarded", small + wire(b"dropped payload", meta0=1))
write(T, "empty_payload", small + wire(b""))
write(T, "three_frames", small + wire(b"a" * 100) + wire(b"", meta0=3) + wire(b"b" * 7, meta0=1))
write(T, "direct_read", big + wire(bytes(range(256)) * 80))
write(T, "bad_magic", small + wire(b"ok") + wire(b"bad", magic=0x12345678))
write(T, "truncated_header", small + wire(b"x")[:30])
write(T, "truncated_payload", small + wire(b"0123456789", length=1000))
write(T, "huge_length", small + wire(b"tiny", length=1 << 63))
write(T, "lengths_differ", small + wire(b"ok") + wire(b"0123456789", piece_len=4) + wire(b"late"))
# Frames in pieces: none of them completes within max_len (64 KiB).
write(T, "pieces_between", small + piece(1, b"p" * 1000, 300000) + wire(b"between")
      + piece(1, b"q" * 1000, 300000, meta0=2))
write(T, "pieces_interleaved", big + piece(7, bytes(range(256)) * 4, 400000)
      + piece(8, b"d" * 500, 500000, meta0=1) + wire(b"", meta0=5) + piece(7, b"r" * 3000, 400000)
      + wire(b"w" * 2000) + piece(9, b"x" * 10, 1 << 40) + piece(8, b"e" * 700, 500000))
write(T, "piece_direct_read", big + piece(3, bytes(range(256)) * 100, PIECE + 100)
      + wire(b"after") + piece(3, b"z" * 20000, PIECE + 100))
write(T, "piece_truncated", small + piece(2, b"only part", 300000, piece_len=5000))
write(T, "piece_id_max", small + piece(0xFFFFFFFF, b"m" * 64, 300000) + wire(b"ok")
      + piece(0xFFFFFFFF, b"n" * 64, 300000))
write(T, "piece_past_end", small + piece(4, b"p" * 1000, 300000) + wire(b"ok")
      + piece(4, b"q" * 100, 300000, piece_len=299001) + wire(b"never"))
write(T, "piece_zero", small + piece(4, b"p" * 1000, 300000) + piece(4, b"", 300000) + wire(b"never"))
write(T, "first_piece_small_frame", small + wire(b"ok") + piece(5, b"s" * 100, PIECE) + wire(b"never"))
write(T, "first_piece_empty", small + piece(5, b"", 300000) + wire(b"never"))
write(T, "first_piece_too_big", small + piece(5, b"b" * 100, 1 << 40, piece_len=PIECE + 1))
write(T, "open_64", small + b"".join(piece(i, b"o", PIECE + 1) for i in range(1, 65))
      + wire(b"still fine") + piece(64, b"p", PIECE + 1))
write(T, "open_65", small + b"".join(piece(i, b"o", PIECE + 1) for i in range(1, 66))
      + wire(b"never"))
# Filled pieces (seed bit 30): the harness makes up each piece's payload,
# so that frames in pieces complete.
filled = struct.pack("<I", 0x40000007)
filled_big = struct.pack("<I", 0xC0000001)
REST = 300000 - PIECE
write(T, "filled_two_pieces", filled_big + piece(1, b"", PIECE + 100, piece_len=PIECE)
      + wire(b"between") + piece(1, b"", PIECE + 100, meta0=2, piece_len=100) + wire(b"after"))
write(T, "filled_interleaved", filled_big + piece(1, b"", 300000, piece_len=PIECE)
      + piece(2, b"", 300000, meta0=2, piece_len=PIECE) + wire(b"w" * 100, meta0=4)
      + piece(2, b"", 300000, piece_len=REST) + wire(b"", meta0=6)
      + piece(1, b"", 300000, piece_len=REST)
      + piece(1, b"", PIECE + 1, meta0=8, piece_len=PIECE) + piece(1, b"", PIECE + 1, piece_len=1))
write(T, "filled_small_chunks", filled + piece(3, b"", PIECE + 10, piece_len=PIECE)
      + wire(b"x" * 10) + piece(3, b"", PIECE + 10, piece_len=10))
write(T, "filled_discarded", filled_big + piece(5, b"", 600000, meta0=1, piece_len=PIECE)
      + piece(6, b"", 3 << 20, piece_len=PIECE) + piece(5, b"", 600000, piece_len=PIECE)
      + piece(6, b"", 3 << 20, piece_len=PIECE) + piece(5, b"", 600000, piece_len=600000 - 2 * PIECE)
      + piece(6, b"", 3 << 20, piece_len=PIECE))
write(T, "filled_past_end", filled_big + piece(7, b"", PIECE + 5, piece_len=PIECE)
      + piece(7, b"", PIECE + 5, piece_len=6) + wire(b"never"))

# ---- handshake: mode byte + bytes ----

H = "handshake"
proof = field_bytes(1, b"c" * 32) + field_bytes(2, b"m" * 32)
write(H, "server_forged_proof", b"\x00" + frame(proof))
write(H, "server_oversize", b"\x00" + struct.pack("<I", 2000) + b"x" * 16)
write(H, "server_junk", b"\x00" + frame(b"\x0a\xff\xff\xff\xff\x0f"))
write(H, "server_short_nonce", b"\x00" + frame(field_bytes(1, b"c" * 8) + field_bytes(2, b"m" * 32)))
write(H, "honest_open", b"\x01\x00")
write(H, "honest_token", b"\x01\x06secret")
write(H, "honest_mutated", b"\x01\x06secret" + bytes([0, 10, 0x41]))
write(H, "honest_truncated", b"\x01\x00" + bytes([3, 40, 0]))
write(H, "honest_extra_field", b"\x01\x00" + bytes([1, 255, 0x18, 1, 255, 0x01]))
hello = field_bytes(1, b"HCOMM") + field_varint(2, 1) + field_bytes(3, b"n" * 32)
verdict_yes = field_varint(1, 1) + field_bytes(2, b"v" * 32)
write(H, "client_hello_verdict", b"\x02" + frame(hello) + frame(verdict_yes))
write(H, "client_refused", b"\x02" + frame(hello) + frame(field_varint(1, 0)))
write(H, "client_bad_version", b"\x02" + frame(field_bytes(1, b"HCOMM") + field_varint(2, 2) + field_bytes(3, b"n" * 32)))
write(H, "client_short_nonce", b"\x02" + frame(field_bytes(1, b"HCOMM") + field_varint(2, 1) + field_bytes(3, b"n")))
write(H, "client_not_hcomm", b"\x02" + b"HTTP/1.1 200 OK\r\n\r\n")

# ---- config: text commands ----

C = "config"
write(C, "valid_set", b"set rank=0\nset world_size=4\nset store_addr=127.0.0.1:29500\n"
                      b"set timeout_ms=60000\nset transports=shm, tcp\nset algo=ring\n"
                      b"set host_id=node1\nset job_token=s3cret\nresolve\n")
write(C, "torchrun_env", b"env RANK=1\nenv WORLD_SIZE=2\nenv MASTER_ADDR=10.0.0.1\n"
                         b"env MASTER_PORT=29500\nresolve\n")
write(C, "half_master", b"env HCOMM_RANK=0\nenv HCOMM_WORLD_SIZE=2\nenv MASTER_PORT=29500\nresolve\n")
write(C, "bad_values", b"set timeout_ms=abc\nset timeout_ms=-5\nset world_size=0\nset rank=-1\n"
                       b"set store_addr=nohost\nset transports=foo\nset transports=tcp,tcp\n"
                       b"set algo=fast\nset host_id=\nset colour=red\nresolve\n")
write(C, "rank_too_big", b"set rank=5\nset world_size=2\nset store_addr=[::1]:1\nresolve\n")
write(C, "env_bad", b"env HCOMM_TIMEOUT_MS=99999999999999999999\nenv HCOMM_RANK=0\n"
                    b"env HCOMM_WORLD_SIZE=1\nresolve\n")
write(C, "parse", b"parse rank=1048575\nparse world_size=1048577\nparse store_addr=[fe80::1]:65536\n"
                  b"parse transports= , \nparse algo=auto\n")
write(C, "hostport", b"hostport [::1]:80\nhostport :80\nhostport host:\nhostport [::1\nhostport a:b:c:1\n")

# ---- fabric_frames: commands (see fuzz/fabric_frames_fuzzer.cc) ----

F = "fabric_frames"


def post_recv(cap, tag, any_source=False):
    return bytes([0]) + struct.pack("<I", cap) + bytes([tag, 1 if any_source else 0])


def send0(n, tag):
    return bytes([1]) + struct.pack("<I", n) + bytes([tag])


def peer_frame(kind, tag, size, payload=b"", ident=0, ident2=0, comm=0, declared=None,
               eager_full=False):
    out = bytes([2, 0 if declared is None else 200, kind, 0, comm, tag & 0xFF, 0])
    out += struct.pack("<I", size) + bytes([ident, ident2])
    out += struct.pack("<H", len(payload)) + payload
    if declared is not None:
        out += bytes([200]) + struct.pack("<Q", declared)
    elif kind == 1:
        out += bytes([1 if eager_full else 0])
    return out


PROGRESS = bytes([5])
write(F, "unexpected_eager", peer_frame(1, 1, 5, b"hello") + post_recv(100, 1) + PROGRESS)
write(F, "posted_eager", post_recv(100, 2, True) + peer_frame(1, 2, 5, b"world") + PROGRESS)
write(F, "eager_truncated", post_recv(2, 3) + peer_frame(1, 3, 5, b"12345") + PROGRESS)
write(F, "eager_full_size", peer_frame(1, 0, 60000, b"", eager_full=True) + post_recv(65536, 0))
write(F, "rts_then_data", post_recv(100000, 1) + peer_frame(2, 1, 100000, ident=3) + PROGRESS
      + peer_frame(5, 1, 100000, b"d" * 4000, ident=1))
write(F, "send_rts_cts", send0(100000, 2) + PROGRESS + peer_frame(3, 2, 0, ident=1, ident2=9)
      + PROGRESS)
write(F, "send_eager", send0(10, 1) + send0(0, 1) + PROGRESS)
write(F, "reject_and_cancel", send0(90000, 1) + peer_frame(4, 1, 0, ident=1)
      + peer_frame(6, 1, 0, ident=4) + peer_frame(7, 1, 0, ident=2))
write(F, "goodbye", post_recv(10, 1) + peer_frame(8, 0, 0) + PROGRESS)
write(F, "abandon", post_recv(10, 1) + send0(100000, 2) + peer_frame(11, 0, 0, ident=1)
      + PROGRESS)
write(F, "eager_huge_length", peer_frame(1, 1, 5, b"hello", declared=1 << 40) + PROGRESS)
write(F, "raw_junk", post_recv(10, 0) + bytes([4, 20]) + b"not an hcomm frame!!")
