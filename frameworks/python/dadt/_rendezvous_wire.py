"""The client's side of dadt's rendezvous protocol in Python (runtime/common/rendezvous/protocol.h
is the definition; dadtrun serves it): frames, requests, and the keyed handshake that opens every
connection (runtime/common/auth/keyed_proof.h). The Ray driver publishes its elastic rounds with it.

    with socket.create_connection((addr, port)) as sock:
        handshake(sock, secret.encode(), "%s:%d" % (addr, port))
        send_frame(sock, encode_request(SET, "elastic/round", "1"))
        status, value = decode_response(read_frame(sock))

Loads nothing but the standard library.
"""
import hashlib
import hmac
import secrets
import socket
import struct
from typing import Tuple

VERSION = 2
SET, GET, ADD = 1, 2, 3
OK, NOT_FOUND, UNAUTHORIZED, BAD_REQUEST = 0, 1, 2, 3
STATUS_NAMES = {OK: "OK", NOT_FOUND: "NOT_FOUND", UNAUTHORIZED: "UNAUTHORIZED", BAD_REQUEST: "BAD_REQUEST"}
CLIENT_LABEL, SERVER_LABEL = b"dadt rendezvous client", b"dadt rendezvous server"
NONCE_BYTES = 32


def read_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("the store closed the connection")
        buf += chunk
    return buf


def read_frame(sock: socket.socket) -> bytes:
    (length,) = struct.unpack("<I", read_exact(sock, 4))
    return read_exact(sock, length)


def send_frame(sock: socket.socket, payload: bytes) -> None:
    sock.sendall(struct.pack("<I", len(payload)) + payload)


def proof(secret: bytes, label: bytes, challenge: bytes, answer: bytes) -> bytes:
    """HMAC-SHA256 keyed by the secret over the label, a zero byte and both nonces."""
    return hmac.new(secret, label + b"\0" + challenge + answer, hashlib.sha256).digest()


def handshake(sock: socket.socket, secret: bytes, where: str) -> None:
    """Answers the store's nonce with a proof of the secret and checks the store's proof in return;
    the secret itself is never sent. ConnectionError names `where` when either side's proof fails."""
    challenge = read_frame(sock)
    if len(challenge) != 1 + NONCE_BYTES or challenge[0] != VERSION:
        raise ConnectionError("%s does not speak dadt's rendezvous protocol %d" % (where, VERSION))
    server_nonce, nonce = challenge[1:], secrets.token_bytes(NONCE_BYTES)
    send_frame(sock, bytes([VERSION]) + nonce + proof(secret, CLIENT_LABEL, server_nonce, nonce))
    status, value = decode_response(read_frame(sock))
    if status != OK:
        raise ConnectionError("dadt's rendezvous store at %s refused the job secret" % where)
    if not hmac.compare_digest(value, proof(secret, SERVER_LABEL, nonce, server_nonce)):
        raise ConnectionError("the process at %s did not prove that it knows the job secret" % where)


def encode_request(op: int, key: str, value: bytes = b"") -> bytes:
    k = key.encode()
    return struct.pack("<BBH", VERSION, op, len(k)) + k + struct.pack("<I", len(value)) + value


def decode_response(payload: bytes) -> Tuple[int, bytes]:
    """(status, value) of a response payload."""
    if len(payload) < 5:
        raise ConnectionError("a response of %d bytes from dadt's rendezvous store" % len(payload))
    status, length = struct.unpack_from("<BI", payload)
    return status, payload[5:5 + length]
