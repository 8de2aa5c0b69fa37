"""The graded test process: pytest with the grader's plugin registered before any project code.

Started by ``supervisor.py`` as ``python -I -B boot.py CONFIG CHANNEL_FD``. Before
pytest imports a conftest or a test module (the first moment the agent's code can
run), this script has read its configuration (and deleted the file), opened the
outcome channel, and taken a snapshot of the test runner's own functions. The
plugin then records, on the channel, what each test phase really raised, and flags
what the agent's code must never do in the test process: replace runner internals,
add hook implementations from its own files, change test files, swap test functions,
install trace functions. The host cross-checks these records with the JUnit report
and the exit status; any disagreement is tampering.
"""

import os
import sys

_KIT = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _KIT]

import hashlib  # noqa: E402
import json  # noqa: E402
import types  # noqa: E402

with open(sys.argv[1]) as _f:
    CFG = json.load(_f)
os.unlink(sys.argv[1])
_CHAN = int(sys.argv[2])
_write = os.write
_dumps = json.dumps
WS = os.path.realpath(CFG["workspace"])


def emit(record):
    data = (_dumps(record, sort_keys=True) + "\n").encode("utf-8", "replace")
    while data:
        try:
            data = data[_write(_CHAN, data):]
        except OSError:
            return


emit({"k": "start", "pid": os.getpid()})


def _env_plugins():
    """pytest11 entry points of distributions outside the workspace (autoload is off)."""
    names = []
    try:
        from importlib import metadata
        dists = metadata.distributions()
        for dist in dists:
            try:
                where = os.path.realpath(str(dist.locate_file("")))
                eps = [ep for ep in dist.entry_points if ep.group == "pytest11"]
            except Exception:
                continue
            if eps and not (where + os.sep).startswith(WS + os.sep):
                names.extend(ep.name for ep in eps)
    except ImportError:
        try:
            import pkg_resources
            for ep in pkg_resources.iter_entry_points("pytest11"):
                where = os.path.realpath(ep.dist.location or "")
                if not (where + os.sep).startswith(WS + os.sep):
                    names.append(ep.name)
        except Exception:
            pass
    return sorted(set(names))


PLUGINS = _env_plugins()

import unittest  # noqa: E402,F401  (watched: unittest tests report through it)
import unittest.case  # noqa: E402,F401
import unittest.result  # noqa: E402,F401

import pytest  # noqa: E402
import _pytest.config  # noqa: E402

for _name in set(getattr(_pytest.config, "default_plugins", ())) | set(getattr(_pytest.config, "essential_plugins", ())):
    try:
        __import__("_pytest." + _name)
    except Exception:
        pass

_WATCHED_TOPS = ("_pytest", "pytest", "pluggy", "unittest")


def _funcs_of(value):
    f = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
    return f if isinstance(f, types.FunctionType) else None


def _members(mod, name):
    """(key, value) of the functions, classes and class attributes defined in module ``name``."""
    for key, value in list(vars(mod).items()):
        if isinstance(value, types.FunctionType):
            yield key, value
        elif isinstance(value, type) and getattr(value, "__module__", None) == name:
            yield key, value
            for ckey, cvalue in list(vars(value).items()):
                if _funcs_of(cvalue) is not None or isinstance(cvalue, property):
                    yield key + "." + ckey, cvalue


def _code_file(value):
    if isinstance(value, property):
        value = value.fget
    if isinstance(value, type):
        return getattr(sys.modules.get(value.__module__), "__file__", None)
    f = _funcs_of(value)
    if f is None:
        f = getattr(value, "__func__", value)
    code = getattr(f, "__code__", None)
    return code.co_filename if code is not None else None


def take_snapshot():
    snap = {}
    for name, mod in list(sys.modules.items()):
        if mod is None or name.split(".")[0] not in _WATCHED_TOPS:
            continue
        entries = {}
        for key, value in _members(mod, name):
            f = _funcs_of(value)
            entries[key] = (value, f.__code__ if f is not None else None)
        snap[name] = (mod, entries)
    return snap


def compare_snapshot(snap):
    """Runner members added, replaced or re-coded since the snapshot by code outside the environment.

    pytest itself swaps some members at run time (``_pytest.legacypath``): a change whose
    new code comes from the environment (site-packages, the standard library) is pytest's own.
    """
    problems = []
    for name, (mod, entries) in snap.items():
        if sys.modules.get(name) is not mod:
            problems.append("runner module replaced: %s" % name)
            continue
        now = dict(_members(mod, name))
        for key, value in now.items():
            old = entries.get(key)
            f = _funcs_of(value)
            if old is not None and old[0] is value and (f is None or f.__code__ is old[1]):
                continue
            if f is not None and old is not None and old[0] is value:
                where = f.__code__.co_filename
            else:
                where = _code_file(value)
            if not where or not code_origin_ok(where, trusted_only=True):
                problems.append("runner internals patched: %s.%s (from %s)" % (name, key, where or "no code"))
        for key in entries:
            if key not in now:
                problems.append("runner internals removed: %s.%s" % (name, key))
    return problems


def _sha256(path):
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


def _trusted_roots():
    import sysconfig
    roots = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        try:
            roots.add(os.path.realpath(sysconfig.get_paths()[key]))
        except KeyError:
            pass
    for mod in (pytest, _pytest.config, types):
        roots.add(os.path.realpath(os.path.dirname(os.path.dirname(mod.__file__))))
    roots.discard(WS)
    return sorted(r for r in roots if not (r + os.sep).startswith(WS + os.sep))


TRUSTED = _trusted_roots()
TOUCHED = set(CFG.get("touched", []))
HASHES = CFG.get("hashes", {})
SELF = os.path.realpath(__file__)
SNAPSHOT = take_snapshot()


_ORIGINS = {}


def code_origin_ok(filename, trusted_only=False):
    """Code may come from the environment, pristine (untouched) workspace files, or this grader."""
    key = (filename, trusted_only)
    if key not in _ORIGINS:
        _ORIGINS[key] = _origin_ok(filename, trusted_only)
    return _ORIGINS[key]


def _origin_ok(filename, trusted_only):
    path = os.path.realpath(filename) if filename and not filename.startswith("<") else ""
    if not path:
        return False
    if path == SELF or any((path + os.sep).startswith(r + os.sep) for r in TRUSTED):
        return True
    if not trusted_only and (path + os.sep).startswith(WS + os.sep):
        rel = os.path.relpath(path, WS)
        return rel not in TOUCHED and HASHES.get(rel, _sha256(path)) == _sha256(path)
    return False


def _code_of(func):
    seen = 0
    while seen < 50:
        seen += 1
        inner = getattr(func, "__wrapped__", None)
        if inner is None:
            break
        func = inner
    func = getattr(func, "__func__", func)
    return getattr(func, "__code__", None)


def _item_path(node):
    p = getattr(node, "path", None) or getattr(node, "fspath", None)
    return os.path.realpath(str(p)) if p is not None else ""


_SKIP = pytest.skip.Exception
_XFAIL = pytest.xfail.Exception


def _classify(exc_type):
    if exc_type is None:
        return "ok"
    if issubclass(exc_type, _SKIP):
        return "skip"
    if issubclass(exc_type, _XFAIL):
        return "xfail"
    return "raised"


class GraderPlugin(object):
    """Records what each phase raised; flags tampering with the run."""

    def __init__(self):
        self.flagged = set()
        self.phases = {}

    def violation(self, what):
        if what not in self.flagged:
            self.flagged.add(what)
            emit({"k": "violation", "what": what})

    def check_file(self, path, when):
        if not (path + os.sep).startswith(WS + os.sep):
            return
        rel = os.path.relpath(path, WS)
        if rel in HASHES and _sha256(path) != HASHES[rel]:
            self.violation("test file changed during the run (%s): %s" % (when, rel))

    def check_hooks(self, config, when):
        for problem in compare_snapshot(SNAPSHOT):
            self.violation(problem)
        hook = config.pluginmanager.hook
        for name in dir(hook):
            caller = getattr(hook, name, None)
            get = getattr(caller, "get_hookimpls", None)
            if get is None:
                continue
            for impl in get():
                code = _code_of(impl.function)
                if code is None or not code_origin_ok(code.co_filename):
                    self.violation("hook %s implemented outside the environment and pristine files: %s"
                                   % (name, getattr(code, "co_filename", repr(impl.function))))
        if sys.gettrace() is not None or sys.getprofile() is not None:
            self.violation("a trace or profile function was installed (%s)" % when)

    def pytest_plugin_registered(self, plugin, manager):
        path = getattr(plugin, "__file__", None)
        if path and os.path.basename(path) == "conftest.py":
            self.check_file(os.path.realpath(path), "conftest import")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_make_collect_report(self, collector):
        module = isinstance(collector, pytest.Module)
        path = _item_path(collector) if module else ""
        if module:
            self.check_file(path, "before import")
        yield
        if module:
            self.check_file(path, "after import")
            obj = collector.__dict__.get("_obj")
            if obj is not None:
                loader = getattr(getattr(obj, "__spec__", None), "loader", None)
                kind = type(loader).__name__
                if kind not in ("AssertionRewritingHook", "SourceFileLoader"):
                    self.violation("test module %s loaded by %s" % (os.path.relpath(path, WS), kind))
                if os.path.realpath(getattr(obj, "__file__", "") or "") != path:
                    self.violation("test module %s is not its file" % os.path.relpath(path, WS))

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session):
        self.check_hooks(session.config, "after collection")

    def _record(self, item, when, exc_type):
        rec = self.phases.setdefault(item.nodeid, {})
        rec[when] = _classify(exc_type)

    @pytest.hookimpl(hookwrapper=True, trylast=True)
    def pytest_runtest_setup(self, item):
        outcome = yield
        self._record(item, "setup", outcome.excinfo[0] if outcome.excinfo else None)

    @pytest.hookimpl(hookwrapper=True, trylast=True)
    def pytest_runtest_call(self, item):
        if sys.gettrace() is not None or sys.getprofile() is not None:
            self.violation("a trace or profile function was installed (before %s)" % item.nodeid)
        func = getattr(item, "obj", None)
        code = _code_of(func) if func is not None else None
        if code is not None and not code_origin_ok(code.co_filename):
            self.violation("test %s runs code from %s" % (item.nodeid, code.co_filename))
        if "runtest" in vars(item):
            self.violation("test %s has a patched runtest" % item.nodeid)
        outcome = yield
        exc = outcome.excinfo[0] if outcome.excinfo else None
        collected = item.__dict__.get("_excinfo")  # unittest-style tests keep failures here
        if exc is None and collected:
            exc = getattr(collected[0], "type", None)
        self._record(item, "call", exc)
        if item.get_closest_marker("xfail") is not None:
            self.phases[item.nodeid]["xfail_marked"] = True

    @pytest.hookimpl(hookwrapper=True, trylast=True)
    def pytest_runtest_teardown(self, item, nextitem):
        outcome = yield
        self._record(item, "teardown", outcome.excinfo[0] if outcome.excinfo else None)
        rec = self.phases.pop(item.nodeid, {})
        rec.update({"k": "test", "id": item.nodeid})
        emit(rec)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session, exitstatus):
        self.check_hooks(session.config, "session finish")
        for nodeid, rec in self.phases.items():  # tests whose teardown never ran
            rec.update({"k": "test", "id": nodeid})
            emit(rec)
        self.phases = {}
        emit({"k": "sessionfinish", "exitstatus": int(exitstatus)})


def main():
    if WS not in sys.path:
        sys.path.append(WS)  # like `python -m pytest` from the workspace, but after the environment
    plugin = GraderPlugin()
    args = list(CFG["args"])
    for name in PLUGINS:
        args[:0] = ["-p", name]
    code = pytest.main(args, plugins=[plugin])
    try:
        code = int(code)
    except (TypeError, ValueError):
        code = 3
    for problem in compare_snapshot(SNAPSHOT):
        plugin.violation(problem)
    emit({"k": "exit", "code": code, "junit_sha256": _sha256(CFG["junit"])})
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)  # no atexit handlers, no finalizers: nothing runs after the record


main()
