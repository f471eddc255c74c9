"""A stand-in for dadtrun's elastic driver in tests: a rendezvous server speaking
runtime/common/rendezvous/protocol.h (frames of little-endian u32 length + payload; SET, GET, ADD
with the job secret) and the round-publishing half of the launcher <-> worker contract
(docs/elastic.md): assignments, then the size, then `elastic/round`."""
import socket
import struct
import threading

_OK, _NOT_FOUND, _UNAUTHORIZED, _BAD_REQUEST = 0, 1, 2, 3
_SET, _GET, _ADD = 1, 2, 3


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

    @staticmethod
    def _recv(conn, n):
        buf = b""
        while len(buf) < n:
            chunk = conn.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return buf

    def _serve(self, conn):
        try:
            while True:
                (length,) = struct.unpack("<I", self._recv(conn, 4))
                p = self._recv(conn, length)
                op = p[1]
                (slen,) = struct.unpack_from("<H", p, 2)
                secret = p[4:4 + slen]
                o = 4 + slen
                (klen,) = struct.unpack_from("<H", p, o)
                key = p[o + 2:o + 2 + klen].decode()
                o += 2 + klen
                (vlen,) = struct.unpack_from("<I", p, o)
                value = p[o + 4:o + 4 + vlen]
                if self._frozen.is_set():
                    self._closed.wait()
                    return
                if secret != self.secret:
                    self._reply(conn, _UNAUTHORIZED, b"")
                    return
                with self._mu:
                    if op == _SET:
                        self._kv[key] = value
                        status, out = _OK, b""
                    elif op == _GET:
                        out = self._kv.get(key)
                        status, out = (_OK, out) if out is not None else (_NOT_FOUND, b"")
                    else:
                        total = int(self._kv.get(key, b"0")) + int(value)
                        self._kv[key] = str(total).encode()
                        status, out = _OK, self._kv[key]
                self._reply(conn, status, out)
        except (ConnectionError, OSError):
            pass
        finally:
            conn.close()

    @staticmethod
    def _reply(conn, status, value):
        payload = struct.pack("<BI", status, len(value)) + value
        conn.sendall(struct.pack("<I", len(payload)) + payload)

    def close(self):
        self._closed.set()
        self._sock.close()
