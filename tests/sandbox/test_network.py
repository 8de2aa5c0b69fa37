"""No network: not the host's loopback, not the outside, not DNS, no raw or vsock sockets."""

from __future__ import annotations

import contextlib
import os
import socket
import threading

from sandbox_support import assert_done, py, sh


@contextlib.contextmanager
def host_listener(host: str = "0.0.0.0"):
    """A TCP server on the host recording every connection it accepts."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((host, 0))
    srv.listen(16)
    srv.settimeout(0.2)
    accepted: list[tuple] = []
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, addr = srv.accept()
            except OSError:
                continue
            accepted.append(addr)
            with contextlib.suppress(OSError):
                conn.sendall(b"HOST-SERVER-HELLO\n")
            conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield srv.getsockname()[1], accepted
    finally:
        stop.set()
        t.join(2)
        srv.close()


def _host_addresses() -> list[str]:
    addrs = {"127.0.0.1"}
    with contextlib.suppress(OSError):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.connect(("10.255.255.255", 1))  # no packet is sent: picks the outgoing address
        addrs.add(s.getsockname()[0])
        s.close()
    return sorted(addrs)


async def test_host_loopback_server_unreachable(harness):
    with host_listener() as (port, accepted):
        addrs = _host_addresses()
        async with harness.session() as sb:
            res = await py(sb, f"""
                import socket
                for a in {addrs!r} + ["localhost", "::1"]:
                    try:
                        s = socket.create_connection((a, {port}), timeout=3)
                        print("CONNECTED", a, s.recv(100))
                    except OSError as e:
                        print("refused", a, type(e).__name__)
            """)
            bash = await sh(sb, f"echo hi > /dev/tcp/127.0.0.1/{port} && echo CONNECTED-BASH; "
                                f"timeout 3 bash -c 'cat < /dev/tcp/127.0.0.1/{port}' 2>&1; echo PROBE-DONE")
    assert "refused" in res.output and "CONNECTED" not in res.output, res.output
    assert_done(bash)
    assert "CONNECTED" not in bash.output and "HELLO" not in bash.output, bash.output
    assert not accepted, f"the host's server accepted connections from the sandbox: {accepted}"


async def test_external_network_and_dns_unreachable(harness):
    async with harness.session() as sb:
        res = await py(sb, """
            import socket
            for target in [("1.1.1.1", 53), ("8.8.8.8", 443), ("151.101.0.223", 443)]:
                try:
                    socket.create_connection(target, timeout=3); print("CONNECTED", target)
                except OSError as e:
                    print("no", target, e.errno)
            try:
                print("RESOLVED", socket.getaddrinfo("example.com", 443))
            except OSError as e:
                print("nodns", e)
            u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                u.sendto(b"x", ("8.8.8.8", 53)); print("SENT-UDP")
            except OSError as e:
                print("noudp", e.errno)
            import os
            print("IFACES", sorted(os.listdir("/sys/class/net")) if os.path.isdir("/sys/class/net") else
                  [l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:]])
        """, timeout=60)
        assert "nodns" in res.output and "CONNECTED" not in res.output and "RESOLVED" not in res.output, res.output
        assert "SENT-UDP" not in res.output, res.output
        assert "IFACES ['lo']" in res.output, res.output
        # pip's own retries (5, with backoff: ~6 s) would only wait longer for the same refusal
        res = await sh(sb, "pip download --retries 0 --no-deps -d /tmp/x six 2>&1 | tail -2; "
                           "git ls-remote https://github.com/git/git 2>&1 | head -2; echo PROBE-DONE", timeout=90)
        assert_done(res)
        assert "Saved" not in res.output and "refs/heads" not in res.output, res.output


async def test_raw_packet_and_vsock_sockets_refused(harness):
    """AF_PACKET / raw IP reach the link; AF_VSOCK is not confined by a network namespace
    and reaches the hypervisor host."""
    async with harness.session() as sb:
        res = await py(sb, """
            import socket
            probes = [("packet", socket.AF_PACKET, socket.SOCK_RAW, 0x0300),
                      ("rawip", socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP),
                      ("vsock", getattr(socket, "AF_VSOCK", 40), socket.SOCK_STREAM, 0)]
            for name, fam, typ, proto in probes:
                try:
                    socket.socket(fam, typ, proto).close(); print("CREATED", name)
                except OSError as e:
                    print("refused", name, e.errno)
        """)
        assert res.output.count("refused") == 3, res.output


async def test_host_abstract_unix_socket_unreachable(harness):
    """Abstract unix sockets are scoped by network namespace: the host's must be out of reach."""
    name = f"\0swe-sbx-probe-{os.getpid()}"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(name)
    srv.listen(4)
    srv.settimeout(0.1)
    try:
        async with harness.session() as sb:
            res = await py(sb, f"""
                import socket
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    s.connect({name!r}); print("CONNECTED")
                except OSError as e:
                    print("refused", e.errno)
            """)
        with contextlib.suppress(OSError):
            srv.accept()
            raise AssertionError("the host's abstract socket accepted a connection from the sandbox")
    finally:
        srv.close()
    assert "refused" in res.output and "CONNECTED" not in res.output, res.output


async def test_no_unix_socket_in_view_is_connectable(harness):
    """The docker socket, systemd/dbus sockets, etc. are not in the view."""
    async with harness.session() as sb:
        res = await py(sb, """
            import os, socket, stat
            found = []
            for root in ("/run", "/var/run", "/var", "/tmp", "/dev", "/root", "/home", "/etc", "/opt", "/.swe"):
                for dp, dn, fn in os.walk(root):
                    for n in fn + dn:
                        p = os.path.join(dp, n)
                        try:
                            if stat.S_ISSOCK(os.lstat(p).st_mode): found.append(p)
                        except OSError: pass
            for p in found + ["/var/run/docker.sock", "/run/docker.sock", "/run/containerd/containerd.sock"]:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    s.connect(p); print("CONNECTED", p)
                except OSError as e:
                    print("no", p, e.errno)
            print("done")
        """, timeout=120)
        assert "done" in res.output and "CONNECTED" not in res.output, res.output
