"""A stand-in for dadtrun's elastic driver in tests: a rendezvous server speaking
runtime/common/rendezvous/protocol.h (frames of little-endian u32 length + payload; the keyed
handshake, then SET, GET, ADD) and the round-publishing half of the launcher <-> worker contract
(docs/elastic.md): assignments, then the size, then `elastic/round`."""
import hmac
import os
import socket
import struct
import threading

from dadt import _rendezvous_wire as wire


class FakeDriver:
    def __init__(self, secret="elastic-test-secret"):
        self.secret = secret.encode()
        self._kv = {}
        self._mu = threading.Lock()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.port = self._sock.getsockname()[1]
        self._round = 0
        self._notice = 0
        self._frozen = threading.Event()
        self._closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def env(self):
        return {"DADT_RENDEZVOUS_ADDR": "127.0.0.1", "DADT_RENDEZVOUS_PORT": str(self.port),
                "DADT_SECRET": self.secret.decode(), "DADT_ELASTIC": "1",
                "DADT_CONTROLLER": "gloo"}

    def set(self, key, value):
        with self._mu:
            self._kv[key] = str(value).encode()

    def get(self, key):
        with self._mu:
            v = self._kv.get(key)
        return None if v is None else v.decode()

    def publish_round(self, workers, removed=()):
        """workers: worker ids in rank order, all on this host; removed: ids told to leave."""
        self._round += 1
        r, n = self._round, len(workers)
        for rank, wid in enumerate(workers):
            self.set("elastic/round/%d/assign/%s" % (r, wid), "%d %d %d %d 0 1" % (rank, n, rank, n))
        for wid in removed:
            self.set("elastic/round/%d/assign/%s" % (r, wid), "removed")
        self.set("elastic/round/%d/size" % r, n)
        self.set("elastic/round", r)
        return r

    def publish_notice(self, kind):
        self._notice += 1
        self.set("elastic/notice/%d" % self._notice, kind)
        self.set("elastic/notice", self._notice)

    def freeze(self):
        """From now on the store reads requests and never answers (a wedged launcher)."""
        self._frozen.set()

    def _accept(self):
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _handshake(self, conn):
        """The server's half: a nonce out, the client's proof checked, the store's proof back."""
        nonce = os.urandom(wire.NONCE_BYTES)
        wire.send_frame(conn, bytes([wire.VERSION]) + nonce)
        hello = wire.read_frame(conn)
        client_nonce, given = hello[1:1 + wire.NONCE_BYTES], hello[1 + wire.NONCE_BYTES:]
        if not hmac.compare_digest(given, wire.proof(self.secret, wire.CLIENT_LABEL, nonce, client_nonce)):
            self._reply(conn, wire.UNAUTHORIZED, b"wrong proof of the job secret")
            return False
        self._reply(conn, wire.OK, wire.proof(self.secret, wire.SERVER_LABEL, client_nonce, nonce))
        return True

    def _serve(self, conn):
        try:
            if not self._handshake(conn):
                return
            while True:
                p = wire.read_frame(conn)
                op = p[1]
                (klen,) = struct.unpack_from("<H", p, 2)
                key = p[4:4 + klen].decode()
                (vlen,) = struct.unpack_from("<I", p, 4 + klen)
                value = p[8 + klen:8 + klen + vlen]
                if self._frozen.is_set():
                    self._closed.wait()
                    return
                with self._mu:
                    if op == wire.SET:
                        self._kv[key] = value
                        status, out = wire.OK, b""
                    elif op == wire.GET:
                        out = self._kv.get(key)
                        status, out = (wire.OK, out) if out is not None else (wire.NOT_FOUND, b"")
                    else:
                        total = int(self._kv.get(key, b"0")) + int(value)
                        self._kv[key] = str(total).encode()
                        status, out = wire.OK, self._kv[key]
                self._reply(conn, status, out)
        except (ConnectionError, OSError):
            pass
        finally:
            conn.close()

    @staticmethod
    def _reply(conn, status, value):
        wire.send_frame(conn, struct.pack("<BI", status, len(value)) + value)

    def close(self):
        self._closed.set()
        self._sock.close()
