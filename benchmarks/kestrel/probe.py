#!/usr/bin/env python3
"""Checks one server's answers for a benchmarks/run-kestrel.sh scenario before it is measured.

    probe.py HOST PORT PATH DEPTH [close] [s]

Sends DEPTH requests for PATH in one write (as the generator does), reads DEPTH responses and checks each: status
200, a Content-Length or chunked body equal to the expected one (/plaintext, /json, /download?size=N; /upload?size=N
is a POST of N bytes to /upload, answered with N; /static/NAME and /file/NAME: the file NAME of the directory in the
environment variable STATIC_ROOT, the sample's --static-root; the database tests' bodies are checked by shape, see
check_database), and with
"close" a Connection: close header followed by the server closing the connection. Prints "ok BYTES" (bytes per
response, headers included, which the report compares with the generator's bytes read per request) or "error ..."
with exit code 1. "s" speaks TLS (the certificate is not checked: the harness made it).
"""
import html
import json
import os
import re
import socket
import ssl
import sys


def database_path(path):
    """TechEmpower's database tests (the sample's --db): /db, /queries?queries=N, /fortunes, /updates?queries=N."""
    return re.fullmatch(r"/(db|fortunes|(queries|updates)\?queries=\d+)", path) is not None


def check_world(row, where):
    if not (isinstance(row, dict) and set(row) == {"id", "randomNumber"}
            and all(type(row[k]) is int and 1 <= row[k] <= 10000 for k in row)):
        raise ValueError(f"{where}: {json.dumps(row)[:200]} is not a world row {{\"id\": 1..10000, \"randomNumber\": 1..10000}}")


def check_database(path, headers, body):
    """A database test's body: a world row (/db) or an array of N rows (N clamped to 1..500) as JSON; the
    fortunes table as HTML, with the fortune added at request time, HTML-encoded and sorted."""
    if path == "/fortunes":
        if headers.get("content-type", "").replace(" ", "").lower() != "text/html;charset=utf-8":
            raise ValueError(f"Content-Type {headers.get('content-type')!r}, not text/html; charset=utf-8")
        text = body.decode("utf-8")
        if "<tr><td>0</td><td>Additional fortune added at request time.</td></tr>" not in text:
            raise ValueError("no row 0, 'Additional fortune added at request time.'")
        if "&lt;script&gt;" not in text or "<script>" in text:
            raise ValueError("the <script> fortune is not HTML-encoded")
        rows = re.findall(r"<tr><td>(\d+)</td><td>(.*?)</td></tr>", text)
        messages = [html.unescape(m) for _, m in rows]
        if len(rows) != 13 or "フレームワークのベンチマーク" not in messages:
            raise ValueError(f"{len(rows)} rows, not TechEmpower's 12 fortunes and the added one")
        if messages != sorted(messages):  # ordinal: Python compares code points, as string.CompareOrdinal does here
            raise ValueError("the fortunes are not sorted by message")
        return
    value = json.loads(body)
    if path == "/db":
        check_world(value, path)
        return
    n = min(500, max(1, int(path.rsplit("=", 1)[1])))
    if not isinstance(value, list) or len(value) != n:
        raise ValueError(f"not a JSON array of {n} rows: {body[:200]!r}")
    for row in value:
        check_world(row, path)


def expected_body(path):
    if database_path(path):
        return None  # rows are random: checked by check_database
    if path == "/plaintext":
        return b"Hello, World!"
    if path == "/json":
        return b'{"message":"Hello, World!"}'
    m = re.fullmatch(r"/upload\?size=(\d+)", path)
    if m:
        return m.group(1).encode()
    m = re.fullmatch(r"/(?:static|file)/([^/]+)", path)
    if m:
        root = os.environ.get("STATIC_ROOT")
        if not root:
            raise SystemExit(f"error: {path} needs STATIC_ROOT, the directory the server serves")
        with open(os.path.join(root, m.group(1)), "rb") as f:
            return f.read()
    m = re.fullmatch(r"/download\?size=(\d+)", path)
    if m:
        chunk = bytes(ord("a") + i % 26 for i in range(64 * 1024))  # the sample's Download.Chunk, repeated
        size = int(m.group(1))
        return (chunk * (size // len(chunk) + 1))[:size]
    raise SystemExit(f"error: no expected body for {path}")


class Reader:
    def __init__(self, sock):
        self.sock, self.buf = sock, bytearray()  # appended in place: a 16 MiB body comes in hundreds of pieces

    def fill(self):
        data = self.sock.recv(1 << 20)
        if not data:
            raise EOFError("connection closed by the server")
        self.buf += data

    def until(self, marker):
        while marker not in self.buf:
            self.fill()
        end = self.buf.index(marker)
        head = bytes(self.buf[:end])
        del self.buf[:end + len(marker)]
        return head

    def exactly(self, n):
        while len(self.buf) < n:
            self.fill()
        data = bytes(self.buf[:n])
        del self.buf[:n]
        return data


def read_response(reader):
    """Returns (status line, headers dict, body, bytes on the wire)."""
    head = reader.until(b"\r\n\r\n")
    wire = len(head) + 4
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if "content-length" in headers:
        body = reader.exactly(int(headers["content-length"]))
        wire += len(body)
    elif headers.get("transfer-encoding", "").lower() == "chunked":
        body = b""
        while True:
            size_line = reader.until(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            chunk = reader.exactly(size + 2)
            wire += len(size_line) + 2 + size + 2
            if size == 0:
                break
            body += chunk[:-2]
    else:
        raise ValueError("response without Content-Length or chunked body")
    return lines[0], headers, body, wire


def main():
    host, port, path, depth = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    close = "close" in sys.argv[5:]
    tls = "s" in sys.argv[5:]
    want = expected_body(path)
    upload = re.fullmatch(r"/upload\?size=(\d+)", path)
    body = b"u" * int(upload.group(1)) if upload else b""
    request = (f"{'POST /upload' if upload else 'GET ' + path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
               + (f"Content-Type: application/octet-stream\r\nContent-Length: {len(body)}\r\n" if upload else "")
               + f"Connection: {'close' if close else 'keep-alive'}\r\n\r\n").encode() + body
    try:
        with socket.create_connection((host, port), timeout=10) as plain:
            sock = plain
            if tls:
                context = ssl.create_default_context()
                context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
                context.set_alpn_protocols(["http/1.1"])
                sock = context.wrap_socket(plain, server_hostname=host)
            sock.sendall(request * depth)
            reader = Reader(sock)
            sizes = []
            for i in range(1 if close else depth):  # a server may answer only the first request of a closing batch
                status, headers, body, wire = read_response(reader)
                if not status.startswith("HTTP/1.1 200"):
                    raise ValueError(f"response {i}: {status}")
                if want is None:
                    check_database(path, headers, body)
                elif body != want:
                    raise ValueError(f"response {i}: {len(body)}-byte body differs from the expected {len(want)} bytes")
                sizes.append(wire)
            if close:
                if headers.get("connection", "").lower() != "close":
                    raise ValueError("no Connection: close in the response")
                try:
                    reader.fill()
                    raise ValueError("connection still open after Connection: close")
                except EOFError:
                    pass
            elif reader.buf:
                raise ValueError(f"{len(reader.buf)} unexpected bytes after {depth} responses")
    except (OSError, EOFError, ValueError, UnicodeDecodeError, ssl.SSLError) as e:
        print(f"error {path} depth {depth}{' close' if close else ''}: {e}")
        return 1
    if want is not None and len(set(sizes)) != 1:  # database rows' numbers differ in length
        print(f"error: responses of different lengths {sorted(set(sizes))}")
        return 1
    print(f"ok {sizes[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
