"""A TCP relay that records: listens on 127.0.0.1:0, forwards every
connection it accepts to a target, and writes each direction's bytes to a
file of its own, as docs/protocol.md's decoder test reads them:

  DIR/connections.json   [{"id", "to_dest", "to_source"}], in accept order
  DIR/conn-ID-to-dest.bin, DIR/conn-ID-to-source.bin

Standard library only; the relay passes bytes through unchanged."""

import json
import os
import socket
import threading


class RecordingRelay:
    def __init__(self, target_port, directory, target_host="127.0.0.1"):
        self.target = (target_host, target_port)
        self.dir = directory
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.connections = []
        self.sockets = []
        self.threads = []
        self.lock = threading.Lock()
        self.closed = False
        self.acceptor = threading.Thread(target=self._accept, daemon=True)
        self.acceptor.start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            upstream = socket.create_connection(self.target)
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self.sockets.append(s)
            with self.lock:
                cid = len(self.connections)
                entry = {"id": cid, "to_dest": f"conn-{cid}-to-dest.bin",
                         "to_source": f"conn-{cid}-to-source.bin"}
                self.connections.append(entry)
            for src, dst, name in ((client, upstream, entry["to_dest"]),
                                   (upstream, client, entry["to_source"])):
                t = threading.Thread(target=self._pump,
                                     args=(src, dst, name), daemon=True)
                t.start()
                self.threads.append(t)

    def _pump(self, src, dst, name):
        with open(os.path.join(self.dir, name), "wb") as out:
            while True:
                try:
                    data = src.recv(1 << 20)
                except OSError:
                    data = b""
                if not data:
                    break
                out.write(data)
                try:
                    dst.sendall(data)
                except OSError:
                    break
        for s, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
            try:
                s.shutdown(how)
            except OSError:
                pass

    def finish(self, timeout=30):
        """Stops accepting, waits for every connection to close, and writes
        connections.json."""
        # close() alone does not wake a thread blocked in accept().
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()
        self.acceptor.join(timeout)
        for t in list(self.threads):
            t.join(timeout)
        for s in self.sockets:
            s.close()
        with open(os.path.join(self.dir, "connections.json"), "w") as f:
            json.dump(self.connections, f, indent=1)
        return self.connections
