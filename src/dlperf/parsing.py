"""The small text forms commands share: comma lists, NAME=VALUE lists, count ranges, and the
"did you mean" hint for a misspelt name. Each raises the caller's own one-line `UserError`."""

from __future__ import annotations

import difflib
import json
import math
import os
import reprlib
import unicodedata
from collections.abc import Callable, Collection, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from dlperf.errors import UserError

# The numbers a comma list holds: each compares with `minimum`.
Num = TypeVar("Num", int, float)

# Levels of tables and lists a config may nest (an experiment needs about five): deeper, and
# the TOML parser, pydantic and json, which all recurse, could run out of stack.
MAX_DEPTH = 32
TOO_DEEP = f"nested too deeply (dlperf reads at most {MAX_DEPTH} levels of tables and lists)"


def _other(c: str) -> bool:
    """Whether `c` is one of Unicode's "other" characters (category C) a name must not hold:
    controls (C0, DEL, C1: ESC starts a colour or cursor sequence, CR rewrites the line, HTML
    forbids them), format characters (U+202E reverses the rest of a terminal's row, U+200B
    shows as nothing), private and unassigned ones. Not a lone surrogate (a byte that was not
    UTF-8): the store refuses that itself, saying so ("is not UTF-8 text")."""
    category = unicodedata.category(c)
    return category[0] == "C" and category != "Cs"


def printable(text: str) -> str:
    """`text` with its control and format characters written as Python escapes (ESC as
    \\x1b, U+202E as \\u202e), so that what a name holds is shown, never acted on by a
    terminal or dropped by a browser."""
    if text.isprintable():  # the common case, in C: no category C (nor Z but the space)
        return text
    return "".join(repr(c)[1:-1] if _other(c) and c not in "\t\n" else c for c in text)


# What printable leaves that still breaks a line (as a terminal or str.splitlines sees it), and
# the tab, which would show a name's two parts as one gap.
_BREAKS = str.maketrans({"\n": "\\n", "\t": "\\t", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def one_line(text: str) -> str:
    """`text` as one line: its control characters and line breaks written as Python escapes
    (a newline as \\n), so that a message of several lines (a model file's own, a CSV column's
    name) still makes one line naming what is wrong."""
    return printable(text).translate(_BREAKS)


def quoted(text: str, most: int = 80) -> str:
    """Text the user typed (a key, a value, a name) as a one-line error quotes it: its repr,
    or past `most` characters the repr of its start and its length, `'kkk...'... (10,000
    characters)`. A 10,000-character --where key was echoed whole, a line of 10 KB. Never
    for a path: a "name too long" error must name the whole path."""
    if len(text) <= most:
        return repr(text)
    return f"{text[: most - 20]!r}... ({len(text):,} characters)"


def clipped(text: str, most: int = 80) -> str:
    """`text` as it is typed in a line (`--where KEY=VALUE`), unquoted, cut as `quoted`
    cuts it: its start and its length past `most` characters."""
    if len(text) <= most:
        return text
    return f"{text[: most - 20]}... ({len(text):,} characters)"


def name_text(name: str) -> str:
    """A name (a class's) as a table or message shows it: on one line (`one_line`), and quoted
    where white space at an edge (`edged`) hides what it holds, so that "a" and "a " read apart
    (a table pads its cells with spaces): 'a '. A name that starts with a quote is quoted
    too ("'a '" as ''a ''), so that no unquoted name reads as a quoted one, and so is the
    empty name (an .npz's class '', a pandas NaN made text), '' and not a blank cell."""
    text = one_line(name)
    if not text or edged(name) or text[0] == "'":
        return f"'{text}'"
    return text


def edged(name: str) -> bool:
    """Whether white space starts or ends `name` as written: a space, and a tab or a no-break
    space too, which `one_line` may write as an escape but is no less at the edge."""
    return name[:1].isspace() or name[-1:].isspace()


def finite_json(value: Any) -> Any:
    """`value` as strict JSON holds it, for `--json` and the store's JSON columns (PostgreSQL's
    refuse NaN): non-finite floats as null, keys as strings, tuples as lists."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): finite_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite_json(v) for v in value]
    return value


def readable_json(value: Any) -> Any:
    """`finite_json(value)` with each text holding bytes Python could not decode (surrogate
    escapes: a file name read as ASCII in a C locale) as the UTF-8 text it is, U+FFFD for
    bytes that are not UTF-8: `--json` wrote such a name as "\\udcc3\\udca4", no text a
    reader can use (strict JSON parsers refuse a lone surrogate)."""
    return _decoded(finite_json(value))


def _decoded(value: Any) -> Any:
    if isinstance(value, str):
        if any("\ud800" <= c <= "\udfff" for c in value):
            return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        return value
    if isinstance(value, dict):
        return {_decoded(k): _decoded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decoded(v) for v in value]
    return value


def file_name_text(name: str) -> str:
    """A file name as a name that can be stored and shown: bytes that are not UTF-8 (kept by
    the file system as surrogates) replaced (U+FFFD), control characters and line breaks
    escaped (a run or sweep named after its file refuses a newline)."""
    return one_line(os.fsencode(name).decode("utf-8", "replace"))


def stem_name(path: Path) -> str:
    """A file's stem as a name that can be stored and shown (`file_name_text`)."""
    return file_name_text(path.stem)


def is_file_spec(name: str) -> bool:
    """Whether `name` names a model file ("path/to/file.py:factory") rather than a registered
    or torchvision model: a .py file, or a path, so that a notebook or a directory is refused
    as the file it is. A path is one with a separator, or, before a colon (no model name has
    one), one that exists or has a suffix (no model name has a dot: `nb.ipynb:Net` is a missing
    file); a bare name is a model's even where a folder of that name exists."""
    if name.endswith(".py") or ".py:" in name:
        return True
    path, colon, _ = name.rpartition(":")
    path = path if colon else name
    named = bool(colon) and (os.path.lexists(path) or bool(Path(path).suffix))
    return "/" in path or os.sep in path or named


def model_file_text(name: str) -> str:
    """The file part of a model file's name, "path/to/file.py" of "path/to/file.py:factory"
    ("" for a name with no colon)."""
    return name.rpartition(":")[0]


def absolute_model_name(name: str) -> str:
    """A model name with its file's path made absolute against the current directory, where
    a command looks for it: stored so, a run names the file it was trained from, whichever
    directory a later command (export, --resume, distill's teacher) runs in, and runs of two
    files of one relative name differ. A leading ~ is the home directory, as in data.root:
    the shell leaves it in --set model.name=~/net.py:make and in a TOML file. A model's name,
    or a path that is absolute already or names no factory, is kept as given."""
    path, colon, factory = name.rpartition(":")
    if not is_file_spec(name) or not colon:
        return name
    path = os.path.expanduser(path)
    if os.path.isabs(path):
        return f"{path}:{factory}"
    try:
        return f"{Path(path).absolute()}:{factory}"
    except FileNotFoundError:  # the current directory was deleted: the file is found nowhere
        return name


def has_control(text: str) -> bool:
    """Whether `text` holds a character of Unicode's category C (`_other`), tab and newline
    included: a control, a format character (U+202E, U+200B), a private or unassigned one. A
    name is shown on one line in terminals, HTML and MLflow, and so must hold none; the one
    check of run names, device names and tag values (a run named with U+202E reversed the
    rest of its `runs list` row where a tag value refused it)."""
    return not text.isprintable() and any(_other(c) for c in text)


# Unicode's words for the categories `_other` refuses.
_KINDS = {"Cc": "control", "Cf": "format", "Co": "private-use", "Cn": "unassigned"}
# How to write a key that `unprintable_key` refuses.
PRINTABLE_HINT = "write it without tabs, line breaks or invisible characters"


def unprintable_key(key: str, what: str) -> str | None:
    """What is wrong with a key (a metric's, a config's, a phase's name; `what` names it as
    the user would see it, "metric key 'a\\nb'") that holds a character of category C
    (`has_control`), naming the first: "... holds U+200B, a format character". Stored, such a
    key was shown escaped and no --where, --key or plot could name it again (the hint shown
    was the text typed). None when the key holds none."""
    held = unprintable(key)
    if held is None:
        return None
    return f"{what} holds {held}: keys are printable text, shown on one line and named as typed"


def unprintable(text: str) -> str | None:
    """The first character of category C (`has_control`) that `text` holds, by its code and
    kind: "U+200B, a format character"; None when it holds none."""
    if not has_control(text):
        return None
    char = next(c for c in text if _other(c))
    kind = _KINDS.get(unicodedata.category(char), "non-printing")
    return f"U+{ord(char):04X}, a {kind} character"


def nameable(key: str) -> bool:
    """Whether `--where KEY=VALUE` can name `key`: not blank (an empty KEY is refused, and
    white space at its edges is taken for spacing), and without `=`, which it splits on."""
    return bool(key.strip()) and "=" not in key


def same_text(a: str, b: str) -> bool:
    """Whether `a` and `b` are one text in Unicode's NFC: café typed (NFC) and cafe\u0301
    copied from a macOS file name (NFD) read alike, and neither found the other."""
    return a == b or unicodedata.normalize("NFC", a) == unicodedata.normalize("NFC", b)


def stored_as(key: str, stored: Collection[str]) -> str | None:
    """`key` as `stored` holds it: itself, else the one that is `key` in another Unicode
    normalisation (`same_text`); None where none is. Stored keys all ASCII, as most are, are
    their own NFC: told at C speed, not normalised one by one (--where looks a key up so in
    each run lacking it, which took a quarter longer to read)."""
    if key in stored:
        return key
    wanted = unicodedata.normalize("NFC", key)
    if "".join(stored).isascii():
        return wanted if wanted in stored else None
    return next((s for s in stored if unicodedata.normalize("NFC", s) == wanted), None)


def printable_key(key: str, what: str) -> None:
    """Refuse, in `unprintable_key`'s words, a key holding a control or format character,
    and one that is blank or holds `=` (`nameable`): stored, no --where could name it. The
    one check of metric keys, phase names, tag keys and config keys, from every path
    (dlperf.track, an experiment file, --set, a sweep's point, the store itself)."""
    fault = unprintable_key(key, what)
    if fault is not None:
        raise UserError(fault, PRINTABLE_HINT)
    if not key.strip():
        raise UserError(
            f"{what} is blank", "give it a name: --where and tables name its value by it"
        )
    if "=" in key:
        raise UserError(
            f"{what} holds '=', which --where KEY=VALUE splits on: no --where could name it",
            "write it without '='",
        )


def subscripted(name: str) -> Callable[[tuple[str, ...]], str]:
    """A key path spelled as Python subscripts of `name`: key config['train']['lr']."""
    return lambda path: f"key {name}" + "".join(f"[{k!r}]" for k in path)


def printable_keys(
    tree: dict[str, Any], spell: Callable[[tuple[str, ...]], str], where: str = ""
) -> None:
    """`printable_key` of every key of `tree` (a config), at any depth of its tables, its
    path of keys written by `spell`, the first refused after `where` ("point 1: "). Walked
    without recursing, as `depth` walks. A key that is not text is another check's
    (`key_fault`, where the caller has one) or left to the store's JSON, which writes 1 as
    '1', as it did before this check: a `RunStore` caller's config was stored so."""
    stack: list[tuple[dict[str, Any], tuple[str, ...]]] = [(tree, ())]
    while stack:
        table, path = stack.pop()
        for key, value in table.items():
            if isinstance(key, str):
                printable_key(key, where + spell((*path, key)))
            if isinstance(value, dict):
                stack.append((value, (*path, key)))


def not_blank(text: str, what: str, example: str) -> str:
    """`text`, refused in one line when empty or only blanks: an option naming a directory
    or a store (`report --out`, `runs export --out` and `--uri`) given '' wrote into the
    current directory (Path('') is '.'), and '  ' into a directory named by the blanks."""
    if not text.strip():
        raise UserError(f"{what}, not {text!r}", f"give its path, e.g. {example}")
    return text


def depth(value: Any) -> int:
    """How deeply tables and lists nest in `value` (1 for 1, 2 for [1], 3 for {"a": [1]}),
    found without recursing: a value too deep to recurse over is what this looks for."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        node, level = stack.pop()
        deepest = max(deepest, level)
        if isinstance(node, dict):
            stack.extend((child, level + 1) for child in node.values())
        elif isinstance(node, list):
            stack.extend((child, level + 1) for child in node)
    return deepest


# A config's keys are text, as TOML's and JSON's are: a key 1 beside "1" would be one key
# once stored, and keys of mixed types do not sort (json.dumps(sort_keys=True) raised).
KEYS_HINT = "write each key as a str"


def key_fault(key: Any, within: str) -> str:
    """What is wrong with a config key that is not a str, naming the table it is `within`
    ("" at the top) and its type ("config key 3 in model is int: keys are text")."""
    kind = "None" if key is None else type(key).__name__
    where = f" in {within}" if within else ""
    return f"config key {as_given(key)}{where} is {kind}: keys are text"


def _dims(value: Any) -> tuple[int, ...] | None:
    """The shape of a tensor or an array of one dimension or more (None: not one)."""
    try:
        shape = getattr(value, "shape", None)
    except Exception:  # a nested tensor's raises torch's RuntimeError: it has no one shape
        return None
    return tuple(shape) if isinstance(shape, tuple) and shape else None  # torch.Size a tuple too


def small_whole_numbers(value: Any) -> list[int] | None:
    """The numbers of a 1-d tensor or array of at most 8 whole numbers, such as a shape kept
    as one (`np.array(img.shape)`); None for anything else."""
    dims = _dims(value)
    if dims is None or len(dims) != 1 or dims[0] > 8:
        return None
    try:
        numbers = value.tolist()  # plain ints of an integer dtype; floats or bools otherwise
    except (AttributeError, TypeError, RuntimeError, NotImplementedError):  # a meta tensor's
        return None
    whole = all(isinstance(n, int) and not isinstance(n, bool) for n in numbers)
    return numbers if whole else None


# reprlib's lengths, but a text or an object up to 100 characters whole: its default of 30 cut
# a misspelt name or a path in a config error ('cosine_with_r...armup'), the very word to fix
_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = 100


def as_given(value: Any, typed: bool = False) -> str:
    """A refused value as an error names it, on one short line: a tensor or an array by its
    type and shape (its repr is its values, a line per row), or by its numbers when it holds a
    few whole ones; anything else as reprlib shortens it (a list of 2,000 numbers was 11,000
    characters), after its type's name if `typed`."""
    dims = _dims(value)
    if dims is not None:
        kind = type(value)
        numbers = small_whole_numbers(value)
        held = f"holding {numbers}" if numbers is not None else f"of shape {dims}"
        return f"a {kind.__module__}.{kind.__qualname__} {held}"
    shown = _SHORT.repr(value)
    if "\n" in shown:  # an object's own repr, such as a module's
        shown = " ".join(shown.split())
    return f"{type(value).__name__} {shown}" if typed else shown


def flatten(tree: dict[str, Any], prefix: str = "", quote: bool = False) -> dict[str, Any]:
    """Nested dicts as dotted keys (`{"train": {"lr": 0.1}}` as `{"train.lr": 0.1}`), the form
    of --set, sweep axes, tables and exports; lists and empty dicts are leaves. `quote`: a
    key holding a dot or a quote is written in TOML's quotes (`model.kwargs."a.b"`), so the
    dotted key can be split again as it was made."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if quote and any(c in key for c in ".\"'"):
            key = json.dumps(key)  # a JSON string of these is a TOML basic string
        if isinstance(value, dict) and value:
            flat.update(flatten(value, f"{prefix}{key}.", quote))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _leaves(
    tree: dict[str, Any], prefix: str, path: tuple[str, ...]
) -> Iterator[tuple[str, tuple[str, ...]]]:
    """(dotted key, path of keys) of each leaf of `tree`, as `flatten` walks it."""
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            yield from _leaves(value, f"{prefix}{key}.", (*path, key))
        else:
            yield f"{prefix}{key}", (*path, key)


def flat_clash(tree: dict[str, Any], spell: Callable[[tuple[str, ...]], str]) -> str | None:
    """What is wrong with `tree` when two of its leaves share one dotted key once flattened
    (unquoted), each leaf's path of keys written by `spell`: `{"a.b": 1, "a": {"b": 2}}`
    clashes at "a.b". None when each leaf has a key of its own. `flatten` keeps the later of
    two such leaves, and the other's value was lost from exports, --where and compare without
    a word; the fix is to rename one of them."""
    seen: dict[str, tuple[str, ...]] = {}
    for dotted, path in _leaves(tree, "", ()):
        if dotted in seen:
            return (
                f"{spell(seen[dotted])} and {spell(path)} are one key, {one_line(dotted)}, as "
                "runs list --where, runs compare and the MLflow export name keys: one value "
                "would be lost"
            )
        seen[dotted] = path
    return None


def did_you_mean(
    name: str,
    choices: Iterable[str],
    otherwise: str,
    *,
    n: int = 1,
    cutoff: float = 0.6,
    quote: bool = False,
    prefix: str = "",
) -> str:
    """A hint naming the `n` choices closest to a misspelt `name` ("did you mean 'lr'?"),
    each written after `prefix` (a section's "train." gives 'train.lr', the key to type),
    else `otherwise` (e.g. the list of valid names). A name that differs only in case comes
    first: difflib compares characters as they are, so 'SmallCNN' is far from 'smallcnn'."""
    choices = list(choices)
    same = [c for c in choices if c.lower() == name.lower()]
    rest = [
        c for c in difflib.get_close_matches(name, choices, n=n, cutoff=cutoff) if c not in same
    ]
    close = (same + rest)[:n]
    foreign = lookalikes(name, choices)
    if not close:
        return f"{otherwise}; its {foreign}" if foreign else otherwise
    named = (prefix + c for c in close)
    hint = "did you mean " + ", ".join(f"'{c}'" if quote else c for c in named) + "?"
    return f"{hint} its {foreign}" if foreign else hint


# How many characters `lookalikes` names before it counts the rest.
_NAMED = 3


def _char_text(c: str) -> str:
    """A character as `lookalikes` quotes it: as it is, or as its escape where it would not
    show (a no-break space, as repr writes it) or would join the quote (a combining accent)."""
    if unicodedata.category(c)[0] == "M":
        return f"'\\u{ord(c):04x}'"
    return repr(c)


def lookalikes(text: str, meant: Iterable[str] = ()) -> str:
    """The characters outside ASCII that `text` holds and none of `meant` does (the keys,
    choices or names it was refused against; none for a number), each once by its code and
    Unicode name: "'а' is U+0430 CYRILLIC SMALL LETTER A"; "" when there are none. A name or
    value copied from a chat, a PDF or a word processor brings letters and dashes that look
    ASCII, and quoted as typed, the refused 'trаin' read as the valid 'train'. Category C
    characters are left out: `printable` and repr show them escaped already."""
    if text.isascii():  # the common case, in C
        return ""
    held = set("".join(meant))
    foreign = list(dict.fromkeys(c for c in text if not c.isascii() and c not in held))
    named = [
        f"{_char_text(c)} is U+{ord(c):04X} {unicodedata.name(c, '')}".rstrip()
        for c in foreign
        if not _other(c)
    ]
    if len(named) > _NAMED:
        return f"{', '.join(named[:_NAMED])} and {len(named) - _NAMED} more outside ASCII"
    return _listed(named) if named else ""


def parse_list(
    text: str, kind: Callable[[str], Num], error: UserError, minimum: Any = None
) -> list[Num]:
    """'1,8,32' as [1, 8, 32], each part converted by `kind`; `error` when a part does not
    convert (an empty one neither, for numbers), or one is below `minimum`."""
    try:
        values = [kind(part.strip()) for part in text.split(",")]
    except ValueError:
        raise error from None
    if minimum is not None and min(values) < minimum:
        raise error
    return values


def parse_names(text: str) -> list[str]:
    """'depth, gpu,' as ['depth', 'gpu']: stripped, empty parts left out."""
    return [part.strip() for part in text.split(",") if part.strip()]


def parse_pairs(text: str, option: str, example: str) -> dict[str, str]:
    """'a=1,b=x' as {'a': '1', 'b': 'x'}, in the order given."""
    pairs: dict[str, str] = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep or not name or not value.strip():
            raise UserError(f"{option} takes NAME=VALUE,..., got {text!r}", f"e.g. {example}")
        if name in pairs:
            raise UserError(f"{option}: {name} is given twice in {text!r}")
        pairs[name] = value.strip()
    return pairs


def plain_number(value: object) -> float:
    """float(`value`), but a ValueError for text holding '_', which float() takes as a digit
    separator ("1_0" is 10): no tool writes one into a number a user gives as text (a CSV
    field, an annotation, a JSON string, an option's value), so it is a typo or two fields
    run together, and reading it as a number would be silently wrong."""
    if isinstance(value, str) and "_" in value:
        raise ValueError(f"'_' in {value!r}")
    return float(value)  # type: ignore[arg-type]  # float's own TypeError for the rest


def parse_numbers(text: str, option: str, example: str) -> dict[str, float]:
    """'a=1,b=2.5' as {'a': 1.0, 'b': 2.5}: `parse_pairs` whose values are finite numbers."""
    pairs = parse_pairs(text, option, example)
    bad = UserError(f"{option}: every value must be a number, got {pairs}")
    try:
        numbers = {name: plain_number(value) for name, value in pairs.items()}
    except ValueError:
        raise bad from None
    if not all(map(math.isfinite, numbers.values())):  # float() reads 'nan' and 'inf' too
        raise bad
    return numbers


# The most counts a range may list ('1-10000'), as many as a sweep makes points by default
# (sweep.max_points): '1-1000000000' built a billion-entry list, tens of GB, without a word.
MAX_COUNTS = 10_000


def _counted(spans: Iterable[tuple[int, int]]) -> int:
    """How many integers the ranges `spans` (lo, hi: both ends in) cover, each once, found
    from their ends alone."""
    total, reached = 0, 0  # reached: the highest integer counted so far
    for lo, hi in sorted(spans):
        if hi > reached:
            total += hi - max(lo, reached + 1) + 1
            reached = hi
    return total


def parse_range(text: str, name: str, most: int = MAX_COUNTS) -> list[int]:
    """'1-16' or '2,4,8' (or both, '1-4,8') as sorted positive integers, at most `most` of
    them (counted before any list is built)."""
    spans: list[tuple[str, int, int]] = []
    try:
        for part in text.split(","):
            first, _, last = part.strip().partition("-")
            spans.append((part.strip(), int(first), int(last or first)))
    except ValueError:
        raise UserError(f"--{name} must look like 1-16 or 2,4,8, got {text!r}") from None
    if any(min(lo, hi) < 1 for _, lo, hi in spans):
        raise UserError(f"--{name} needs counts ≥ 1, got {text!r}")
    for part, lo, hi in spans:
        # Empty as a range: told as counts below 1 when alone, and dropped without a word
        # beside others ('1,8-4' was [1]).
        if hi < lo:
            raise UserError(f"--{name} {part} is a reversed range", f"write {hi}-{lo}")
    counted = _counted((lo, hi) for _, lo, hi in spans)
    if counted > most:
        raise UserError(
            f"--{name} {as_given(text)} lists {counted:,} counts, more than the {most:,} one list "
            "may hold",
            "give a shorter range, or a list such as 1,2,4,8,16",
        )
    return sorted({n for _, lo, hi in spans for n in range(lo, hi + 1)})


def _listed(names: list[str]) -> str:
    """'--a', '--a and --b', '--a, --b and --c'."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def refuse_given(options: dict[str, object], goes_with: str, hint: str | None = None) -> None:
    """Refuse, in one line, those of `options` (flag: value) that were given (not None, not an
    empty list) where they would do nothing: '--a and --b go with GOES_WITH'. A command that
    reads an option only in one of its modes otherwise drops it there without a word."""
    given = [flag for flag, value in options.items() if value is not None and value != []]
    if given:
        verb = "goes" if len(given) == 1 else "go"
        raise UserError(f"{_listed(given)} {verb} with {goes_with}", hint)
