"""The in-sandbox runtime: one process per session, inside the jail.

Run as ``python3 -I -S runtime.py`` by a backend (bwrap or docker). Stdlib only,
Python 3.8+, because it runs on whatever interpreter the sandbox has. It speaks
JSON lines on stdin/stdout with the host (``sandbox/channel.py``):

* the first line is an init message; the runtime builds the workspace (an
  overlay on a read-only template, or a copy), applies the kernel layers
  (mount flags, rlimits, no_new_privs, Landlock, seccomp), starts the agent's
  persistent bash and answers ``{"ok": true, "info": {...}}``;
* then one request at a time: ``run``, ``read``, ``write``, ``diff``, ``apply``, ``ping``,
  ``isolated`` (a command in a fresh shell walled off from everything else in the jail).

The agent's shell never sees this process's pipes; the runtime is
non-dumpable, so a same-uid agent cannot read or write its memory or fds.
Everything the agent does is data in the reply: exit codes, timeouts, floods,
the shell exiting. The host treats every byte from here as untrusted.
"""

from __future__ import annotations

import time

STARTED = time.monotonic()  # (a built-in module: the first reading after the interpreter's own start)

import ctypes  # noqa: E402
import errno  # noqa: E402
import os  # noqa: E402
import select  # noqa: E402
import struct  # noqa: E402
import sys  # noqa: E402

try:  # the C half of `signal` (that module's enum classes cost a cold start milliseconds)
    import _signal as signal
except ImportError:  # an interpreter without it
    import signal

# Imported where needed, never at start (a cold start pays each import, docs/deploy.md): `re`
# (with `enum`, ~10 ms) for the diff's patterns, `subprocess` for git, `shutil` for copies;
# `json` and `base64` not at all: the C parts they wrap (`_json`; `binascii`, at the first file
# read or write) do the same work.

WORKSPACE = "/workspace"
PYCACHE_PREFIX = "/tmp/.pycache"  # PYTHONPYCACHEPREFIX of every shell (runtime_config.shell_env)
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS, PR_SET_CHILD_SUBREAPER = 4, 38, 36
PR_CAPBSET_DROP, PR_SET_SECCOMP = 24, 22


_DIFF_ARGS = ("diff", "--cached", "--no-color", "--no-ext-diff", "--no-textconv", "--no-renames",
              "--src-prefix=a/", "--dst-prefix=b/")
# What git prints instead of a binary file's change (a header line; hunk lines start with " ", "+", "-").
_BINARY_DIFF = r"(?m)^Binary files .* differ$"  # (patterns: compiled on first use, by `re`'s cache)
# Settings of every git call of the runtime (they win over the repository's config).
_GIT_SAFE = ("git", "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c", "core.quotePath=false",
             "-c", "core.autocrlf=false", "-c", "core.bare=false", "-c", "safe.directory=*",
             "-c", "diff.external=", "-c", "core.attributesFile=/dev/null")
# The runtime's info/attributes (the highest precedence): no attribute of the tree converts, filters,
# re-encodes or hides the bytes git reads (an in-tree working-tree-encoding fails `git add` outright).
_NEUTRAL_ATTRIBUTES = "* !text !eol !crlf !working-tree-encoding !ident !filter !diff !merge\n"
# Files git reads while it walks a directory: one that is not a file (a FIFO blocks git's open) keeps
# git out of that directory; at the top of the workspace, out of all of it.
_CONTROL_FILES = (".gitignore", ".gitattributes", ".gitmodules")
_PATH_LIMIT = 3800  # bytes of a path below /workspace: deeper entries are left out (git's paths stop at 4096)
DIFF_TIME_S = 90  # all the git work of one diff request (the host waits 120 s for the reply)
EXACT_PATCH_CAP = 40 * 1024 * 1024  # an exact patch with no limit of its own: base64 of it must fit one line
_SKIPPED_SHOWN = 100
_GIT_ADD_ERROR = r"^error: (invalid path|unable to index file) '(.*)'$"


def _file_kind(mode: int) -> str:
    import stat as S

    for test, name in ((S.S_ISFIFO, "a FIFO"), (S.S_ISSOCK, "a socket"), (S.S_ISCHR, "a device file"),
                       (S.S_ISBLK, "a device file")):
        if test(mode):
            return name
    return "not a regular file"


def _control_file_problem(entry: os.DirEntry, st: os.stat_result) -> str | None:
    """Why git could block reading ``entry`` (a .gitignore, say), or None: a file or a directory is safe,
    and a symbolic link to one (older git follows it)."""
    import stat as S

    if S.S_ISREG(st.st_mode) or S.S_ISDIR(st.st_mode):
        return None
    if S.S_ISLNK(st.st_mode):
        try:
            target = entry.stat(follow_symlinks=True)
        except OSError:
            return None  # dangling or a loop: git's open fails, harmlessly
        if S.S_ISREG(target.st_mode) or S.S_ISDIR(target.st_mode):
            return None
        return "a symbolic link to " + _file_kind(target.st_mode)
    return _file_kind(st.st_mode)


def _describe(path: str, why: str) -> str:
    """``"path (why)"`` in one short printable line (bytes that are not UTF-8 as \\xNN, a newline as \\n)."""
    text = path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    if len(text) > 300:  # a path past PATH_MAX: its two ends
        text = text[:120] + "..." + text[-120:]
    return "%s (%s)" % (text, why)


class RuntimeFailure(Exception):
    def __init__(self, kind: str, message: str, **extra: object) -> None:
        super().__init__(message)
        self.kind, self.message, self.extra = kind, message, extra


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, "%s: %s" % (what, os.strerror(err)))


def _mount(src: str, target: str, fstype: str, flags: int, data: str | None = None) -> None:
    _check(libc.mount(src.encode(), target.encode(), fstype.encode(), flags,
                      data.encode() if data else None), "mount " + target)


# --------------------------------------------------------------------------- setup

def enter_private_userns() -> None:
    """A nested user + mount namespace in which this process may mount.

    Under bwrap the mount namespace may belong to the host's user namespace (when
    bwrap runs as root), so mounting there is refused; a namespace of our own,
    mapping our uid to itself, makes the mounts below possible without any
    host privilege.
    """
    uid, gid = os.getuid(), os.getgid()
    _check(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS), "unshare")
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/uid_map", "w") as f:
        f.write("%d %d 1" % (uid, uid))
    with open("/proc/self/gid_map", "w") as f:
        f.write("%d %d 1" % (gid, gid))


def build_overlay_workspace(cfg: dict) -> str:
    """Mount the workspace: an overlay on the read-only template, upper layer on a
    size-limited noexec tmpfs; and the runtime's private state (the diff's repository,
    index and objects) on a tmpfs of its own, so that a workspace the agent filled
    leaves git room to read it. Returns that private directory. The agent's shell runs
    under an extra Landlock layer that can neither write nor read beneath either."""
    flags = MS_NOSUID | MS_NODEV | MS_NOEXEC
    _mount("tmpfs", "/tmp", "tmpfs", flags, "size=%dm,mode=1777" % cfg["tmp_mb"])
    upper = cfg["upper"]
    _mount("tmpfs", upper, "tmpfs", flags, "size=%dm,mode=0755" % cfg["workspace_mb"])
    os.makedirs(upper + "/u")
    os.makedirs(upper + "/w")
    private = cfg.get("private_dir") or "/.swe/private"
    if os.path.isdir(private):
        _mount("tmpfs", private, "tmpfs", flags, "size=%dm,mode=0700" % cfg["workspace_mb"])
    else:  # a jail without the mount point: beside the upper layer, as before
        private = upper + "/private"
        os.makedirs(private, mode=0o700)
    _mount("overlay", WORKSPACE, "overlay", flags,
           "lowerdir=%s,upperdir=%s/u,workdir=%s/w,userxattr" % (cfg["template"], upper, upper))
    lower = cfg.get("pycache_lower")
    if lower and os.path.isdir(lower):
        # the private pycache prefix starts with the environment's own bytecode (sandbox/bytecode.py):
        # read-only below, what Python writes goes to a layer beside the workspace's, out of reach
        os.makedirs(upper + "/pu")
        os.makedirs(upper + "/pw")
        os.makedirs(PYCACHE_PREFIX)
        _mount("overlay", PYCACHE_PREFIX, "overlay", flags,
               "lowerdir=%s,upperdir=%s/pu,workdir=%s/pw,userxattr" % (lower, upper, upper))
    if os.path.isdir("/dev/shm"):
        _mount("tmpfs", "/dev/shm", "tmpfs", flags, "size=64m,mode=1777")
    # bwrap's /dev is a writable, executable tmpfs: a place for `ld.so /dev/x`.
    # Make it read-only and noexec (the device nodes are mounts of their own).
    MS_REMOUNT, MS_BIND = 32, 4096
    _mount("none", "/dev", "", MS_REMOUNT | MS_BIND | MS_RDONLY | flags)
    return private


def venv_base(venv: str):
    """The prefix of the interpreter ``venv`` was made from (``home`` in its ``pyvenv.cfg``), or None."""
    try:
        with open(venv + "/pyvenv.cfg") as f:
            for line in f:
                key, _, value = line.partition("=")
                if key.strip() == "home" and value.strip():
                    return os.path.dirname(os.path.realpath(value.strip()))
    except OSError:
        pass
    return None


def environment_libs(venv, base) -> list:
    """(directory, is a standard library) for a venv's ``site-packages`` and its base interpreter's
    standard library (``base/lib/python3.X``), the folders whose bytecode a sandbox starts with."""
    def libs(prefix: str) -> list:
        try:
            names = sorted(os.listdir(prefix + "/lib"))
        except OSError:
            return []
        return [prefix + "/lib/" + n for n in names if n.startswith("python3")
                and os.path.isdir(prefix + "/lib/" + n) and not os.path.islink(prefix + "/lib/" + n)]

    roots = [(d + "/site-packages", False) for d in (libs(venv) if venv else [])
             if os.path.isdir(d + "/site-packages")]
    return roots + [(d, True) for d in (libs(base) if base else [])]


def environment_pycs(root: str, seen_as: str, stdlib: bool) -> list:
    """(path under a pycache prefix, symlink target) for each ``.pyc`` below ``root`` that has its
    source beside its ``__pycache__``, paths as a sandbox sees them (``root`` appears at ``seen_as``).
    A standard library's ``site-packages``/``dist-packages`` are not walked: not the environment's.
    The one walk behind both backends' first layer (bwrap: ``sandbox/bytecode.py``, on the host;
    docker: ``link_environment_bytecode``, in the jail)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        if stdlib and dirpath == root:
            dirnames[:] = [d for d in dirnames if d not in ("site-packages", "dist-packages")]
        if os.path.basename(dirpath) != "__pycache__":
            continue
        source_dir = os.path.dirname(dirpath)
        rel = os.path.relpath(source_dir, root)
        inside = seen_as if rel == "." else seen_as + "/" + rel
        for name in filenames:
            if name.endswith(".pyc") and os.path.isfile(os.path.join(source_dir, name.split(".", 1)[0] + ".py")):
                out.append((inside.lstrip("/") + "/" + name, inside + "/__pycache__/" + name))
    return out


def link_environment_bytecode(venv, prefix: str = PYCACHE_PREFIX) -> int:
    """Where no overlay is mounted (docker), start the private pycache prefix as the tree of symlinks
    that bwrap mounts as its read-only first layer (``sandbox/bytecode.py``): one per ``.pyc`` that the
    environment holds beside its source, in its ``site-packages`` and its interpreter's standard
    library. Without it each sandbox's first Python process compiled pytest and the standard library
    (1.2 s of a docker grading's test run). Python checks each ``.pyc`` against its source before it
    uses one; a link the shell replaces changes this sandbox only. Returns how many links."""
    # no pyvenv.cfg: a conda-style environment, which holds its own standard library
    base = (venv_base(venv) or venv) if venv else "/usr"
    count, made = 0, set()
    for root, stdlib in environment_libs(venv, base):
        for link, target in environment_pycs(root, root, stdlib):
            path = prefix + "/" + link
            try:
                folder = os.path.dirname(path)
                if folder not in made:
                    os.makedirs(folder, exist_ok=True)
                    made.add(folder)
                os.symlink(target, path)
                count += 1
            except FileExistsError:
                pass
            except OSError:  # a /tmp too small for them: Python compiles what is not linked
                return count
    return count


def build_copied_workspace(cfg: dict) -> None:
    import shutil

    src = cfg["template"]
    for name in os.listdir(src):
        s, d = os.path.join(src, name), os.path.join(WORKSPACE, name)
        if os.path.isdir(s) and not os.path.islink(s):
            shutil.copytree(s, d, symlinks=True)
        else:
            shutil.copy2(s, d, follow_symlinks=False)


def set_rlimits(limits: dict) -> None:
    import resource

    mb = 1024 * 1024
    table = [
        (resource.RLIMIT_AS, limits["memory_mb"] * mb),
        (resource.RLIMIT_NPROC, limits["pids"]),
        (resource.RLIMIT_NOFILE, limits["open_files"]),
        (resource.RLIMIT_FSIZE, limits["file_size_mb"] * mb),
        (resource.RLIMIT_CPU, limits["cpu_seconds"]),
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_NICE, 0),  # no way back up from a lowered CPU policy
    ]
    for res, value in table:
        soft, hard = resource.getrlimit(res)
        new = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(res, (new, new))


def set_cpu_policy(name: str) -> str:
    """Put this process (and so all it starts) under a scheduling policy; returns the one in force.

    Lowering priority needs no privilege, and nothing below may raise it again (that would
    need CAP_SYS_NICE in the host's namespace). A refusal keeps the current policy.
    """
    policy = {"batch": getattr(os, "SCHED_BATCH", None), "idle": getattr(os, "SCHED_IDLE", None)}.get(name)
    if policy is None:
        return "normal"
    try:
        os.sched_setscheduler(0, policy, os.sched_param(0))
    except (OSError, AttributeError):
        return "normal"
    return name


def drop_capabilities() -> None:
    for cap in range(64):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() == errno.EINVAL:
            break
    header = struct.pack("II", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = b"\0" * 24
    hdr = ctypes.create_string_buffer(header)
    buf = ctypes.create_string_buffer(data)
    nr = {"x86_64": 126, "aarch64": 91}.get(os.uname().machine)
    if nr is not None:
        libc.syscall(nr, hdr, buf)


# Landlock -------------------------------------------------------------------------
LL_EXECUTE, LL_WRITE_FILE, LL_READ_FILE, LL_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
LL_WRITE_ALL = sum(1 << i for i in (1, 4, 5, 6, 7, 8, 9, 10, 11, 12))  # write, remove, make_*
LL_REFER, LL_TRUNCATE = 1 << 13, 1 << 14


# Landlock scopes (ABI 6): a domain's processes may not signal, nor connect to abstract
# unix sockets of, processes outside it.
LL_SCOPE_ABSTRACT_UNIX, LL_SCOPE_SIGNAL = 1 << 0, 1 << 1


def landlock_abi() -> int:
    """The kernel's Landlock ABI version (0: none)."""
    return max(0, int(libc.syscall(444, None, 0, 1)))  # LANDLOCK_CREATE_RULESET_VERSION


def landlock_ruleset(exec_paths, write_paths: list, scoped: bool = False, read_paths=None):
    """A Landlock ruleset: execute only from ``exec_paths`` (None: leave execution alone),
    write only beneath ``write_paths``, read only beneath ``read_paths`` (None: leave reading
    alone; when given, ``write_paths`` are readable too); (fd, abi), or (None, 0) when the
    kernel has none.

    ``scoped`` (ABI >= 6): a domain made from it is a wall as well: its processes can
    neither signal nor reach the abstract unix sockets of any process outside it.
    Together with Landlock's ptrace rule (no process may ptrace, read the memory of, or
    open the fds of a process in an outer or sibling domain), a scoped domain makes every
    process beside and above it unreachable.

    The fd can enforce the ruleset any number of times (:func:`landlock_restrict`), also
    after seccomp forbids creating rulesets: each enforcement makes a new domain.
    """
    abi = landlock_abi()
    if abi < 1:
        return None, 0
    handled = (LL_EXECUTE if exec_paths is not None else 0) | LL_WRITE_ALL
    read_rights = LL_READ_FILE | LL_READ_DIR if read_paths is not None else 0
    handled |= read_rights
    if abi >= 2:
        handled |= LL_REFER
    if abi >= 3:
        handled |= LL_TRUNCATE
    if scoped and abi >= 6:  # struct landlock_ruleset_attr {handled_access_fs, handled_access_net, scoped}
        attr = struct.pack("QQQ", handled, 0, LL_SCOPE_ABSTRACT_UNIX | LL_SCOPE_SIGNAL)
    else:
        attr = struct.pack("Q", handled)
    fd = libc.syscall(444, ctypes.c_char_p(attr), len(attr), 0)
    if fd < 0:
        return None, 0
    try:
        import fcntl
        fcntl.fcntl(fd, fcntl.F_SETFD, fcntl.FD_CLOEXEC)
        write_rights = LL_WRITE_ALL | (LL_REFER if abi >= 2 else 0) | (LL_TRUNCATE if abi >= 3 else 0)
        targets = [(p, LL_EXECUTE) for p in exec_paths or ()] + [(p, write_rights | read_rights)
                                                                 for p in write_paths]
        targets += [(p, read_rights) for p in read_paths or ()]
        if read_paths is not None:  # every folder can be listed (`ls /`, `find /`); files are read only
            targets.append(("/", LL_READ_DIR))  # beneath read_paths (so not the template's contents)
        for path, rights in targets:
            try:
                pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                is_dir = os.path.isdir(path)
                allowed = rights if is_dir else rights & (LL_EXECUTE | LL_WRITE_FILE | LL_TRUNCATE | LL_READ_FILE)
                rule = struct.pack("=Qi", allowed, pfd)
                _check(0 if libc.syscall(445, fd, 1, ctypes.c_char_p(rule), 0) == 0 else -1,
                       "landlock_add_rule " + path)
            finally:
                os.close(pfd)
    except BaseException:
        os.close(fd)
        raise
    return fd, int(abi)


def landlock_restrict(fd: int) -> None:
    """Enforce a ruleset on this thread (and all it starts from now on): a new, nested domain."""
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    _check(0 if libc.syscall(446, fd, 0) == 0 else -1, "landlock_restrict_self")


def apply_landlock(exec_paths, write_paths: list, scoped: bool = False) -> int:
    """:func:`landlock_ruleset` enforced at once on this process. Layers stack: each call can
    only take rights away. Returns the ABI version applied, 0 when the kernel has no Landlock."""
    fd, abi = landlock_ruleset(exec_paths, write_paths, scoped)
    if fd is None:
        return 0
    try:
        landlock_restrict(fd)
    finally:
        os.close(fd)
    return abi


# seccomp ---------------------------------------------------------------------------
# Syscalls an agent never needs and that open kernel attack surface or let it
# leave its namespaces. Numbers per architecture (asm/unistd_64.h).
DENY_X86_64 = {
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "mount": 165,
    "umount2": 166, "pivot_root": 155, "chroot": 161, "unshare": 272, "setns": 308,
    "bpf": 321, "perf_event_open": 298, "keyctl": 250, "add_key": 248, "request_key": 249,
    "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "kexec_load": 246, "kexec_file_load": 320, "init_module": 175, "finit_module": 313,
    "delete_module": 176, "open_by_handle_at": 304, "name_to_handle_at": 303,
    "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "move_mount": 429,
    "open_tree": 428, "mount_setattr": 442, "swapon": 167, "swapoff": 168, "reboot": 169,
    "syslog": 103, "acct": 163, "settimeofday": 164, "clock_settime": 227, "adjtimex": 159,
    "clock_adjtime": 305, "quotactl": 179, "lookup_dcookie": 212, "vhangup": 153,
    "iopl": 172, "ioperm": 173, "modify_ldt": 154, "uselib": 134, "personality": 135,
    "landlock_create_ruleset": 444, "pidfd_getfd": 438, "kcmp": 312,
}
DENY_AARCH64 = {
    "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "mount": 40,
    "umount2": 39, "pivot_root": 41, "chroot": 51, "unshare": 97, "setns": 268, "bpf": 280,
    "perf_event_open": 241, "keyctl": 219, "add_key": 217, "request_key": 218,
    "userfaultfd": 282, "io_uring_setup": 425, "io_uring_enter": 426,
    "io_uring_register": 427, "kexec_load": 104, "kexec_file_load": 294, "init_module": 105,
    "finit_module": 273, "delete_module": 106, "open_by_handle_at": 265,
    "name_to_handle_at": 264, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "move_mount": 429, "open_tree": 428, "mount_setattr": 442, "swapon": 224, "swapoff": 225,
    "reboot": 142, "syslog": 116, "acct": 89, "settimeofday": 170, "clock_settime": 112,
    "adjtimex": 171, "clock_adjtime": 266, "quotactl": 60, "lookup_dcookie": 18,
    "vhangup": 58, "personality": 92, "landlock_create_ruleset": 444, "pidfd_getfd": 438,
    "kcmp": 272,
}
# (audit arch, deny-list, socket, clone, clone3, memfd_create)
ARCH = {"x86_64": (0xC000003E, DENY_X86_64, 41, 56, 435, 319),
        "aarch64": (0xC00000B7, DENY_AARCH64, 198, 220, 435, 279)}
MFD_NOEXEC_SEAL = 0x0008
AF_DENY_ALWAYS = (17, 15, 38, 40, 31, 36, 42, 44)  # packet, key, alg, vsock, bluetooth, ieee802154, qipcrtr, xdp
AF_INET_FAMILIES = (2, 10)
CLONE_NS_FLAGS = 0x10000000 | 0x00020000 | 0x04000000 | 0x08000000 | 0x20000000 | 0x40000000 | 0x02000000 | 0x00000080


def seccomp_program(machine: str, deny_inet: bool) -> bytes:
    """A classic-BPF deny-list filter: EPERM for the syscalls above, for sockets
    of dangerous families, for clone() with namespace flags; ENOSYS for clone3
    (so libc falls back to clone, whose flags a filter can inspect) and for
    memfd_create without MFD_NOEXEC_SEAL (an executable memfd would run any
    binary the agent writes into it, past noexec mounts and Landlock; callers
    that see ENOSYS fall back to files in the noexec /tmp or /dev/shm)."""
    audit_arch, deny, nr_socket, nr_clone, nr_clone3, nr_memfd = ARCH[machine]
    LD, JEQ, JSET, RET = 0x20, 0x15, 0x45, 0x06
    ALLOW, KILL = 0x7FFF0000, 0x80000000
    EPERM, ENOSYS, EAFNOSUPPORT = 0x00050000 | 1, 0x00050000 | 38, 0x00050000 | 97
    prog = []

    def ins(code, jt, jf, k):
        prog.append(struct.pack("HBBI", code, jt, jf, k & 0xFFFFFFFF))

    ins(LD, 0, 0, 4)                      # arch
    ins(JEQ, 1, 0, audit_arch)
    ins(RET, 0, 0, KILL)
    ins(LD, 0, 0, 0)                      # nr
    if machine == "x86_64":               # the x32 ABI aliases every syscall
        ins(0x35, 0, 1, 0x40000000)       # jge
        ins(RET, 0, 0, EPERM)
    for nr in sorted(set(deny.values())):
        ins(JEQ, 0, 1, nr)
        ins(RET, 0, 0, EPERM)
    ins(JEQ, 0, 1, nr_clone3)
    ins(RET, 0, 0, ENOSYS)
    # memfd_create(name, flags): only sealed-noexec memfds
    ins(JEQ, 0, 4, nr_memfd)
    ins(LD, 0, 0, 24)                     # args[1] low 32 bits
    ins(JSET, 1, 0, MFD_NOEXEC_SEAL)
    ins(RET, 0, 0, ENOSYS)
    ins(RET, 0, 0, ALLOW)
    # clone(flags, ...): refuse namespace flags
    ins(JEQ, 0, 4, nr_clone)
    ins(LD, 0, 0, 16)                     # args[0] low 32 bits
    ins(JSET, 0, 1, CLONE_NS_FLAGS)
    ins(RET, 0, 0, EPERM)
    ins(RET, 0, 0, ALLOW)
    # socket(family, ...)
    families = list(AF_DENY_ALWAYS) + (list(AF_INET_FAMILIES) if deny_inet else [])
    ins(JEQ, 0, 1 + 2 * len(families), nr_socket)
    ins(LD, 0, 0, 16)
    for fam in families:
        ins(JEQ, 0, 1, fam)
        ins(RET, 0, 0, EAFNOSUPPORT)
    ins(RET, 0, 0, ALLOW)
    return b"".join(prog)


def apply_seccomp(deny_inet: bool) -> bool:
    machine = os.uname().machine
    if machine not in ARCH:
        return False
    code = seccomp_program(machine, deny_inet)
    buf = ctypes.create_string_buffer(code)
    fprog = struct.pack("HxxxxxxQ", len(code) // 8, ctypes.addressof(buf))
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    pbuf = ctypes.create_string_buffer(fprog)
    _check(libc.prctl(PR_SET_SECCOMP, 2, ctypes.addressof(pbuf), 0, 0), "seccomp")
    return True


# --------------------------------------------------------------------------- shell

class Shell:
    """The agent's persistent, non-interactive bash.

    bash reads its script on stdin, per command ``eval '<cmd>' </dev/null >&62 2>&1
    62>&-`` and ``echo <nonce> $?``. The command's stdout and stderr are the output pipe
    (the shell's fd 62). The shell's own stdout is the status pipe, which the command
    never holds (eval's redirection covers it, and is undone even after an ``exec >file``
    inside): the exit status comes back there with a per-command nonce. The shell's
    stderr is /dev/null: what bash says between commands (that a job the sweep killed is
    gone, which it reports whenever it notices) never lands in a command's output.
    Each redirection costs bash a handful of syscalls per command, and it reads its
    script byte by byte: the script is as short as it can be.
    """

    def __init__(self, env: dict, layer_fd=None) -> None:
        self.env = env
        # With Landlock, the shell (and all the agent runs) gets one more layer: writes only
        # to the write paths (not the runtime's private state), in a scoped domain of its own
        # (``shell_layer``). ``layer_fd`` is that ruleset, made before seccomp closed the door.
        self.layer_fd = layer_fd
        self.proc: Child | None = None
        self.start()

    def spawn(self) -> tuple:
        """A fresh ``bash`` laid out as the persistent one: (process, script fd, output fd, status fd),
        the last two non-blocking. Its fd 62 is the output pipe, its stdout the status pipe."""
        cmd_r, cmd_w = _pipe_above(62)
        out_r, out_w = _pipe_above(62)
        st_r, st_w = _pipe_above(62)
        try:
            proc = spawn_bash(self.env, cmd_r, st_w, out_w, self.layer_fd)
        finally:
            for fd in (out_w, cmd_r, st_w):
                os.close(fd)
        for fd in (out_r, st_r):
            os.set_blocking(fd, False)
        return proc, cmd_w, out_r, st_r

    def start(self) -> None:
        self.proc, self.in_fd, self.out_fd, self.status_fd = self.spawn()
        self.poller = select.poll()
        for fd in (self.out_fd, self.status_fd):
            self.poller.register(fd, select.POLLIN)
        self.children_fd = _open_children(self.proc.pid)

    def close_fds(self) -> None:
        for fd in (self.in_fd, self.out_fd, self.status_fd, self.children_fd):
            try:
                os.close(fd)
            except (OSError, TypeError):
                pass

    def stop(self) -> None:
        """End the shell and every process of the session but the runtime."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.close_fds()
        kill_all_but_me(set())

    def restart(self) -> None:
        self.stop()
        self.start()


class Child:
    """A process this runtime started: what it used of ``subprocess.Popen`` (``pid``, ``returncode``,
    ``poll``, ``wait``, ``kill``), with Popen's answers (a child reaped elsewhere, by :func:`reap`,
    reads as exit status 0; a kill never signals a pid already reaped)."""

    def __init__(self, pid: int) -> None:
        self.pid, self.returncode = pid, None

    def _wait(self, flags: int):
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, flags)
            except ChildProcessError:
                pid, status = self.pid, 0
            if pid == self.pid:
                self.returncode = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        return self.returncode

    def poll(self):
        return self._wait(os.WNOHANG)

    def wait(self):
        return self._wait(0)

    def kill(self) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def spawn_bash(env: dict, stdin_fd: int, stdout_fd: int, fd62: int, layer_fd=None) -> Child:
    """``bash --noprofile --norc`` (found on ``env``'s PATH) in /workspace, stdin and stdout the
    given fds, stderr /dev/null, ``fd62`` as its fd 62, no other fd of ours, the signal dispositions
    a fresh process has, and, with ``layer_fd``, under that Landlock ruleset (a domain of its own):
    what ``subprocess.Popen(close_fds=True, pass_fds=(62,), preexec_fn=...)`` did, fork and exec
    without the module (a cold start's import). Raises OSError when bash cannot start, as Popen did:
    the child reports a failure on a close-on-exec pipe that exec closes."""
    # where exec looks for bash: env's PATH (os.execvpe's search, without its import of `warnings`)
    candidates = [os.path.join(d, "bash") for d in env.get("PATH", os.defpath).split(os.pathsep)]
    err_r, err_w = _pipe_above(62)  # close-on-exec, and clear of the fds placed below
    try:
        pid = os.fork()
    except BaseException:
        os.close(err_r)
        os.close(err_w)
        raise
    if pid == 0:  # the child: nothing here returns, whatever happens
        try:
            null = os.open(os.devnull, os.O_RDWR)
            for src, dst in ((stdin_fd, 0), (stdout_fd, 1), (null, 2), (fd62, 62)):
                os.dup2(src, dst)  # (inheritable, the only fds bash gets)
            os.chdir(WORKSPACE)
            for name in ("SIGPIPE", "SIGXFZ", "SIGXFSZ"):  # Popen's restore_signals: Python ignores these
                if hasattr(signal, name):
                    signal.signal(getattr(signal, name), signal.SIG_DFL)
            if layer_fd is not None:
                landlock_restrict(layer_fd)
            keep = (0, 1, 2, 62, err_w)
            try:
                fds = [int(name) for name in os.listdir("/proc/self/fd")]
            except OSError:
                fds = range(3, os.sysconf("SC_OPEN_MAX"))
            for fd in fds:
                if fd not in keep:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            first_error = last_error = None
            for path in candidates:  # os.execvpe's loop: a missing one is skipped, any other error kept
                try:
                    os.execve(path, ["bash", "--noprofile", "--norc"], env)
                except (FileNotFoundError, NotADirectoryError) as e:
                    last_error = e
                except OSError as e:
                    last_error = e
                    first_error = first_error or e
            raise first_error or last_error or FileNotFoundError(errno.ENOENT, "no bash")
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            try:
                os.write(err_w, ("%d:%s: %s" % (getattr(e, "errno", None) or 0, type(e).__name__, e)).encode(
                    "utf-8", "replace")[:4000])
            finally:
                os._exit(127)
        os._exit(127)
    os.close(err_w)
    try:
        report = b""
        while True:
            chunk = os.read(err_r, 4096)
            if not chunk:
                break
            report += chunk
    finally:
        os.close(err_r)
    if report:
        os.waitpid(pid, 0)
        code, _, message = report.decode("utf-8", "replace").partition(":")
        raise OSError(int(code) if code.isdigit() else 0, "cannot start the shell: " + message)
    return Child(pid)


def shell_ruleset(write_paths: list, read_paths=None):
    """The Landlock ruleset of every shell (fd, or None): writes only beneath ``write_paths``
    (not the runtime's private state), reads only beneath ``read_paths`` (when given: not
    /.swe, where the template, the runtime's state and its script are), and scoped where
    the kernel can, so that each shell it is enforced on lives in a domain of its own:
    nothing a shell starts can signal, ptrace or open the fds of the runtime or of another
    shell's processes."""
    fd, _ = landlock_ruleset(None, write_paths, scoped=True, read_paths=read_paths)
    return fd


def readable_roots() -> list:
    """Where every shell may read files: beneath each entry of / but /.swe (the pristine template,
    the runtime's private state, its script and interpreter). Folders can be listed everywhere
    (their names are the workspace's own); a file under /.swe cannot be opened for reading."""
    return ["/" + name for name in sorted(os.listdir("/")) if name != ".swe"]


def _pipe_above(fd: int) -> tuple:
    """os.pipe() with both ends numbered above ``fd`` (so the shell's fds stay free to place)."""
    import fcntl

    ends = []
    for end in os.pipe():
        ends.append(fcntl.fcntl(end, fcntl.F_DUPFD_CLOEXEC, fd + 1))
        os.close(end)
    return tuple(ends)


# Set by setup() once we are a child subreaper (orphans of the agent's processes are
# re-parented to us): an fd on our own /proc children file. None: every check sweeps.
OWN_CHILDREN_FD = [None]


def _open_children(pid: int):
    """An fd on /proc/<pid>/task/<pid>/children (re-read with pread), or None."""
    try:
        return os.open("/proc/%d/task/%d/children" % (pid, pid), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None


def _children(fd) -> list:
    # One pread from 0: the kernel renders the whole list at once, afresh on every read.
    return os.pread(fd, 65536, 0).split()


def only_shell_alive(shell_pid: int, shell_children_fd) -> bool:
    """True when provably no process but the shell runs below us (then a sweep is moot).

    We are a child subreaper, so every process the agent starts stays in our subtree:
    below the shell, or re-parented to us when its parent dies. Processes only move up
    (shell subtree -> us), so the shell's children are read first: if it has none, nothing
    can move to us afterwards, and our own children must then be the shell alone.
    Zombies count as children (a sweep then reaps them). Any doubt (no /proc children
    file, not a subreaper) answers False, and the caller sweeps.
    """
    own = OWN_CHILDREN_FD[0]
    if own is None or shell_children_fd is None:
        return False
    try:
        return not _children(shell_children_fd) and _children(own) == [b"%d" % shell_pid]
    except (OSError, ValueError):
        return False


def kill_background(shell: "Shell") -> int:
    """After a command: kill whatever it left running besides the shell."""
    pid = shell.proc.pid
    return 0 if only_shell_alive(pid, shell.children_fd) else kill_all_but_me({pid})


def kill_all_but_me(keep: set) -> int:
    """SIGKILL every process of this pid namespace except init, us and ``keep``.

    Sweeps until a pass finds nothing (a fork bomb refills the table while we
    sweep, but only up to the pids limit). If that does not converge, kill(-1)
    ends everything we may signal in one atomic kernel pass, the shell included
    (the caller then finds the shell dead and starts a fresh one).
    """
    me, killed = os.getpid(), 0
    for sweep in range(200):
        found = 0
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            pid = int(name)
            if pid in (1, me) or pid in keep:
                continue
            try:
                with open("/proc/%d/stat" % pid, "rb") as f:
                    if f.read().rsplit(b")", 1)[-1].split()[0] in (b"Z", b"X"):
                        continue  # already dead, waiting for its parent to reap it
                os.kill(pid, signal.SIGKILL)
                found += 1
            except (ProcessLookupError, FileNotFoundError, IndexError):
                pass
            except PermissionError:
                pass
        killed += found
        reap()
        if not found:
            return killed
    try:
        os.kill(-1, signal.SIGKILL)
    except OSError:
        pass
    reap()
    return killed


def reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


class OutputBuffer:
    """Keeps the head and the tail of a stream, counting everything."""

    def __init__(self, cap: int) -> None:
        self.cap, self.head, self.tail, self.total = cap, bytearray(), bytearray(), 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self.cap // 2 - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > self.cap // 2:
                del self.tail[: len(self.tail) - self.cap // 2]

    def text(self) -> tuple:
        dropped = self.total - len(self.head) - len(self.tail)
        if dropped <= 0:
            return (bytes(self.head + self.tail).decode("utf-8", "replace"), False)
        marker = "\n[... output truncated: %d bytes omitted of %d ...]\n" % (dropped, self.total)
        return (bytes(self.head).decode("utf-8", "replace") + marker
                + bytes(self.tail).decode("utf-8", "replace"), True)


def _write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to a blocking fd."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


_B64_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def b64encode(data: bytes) -> str:
    """base64.b64encode(data).decode("ascii")."""
    import binascii

    return binascii.b2a_base64(data, newline=False).decode("ascii")


def b64decode(s: object) -> bytes:
    """base64.b64decode(s, validate=True): the alphabet only, at most two "=" at the end, else
    ValueError (binascii.Error is one), TypeError for what is neither text nor bytes."""
    import binascii

    if isinstance(s, str):
        try:
            s = s.encode("ascii")
        except UnicodeEncodeError:
            raise ValueError("string argument should contain only ASCII characters") from None
    else:
        try:
            s = memoryview(s).tobytes()
        except TypeError:
            raise TypeError("argument should be a bytes-like object or ASCII string, not %r"
                            % type(s).__name__) from None
    body = s.rstrip(b"=")
    if len(s) - len(body) > 2 or body.translate(None, _B64_ALPHABET):
        raise binascii.Error("Non-base64 digit found")
    return binascii.a2b_base64(s)


def shell_quote(s: str) -> str:
    return "'" + s.replace("'", "'\"'\"'") + "'"


# inotify ------------------------------------------------------------------------------
IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE, IN_MOVED_FROM, IN_MOVED_TO = 0x2, 0x4, 0x8, 0x40, 0x80
IN_CREATE, IN_DELETE, IN_DELETE_SELF, IN_MOVE_SELF = 0x100, 0x200, 0x400, 0x800
IN_Q_OVERFLOW, IN_IGNORED, IN_ISDIR = 0x4000, 0x8000, 0x40000000
IN_ONLYDIR, IN_DONT_FOLLOW = 0x01000000, 0x02000000
IN_WATCHED = (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
              | IN_DELETE_SELF | IN_MOVE_SELF)
_EVENT = struct.Struct("iIII")


class ChangeWatcher:
    """inotify over a copied workspace (outside its top-level .git): did anything change?

    A copied workspace has no overlay upper layer whose few entries tell what changed, and
    walking a whole repository after every command costs milliseconds; a watch per
    directory costs one read. Writes through shared memory maps raise no inotify events,
    so this only feeds the `files_changed` hint (a trace diff skipped): the diff op keeps
    its own walk. Any failure (watch limit reached, queue overflow) raises OSError or
    answers True; the caller then walks.
    """

    def __init__(self, root: str) -> None:
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.fd, self.root, self.root_wd = fd, root, -1
        try:
            self.sync()
        except OSError:
            os.close(fd)
            raise

    def _add(self, path: str) -> int:
        wd = libc.inotify_add_watch(self.fd, path.encode("utf-8", "surrogateescape"),
                                    IN_WATCHED | IN_ONLYDIR | IN_DONT_FOLLOW)
        if wd < 0:
            err = ctypes.get_errno()
            if err in (errno.ENOENT, errno.ENOTDIR):  # gone or replaced meanwhile: no watch needed
                return -1
            raise OSError(err, "inotify_add_watch %s: %s" % (path, os.strerror(err)))
        return wd

    def sync(self) -> None:
        """Watch every directory of the tree (re-adding a watched one is a no-op)."""
        self.root_wd = self._add(self.root)
        stack = [self.root]
        while stack:
            top = stack.pop()
            try:
                with os.scandir(top) as it:
                    dirs = [e.path for e in it if e.is_dir(follow_symlinks=False)
                            and not (top == self.root and e.name == ".git")]
            except OSError:
                continue
            for d in dirs:
                if self._add(d) >= 0:
                    stack.append(d)

    def changed(self) -> bool:
        """Whether anything changed since the last call; new directories get watched."""
        changed = resync = False
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            pos = 0
            while pos + _EVENT.size <= len(data):
                wd, mask, _cookie, size = _EVENT.unpack_from(data, pos)
                name = data[pos + _EVENT.size: pos + _EVENT.size + size].rstrip(b"\0")
                pos += _EVENT.size + size
                if mask & IN_Q_OVERFLOW:
                    changed = resync = True
                elif mask & IN_IGNORED or (wd == self.root_wd and name == b".git"):
                    continue
                else:
                    changed = True
                    if mask & IN_ISDIR and mask & (IN_CREATE | IN_MOVED_TO):
                        resync = True
        if resync:
            self.sync()
        return changed


libc.inotify_init1.argtypes = [ctypes.c_int]
libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]


RESOLVE_NO_MAGICLINKS, RESOLVE_BENEATH = 0x02, 0x08


def openat2(dirfd: int, path: str, flags: int, mode: int = 0) -> int:
    """openat2(2) with RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS; raises OSError."""
    how = struct.pack("QQQ", flags, mode, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)
    fd = libc.syscall(437, ctypes.c_int(dirfd), ctypes.c_char_p(path.encode("utf-8", "surrogateescape")),
                      ctypes.c_char_p(how), ctypes.c_size_t(len(how)))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    return int(fd)


def _probe_openat2() -> bool:
    root = os.open("/", os.O_PATH)
    try:
        os.close(openat2(root, ".", os.O_PATH))
        return True
    except OSError:
        return False
    finally:
        os.close(root)


_HAS_OPENAT2 = _probe_openat2()


class Runtime:
    def __init__(self, cfg: dict) -> None:
        self.cfg = cfg
        self.ws_fd = os.open(WORKSPACE, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        self.shell = Shell(cfg["env"], cfg.get("_shell_ruleset"))
        # tmpfs sizes a directory by its entries (BOGO_DIRENT_SIZE each, 2 for . and ..), so an
        # untouched upper layer is seen with one stat. Verified on the empty upper here, at start;
        # where a kernel reports sizes otherwise, every fingerprint walks.
        self._empty_upper_size = None
        if cfg["mode"] == "overlay":
            st = os.stat(cfg["_scan_root"])
            if st.st_nlink == 2 and not os.listdir(cfg["_scan_root"]):
                self._empty_upper_size = st.st_size
        self.watcher: ChangeWatcher | None = None
        if cfg["mode"] != "overlay":
            try:
                self.watcher = ChangeWatcher(WORKSPACE)
            except OSError:
                pass  # no inotify (or too many directories for the watch limit): walk
        self._uid, self._gids = os.geteuid(), set(os.getgroups()) | {os.getegid()}
        self._last_fp = self.fingerprint()
        self._diff_ready = False
        lim = cfg["limits"]
        self._default_timeout = float(lim["command_timeout_s"])
        self._cap, self._kill_at = int(lim["max_output_bytes"]), int(lim["output_kill_bytes"])
        self._sweep = bool(cfg.get("kill_background", True))
        self._jobs_killed = False  # a sweep killed processes since the last command

    # -- run ---------------------------------------------------------------------
    def op_run(self, req: dict) -> dict:
        result = self._run(req)
        if self.watcher is not None:
            try:
                result["files_changed"] = self.watcher.changed()
                return result
            except OSError:
                self.watcher = None  # from now on: walk
                result["files_changed"] = True
                self._last_fp = self.fingerprint()
                return result
        fp = self.fingerprint()
        result["files_changed"] = fp != self._last_fp
        self._last_fp = fp
        return result

    def _run(self, req: dict) -> dict:
        cmd = req.get("command")
        if not isinstance(cmd, str):
            raise RuntimeFailure("invalid_arguments", "command must be a string")
        timeout = float(req.get("timeout_s") or self._default_timeout)
        kill_at = self._kill_at
        sh = self.shell
        nonce = os.urandom(8).hex()
        nonce_b = nonce.encode()
        # bash reports jobs killed by a signal once it notices, and may notice during the
        # next eval (whose stderr is the output). After a sweep killed some, every job is
        # dead: `wait` reaps them and `jobs` takes the notices, both into /dev/null. Without
        # sweeps, `jobs` before every command (a job that dies later may still be reported).
        if self._jobs_killed:
            flush = "wait; jobs >/dev/null\n"
        else:
            flush = "" if self._sweep else "jobs >/dev/null\n"
        self._jobs_killed = False
        # 62 closed for the command: so that even `exec 62>file` there is undone after it.
        script = "%seval %s </dev/null >&62 2>&1 62>&-\necho %s $?\n" % (flush, shell_quote(cmd), nonce)
        start = time.monotonic()
        try:
            data = script.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError as e:  # a lone surrogate: no shell can hold it
            raise RuntimeFailure("invalid_arguments", "command is not valid Unicode text (position %d)" % e.start)
        out = OutputBuffer(max(1024, int(req.get("output_limit") or self._cap)))
        try:  # a shell that died since the last command shows here (EPIPE) and is replaced
            _write_all(sh.in_fd, data)
        except OSError:
            sh.restart()
            return self._result(out, None, "shell_exited", start)
        status_buf = b""
        deadline = start + timeout
        state = None
        while True:
            now = time.monotonic()
            if now >= deadline and state is None:
                kill_all_but_me({sh.proc.pid})
                self._jobs_killed = True
                state, deadline = "timeout", now + 2.0
            elif now >= deadline:  # the shell did not report after the kill: replace it
                self._drain(out)
                sh.restart()
                return self._result(out, None, state, start)
            ready = [fd for fd, _ in sh.poller.poll(max(0.0, min(deadline - now, 0.5)) * 1000)]
            if sh.out_fd in ready:
                self._read_into(sh.out_fd, out)
                if out.total > kill_at and state is None:
                    kill_all_but_me({sh.proc.pid})
                    self._jobs_killed = True
                    state, deadline = "output_limit", time.monotonic() + 2.0
            if sh.status_fd in ready:
                try:
                    chunk = os.read(sh.status_fd, 4096)
                except BlockingIOError:
                    chunk = b"x"
                if not chunk:  # the shell exited (exit, exec, killed)
                    self._drain(out)
                    code = sh.proc.wait()
                    sh.restart()
                    return self._result(out, code, state or "shell_exited", start)
                status_buf += chunk
                # Anything else the shell prints outside commands (a trap's output, say)
                # lands here too: only this command's nonce line counts.
                while b"\n" in status_buf:
                    line, status_buf = status_buf.split(b"\n", 1)
                    parts = line.split()
                    if len(parts) == 2 and parts[0] == nonce_b and parts[1].lstrip(b"-").isdigit():
                        if self._sweep and kill_background(sh):
                            self._jobs_killed = True
                        self._drain(out)
                        code = int(parts[1])
                        if state is None:
                            state = "ok" if code == 0 else "nonzero_exit"
                        return self._result(out, code, state, start)
                if len(status_buf) > 65536:  # no newline in sight: keep only a possible start
                    status_buf = status_buf[-64:]
            if not ready and sh.proc.poll() is not None:
                self._drain(out)
                code = sh.proc.returncode
                sh.restart()
                return self._result(out, code, state or "shell_exited", start)

    def op_isolated(self, req: dict) -> dict:
        """Run ``command`` as the only shell of the sandbox, walled off from this runtime.

        The persistent shell is stopped (with everything it runs) and a fresh
        ``bash --noprofile --norc`` takes its place for this one command: the same environment,
        /workspace, the same fd layout, the same Landlock layer, in a domain of its own (scoped
        where the kernel can), so what it starts cannot signal, ptrace or open the fds of this
        runtime, and sees the process tree an agent's own command sees. Its output goes to a pipe
        that only this process reads; past ``output_limit`` bytes it is dropped from the middle
        (head and tail kept, counted), never a reason to stop the command. When the shell exits,
        or at the deadline, every process left is killed and a fresh persistent shell starts. The
        result is what this process saw: the shell's exit status (``waitpid``), the output, the
        timing; nothing the command does can write it.
        """
        cmd = req.get("command")
        if not isinstance(cmd, str):
            raise RuntimeFailure("invalid_arguments", "command must be a string")
        timeout = float(req.get("timeout_s") or self._default_timeout)
        out = OutputBuffer(max(1024, int(req.get("output_limit") or self._cap)))
        try:  # the persistent shell's script for one command, less the status line
            script = ("eval %s </dev/null >&62 2>&1 62>&-\n" % shell_quote(cmd)).encode("utf-8", "surrogateescape")
        except UnicodeEncodeError as e:
            raise RuntimeFailure("invalid_arguments", "command is not valid Unicode text (position %d)" % e.start)
        sh = self.shell
        sh.stop()
        start = time.monotonic()
        proc, in_w, out_r, st_r = sh.spawn()
        try:
            _write_all(in_w, script)  # bash reads it, then meets EOF and exits with the command's status
        except OSError:
            pass
        os.close(in_w)
        poller = select.poll()
        poller.register(out_r, select.POLLIN)
        poller.register(st_r, select.POLLIN)
        deadline, status, code = start + timeout, None, None
        try:
            while code is None:
                now = time.monotonic()
                if now >= deadline:
                    status = "timeout"
                    kill_all_but_me(set())
                    code = proc.wait()
                    break
                for fd, _ in poller.poll(max(0.0, min(deadline - now, 0.2)) * 1000):
                    if fd == out_r:
                        self._read_into(out_r, out)
                    else:
                        self._read_into(st_r, OutputBuffer(1024))  # nothing should come: discarded
                code = proc.poll()
            kill_all_but_me(set())  # what the command left running (it may hold the pipe)
            self._read_into(out_r, out)
        finally:
            for fd in (out_r, st_r):
                os.close(fd)
            reap()
            sh.start()
        if status is None:
            status = "ok" if code == 0 else "nonzero_exit"
        self._jobs_killed = False
        self._last_fp = None  # the workspace may have changed: the next step's fingerprint is fresh
        return self._result(out, code, status, start)

    @staticmethod
    def _read_into(fd: int, out: OutputBuffer) -> None:
        for _ in range(64):
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                return
            out.add(data)
            if len(data) < 65536:  # the pipe is empty (or at EOF) for now
                return

    def _drain(self, out: OutputBuffer) -> None:
        """Read what the command left in the pipe (asking poll first: no EAGAIN to raise)."""
        sh = self.shell
        if any(fd == sh.out_fd for fd, _ in sh.poller.poll(0)):
            self._read_into(sh.out_fd, out)

    @staticmethod
    def _result(out: OutputBuffer, code, status: str, start: float) -> dict:
        text, truncated = out.text()
        return {"output": text, "exit_code": code, "status": status, "truncated": truncated,
                "output_bytes": out.total, "duration_s": round(time.monotonic() - start, 6)}

    # -- files -------------------------------------------------------------------
    @staticmethod
    def resolve(path: object, must_exist: bool) -> str:
        if not isinstance(path, str) or not path or "\0" in path:
            raise RuntimeFailure("bad_path", "path must be a non-empty string", reason="bad_path")
        full = os.path.normpath(path if path.startswith("/") else os.path.join(WORKSPACE, path))
        if full != WORKSPACE and not full.startswith(WORKSPACE + "/"):
            raise RuntimeFailure("bad_path", "%s is outside %s" % (path, WORKSPACE), reason="outside_workspace")
        # Symlinks may point anywhere inside the workspace, never out of it.
        probe = full
        try:
            while not os.path.lexists(probe):
                probe = os.path.dirname(probe)
            real = os.path.realpath(probe)
        except OSError as e:
            raise RuntimeFailure("bad_path", "cannot resolve %s: %s" % (path, e.strerror), reason="unreadable")
        if real != WORKSPACE and not real.startswith(WORKSPACE + "/"):
            raise RuntimeFailure("bad_path", "%s resolves outside %s" % (path, WORKSPACE), reason="outside_workspace")
        if must_exist and probe != full:
            raise RuntimeFailure("bad_path", "%s does not exist" % path, reason="not_found")
        return os.path.join(real, os.path.relpath(full, probe)) if probe != full else real

    # Files are opened with openat2(RESOLVE_BENEATH) from a descriptor of
    # /workspace: the kernel refuses any resolution that leaves it (.., absolute
    # or escaping symlinks), with no window between a check and the open.
    # Kernels without openat2 (< 5.6) fall back to resolve() + O_NOFOLLOW.
    def _open(self, path: object, flags: int, mode: int = 0) -> int:
        full = self.resolve(path, must_exist=False) if not _HAS_OPENAT2 else None
        if full is not None:
            return os.open(full, flags | os.O_NOFOLLOW, mode)
        if not isinstance(path, str) or not path or "\0" in path:
            raise RuntimeFailure("bad_path", "path must be a non-empty string", reason="bad_path")
        norm = os.path.normpath(path if path.startswith("/") else os.path.join(WORKSPACE, path))
        if norm != WORKSPACE and not norm.startswith(WORKSPACE + "/"):
            raise RuntimeFailure("bad_path", "%s is outside %s" % (path, WORKSPACE), reason="outside_workspace")
        return openat2(self.ws_fd, os.path.relpath(norm, WORKSPACE), flags, mode)

    def _path_error(self, path: object, e: OSError, action: str) -> RuntimeFailure:
        reason = {errno.EXDEV: "outside_workspace", errno.ELOOP: "outside_workspace", errno.ENOENT: "not_found",
                  errno.ENOTDIR: "not_found", errno.EISDIR: "is_directory"}.get(e.errno, "unreadable")
        text = {"outside_workspace": "%s resolves outside %s" % (path, WORKSPACE),
                "not_found": "%s does not exist" % path, "is_directory": "%s is a directory" % path}.get(
                    reason, "cannot %s %s: %s" % (action, path, e.strerror))
        return RuntimeFailure("bad_path", text, reason=reason)

    def op_read(self, req: dict) -> dict:
        import stat as st

        path = req.get("path")
        limit = int(self.cfg["limits"]["max_file_read_bytes"])
        try:
            fd = self._open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as e:
            raise self._path_error(path, e, "open")
        try:
            mode = os.fstat(fd).st_mode
            if st.S_ISDIR(mode):
                raise RuntimeFailure("bad_path", "%s is a directory" % path, reason="is_directory")
            if not st.S_ISREG(mode):
                raise RuntimeFailure("bad_path", "%s is not a regular file" % path, reason="not_a_file")
            with os.fdopen(fd, "rb", closefd=False) as f:
                data = f.read(limit + 1)
        finally:
            os.close(fd)
        if len(data) > limit:
            raise RuntimeFailure("bad_path", "%s is larger than %d bytes" % (path, limit), reason="too_large")
        return {"data": b64encode(data)}

    def op_write(self, req: dict) -> dict:
        path = req.get("path")
        try:
            data = b64decode(req.get("data", ""))
        except (ValueError, TypeError):
            raise RuntimeFailure("invalid_arguments", "data must be base64")
        if len(data) > int(self.cfg["limits"]["max_file_write_bytes"]):
            raise RuntimeFailure("bad_path", "content is too large", reason="too_large")
        parent = os.path.dirname(path.rstrip("/")) if isinstance(path, str) else ""
        try:
            self._make_parents(parent)
            fd = self._open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        except OSError as e:
            raise self._path_error(path, e, "write")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return {"bytes": len(data)}

    def _make_parents(self, parent: str) -> None:
        """mkdir -p inside the workspace, each level created relative to a checked fd."""
        if not parent or parent in ("/", WORKSPACE, "."):
            return
        try:
            os.close(self._open(parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC))
            return
        except OSError as e:
            if e.errno != errno.ENOENT:
                raise
        self._make_parents(os.path.dirname(parent.rstrip("/")))
        grand = os.path.dirname(parent.rstrip("/"))
        dfd = self._open(grand, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC) if grand not in ("", "/", ".") else os.dup(self.ws_fd)
        try:
            os.mkdir(os.path.basename(parent.rstrip("/")), 0o755, dir_fd=dfd)
        except FileExistsError:
            pass
        finally:
            os.close(dfd)

    # -- diff --------------------------------------------------------------------
    def fingerprint(self) -> str:
        """A cheap digest of the workspace's state outside .git (ctime can't be forged).

        In overlay mode only the upper layer can differ from the base, so only it
        is walked (or, while it is empty, one stat); a copied workspace is walked whole.
        """
        return self._scan()[0]

    def _readable(self, st: os.stat_result, search: bool = False) -> bool:
        """Whether this process may read (and, for a directory, search) what ``st`` describes."""
        if st.st_uid == self._uid:
            bits = 0o400 | (0o100 if search else 0)
        elif st.st_gid in self._gids:
            bits = 0o040 | (0o010 if search else 0)
        else:
            bits = 0o004 | (0o001 if search else 0)
        return st.st_mode & bits == bits

    @staticmethod
    def _open_dir(root_fd: int, rel: str) -> int:
        """A directory below the scan root, never through a symbolic link out of it."""
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
        if _HAS_OPENAT2:
            return openat2(root_fd, rel or ".", flags)
        return os.open(rel or ".", flags, dir_fd=root_fd)

    def _scan(self) -> tuple:
        """One walk of the part of the workspace that can differ from the base.

        Returns ``(fingerprint, left_out, big, fatal)``: ``left_out`` lists ``(path, reason)`` for
        what a diff must leave out, from what the walk sees without opening a file: what git cannot
        read (an unreadable file or directory, a FIFO, a socket, a path past :data:`_PATH_LIMIT`) or
        must not be let near (a directory holding .git, which git would take for an embedded
        repository and whose .git it would follow, maybe to a FIFO; one whose .gitignore or
        .gitattributes is not a file). ``big``: the regular files over the diff limit (left out
        when untracked). ``fatal``: why no diff can be read at all (None: it can). A walk that
        could not look everywhere it should (out of fds, say) gives a fingerprint of its own,
        never equal to another: the diff is then read afresh.
        """
        import stat as S

        root, overlay = self.cfg["_scan_root"], self.cfg["mode"] == "overlay"
        try:
            top = os.stat(WORKSPACE)
        except OSError as e:
            return os.urandom(16).hex(), [], [], "cannot stat %s: %s" % (WORKSPACE, e.strerror)
        if not self._readable(top, search=True):
            return os.urandom(16).hex(), [], [], "%s itself cannot be read (its mode is %03o)" % (
                WORKSPACE, S.S_IMODE(top.st_mode))
        if self._empty_upper_size is not None:
            st = os.stat(root)
            if st.st_nlink == 2 and st.st_size == self._empty_upper_size:
                return "base", [], [], None  # nothing was ever written, or all of it was removed again
        try:  # (hashlib's own blake2b, without the OpenSSL library hashlib loads: ~5 ms at the first walk)
            from _blake2 import blake2b
        except ImportError:
            from hashlib import blake2b
        limit = int(self.cfg["limits"].get("max_diff_bytes") or 0)
        h = blake2b(digest_size=16)
        seen, complete, fatal = 0, True, None
        left_out: list = []
        big: list = []
        root_fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        stack = [""]
        try:
            while stack:
                rel = stack.pop()
                try:
                    fd = self._open_dir(root_fd, rel)
                except OSError as e:
                    if e.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                        continue  # gone, or replaced, since its parent was listed
                    complete = False
                    if rel:
                        left_out.append((rel, "unreadable directory"))
                    else:
                        fatal = "%s cannot be listed: %s" % (WORKSPACE, e.strerror)
                    continue
                try:
                    with os.scandir(fd) as it:
                        entries = []
                        for e in sorted(it, key=lambda e: e.name):
                            try:
                                entries.append((e, e.stat(follow_symlinks=False)))
                            except OSError:
                                pass
                    if overlay:  # a whiteout (a 0/0 character device) is a deletion, not an entry
                        entries = [(e, st) for e, st in entries if not (S.S_ISCHR(st.st_mode) and st.st_rdev == 0)]
                    # git takes a directory holding .git for an embedded repository (and reads what its
                    # .git names); a .gitignore or .gitattributes it cannot read as a file can block it
                    why = "an embedded repository: it holds .git" if rel and any(
                        e.name == ".git" for e, _ in entries) else None
                    for e, st in entries:
                        if why is None and e.name in _CONTROL_FILES:
                            bad = _control_file_problem(e, st)
                            if bad and not rel:
                                fatal = "%s/%s is %s, which git cannot read" % (WORKSPACE, e.name, bad)
                            elif bad:
                                why = "its %s is %s" % (e.name, bad)
                    if why:
                        left_out.append((rel, why))
                        continue
                    for e, st in entries:
                        if not rel and e.name == ".git":
                            continue
                        path = rel + "/" + e.name if rel else e.name
                        seen += 1
                        h.update(("%s\0%d\0%d\0%d\0%d\n" % (path, st.st_mode, st.st_size, st.st_ctime_ns,
                                                           st.st_ino)).encode("utf-8", "surrogateescape"))
                        mode, why = st.st_mode, None
                        if e.name.lower() == ".git":
                            why = "named like .git"
                        elif len(path.encode("utf-8", "surrogateescape")) > _PATH_LIMIT:
                            why = "its path is over %d bytes" % _PATH_LIMIT
                        elif S.S_ISDIR(mode):
                            if self._readable(st, search=True):
                                stack.append(path)
                            else:
                                why = "unreadable directory"
                        elif S.S_ISREG(mode):
                            if not self._readable(st):
                                why = "unreadable file"
                            elif limit and st.st_size > limit:
                                big.append(path)
                        elif not S.S_ISLNK(mode):
                            why = _file_kind(mode)
                        if why:
                            left_out.append((path, why))
                except OSError as e:  # out of fds or memory, an I/O error: the walk is incomplete
                    complete = False
                    if rel:
                        left_out.append((rel, "unreadable directory (%s)" % e.strerror))
                    else:
                        fatal = "%s cannot be listed: %s" % (WORKSPACE, e.strerror)
                finally:
                    os.close(fd)
        finally:
            os.close(root_fd)
        if not complete or fatal:
            return os.urandom(16).hex(), left_out, big, fatal
        if not seen and overlay:
            return "base", [], [], None  # an upper layer holding only .git: the tree is the base
        return h.hexdigest(), left_out, big, None

    def op_diff(self, req: dict) -> dict:
        """The diff against the base; reused while the workspace fingerprint holds.

        Whatever state the agent left, the reply is a diff of what can be read, with ``skipped``:
        ``"path (reason)"`` for each part left out (an embedded repository, an unreadable file or
        directory, a FIFO, a socket, a path too long for git, an untracked file over the diff limit,
        a name git refuses). What cannot be read at all (an unreadable /workspace, a .gitignore that
        is a FIFO at its top) fails with kind ``diff_failed`` and one line saying why, as does git
        failing or running past its time; a diff over the limit fails with ``diff_too_large``.

        ``exact``: also say whether the text diff is ``lossy`` (a binary file, bytes that are not
        UTF-8: text that cannot rebuild the workspace) and, when it is, add ``patch``: the exact
        ``git diff --binary --full-index`` (base64; ``patch_error`` instead when it is larger than
        ``patch_limit`` bytes).
        """
        import re

        fp, left_out, big, fatal = self._scan()
        if fatal:
            self._diff_cache = None
            raise RuntimeFailure("diff_failed", fatal)
        cached = getattr(self, "_diff_cache", None)
        deadline = time.monotonic() + DIFF_TIME_S
        if not cached or cached[0] != fp or req.get("fresh"):
            self._diff_cache = None
            limit = int(self.cfg["limits"].get("max_diff_bytes") or 0)
            if big:
                tracked = self._tracked_paths(deadline)
                left_out += [(p, "an untracked file over the %d-byte diff limit" % limit) for p in big
                             if p.encode("utf-8", "surrogateescape") not in tracked]
            raw, notes = self._git_diff([p for p, _ in left_out], limit, deadline)
            try:
                text, lossy = raw.decode("utf-8"), False
            except UnicodeDecodeError:
                text, lossy = raw.decode("utf-8", "replace"), True
            lossy = lossy or re.search(_BINARY_DIFF, text) is not None
            skipped = [_describe(p, why) for p, why in left_out] + notes
            if len(skipped) > _SKIPPED_SHOWN:
                skipped[_SKIPPED_SHOWN:] = ["... and %d more" % (len(skipped) - _SKIPPED_SHOWN)]
            cached = self._diff_cache = [fp, text, lossy, None, skipped]
            self._last_fp = fp
            fresh = True
        else:
            fresh = False
        reply = {"diff": cached[1], "cached": not fresh, "skipped": cached[4]}
        if req.get("exact"):
            reply["lossy"] = cached[2]
            if cached[2]:
                limit = int(req.get("patch_limit") or 0)
                cap = limit if limit > 0 else EXACT_PATCH_CAP
                known = cached[3]  # (patch or None, the cap it was read under)
                if known is None or (known[0] is None and known[1] < cap):
                    try:  # the private index still holds this fingerprint's tree
                        patch = self._git_stream(_DIFF_ARGS[:1] + ("--binary", "--full-index") + _DIFF_ARGS[1:]
                                                 + (self.cfg["base_commit"], "--"), deadline, cap=cap)[1]
                    except RuntimeFailure as e:
                        if e.kind != "diff_too_large":
                            raise
                        patch = None
                    known = cached[3] = (patch, cap)
                if known[0] is None or len(known[0]) > cap:
                    reply["patch_error"] = "the exact patch is over the %d-byte limit" % cap
                else:
                    reply["patch"] = b64encode(known[0])
        return reply

    def op_apply(self, req: dict) -> dict:
        """Apply a git patch (text or ``--binary``) to /workspace: restores a recorded workspace.

        ``git apply`` without ``--index`` writes the work tree only, refuses paths outside it
        and through symbolic links, and fails whole (nothing is written) when a hunk does not apply.
        """
        try:
            patch = b64decode(req.get("patch", ""))
        except (ValueError, TypeError):
            raise RuntimeFailure("invalid_arguments", "patch must be base64")
        if patch:
            try:
                self._git("apply", "--whitespace=nowarn", "-", input=patch)
            except RuntimeFailure as e:
                raise RuntimeFailure("invalid_arguments", "the patch does not apply: %s" % e.message)
        self._diff_cache = None
        if self.watcher is not None:
            try:
                self.watcher.changed()
            except OSError:
                self.watcher = None
        self._last_fp = self.fingerprint()  # the restored tree is the fork's starting point
        return {"bytes": len(patch)}

    def _git_env(self) -> dict:
        """git on /workspace with a repository of the runtime's own, trusting nothing the agent can write.

        The repository (``<private>/git``) holds no objects: they are the read-only template's
        (an alternate); its config is the template's; the agent's /workspace/.git, its config,
        hooks, filters, replace refs and index are never read. ``info/attributes`` (which wins over
        every .gitattributes of the tree) unsets each attribute that would make git convert, filter
        or refuse bytes (``working-tree-encoding``, ``eol``, ``filter``, ``ident``, ``diff``, ...):
        the diff is of the bytes on disk. The index and new objects live beside it.
        """
        private = self.cfg["_private"]
        git_dir = private + "/git"
        if not os.path.isfile(git_dir + "/HEAD"):
            import shutil

            template = self.cfg["template"] + "/.git"
            for sub in ("objects", "refs/heads", "info"):
                os.makedirs(git_dir + "/" + sub, exist_ok=True)
            for name in ("config", "info/exclude"):
                try:
                    shutil.copyfile(template + "/" + name, git_dir + "/" + name)
                except OSError:
                    pass
            with open(git_dir + "/info/attributes", "w") as f:
                f.write(_NEUTRAL_ATTRIBUTES)
            with open(git_dir + "/HEAD", "w") as f:
                f.write("ref: refs/heads/main\n")
        os.makedirs(private + "/objects", exist_ok=True)
        return {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "LC_ALL": "C",
                "GIT_DIR": git_dir, "GIT_WORK_TREE": WORKSPACE, "GIT_INDEX_FILE": private + "/index",
                "GIT_OBJECT_DIRECTORY": private + "/objects",
                "GIT_ALTERNATE_OBJECT_DIRECTORIES": self.cfg["template"] + "/.git/objects",
                "GIT_NO_REPLACE_OBJECTS": "1", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
                "GIT_ATTR_NOSYSTEM": "1", "GIT_OPTIONAL_LOCKS": "0"}

    def _git(self, *args: str, input: bytes | None = None) -> bytes:
        """One git command (see :meth:`_git_env`); its stdout, or RuntimeFailure ``diff_failed``."""
        import subprocess

        feed = {"input": input} if input is not None else {"stdin": subprocess.DEVNULL}
        try:
            r = subprocess.run(list(_GIT_SAFE) + list(args), cwd=WORKSPACE, env=self._git_env(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60, **feed)
        except subprocess.TimeoutExpired:
            raise RuntimeFailure("diff_failed", "git %s took longer than 60 s" % args[0])
        except OSError as e:
            raise RuntimeFailure("diff_failed", "cannot run git: %s" % e)
        if r.returncode != 0:
            raise RuntimeFailure("diff_failed", r.stderr.decode("utf-8", "replace")[-2000:])
        return r.stdout

    def _git_stream(self, args: tuple, deadline: float, cap: int = 0, ok: tuple = (0,)) -> tuple:
        """git ``args``, its output read as it comes: ``(returncode, stdout, stderr's tail)`` when the
        returncode is in ``ok``, else RuntimeFailure ``diff_failed`` with git's last line. Past
        ``deadline`` git is killed (``diff_failed``, not worth a retry); past ``cap`` bytes of
        stdout too (``diff_too_large``): a diff that large is never held in memory whole."""
        import subprocess

        try:
            p = subprocess.Popen(list(_GIT_SAFE) + list(args), cwd=WORKSPACE, env=self._git_env(),
                                 stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except OSError as e:
            raise RuntimeFailure("diff_failed", "cannot run git: %s" % e)
        out, err = bytearray(), bytearray()
        bufs = {p.stdout.fileno(): out, p.stderr.fileno(): err}
        poller = select.poll()
        for fd in bufs:
            poller.register(fd, select.POLLIN)
        try:
            while bufs:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeFailure("diff_failed", "reading the workspace diff took longer than %d s (git %s)"
                                         % (DIFF_TIME_S, args[0]), no_retry=True)
                for fd, _ in poller.poll(min(left, 1.0) * 1000):
                    chunk = os.read(fd, 1 << 20)
                    if not chunk:
                        poller.unregister(fd)
                        del bufs[fd]
                        continue
                    buf = bufs[fd]
                    buf += chunk
                    if buf is err:
                        del err[:-8192]
                    elif cap and len(out) > cap:
                        raise RuntimeFailure("diff_too_large", "the workspace diff is over the %d-byte limit" % cap)
            code = p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise RuntimeFailure("diff_failed", "reading the workspace diff took longer than %d s (git %s)"
                                 % (DIFF_TIME_S, args[0]), no_retry=True)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            p.stdout.close()
            p.stderr.close()
        if code not in ok:
            lines = bytes(err).decode("utf-8", "replace").strip().splitlines()
            why = lines[-1] if lines else "exit status %d" % code
            raise RuntimeFailure("diff_failed", "git %s failed: %s" % (args[0], why[:500]))
        return code, bytes(out), bytes(err)

    def _tracked_paths(self, deadline: float) -> set:
        """The base tree's paths (bytes), read once."""
        if getattr(self, "_tracked", None) is None:
            names = self._git_stream(("ls-tree", "-r", "-z", "--name-only", "--full-tree", self.cfg["base_commit"]),
                                     deadline)[1]
            self._tracked = set(names.split(b"\0"))
        return self._tracked

    def _git_diff(self, left_out: list, limit: int, deadline: float) -> tuple:
        """``git diff`` of /workspace against the base (raw bytes), untracked files included, ``left_out``
        (paths) excluded; and notes on anything git itself could not add (``"path (reason)"``)."""
        import re
        import shutil

        base, private = self.cfg["base_commit"], self.cfg["_private"]
        spec = private + "/pathspec"
        with open(spec, "wb") as f:  # literal paths (no wildcard, any byte but NUL) that git never enters
            f.write(b"\0".join([b"."] + [b":(exclude,literal)" + p.encode("utf-8", "surrogateescape")
                                         for p in left_out]))
        if self._git_version(deadline) >= (2, 26):
            pathspec = ("--pathspec-from-file=" + spec, "--pathspec-file-nul")
        elif sum(len(p) for p in left_out) < 256 * 1024:
            pathspec = ("--", ".") + tuple(":(exclude,literal)" + p for p in left_out)
        else:
            raise RuntimeFailure("diff_failed", "%d unreadable or special entries are too many to leave out"
                                 % len(left_out))

        def reset() -> None:
            for name in ("objects", "index", "index.lock"):
                path = private + "/" + name
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path, ignore_errors=True)
                elif os.path.lexists(path):
                    os.unlink(path)
            os.makedirs(private + "/objects", exist_ok=True)
            self._git_stream(("read-tree", base), deadline)

        for attempt in (0, 1):
            try:  # what is left out must be the base's in the index, not what an earlier diff staged
                if attempt or not self._diff_ready or left_out:
                    reset()
                    self._diff_ready = True
                code, _, err = self._git_stream(("add", "--all", "--ignore-errors") + pathspec, deadline, ok=(0, 1))
                notes = []
                if code == 1:  # some files could not be added (a name git refuses, say); the rest was
                    lines = err.decode("utf-8", "replace").strip().splitlines()
                    notes = [_describe(m.group(2), "git: " + m.group(1))
                             for m in (re.match(_GIT_ADD_ERROR, line) for line in lines) if m]
                    if not notes and lines:
                        notes = ["(git could not add every file: %s)" % lines[-1][:300]]
                return self._git_stream(_DIFF_ARGS + (base, "--"), deadline, cap=limit)[1], notes
            except RuntimeFailure as e:
                self._diff_ready = False
                if attempt or e.kind != "diff_failed" or e.extra.pop("no_retry", False):
                    raise
        raise AssertionError("unreachable")

    def _git_version(self, deadline: float) -> tuple:
        if getattr(self, "_git_ver", None) is None:
            import re

            m = re.search(rb"(\d+)\.(\d+)", self._git_stream(("version",), deadline)[1])
            self._git_ver = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
        return self._git_ver

    def op_ping(self, req: dict) -> dict:
        return {"pong": True, "shell_alive": self.shell.proc.poll() is None}


def setup(cfg: dict) -> dict:
    info = {"seccomp": False, "landlock_abi": 0, "noexec_workspace": False, "cpu_policy": "normal"}
    if cfg["mode"] == "overlay":
        enter_private_userns()
        cfg["_private"] = build_overlay_workspace(cfg)
        cfg["_scan_root"] = cfg["upper"] + "/u"  # only the upper layer can differ from the base
        info["noexec_workspace"] = True
    else:
        if cfg["mode"] == "copy":  # "mounted": the backend mounted a copy-on-write view of the template
            build_copied_workspace(cfg)
        cfg["_scan_root"] = WORKSPACE
        # The backend mounts a tmpfs here (outside the agent's writable paths).
        cfg["_private"] = cfg.get("private_dir") or "/.swe/private"
        os.makedirs(cfg["_private"], exist_ok=True)
        with open("/proc/self/mounts") as f:
            for line in f:
                fields = line.split()
                if len(fields) > 3 and fields[1] == WORKSPACE and "noexec" in fields[3].split(","):
                    info["noexec_workspace"] = True
    os.makedirs("/tmp/home", exist_ok=True)
    os.makedirs(PYCACHE_PREFIX, exist_ok=True)
    if "pycache_links" in cfg:  # no overlay to mount the environment's bytecode as a layer
        info["pycache_links"] = link_environment_bytecode(cfg["pycache_links"])
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0:
        OWN_CHILDREN_FD[0] = _open_children(os.getpid())
    info["cpu_policy"] = set_cpu_policy(cfg["limits"].get("cpu_policy", "normal"))
    set_rlimits(cfg["limits"])
    if cfg["mode"] == "overlay":
        drop_capabilities()
    if cfg["landlock"] != "off":
        try:
            info["landlock_abi"] = apply_landlock(cfg["exec_paths"], cfg["write_paths"] + [cfg["_private"]])
            cfg["_landlock_abi"] = info["landlock_abi"]
            if info["landlock_abi"]:  # made now: seccomp (below) forbids making rulesets
                cfg["_shell_ruleset"] = shell_ruleset(cfg["write_paths"], readable_roots())
        except OSError as e:
            if cfg["landlock"] == "required":
                raise RuntimeFailure("layer_missing", "landlock: %s" % e)
        if cfg["landlock"] == "required" and not info["landlock_abi"]:
            raise RuntimeFailure("layer_missing", "the kernel offers no Landlock")
    if cfg["seccomp"] != "off":
        try:
            info["seccomp"] = apply_seccomp(cfg["inet_sockets"] == "deny")
        except OSError as e:
            if cfg["seccomp"] == "required":
                raise RuntimeFailure("layer_missing", "seccomp: %s" % e)
        if cfg["seccomp"] == "required" and not info["seccomp"]:
            raise RuntimeFailure("layer_missing", "no seccomp filter for %s" % os.uname().machine)
    # Nobody of the same uid may ptrace-read us, open our fds or write our memory.
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    return info


# JSON lines, cheaply ----------------------------------------------------------------
# With dozens of sessions every runtime wakes with cold caches, and json.loads/dumps'
# Python layers (encoding detection, a fresh C encoder per call) then cost several times
# the C work itself. Requests go straight to the C scanner; the reply to `run`, sent on
# every step, is formatted around the C string escaper. They are `json`'s own C parts
# (`_json`), set up as `json.JSONDecoder()` and `json.JSONEncoder(separators=(",", ":"))`
# set them up; the `json` package itself is not imported: its Python half imports `re`.
class _DecoderSettings:
    """What the C scanner reads of a decoder: json.JSONDecoder()'s defaults (strict strings,
    plain dicts, NaN and Infinity as json reads them)."""

    strict = True
    object_hook = object_pairs_hook = None
    parse_float, parse_int = float, int
    parse_constant = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}.__getitem__


def _no_default(o: object) -> object:
    raise TypeError("Object of type %s is not JSON serializable" % type(o).__name__)


try:
    from _json import encode_basestring_ascii as _escape
    from _json import make_encoder as _make_encoder
    from _json import make_scanner as _make_scanner

    _scan = _make_scanner(_DecoderSettings())

    def _encode(obj: object) -> str:
        # a fresh encoder per call (json.JSONEncoder.encode's too): its markers catch cycles
        return "".join(_make_encoder({}, _no_default, _escape, None, ":", ",", False, False, True)(obj, 0))
except ImportError:  # an interpreter without json's C half: json itself
    import json
    import json.encoder
    import json.scanner

    _scan = json.scanner.make_scanner(json.JSONDecoder())
    _escape = json.encoder.encode_basestring_ascii
    _encode = json.JSONEncoder(separators=(",", ":")).encode
_JSON_BOOL = {True: "true", False: "false", None: "null"}
_JSON_SPACE = " \t\n\r"


def parse_request(line: bytes) -> dict:
    """One request line (from the host) as a JSON object; ValueError when it is not one."""
    try:
        obj, _ = _scan(line.decode("utf-8"), 0)
    except StopIteration:
        raise ValueError("malformed request line") from None
    if not isinstance(obj, dict):
        raise ValueError("a request must be a JSON object")
    return obj


def parse_init(line: bytes) -> object:
    """The init line as json.loads reads it: one JSON value, white space around it, nothing else."""
    text = line.decode("utf-8")
    start = len(text) - len(text.lstrip(_JSON_SPACE))
    try:
        obj, end = _scan(text, start)
    except StopIteration:
        raise ValueError("the init line is not JSON") from None
    if text[end:].strip(_JSON_SPACE):
        raise ValueError("the init line has data after its JSON value")
    return obj


def encode_reply(reply: dict) -> bytes:
    """A reply as one JSON line (what json.dumps gives, faster for command results)."""
    r = reply.get("result")
    if type(reply.get("id")) is int and reply.get("ok") is True and isinstance(r, dict) and len(r) == 7 \
            and "files_changed" in r:
        code = r["exit_code"]
        return ('{"id":%d,"ok":true,"result":{"output":%s,"exit_code":%s,"status":%s,"truncated":%s,'
                '"output_bytes":%d,"duration_s":%r,"files_changed":%s}}\n' % (
                    reply["id"], _escape(r["output"]), "null" if code is None else "%d" % code,
                    _escape(r["status"]), _JSON_BOOL[r["truncated"]], r["output_bytes"],
                    float(r["duration_s"]), _JSON_BOOL[r["files_changed"]])).encode("ascii")
    return _encode(reply).encode() + b"\n"


def main() -> None:
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    out_fd = stdout.fileno()

    def send(obj: dict) -> None:
        _write_all(out_fd, encode_reply(obj))

    main_at = time.monotonic()  # (CLOCK_MONOTONIC: the host's clock too; its start's phases, docs/deploy.md)
    try:
        cfg = parse_init(stdin.readline())
        read = time.monotonic()
        info = setup(cfg)
        layered = time.monotonic()
        runtime = Runtime(cfg)
        info["timing"] = {"started": STARTED, "main": main_at, "init_read": read, "layers": layered,
                          "ready": time.monotonic()}
    except RuntimeFailure as e:
        send({"ok": False, "error": {"kind": e.kind, "message": e.message}})
        return
    except Exception as e:  # noqa: BLE001 - reported to the host, which fails the start
        send({"ok": False, "error": {"kind": "setup_failed", "message": "%s: %s" % (type(e).__name__, e)}})
        return
    send({"ok": True, "info": info})
    ops = {"run": runtime.op_run, "read": runtime.op_read, "write": runtime.op_write,
           "diff": runtime.op_diff, "apply": runtime.op_apply, "ping": runtime.op_ping,
           "isolated": runtime.op_isolated}
    for line in stdin:
        req_id = None
        try:
            req = parse_request(line)
            req_id = req.get("id")
            op = ops.get(req.get("op"))
            if op is None:
                raise RuntimeFailure("invalid_arguments", "unknown op %r" % req.get("op"))
            send({"id": req_id, "ok": True, "result": op(req)})
        except RuntimeFailure as e:
            err = {"kind": e.kind, "message": e.message}
            err.update(e.extra)
            send({"id": req_id, "ok": False, "error": err})
        except Exception as e:  # noqa: BLE001 - one bad request never ends the session
            send({"id": req_id, "ok": False, "error": {"kind": "runtime_error", "message": "%s: %s" % (type(e).__name__, e)}})
        reap()


if __name__ == "__main__":
    main()
