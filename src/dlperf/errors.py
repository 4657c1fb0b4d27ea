"""The error table: what the CLI turns into one line and an exit code."""

from __future__ import annotations

import difflib
import dis
import errno
import os
import re
import resource
import sys
import threading
import traceback
from collections.abc import Iterator
from types import FrameType, TracebackType

from dlperf import stopping
from dlperf.blas import address_limit, room

# The module name a user's model file is imported under (models.registry), so that what its
# code raises can be told apart from dlperf's own (a sys.exit in its forward).
USER_MODULE_PREFIX = "dlperf_user_"
# A key of the builtins every module of a user's model file runs with (the file itself, the
# modules beside it it imports and their submodules: models.registry gives each directory's
# modules an `__import__` of their own), which marks its code as the model's.
MODEL_CODE = "__dlperf_model_code__"

# Errors Python itself raises in the code that runs into them: where the model's code is on
# the way, the bug is the model's (a misspelt name or attribute, a division by zero, endless
# recursion, a missing import), never torch refusing the input's shape or dtype.
PYTHONS_OWN = (NameError, AttributeError, ZeroDivisionError, RecursionError, ImportError)


# The note (PEP 678) that says where a model's own exception was raised, when a command runs
# many models (a sweep's point): told before "the model raised", which named no point.
_WHERE = "dlperf, where: "


# The note on a stop's KeyboardInterrupt that says what the stop left part-done (an MLflow run
# part-written), for the command to say after the stop (Typer turns the interrupt into exit
# code 130 before the command line's error table sees it): the library prints nothing.
_LEFT = "dlperf, stopped: "


def note_left(stop: KeyboardInterrupt, line: str) -> None:
    """Note on `stop` what it left part-done, for the command line to say."""
    stop.add_note(_LEFT + line)


def noted_left(stop: KeyboardInterrupt) -> list[str]:
    """What `note_left` noted on `stop`, in order."""
    notes = [n for n in getattr(stop, "__notes__", ()) if isinstance(n, str)]
    return [n.removeprefix(_LEFT) for n in notes if n.startswith(_LEFT)]


def note_where(e: BaseException, where: str) -> None:
    """Note on `e` (a model's own exception) where it was raised: "lr.toml point 3 (...)"."""
    e.add_note(_WHERE + where)


def noted_where(e: BaseException) -> str | None:
    """Where `note_where` said `e` was raised, or None."""
    notes = [n for n in getattr(e, "__notes__", ()) if isinstance(n, str)]
    return next((n.removeprefix(_WHERE) for n in notes if n.startswith(_WHERE)), None)


def _model_module(name: str) -> bool:
    if name.startswith(USER_MODULE_PREFIX):
        return True
    space = getattr(sys.modules.get(name), "__builtins__", None)
    return isinstance(space, dict) and space.get(MODEL_CODE) is True


def in_model_file(frame: FrameType) -> bool:
    """Whether `frame` runs code of a user's model file (or a module beside it)."""
    if str(frame.f_globals.get("__name__", "")).startswith(USER_MODULE_PREFIX):
        return True
    return frame.f_builtins.get(MODEL_CODE) is True


def in_import_hook(frame: FrameType) -> bool:
    """Whether `frame` is the registry's `__import__` for model files (`registry._import`),
    which stands for a model file's `import` statement: Python's own import shows no frame."""
    name = frame.f_globals.get("__name__")
    return name == "dlperf.models.registry" and frame.f_code.co_name == "_import"


def _dlperfs(frame: FrameType) -> bool:
    return str(frame.f_globals.get("__name__", "")).startswith("dlperf.")


def model_frames(e: BaseException) -> list[traceback.FrameSummary]:
    """The frames of `e`'s traceback from the first in a user's model file on (its code and
    what it called); none when no frame is a model file's (dlperf's own fault)."""
    walked = list(traceback.walk_tb(e.__traceback__))
    while walked and in_import_hook(walked[-1][0]):
        walked.pop()
    ours = [i for i, (frame, _) in enumerate(walked) if in_model_file(frame)]
    if not ours:
        return []
    # dlperf's own code below the model's last frame, where torch raised (not dlperf), is its
    # instrumentation (analyze's counting dispatch, which a torch call of the model's line
    # runs through): the model's frames end at that line, torch's on the way left out. Where
    # dlperf raised (a print to a closed stdout, through its stream) its frames stay, told so
    below = [_dlperfs(frame) for frame, _ in walked[ours[-1] + 1 :]]
    if any(below) and not below[-1]:
        walked = walked[: ours[-1] + 1]
    return list(traceback.StackSummary.extract(iter(walked[ours[0] :])))


def error_said(e: BaseException) -> str:
    """`e` as a line tells it: "ValueError: boom", or the type alone where it has no text."""
    text = error_text(e)
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


# The C++ backtrace torch's C++ errors (c10::Error) carry in their text, after their message:
# "Exception raised from THPUtils_unpackLong at /__w/pytorch/.../python_numbers.h:79 (most
# recent call first):" and a line a frame ("frame #0: c10::Error::Error(...) + 0x9d (0x7f...
# in .../libc10.so)", "<omitting python frames>"), up to 60 of them. A Python error that
# quotes one (a model.kwargs integer past int64 given to nn.Linear: torch's TypeError quotes
# "Overflow when unpacking long long" and its frames) holds it in the middle of its text.
_CPP_BACKTRACE = re.compile(
    r"\n?Exception raised from [^\n]* \(most recent call first\):"
    r"(?:\n(?:frame #\d+: |<omitting python frames>)[^\n]*)*\n?"
)


# The most of an error's text dlperf keeps (`error_text`): a model's exception may say a
# megabyte (a tensor printed whole, a message built in a loop), which was one 1 MB line on
# screen, twice in a sweep's log, and the run's stored error whole. Its beginning and its end
# are kept (the end: a TorchScript error's own line, the last of its text, and `UserError`'s
# hint). Longer than _LONGEST, not _HEAD + _TAIL: a line that quotes a cut text in a few words
# of its own ("model file m.py failed to import: ...") is not cut a second time.
_HEAD = 3000
_TAIL = 1000
_LONGEST = 5000


def error_text(e: BaseException) -> str:
    """`str(e)` without the C++ backtrace torch's errors may carry (1.5 KB of frames,
    addresses and build paths inside a one-line error), or `<str() failed>` where the
    exception's own __str__ raises: its text is formatted while it is being handled (the
    failed run's error, the CLI's line), where the __str__'s error replaced the user's and
    left the run unmarked. A text longer than 5,000 characters is cut to its first 3,000 and
    last 1,000, "... (N characters left out) ..." between. Here, not in parsing:
    the checks below read the text of whatever a model or a library raised, and every line
    dlperf makes of it takes it from here."""
    try:
        text = str(e)
    except Exception:
        return "<str() failed>"
    return _cut(_CPP_BACKTRACE.sub("", text))


def _cut(text: str) -> str:
    """`text`, or where it is longer than _LONGEST its first _HEAD and last _TAIL characters,
    " ... (1,234 characters left out) ... " between (as `parsing.quoted` counts them)."""
    if len(text) <= _LONGEST:
        return text
    left_out = len(text) - _HEAD - _TAIL
    return f"{text[:_HEAD]} ... ({left_out:,} characters left out) ... {text[-_TAIL:]}"


# What cuBLAS, cuDNN and torch's CPU allocator say when an allocation fails: a plain
# RuntimeError, not torch's OutOfMemoryError. On Linux the CPU allocator words it "can't
# allocate memory: you tried to allocate N bytes".
OOM_MESSAGES = (
    "out of memory",
    "CUBLAS_STATUS_ALLOC_FAILED",
    "CUDNN_STATUS_ALLOC_FAILED",
    "DefaultCPUAllocator: not enough memory",
    "can't allocate memory",
)


def out_of_memory(e: BaseException) -> bool:
    """Whether `e` says the device (or the host) ran out of memory. Here, beside error_text,
    and without importing torch: the CLI asks it of an error that ended a command, where an
    import of the engine's modules to ask ran out of the memory it was asking about."""
    if isinstance(e, MemoryError):
        return True
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(e, torch.cuda.OutOfMemoryError):
        return True
    if not isinstance(e, RuntimeError):
        return False
    # error_text: asked of any error that ends a command, a model's whose __str__ raises too
    text = error_text(e)
    if any(m in text for m in OOM_MESSAGES):
        return True
    # oneDNN's one word for any failure, its allocations' included: under an address-space
    # limit (ulimit -v) that is what it was, and the images the dry checks fed were blamed
    return ONEDNN_FAILED in text and address_limit() is not None


ONEDNN_FAILED = "could not create a primitive"


def memory_limit() -> str:
    """The address-space limit, when one is set (ulimit -v, in KiB as bash takes it), as the
    hint a failed load or allocation ends with; "" without one. Here, not in the CLI: a scale
    worker that ran out of it says so too (dlperf.distributed.worker)."""
    words = limit_words()
    return "" if words is None else f" ({words})"


def limit_words() -> str | None:
    """`memory_limit`'s words without their parentheses, a UserError's hint; None without a
    limit."""
    limit = address_limit()
    return None if limit is None else f"a memory limit, ulimit -v {limit // 1024} may be too low"


def innermost(e: BaseException) -> TracebackType | None:
    """The last entry of `e`'s traceback: where it was raised."""
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb


# torch's error for a module called without a forward of its own (nn.Module's placeholder)
_NO_FORWARD = re.compile(r'Module \[(\w+)\] is missing the required "forward" function')


def missing_forward(e: BaseException, what: str) -> UserError | None:
    """The one line for a module inside `what` (the model) that its forward calls but that has
    no forward of its own (a misspelt `def foward` in a block, an nn.ModuleList called as a
    layer): torch's NotImplementedError was told as the input's fault. None for any other."""
    found = _NO_FORWARD.search(error_text(e)) if isinstance(e, NotImplementedError) else None
    if found is None:
        return None
    tb = innermost(e)  # torch's placeholder forward, its `self` the module called
    module = tb.tb_frame.f_locals.get("self") if tb is not None else None
    cls = found.group(1)
    return UserError(
        f"{what} calls a module of class {cls}, and class {cls} defines no forward()",
        no_forward_fix(type(module)) if module is not None else f"define forward in class {cls}",
    )


def no_forward_fix(cls: type) -> str:
    """What to do about a module class `cls` without a forward: a container of torch's
    (nn.ModuleList, nn.ModuleDict, a bare nn.Module) holds layers, not how to call them; a
    class of the user's is told the name of its own closest to `forward` (`def foward`)."""
    if cls.__module__.startswith("torch."):
        return (
            f"an nn.{cls.__name__} holds layers, not how to call them: call them one by one, "
            "or hold them in an nn.Sequential"
        )
    # Its own names, not nn.Module's (whose _forward_hooks would be "close")
    base = next((c for c in cls.__mro__ if c.__module__ == "torch.nn.modules.module"), object)
    own = [n for n in dir(cls) if n not in dir(base) and callable(getattr(cls, n, None))]
    close = difflib.get_close_matches("forward", own, n=1)
    if close:
        return f"it has `{close[0]}`: did you mean forward?"
    return "define forward(self, x), which is called with a batch of images (N, C, H, W)"


# torch's words for a device type this machine (or this build of torch) lacks, the type named
# where they name it: CUDA's lazy start ("Found no NVIDIA driver", "Torch not compiled with CUDA
# enabled"), an unbuilt backend ("not linked with support for mps devices"), and a factory
# function's device=... with no kernel for that device ('MPS' backend, for a type not present).
_NO_DEVICE = re.compile(
    r"(?P<cuda>Found no NVIDIA driver|No CUDA GPUs are available)"
    r"|Torch not compiled with (?P<compiled>\w+) enabled"
    r"|not linked with support for (?P<linked>\w+) devices"
    r"|with arguments from the '(?P<backend>\w+)' backend"
)


def missing_device(e: BaseException, what: str, on: str) -> MissingDevice | None:
    """The one line for a forward of `what` (the model) that moved its tensors to a device this
    machine lacks (.to("cuda"), .cuda(), torch.zeros(..., device="mps")), which dlperf runs on
    `on`: torch's error was told as the images' or the input shape's fault. None for any other.
    Shared by the dry checks (run, export) and the counting forward (analyze, predict)."""
    found = _NO_DEVICE.search(error_text(e))
    if found is None:
        return None
    asked = "cuda" if found["cuda"] else (found["compiled"] or found["linked"] or "").lower()
    if found["backend"] is not None:
        asked = found["backend"].lower()
        if _present(asked):  # an operator missing for a device it has: not the device's fault
            return None
    return MissingDevice(
        f"{what} moves tensors to {asked} in its forward, and this machine has no {asked} "
        f"(dlperf runs it on {on})",
        "use the input's device, .to(x.device), or leave the placing to dlperf",
    )


def _present(backend: str) -> bool:
    """Whether this machine has devices of the type `backend` names, or it names no device
    type at all (quantizedcpu): only a device type that is not here is missing."""
    import torch  # lazily: the CLI imports this module at start, before any torch is needed

    if backend in ("cpu", "meta"):
        return True
    try:
        torch.device(backend)
    except RuntimeError:  # "Expected one of cpu, cuda, ... device type"
        return True
    here = torch.accelerator.current_accelerator(check_available=True)
    return here is not None and here.type == backend


def raised_by_model(e: BaseException) -> bool:
    """Whether the model's own code raised `e`: an exception of a class a model file defines,
    or one a `raise` or `assert` in a model file raised, or an error of Python's own
    (PYTHONS_OWN) raised on the way through a model file's code, or a KeyError or ValueError
    Python raised at the model file's own line. Anything else was raised
    inside torch (or a library the model calls), or came out of a torch operation the model's
    code called: an operation refusing the input's shape or dtype, or a layer refusing its
    arguments, which is the input's fault. A model file's modules are the file and those
    beside it that it imports. Shared by analyze (forward, backward) and a model file's
    factory (models.registry)."""
    if _model_module(type(e).__module__):
        return True
    if isinstance(e, PYTHONS_OWN) and any(
        in_model_file(frame) for frame, _ in traceback.walk_tb(e.__traceback__)
    ):
        return True
    tb = innermost(e)
    if tb is None or not in_model_file(tb.tb_frame):
        return False
    # The innermost frame is the model file's: a RuntimeError raised by `x.view(...)` there
    # stops at the call, one the model raises itself at a raise instruction.
    at = next(
        (i.opname for i in dis.get_instructions(tb.tb_frame.f_code) if i.offset == tb.tb_lasti),
        None,
    )
    if at == "RAISE_VARARGS":
        return True
    # Python's own lookups and conversions in the model's line: a KeyError (a dict's missing
    # key, self.cfg["scael"]) or a ValueError (int("1.5")) is never a torch operation refusing
    # the input, which refuses with RuntimeError, TypeError or IndexError; but a ValueError
    # unpacking a shape (`n, c, h, w = x.shape`) is the input's
    return isinstance(e, KeyError) or (isinstance(e, ValueError) and at != "UNPACK_SEQUENCE")


class ModelOsExit(SystemExit):
    """os._exit(`code`) called by a model file's code, raised in its place (models.registry):
    os._exit ends the process at once, with no word, nothing stored and the model's exit code.
    A SystemExit, so that whatever tells a model's sys.exit tells it too."""


def exit_call(e: BaseException | None) -> str:
    """How a model ended its process, as its line names the call: "os._exit" for a
    ModelOsExit, else "sys.exit"."""
    return "os._exit" if isinstance(e, ModelOsExit) else "sys.exit"


def model_exited(code: object, when: str) -> str:
    """The one line for a model that called sys.exit(`code`) `when` (during training, while
    being counted), the same from every trainer and the API; os._exit where the exception
    being handled is a ModelOsExit (every caller calls this in its `except SystemExit`)."""
    return (
        f"the model called {exit_call(sys.exception())}({code!r}) {when} (a model that cannot "
        "go on should raise an exception)"
    )


class UserError(Exception):
    """Bad input (config, data file, model name, request): one line, exit code 2."""

    exit_code = 2

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


def not_utf8(path: object, e: UnicodeDecodeError) -> UserError:
    """The one line for a file the user named that is not UTF-8 (a Latin-1 export, a binary).
    No offset: a reader that decodes in chunks knows it only within its chunk."""
    return UserError(f"{path}: not UTF-8 text (byte 0x{e.object[e.start]:02x})", "save it as UTF-8")


class MissingDevice(UserError):
    """A forward that moved its tensors to a device this machine lacks (`missing_device`): no
    sign of the images' shape or dtype, to be told as it is."""


class NoSuchRun(UserError):
    """A run id the store does not hold (told apart from a store that cannot be read)."""


class StoreGone(UserError):
    """The run store went away under a command that was writing it: a PostgreSQL server that
    stopped answering, a SQLite file deleted or replaced. Not the user's input, so exit code
    1, but still one line (through the same table as UserError)."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None, run_id: int | None = None) -> None:
        super().__init__(message, hint)
        self.run_id = run_id  # the run it was recording, once `RunStore.recording` knows it


class GoneMeanwhile(UserError):
    """A run the command was using, deleted under it by another process (`runs delete`): not
    the input's fault, so exit code 1, in one line naming it."""

    exit_code = 1


class NoThreads(UserError):
    """A thread or process that could not be started (`out_of_threads`): the host's limit on
    them, not the input's, so exit code 1, in one line naming it (`threads_limit`)."""

    exit_code = 1


class MemoryRanOut(UserError):
    """Memory that ran out doing what the input asked (building its model, the model's dry
    forward): the machine's, a device's or a memory limit's, not the input's fault, so exit
    code 1 as the CLI's own out-of-memory line, but one line with its hint all the same."""

    exit_code = 1


# torch's CPU allocator's words for an allocation that failed (Linux's): of "[enforce fail at
# alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: ... Error code 12 (Cannot allocate
# memory)" the size is all a reader can act on.
_CPU_ALLOCATION = re.compile(r"can't allocate memory: you tried to allocate (\d+) bytes")


def allocated_bytes(e: BaseException) -> int | None:
    """The size of the allocation torch's CPU allocator's failure `e` says it tried; None for
    any other error (CUDA's says its size, and the device's capacity, in words already)."""
    found = _CPU_ALLOCATION.search(error_text(e))
    return None if found is None else int(found.group(1))


def out_of_threads(error: BaseException) -> bool:
    """Whether `error` is, or was raised because, a thread or process could not be started,
    as the limit on a user's processes and threads (`ulimit -u`) refuses them: Python's
    "can't start new thread", fork's EAGAIN (asked only where a thread or process was being
    started), ONNX Runtime's "pthread_create failed"."""
    return any(
        (isinstance(e, RuntimeError) and error_text(e).startswith("can't start new thread"))
        or (isinstance(e, OSError) and e.errno == errno.EAGAIN)
        or "pthread_create failed" in error_text(e)
        for e in causes(error)
    )


# glibc's default thread stack where `ulimit -s` is unlimited (x86-64's; other architectures'
# are larger): the least a new thread's stack takes.
_UNLIMITED_STACK = 2 * 2**20


def _thread_stack() -> int:
    """The bytes of address space a new thread's stack takes: Python's `threading.stack_size`
    where one is set, else glibc's default, `ulimit -s`."""
    if (size := threading.stack_size()) > 0:
        return size
    soft = resource.getrlimit(resource.RLIMIT_STACK)[0]
    return _UNLIMITED_STACK if soft == resource.RLIM_INFINITY else soft


def threads_limit(also: str = "") -> str:
    """The fix for a process that could not start a thread, the limit named: "ulimit -u 64 is
    too low: raise it" (`also`: another way out, ", or use --threads 1"). An address-space
    limit (`ulimit -v`) that leaves no room for a thread's stack is named instead:
    pthread_create fails with the same EAGAIN when it cannot map the stack as at the limit on
    processes, and `serve` under `ulimit -v 260000` blamed pids.max and ulimit -u."""
    limit = address_limit()
    stack = _thread_stack()
    if limit is not None and not room(stack + resource.getpagesize()):  # and its guard page
        return (
            f"a memory limit, ulimit -v {limit // 1024}, leaves no room for another thread's "
            f"{stack / 2**20:g} MiB stack: raise it{also}"
        )
    soft = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    # The kernel holds root to no ulimit -u: then another limit, a cgroup's (a container's
    # --pids-limit, systemd's TasksMax) or the kernel's, and naming ulimit -u misled.
    if soft == resource.RLIM_INFINITY or os.geteuid() == 0:
        return (
            f"the limit on processes and threads (a cgroup's pids.max, ulimit -u) is reached{also}"
        )
    return f"ulimit -u {soft} is too low: raise it{also}"


class CheckFailed(Exception):
    """A check the user asked for (parity, a threshold) failed: exit code 1."""

    exit_code = 1


def interrupted(error: BaseException) -> bool:
    """Whether `error` is a Ctrl-C or SIGTERM (dlperf.stopping raises both as
    KeyboardInterrupt), or was raised because of one: an interrupt that lands in code which
    wraps what it raises arrives as another exception caused by it (a class body's
    `__set_name__` turns it into a RuntimeError, as when torch imports torch._dynamo on an
    optimizer's first use), and any error once a stop signal has come is taken as its
    consequence (one that lands inside numpy's import leaves later imports failing with
    errors that name nothing)."""
    if stopping.requested():
        return True
    return any(isinstance(e, KeyboardInterrupt) for e in causes(error))


def causes(error: BaseException) -> Iterator[BaseException]:
    """`error`, then the error it was raised from or while handling, and so on (each once)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        yield current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
