"""The control plane's port on a second node's own loopback.

A second node on the machine has a network namespace of its own (mountns.py ``net``): its pods
use the host network and fixed loopback ports (8081-8084), which the first node's pods hold on
the machine's loopback. Its kubelet and its pods reach the API server as every node of the run
does, at ``127.0.0.1:<port>`` (the overlay's KUBERNETES_SERVICE_HOST/PORT, the kubelet's
kubeconfig; the server's certificate names 127.0.0.1), so that address must lead to the API
server from inside the namespace too. ``LoopbackForward`` listens there and relays each
connection to the machine's ``127.0.0.1:<port>``: a listening socket belongs to the network
namespace it was made in, so one thread enters the node's namespace (setns(2) moves only the
calling thread), makes the socket and comes back; the connections out are made from the
machine's namespace. TLS passes through untouched.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import threading

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def listen_in(ns_path: str, port: int) -> socket.socket:
    """A socket listening on 127.0.0.1:``port`` of the network namespace at ``ns_path``."""
    made: list[socket.socket] = []
    failed: list[BaseException] = []

    def make() -> None:
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        target = os.open(ns_path, os.O_RDONLY)
        try:
            _setns(target)
            try:
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind(("127.0.0.1", port))
                s.listen(64)
                made.append(s)
            finally:
                _setns(own)
        except BaseException as e:  # reported by the caller's thread
            failed.append(e)
        finally:
            os.close(own)
            os.close(target)

    t = threading.Thread(target=make, name="netns-listen")  # the thread's namespace only
    t.start()
    t.join()
    if failed:
        raise failed[0]
    return made[0]


class LoopbackForward:
    """127.0.0.1:``port`` in the namespace at ``ns_path`` relayed to the machine's."""

    def __init__(self, ns_path: str, port: int) -> None:
        self.port = port
        self.listener = listen_in(ns_path, port)
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, name="loopfwd", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                inner, _ = self.listener.accept()
            except OSError:
                return  # closed
            try:
                outer = socket.create_connection(("127.0.0.1", self.port), timeout=10)
                outer.settimeout(None)
            except OSError:
                inner.close()  # the API server is down (an outage a check makes): refused
                continue
            with self._lock:
                if self._closed:
                    inner.close()
                    outer.close()
                    return
                self._conns |= {inner, outer}
            done = threading.Semaphore(0)  # each direction's end: both ended, both closed
            for a, b in ((inner, outer), (outer, inner)):
                threading.Thread(target=self._pump, args=(a, b, done), daemon=True).start()
            threading.Thread(target=self._reap, args=(inner, outer, done), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket, done: threading.Semaphore) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)
            done.release()

    def _reap(self, a: socket.socket, b: socket.socket, done: threading.Semaphore) -> None:
        done.acquire()
        done.acquire()
        with self._lock:
            self._conns -= {a, b}
        a.close()
        b.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conns, self._conns = list(self._conns), set()
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        for s in conns:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
