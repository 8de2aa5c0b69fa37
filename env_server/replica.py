"""The name of this env replica, for the folder its traces go to (`python -m env_server.replica`).

Replicas of one deployment share one data volume, one folder each (docker/env-entrypoint.sh:
``$ENV_DATA_DIR/<name>/traces/``). The name is, in order:

1. ``ENV_REPLICA_NAME`` when set (a replica started by hand, `docker run -e ENV_REPLICA_NAME=...`);
2. under Docker with a user-defined network (every compose project has one), the container's
   name as the engine's embedded DNS (127.0.0.11) answers the reverse lookup of the container's
   own address: ``myproj-env-2.myproj_default`` -> ``myproj-env-2``, the name `docker compose ps`
   shows for replica 2 (``myproj_env_2`` under docker-compose v1), stable across `down` / `up`;
3. the host name: a Kubernetes pod's name, or a container id where neither of the above answers.

Only Docker's own resolver is asked (and only when /etc/resolv.conf names it): elsewhere a reverse
lookup answers names of the network, not of the replica.
"""

from __future__ import annotations

import os
import re
import socket
import struct
import sys
from pathlib import Path

DOCKER_DNS = "127.0.0.11"
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


def _labels(data: bytes, i: int, depth: int = 0) -> tuple[str, int]:
    """The DNS name at offset ``i`` of ``data`` (compression pointers followed) and the offset after it."""
    out: list[str] = []
    while data[i]:
        if data[i] & 0xC0 == 0xC0:
            if depth > 8:
                raise ValueError("DNS name pointer loop")
            rest, _ = _labels(data, struct.unpack(">H", data[i:i + 2])[0] & 0x3FFF, depth + 1)
            return ".".join([*out, rest]), i + 2
        out.append(data[i + 1:i + 1 + data[i]].decode("ascii"))
        i += 1 + data[i]
    return ".".join(out), i + 1


def reverse_lookup(ip: str, server: str = DOCKER_DNS, timeout_s: float = 1.0) -> str | None:
    """The PTR name of IPv4 ``ip`` as ``server`` answers it (one UDP query), or None."""
    qname = b"".join(bytes([len(p)]) + p.encode() for p in [*reversed(ip.split(".")), "in-addr", "arpa"]) + b"\0"
    query_id = os.getpid() & 0xFFFF
    query = struct.pack(">HHHHHH", query_id, 0x0100, 1, 0, 0, 0) + qname + struct.pack(">HH", 12, 1)
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.settimeout(timeout_s)
            sock.sendto(query, (server, 53))
            data = sock.recv(4096)
        got_id, flags, _, answers = struct.unpack(">HHHH", data[:8])
        if got_id != query_id or flags & 0x000F:  # another answer, or an error code (NXDOMAIN ...)
            return None
        i = 12 + len(qname) + 4
        for _ in range(answers):
            _, i = _labels(data, i)
            rtype, _, _, length = struct.unpack(">HHIH", data[i:i + 10])
            i += 10
            if rtype == 12:
                return _labels(data, i)[0]
            i += length
    except (OSError, ValueError, struct.error, IndexError, UnicodeDecodeError):
        return None
    return None


def _uses_docker_dns(resolv_conf: Path = Path("/etc/resolv.conf")) -> bool:
    try:
        text = resolv_conf.read_text()
    except OSError:
        return False
    return any(line.split()[:2] == ["nameserver", DOCKER_DNS] for line in text.splitlines())


def replica_name(environ: dict[str, str] | None = None) -> str:
    """This replica's name (see the module's docstring)."""
    environ = os.environ if environ is None else environ
    given = environ.get("ENV_REPLICA_NAME", "").strip()
    if given:
        if not NAME.fullmatch(given) or given in (".", ".."):
            raise ValueError(f"ENV_REPLICA_NAME {given!r}: 1-128 of A-Za-z0-9._- (a folder name)")
        return given
    host = socket.gethostname()
    if _uses_docker_dns():
        try:
            ip = socket.gethostbyname(host)
        except OSError:
            ip = ""
        found = reverse_lookup(ip) if ip else None
        name = (found or "").split(".", 1)[0]  # <container name>.<network name>
        if name and NAME.fullmatch(name):
            return name
    return host


def main() -> int:
    try:
        print(replica_name())
    except ValueError as exc:
        print(f"env-server: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
