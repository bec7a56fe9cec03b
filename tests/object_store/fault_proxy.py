"""A TCP proxy on loopback that can make an HTTP endpoint misbehave, for fault tests.

Put one in front of the object store and one in front of the REST catalog; the engine talks
to the proxies, the judges to the real server. Modes (switched at any time from the test):

* ``pass``: relay bytes both ways.
* ``unavailable``: answer every new request with ``503 Service Unavailable`` and close
  (what a throttling or restarting S3 / catalog does); open relays are cut.
* ``refuse``: accept and close at once (a dead endpoint behind a load balancer).
* ``lose_commit_answer``: relay, but the first REST commit request seen (``POST
  /v1/.../tables/<name>``) reaches the server and its answer is thrown away and the
  connection closed: the commit happened, the client cannot know. Back to ``pass`` after one.

Bounded: it serves loopback only and stops with the test.
"""

from __future__ import annotations

import re
import socket
import threading
from contextlib import suppress

_COMMIT = re.compile(rb"^POST /v1/\S*/tables/[^/\s?]+ HTTP/1\.[01]\r\n")
_REQUEST_START = re.compile(rb"^[A-Z]+ \S+ HTTP/1\.[01]\r\n")
_503 = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
        b"Content-Length: 19\r\nConnection: close\r\n\r\nService Unavailable")


class FaultProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self.mode = "pass"
        self.counts = {"connections": 0, "refused": 0, "unavailable": 0, "lost_commits": 0}
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._accept_loop, name="fault-proxy", daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def set_mode(self, mode: str) -> None:
        assert mode in ("pass", "unavailable", "refuse", "lose_commit_answer"), mode
        self.mode = mode
        if mode in ("unavailable", "refuse"):
            self._cut_all()  # kept-alive connections must not bypass the outage

    def stop(self) -> None:
        self._stopped.set()
        with suppress(OSError):
            self._listener.close()
        self._cut_all()
        self._thread.join(timeout=5)

    # -- internals --------------------------------------------------------------------------
    def _cut_all(self) -> None:
        with self._lock:
            socks, self._open = list(self._open), set()
        for s in socks:
            with suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with suppress(OSError):
                s.close()

    def _track(self, *socks: socket.socket) -> None:
        with self._lock:
            self._open.update(socks)

    def _accept_loop(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self.counts["connections"] += 1
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        mode = self.mode
        if mode == "refuse":
            self.counts["refused"] += 1
            client.close()
            return
        if mode == "unavailable":
            self._answer_503(client)
            return
        try:
            upstream = socket.create_connection(self.upstream, timeout=10)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        self._track(client, upstream)
        swallow = threading.Event()  # set: the answer to a commit is to be lost
        t = threading.Thread(target=self._downstream, args=(upstream, client, swallow), daemon=True)
        t.start()
        self._upstream(client, upstream, swallow)

    def _answer_503(self, client: socket.socket) -> None:
        client.settimeout(5)
        with suppress(OSError):
            client.recv(65536)  # the request head (the body, if any, is dropped with the socket)
            client.sendall(_503)
            self.counts["unavailable"] += 1
        with suppress(OSError):
            client.close()

    def _upstream(self, client: socket.socket, upstream: socket.socket, swallow: threading.Event) -> None:
        try:
            while True:
                data = client.recv(65536)
                if not data:
                    break
                if self.mode == "unavailable" and _REQUEST_START.match(data):
                    with suppress(OSError):
                        client.sendall(_503)
                    self.counts["unavailable"] += 1
                    break
                if self.mode == "lose_commit_answer" and _COMMIT.match(data):
                    self.mode = "pass"  # one commit only
                    self.counts["lost_commits"] += 1
                    swallow.set()
                upstream.sendall(data)
        except OSError:
            pass
        finally:
            for s in (client, upstream):
                with suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def _downstream(self, upstream: socket.socket, client: socket.socket, swallow: threading.Event) -> None:
        try:
            while True:
                data = upstream.recv(65536)
                if not data:
                    break
                if swallow.is_set():
                    break  # the server answered the commit: drop the answer and the connection
                client.sendall(data)
        except OSError:
            pass
        finally:
            for s in (client, upstream):
                with suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                with suppress(OSError):
                    s.close()
