"""Run a student's file in a child process and call its functions from the
checker.

The checker (the parent) never imports the student's file. A child process
imports it and calls its functions when the parent asks; the parent builds
every input, computes every reference result and compares, so nothing the
student's code does can reach the references, the comparisons or the
verdict. Before the student's file is imported, the child replaces the
library functions and methods that answer the exercise (its
``references``) with stubs that refuse to run, and a profile hook watches
for their code however it is reached (a reloaded module, a saved copy).

What crosses from the child to the parent is read with
``torch.load(weights_only=True)``: tensors, numbers, strings and
containers, never an object that could run code in the parent; any other
result arrives as an :class:`Opaque` description.

Each import and each check has a time limit. ``sys.exit``, ``os._exit``, a
crash or a hang of the student's code is a failure named in one line, at
the student's line where it can be found (``faulthandler`` writes the
child's stack to a file the parent reads)."""

from __future__ import annotations

import contextlib
import faulthandler
import functools
import importlib.util
import inspect
import io
import multiprocessing
import os
import pickle
import re
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tinyformer_exercises import watched
from tinyformer_exercises.outcomes import (
    CheckFailed,
    Opaque,
    ReadNotAllowed,
    StudentExit,
    Unfinished,
    describe_value,
)

__all__ = ["Opaque", "Remote", "Student", "StudentExit", "describe_value"]

# The library whose answers are refused while a student's code runs (its own package, beside this one).
_PACKAGE = (
    Path(importlib.util.find_spec("tinyformer").origin).resolve().parent
)
_TEMPLATES = Path(__file__).resolve().parent / "templates"
# what a student's print may add to the report, per import or call
_PRINT_LINES = 6


# -- the child
# ----------------------------------------------------------------------------------------------


class _Refused(BaseException):
    """Raised by a stub of a reference (a BaseException: a student's
    ``except Exception`` does not hide it)."""


class _ExitCalled(BaseException):
    """Raised by the child's ``os._exit``."""


@dataclass
class _Watch:
    """What the child's ``os._exit`` records."""

    exit_called: str | None = None


_WATCH = _Watch()


def _resolve(dotted: str) -> tuple[Any, str, Any]:
    """``"tinyformer.models.attention.MultiHeadAttention.forward"`` as (owner,
    attribute name, object): the longest importable module prefix, then
    attributes."""
    parts = dotted.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            owner: Any = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for part in parts[split:-1]:
            owner = getattr(owner, part)
        return owner, parts[-1], inspect.getattr_static(owner, parts[-1])
    raise ImportError(dotted)


def _stub(dotted: str, state: dict[str, str | None]) -> Callable[..., Any]:
    def refused(*args: Any, **kwargs: Any) -> Any:
        state["refused"] = state["refused"] or dotted
        raise _Refused(dotted)

    refused.__tinyformer_refused__ = dotted  # type: ignore[attr-defined]
    return refused


def _code_key(code: Any) -> tuple[Any, ...]:
    """What a function's code computes, whatever its name, file or line:
    a reloaded module, a copy made with ``code.replace`` and the library's
    source compiled under another name all have the same key."""
    return (
        code.co_code,
        code.co_consts,
        code.co_names,
        code.co_varnames,
        code.co_freevars,
        code.co_cellvars,
    )


@dataclass
class _Guard:
    """The child's watch over the student's code, made by :func:`_guard`.

    ``profile`` is the profile hook (a call into a reference's code, by
    :func:`_code_key`, is refused); ``active`` turns on the audit hook,
    which refuses switching off the profile hook and reading the files of
    the references' modules (a reload, or the source compiled anew);
    ``state`` records what was refused."""

    profile: Callable[..., Any]
    active: Callable[[bool], None]
    state: dict[str, str | None]
    keys: dict[tuple[Any, ...], str]


def _guard(references: tuple[str, ...]) -> _Guard:
    """Replace each reference, wherever a tinyformer module or its class
    holds it, by a stub that refuses to run, and install the hooks that
    keep the references out of reach (see :class:`_Guard`)."""
    keys: dict[tuple[Any, ...], str] = {}
    files: set[str] = set()
    state: dict[str, str | None] = {"refused": None, "tampered": None}
    for dotted in references:
        owner, name, found = _resolve(dotted)
        function = (
            found.__func__
            if isinstance(found, (staticmethod, classmethod))
            else found
        )
        code = function.__code__
        keys[_code_key(code)] = dotted
        source = str(Path(code.co_filename).resolve())
        files.update((source, importlib.util.cache_from_source(source)))
        stub = _stub(dotted, state)
        if inspect.isclass(owner):
            setattr(
                owner,
                name,
                staticmethod(stub)
                if isinstance(found, staticmethod)
                else stub,
            )
            continue
        for module in list(sys.modules.values()):
            if getattr(module, "__name__", "").startswith("tinyformer"):
                for attribute, value in list(vars(module).items()):
                    if value is function:
                        setattr(module, attribute, stub)
    on = [False]
    seen: dict[int, tuple[Any, str | None]] = {}
    thread_start = threading.Thread._bootstrap_inner.__code__  # type: ignore[attr-defined]

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        known = seen.get(id(code))
        if known is None or known[0] is not code:
            known = (code, keys.get(_code_key(code)))
            seen[id(code)] = known
        if known[1] is not None:
            state["refused"] = state["refused"] or known[1]
            raise _Refused(known[1])

    def audit(event: str, args: tuple[Any, ...]) -> None:
        if not on[0]:
            return
        if event in ("sys.setprofile", "sys.settrace"):
            # a thread started under threading.setprofile installs the hook
            if sys._getframe(1).f_code is thread_start:
                return
            state["tampered"] = state["tampered"] or f"{event}()"
            raise _Refused(event)
        if event == "open" and isinstance(
            args[0], (str, bytes, os.PathLike)
        ):
            try:
                opened = str(Path(os.fsdecode(args[0])).resolve())
            except (OSError, ValueError):
                return
            if opened in files:
                state["tampered"] = state["tampered"] or (
                    f"reading the library's file {Path(opened).name}"
                )
                raise _Refused(opened)

    def active(value: bool) -> None:
        on[0] = value

    sys.addaudithook(audit)
    return _Guard(profile, active, state, keys)


def _module_of(filename: str) -> str:
    """``tinyformer.models.attention`` for the library's file attention.py (the
    file's own stem elsewhere)."""
    path = Path(filename).resolve()
    if _PACKAGE in path.parents:
        parts = path.relative_to(_PACKAGE.parent).with_suffix("").parts
        return ".".join(part for part in parts if part != "__init__")
    return path.stem


def _child_exit(status: int = 0) -> None:
    """The child's ``os._exit``: a student's call becomes a reported
    failure, not a silent end."""
    _WATCH.exit_called = f"os._exit({status!r})"
    raise _ExitCalled(status)


def _student_frames(
    error: BaseException, path: Path
) -> list[traceback.FrameSummary]:
    return [
        frame
        for frame in traceback.extract_tb(error.__traceback__)
        if frame.filename and Path(frame.filename).resolve() == path
    ]


def _where(error: BaseException, path: Path) -> str:
    """``name.py, line 12: return x.view(...)`` for the last line of the
    student's file on the error's way, or ''."""
    if (
        isinstance(error, SyntaxError)
        and error.filename
        and Path(error.filename).resolve() == path
    ):
        return f"{path.name}, line {error.lineno}: {(error.text or '').strip()}"
    frames = _student_frames(error, path)
    if not frames:
        return ""
    frame = frames[-1]
    return f"{path.name}, line {frame.lineno}: {(frame.line or '').strip()}"


_DEVICES = ("cpu", "cuda", "mps", "xpu")


def _portable(x: object, depth: int = 0) -> object:
    """``x`` as something the parent can read with ``weights_only``:
    dense tensors (detached, on the CPU), numbers, strings, tuples, lists
    and dicts of them; anything else as an :class:`Opaque`."""
    if isinstance(x, torch.Tensor):
        layout, device = x.layout, x.device
        dense = layout == torch.strided and device.type in _DEVICES
        if not dense or x.is_quantized or getattr(x, "is_nested", False):
            return Opaque(
                f"{describe_value(x)} with layout {layout} on device {device}",
                tensor=True,
            )
        plain = x.detach()
        if isinstance(plain, watched.BlockedRow):
            plain = watched.plain(plain)
        if type(plain) is not torch.Tensor:
            return Opaque(
                f"{describe_value(x)} of class {type(x).__qualname__}",
                tensor=True,
            )
        return plain.cpu()
    if x is None or type(x) in (bool, int, float, complex, str):
        return x
    if depth < 4 and type(x) in (tuple, list):
        return type(x)(_portable(item, depth + 1) for item in x)  # type: ignore[call-arg]
    if depth < 4 and type(x) is dict and all(type(key) is str for key in x):
        return {
            key: _portable(value, depth + 1) for key, value in x.items()
        }
    return Opaque(describe_value(x))


def _pack(message: object) -> bytes:
    buffer = io.BytesIO()
    torch.save(message, buffer)
    return buffer.getvalue()


def _printed(stream: io.StringIO) -> list[str]:
    lines = stream.getvalue().splitlines()
    if len(lines) > _PRINT_LINES:
        lines = [
            *lines[: _PRINT_LINES - 1],
            f"... ({len(lines) - _PRINT_LINES + 1} more lines)",
        ]
    # control characters (terminal escapes that could rewrite the report)
    # are shown escaped
    return [
        "".join(
            c if c.isprintable() or c == "\t" else repr(c)[1:-1]
            for c in line[:200]
        )
        for line in lines
    ]


class _Child:
    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.path = Path()
        self.functions: dict[str, Callable[..., Any]] = {}
        self.names: tuple[str, ...] = ()

    def reply(self, message: dict[str, object]) -> None:
        self.conn.send_bytes(_pack(message))

    def run_student(
        self, action: Callable[[], Any], limit: float
    ) -> dict[str, object]:
        """Run ``action`` (the import or a call) under the guard; the
        reply that says what came of it."""
        guard = self.guard
        out = io.StringIO()
        guard.state["refused"] = guard.state["tampered"] = None
        _WATCH.exit_called = None
        # past the limit the child writes its stack and ends itself, so a
        # hung child never outlives a checker that was killed
        faulthandler.dump_traceback_later(
            limit, exit=True, file=sys.__stderr__
        )
        threading.setprofile(guard.profile)
        sys.setprofile(guard.profile)
        guard.active(True)
        reply: dict[str, object]
        try:
            with (
                contextlib.redirect_stdout(out),
                contextlib.redirect_stderr(out),
            ):
                value = action()
            reply = {"kind": "ok", "value": value}
        except BaseException as error:
            reply = {
                "kind": "raised",
                "type": type(error).__name__,
                "error": error,
            }
        finally:
            guard.active(False)
            hook_now = sys.getprofile()
            sys.setprofile(None)
            threading.setprofile(None)
            faulthandler.cancel_dump_traceback_later()
        reply["printed"] = _printed(out)
        if guard.state["refused"] is not None:
            reply = {
                **reply,
                "kind": "refused",
                "reference": guard.state["refused"],
            }
        elif guard.state["tampered"] is not None:
            reply = {
                **reply,
                "kind": "unwatched",
                "how": guard.state["tampered"],
            }
        elif _WATCH.exit_called is not None:
            reply = {**reply, "kind": "exit", "how": _WATCH.exit_called}
        elif hook_now is not guard.profile:
            reply = {
                **reply,
                "kind": "unwatched",
                "how": "sys.setprofile()",
            }
        return reply

    def explain(self, reply: dict[str, object]) -> dict[str, object]:
        """Turn a raised exception into text the parent can read."""
        error = reply.pop("error", None)
        if isinstance(error, BaseException):
            where = _where(error, self.path)
            reply["where"] = where
            raised = reply["kind"] == "raised"
            if raised and isinstance(error, SystemExit):
                reply["kind"] = "exit"
                reply["how"] = f"sys.exit({error.code!r})"
            elif isinstance(error, SyntaxError):
                reply["message"] = str(error.msg)
            else:
                try:
                    reply["message"] = str(error)
                except BaseException:
                    reply["message"] = (
                        "(the error's message could not be read)"
                    )
            frames = _student_frames(error, self.path)
            if (
                raised
                and isinstance(error, NotImplementedError)
                and frames
                and frames[-1].name in self.names
            ):
                reply["kind"] = "unfinished"
                reply["function"] = frames[-1].name
        return reply

    def load(
        self,
        path: str,
        module_name: str,
        names: tuple[str, ...],
        references: tuple[str, ...],
        limit: float,
    ) -> None:
        """Guard the references, import the file at ``path`` within
        ``limit`` seconds and reply whether it defines ``names``."""
        self.path = Path(path).resolve()
        self.names = names
        self.guard = _guard(references)
        spec = importlib.util.spec_from_file_location(
            module_name, self.path
        )
        if spec is None or spec.loader is None:
            self.reply(
                {
                    "kind": "problem",
                    "lines": [
                        f"{self.path} is not a Python file (its name should end in .py)."
                    ],
                }
            )
            return
        module = importlib.util.module_from_spec(spec)
        # dataclasses, typing and pickle look a module up by its name
        sys.modules[module_name] = module
        # the student's folder comes first, as when running the file there
        sys.path.insert(0, str(self.path.parent))
        loader = spec.loader
        reply = self.explain(
            self.run_student(lambda: loader.exec_module(module), limit)
        )
        if reply["kind"] != "ok":
            reply.pop("value", None)
            self.reply(reply)
            return
        problems = []
        for name in names:
            function = getattr(module, name, None)
            if not callable(function):
                problems.append(
                    f"{self.path} does not define a function named {name}; the exercise asks for one."
                )
                continue
            library = _library_name(function) or _copied(
                function, self.guard.keys
            )
            if library:
                problems.append(
                    f"{name} in {self.path.name} is the library's own {library}: the exercise asks you to write it."
                )
            self.functions[name] = function
        self.reply(
            {"kind": "problem", "lines": problems}
            if problems
            else {"kind": "ok", "value": None, "printed": reply["printed"]}
        )

    def call(
        self,
        name: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        limit: float,
    ) -> None:
        torch.manual_seed(0)
        function = self.functions[name]
        watched.begin(args, kwargs)
        try:
            reply = self.run_student(
                lambda: function(*args, **kwargs), limit
            )
        finally:
            seen = watched.end()
        reply = self.explain(reply)
        if reply["kind"] == "ok":
            reply["value"] = _portable(reply["value"])
            reply["watched"] = seen
        else:
            reply.pop("value", None)
        try:
            self.reply(reply)
        except Exception as error:  # a result torch.save cannot write
            self.reply(
                {
                    "kind": "ok",
                    "value": Opaque(
                        f"a result that cannot be sent back ({error})"
                    ),
                    "printed": [],
                }
            )


def _copied(function: object, keys: dict[tuple[Any, ...], str]) -> str:
    """The reference that ``function`` is a copy of (the same code, made
    anew), or ''."""
    code = (
        getattr(inspect.unwrap(function), "__code__", None)
        if callable(function)
        else None
    )
    if code is None:
        return ""
    name = keys.get(_code_key(code), "")
    return f"{name} (a copy of its code)" if name else ""


def _library_name(function: object) -> str:
    """The library's name for ``function`` when it is tinyformer's own (a
    refused stub, a library function or class, or one wrapped by a
    decorator or ``functools.partial``), else ''."""
    seen = 0
    while seen < 20:
        seen += 1
        refused = getattr(function, "__tinyformer_refused__", None)
        if isinstance(refused, str):
            return refused
        if isinstance(function, functools.partial):
            function = function.func
            continue
        wrapped = getattr(function, "__wrapped__", None)
        if wrapped is not None and wrapped is not function:
            function = wrapped
            continue
        break
    if inspect.isclass(function) or inspect.isfunction(function):
        module = getattr(function, "__module__", "") or ""
        code = getattr(function, "__code__", None)
        filename = (
            Path(code.co_filename).resolve() if code is not None else None
        )
        in_package = (
            filename is not None
            and _PACKAGE in filename.parents
            and _TEMPLATES not in filename.parents
        )
        if module.split(".")[0] == "tinyformer" and (
            inspect.isclass(function) or in_package
        ):
            return f"{module}.{function.__qualname__}"
    return ""


def _serve(conn: Any) -> None:
    """The child's loop: load, then calls, until the parent closes the
    pipe."""
    # Ctrl-C is the parent's to handle
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # the student's input() reads nothing; what C code prints goes nowhere
    # (Python's prints are captured per call)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    faulthandler.enable(file=sys.__stderr__)
    real_exit = os._exit
    os._exit = _child_exit  # type: ignore[assignment]
    for name in ("posix", "nt"):
        if name in sys.modules:
            sys.modules[name]._exit = _child_exit  # type: ignore[attr-defined]
    child = _Child(conn)
    child.reply({"kind": "ready"})
    while True:
        try:
            message = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            break
        if message[0] == "load":
            _, path, module_name, names, references, limit = message
            child.load(path, module_name, names, references, limit)
        elif message[0] == "call":
            _, name, args, kwargs, limit = message
            child.call(name, args, kwargs, limit)
    sys.stdout.flush()
    real_exit(0)


def _start_child(stderr_path: str, conn: Any) -> None:
    """The child's entry: its stderr is the file the parent reads when the
    child crashes or hangs (faulthandler writes the stacks there)."""
    try:
        fd = os.open(stderr_path, os.O_WRONLY | os.O_APPEND)
    except OSError:
        # the checker stopped (Ctrl-C) before this child started
        os._exit(1)
    os.dup2(fd, 2)
    os.close(fd)
    _serve(conn)


# -- the parent
# ---------------------------------------------------------------------------------------------


def _context() -> Any:
    """A fork server on Linux (children start in milliseconds from a
    process that has imported torch), spawn elsewhere."""
    if sys.platform.startswith("linux"):
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(
            ["torch", "tinyformer_exercises._sandbox"]
        )
        return context
    return multiprocessing.get_context("spawn")


def _start_fork_server(context: Any) -> None:
    """Start the fork server, if it is not running, with Ctrl-C ignored
    and with /dev/null as its stdout and stderr:
    an ignored signal stays ignored across exec, so the server (which then
    imports torch, seconds) and the children it forks never see the Ctrl-C
    meant for the checker. Only the spawn itself (milliseconds) is
    shielded; the wait for the server is interruptible."""
    if (
        context.get_start_method() != "forkserver"
        or threading.current_thread() is not threading.main_thread()
    ):
        return
    import multiprocessing.forkserver

    # The server, and every child it forks, gets /dev/null as its stdout
    # and stderr: the student's code cannot write into the report (a child
    # sends its stack to a file of its own, _start_child).
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    null = os.open(os.devnull, os.O_WRONLY)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        os.dup2(null, 1)
        os.dup2(null, 2)
        multiprocessing.forkserver.ensure_running()
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, null):
            os.close(fd)
        signal.signal(signal.SIGINT, previous)


# the fields of each kind of reply, and their types (the parent trusts none
# of what the child sends: a student's code can reach the child's pipe)
_REPLIES: dict[str, dict[str, type | tuple[type, ...]]] = {
    "ready": {},
    "ok": {"value": object},
    "problem": {"lines": list},
    "raised": {"type": str, "message": str, "where": str},
    "unfinished": {"function": str},
    "exit": {"how": str},
    "refused": {"reference": str},
    "unwatched": {"how": str},
}


def _list(value: object) -> list[object]:
    """``value`` when it is a list, else a list that fails a check of its lines."""
    return value if isinstance(value, list) else [None]


def _read_back(data: bytes) -> dict[str, Any]:
    """A reply of the child's, read with ``weights_only`` and checked
    field by field; a :class:`StudentExit` for anything else."""
    with torch.serialization.safe_globals([Opaque]):
        message = torch.load(io.BytesIO(data), weights_only=True)
    fields = (
        _REPLIES.get(message.get("kind"))  # type: ignore[arg-type]
        if isinstance(message, dict)
        else None
    )
    printed = (
        message.get("printed", []) if isinstance(message, dict) else None
    )
    if (
        fields is None
        or not isinstance(printed, list)
        or not all(isinstance(line, str) for line in printed)
        or any(
            key in fields and not isinstance(message[key], fields[key])
            for key in (
                "type",
                "message",
                "where",
                "function",
                "how",
                "reference",
                "lines",
            )
            if key in message
        )
        or any(
            key not in message
            for key in fields
            if key not in ("message", "where")
        )
        or not all(
            isinstance(line, str)
            for key in ("lines", "watched")
            for line in _list(message.get(key, []))
        )
    ):
        raise StudentExit(
            "the process running your code sent back a message the checker did not ask for"
        )
    return message


_STARTUP_LIMIT = 300.0
_STACK_LINE = re.compile(
    r'File "(?P<file>.+)", line (?P<line>\d+) in (?P<name>\S+)'
)


class Student:
    """The student's file, imported in a child process.

    Args:
        path: the student's ``.py`` file.
        module_name: the name it is imported under.
        names: the functions the exercise asks for.
        references: dotted names of the library functions and methods that
            answer the exercise; they refuse to run in the child.
        check_limit: seconds each check may take (all its calls together).
        import_limit: seconds the import may take.
    """

    def __init__(
        self,
        path: Path,
        module_name: str,
        names: tuple[str, ...],
        references: tuple[str, ...],
        *,
        check_limit: float,
        import_limit: float,
    ) -> None:
        self.path = path.resolve()
        self.module_name = module_name
        self.names = names
        self.references = references
        self.check_limit = check_limit
        self.import_limit = import_limit
        self.process: Any = None
        self.conn: Any = None
        self.stderr: Path | None = None
        self.deadline = 0.0
        self.printed: list[str] = []

    # the child's life

    def start(self) -> list[str]:
        """Start a child and import the file there: [] when it imported,
        else the lines that say why not."""
        self.close()
        context = _context()
        handle, name = tempfile.mkstemp(
            prefix="tinyformer-check-", suffix=".txt"
        )
        os.close(handle)
        self.stderr = Path(name)
        parent, child = context.Pipe()
        self.process = context.Process(
            target=_start_child, args=(name, child), daemon=True
        )
        _start_fork_server(context)
        self.process.start()
        child.close()
        self.conn = parent
        try:
            # the first start of a fork server imports torch: minutes on a slow machine
            self.receive(
                _STARTUP_LIMIT, "starting the process that runs your code"
            )
            self.send(
                (
                    "load",
                    str(self.path),
                    self.module_name,
                    self.names,
                    self.references,
                    self.import_limit,
                )
            )
            reply = self.receive(self.import_limit, "importing the file")
        except StudentExit as ended:
            return [f"Could not import {self.path}:", f"  {ended.line}"]
        self.printed = list(reply.get("printed", []))
        kind = reply["kind"]
        if kind == "ok":
            return []
        if kind == "problem":
            return list(reply["lines"])
        return [
            f"Could not import {self.path}:",
            *(
                f"  {line}"
                for line in self.failure_lines(reply, "importing the file")
            ),
        ]

    def close(self) -> None:
        """End the child (if any) and remove its stack file."""
        if self.conn is not None:
            with contextlib.suppress(OSError):
                self.conn.close()
            self.conn = None
        if self.process is not None and self.process.pid is not None:
            self.process.join(timeout=2)
            if self.process.is_alive():
                self.process.kill()
                self.process.join(timeout=5)
            self.process = None
        if self.stderr is not None:
            with contextlib.suppress(OSError):
                self.stderr.unlink()
            self.stderr = None

    def kill(self) -> None:
        if (
            self.process is not None
            and self.process.pid is not None
            and self.process.is_alive()
        ):
            self.process.kill()
            self.process.join(timeout=5)
        self.close()

    def begin_check(self) -> None:
        """Start the clock of one check; restart a child that a previous
        check ended."""
        self.deadline = time.monotonic() + self.check_limit
        self.printed = []
        if self.process is None:
            problem = self.start()
            if problem:
                raise StudentExit(
                    " ".join(line.strip() for line in problem)
                )

    # messages

    def send(self, message: tuple[Any, ...]) -> None:
        try:
            self.conn.send_bytes(pickle.dumps(message))
        except (OSError, ValueError) as error:
            raise StudentExit(
                f"the process running your code is gone ({error})"
            ) from None

    def receive(
        self, limit: float, doing: str, *, stated: float | None = None
    ) -> dict[str, Any]:
        """The child's next reply within ``limit`` seconds; a
        :class:`StudentExit` when the child ends or runs past it (the
        message gives ``stated`` seconds as the limit, ``limit`` if None)."""
        started = time.monotonic()
        try:
            ready = self.conn.poll(max(limit, 0.0) + 2.0)
            data = self.conn.recv_bytes() if ready else None
        except (EOFError, OSError):
            data = b""
        if data:
            try:
                return _read_back(data)
            except StudentExit:
                self.kill()
                raise
            except Exception:
                self.kill()
                raise StudentExit(
                    f"{doing}: the process running your code sent back a result the checker cannot read"
                ) from None
        if data is None:
            place = self.stack_place()
            self.kill()
            raise StudentExit(
                f"{doing} ran past the time limit of {stated or limit:g} s{place}"
            )
        self.process.join(timeout=5)
        status = self.process.exitcode
        place = self.stack_place()
        self.kill()
        if time.monotonic() - started >= limit:
            # the child's own watchdog ended it
            raise StudentExit(
                f"{doing} ran past the time limit of {stated or limit:g} s{place}"
            )
        if status is not None and status < 0:
            how = f"crashed the process running it (signal {-status})"
        else:
            how = f"ended the process running it (exit status {status})"
        raise StudentExit(f"{doing} {how}{place}")

    def stack_place(self) -> str:
        """``, at name.py, line 3: while True:`` from the last stack
        faulthandler wrote, or ''."""
        if self.stderr is None:
            return ""
        time.sleep(0.2)
        try:
            text = self.stderr.read_text(errors="replace")
        except OSError:
            return ""
        # faulthandler prints the innermost frame first
        for line in text.splitlines():
            match = _STACK_LINE.search(line)
            if match and Path(match["file"]).resolve() == self.path:
                number = int(match["line"])
                source = _line_of(self.path, number)
                return f", at {self.path.name}, line {number}: {source}"
        return ""

    def failure_lines(self, reply: dict[str, Any], doing: str) -> list[str]:
        """What went wrong in a reply that is not a result, in the
        student's words."""
        where = reply.get("where") or ""
        at = f", at {where}" if where else ""
        kind = reply["kind"]
        if kind == "exit":
            return [
                f"{doing} called {reply['how']}, which the checker counts as a failure{at}"
            ]
        if kind == "refused":
            return [
                f"{doing} called the library's own {reply['reference']} (the exercise asks you to write it yourself){at}"
            ]
        if kind == "unwatched":
            return [
                f"{doing} tried to get past the checker's watch on the library ({reply.get('how', '')}): "
                f"not allowed{at}"
            ]
        if kind == "unfinished":
            return [f"{reply['function']} still raises NotImplementedError"]
        message = reply.get("message", "")
        lines = [
            f"{doing} raised {reply.get('type', 'an error')}: {message}".rstrip(
                ": "
            )
        ]
        lines.append(
            f"at {where}"
            if where
            else "(the error is not on a line of your file)"
        )
        return lines

    def call(
        self,
        name: str,
        call_text: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        """Call the student's ``name`` in the child; its result, or an
        exception of the checker's (see :mod:`tinyformer_exercises.checking`)."""
        if self.process is None:
            raise StudentExit(
                f"calling {call_text} was not done: the process running your code is gone"
            )
        limit = self.deadline - time.monotonic()
        self.send(("call", name, args, kwargs, max(limit, 0.1)))
        reply = self.receive(
            limit, f"calling {call_text}", stated=self.check_limit
        )
        self.printed.extend(reply.get("printed", []))
        kind = reply["kind"]
        if kind == "ok" and reply.get("watched"):
            raise ReadNotAllowed(f"calling {call_text}:", *reply["watched"])
        if kind == "ok":
            return reply["value"]
        if kind == "unfinished":
            raise Unfinished(reply["function"])
        lines = self.failure_lines(reply, f"calling {call_text}")
        if kind in ("exit", "refused", "unwatched"):
            raise StudentExit(lines[0])
        raise CheckFailed(*lines)


def _line_of(path: Path, number: int) -> str:
    try:
        return (
            path.read_text(errors="replace")
            .splitlines()[number - 1]
            .strip()
        )
    except (OSError, IndexError):
        return ""


class Remote:
    """One of the student's functions, called in the child (what a check
    receives as ``f[name]``)."""

    def __init__(self, student: Student, name: str) -> None:
        self.student = student
        self.name = name

    def run(self, call_text: str, *args: Any, **kwargs: Any) -> Any:
        return self.student.call(self.name, call_text, args, kwargs)
