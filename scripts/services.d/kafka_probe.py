"""Readiness probe for the test Kafka broker (standard library only).

Usage: kafka_probe.py HOST PORT [TIMEOUT_SECONDS]

Sends an ApiVersions request, then a Metadata request (at the lowest non-flexible
version the broker accepts) and exits 0 only if the broker lists at least one live
broker, i.e. it has registered with the KRaft controller and is unfenced.
Exit 1 otherwise, with the reason on stderr.
"""

from __future__ import annotations

import socket
import struct
import sys

API_METADATA = 3
API_VERSIONS = 18


def _request(sock: socket.socket, api_key: int, version: int, corr: int, body: bytes) -> bytes:
    client_id = b"twopc-probe"
    header = struct.pack(">hhih", api_key, version, corr, len(client_id)) + client_id
    payload = header + body
    sock.sendall(struct.pack(">i", len(payload)) + payload)
    size = struct.unpack(">i", _read(sock, 4))[0]
    data = _read(sock, size)
    if struct.unpack(">i", data[:4])[0] != corr:
        raise RuntimeError("correlation id mismatch")
    return data[4:]


def _read(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise RuntimeError("connection closed by broker")
        buf += chunk
    return buf


def probe(host: str, port: int, timeout: float) -> int:
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        resp = _request(sock, API_VERSIONS, 0, 1, b"")
        error, count = struct.unpack(">hi", resp[:6])
        if error:
            raise RuntimeError(f"ApiVersions error code {error}")
        versions = {}
        for i in range(count):
            key, vmin, vmax = struct.unpack(">hhh", resp[6 + 6 * i : 12 + 6 * i])
            versions[key] = (vmin, vmax)
        vmin, vmax = versions[API_METADATA]
        version = max(vmin, 1)
        if version > min(vmax, 8):
            raise RuntimeError(f"no usable Metadata version in {vmin}..{vmax}")
        body = struct.pack(">i", -1)  # null topic list: all topics (v1+)
        if version >= 4:
            body += b"\x00"  # allow_auto_topic_creation
        if version >= 8:
            body += b"\x00\x00"  # include cluster/topic authorized operations
        resp = _request(sock, API_METADATA, version, 2, body)
        offset = 4 if version >= 3 else 0  # throttle_time_ms
        brokers = struct.unpack(">i", resp[offset : offset + 4])[0]
        if brokers < 1:
            raise RuntimeError("broker has not registered yet (no live brokers in metadata)")
        return brokers


def main() -> int:
    host, port = sys.argv[1], int(sys.argv[2])
    timeout = float(sys.argv[3]) if len(sys.argv) > 3 else 3.0
    try:
        probe(host, port, timeout)
    except (OSError, RuntimeError, KeyError, struct.error) as exc:
        print(f"kafka probe {host}:{port}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
