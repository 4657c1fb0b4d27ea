"""Output paths, checked before the work that fills them."""

from __future__ import annotations

import errno
import functools
import hashlib
import itertools
import os
import re
import resource
import socket
import stat
import traceback
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING

from dlperf.errors import error_text, in_model_file

if TYPE_CHECKING:  # matplotlib is imported by what draws, not by every command's paths
    from matplotlib.figure import Figure


def not_regular(path: str | os.PathLike[str]) -> str | None:
    """What `path` is when it is there (through links) but is not a regular file: "a FIFO",
    "a directory", "a character device" (a link to /dev/zero), "a block device", "a socket";
    None for a regular file, or for nothing there (the caller says "no such file" its way).
    Stat'ed, never opened: opening a FIFO waits for a writer, forever when there is none."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):  # missing, a dangling link, a NUL in the name
        return None
    if stat.S_ISREG(mode):
        return None
    kinds = {
        stat.S_ISFIFO: "a FIFO",
        stat.S_ISDIR: "a directory",
        stat.S_ISCHR: "a character device",
        stat.S_ISBLK: "a block device",
        stat.S_ISSOCK: "a socket",
    }
    return next((kind for test, kind in kinds.items() if test(mode)), "of another kind")


_VARIABLE = re.compile(r"\$(\w+|\{\w+\})")


def unexpanded(text: str) -> tuple[str, str] | None:
    """What keeps the path `text`, not there, from being read as meant, and its fix: a file://
    URL, or an environment variable (`$HOME/data` in a TOML file, or in single quotes on the
    command line: only a shell expands one). Read literally, each was a relative path "not
    found" in the current directory, or to be given as an absolute path, which it was. None
    for neither, or for a path of those very characters that is there."""
    if os.path.lexists(text):
        return None
    if text.startswith("file:/"):
        meant = urllib.parse.unquote(urllib.parse.urlparse(text).path)
        return "is a file:// URL, not a path", f"give the path itself: {meant}"
    if (found := _VARIABLE.search(text)) is None:
        return None
    name = found.group(1).strip("{}")
    fix = (  # a TOML file's "$HOME/data" is not a shell's
        f"write the path itself, {os.path.expandvars(text)}: only a shell expands a variable, "
        "outside single quotes"
        if name in os.environ
        else f"write the path itself (${name} is not set here)"
    )
    return f"holds the environment variable {found.group(0)}, which dlperf does not expand", fix


def link_loop(path: str | os.PathLike[str]) -> str | None:
    """The links `path` leads through, "a -> b -> a", where following it meets a loop of
    symbolic links (ELOOP), from the first part of it that loops; None where it does not.
    os.path.exists is False of a loop as of nothing there, and a loop read as a link to
    nothing sent the user to restore a file that is there."""
    whole = Path(path)
    if not _loops(whole):
        return None
    start = next(p for p in (*reversed(whole.parents), whole) if _loops(p))
    chain, at = [str(start)], start
    seen: set[str] = set()
    while os.path.islink(at) and len(chain) <= 40:  # Linux follows 40 links at most
        seen.add(os.path.abspath(at))
        target = os.readlink(at)
        chain.append(target)
        at = Path(os.path.dirname(os.path.abspath(at))) / target
        if os.path.abspath(at) in seen:
            return " -> ".join(chain)
    return " -> ".join(chain[:40]) + " -> ..."  # a chain too long, or a loop further on


def _loops(path: Path) -> bool:
    """Whether following `path` meets a loop of links."""
    try:
        os.stat(path)
    except OSError as e:
        return e.errno == errno.ELOOP
    except ValueError:  # a NUL in the name
        return False
    return False


def link_to_nothing(path: str | os.PathLike[str]) -> str | None:
    """The target of `path` where it is a link to nothing there (a set on a drive not
    mounted), not a loop (see `link_loop`); None otherwise."""
    if os.path.islink(path) and not os.path.exists(path) and not _loops(Path(path)):
        return os.readlink(path)
    return None


def file_digest(path: str | os.PathLike[str]) -> str | None:
    """The sha256 of the file at `path`, read in chunks (weights files are 100s of MB); None
    where no regular file is there to read. Stat'ed first: a FIFO would block the read for
    ever."""
    if not os.path.isfile(path):
        return None
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as file:
            while chunk := file.read(1 << 20):
                digest.update(chunk)
    except OSError:
        return None
    return digest.hexdigest()


def no_file_of_bytes(path: str | os.PathLike[str]) -> str | None:
    """What `path` is when it is there but holds no bytes of its own to read as a file: one of
    `not_regular`'s kinds, or a file of the kernel's (/proc, /sys), regular and of size 0 yet
    with text. Each reads as size 0, as an empty file does (a store path of them read as an
    empty store). None for a regular file, or for nothing there. Reading a regular file never
    waits."""
    kind = not_regular(path)
    if kind is not None:
        return kind
    try:
        if os.stat(path).st_size == 0:
            with open(path, "rb") as file:
                # Still 0 once read: a file another process is writing (a store opened by
                # several at once) read as 0 at first, and grows before its bytes can be read.
                if file.read(1) and os.fstat(file.fileno()).st_size == 0:
                    return "a file of the kernel's, whose size reads 0"
    except OSError:
        pass
    return None


def image_file(path: Path, fix_for_a_folder: str = "give its image files, e.g. DIR/*.png") -> None:
    """Refuse, in one line, a `path` given for an image file that is not one: a FIFO or a
    device (stat'ed, never opened), a directory ("no image file DIR" read as if nothing were
    there; `fix_for_a_folder` says what to give instead), or nothing at all."""
    from dlperf.errors import UserError

    kind = not_regular(path)
    if kind == "a directory":
        raise UserError(f"{path} is a directory", fix_for_a_folder)
    if kind is not None:
        raise UserError(f"{path} is not a regular file ({kind})", "give an image file")
    if not path.is_file():
        raise UserError(f"no image file {path}")


def unnamed_cwd() -> tuple[str, str] | None:
    """What keeps the working directory from being named, and the fix; None when nothing
    does. Deleted, os.getcwd() fails. Deeper than PATH_MAX, Python's getcwd still names it (in
    steps, as glibc does) but the kernel's refuses it, Path.resolve() cannot reach a file in
    it, and oneMKL ends the process at `import torch` ("Cannot load .../libtorch_cpu.so")."""
    try:
        where = os.getcwd()
    except FileNotFoundError:
        return "the working directory was deleted", "cd somewhere that exists"
    except OSError as e:  # a C library that does not name a directory past PATH_MAX
        return f"the working directory cannot be named ({e.strerror})", "cd to a shorter path"
    length, limit = len(os.fsencode(where)), os.pathconf("/", "PC_PATH_MAX")
    if length >= limit:  # the limit counts the terminating NUL
        said = f"the working directory's path is {length:,} bytes, more than the system's"
        return f"{said} {limit - 1:,}", "cd to a shorter path"
    return None


def check_writable(path: Path, make_parents: bool = False, streams: bool = False) -> Path:
    """Make sure `path` can be written, so an unusable output fails at once (main() prints
    the OSError in one line) rather than after minutes of work. Leaves no empty file behind.
    A missing directory is refused (a typo in it would otherwise create a tree at the root)
    unless `make_parents`, for dlperf's own directories. A FIFO, a device or a socket is
    refused in one line, as an input path is: stat'ed, never opened, since opening a FIFO to
    test it waited for a reader, for ever without one, and a file renamed into place would
    replace it. With `streams`, for an output written straight through (a pipe as
    /dev/stdout), one is let through, not opened either. A directory is left to the open's
    own "Is a directory"."""
    from dlperf.errors import UserError

    if make_parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    kind = not_regular(path)
    if kind not in (None, "a directory"):
        if streams:
            return path
        raise UserError(f"{path} is not a regular file ({kind})", "give the path of a regular file")
    existed = path.exists()
    with open(path, "ab"):
        pass
    if not existed:
        path.unlink()
    return path


def within(path: Path, folder: Path) -> Path | None:
    """Where `path` lies below `folder` (Path(".") when it is `folder`, or the same file), or
    None when it lies elsewhere: whether an output would be written into an input. Compared
    by real path, so a link or another spelling is caught, and `path` need not exist yet
    (nor `folder`: a split folder not yet there); and by (st_dev, st_ino) of `path` and the
    folders above it that exist, so a hard link or a bind mount is caught too."""
    real, theirs = Path(os.path.realpath(path)), Path(os.path.realpath(folder))
    if real.is_relative_to(theirs):
        return real.relative_to(theirs)
    try:
        there = os.stat(folder)
    except (OSError, ValueError):  # not there: only its name can hold `path`
        return None
    for above in (real, *real.parents):
        try:
            seen = os.stat(above)
        except (OSError, ValueError):  # not made yet
            continue
        if (seen.st_dev, seen.st_ino) == (there.st_dev, there.st_ino):
            return real.relative_to(above)
    return None


@contextmanager
def made_dir(path: Path) -> Iterator[Path]:
    """`path` made as a directory with its missing parents (an unusable place fails before
    the block's work), and those it made removed again, if still empty, when the block fails:
    a command refused for its input leaves no empty output tree behind."""
    made = [p for p in (path, *path.parents) if not p.exists()]
    path.mkdir(parents=True, exist_ok=True)
    try:
        yield path
    except BaseException:
        for directory in made:  # innermost first
            try:
                directory.rmdir()
            except OSError:  # not empty (something else wrote there) or gone: kept as is
                break
        raise


@contextmanager
def writing(path: str | os.PathLike[str]) -> Iterator[None]:
    """Name `path` in an OSError of the block that names no file, as a write refused by a
    file size limit (EFBIG), a descriptor limit (EMFILE) or a full disk (ENOSPC) names none:
    the one error line then says what the command was writing. An error that names its own
    file keeps it."""
    try:
        yield
    except OSError as e:
        if e.filename is None:
            e.filename = os.fspath(path)
        raise


@contextmanager
def replaced(path: Path) -> Iterator[Path]:
    """A temporary file beside `path` that becomes `path` by one rename when the block ends
    without error, so that a reader (another process, a resumed run) sees the whole file or
    none; a failed block leaves no partial file. The temporary file is this writer's alone
    (`part_name`): two processes writing one path at once each rename a whole file of their
    own, where a shared name had the first rename take the second's half-written bytes and
    the second's fail. The parts killed writers left beside it go first (`sweep_parts`). An
    OSError about the temporary file (a directory in its place) names `path`, the file the
    caller asked for and the one the one-line error should name."""
    sweep_parts(path)
    tmp = part_name(path)
    try:
        yield tmp
        os.replace(tmp, path)
    except OSError as e:
        _named_as(e, tmp, path)
        raise
    finally:
        try:
            tmp.unlink(missing_ok=True)  # already gone after the replace
        except OSError as e:  # a name too long for the temporary fails here again
            _named_as(e, tmp, path)
            raise


NAME_MAX = 255  # bytes of one name on Linux's file systems (ext4, xfs, btrfs, tmpfs)
_PART = ".part"  # NAME.part-HOST-PID-N.SUFFIX, and NAME.part.SUFFIX of dlperf before round 40
_PARTS = itertools.count()  # this process's writes: two threads writing one path differ by it


def part_name(path: Path) -> Path:
    """A temporary name beside `path` for one write alone, `{stem}.part-HOST-PID-N{suffix}`:
    HOST a tag of this host (`_host_tag`) and PID this process's id, by which a later write
    tells a killed writer's part from a live one's (`sweep_parts`), N this process's count.
    The suffix stays last, since numpy's savez appends ".npz" to a name without it. The stem
    is cut (on a character boundary) so that the name fits in NAME_MAX bytes where `path`'s
    own does: a legal name is written, however close to the limit."""
    tail = f"{_PART}-{_host_tag()}-{os.getpid()}-{next(_PARTS)}{path.suffix}"
    return path.with_name(_cut_stem(path, len(os.fsencode(tail))) + tail)


def _cut_stem(path: Path, after: int) -> str:
    """`path`'s stem, cut by whole characters to leave `after` bytes of a name within
    NAME_MAX: as it is where that fits, or where `path`'s own name does not (the OS refuses
    the temporary name at once, naming `path`, not after the work of filling it)."""
    stem = path.stem
    if len(os.fsencode(path.name)) > NAME_MAX:
        return stem
    while stem and len(os.fsencode(stem)) + after > NAME_MAX:
        stem = stem[:-1]
    return stem


@functools.cache
def _host_tag() -> str:
    """Four hex digits of this host's name and this process's pid namespace: a part of
    another host's (a shared file system) or another container's (its own pids, the host's
    name) is never taken for one of a dead process here. Short, for names near NAME_MAX."""
    try:
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:  # no /proc (macOS): one namespace
        namespace = 0
    return hashlib.sha256(f"{socket.gethostname()} {namespace}".encode()).hexdigest()[:4]


def sweep_parts(path: Path) -> None:
    """Remove what killed writers (SIGKILL, an OOM kill, a power cut) left beside `path`: the
    parts of this host's (`part_name`) whose process is gone, and `path`'s bare
    `NAME.part.SUFFIX` of a dlperf before round 40, no writer's now. A live writer's part
    stays (its rename would fail), and so does another host's, whose process cannot be told
    from here. Done before the write, so that a 130 MB part of a killed checkpoint save does
    not fill the disk this one needs. A directory is looked through once per process (its
    first write): `data samples` writes thousands of files into one, each through here.
    Not removing one costs some disk, not the write: a failure here is not the write's."""
    from dlperf.procs import alive

    with suppress(OSError, ValueError):  # ValueError: a NUL in the name
        bare = path.with_name(f"{path.stem}{_PART}{path.suffix}")
        if not bare.is_dir():
            bare.unlink(missing_ok=True)
    try:
        folder = os.path.abspath(path.parent)
    except OSError:  # a working directory deleted: the write says so its own way
        return
    if folder in _SWEPT:
        return
    # 7 digits at most: Linux's pids go up to 2**22 (a longer number is no pid of ours)
    part = re.compile(rf".*{re.escape(_PART)}-{_host_tag()}-(?P<pid>[0-9]{{1,7}})-[0-9]+(\.[^.]*)?")
    with suppress(OSError, ValueError):
        for entry in os.scandir(folder):
            found = part.fullmatch(entry.name)
            if found is None or entry.is_dir(follow_symlinks=False) or alive(int(found["pid"])):
                continue
            with suppress(FileNotFoundError):  # another write swept it first
                os.unlink(entry.path)
        _SWEPT.add(folder)


_SWEPT: set[str] = set()  # the directories this process has swept (`sweep_parts`)


def _named_as(e: OSError, tmp: Path, path: Path) -> None:
    """`e`, raised about the temporary file `tmp`, made one about `path`."""
    if e.filename is not None and os.fspath(e.filename) == os.fspath(tmp):
        e.filename = os.fspath(path)
        if e.filename2 is not None and os.fspath(e.filename2) == os.fspath(path):
            e.filename2 = None  # os.replace(tmp, path): not "path -> path"


def save_figure(fig: Figure, path: Path, dpi: int = 120) -> Path:
    """Save `fig` to `path` (returned) in the format its suffix names (.png, .svg, .pdf, ...;
    without one, matplotlib's default, PNG). Drawn into memory first, then written by rename
    (`replaced`): matplotlib writing onto `path` itself left 0 or 124 bytes of a figure over
    the earlier one when a stop signal came during the save. Every figure dlperf writes to a
    file goes through here. Through a link to a file, the file is replaced and the link
    stays, as a save through the link wrote the file. A write refused by a file size limit
    or a full disk names `path` (`writing`): it named no file, and the one line could not say
    which of a sweep's figures it was."""
    import io

    drawn = io.BytesIO()
    fig.savefig(drawn, format=path.suffix[1:].lower() or None, dpi=dpi)
    target = Path(os.path.realpath(path)) if os.path.islink(path) else path
    with replaced(target) as tmp, writing(path), open(tmp, "wb") as f:
        f.write(drawn.getbuffer())
    return path


def atomic_write(path: Path, data: bytes | str, fsync: bool = False) -> None:
    """Write `data` to `path` by rename (see `replaced`); `fsync` also survives a power cut.
    A write refused by a file size limit or a full disk names `path`, as `save_figure`'s."""
    with replaced(path) as tmp, writing(path), open(tmp, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
        if fsync:
            f.flush()
            os.fsync(f.fileno())


# A path the user named that cannot be used (missing, forbidden, a name or a chain of links
# too long) is bad input; anything else the OS refuses (a full disk, an I/O error) is not,
# but still deserves one line rather than a traceback.
BAD_PATH = {
    errno.ENOENT,
    errno.EACCES,
    errno.EPERM,
    errno.EROFS,
    errno.EISDIR,
    errno.ENOTDIR,
    errno.ENAMETOOLONG,
    errno.ELOOP,
    errno.EEXIST,  # a file where a directory is to be made (`--out FILE` of a directory)
}


def told(e: OSError) -> tuple[str, bool]:
    """The one line an OSError that reached the command line is told in, and whether it is
    bad input (exit 2) rather than the system's refusal (exit 1)."""
    if (unnamed := _unnamed_cwd_of(e)) is not None:
        return unnamed, True
    e = _followed(e)
    said = f"{e.strerror or e}{_os_hint(e)}"
    if e.filename:
        return f"cannot use {e.filename}: {said}", e.errno in BAD_PATH
    # dlperf names each file it writes (`writing`): not knowing which, say so
    where = "the system named no file: dlperf --debug ... shows where"
    return f"{said} ({where})", e.errno in BAD_PATH


def error_line(e: BaseException) -> str:
    """A failed run's error as stored and as a sweep's point line says it: an OSError of a
    file dlperf used in the one line's words (`told`: "cannot use t.db: No space left on
    device"), where Python's "OSError: [Errno 28] No space left on device: 't.db'" said it a
    second way above that line; anything else, and an OSError raised through a user's model
    file (its own file, the model's error), as its type and text."""
    if (
        isinstance(e, OSError)
        and e.filename is not None
        and not any(in_model_file(frame) for frame, _ in traceback.walk_tb(e.__traceback__))
    ):
        return told(e)[0]
    return f"{type(e).__name__}: {error_text(e)}"  # error_text: its own __str__ may raise


def _followed(e: OSError) -> OSError:
    """mkdir's "File exists" of a symbolic link that leads nowhere (mkdir does not follow it):
    of a loop of links, the error following it gives ("Too many levels of symbolic links");
    `e` otherwise."""
    name = e.filename
    if e.errno != errno.EEXIST or not isinstance(name, str) or not os.path.islink(name):
        return e
    try:
        os.stat(name)
    except OSError as followed:
        if followed.errno == errno.ELOOP:
            return followed
    return e


def _unnamed_cwd_of(e: OSError) -> str | None:
    """What a file named relative to a deleted working directory needs (every such name is
    missing there: "cannot use rep: No such file or directory"), as the store's is told; None
    for another error."""
    name = e.filename
    if e.errno != errno.ENOENT or not isinstance(name, str) or os.path.isabs(name):
        return None
    unnamed = unnamed_cwd()
    if unnamed is None:
        return None
    what, fix = unnamed
    return f"{what}, and {name} is named relative to it ({fix}, or give an absolute path)"


def files_open(guess: int) -> int:
    """How many files this process has open (`guess` where the system does not say)."""
    for listing in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(listing))
        except OSError:
            continue
    return guess


def room_for_files(needed: int) -> int | None:
    """Make room for `needed` open files (`room_under` RLIMIT_NOFILE): None once there is
    room; else the limit that refuses it, to name in `ulimit -n`."""
    return room_under(resource.RLIMIT_NOFILE, needed)


def room_under(kind: int, needed: int) -> int | None:
    """Make room for `needed` under the resource limit `kind` (open files, processes and
    threads): a soft limit below it is raised to the hard one (all of it, not just what is
    needed: a count measured on one host is a guess on another, and more room costs nothing).
    None once there is room; else the limit that refuses it, to name in its `ulimit`."""
    soft, hard = resource.getrlimit(kind)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return None
    if hard == resource.RLIM_INFINITY or hard >= needed:
        for target in dict.fromkeys((hard, needed)):  # macOS takes no unlimited soft limit
            try:
                resource.setrlimit(kind, (target, hard))
                return None
            except (ValueError, OSError):
                continue
    return soft if hard == resource.RLIM_INFINITY else hard


def open_files_limit(also: str = "") -> str:
    """The fix for a process out of file descriptors (EMFILE), its soft limit named: "ulimit
    -n 1024 is too low: raise it" (`also`: another way out, " or lower --max-connections")."""
    return f"ulimit -n {resource.getrlimit(resource.RLIMIT_NOFILE)[0]} is too low: raise it{also}"


def _os_hint(e: OSError) -> str:
    """What a write refused by one of the process's limits needs, the limit named (its
    OSError says only "File too large" or "Too many open files"), or what a file or a dangling
    link in the way of a directory needs ("File exists"); "" for other errors."""
    number, name = e.errno, e.filename
    if number == errno.EFBIG:
        return " (a file size limit (ulimit -f) stopped the write: raise it, or write less)"
    if number == errno.EEXIST and isinstance(name, str):
        if os.path.islink(name) and not os.path.exists(name):  # dangling
            return (
                f" (a symbolic link to {os.readlink(name)}, which does not exist: remove the "
                "link, or give another --out)"
            )
        return " (a file is where a directory was to be made: move it, or give another --out)"
    if number == errno.EMFILE:
        return f" ({open_files_limit()})"
    return ""


@contextmanager
def locked_folder(folder: Path) -> Iterator[None]:
    """`folder` locked for this process (flock on the folder itself, which leaves no file),
    let go as the block ends: one writer at a time where two would interleave (reports moving
    their pages in, calibrations reading and rewriting the devices file). A file system
    without locks (some network ones refuse flock) goes unguarded, as before the lock."""
    import fcntl

    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # lets the lock go


def one_file(path: Path, other: Path) -> bool:
    """Whether `path` and `other` name one file: the same inode where both are there (a link,
    a hard link), else the same real path (one not written yet)."""
    try:
        return path.samefile(other)
    except OSError:
        return os.path.realpath(path) == os.path.realpath(other)
