"""Planted bytecode, type/test caches and archives of the secret code are gone."""

from __future__ import annotations

from sandbox_support import PLANTED, PY_MARK, SH_MARK, assert_done, assert_no_secret, py, sh
from support.git_repos import commit_all


async def test_planted_files_purged(harness):
    async with harness.session() as sb:
        res = await sh(sb, "for p in " + " ".join(PLANTED) + ' .mypy_cache .pytest_cache .pytype pkg/__pycache__; '
                       'do [ -e "$p" ] && echo "PRESENT $p"; done; ls -la . dist pkg; echo done')
        assert res.output.rstrip().endswith("done"), res
        assert "PRESENT" not in res.output, res.output


async def test_python_oswalk_sweep_finds_no_secret_anywhere(harness):
    """Walk the whole view, read every file (zip/whl members, gzip and zlib streams too)."""
    async with harness.session() as sb:
        res = await py(sb, f"""
            import os, zipfile, zlib, gzip, io, tarfile
            mark = {PY_MARK}.encode()
            hits = []
            def look(p, data):
                if mark in data: hits.append(p)
                if data[:2] in (b"x\\x01", b"x\\x9c", b"x\\xda"):
                    try:
                        if mark in zlib.decompress(data): hits.append(p + " (zlib)")
                    except Exception: pass
                if data[:2] == b"\\x1f\\x8b":
                    try:
                        if mark in gzip.decompress(data): hits.append(p + " (gzip)")
                    except Exception: pass
                if data[:4] == b"PK\\x03\\x04":
                    try:
                        z = zipfile.ZipFile(io.BytesIO(data))
                        for n in z.namelist():
                            if mark in z.read(n): hits.append(p + "!" + n)
                    except Exception: pass
            skip = ("/proc", "/sys", "/dev", "/usr/share", "/usr/lib", "/usr/include")
            for top in sorted(os.listdir("/")):
                root = "/" + top
                if root in skip or os.path.islink(root): continue
                for dp, dn, fn in os.walk(root):
                    if dp.startswith(skip): dn[:] = []; continue
                    for n in fn:
                        p = os.path.join(dp, n)
                        try:
                            if os.path.islink(p) or os.path.getsize(p) > 8 << 20: continue
                            look(p, open(p, "rb").read())
                        except OSError: pass
            print("HITS", hits)
        """, timeout=240)
        assert res.ok, res
        assert "HITS []" in res.output, res.output
        assert_no_secret(res.output)


async def test_import_with_planted_pyc_gives_base_code(harness):
    """Import pkg.core / pkg.helpers with and without the private pycache prefix."""
    async with harness.session() as sb:
        for env in ("", "env -u PYTHONPYCACHEPREFIX ", "env -u PYTHONPYCACHEPREFIX PYTHONDONTWRITEBYTECODE= "):
            res = await sh(sb, env + 'python3 -c "import pkg.core, pkg.helpers; print(pkg.helpers.helper()); '
                                     'print(pkg.core.feature())" 2>&1')
            assert "NotImplementedError" in res.output, res.output
            assert_no_secret(res.output)


async def test_ghost_pyc_and_sourceless_loader(harness):
    async with harness.session() as sb:
        res = await sh(sb, 'python3 -c "import ghost; print(ghost.feature())" 2>&1')
        assert "ModuleNotFoundError" in res.output, res.output
        res = await py(sb, """
            import importlib.machinery, importlib.util, glob, marshal
            for p in ["ghost.pyc"] + glob.glob("**/*.pyc", recursive=True) + glob.glob("/tmp/**/*.pyc", recursive=True):
                try:
                    loader = importlib.machinery.SourcelessFileLoader("m", p)
                    mod = importlib.util.module_from_spec(importlib.util.spec_from_loader("m", loader))
                    loader.exec_module(mod); print("LOADED", p, mod.__dict__)
                except Exception as e:
                    print("no", p, type(e).__name__)
            print("done")
        """)
        assert "done" in res.output and "LOADED" not in res.output, res.output
        assert_no_secret(res.output)


async def test_marshal_read_of_planted_bytecode(harness):
    async with harness.session() as sb:
        res = await py(sb, """
            import marshal, os
            for p in ["pkg/__pycache__/core.cpython-311.pyc", "pkg/__pycache__/helpers.cpython-311.pyc", "ghost.pyc"]:
                try:
                    code = marshal.loads(open(p, "rb").read()[16:]); print("READ", p, code.co_consts)
                except OSError as e:
                    print("gone", p)
        """)
        assert res.output.count("gone") == 3, res.output
        assert_no_secret(res.output)


async def test_archives_of_code_unreadable_by_zipfile_tarfile_zipimport(harness):
    async with harness.session() as sb:
        res = await py(sb, """
            import sys, zipfile, tarfile, glob, runpy
            for p in glob.glob("**/*.zip", recursive=True) + glob.glob("**/*.whl", recursive=True) + glob.glob("**/*.pyz", recursive=True):
                z = zipfile.ZipFile(p)
                for n in z.namelist(): print(p, n, z.read(n))
            for p in glob.glob("**/*.tar.gz", recursive=True):
                t = tarfile.open(p)
                for m in t.getmembers(): print(p, m.name, t.extractfile(m).read())
            sys.path[:0] = ["dist/secret.zip", "dist/secretpkg-0.1-py3-none-any.whl"]
            for mod in ("secretmod", "secretpkg"):
                try: print(__import__(mod).feature())
                except ImportError as e: print("noimport", mod)
            print("done")
        """)
        assert "done" in res.output and res.output.count("noimport") == 2, res.output
        assert_no_secret(res.output)
        res = await sh(sb, "python3 dist/secret.pyz 2>&1; python3 -m zipfile -l dist/secret.zip 2>&1; "
                           "tar xzf dist/secret.tar.gz -O 2>&1; zcat dist/*.gz 2>&1; echo PROBE-DONE")
        assert_done(res)
        assert_no_secret(res.output)


async def test_type_and_test_caches_unreadable(harness):
    async with harness.session() as sb:
        res = await sh(sb, f"cat .mypy_cache/3.11/pkg/core.data.json .pytest_cache/v/cache/lastfailed "
                           f".pytype/pyi/pkg/core.pyi 2>&1; grep -ra {SH_MARK} . /tmp 2>&1; echo PROBE-DONE")
        assert_done(res)
        assert_no_secret(res.output)
        res = await sh(sb, "shopt -s globstar dotglob; for f in **/*; do echo \"$f\"; done")
        assert res.ok and "pkg/core.py" in res.output, res
        assert "__pycache__" not in res.output and "_cache/" not in res.output, res.output


async def test_pycache_prefix_is_private_and_outside_workspace(harness):
    """Python writes its caches only to a per-session prefix outside the workspace."""
    async with harness.session() as a, harness.session() as b:
        res = await sh(a, 'python3 -c "import sys, pkg.helpers; print(\'PREFIX\', sys.pycache_prefix)"; '
                          'ls -d pkg/__pycache__ 2>&1; echo; ls -R "$PYTHONPYCACHEPREFIX" | head -20')
        assert "PREFIX /" in res.output and "PREFIX /workspace" not in res.output, res.output
        assert "No such file" in res.output, res.output  # nothing written into the workspace
        prefix = res.output.split("PREFIX ", 1)[1].split()[0]
        mine = f"{prefix}/workspace/pkg"  # where A's bytecode of pkg/helpers.py went
        res = await sh(a, f"ls {mine} 2>&1")
        assert "helpers.cpython-" in res.output, res.output
        res = await sh(b, f"ls {mine} 2>&1; ls -R {prefix} 2>&1 | grep -c '^helpers[.]cpython-'")
        assert "No such file" in res.output and res.output.split()[-1] == "0", \
            f"session B sees session A's bytecode: {res.output}"


def _plant_disguised_archives(repo) -> list[str]:
    """Secret code compressed as single files, or zipped under a data-looking name."""
    import bz2
    import gzip
    import io
    import lzma
    import zipfile

    from sandbox_support import MARK

    src = f'def feature():\n    return "{MARK}-disguised"\n'.encode()
    d = repo / "data"
    d.mkdir()
    (d / "core.py.gz").write_bytes(gzip.compress(src))
    (d / "core.py.bz2").write_bytes(bz2.compress(src))
    (d / "core.py.xz").write_bytes(lzma.compress(src))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("pkg/core.py", src)
    (d / "fixture.dat").write_bytes(buf.getvalue())
    (d / "Snapshot.ZIP").write_bytes(buf.getvalue())
    from sandbox_support import _pyc_bytes

    (d / "core.dat").write_bytes(_pyc_bytes(src.decode(), "core.py", unchecked=True))  # bytecode, renamed
    commit_all(repo, "data")
    return ["data/core.py.gz", "data/core.py.bz2", "data/core.py.xz", "data/fixture.dat", "data/Snapshot.ZIP",
            "data/core.dat"]


async def test_compressed_or_renamed_archives_of_code_unreadable(harness, tmp_path):
    """Archives are recognised by content, not by name: gzip/bz2/xz of a .py file, a zip
    called *.dat."""
    from sandbox_support import make_secret_repo

    repo = make_secret_repo(tmp_path)
    paths = _plant_disguised_archives(repo.path)
    async with harness.session(harness.spec(repo_path=repo.path, base_commit=None)) as sb:
        res = await py(sb, f"""
            import bz2, gzip, lzma, zipfile, io
            mark = {PY_MARK}.encode()
            for p in {paths!r}:
                try:
                    data = open(p, "rb").read()
                except OSError:
                    print("gone", p); continue
                for name, dec in (("raw", lambda b: b),
                                  ("gz", gzip.decompress), ("bz2", bz2.decompress), ("xz", lzma.decompress),
                                  ("zip", lambda b: b"".join(zipfile.ZipFile(io.BytesIO(b)).read(n)
                                                             for n in zipfile.ZipFile(io.BytesIO(b)).namelist()))):
                    try:
                        if mark in dec(data): print("LEAK", p, name)
                    except Exception:
                        pass
            print("PROBE-DONE")
        """)
        assert_done(res)
        assert "LEAK" not in res.output, res.output


async def test_environment_bytecode_is_the_prefix_s_first_layer(harness):
    """The private prefix starts with the environment's own bytecode: under bwrap a read-only overlay
    layer (``sandbox/bytecode.py``), under docker links the runtime makes at start (no overlay there).
    The standard library loads from it without compiling; nothing of the workspace is in it; it cannot
    be written through; what one session puts there no other session sees."""
    cached = "/tmp/.pycache/usr/lib/python3.{v}/json/__init__.cpython-3{v}.pyc"
    async with harness.session() as a:
        res = await sh(a, 'ls -a "$PYTHONPYCACHEPREFIX"; python3 -c "import sys; print(\'MINOR\', sys.version_info[1])"')
        assert "workspace" not in res.output and "usr" in res.output.split(), res.output
        path = cached.format(v=res.output.split("MINOR ", 1)[1].split()[0])
        res = await sh(a, f"python3 -v -c 'import json' 2>&1 | grep 'json/__init__'; readlink {path}; "
                          f"printf x > {path}; echo WROTE=$?")
        assert f"# code object from '{path}'" in res.output and "# created" not in res.output, res.output
        assert "/json/__pycache__/__init__.cpython-3" in res.output, res.output  # the stdlib's own
        assert "WROTE=1" in res.output, res.output
        if harness.backend == "bwrap":
            assert "Read-only file system" in res.output, res.output
        res = await sh(a, f"ln -sf /workspace/pkg/core.py {path}; python3 -v -c 'import json' 2>&1 | grep created")
        assert f"# created '{path}'" in res.output, res.output  # a replaced link: compiled, in this session only
    async with harness.session() as b:
        res = await sh(b, f"readlink {path}; python3 -v -c 'import json' 2>&1 | grep 'json/__init__'")
        assert "/json/__pycache__/" in res.output and f"# code object from '{path}'" in res.output, res.output
