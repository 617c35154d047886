#!/usr/bin/env python3
"""Independent decoder of a captured ramferry session (protocol version 3).

Written from docs/protocol.md alone (no project code was read). Section
numbers in the comments and messages refer to that document.

Usage: decode_capture.py CAPTURE_DIR [--key-file FILE] [--all-counters]

CAPTURE_DIR holds connections.json (a list, in accept order, of
{"id", "to_dest", "to_source"}) and the raw byte files of every TCP
connection the source made. Prints one JSON object (see the bottom of this
file) and exits 0 only when every byte of every connection was parsed, every
tag verified, and nothing unknown was met. Otherwise the problems go to
stderr and the exit status is 1.

Only the Python standard library is used, plus `cryptography` (imported
lazily, only when a sealed capture is decoded with a key).
"""

import argparse
import hashlib
import hmac
import json
import os
import struct
import sys

PROTO_VERSION = 3

MAGIC_HELLO = 0x52464853  # RFHS
MAGIC_REPLY = 0x52464852  # RFHR
MAGIC_CHALLENGE = 0x52464143  # RFAC
MAGIC_PROOF = 0x52464150  # RFAP
MAGIC_PACKET = 0x5246504B  # RFPK

ROLE_CONTROL, ROLE_DATA, ROLE_URGENT = 1, 2, 3

# Section 3.1 feature bits.
F_VERIFY = 0x0001
F_RDMA_PIN_ALL = 0x0002
F_RDMA_REG_BATCH = 0x0004
F_SURVIVE = 0x0008
F_NEXT_HEADER = 0x0010
F_ARRIVAL_DIGESTS = 0x0020
F_ZERO_PAGES = 0x0040
F_COMPRESSED = 0x0080
F_RDMA_CREDITS = 0x0100
F_SEAL_MAC = 0x0200
F_SEAL_ENCRYPT = 0x0400
F_POSTCOPY = 0x0800
F_POSTCOPY_URGENT = 0x1000
F_POSTCOPY_RESUME = 0x2000
KNOWN_FEATURES = 0x3FFF

# Section 4.2 packet flags.
PK_DATA, PK_SYNC, PK_FINISH, PK_ZERO_RANGES = 0, 1, 2, 4

MAX_COMPRESSED = 4 * 1024 * 1024  # 4.2 / 4.4

# Section 5.2 control types: value -> (name, max payload, direction).
# direction: "s2d", "d2s" or "both".
CT = {
    1: ("REGION_TABLE", 4 + 1024 * 273, "s2d"),
    2: ("REGION_REPLY", 1 + 2 + 2048, "d2s"),
    3: ("ROUND_DONE", 16, "d2s"),
    4: ("ERROR", 4 + 2 + 2 + 2048, "both"),
    5: ("FINISH", 0, "s2d"),
    6: ("FINISH_ACK", 0, "d2s"),
    7: ("VERIFY_REQUEST", 16, "s2d"),
    8: ("VERIFY_RESULT", 16 + 8 * 65536, "d2s"),
    9: ("HEARTBEAT", 0, "both"),
    10: ("CHANNEL_LOST", 4 + 8 + 2 + 2 + 2048, "d2s"),
    11: ("CHANNEL_GONE", 4 + 8 + 2 + 2 + 2048, "s2d"),
    12: ("CHANNEL_GONE_ACK", 12, "d2s"),
    13: ("MISSING_PAGES", 12 + 16 * 32768, "both"),
    14: ("POSTCOPY_ARMED", 0, "d2s"),
    15: ("PAGE_REQUEST", 8 + 8 * 4096, "d2s"),
    16: ("PAGE_DATA", 24 + 64 * 4096, "s2d"),
    17: ("POSTCOPY_COMPLETE", 0, "d2s"),
}

LABEL_SOURCE = b"ramferry auth v1 source"
LABEL_DEST = b"ramferry auth v1 destination"
SEAL_INFO = b"ramferry seal v1"


class DecodeError(Exception):
    """A fatal problem in one stream: wrong bytes, truncation, bad tag."""


class SpecGap(DecodeError):
    """The specification does not say how to go on at this point."""


class LostTail(Exception):
    """A data channel declared gone (CHANNEL_GONE) ends in a partial packet."""


def _printable(b, allow_empty=True):
    if not allow_empty and not b:
        return False
    return all(0x20 <= c < 0x7F for c in b)


def _pow2(v):
    return v > 0 and (v & (v - 1)) == 0


# ---------------------------------------------------------------------------
# Crypto helpers (HKDF and HMAC from the standard library; AES-GCM lazily
# from `cryptography`).


def hkdf_sha256(ikm, salt, info, length):
    prk = hmac.new(salt, ikm, hashlib.sha256).digest()
    out, t, i = b"", b"", 1
    while len(out) < length:
        t = hmac.new(prk, t + info + bytes([i]), hashlib.sha256).digest()
        out += t
        i += 1
    return out[:length]


class Sealer:
    """One direction's AES-256-GCM key and nonce salt (section 6.1, 6.3)."""

    def __init__(self, key, salt):
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
        from cryptography.exceptions import InvalidTag
        self._cipher_cls = Cipher
        self._modes = modes
        self._alg = algorithms.AES(bytes(key))
        self._invalid = InvalidTag
        self.salt = bytes(salt)

    def iv(self, seq):
        return self.salt + struct.pack(">Q", seq)

    def open(self, seq, aad_parts, ciphertext, tag):
        """GCM-decrypt `ciphertext` (possibly empty) with the concatenation
        of aad_parts as one AAD string. Returns the plaintext, or raises
        DecodeError on a bad tag."""
        dec = self._cipher_cls(self._alg, self._modes.GCM(self.iv(seq), bytes(tag))).decryptor()
        for part in aad_parts:
            if len(part):
                dec.authenticate_additional_data(part)
        pt = dec.update(ciphertext) if len(ciphertext) else b""
        try:
            pt += dec.finalize()
        except self._invalid:
            raise DecodeError("authentication tag does not verify (seq %d)" % seq)
        return pt


# ---------------------------------------------------------------------------
# zstd frame walker (section 4.4: the payload is exactly one zstd frame).
# There is no zstd in the standard library, so the frame's structure is
# checked (magic, header, block chain, checksum, exact length, content size
# when present) but the blocks are not decompressed.


def check_zstd_frame(b, expect_len):
    n = len(b)
    if n < 6 or bytes(b[0:4]) != b"\x28\xb5\x2f\xfd":
        raise DecodeError("compressed payload does not start with the zstd magic 28 B5 2F FD")
    fhd = b[4]
    fcs_flag = fhd >> 6
    single = (fhd >> 5) & 1
    if fhd & 0x08:
        raise DecodeError("zstd frame header reserved bit set")
    checksum = (fhd >> 2) & 1
    did_size = (0, 1, 2, 4)[fhd & 3]
    pos = 5
    if not single:
        pos += 1  # window descriptor
    pos += did_size
    fcs_size = (1 if single else 0, 2, 4, 8)[fcs_flag]
    if pos + fcs_size > n:
        raise DecodeError("zstd frame header truncated")
    if fcs_size:
        fcs = int.from_bytes(bytes(b[pos:pos + fcs_size]), "little")
        if fcs_size == 2:
            fcs += 256
        if fcs != expect_len:
            raise DecodeError("zstd frame content size %d, expected %d (uncompressed payload length)" % (fcs, expect_len))
    pos += fcs_size
    raw_total = 0
    while True:
        if pos + 3 > n:
            raise DecodeError("zstd block header truncated at frame offset %d" % pos)
        bh = b[pos] | (b[pos + 1] << 8) | (b[pos + 2] << 16)
        pos += 3
        last = bh & 1
        btype = (bh >> 1) & 3
        bsize = bh >> 3
        if btype == 3:
            raise DecodeError("zstd reserved block type")
        if bsize > 128 * 1024:
            raise DecodeError("zstd block larger than 128 KiB")
        if btype == 1:  # RLE
            pos += 1
            raw_total += bsize
        else:
            pos += bsize
            if btype == 0:
                raw_total += bsize
        if pos > n:
            raise DecodeError("zstd block runs past the compressed payload")
        if last:
            break
    if checksum:
        pos += 4
    if pos != n:
        raise DecodeError("zstd frame is %d bytes but compressed_bytes says %d" % (pos, n))
    if raw_total > expect_len:
        raise DecodeError("zstd raw/RLE blocks alone expand past the expected length")


# ---------------------------------------------------------------------------
# Handshake (section 2).


class Hello:
    pass


def parse_hello(b):
    (magic, ver, role) = struct.unpack_from(">IHH", b, 0)
    if magic != MAGIC_HELLO:
        raise DecodeError("expected Hello magic RFHS (0x52464853), got 0x%08x" % magic)
    if ver != PROTO_VERSION:
        raise DecodeError("Hello version %d, expected 3" % ver)
    h = Hello()
    h.raw = bytes(b[0:56])
    h.role = role
    h.session_id = bytes(b[8:24])
    (h.channel_index, h.channel_count, h.caps, h.max_packet_pages, h.transport,
     h.auth, h.rdma_chunk) = struct.unpack_from(">IIQIHHQ", b, 24)
    if role not in (1, 2, 3):
        raise DecodeError("Hello role %d is not 1, 2 or 3" % role)
    if h.session_id == b"\0" * 16:
        raise DecodeError("Hello session_id is all zero")
    if not 1 <= h.channel_count <= 256:
        raise DecodeError("Hello channel_count %d not in 1..256" % h.channel_count)
    if role == ROLE_DATA and h.channel_index >= h.channel_count:
        raise DecodeError("Hello channel_index %d >= channel_count %d" % (h.channel_index, h.channel_count))
    if role != ROLE_DATA and h.channel_index != 0:
        raise DecodeError("control/urgent Hello with channel_index %d (must be 0)" % h.channel_index)
    if not 1 <= h.max_packet_pages <= 4096:
        raise DecodeError("Hello max_packet_pages %d not in 1..4096" % h.max_packet_pages)
    if h.transport not in (1, 2, 3, 4):
        raise DecodeError("Hello transport %d not in 1..4" % h.transport)
    if h.auth not in (0, 1):
        raise DecodeError("Hello auth %d not 0 or 1" % h.auth)
    if h.transport == 4:
        if not (_pow2(h.rdma_chunk) and 4096 <= h.rdma_chunk <= (1 << 30)):
            raise DecodeError("rdma Hello rdma_chunk_bytes %d not a power of two in [4096, 2^30]" % h.rdma_chunk)
    elif h.rdma_chunk != 0:
        raise DecodeError("non-rdma Hello with rdma_chunk_bytes %d (must be 0)" % h.rdma_chunk)
    if role == ROLE_CONTROL and (h.caps & F_SEAL_MAC) and (h.caps & F_SEAL_ENCRYPT):
        pass  # legal to ask; the destination refuses (3.2). Checked on the reply.
    return h


def parse_reply(b):
    magic, ver, status, caps = struct.unpack_from(">IHHQ", b, 0)
    if magic != MAGIC_REPLY:
        raise DecodeError("expected HelloReply magic RFHR (0x52464852), got 0x%08x" % magic)
    if ver != PROTO_VERSION:
        raise DecodeError("HelloReply version %d, expected 3" % ver)
    if status > 16:
        raise DecodeError("HelloReply status %d not an absl status code 0..16" % status)
    reason = bytes(b[16:128])
    if status == 0:
        if reason != b"\0" * 112:
            raise DecodeError("accepted HelloReply with non-zero reason bytes")
        text = ""
    else:
        if caps != 0:
            raise DecodeError("refused HelloReply with capabilities 0x%x (must be 0)" % caps)
        nul = reason.find(b"\0")
        if nul < 0:
            raise DecodeError("refused HelloReply reason is not NUL-terminated (at most 111 bytes)")
        if not _printable(reason[:nul]):
            raise DecodeError("refused HelloReply reason is not ASCII text")
        text = reason[:nul].decode("ascii")
    return {"raw": bytes(b[0:128]), "status": status, "caps": caps, "reason": text}


def proof(psk, label, hello56, nonce16):
    return hmac.new(psk, label + b"\0" + hello56 + nonce16, hashlib.sha256).digest()


class Conn:
    """One relay connection and what its handshake said."""

    def __init__(self, cid, up, down):
        self.id = cid
        self.up = up  # to_dest, memoryview
        self.down = down  # to_source, memoryview
        self.kind = "other"
        self.channel = None
        self.hello = None
        self.reply = None
        self.nonce = None
        self.accepted = False
        self.up_off = 0  # where the traffic after the handshake starts
        self.down_off = 0
        self.session = None
        self.to_dest = None  # Sealer
        self.to_source = None  # Sealer


def do_handshake(c, psk, errors):
    """Parse Hello / [AuthChallenge / AuthProof] / HelloReply.
    Returns True when the connection was accepted and carries traffic."""
    up, down = c.up, c.down
    if len(up) == 0 and len(down) == 0:
        c.kind = "other"
        return False
    if len(up) < 56:
        raise DecodeError("to_dest offset 0: expected a 56-byte Hello, connection has only %d bytes" % len(up))
    if struct.unpack_from(">I", up, 0)[0] != MAGIC_HELLO:
        raise DecodeError("to_dest offset 0: expected Hello magic RFHS, got %r" % bytes(up[0:4]))
    h = parse_hello(up[0:56])
    c.hello = h
    c.kind = {1: "control", 2: "data", 3: "urgent"}[h.role]
    c.channel = h.channel_index if h.role == ROLE_DATA else None
    uoff, doff = 56, 0
    if len(down) < 64:
        raise DecodeError("to_source offset 0: expected an AuthChallenge (64) or HelloReply (128), got %d bytes" % len(down))
    dmagic = struct.unpack_from(">I", down, 0)[0]
    if dmagic == MAGIC_CHALLENGE:
        if h.auth != 1:
            raise DecodeError("to_source offset 0: AuthChallenge sent for a Hello with auth=0 (2.3: unkeyed handshake has none)")
        ver, method = struct.unpack_from(">HH", down, 4)
        if ver != PROTO_VERSION or method != 1:
            raise DecodeError("to_source offset 0: AuthChallenge version %d method %d (expected 3, 1)" % (ver, method))
        nonce = bytes(down[8:24])
        dest_proof = bytes(down[24:56])
        if struct.unpack_from(">Q", down, 56)[0] != 0:
            raise DecodeError("to_source offset 56: AuthChallenge reserved field not 0")
        c.nonce = nonce
        doff = 64
        if psk is not None:
            if not hmac.compare_digest(dest_proof, proof(psk, LABEL_DEST, h.raw, nonce)):
                raise DecodeError("to_source offset 24: the destination's proof does not verify with the given key")
        if len(up) == 56:
            # 2.4: a source that rejects dest_proof closes without an AuthProof,
            # and the destination drops the connection without a reply.
            if len(down) != 64:
                raise DecodeError("to_source offset 64: bytes after the challenge although the source sent no AuthProof")
            c.up_off, c.down_off = 56, 64
            errors.append("connection %d: source abandoned the keyed handshake (no AuthProof sent)" % c.id)
            return False
        if len(up) >= 64 and struct.unpack_from(">I", up, 56)[0] != MAGIC_PROOF \
                and struct.unpack_from(">I", up, 56)[0] in CT:
            ft, fl = struct.unpack_from(">II", up, 56)
            raise SpecGap("to_dest offset 56: expected an AuthProof (RFAP) or the end of the connection (2.4: a source "
                          "that rejects the challenge closes without sending anything), but found what looks like an "
                          "unsealed %s control frame (length %d) sent before the handshake finished; the specification "
                          "does not describe this" % (CT[ft][0], fl))
        if len(up) < 104:
            raise DecodeError("to_dest offset 56: truncated AuthProof (%d of 48 bytes)" % (len(up) - 56))
        pm, pver, pres = struct.unpack_from(">IHH", up, 56)
        if pm != MAGIC_PROOF:
            raise DecodeError("to_dest offset 56: expected AuthProof magic RFAP, got 0x%08x" % pm)
        if pver != PROTO_VERSION or pres != 0 or struct.unpack_from(">Q", up, 96)[0] != 0:
            # 2.4 "A malformed AuthProof: HelloReply refusal". Checked below.
            c.malformed_proof = True
        src_proof = bytes(up[64:96])
        if psk is not None and pver == PROTO_VERSION and pm == MAGIC_PROOF:
            good = hmac.compare_digest(src_proof, proof(psk, LABEL_SOURCE, h.raw, nonce))
            if not good:
                # Could be a source holding another key: then the reply must be a
                # refusal (16). We check below; a good reply with a bad proof
                # means our key is wrong.
                c.bad_source_proof = True
        uoff = 104
    elif dmagic == MAGIC_REPLY:
        pass
    else:
        raise DecodeError("to_source offset 0: expected AuthChallenge (RFAC) or HelloReply (RFHR), got 0x%08x" % dmagic)
    if len(down) < doff + 128:
        raise DecodeError("to_source offset %d: truncated HelloReply (%d of 128 bytes)" % (doff, len(down) - doff))
    rep = parse_reply(down[doff:doff + 128])
    c.reply = rep
    doff += 128
    c.up_off, c.down_off = uoff, doff
    if getattr(c, "bad_source_proof", False) and rep["status"] == 0:
        raise DecodeError("to_dest offset 64: the source's proof does not verify with the given key, yet the destination accepted it")
    if getattr(c, "malformed_proof", False) and rep["status"] == 0:
        raise DecodeError("to_dest offset 56: malformed AuthProof (version/reserved fields) yet the destination accepted it (2.4)")
    if rep["status"] != 0:
        errors.append("connection %d (%s): handshake refused, status %d %r" % (c.id, c.kind, rep["status"], rep["reason"]))
        if len(up) != uoff or len(down) != doff:
            what = ""
            if len(up) - uoff >= 8 and struct.unpack_from(">I", up, uoff)[0] in CT:
                ft, fl = struct.unpack_from(">II", up, uoff)
                what = "; the source's bytes look like an unsealed %s control frame (length %d)" % (CT[ft][0], fl)
            raise SpecGap("bytes follow a refused handshake (to_dest offset %d of %d, to_source offset %d of %d)%s; "
                          "2.2 says the destination closes a refused connection after the reply and does not "
                          "describe any further traffic" % (uoff, len(up), doff, len(down), what))
        return False
    if h.auth == 1 and c.nonce is None:
        # 2.4: a keyed source refuses to go on without a challenge.
        if len(up) != uoff or len(down) != doff:
            raise DecodeError("keyed source went on after a HelloReply without a challenge")
        errors.append("connection %d: keyed source got no challenge and stopped" % c.id)
        return False
    c.accepted = True
    return True


def derive_sealers(c, psk):
    okm = hkdf_sha256(psk, c.nonce, SEAL_INFO + c.hello.raw + c.reply["raw"], 72)
    c.to_dest = Sealer(okm[0:32], okm[32:36])
    c.to_source = Sealer(okm[36:68], okm[68:72])


# ---------------------------------------------------------------------------
# Session state shared by the connections of one session.


class Session:
    def __init__(self, ctrl):
        self.ctrl = ctrl
        self.hello = ctrl.hello
        self.caps = ctrl.reply["caps"]
        self.mode = "none"
        self.regions = None  # id -> (page_size, length)
        self.region_order = []
        self.round_done = []  # list of (round, pages)
        self.finish_ack = False
        self.finish_sent = False
        self.channels = {}  # index -> Conn
        self.urgent = None
        self.channel_gone = set()
        self.verify_requests = []
        self.encrypted_unread = False  # encrypt mode without a key


class ChanStats:
    FIELDS = ("packets", "pages", "zero_pages", "payload_bytes", "header_bytes",
              "zero_range_packets", "untouched_pages", "syncs", "finishes",
              "compressed_packets", "compressed_input_bytes",
              "compressed_output_bytes", "sealed_bytes")

    def __init__(self):
        for f in self.FIELDS:
            setattr(self, f, 0)


# ---------------------------------------------------------------------------
# Control / urgent frames (sections 5, 6, 7).


def _str16(p, off, maxn, what):
    if off + 2 > len(p):
        raise DecodeError("%s: str16 length runs past the payload" % what)
    n = struct.unpack_from(">H", p, off)[0]
    if n > maxn:
        raise DecodeError("%s: str16 of %d bytes (max %d)" % (what, n, maxn))
    if off + 2 + n > len(p):
        raise DecodeError("%s: str16 of %d bytes runs past the payload" % (what, n))
    return bytes(p[off + 2:off + 2 + n]), off + 2 + n


def _exact(p, n, name):
    if len(p) != n:
        raise DecodeError("%s payload is %d bytes, its layout is exactly %d" % (name, len(p), n))


class FrameState:
    """Per-direction state for frame parsing."""

    def __init__(self):
        self.missing = {}  # region -> (last end page, saw LAST)


def parse_frames(c, sess, direction, buf, off, sealer, mode, counts, have_key, tags):
    """Walk the frames of one direction of a control or urgent connection."""
    is_urgent = c.kind == "urgent"
    sealed = mode != "none"
    seq = 0
    st = FrameState()
    n = len(buf)
    caps = sess.caps
    while off < n:
        start = off
        if n - off < 8:
            raise DecodeError("%s offset %d: %d trailing bytes, a frame header is 8" % (direction, off, n - off))
        ftype, length = struct.unpack_from(">II", buf, off)
        if ftype not in CT:
            raise DecodeError("%s offset %d: unknown control type %d (5.2: 1..17)" % (direction, off, ftype))
        name, maxlen, fdir = CT[ftype]
        if length > maxlen:
            raise DecodeError("%s offset %d: %s length %d over its maximum %d" % (direction, off, name, length, maxlen))
        if fdir != "both" and fdir != direction:
            raise DecodeError("%s offset %d: %s travels %s only" % (direction, off, name, fdir))
        if is_urgent:
            ok = (ftype == 15 and direction == "d2s") or (ftype == 16 and direction == "s2d")
            if not ok:
                raise DecodeError("%s offset %d: %s on the urgent connection (7.4: only PAGE_REQUEST d2s, PAGE_DATA s2d)"
                                  % (direction, off, name))
        elif ftype == 16:
            raise DecodeError("%s offset %d: PAGE_DATA on the control connection (7.3: refused)" % (direction, off))
        if 10 <= ftype <= 12 and not caps & F_SURVIVE:
            raise DecodeError("%s offset %d: %s without SURVIVE_CHANNEL_LOSS granted" % (direction, off, name))
        if 13 <= ftype <= 17 and not caps & F_POSTCOPY:
            raise DecodeError("%s offset %d: %s without POSTCOPY granted" % (direction, off, name))
        if ftype == 13 and direction == "d2s" and not caps & F_POSTCOPY_RESUME:
            raise DecodeError("%s offset %d: MISSING_PAGES from the destination outside a resume (7.5)" % (direction, off))
        total = 8 + length + (16 if sealed else 0)
        if n - off < total:
            raise DecodeError("%s offset %d: %s frame of %d bytes (with header%s) truncated, only %d left"
                              % (direction, off, name, total, " and tag" if sealed else "", n - off))
        payload = buf[off + 8:off + 8 + length]
        if sealed:
            tag = buf[off + 8 + length:off + total]
            if have_key:
                hdr = buf[off:off + 8]
                try:
                    if mode == "mac":
                        sealer.open(seq, (hdr, payload), b"", tag)
                    else:
                        payload = memoryview(sealer.open(seq, (hdr,), payload, tag))
                except DecodeError as e:
                    raise DecodeError("%s offset %d: %s frame %d: %s" % (direction, off, name, seq, e))
                tags[0] += 1
        seq += 1
        counts[name] = counts.get(name, 0) + 1
        if sealed and mode == "encrypt" and not have_key:
            # Payload unreadable. Only the frame structure can be followed.
            if ftype == 3:
                sess.round_done.append((None, None))
            elif ftype == 6:
                sess.finish_ack = True
            elif ftype == 5:
                sess.finish_sent = True
            off += total
            continue
        try:
            parse_payload(ftype, name, payload, sess, st, direction, is_urgent)
        except DecodeError as e:
            raise DecodeError("%s offset %d: %s: %s" % (direction, start, name, e))
        off += total
    if st.missing:
        for rid, (_, last) in st.missing.items():
            if not last:
                raise DecodeError("%s: MISSING_PAGES for region %d never got its LAST message" % (direction, rid))
        if sess.regions is not None and set(st.missing) != set(sess.regions):
            raise DecodeError("%s: MISSING_PAGES did not cover every region of the table (7.1)" % direction)


def _region(sess, rid, need4k=False):
    if sess.regions is None:
        raise DecodeError("refers to region %d before any REGION_TABLE" % rid)
    if rid not in sess.regions:
        raise DecodeError("unknown region %d" % rid)
    ps, ln = sess.regions[rid]
    if need4k and ps != 4096:
        raise DecodeError("region %d has %d-byte pages; post-copy needs 4096 (7)" % (rid, ps))
    return ps, ln


def parse_payload(ftype, name, p, sess, st, direction, is_urgent):
    if ftype == 1:  # REGION_TABLE
        if sess.regions is not None:
            raise DecodeError("second REGION_TABLE")
        if len(p) < 4:
            raise DecodeError("shorter than its region_count")
        cnt = struct.unpack_from(">I", p, 0)[0]
        if not 1 <= cnt <= 1024:
            raise DecodeError("region_count %d not in 1..1024" % cnt)
        off = 4
        regions = {}
        order = []
        for i in range(cnt):
            if off + 18 > len(p):
                raise DecodeError("region entry %d runs past the payload" % i)
            rid, ps, ln = struct.unpack_from(">IIQ", p, off)
            nm, off = _str16(p, off + 16, 255, "region %d name" % i)
            if rid in regions:
                raise DecodeError("region id %d twice" % rid)
            if not (_pow2(ps) and 512 <= ps <= (1 << 30)):
                raise DecodeError("region %d page_size %d not a power of two in [512, 2^30]" % (rid, ps))
            if ln == 0 or ln % ps:
                raise DecodeError("region %d length %d not a positive multiple of %d" % (rid, ln, ps))
            if not _printable(nm):
                raise DecodeError("region %d name not printable ASCII" % rid)
            regions[rid] = (ps, ln)
            order.append(rid)
        if off != len(p):
            raise DecodeError("%d trailing bytes after the entries" % (len(p) - off))
        sess.regions = regions
        sess.region_order = order
    elif ftype == 2:  # REGION_REPLY
        if len(p) < 3:
            raise DecodeError("too short")
        acc = p[0]
        if acc not in (0, 1):
            raise DecodeError("accepted byte %d" % acc)
        txt, off = _str16(p, 1, 2048, "reason")
        if off != len(p):
            raise DecodeError("trailing bytes")
        if not _printable(txt):
            raise DecodeError("reason not printable")
        if acc == 1 and txt:
            raise DecodeError("accepted with a non-empty reason")
        sess.region_accepted = bool(acc)
    elif ftype == 3:  # ROUND_DONE
        _exact(p, 16, name)
        rnd, pages = struct.unpack_from(">QQ", p, 0)
        if rnd != len(sess.round_done):
            raise DecodeError("round %d, expected %d (sent in order 0, 1, 2, ...)" % (rnd, len(sess.round_done)))
        if getattr(sess, "error_seen_d2s", False):
            raise DecodeError("ROUND_DONE after an ERROR (5.6)")
        sess.round_done.append((rnd, pages))
    elif ftype == 4:  # ERROR
        if len(p) < 8:
            raise DecodeError("too short")
        ch, code = struct.unpack_from(">IH", p, 0)
        txt, off = _str16(p, 6, 2048, "text")
        if off != len(p):
            raise DecodeError("trailing bytes")
        if not 1 <= code <= 16:
            raise DecodeError("code %d not in 1..16" % code)
        if direction == "d2s":
            sess.error_seen_d2s = True
        sess.errors_seen = getattr(sess, "errors_seen", []) + [(direction, ch, code, txt.decode("latin-1"))]
    elif ftype in (5, 6, 9, 14, 17):
        _exact(p, 0, name)
        if ftype == 5:
            sess.finish_sent = True
        elif ftype == 6:
            sess.finish_ack = True
    elif ftype == 7:  # VERIFY_REQUEST
        _exact(p, 16, name)
        rid, first, cnt = struct.unpack_from(">IQI", p, 0)
        ps, ln = _region(sess, rid)
        if not 1 <= cnt <= 65536:
            raise DecodeError("page_count %d not in 1..65536" % cnt)
        if first + cnt > ln // ps:
            raise DecodeError("pages %d+%d outside region %d (%d pages)" % (first, cnt, rid, ln // ps))
        sess.verify_requests.append((rid, first, cnt))
    elif ftype == 8:  # VERIFY_RESULT
        if len(p) < 16:
            raise DecodeError("too short")
        rid, first, cnt = struct.unpack_from(">IQI", p, 0)
        _exact(p, 16 + 8 * cnt, name) if cnt <= 65536 else None
        if cnt > 65536:
            raise DecodeError("count %d over 65536" % cnt)
        idx = getattr(sess, "verify_answered", 0)
        if idx >= len(sess.verify_requests):
            raise DecodeError("VERIFY_RESULT without a pending VERIFY_REQUEST")
        if sess.verify_requests[idx] != (rid, first, cnt):
            raise DecodeError("answers (%d, %d, %d) but the next request in order is %r"
                              % (rid, first, cnt, sess.verify_requests[idx]))
        sess.verify_answered = idx + 1
    elif ftype in (10, 11):  # CHANNEL_LOST / CHANNEL_GONE
        if len(p) < 16:
            raise DecodeError("too short")
        ch, rnd, code = struct.unpack_from(">IQH", p, 0)
        txt, off = _str16(p, 14, 2048, "text")
        if off != len(p):
            raise DecodeError("trailing bytes")
        if ch == 0xFFFFFFFF or ch >= sess.hello.channel_count:
            raise DecodeError("channel %d invalid" % ch)
        if not 1 <= code <= 16:
            raise DecodeError("code %d not in 1..16" % code)
        if ftype == 11:
            sess.channel_gone.add(ch)
    elif ftype == 12:
        _exact(p, 12, name)
        ch = struct.unpack_from(">I", p, 0)[0]
        if ch == 0xFFFFFFFF or ch >= sess.hello.channel_count:
            raise DecodeError("channel %d invalid" % ch)
    elif ftype == 13:  # MISSING_PAGES
        if len(p) < 12:
            raise DecodeError("too short")
        rid, flags, rc = struct.unpack_from(">III", p, 0)
        ps, ln = _region(sess, rid)
        if flags & ~1:
            raise DecodeError("unknown flags 0x%x" % flags)
        if rc > 32768:
            raise DecodeError("range_count %d over 32768" % rc)
        _exact(p, 12 + 16 * rc, name)
        last = flags & 1
        if rc == 0 and not last:
            raise DecodeError("range_count 0 on a message without LAST")
        prev_end, seen_last = st.missing.get(rid, (None, False))
        if seen_last:
            raise DecodeError("region %d after its LAST message" % rid)
        npages = ln // ps
        if sess.regions is not None and st.missing:
            # region-table order (7.2): a region must not come back once left
            if rid not in st.missing and any(not v[1] for v in st.missing.values()):
                raise DecodeError("region %d starts before the previous region got its LAST" % rid)
        for i in range(rc):
            fp, pc = struct.unpack_from(">QQ", p, 12 + 16 * i)
            if pc < 1:
                raise DecodeError("range with page_count 0")
            if fp + pc > npages:
                raise DecodeError("range %d+%d outside region %d" % (fp, pc, rid))
            if prev_end is not None and fp <= prev_end:
                raise DecodeError("range at %d not above the previous end %d with a gap (7.1)" % (fp, prev_end))
            prev_end = fp + pc
        st.missing[rid] = (prev_end, bool(last))
    elif ftype == 15:  # PAGE_REQUEST
        if len(p) < 8:
            raise DecodeError("too short")
        rid, cnt = struct.unpack_from(">II", p, 0)
        ps, ln = _region(sess, rid, need4k=True)
        if not 1 <= cnt <= 4096:
            raise DecodeError("page_count %d not in 1..4096" % cnt)
        _exact(p, 8 + 8 * cnt, name)
        pages = struct.unpack_from(">%dQ" % cnt, p, 8)
        prev = -1
        for pg in pages:
            if pg <= prev or pg >= ln // ps:
                raise DecodeError("page %d not strictly ascending inside region %d" % (pg, rid))
            prev = pg
    elif ftype == 16:  # PAGE_DATA
        if len(p) < 24:
            raise DecodeError("too short")
        rid, flags, first, cnt, res = struct.unpack_from(">IIQII", p, 0)
        ps, ln = _region(sess, rid, need4k=True)
        if flags & ~1:
            raise DecodeError("unknown flags 0x%x" % flags)
        if not 1 <= cnt <= 64:
            raise DecodeError("page_count %d not in 1..64" % cnt)
        if res != 0:
            raise DecodeError("reserved field %d" % res)
        if first + cnt > ln // ps:
            raise DecodeError("run %d+%d outside region %d" % (first, cnt, rid))
        _exact(p, 24 + (0 if flags & 1 else 4096 * cnt), name)
        sess.urgent_pages = getattr(sess, "urgent_pages", 0) + cnt
    else:  # pragma: no cover
        raise DecodeError("unhandled type %d" % ftype)


# ---------------------------------------------------------------------------
# Data channels (section 4, counting section 9).


def parse_data_channel(c, sess, stats, round_pages, have_key, tags):
    buf = c.up
    n = len(buf)
    off = c.up_off
    ch = c.hello.channel_index
    caps = sess.caps
    mpp = sess.hello.max_packet_pages
    mode = sess.mode
    sealed = mode != "none"
    regions = sess.regions
    survive = bool(caps & F_SURVIVE)
    expect_num = 0
    cur_round = 0
    any_sync = False
    finished = False
    next_hdr = 0
    sealer = c.to_dest
    zero16 = bytes(16)
    unpack_hdr = struct.Struct(">IHHIIQQIIII").unpack_from
    while off < n:
        where = "to_dest offset %d (packet_num %d)" % (off, expect_num)
        if finished:
            raise DecodeError("%s: %d bytes after the FINISH packet (4.2: nothing follows)" % (where, n - off))
        if n - off < 64:
            if ch in sess.channel_gone:
                raise LostTail("%s: %d trailing bytes of a partial packet header" % (where, n - off))
            raise DecodeError("%s: %d trailing bytes, a packet header is at least 64" % (where, n - off))
        (magic, ver, flags, pch, pc, num, rnd, rid, ps, nhb, cb) = unpack_hdr(buf, off)
        if magic != MAGIC_PACKET:
            raise DecodeError("%s: packet magic 0x%08x, expected RFPK" % (where, magic))
        if ver != PROTO_VERSION:
            raise DecodeError("%s: packet version %d, expected 3" % (where, ver))
        if flags not in (PK_DATA, PK_SYNC, PK_FINISH, PK_ZERO_RANGES):
            raise DecodeError("%s: packet flags 0x%04x invalid" % (where, flags))
        if flags == PK_ZERO_RANGES and not caps & F_ZERO_PAGES:
            raise DecodeError("%s: ZERO_RANGES packet without ZERO_PAGES granted" % where)
        if pch != ch:
            raise DecodeError("%s: packet channel %d on channel %d's connection" % (where, pch, ch))
        if nhb and not caps & F_NEXT_HEADER:
            raise DecodeError("%s: next_header_bytes %d without NEXT_HEADER_SIZE" % (where, nhb))
        if cb and not caps & F_COMPRESSED:
            raise DecodeError("%s: compressed_bytes %d without COMPRESSED_PAGES" % (where, cb))
        tag = buf[off + 48:off + 64]
        if not sealed and bytes(tag) != zero16:
            raise DecodeError("%s: tag bytes 48..63 not zero on an unsealed stream" % where)
        # shape
        if flags == PK_DATA:
            if not 1 <= pc <= mpp:
                raise DecodeError("%s: DATA page_count %d not in 1..%d" % (where, pc, mpp))
        elif flags == PK_ZERO_RANGES:
            if pc % 2 or not 2 <= pc <= mpp:
                raise DecodeError("%s: ZERO_RANGES page_count %d not even in 2..%d" % (where, pc, mpp))
            if cb:
                raise DecodeError("%s: compressed_bytes on a ZERO_RANGES packet" % where)
        else:
            if pc or rid or ps:
                raise DecodeError("%s: SYNC/FINISH with page_count %d region %d page_size %d (all must be 0)"
                                  % (where, pc, rid, ps))
            if cb:
                raise DecodeError("%s: compressed_bytes on a SYNC/FINISH packet" % where)
        if cb > MAX_COMPRESSED:
            raise DecodeError("%s: compressed_bytes %d over 4 MiB" % (where, cb))
        if nhb:
            if flags == PK_FINISH:
                raise DecodeError("%s: next_header_bytes %d on FINISH (must be 0)" % (where, nhb))
            if nhb < 64 or (nhb - 64) % 8 or (nhb - 64) // 8 > mpp:
                raise DecodeError("%s: next_header_bytes %d not 64 + 8k with k <= %d" % (where, nhb, mpp))
        hlen = 64 + 8 * pc
        if next_hdr and hlen != next_hdr:
            raise DecodeError("%s: header is %d bytes but the previous packet announced %d" % (where, hlen, next_hdr))
        if num != expect_num:
            raise DecodeError("%s: packet_num %d, expected %d" % (where, num, expect_num))
        # rounds (4.6)
        if flags == PK_SYNC:
            if rnd == cur_round:
                cur_round += 1
                any_sync = True
            elif not (survive and any_sync and rnd == cur_round - 1):
                raise DecodeError("%s: SYNC for round %d, channel is in round %d" % (where, rnd, cur_round))
        elif flags == PK_FINISH:
            if rnd != cur_round:
                raise DecodeError("%s: FINISH round %d, expected %d (rounds sent)" % (where, rnd, cur_round))
        else:
            if rnd != cur_round and not (survive and any_sync and rnd == cur_round - 1):
                raise DecodeError("%s: packet of round %d, channel is in round %d" % (where, rnd, cur_round))
        if n - off < hlen:
            if ch in sess.channel_gone:
                raise LostTail("%s: packet header of %d bytes cut after %d" % (where, hlen, n - off))
            raise DecodeError("%s: packet header of %d bytes truncated (%d left)" % (where, hlen, n - off))
        # region
        if flags in (PK_DATA, PK_ZERO_RANGES):
            if regions is None:
                if not sess.encrypted_unread:
                    raise DecodeError("%s: data packet but no REGION_TABLE was seen on the control connection" % where)
                rps, rlen = ps, None
            else:
                if rid not in regions:
                    raise DecodeError("%s: unknown region %d" % (where, rid))
                rps, rlen = regions[rid]
                if ps != rps:
                    raise DecodeError("%s: page_size %d but region %d has %d" % (where, ps, rid, rps))
            if ps == 0:
                raise DecodeError("%s: page_size 0 on a data packet" % where)
        words = struct.unpack_from(">%dQ" % pc, buf, off + 64) if pc else ()
        plen = 0
        zeros = 0
        if flags == PK_DATA:
            zp = caps & F_ZERO_PAGES
            for w in words:
                if w & 1:
                    if not zp:
                        raise DecodeError("%s: zero-page flag without ZERO_PAGES granted" % where)
                    zeros += 1
                o = w & ~1
                if o % ps:
                    raise DecodeError("%s: offset 0x%x not aligned to %d" % (where, o, ps))
                if rlen is not None and o + ps > rlen:
                    raise DecodeError("%s: offset 0x%x outside region %d (%d bytes)" % (where, o, rid, rlen))
            plain = (pc - zeros) * ps
            if cb:
                if plain > MAX_COMPRESSED:
                    raise DecodeError("%s: compressed packet whose pages are %d bytes (over 4 MiB)" % (where, plain))
                if cb >= plain:
                    raise DecodeError("%s: compressed_bytes %d not smaller than the pages (%d)" % (where, cb, plain))
                plen = cb
            else:
                plen = plain
        elif flags == PK_ZERO_RANGES:
            prev_end = -1
            upages = 0
            for i in range(0, pc, 2):
                o, ln = words[i], words[i + 1]
                if ln == 0 or o % ps or ln % ps:
                    raise DecodeError("%s: zero range (0x%x, 0x%x) empty or not page-aligned" % (where, o, ln))
                if rlen is not None and o + ln > rlen:
                    raise DecodeError("%s: zero range (0x%x, 0x%x) outside region %d" % (where, o, ln, rid))
                if o < prev_end:
                    raise DecodeError("%s: zero ranges not ascending and disjoint" % where)
                prev_end = o + ln
                upages += ln // ps
        if n - off - hlen < plen:
            if ch in sess.channel_gone:
                raise LostTail("%s: payload of %d bytes cut after %d" % (where, plen, n - off - hlen))
            raise DecodeError("%s: payload of %d bytes truncated (%d left after the header)" % (where, plen, n - off - hlen))
        payload = buf[off + hlen:off + hlen + plen]
        if sealed and have_key:
            h = bytearray(buf[off:off + hlen])
            h[48:64] = zero16
            try:
                if mode == "mac" or plen == 0:
                    sealer.open(num, (h, payload), b"", tag)
                    clear = payload
                else:
                    clear = sealer.open(num, (h,), payload, tag)
            except DecodeError as e:
                raise DecodeError("%s: %s" % (where, e))
            tags[0] += 1
        else:
            clear = payload
        if cb and not (sealed and mode == "encrypt" and not have_key):
            try:
                check_zstd_frame(memoryview(clear), plain)
            except DecodeError as e:
                raise DecodeError("%s: %s" % (where, e))
        # counting (section 9)
        stats.header_bytes += hlen
        if sealed:
            stats.sealed_bytes += hlen + plen
        if flags == PK_DATA:
            stats.packets += 1
            stats.pages += pc
            stats.zero_pages += zeros
            stats.payload_bytes += plen
            if cb:
                stats.compressed_packets += 1
                stats.compressed_input_bytes += plain
                stats.compressed_output_bytes += cb
            round_pages[rnd] = round_pages.get(rnd, 0) + pc
        elif flags == PK_ZERO_RANGES:
            stats.zero_range_packets += 1
            stats.untouched_pages += upages
            round_pages[rnd] = round_pages.get(rnd, 0) + upages
        elif flags == PK_SYNC:
            stats.syncs += 1
        else:
            stats.finishes += 1
            finished = True
            c.finish_round = rnd
        next_hdr = nhb
        expect_num += 1
        off += hlen + plen
    if not finished:
        if sess.finish_sent and ch not in sess.channel_gone:
            raise DecodeError("to_dest offset %d: channel ended without a FINISH packet although the source sent FINISH"
                              % off)
        c.unfinished = True
    c.rounds_sent = cur_round


# ---------------------------------------------------------------------------


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("capture_dir")
    ap.add_argument("--key-file")
    ap.add_argument("--all-counters", action="store_true",
                    help="add every wire-derivable counter of section 9 to each channel row")
    args = ap.parse_args(argv)

    errors = []  # fatal problems: exit 1
    notes = []  # informational, to stderr

    psk = None
    if args.key_file:
        with open(args.key_file, "rb") as f:
            psk = f.read(2048)
        if psk.endswith(b"\n"):
            psk = psk[:-1]
        if not 16 <= len(psk) <= 1024:
            print("key file: the key is %d bytes; 2.4 says 16 to 1024" % len(psk), file=sys.stderr)
            return 1

    cdir = args.capture_dir
    try:
        with open(os.path.join(cdir, "connections.json")) as f:
            listing = json.load(f)
    except (OSError, ValueError) as e:
        print("cannot read connections.json: %s" % e, file=sys.stderr)
        return 1
    if not isinstance(listing, list):
        print("connections.json is not a list", file=sys.stderr)
        return 1

    conns = []
    for ent in listing:
        try:
            cid = int(ent["id"])
            files = []
            for k in ("to_dest", "to_source"):
                p = os.path.normpath(os.path.join(cdir, ent[k]))
                with open(p, "rb") as f:
                    files.append(memoryview(f.read()))
        except (KeyError, TypeError, ValueError, OSError) as e:
            print("connections.json entry %r: %s" % (ent, e), file=sys.stderr)
            return 1
        conns.append(Conn(cid, files[0], files[1]))

    # 1. Handshakes.
    for c in conns:
        try:
            do_handshake(c, psk, notes)
        except DecodeError as e:
            errors.append("connection %d (%s): handshake: %s" % (c.id, c.kind, e))
            c.failed = True

    # 2. Attach connections to sessions, in accept order.
    sessions = []
    by_sid = {}
    for c in conns:
        if not c.accepted:
            continue
        h = c.hello
        if h.role == ROLE_CONTROL:
            s = Session(c)
            caps = s.caps
            if caps & ~h.caps & ~(F_SEAL_MAC | F_SEAL_ENCRYPT) or caps & ~KNOWN_FEATURES:
                errors.append("connection %d: granted capabilities 0x%x not a subset of the asked 0x%x"
                              % (c.id, caps, h.caps))
            seal = caps & (F_SEAL_MAC | F_SEAL_ENCRYPT)
            if seal == F_SEAL_MAC | F_SEAL_ENCRYPT:
                errors.append("connection %d: both seal bits granted" % c.id)
            elif seal and seal != h.caps & (F_SEAL_MAC | F_SEAL_ENCRYPT):
                errors.append("connection %d: granted seal bit differs from the asked one" % c.id)
            s.mode = "mac" if seal == F_SEAL_MAC else "encrypt" if seal == F_SEAL_ENCRYPT else "none"
            if s.mode != "none" and (h.auth != 1 or h.transport == 4):
                errors.append("connection %d: sealed session without auth=1 or on rdma (3.2)" % c.id)
            c.session = s
            sessions.append(s)
            by_sid[h.session_id] = s  # a resume reuses the id: latest wins
        else:
            s = by_sid.get(h.session_id)
            if s is None:
                errors.append("connection %d (%s): accepted but no earlier control connection opened session %s"
                              % (c.id, c.kind, h.session_id.hex()))
                c.failed = True
                continue
            ch_ = s.hello
            if (h.channel_count, h.max_packet_pages, h.transport, h.rdma_chunk) != \
                    (ch_.channel_count, ch_.max_packet_pages, ch_.transport, ch_.rdma_chunk):
                errors.append("connection %d: Hello channel_count/max_packet_pages/transport/rdma_chunk_bytes "
                              "differ from the control Hello, yet it was accepted" % c.id)
            if c.reply["caps"] != s.caps:
                errors.append("connection %d: HelloReply capabilities 0x%x differ from the session's granted set 0x%x (2.2)"
                              % (c.id, c.reply["caps"], s.caps))
            if h.caps != s.caps:
                notes.append("connection %d: Hello capabilities 0x%x differ from the granted 0x%x (not checked, "
                             "Discrepancy 1)" % (c.id, h.caps, s.caps))
            c.session = s
            if h.role == ROLE_DATA:
                if h.channel_index in s.channels:
                    errors.append("connection %d: second accepted connection for channel %d" % (c.id, h.channel_index))
                    c.failed = True
                    continue
                s.channels[h.channel_index] = c
            else:
                if not s.caps & F_POSTCOPY_URGENT:
                    errors.append("connection %d: urgent connection without POSTCOPY_URGENT granted" % c.id)
                if s.urgent is not None:
                    errors.append("connection %d: a second urgent connection in one session" % c.id)
                s.urgent = c

    have_key = psk is not None
    modes = {s.mode for s in sessions}
    protection = "none"
    if len(modes) > 1:
        errors.append("sessions in the capture use different protections: %s" % sorted(modes))
    if modes:
        protection = sorted(modes, key=["none", "mac", "encrypt"].index)[-1]
    if protection != "none" and not have_key:
        errors.append("the session is sealed (%s) but no --key-file was given: tags not verified" % protection)

    # 3. Sealers.
    for c in conns:
        if c.accepted and c.session is not None and c.session.mode != "none" and have_key:
            if c.nonce is None:
                errors.append("connection %d: sealed session but the connection had no challenge" % c.id)
                c.failed = True
                continue
            try:
                derive_sealers(c, psk)
            except ImportError as e:
                print("the `cryptography` package is needed for a sealed capture: %s" % e, file=sys.stderr)
                return 1
    for s in sessions:
        s.encrypted_unread = s.mode == "encrypt" and not have_key

    tags = [0]
    counts = {}

    # 4. Control connections, then urgent ones (source direction first: the
    #    REGION_TABLE and VERIFY_REQUESTs come from it).
    def run_frames(c):
        s = c.session
        for direction, buf, off, sealer in (("s2d", c.up, c.up_off, c.to_dest),
                                            ("d2s", c.down, c.down_off, c.to_source)):
            try:
                parse_frames(c, s, direction, buf, off, sealer, s.mode, counts, have_key, tags)
            except DecodeError as e:
                errors.append("connection %d (%s) %s: %s" % (c.id, c.kind, "to_dest" if direction == "s2d" else "to_source", e))
                c.failed = True
                return

    for s in sessions:
        if not getattr(s.ctrl, "failed", False):
            run_frames(s.ctrl)
        if s.urgent is not None and not getattr(s.urgent, "failed", False):
            run_frames(s.urgent)
        if s.verify_requests and getattr(s, "verify_answered", 0) != len(s.verify_requests) and s.finish_ack:
            errors.append("session %s: %d VERIFY_REQUESTs but %d VERIFY_RESULTs before FINISH_ACK"
                          % (s.hello.session_id.hex(), len(s.verify_requests), getattr(s, "verify_answered", 0)))
        if s.regions is None and not s.encrypted_unread and s.channels:
            errors.append("session %s: no REGION_TABLE on the control connection" % s.hello.session_id.hex())
        for d, ch, code, txt in getattr(s, "errors_seen", []):
            notes.append("ERROR frame (%s, channel %d, code %d): %s" % (d, ch, code, txt))

    # 5. Data channels.
    stats = {}
    for s in sessions:
        s.round_pages = {}
        for idx, c in sorted(s.channels.items()):
            st = stats.setdefault(idx, ChanStats())
            if getattr(c, "failed", False):
                continue
            try:
                parse_data_channel(c, s, st, s.round_pages, have_key, tags)
            except DecodeError as e:
                errors.append("connection %d (data channel %d): %s" % (c.id, idx, e))
                c.failed = True
            except LostTail as e:
                # 5.7: the connection of a channel declared gone failed; the
                # packet it was carrying is incomplete and is not counted
                # (9: the destination counts a packet only once its payload
                # arrived). The spec does not say this explicitly.
                notes.append("connection %d (data channel %d, declared gone): stream ends inside a packet, "
                             "not counted: %s" % (c.id, idx, e))
                c.lost_tail = True
            # 1.1: the destination sends nothing after its HelloReply.
            if len(c.down) != c.down_off:
                errors.append("connection %d (data channel %d) to_source offset %d: %d bytes after the HelloReply "
                              "(1.1: the destination sends nothing on a data channel)"
                              % (c.id, idx, c.down_off, len(c.down) - c.down_off))

    # 6. Cross-checks: rounds.
    rounds = 0
    for s in sessions:
        rounds += len(s.round_done)
        chans_ok = [c for c in s.channels.values() if not getattr(c, "failed", False)]
        if s.ctrl.failed if hasattr(s.ctrl, "failed") else False:
            continue
        if len(s.channels) and s.hello.channel_count != len(s.channels) and s.finish_ack:
            errors.append("session %s: %d data channels announced, %d connected, yet FINISH_ACK came"
                          % (s.hello.session_id.hex(), s.hello.channel_count, len(s.channels)))
        if not s.channel_gone and not s.encrypted_unread and len(chans_ok) == len(s.channels) \
                and len(s.channels) == s.hello.channel_count:
            for rnd, pages in s.round_done:
                got = s.round_pages.get(rnd, 0)
                if pages != got:
                    errors.append("session %s: ROUND_DONE(%d) says %d pages, the data channels carried %d"
                                  % (s.hello.session_id.hex(), rnd, pages, got))
        fin = {getattr(c, "finish_round", None) for c in chans_ok if hasattr(c, "finish_round")}
        if len(fin) > 1:
            errors.append("session %s: FINISH packets carry different rounds %s" % (s.hello.session_id.hex(), sorted(fin)))
        if s.finish_ack and fin and len(fin) == 1:
            r = fin.pop()
            if r != len(s.round_done):
                errors.append("session %s: FINISH packets say %d rounds, the destination confirmed %d before FINISH_ACK"
                              % (s.hello.session_id.hex(), r, len(s.round_done)))
    if len(sessions) > 1:
        notes.append("%d sessions (control connections) in the capture; rounds and channel counters are summed "
                     "over them (the specification does not say how a resumed session numbers its rounds)"
                     % len(sessions))

    # 7. Output.
    out_conns = []
    for c in conns:
        out_conns.append({"id": c.id, "kind": c.kind, "channel": c.channel,
                          "bytes_to_dest": len(c.up), "bytes_to_source": len(c.down)})
    chans = []
    tot = {"packets": 0, "pages": 0, "zero_pages": 0, "payload_bytes": 0}
    for idx in sorted(stats):
        st = stats[idx]
        row = {"channel": idx, "packets": st.packets, "pages": st.pages,
               "zero_pages": st.zero_pages, "payload_bytes": st.payload_bytes}
        if args.all_counters:
            for f in ChanStats.FIELDS:
                row[f] = getattr(st, f)
        chans.append(row)
        for k in tot:
            tot[k] += row[k]
    result = {
        "protection": protection,
        "connections": out_conns,
        "channels": chans,
        "total": tot,
        "rounds": rounds,
        "control_messages": dict(sorted(counts.items())),
        "tags_verified": tags[0],
    }
    print(json.dumps(result, indent=1))
    for n_ in notes:
        print("note: " + n_, file=sys.stderr)
    for e in errors:
        print("error: " + e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
