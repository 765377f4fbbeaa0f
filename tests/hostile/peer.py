#!/usr/bin/env python3
"""A hostile pgrac_ic peer, written from docs/protocol.md alone.

Library: CRC32C, the frame codec, handshake v2 as a dialer, frame protection
(crc / mac / secure with AES-256-GCM), MessageHeader, heartbeats.

CLI: python3 peer.py --host H --port P --key-file F --node-id N --cluster NAME
                     --system-id ID --case CASE [--target-id T] [...]
runs one attack case. Exit 0: the attack was performed (the assertions about
the instance are made by the TAP test, t/026_hostile_peer.pl, through SQL).
Lines "RESULT key=value" on stdout report what the peer observed (e.g. whether
the instance dropped the connection, what a Reject carried); the TAP test checks
some of them. Exit 2: the attack could not be performed (e.g. the handshake
failed), with the reason on stderr.
"""

import argparse
import hashlib
import hmac
import os
import random
import resource
import select
import socket
import struct
import sys
import time

try:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
except ImportError:  # pragma: no cover
    AESGCM = None

# --------------------------------------------------------------------------- CRC32C


def _crc32c_table():
    poly = 0x82F63B78  # 0x1EDC6F41 reflected
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _crc32c_table()


def crc32c(data, crc=0):
    """CRC32C; crc is a previous result to continue from (0 to start)."""
    c = crc ^ 0xFFFFFFFF
    t = _CRC_TABLE
    for b in data:
        c = t[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283

# --------------------------------------------------------------------------- frames

MAGIC = 0x4352
VERSION = 1
HEADER = 24

HELLO, HELLO_REPLY, AUTH, AUTH_OK, REJECT, HEARTBEAT, ACK, MESSAGE, BACKOFF = range(1, 10)
TYPE_NAMES = {1: "Hello", 2: "HelloReply", 3: "Auth", 4: "AuthOk", 5: "Reject",
              6: "Heartbeat", 7: "Ack", 8: "Message", 9: "Backoff"}
F_REQUEST, F_REPLY, F_CONTROL = 0x1, 0x2, 0x4

MAX_MESSAGE = 65536
PRE_AUTH_LIMIT = 512

PROT_CRC, PROT_MAC, PROT_SECURE = 0, 1, 2

REJECT_REASONS = {1: "malformed", 2: "version_mismatch", 3: "cluster_mismatch",
                  4: "system_mismatch", 5: "unknown_node", 6: "address_mismatch",
                  7: "wrong_key", 8: "self_connect", 9: "shutting_down", 10: "unknown_lane",
                  11: "limit_mismatch", 12: "duplicate_node", 13: "busy",
                  14: "wrong_direction", 15: "config_mismatch"}


# The settings every node must share (docs/protocol.md, "Auth and AuthOk"),
# and our timing for heartbeats; main() fills them in from the arguments.
SETTINGS = dict(lms_workers=2, tcp_paths=1, witnesses=0, nodes="", instance=1,
                peer_timeout=10000, heartbeat_interval=1000)


def nodes_digest(text):
    """SHA-256 of "id@host:port," per node by id (host lower-cased), first 8 bytes LE."""
    entries = []
    for e in filter(None, (x.strip() for x in text.split(","))):
        nid, rest = e.split("@", 1)
        host, port = rest.rsplit(":", 1)
        entries.append((int(nid), host.strip("[]").lower(), int(port)))
    canon = "".join("%d@%s:%d," % t for t in sorted(entries))
    return struct.unpack("<Q", hashlib.sha256(canon.encode()).digest()[:8])[0]


def settings_block():
    return struct.pack("<HBQQ", SETTINGS["lms_workers"], SETTINGS["tcp_paths"],
                       SETTINGS["witnesses"], nodes_digest(SETTINGS["nodes"]))


def pack_header(ftype, flags, src, payload_len, seq=0, ack=0, crc=0, magic=MAGIC,
                version=VERSION):
    return struct.pack("<HBBHHIIII", magic, version, ftype, flags, src, payload_len, seq, ack,
                       crc)


def unpack_header(h):
    magic, version, ftype, flags, src, plen, seq, ack, crc = struct.unpack("<HBBHHIIII", h)
    return dict(magic=magic, version=version, type=ftype, flags=flags, src=src, len=plen,
                seq=seq, ack=ack, crc=crc)


def with_crc(header_zero_crc, payload):
    """Header (crc field zero) + payload -> the wire bytes with the CRC filled in."""
    c = crc32c(payload, crc32c(header_zero_crc))
    return header_zero_crc[:20] + struct.pack("<I", c) + payload


def frame(ftype, payload, src, flags=0, seq=0, ack=0):
    """An unprotected frame (handshake frames, or protection 'crc')."""
    return with_crc(pack_header(ftype, flags, src, len(payload), seq, ack), payload)


def msg_header(msg_type, status=0, route_key=0, rpc_id=0, epoch=0, reserved=0):
    return struct.pack("<HHIQII", msg_type, status, route_key, rpc_id, epoch, reserved)


def unpack_msg_header(b):
    t, st, rk, rid, ep, res = struct.unpack("<HHIQII", b[:24])
    return dict(msg_type=t, status=st, route_key=rk, rpc_id=rid, epoch=ep, reserved=res)


def pstr(s):
    s = s.encode() if isinstance(s, str) else s
    return bytes([len(s)]) + s


# --------------------------------------------------------------------------- crypto


def hkdf_sha256(ikm, salt, info, length):
    prk = hmac.new(salt, ikm, hashlib.sha256).digest()
    out, t, i = b"", b"", 1
    while len(out) < length:
        t = hmac.new(prk, t + info + bytes([i]), hashlib.sha256).digest()
        out += t
        i += 1
    return out[:length]


def read_key(path):
    with open(path, "rb") as f:
        data = f.read()
    return data.rstrip(b" \t\r\n\x0b\x0c")


class Protector:
    """One direction's frame protection: counts frames from 0."""

    def __init__(self, mode, key):
        self.mode = mode
        self.key = key
        self.n = 0
        if mode != PROT_CRC and AESGCM is None:
            raise RuntimeError("AES-GCM needs python3-cryptography")

    def _aead(self):
        return AESGCM(self.key)

    def _nonce(self):
        return b"\0\0\0\0" + struct.pack("<Q", self.n)

    def _rekey_if_due(self):
        # After every 2^20 frames: key = HKDF(key, "pgrac-ic v2 rekey", u64le(n / 2^20)).
        if self.n and self.n % (1 << 20) == 0:
            self.key = hkdf_sha256(self.key, b"pgrac-ic v2 rekey",
                                   struct.pack("<Q", self.n >> 20), 32)

    def seal(self, ftype, flags, src, payload, seq=0, ack=0):
        """Whole wire frame, sealed, with CRC."""
        if self.mode == PROT_CRC:
            self.n += 1
            return frame(ftype, payload, src, flags, seq, ack)
        self._rekey_if_due()
        hdr = pack_header(ftype, flags, src, len(payload) + 16, seq, ack)
        if self.mode == PROT_MAC:
            tag = self._aead().encrypt(self._nonce(), b"", hdr + payload)
            body = payload + tag
        else:
            body = self._aead().encrypt(self._nonce(), payload, hdr)
        self.n += 1
        return with_crc(hdr, body)

    def open(self, hdr_bytes, body):
        """hdr_bytes: the 24 received header bytes; returns the plain payload."""
        if self.mode == PROT_CRC:
            self.n += 1
            return body
        self._rekey_if_due()
        hdr = hdr_bytes[:20] + b"\0\0\0\0"
        if len(body) < 16:
            raise ProtocolError("protected frame shorter than its tag")
        if self.mode == PROT_MAC:
            payload, tag = body[:-16], body[-16:]
            self._aead().decrypt(self._nonce(), tag, hdr + payload)
        else:
            payload = self._aead().decrypt(self._nonce(), body, hdr)
        self.n += 1
        return payload


# --------------------------------------------------------------------------- connection


class ProtocolError(Exception):
    pass


class Closed(Exception):
    pass


class Rejected(Exception):
    def __init__(self, reason, detail):
        super().__init__("Reject %s (%d) detail=%r" % (REJECT_REASONS.get(reason, "?"), reason,
                                                       detail))
        self.reason = reason
        self.detail = detail


class Peer:
    def __init__(self, host, port, key, node_id, cluster, system_id, timeout=5.0,
                 byte_writes=False, protection=PROT_SECURE, max_message=MAX_MESSAGE,
                 incarnation=None, lane=0):
        self.host, self.port = host, port
        self.key = key
        self.node_id = node_id
        self.cluster = cluster
        self.system_id = system_id
        self.timeout = timeout
        self.byte_writes = byte_writes
        self.protection = protection
        self.max_message = max_message
        self.incarnation = incarnation if incarnation is not None else random.getrandbits(63) | 1
        self.lane = lane
        self.sock = None
        self.buf = b""
        self.tx = self.rx = None  # Protectors after the handshake
        self.remote_id = None
        self.next_seq = 1
        self.last_recv_seq = 0
        self.peer_epoch = 0
        self.hello_reply_payload = None

    # -- socket
    def connect(self):
        self.sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return self

    def close(self):
        if self.sock:
            try:
                self.sock.close()
            except OSError:
                pass
            self.sock = None

    def send_raw(self, data):
        if self.byte_writes:
            for i in range(len(data)):
                self.sock.sendall(data[i:i + 1])
                time.sleep(0.0005)
        else:
            self.sock.sendall(data)

    def _recv_exact(self, n, deadline):
        while len(self.buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no frame within the timeout")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                raise Closed("connection reset")
            if not chunk:
                raise Closed("EOF")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv_frame(self, timeout=None):
        """-> (header dict, plain payload). Verifies CRC and protection."""
        deadline = time.monotonic() + (timeout if timeout is not None else self.timeout)
        hb = self._recv_exact(HEADER, deadline)
        h = unpack_header(hb)
        if h["magic"] != MAGIC or h["version"] != VERSION:
            raise ProtocolError("bad magic/version from the instance: %r" % h)
        body = self._recv_exact(h["len"], deadline)
        if crc32c(body, crc32c(hb[:20] + b"\0\0\0\0")) != h["crc"]:
            raise ProtocolError("bad CRC from the instance")
        payload = self.rx.open(hb, body) if self.rx else body
        return h, payload

    # -- handshake
    def hello_payload(self, min_v=3, max_v=3):
        self.nonce_d = os.urandom(32)
        return (bytes([min_v, max_v]) + pstr(self.cluster) + struct.pack("<Q", self.system_id)
                + struct.pack("<H", self.node_id) + bytes([self.lane]) + self.nonce_d)

    def expect_handshake(self, ftype):
        h, p = self.recv_frame()
        if h["type"] == REJECT:
            if len(p) < 3:
                raise ProtocolError("short Reject payload %r" % p)
            reason, dlen = struct.unpack("<HB", p[:3])
            raise Rejected(reason, p[3:3 + dlen])
        if h["type"] != ftype:
            raise ProtocolError("expected %s, got type %d" % (TYPE_NAMES[ftype], h["type"]))
        return h, p

    def handshake(self, key=None, hello=None):
        key = self.key if key is None else key
        hello = hello if hello is not None else self.hello_payload()
        self.send_raw(frame(HELLO, hello, self.node_id))
        h, reply = self.expect_handshake(HELLO_REPLY)
        self.hello_reply_payload = reply
        if len(reply) != 33:
            raise ProtocolError("HelloReply of %d bytes, expected 33" % len(reply))
        self.remote_id = h["src"]
        version, nonce_a = reply[0], reply[1:]
        if version != 3:
            raise ProtocolError("version %d" % version)
        # incarnation, instance, location (0: unknown), session, last seq,
        # largest message, protection; then the settings block.
        auth_np = struct.pack("<QQQQIIB", self.incarnation, SETTINGS["instance"], 0, 0, 0,
                              self.max_message, self.protection) + settings_block()
        proof_d = hmac.new(key, b"pgrac-ic v2 dialer" + hello + reply + auth_np,
                           hashlib.sha256).digest()
        auth = auth_np + proof_d
        self.send_raw(frame(AUTH, auth, self.node_id))
        h, ok = self.expect_handshake(AUTH_OK)
        if len(ok) != 2 + 8 * 4 + 4 + 4 + 1 + 19 + 32:
            raise ProtocolError("AuthOk of %d bytes" % len(ok))
        ok_np, proof_a = ok[:-32], ok[-32:]
        want = hmac.new(key, b"pgrac-ic v2 acceptor" + hello + reply + auth + ok_np,
                        hashlib.sha256).digest()
        if not hmac.compare_digest(want, proof_a):
            raise ProtocolError("acceptor proof does not verify")
        (a_node, a_inc, a_inst, a_loc, a_sess, a_last, a_max, a_prot) = struct.unpack(
            "<HQQQQIIB", ok_np[:43])
        self.remote_incarnation = a_inc
        if a_max != self.max_message:
            raise ProtocolError("limit mismatch %d" % a_max)
        self.mode = a_prot
        th = hashlib.sha256(hello + reply + auth + ok).digest()
        km = hkdf_sha256(key, self.nonce_d + nonce_a, b"pgrac-ic v2 session keys" + th, 72)
        self.k_tx, self.k_rx = km[:32], km[32:64]
        self.session_id = struct.unpack("<Q", km[64:72])[0] or 1
        self.tx = Protector(a_prot, self.k_tx)
        self.rx = Protector(a_prot, self.k_rx)
        return self

    # -- after the handshake
    def seal(self, ftype, payload, flags=0, seq=0, ack=None, src=None):
        return self.tx.seal(ftype, flags, self.node_id if src is None else src, payload, seq,
                            self.last_recv_seq if ack is None else ack)

    def send(self, ftype, payload, flags=0, seq=0, ack=None, src=None):
        data = self.seal(ftype, payload, flags, seq, ack, src)
        self.send_raw(data)
        return data

    def message(self, msg_type, body=b"", flags=F_REQUEST, rpc_id=None, seq=None,
                reserved=0, status=0, route_key=0, send=True):
        if rpc_id is None:
            rpc_id = random.getrandbits(62)
        if seq is None:
            seq = self.next_seq
            self.next_seq += 1
        payload = msg_header(msg_type, status, route_key, rpc_id, self.peer_epoch, reserved) + body
        data = self.seal(MESSAGE, payload, flags, seq)
        if send:
            self.send_raw(data)
        return data, rpc_id

    def handle_incoming(self, h, p):
        """Answers heartbeats (pong) and notes what arrived. Returns the frame if a Message."""
        if h["type"] == MESSAGE:
            if h["seq"] == self.last_recv_seq + 1:
                self.last_recv_seq = h["seq"]
            return h, p
        if h["type"] == HEARTBEAT and len(p) >= 16 + 72 and p[0] == 0:
            kind, epoch, ts = struct.unpack("<B3xIQ", p[:16])
            self.peer_epoch = epoch
            # No view of ours (three empty views, no flags), and our timing.
            gossip = bytes(64) + struct.pack("<II", SETTINGS["peer_timeout"],
                                             SETTINGS["heartbeat_interval"])
            pong = bytes([1, 0, 0, 0]) + struct.pack("<IQ", 0, ts) + gossip
            self.send(HEARTBEAT, pong)
        return None

    def wait_reply(self, rpc_id, timeout=5.0):
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no reply to rpc %x" % rpc_id)
            h, p = self.recv_frame(left)
            m = self.handle_incoming(h, p)
            if m and (h["flags"] & F_REPLY):
                mh = unpack_msg_header(p)
                if mh["rpc_id"] == rpc_id:
                    return mh, p[24:]

    def ping(self, body=b"", timeout=5.0):
        _, rid = self.message(1, body, flags=F_REQUEST | F_CONTROL)
        return self.wait_reply(rid, timeout)

    def wait_closed(self, timeout=3.0):
        """True if the instance closes the connection within timeout (answers heartbeats)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            try:
                h, p = self.recv_frame(left)
            except (Closed, ConnectionResetError, BrokenPipeError):
                return True
            except TimeoutError:
                return False
            except Exception:
                # e.g. a frame we cannot open any more: still count on EOF
                try:
                    self.sock.settimeout(max(0.01, deadline - time.monotonic()))
                    while self.sock.recv(65536):
                        pass
                    return True
                except socket.timeout:
                    return False
                except OSError:
                    return True
            try:
                self.handle_incoming(h, p)
            except OSError:
                return True


# --------------------------------------------------------------------------- cases


def result(**kw):
    for k, v in kw.items():
        print("RESULT %s=%s" % (k, v), flush=True)


def new_peer(a, **kw):
    return Peer(a.host, a.port, read_key(a.key_file), a.node_id, a.cluster, a.system_id, **kw)


def authed(a, **kw):
    p = new_peer(a, **kw).connect().handshake()
    result(handshake="ok", protection=p.mode)
    return p


def report_alive_after(p):
    """Whether the connection still answers a ping after an attack."""
    try:
        _, echo = p.ping(b"still")
        result(alive_after="yes" if echo == b"still" else "wrong")
    except Exception as e:  # noqa: BLE001 - any failure is the answer
        result(alive_after="no (%s)" % type(e).__name__)


def send_and_watch(p, data, timeout=3.0):
    try:
        p.send_raw(data)
    except (BrokenPipeError, ConnectionResetError):
        result(dropped="yes")
        return True
    d = p.wait_closed(timeout)
    result(dropped="yes" if d else "no")
    return d


def case_oversize(a, body_len):
    p = authed(a)
    data, _ = p.message(1, os.urandom(body_len), send=False)
    send_and_watch(p, data)


def case_max_body(a):
    p = authed(a)
    body = os.urandom(MAX_MESSAGE)
    mh, echo = p.ping(body)
    result(status=mh["status"], echo="ok" if echo == body else "wrong(%d bytes)" % len(echo))
    mh, echo = p.ping(b"after")
    result(after="ok" if echo == b"after" else "wrong")


def raw_len_frame(p, ftype, plen, send_len, authed_conn, flags=0, seq=0):
    """A frame announcing plen bytes, followed by send_len bytes; sealed if authed_conn."""
    if authed_conn and p.tx.mode != PROT_CRC:
        # A protected frame: announce plen (tag included); the content cannot be valid
        # anyway if plen is not what we send.
        hdr = pack_header(ftype, flags, p.node_id, plen, seq, p.last_recv_seq)
    else:
        hdr = pack_header(ftype, flags, p.node_id, plen, seq, 0)
    body = os.urandom(send_len)
    return with_crc(hdr, body)


def case_len(a, when, which):
    limit = PRE_AUTH_LIMIT if when == "pre" else HEADER + MAX_MESSAGE + 16
    plen = {"0": 0, "max": limit, "max1": limit + 1, "u32max": 0xFFFFFFFF}[which]
    send_len = min(plen, limit + 64)
    if when == "pre":
        p = new_peer(a).connect()
        data = raw_len_frame(p, HELLO, plen, send_len, False)
    else:
        p = authed(a)
        if which == "0":
            data = p.seal(MESSAGE, b"", flags=F_REQUEST, seq=p.next_seq)
        elif which == "max":
            data, _ = p.message(1, os.urandom(MAX_MESSAGE), flags=F_REQUEST | F_CONTROL,
                                send=False)
            assert len(data) == HEADER + limit
        else:
            data = raw_len_frame(p, MESSAGE, plen, send_len, True, F_REQUEST, p.next_seq)
    if when == "post" and which == "max":
        p.send_raw(data)
        # the message is a ping: wait for its echo
        got = False
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                h, pl = p.recv_frame(deadline - time.monotonic())
            except Exception as e:
                result(echo="error %s" % type(e).__name__)
                return
            if p.handle_incoming(h, pl) and (h["flags"] & F_REPLY):
                got = len(pl) - 24 == MAX_MESSAGE
                break
        result(echo="ok" if got else "missing")
        return
    send_and_watch(p, data)


def corrupt_crc(data):
    return data[:20] + struct.pack("<I", struct.unpack("<I", data[20:24])[0] ^ 0x1) + data[24:]


def case_bad(a, what):
    if what.startswith("pre_"):
        p = new_peer(a).connect()
        hello = p.hello_payload()
        f = frame(HELLO, hello, a.node_id)
        if what == "pre_bad_crc":
            f = corrupt_crc(f)
        elif what == "pre_bad_magic":
            f = with_crc(pack_header(HELLO, 0, a.node_id, len(hello), magic=0x5A5A), hello)
        elif what == "pre_truncated":
            p.send_raw(f[:40])
            time.sleep(0.2)
            p.sock.shutdown(socket.SHUT_WR)
            result(dropped="yes" if p.wait_closed(3) else "no")
            return
        elif what == "pre_message":
            f = frame(MESSAGE, msg_header(1), a.node_id, F_REQUEST, seq=1)
        send_and_watch(p, f)
        return
    p = authed(a)
    if what == "bad_crc":
        data, _ = p.message(1, b"x", send=False)
        data = corrupt_crc(data)
    elif what == "bad_magic":
        data, _ = p.message(1, b"x", send=False)
        data = b"\x00\x00" + data[2:20] + b"\0\0\0\0"
        data = with_crc(data[:24], data[24:])
    elif what == "bad_type":
        data = p.seal(42, b"")
    elif what == "bad_flags":
        data, _ = p.message(2, b"x", flags=0x80, send=False)
    elif what == "bad_msg_type":
        data, _ = p.message(1024, b"x", flags=0, send=False)
    elif what == "reserved":
        data, _ = p.message(2, b"x", flags=0, reserved=1, send=False)
    elif what == "heartbeat_size":
        data = p.seal(HEARTBEAT, bytes([0, 0, 0, 0]) + struct.pack("<IQ", 0, 1) + bytes(39))
    elif what == "backoff_size":
        data = p.seal(BACKOFF, b"\x0a\x00\x00")
    elif what == "handshake_type":
        data = p.seal(HELLO, p.hello_payload())
    elif what == "src_node":
        data = p.seal(MESSAGE, msg_header(2, 0, 0, 0, p.peer_epoch) + b"x", 0, p.next_seq,
                      src=(a.node_id % 3) + 2)
        p.next_seq += 1
    elif what == "void_rpc":
        data, _ = p.message(0, b"", flags=F_REQUEST, send=False)
    elif what == "truncated":
        data, _ = p.message(1, b"y" * 100, send=False)
        p.send_raw(data[:60])
        time.sleep(0.2)
        p.sock.shutdown(socket.SHUT_WR)
        d = p.wait_closed(3)
        result(dropped="yes" if d else "no")
        return
    else:
        raise SystemExit("unknown bad case %s" % what)
    send_and_watch(p, data)


def case_seq(a, what):
    p = authed(a)
    if what == "wrong_source":
        # A reply to an RPC we were never sent: must be dropped and counted.
        data, _ = p.message(1, b"unsolicited", flags=F_REPLY, rpc_id=(7 << 32) | 12345,
                            send=False)
        p.send_raw(data)
        time.sleep(0.3)
        report_alive_after(p)
        return
    if what == "duplicate":
        # note (type 2) seq 1, then seq 1 again, then a ping with seq 2.
        d1, _ = p.message(2, b"n1", flags=0, seq=1, send=False)
        p.send_raw(d1)
        d2 = p.seal(MESSAGE, msg_header(2, 0, 0, 0, p.peer_epoch) + b"n1", 0, 1)
        p.send_raw(d2)
        p.next_seq = 2
        report_alive_after(p)
        return
    if what == "gap":
        d1, _ = p.message(2, b"n1", flags=0, seq=1, send=False)
        p.send_raw(d1)
        d3, _ = p.message(2, b"n3", flags=0, seq=3, send=False)
        send_and_watch(p, d3)
        return
    if what == "ack_beyond":
        data = p.seal(ACK, b"", ack=1000)
        send_and_watch(p, data)
        return
    raise SystemExit("unknown seq case %s" % what)


def case_onebyte(a):
    p = new_peer(a, byte_writes=True).connect().handshake()
    result(handshake="ok")
    mh, echo = p.ping(b"one byte at a time")
    result(echo="ok" if echo == b"one byte at a time" else "wrong")


def case_unauth(a, what):
    p = new_peer(a).connect()
    try:
        if what == "wrong_key":
            p.handshake(key=b"not-the-key-" + os.urandom(16).hex().encode())
        elif what == "wrong_cluster":
            p.cluster = "not_" + a.cluster
            p.handshake()
        elif what == "wrong_system":
            p.system_id = (a.system_id + 1) & 0xFFFFFFFFFFFFFFFF
            p.handshake()
        elif what == "hello_reply":
            hello = p.hello_payload()
            p.send_raw(frame(HELLO, hello, a.node_id))
            h, reply = p.expect_handshake(HELLO_REPLY)
            result(hello_reply_len=len(reply), hello_reply_version=reply[0],
                   hello_reply_src=h["src"], hello_reply_flags=h["flags"],
                   hello_reply_seq=h["seq"], hello_reply_ack=h["ack"])
            return
        else:
            raise SystemExit("unknown unauth case %s" % what)
        result(rejected="no")
    except Rejected as r:
        result(rejected=REJECT_REASONS.get(r.reason, r.reason), detail_len=len(r.detail),
               detail=repr(r.detail))


def case_impersonate(a):
    p = new_peer(a).connect()
    try:
        p.handshake()
        result(rejected="no", handshake="ok")
        time.sleep(0.3)
    except Rejected as r:
        result(rejected=REJECT_REASONS.get(r.reason, r.reason), detail=repr(r.detail))
    except (Closed, ConnectionResetError) as e:
        result(rejected="closed (%s)" % e)
    p.close()


def case_replay(a, what):
    p = authed(a)
    data, rid = p.message(1, b"replay me", flags=F_REQUEST | F_CONTROL, send=False)
    if what == "replay":
        p.send_raw(data)
        mh, echo = p.wait_reply(rid)
        result(first_echo="ok" if echo == b"replay me" else "wrong")
        send_and_watch(p, data)
    elif what == "alter":
        b = bytearray(data)
        b[HEADER + 30] ^= 0x40  # inside the sealed payload
        b[20:24] = b"\0\0\0\0"
        data = with_crc(bytes(b[:24]), bytes(b[24:]))
        send_and_watch(p, data)
    elif what == "alter_header":
        b = bytearray(data)
        b[16] ^= 0x01  # ack field: covered by the tag as additional data
        b[20:24] = b"\0\0\0\0"
        data = with_crc(bytes(b[:24]), bytes(b[24:]))
        send_and_watch(p, data)


def case_flood(a):
    want = a.count
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = want + 64
    if soft < need:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (max(need, soft), max(need, hard)))
        except (ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    failed = 0

    def open_one():
        nonlocal failed
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect((a.host, a.port))
        except BlockingIOError:
            pass
        except OSError:
            failed += 1
            s.close()
            return None
        return s

    poller = select.poll()
    live = {}

    def add(s):
        poller.register(s, select.POLLIN)
        live[s.fileno()] = s

    for _ in range(want):
        s = open_one()
        if s:
            add(s)
    result(opened=len(live), connect_failed=failed)
    print("FLOOD_READY", flush=True)
    # Hold them idle for --hold seconds; with --reopen whatever the instance closes is
    # opened again, so that `want` connections stay open (or queued) the whole time.
    end = time.monotonic() + a.hold
    closed = reopened = 0
    while time.monotonic() < end:
        for fd, ev in poller.poll(200):
            s = live.get(fd)
            if s is None:
                continue
            try:
                data = s.recv(4096)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                poller.unregister(fd)
                del live[fd]
                s.close()
                closed += 1
                if not a.reopen:
                    continue
                n = open_one()
                if n:
                    add(n)
                    reopened += 1
    result(closed_by_instance=closed, reopened=reopened, still_open=len(live))
    for s in live.values():
        s.close()


def case_claim(a):
    """A second instance of --node-id that keeps claiming the id for --hold seconds.

    One instance (--instance) and one listener incarnation throughout, as a real
    instance started with a copy of a node's configuration would be: it dials,
    and when refused or dropped dials again 200 ms later; once admitted it stays
    connected and answers heartbeats (its pongs carry no view of its own). It
    never votes. Reports how often it was refused, by reason, and how long it
    was connected (t/031_one_configuration.pl)."""
    inc = random.getrandbits(63) | 1
    start = time.monotonic()
    end = start + a.hold
    attempts = admitted = errors = 0
    refused = {}
    connected_s = 0.0
    first_admitted = None
    while time.monotonic() < end:
        attempts += 1
        p = new_peer(a, incarnation=inc)
        try:
            p.connect().handshake()
        except Rejected as r:
            name = REJECT_REASONS.get(r.reason, str(r.reason))
            refused[name] = refused.get(name, 0) + 1
            p.close()
            time.sleep(0.2)
            continue
        except (ProtocolError, Closed, TimeoutError, OSError):
            errors += 1
            p.close()
            time.sleep(0.2)
            continue
        admitted += 1
        t0 = time.monotonic()
        if first_admitted is None:
            first_admitted = t0 - start
        print("CLAIM admitted %.3f s after the start (unix %.3f)" % (t0 - start, time.time()),
              flush=True)
        try:
            while time.monotonic() < end:
                try:
                    h, pl = p.recv_frame(min(0.5, max(0.01, end - time.monotonic())))
                except TimeoutError:
                    continue
                p.handle_incoming(h, pl)
        except (Closed, ProtocolError, OSError):
            pass
        connected_s += time.monotonic() - t0
        print("CLAIM dropped after %.3f s connected (unix %.3f)" % (time.monotonic() - t0,
                                                                  time.time()), flush=True)
        p.close()
        time.sleep(0.2)
    result(attempts=attempts, admitted=admitted, errors=errors,
           connected_ms=int(connected_s * 1000),
           first_admitted_ms=-1 if first_admitted is None else int(first_admitted * 1000),
           **{"refused_" + k: v for k, v in sorted(refused.items())})

CASES = {
    "oversize_200000": lambda a: case_oversize(a, 200000),
    "oversize_150000": lambda a: case_oversize(a, 150000),
    "oversize_65537": lambda a: case_oversize(a, 65537),
    "max_body": case_max_body,
    "onebyte": case_onebyte,
    "impersonate": case_impersonate,
    "flood": case_flood,
}
for _w in ("pre", "post"):
    for _x in ("0", "max", "max1", "u32max"):
        CASES["len_%s_%s" % (_w, _x)] = (lambda w, x: lambda a: case_len(a, w, x))(_w, _x)
for _x in ("pre_bad_crc", "pre_bad_magic", "pre_message", "pre_truncated", "bad_crc", "bad_magic", "bad_type",
           "bad_flags", "bad_msg_type", "reserved", "heartbeat_size", "backoff_size",
           "handshake_type", "src_node", "void_rpc", "truncated"):
    CASES[_x] = (lambda x: lambda a: case_bad(a, x))(_x)
for _x in ("wrong_source", "duplicate", "gap", "ack_beyond"):
    CASES[_x] = (lambda x: lambda a: case_seq(a, x))(_x)
for _x in ("wrong_key", "wrong_cluster", "wrong_system", "hello_reply"):
    CASES[_x] = (lambda x: lambda a: case_unauth(a, x))(_x)
for _x in ("replay", "alter", "alter_header"):
    CASES[_x] = (lambda x: lambda a: case_replay(a, x))(_x)
CASES["claim"] = case_claim  # keeps claiming --node-id for --hold seconds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--key-file", required=True)
    ap.add_argument("--node-id", type=int, required=True)
    ap.add_argument("--cluster", default="pgrac")
    ap.add_argument("--system-id", type=int, required=True)
    ap.add_argument("--case", required=True, choices=sorted(CASES) + ["list"])
    ap.add_argument("--nodes", default="", help="cluster.nodes of the instance attacked")
    ap.add_argument("--lms-workers", type=int, default=2)
    ap.add_argument("--tcp-paths", type=int, default=1)
    ap.add_argument("--witnesses", default="", help="cluster.witness_nodes")
    ap.add_argument("--instance", type=int, default=1,
                    help="the instance we claim to be (1: older than any real one)")
    ap.add_argument("--peer-timeout", type=int, default=10000, help="ms")
    ap.add_argument("--heartbeat-interval", type=int, default=1000, help="ms")
    ap.add_argument("--count", type=int, default=1100, help="flood: connections")
    ap.add_argument("--hold", type=float, default=20.0, help="flood: seconds")
    ap.add_argument("--reopen", action="store_true",
                    help="flood: re-open every connection the instance closes")
    ap.add_argument("--skip", action="store_true",
                    help="do not attack (to check that the TAP assertions can fail)")
    a = ap.parse_args()
    SETTINGS.update(lms_workers=a.lms_workers, tcp_paths=a.tcp_paths, nodes=a.nodes,
                    instance=a.instance, peer_timeout=a.peer_timeout,
                    heartbeat_interval=a.heartbeat_interval,
                    witnesses=sum(1 << (int(i) - 1) for i in a.witnesses.split(",") if i.strip()))
    if a.skip:
        result(skipped="yes")
        return 0
    try:
        CASES[a.case](a)
    except Rejected as r:
        print("peer: %s" % r, file=sys.stderr)
        result(rejected=REJECT_REASONS.get(r.reason, r.reason), detail=repr(r.detail))
        return 2
    except (ProtocolError, Closed, TimeoutError, OSError) as e:
        print("peer: %s: %s" % (type(e).__name__, e), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
