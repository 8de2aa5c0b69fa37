"""A pytest plugin that records what the hidden tests ask of the code under test (``script_check.py``).

Staged outside the workspace and loaded with ``-p`` only in the host's own recording run: the
pristine tree with the gold patch and the task's ``test_patch``, no agent code anywhere. It
reads its settings from the JSON file named by ``SWE_RECORD_CONFIG``:

- ``roots``: the files and package folders of the code under test (what the gold patch
  changes), as absolute paths;
- ``tests``: the node ids to record;
- ``out``: where to write the recording (JSON).

Every function and method defined in those files is wrapped as its module is loaded. A call
is recorded when it comes straight from test code (a frame of a file in the workspace outside
the code roots): the callee (a module path, or a method name on an earlier result), the
arguments encoded as Python source (literals, earlier results, importable functions and
classes, standard-library values whose ``repr`` rebuilds them), and the variable its result
is kept in. A call whose arguments cannot be written as source is left out, and so is every
later call that needs its result. Nothing is recorded of results: their values are what a
run of the calls prints, under the gold patch, the buggy tree and a submission alike.

Standard library only; no project import (it runs inside the task's environment).
"""

from __future__ import annotations

import builtins
import enum
import functools
import importlib
import importlib.abc
import json
import math
import os
import sys
import types

CONFIG = json.load(open(os.environ["SWE_RECORD_CONFIG"]))
ROOTS = tuple(CONFIG["roots"])
TESTS = set(CONFIG["tests"])
WORKSPACES = tuple(CONFIG.get("workspaces", ["/workspace"]))
MAX_EVENTS = int(CONFIG.get("max_events", 400))
MAX_ITEMS = 2000  # elements of one argument written as source

# methods never recorded: object protocol plumbing, called by the interpreter rather than by a test
SKIP = frozenset("""__new__ __init_subclass__ __class_getitem__ __getattribute__ __getattr__ __setattr__
__delattr__ __del__ __hash__ __reduce__ __reduce_ex__ __getstate__ __setstate__ __copy__ __deepcopy__
__subclasshook__ __instancecheck__ __subclasscheck__ __set_name__ __get__ __set__ __delete__ __enter__
__exit__ __aenter__ __aexit__ __format__ __sizeof__ __dir__ __index__ __fspath__ __await__ __aiter__
__anext__ __missing__ __post_init__ __repr__ __str__ __bool__ __iter__ __next__""".split())


def is_test_file(filename: str) -> bool:
    """A test module, a conftest, or anything in a test folder (a package's own ``tests/`` included)."""
    parts = filename.split("/")
    base = parts[-1]
    return (base.startswith("test_") or base.endswith("_test.py") or base == "conftest.py"
            or any(p in ("tests", "test", "testing") for p in parts[:-1]))


def in_code(filename: str) -> bool:
    return not is_test_file(filename) and any(filename == r or filename.startswith(r.rstrip("/") + "/")
                                              for r in ROOTS)


def test_side(filename: str) -> bool:
    return any(filename.startswith(w.rstrip("/") + "/") for w in WORKSPACES) and not in_code(filename)


class Unencodable(Exception):
    pass


class Recorder:
    def __init__(self) -> None:
        self.scene: str | None = None
        self.busy = False
        self.scenes: dict[str, dict] = {}
        self._reset()

    def _reset(self) -> None:
        self.handles: dict[int, tuple[object, str]] = {}  # id -> (object, variable)
        self.tainted: dict[int, object] = {}
        self.events: list[dict] = []
        self.imports: set[str] = set()
        self.defs: dict[str, tuple[str | None, object]] = {}  # helpers of the tests copied by source
        self.n = 0

    # -- scenes --------------------------------------------------------------------
    def start(self, nodeid: str) -> None:
        self._reset()
        self.scene = nodeid

    def stop(self, outcome: str) -> None:
        if self.scene is not None:
            self.scenes[self.scene] = {"events": self.events, "imports": sorted(self.imports),
                                       "defs": [[k, v[0]] for k, v in self.defs.items() if v[0]],
                                       "outcome": outcome, "truncated": self.n > MAX_EVENTS}
        self.scene = None
        self._reset()

    # -- encoding --------------------------------------------------------------------
    def ref(self, obj: object) -> str | None:
        """Source naming an importable function or class of the code (or the standard library)."""
        module = getattr(obj, "__module__", None)
        qual = getattr(obj, "__qualname__", None)
        if not module or not qual or "<" in qual:
            return None
        try:
            target = importlib.import_module(module)
            for part in qual.split("."):
                target = getattr(target, part)
        except Exception:
            return None
        same = target is obj or getattr(target, "__wrapped__", None) is obj or getattr(obj, "__wrapped__", None) is target
        if not same:
            return None
        if module == "builtins":
            return qual
        if module.startswith("_") and module[1:] in sys.stdlib_module_names:
            try:  # _operator.add is operator.add, as an agent writes it
                public = importlib.import_module(module[1:])
                if getattr(public, qual, None) is obj:
                    module = module[1:]
            except ImportError:
                pass
        top = module.split(".")[0]
        mod_file = getattr(sys.modules.get(module), "__file__", None) or ""
        if top not in sys.stdlib_module_names and not in_code(mod_file):
            return None
        # the shortest public path: the package's top level when it exports the same object
        pkg = sys.modules.get(top)
        name = qual.split(".")[0]
        if "." not in qual and pkg is not None and module != top and getattr(pkg, name, None) is target:
            self.imports.add(top)
            return f"{top}.{qual}"
        self.imports.add(module)
        return f"{module}.{qual}"

    def enc(self, value: object, budget: list[int]) -> str:
        budget[0] -= 1
        if budget[0] < 0:
            raise Unencodable("too large")
        known = self.handles.get(id(value))
        if known is not None and known[0] is value:
            return known[1]
        if id(value) in self.tainted and self.tainted[id(value)] is value:
            raise Unencodable("a result of a call left out")
        t = type(value)
        if value is None or t in (bool, int, str, bytes):
            return repr(value)
        if t is float:
            return repr(value) if math.isfinite(value) else f"float('{value}')"
        if t is complex:
            return repr(value) if math.isfinite(value.real) and math.isfinite(value.imag) else \
                f"complex({self.enc(value.real, budget)}, {self.enc(value.imag, budget)})"
        if t is tuple:
            inner = ", ".join(self.enc(v, budget) for v in value)
            return f"({inner},)" if len(value) == 1 else f"({inner})"
        if t is list:
            return "[" + ", ".join(self.enc(v, budget) for v in value) + "]"
        if t is dict:
            return "{" + ", ".join(f"{self.enc(k, budget)}: {self.enc(v, budget)}" for k, v in value.items()) + "}"
        if t in (set, frozenset):
            if not value:
                return f"{t.__name__}()"
            inner = ", ".join(sorted(self.enc(v, budget) for v in value))
            return "{" + inner + "}" if t is set else "frozenset({" + inner + "})"
        if t is bytearray:
            return f"bytearray({bytes(value)!r})"
        if t is range:
            return repr(value)
        if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, type)):
            src = self.ref(value)
            if src is None and isinstance(value, types.FunctionType):
                src = self.helper(value, 0)
            if src is None:
                raise Unencodable("a function of the tests")
            return src
        return self.stdlib_value(value)

    def helper(self, fn: types.FunctionType, depth: int) -> str | None:
        """A plain module-level function of a test file, copied into the script by its source: a
        helper such as ``def inc(x): return x + 1`` that the tests pass to the code. Only when every
        global name it uses can be written too (a module, a function or class of the code or the
        standard library, a literal constant, another such helper)."""
        import inspect
        import textwrap

        code = fn.__code__
        name = fn.__name__
        if (depth > 3 or not test_side(code.co_filename) or fn.__qualname__ != name or code.co_freevars
                or fn.__defaults__ and not all(_immutable(d) for d in fn.__defaults__) or fn.__kwdefaults__):
            return None
        known = self.defs.get(name)
        if known is not None:
            return name if known[1] is fn else None
        try:
            source = textwrap.dedent(inspect.getsource(fn))
        except (OSError, TypeError):
            return None
        if not source.startswith(("def ", "async def ")):
            return None  # decorated, or a lambda
        prelude: list[str] = []
        self.defs[name] = (None, fn)  # recursion guard
        for used in sorted(_global_names(code)):
            if used in fn.__globals__:
                value = fn.__globals__[used]
            else:
                continue  # a builtin, or an attribute name
            if isinstance(value, types.ModuleType):
                prelude.append(f"import {value.__name__}" if value.__name__ == used
                               else f"import {value.__name__} as {used}")
            elif _immutable(value):
                prelude.append(f"{used} = {value!r}")
            elif isinstance(value, types.FunctionType) and test_side(value.__code__.co_filename):
                if self.helper(value, depth + 1) != used:
                    del self.defs[name]
                    return None
            else:
                ref = self.ref(value) if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, type)) else None
                if ref is None:
                    del self.defs[name]
                    return None
                prelude.append(f"{used} = {ref}")
        self.defs[name] = ("\n".join(prelude + [source.rstrip()]), fn)
        return name

    def stdlib_value(self, value: object) -> str:
        """A standard-library value whose repr rebuilds it (datetime, Decimal, Fraction, Path, ...)."""
        t = type(value)
        module = t.__module__
        if module.split(".")[0] not in sys.stdlib_module_names or module == "builtins":
            raise Unencodable(f"a {t.__qualname__}")
        text = repr(value)
        mod = sys.modules[module]
        public = module.split(".")[0] if not module.startswith("_") else None
        namespace = {t.__name__: t, module.split(".")[0]: sys.modules.get(module.split(".")[0])}
        if public:
            namespace[public] = sys.modules[public]
        try:
            again = eval(text, {"__builtins__": builtins}, namespace)
        except Exception:
            raise Unencodable(f"a {t.__qualname__} whose repr does not rebuild it")
        if type(again) is not t or not again == value:
            raise Unencodable(f"a {t.__qualname__} whose repr does not rebuild it")
        top = text.split("(", 1)[0]
        if top == t.__name__ and "." not in top:
            real = getattr(mod, t.__name__, None) is t
            home = module if real else None
            if home is None or home.startswith("_"):
                # e.g. a PosixPath lives in pathlib; anything else stays unencoded
                raise Unencodable(f"a {t.__qualname__}")
            self.imports.add(f"from {home} import {t.__name__}")
        else:
            self.imports.add(text.split("(", 1)[0].rsplit(".", 1)[0])
        return text

    # -- calls ------------------------------------------------------------------------
    def call(self, fn, kind: str, attr: str, args: tuple, kwargs: dict):
        event = None
        if self.n < MAX_EVENTS:
            self.busy = True
            try:
                event = self.begin(fn, kind, attr, args, kwargs)
            except Unencodable as exc:
                event = {"dropped": str(exc)}
            except Exception as exc:  # noqa: BLE001 - recording must never change the test
                event = {"dropped": f"{type(exc).__name__}"}
            finally:
                self.busy = False
        self.n += 1
        try:
            result = fn(*args, **kwargs)
        except BaseException:
            if event is not None and "dropped" not in event:
                event["raised_in_gold"] = True
                self.events.append(event)
            raise
        self.busy = True
        try:
            self.finish(event, kind, args, result)
        finally:
            self.busy = False
        return result

    def begin(self, fn, kind: str, attr: str, args: tuple, kwargs: dict) -> dict:
        budget = [MAX_ITEMS]
        if kind == "function":
            target = self.ref(fn)
            if target is None:
                raise Unencodable("a function not importable by name")
            return {"kind": "call", "target": target, "args": [self.enc(a, budget) for a in args],
                    "kwargs": {k: self.enc(v, budget) for k, v in kwargs.items()}}
        if kind == "new":
            cls = type(args[0])
            target = self.ref(cls)
            if target is None:
                raise Unencodable("an instance of a class of the tests")
            return {"kind": "call", "target": target, "args": [self.enc(a, budget) for a in args[1:]],
                    "kwargs": {k: self.enc(v, budget) for k, v in kwargs.items()}}
        if kind == "static":
            return self.begin(fn, "function", attr, args, kwargs)
        # a method: the object first (an earlier result, or a class for a classmethod)
        this = self.enc(args[0], budget)
        return {"kind": kind, "self": this, "attr": attr, "args": [self.enc(a, budget) for a in args[1:]],
                "kwargs": {k: self.enc(v, budget) for k, v in kwargs.items()}}

    def finish(self, event: dict | None, kind: str, args: tuple, result: object) -> None:
        if kind == "new":
            result = args[0]
        if event is None or "dropped" in event:
            if not _immutable(result):
                self.tainted[id(result)] = result
            return
        if not _immutable(result) or kind == "new":
            var = f"\0v{len(self.handles) + 1}\0"  # NUL never occurs in source a repr wrote
            self.handles[id(result)] = (result, var)
            event["var"] = var
            event["iterator"] = (kind != "new" and hasattr(result, "__next__")
                                 and getattr(type(result), "__iter__", None) is not None)
        self.events.append(event)


def _global_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def _immutable(value: object) -> bool:
    return value is None or type(value) in (bool, int, float, complex, str, bytes)


REC = Recorder()


def _wrap(fn, kind: str, attr: str = ""):
    if getattr(fn, "__swe_wrapped__", False):
        return fn

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        rec = REC
        if rec.scene is not None and not rec.busy:
            caller = sys._getframe(1).f_code.co_filename
            if test_side(caller):
                return rec.call(fn, kind, attr, args, kwargs)
        return fn(*args, **kwargs)

    wrapper.__swe_wrapped__ = True
    return wrapper


def instrument_class(cls: type) -> None:
    for attr, value in list(vars(cls).items()):
        if attr in SKIP or (attr.startswith("__") is False and attr.startswith("_") and attr != "_"):
            continue
        try:
            if isinstance(value, types.FunctionType):
                new = _wrap(value, "new" if attr == "__init__" else "method", attr)
            elif isinstance(value, staticmethod) and isinstance(value.__func__, types.FunctionType):
                new = staticmethod(_wrap(value.__func__, "static", attr))
            elif isinstance(value, classmethod) and isinstance(value.__func__, types.FunctionType):
                new = classmethod(_wrap(value.__func__, "method", attr))
            elif isinstance(value, property) and isinstance(value.fget, types.FunctionType):
                new = property(_wrap(value.fget, "get", attr),
                               _wrap(value.fset, "set", attr) if isinstance(value.fset, types.FunctionType)
                               else value.fset, value.fdel, value.__doc__)
            else:
                continue
            setattr(cls, attr, new)
        except (AttributeError, TypeError):
            continue


def instrument(module: types.ModuleType) -> None:
    for name, value in list(vars(module).items()):
        if name.startswith("_"):
            continue
        try:
            if isinstance(value, types.FunctionType) and value.__module__ == module.__name__:
                setattr(module, name, _wrap(value, "function"))
            elif isinstance(value, type) and value.__module__ == module.__name__:
                if not issubclass(value, (enum.Enum, BaseException)):
                    instrument_class(value)
        except (AttributeError, TypeError):
            continue


class _Loader(importlib.abc.Loader):
    def __init__(self, real) -> None:
        self.real = real

    def create_module(self, spec):
        return self.real.create_module(spec)

    def exec_module(self, module) -> None:
        self.real.exec_module(module)
        instrument(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is None:
                continue
            if spec.origin and (in_code(spec.origin) or in_code(os.path.realpath(spec.origin))):
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader)
            return spec
        return None


sys.meta_path.insert(0, _Finder())
for _mod in list(sys.modules.values()):
    if in_code(getattr(_mod, "__file__", None) or ""):
        instrument(_mod)


def _matches(nodeid: str) -> bool:
    return nodeid in TESTS or nodeid.split("[", 1)[0] in TESTS


def pytest_runtest_protocol(item, nextitem):  # noqa: ARG001 - pytest's hook signature
    if _matches(item.nodeid):
        REC.start(item.nodeid)
    return None


def pytest_runtest_logreport(report):
    if REC.scene != report.nodeid:
        return
    if report.failed:
        REC.stop("failed")
    elif report.skipped:
        REC.stop("skipped")
    elif report.when == "teardown":
        REC.stop("passed")


def pytest_sessionfinish(session, exitstatus):  # noqa: ARG001
    if REC.scene is not None:
        REC.stop("unknown")
    with open(CONFIG["out"], "w") as f:
        json.dump({"scenes": REC.scenes}, f)
