"""Loading a config: defaults < TOML file < --set overrides < a command's flags, validated in
one place. Unknown keys fail naming the file, the key and the closest valid key; a command's
flags are typed values assigned to the keys of their names (`shortcuts`)."""

from __future__ import annotations

import copy
import json
import re
import sys
import tomllib
from pathlib import Path
from types import NoneType, UnionType
from typing import Annotated, Any, Literal, TypeVar, Union, cast, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from dlperf.config.analyze import AnalyzeConfig
from dlperf.config.base import NOT_UTF8, Section
from dlperf.config.converge import ConvergeConfig
from dlperf.config.detect import MOVED, DetectConfig
from dlperf.config.distill import DistillConfig
from dlperf.config.experiment import Experiment, Job, ModelConfig
from dlperf.config.export import ExportConfig
from dlperf.config.infer import InferConfig
from dlperf.config.predict import PredictConfig
from dlperf.config.scale import ScaleConfig
from dlperf.config.serve import ServeConfig
from dlperf.errors import UserError
from dlperf.parsing import (
    KEYS_HINT,
    MAX_DEPTH,
    TOO_DEEP,
    absolute_model_name,
    as_given,
    clipped,
    depth,
    did_you_mean,
    flat_clash,
    key_fault,
    lookalikes,
    one_line,
    printable_key,
    printable_keys,
    quoted,
    stem_name,
)


class Commands(Section):
    """The commands' sections, which a TOML file may hold beside the experiment's tables."""

    scale: ScaleConfig = ScaleConfig()
    serve: ServeConfig = ServeConfig()
    detect: DetectConfig = DetectConfig()
    distill: DistillConfig = DistillConfig()
    analyze: AnalyzeConfig = AnalyzeConfig()
    predict: PredictConfig = PredictConfig()
    export: ExportConfig = ExportConfig()
    infer: InferConfig = InferConfig()
    converge: ConvergeConfig = ConvergeConfig()


# The top-level tables of a TOML file.
_FILE_FIELDS = {**Experiment.model_fields, **Commands.model_fields}


def check_text_keys(value: Any, where: str, within: str = "") -> None:
    """Refuse a key that is not a str, at any depth, naming its table (`within`, dotted):
    TOML's keys are text, but a dict given to `dlperf.run` may hold 3 or None, which crashed
    the close-match hint (`.lower()`) or reached pydantic as "[key]: Input should be a valid
    string". Called once `depth` has bounded the recursion."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise UserError(f"{where}: {key_fault(key, within)}", KEYS_HINT)
            check_text_keys(item, where, f"{within}.{key}" if within else key)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            check_text_keys(item, where, f"{within}[{i}]")


def check_keys(
    raw: dict[str, Any], fields: dict[str, FieldInfo], where: str, prefix: str = ""
) -> None:
    """Name an unknown key and its closest valid spelling before pydantic sees it."""
    for key, value in raw.items():
        path = f"{prefix}{key}"
        if key not in fields:
            if prefix == "detect." and key in MOVED:
                raise UserError(
                    f"{where}: {path!r} is {MOVED[key]!r} now", f"give it as {MOVED[key]}"
                )
            if "." in key and _names_key(key.split("."), fields):
                raise _one_quoted_key(key, prefix, where)
            hint = did_you_mean(
                key,
                fields,
                f"valid keys: {', '.join(fields)}",
                cutoff=0.5,
                quote=True,
                prefix=prefix,
            )
            # repr: a key read from a file may hold a newline, and the error stays one line;
            # a key with a dot in its quotes, one key, not a section's (train."train.lr")
            shown = prefix + json.dumps(key) if "." in key else path
            raise UserError(f"{where}: unknown key {quoted(shown)}", hint)
        annotation = fields[key].annotation
        if (
            isinstance(value, dict)
            and isinstance(annotation, type)
            and issubclass(annotation, BaseModel)
        ):
            check_keys(value, annotation.model_fields, where, f"{path}.")


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")  # a key TOML takes without quotes


def _names_key(parts: list[str], fields: dict[str, FieldInfo]) -> bool:
    """Whether `parts`, each a bare key, name a key below `fields`: its sections down to a
    key, or down to a table of free keys (model.kwargs), which takes any key below it."""
    if not all(_BARE_KEY.fullmatch(part) for part in parts):
        return False
    for i, part in enumerate(parts):
        if part not in fields:
            return False
        annotation = fields[part].annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            fields = annotation.model_fields
        elif i < len(parts) - 1:
            return get_origin(annotation) is dict
    return True


def _one_quoted_key(key: str, prefix: str, where: str) -> UserError:
    """A key with dots in TOML's quotes ("train.lr" = 0.1, as a sweep file and --set spell
    keys) is one key of that name, not the key its dotted parts name: say so, and how to
    write the key it was meant to be."""
    *tables, last = key.split(".")
    return UserError(
        f"{where}: unknown key {quoted(prefix + json.dumps(key))}: in quotes, TOML reads it as one "
        "key, dots and all",
        f"write it bare, {clipped(key)} = ..., or {clipped(last)} = ... under "
        f"[{clipped(prefix + '.'.join(tables))}]",
    )


# An experiment or sweep file is a config, not data: the largest a user writes are a few KB.
# One of 6 MB (a 3,000,000-item list) took 25 s and 1.1 GB before `run` refused a key in it,
# and `config show` minutes (break-it round 41).
FILE_MAX_BYTES = 1 << 20

TOO_LONG = (
    f"an integer of more than {sys.get_int_max_str_digits()} digits, which Python does not "
    "convert (a denial-of-service guard)"
)


def parse_value(text: str) -> Any:
    """A --set value is a TOML value (numbers, booleans, lists); anything else is a string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text
    except RecursionError:  # the parser recurses once per level of [ or {
        raise UserError(f"--set value {text[:20]!r}...: {TOO_DEEP}") from None
    except ValueError:  # not TOML's: Python's limit on converting a long run of digits
        raise UserError(f"--set value {text[:20]!r}...: {TOO_LONG}") from None


def apply_override(raw: dict[str, Any], assignment: str) -> None:
    """`--set KEY=VALUE` into `raw`."""
    if "=" not in assignment:
        raise UserError(
            f"--set {quoted(assignment)}: expected KEY=VALUE", "e.g. --set train.lr=0.01"
        )
    key, text = _split_assignment(assignment)
    said = f"--set {quoted(assignment)}"
    parts = _key_parts(key.strip(), said)
    if not all(parts):
        raise UserError(f"{said}: empty key", "e.g. --set train.lr=0.01")
    for part in parts:  # a quoted part holding '=': refused as a file's key is, naming --set
        if "=" in part:  # (as a sweep's point's config, it was blamed on the point)
            printable_key(part, f"{said}: key {_toml_key(tuple(parts))}")
    _assign_parts(raw, parts, key.strip(), parse_value(text.strip()), "--set")


def _split_assignment(assignment: str) -> tuple[str, str]:
    """KEY=VALUE split at the first '=' outside a TOML quoted key's quotes, so that
    model.kwargs."a=b"=1 has the key model.kwargs."a=b" (split at the first '=', the key was
    `model.kwargs."a`, "not a TOML key"). With no '=' outside quotes (a quote left open), at
    the first '=', so that `_key_parts` says what is wrong with the key."""
    quote = ""
    escaped = False
    for i, c in enumerate(assignment):
        if escaped:  # a basic string's \" or \\
            escaped = False
        elif quote == '"' and c == "\\":
            escaped = True
        elif quote:
            quote = "" if c == quote else quote
        elif c in "\"'":
            quote = c
        elif c == "=":
            return assignment[:i], assignment[i + 1 :]
    key, _, text = assignment.partition("=")
    return key, text


def _key_parts(key: str, said: str) -> list[str]:
    """A --set key's or a sweep axis's parts (`said` names it in errors). A key with a
    quote is a TOML dotted key, so that model.kwargs."a.b" names the one key "a.b" as it
    does in a TOML file; any other is split at its dots, which also keeps the characters a
    TOML bare key lacks (a/b, non-ASCII)."""
    if '"' not in key and "'" not in key:
        return key.split(".")
    hint = 'e.g. --set model.kwargs."a.b"=1'
    # One line only: a newline could start a [table] header and make another key of it.
    if "\n" in key or "\r" in key:
        raise UserError(f"{said}: not a TOML key (a key is one line)", hint)
    try:
        node: Any = tomllib.loads(f"{key} = 0")
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"{said}: not a TOML key ({e})", hint) from None
    parts: list[str] = []
    while isinstance(node, dict):  # one assignment: one key at every level
        (part, node), *_ = node.items()
        parts.append(part)
    return parts


def assign(raw: dict[str, Any], key: str, value: Any, where: str) -> None:
    """Set the dotted `key` in `raw` to a typed `value` (--set's, or a sweep point's); a table
    merges into the table it replaces (e.g. model.kwargs). `where` names the setting in
    errors. A part in TOML's quotes is one key, dots and all, as in --set."""
    parts = _key_parts(key, f"{where}: key {quoted(key)}")
    if not all(parts):
        raise UserError(f"{where}: empty part in key {quoted(key)}", 'e.g. "train.lr"')
    _assign_parts(raw, parts, key, value, where)


def _assign_parts(raw: dict[str, Any], parts: list[str], key: str, value: Any, where: str) -> None:
    node = raw
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise UserError(f"{where}: {quoted(key)}: {quoted(part)} is a value, not a section")
    old = node.get(parts[-1])
    # A copy: a sweep gives every point the same axis value, and a later key within it (an
    # axis "model.kwargs.t.x" after "model.kwargs.t") would write into that one object, every
    # point's config and label then the last point's (kwargs stay a dict in the experiment).
    value = copy.deepcopy(value)
    if isinstance(value, dict) and isinstance(old, dict):
        node[parts[-1]] = {**old, **value}
    else:
        node[parts[-1]] = value


def _is_list(annotation: Any) -> bool:
    if get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    return get_origin(annotation) is list


def _takes_text(annotation: Any) -> bool:
    """Whether a key holds text as text: a str, a Literal of words, or a union with one."""
    if annotation is str:
        return True
    if get_origin(annotation) is Literal:
        return any(isinstance(value, str) for value in get_args(annotation))
    return any(_takes_text(member) for member in get_args(annotation))


def _typed(annotation: Any, value: Any, key: str) -> Any:
    """A flag's value as its key takes it: a list key's flag is a comma-separated list, each
    item read as --set reads a value, a single item left one value where the key takes one
    value or a list (scale.mode); text for a key that holds no text (predict.peak_tflops) is
    read as --set reads it, so that the key's own check names what is wrong. An empty item
    ('1,,2', '1,') is refused: it was dropped, where other commands' lists refuse it."""
    union = get_origin(annotation) in (Union, UnionType)
    members = [m for m in get_args(annotation) if m is not NoneType] if union else [annotation]
    many = any(_is_list(member) for member in members)
    if many:
        parts = [part.strip() for part in value.split(",")]
        if value.strip() and not all(parts):
            raise UserError(
                f"{key}: {value!r} holds an empty item between its commas",
                "leave out the empty item, e.g. 1,2",
            )
        items = [parse_value(part) for part in parts if part]
        either = not all(_is_list(member) for member in members)
        return items[0] if either and len(items) == 1 else items
    if isinstance(value, str) and not _takes_text(annotation):
        return parse_value(value)
    return value


def shortcuts(section: str, flags: dict[str, Any]) -> dict[str, Any]:
    """The command-line flags given (not None) as {dotted key: value}: each flag is a
    shortcut for the key of its name in `section` (a command's or the experiment's), its
    value typed as the key takes it, so that one validation serves flags, files and --set
    alike."""
    keys = cast(type[Section], _FILE_FIELDS[section].annotation).model_fields
    return {
        f"{section}.{name}": _typed(keys[name].annotation, value, f"{section}.{name}")
        for name, value in flags.items()
        if value is not None
    }


J = TypeVar("J", bound=Job)


def _under(preset: dict[str, Any], raw: dict[str, Any]) -> dict[str, Any]:
    """`raw` over `preset`, table by table."""
    merged = dict(preset)
    for key, value in raw.items():
        below = merged.get(key)
        if isinstance(value, dict) and isinstance(below, dict):
            value = _under(below, value)
        merged[key] = value
    return merged


def load_job(
    job: type[J],
    path: str | Path | None,
    overrides: list[str],
    names: dict[str, str] | None = None,
    **flags: dict[str, Any],
) -> J:
    """The job a command runs: defaults < the job's preset < the file at `path` <
    `overrides` (--set) < the command's flags, given per section as {key: value}, None for a
    flag not given (e.g. `scale={"workers": "1,2"}`): each is a shortcut for its key, and an
    error in it names the flag: --KEY, or `names`' flag for a dotted key (e.g.
    {"train.batch_size": "--batch"})."""
    raw, file_model = _read(path, overrides)
    options: dict[str, str] = {}  # a key set by a flag: its error names the flag the user typed
    for section, given in flags.items():
        for key, value in shortcuts(section, given).items():
            options[key] = (names or {}).get(key) or "--" + key.partition(".")[2].replace("_", "-")
            assign(raw, key, value, options[key])
    raw = _under(job.preset, raw) if job.preset else raw
    where = config_words(path, bool(overrides or options))
    context = {"architecture_only": job.counts_only}
    exp, commands = _built(raw, path, file_model, where, options, context)
    sections = {name: getattr(commands, name) for name in job.model_fields if name != "experiment"}
    loaded = cast(J, job.model_construct(experiment=exp, **sections))  # each part is validated
    refused = loaded.check()
    if refused is not None:
        raise UserError(f"{where}: {refused}", "leave it out, or give it its default")
    return loaded


# pydantic's words for a value out of range, in the words of dlperf's other messages.
_RANGE_MESSAGES = {
    "greater_than": "must be greater than {gt}",
    "greater_than_equal": "must be at least {ge}",
    "less_than": "must be less than {lt}",
    "less_than_equal": "must be at most {le}",
    "finite_number": "must be a finite number",
    "too_short": "must have {min_length} or more values",
    "too_long": "must have {max_length} or fewer values",
}


def _bound(value: Any) -> Any:
    """0.0 as 0 and 1.0 as 1: a float field's bounds read as the integers they are; a large
    one as 1e+12, not its twelve zeros."""
    if isinstance(value, float) and abs(value) >= 1e6:
        return f"{value:g}"
    return int(value) if isinstance(value, float) and value.is_integer() else value


# The errors of text refused for not being a choice or a number, which are ASCII (`_ascii_wanted`).
_ASCII_WANTED = {
    "literal_error",
    "enum",
    "int_parsing",
    "int_type",  # text where strict number fields take only numbers
    "float_parsing",
    "float_type",
    "bool_type",
    "decimal_parsing",
    "bool_parsing",
}


def _ascii_wanted(error: Any, got: Any) -> bool:
    """Whether `error` refused the text `got` for not being one of a key's choices or a
    number, all ASCII, so that a character that only looks ASCII (a Cyrillic 'а', an en dash
    for a minus) is named (`lookalikes`): quoted as typed, 'аdamw' read as the valid 'adamw'."""
    return isinstance(got, str) and error["type"] in _ASCII_WANTED


def validation_message(
    error: ValidationError, where: str, options: dict[str, str] | None = None
) -> UserError:
    """The first error of `error` on one line, after `where` it came from, or after the flag
    that set its key when `options` (dotted key: flag) has one."""
    first = error.errors()[0]
    loc = ".".join(str(p) for p in first["loc"])
    flag = next((f for k, f in (options or {}).items() if f"{loc}.".startswith(f"{k}.")), None)
    template = _RANGE_MESSAGES.get(first["type"])
    if template is not None:
        msg = template.format(**{k: _bound(v) for k, v in first.get("ctx", {}).items()})
    else:
        msg = first["msg"].removeprefix("Value error, ")
    got = first.get("input")
    shown = got is not None and not isinstance(got, dict) and first["type"] != NOT_UTF8
    # a choice's own characters (ctx: the choices expected) are not named, should one not be ASCII
    foreign = lookalikes(got, [str(first.get("ctx", {}))]) if _ascii_wanted(first, got) else ""
    whose = f", whose {foreign}" if foreign else ""
    got_text = f" (got {as_given(got)}{whose})" if shown else ""
    # An array (NumPy's, a tensor) from Python is taken only as the number a 0-d one holds
    # (dlperf.run): its values are given as a list.
    hint = (
        "give it as a list: .tolist()"
        if getattr(got, "ndim", 0) and hasattr(got, "tolist")
        else None
    )
    if flag is not None:
        return UserError(f"{flag}: {loc}: {msg}{got_text}", hint)
    return UserError(f"{where}: {loc}: {msg}{got_text}" if loc else f"{where}: {msg}", hint)


def build_file(
    raw: dict[str, Any],
    where: str = "config",
    options: dict[str, str] | None = None,
    context: dict[str, Any] | None = None,
) -> tuple[Experiment, Commands]:
    """A TOML file's experiment and command sections (a stored run's config is read by
    `stored_experiment`)."""
    if depth(raw) > MAX_DEPTH:
        raise UserError(f"{where}: {TOO_DEEP}")
    check_text_keys(raw, where)
    check_keys(raw, _FILE_FIELDS, where)
    commands = {key: value for key, value in raw.items() if key in Commands.model_fields}
    rest = {key: value for key, value in raw.items() if key not in commands}
    try:
        return Experiment.model_validate(rest, context=context), Commands.model_validate(commands)
    except ValidationError as e:
        raise validation_message(e, where, options) from None


def _toml_key(path: tuple[str, ...]) -> str:
    """A path of keys as TOML and --set spell it: a part holding a dot or a quote in quotes
    (`model.kwargs."a.b"`), as `flatten(quote=True)` writes it; an empty part, or one that
    holds a newline or another control character, too, so that it is seen, on one line."""

    def spelled(part: str) -> str:
        plain = part.isprintable() and part != "" and not any(c in part for c in ".\"'")
        return part if plain else json.dumps(part)  # a TOML basic string, escapes and all

    return ".".join(spelled(part) for part in path)


def check_printable(exp: Experiment, where: str) -> None:
    """Refuse an experiment about to be run one of whose keys (model.kwargs') holds a control
    or format character (a tab, U+200B), spelled as in the file: stored, it was shown escaped,
    and `runs list --where` and `runs compare` could not name it. Not for a stored run's
    config, read as it was stored (as `check_clash`)."""
    printable_keys(exp.to_dict(), lambda path: f"key {_toml_key(path)}", f"{where}: ")


def key_clash(tree: dict[str, Any]) -> str | None:
    """`flat_clash` of `tree` (a config, a sweep file's [grid]), its keys spelled as in the
    file."""
    return flat_clash(tree, _toml_key)


def check_clash(exp: Experiment, where: str) -> None:
    """Refuse an experiment about to be run two of whose keys are one dotted key (`"a.b" = 1`
    beside `a = {b = 2}` in [model.kwargs]), in the words `dlperf.run` and `dlperf.track` say
    it with (api._clash), the keys spelled as in the file: `runs list --where`, `runs
    compare` and the MLflow export name keys dotted, and one value would be lost. Not for a
    stored run's config (resume, export, a teacher), which is read as it was stored."""
    clash = key_clash(exp.to_dict())
    if clash is not None:
        raise UserError(f"{where}: {clash}", "rename one of them")


def build_experiment(
    raw: dict[str, Any], where: str = "config", *, new: bool = False
) -> Experiment:
    """The experiment of `raw`; `new`: one about to run as a new run (a sweep's point), whose
    keys may not clash once dotted (`check_clash`) nor hold a control character."""
    exp = build_file(raw, where)[0]
    if new:
        check_printable(exp, where)
        check_clash(exp, where)
    return exp


def stored_experiment(config: dict[str, Any], where: str) -> Experiment:
    """The experiment of a stored run's `config` (resumed, exported, a teacher, a sweep's
    point, an export's steps per epoch), read as it was stored. A run stored before the
    commands' sections left `Experiment` holds them too, in the keys of its day ([detect]
    epochs, now train.epochs), which `check_keys` refuses in a file or --set: no stored run
    needs them, and the user, who never typed them, could not give them otherwise."""
    kept = {key: value for key, value in config.items() if key not in Commands.model_fields}
    return build_experiment(kept, where)


def read_toml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if p.is_dir():
        raise UserError(f"{p} is a directory, not an experiment file", "give a TOML file in it")
    if p.exists() and not p.is_file():  # a FIFO would block the read, /dev/null reads empty
        raise UserError(
            f"experiment file {p} is not a regular file", "give the path of a TOML file"
        )
    if not p.is_file():
        raise UserError(f"{p}: no such experiment file", "give the path of a TOML file")
    if (size := p.stat().st_size) > FILE_MAX_BYTES:
        shown, cap = f"{size / 2**20:.1f} MiB", f"{FILE_MAX_BYTES >> 20} MiB"
        if shown == f"{FILE_MAX_BYTES / 2**20:.1f} MiB":  # a byte over read "1.0 MiB ... 1 MiB"
            shown, cap = f"{size:,} bytes", f"{FILE_MAX_BYTES:,} bytes ({cap})"
        raise UserError(
            f"{p} is {shown}; an experiment or sweep file holds at most {cap} (a config, not data)",
            "give data through data.name and a file or folder it reads",
        )
    try:
        return tomllib.loads(p.read_text(encoding="utf-8-sig"))  # a BOM, as Notepad writes it
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"{p}: malformed TOML: {e}") from None
    except RecursionError:  # the parser recurses once per level of [ or {
        raise UserError(f"{p}: {TOO_DEEP}") from None
    except UnicodeDecodeError:  # a ValueError too: before the clause below, which took it
        raise UserError(f"{p}: not a text file") from None
    except ValueError:  # not TOML's: Python's limit on converting a long run of digits
        raise UserError(f"{p}: {TOO_LONG}") from None


def load_experiment(path: str | Path | None, overrides: list[str] | None = None) -> Experiment:
    return load_file(path, overrides)[0]


def load_file(
    path: str | Path | None,
    overrides: list[str] | None = None,
    options: dict[str, str] | None = None,
    context: dict[str, Any] | None = None,
) -> tuple[Experiment, Commands]:
    """defaults < TOML file < --set overrides, validated in one place (with pydantic's
    `context`); an error in a key that `options` (dotted key: flag) lists names the flag."""
    raw, file_model = _read(path, overrides)
    return _built(raw, path, file_model, config_words(path, bool(overrides)), options, context)


def _read(path: str | Path | None, overrides: list[str] | None) -> tuple[dict[str, Any], Any]:
    """The file at `path` (or nothing) with `overrides` applied, and the model the file
    itself names (None: none)."""
    raw = read_toml(path) if path is not None else {}
    model = raw.get("model")
    file_model = model.get("name") if isinstance(model, dict) else None
    for assignment in overrides or []:
        apply_override(raw, assignment)
    return raw, file_model


def config_words(path: str | Path | None, overridden: bool) -> str:
    """The words that name the config in errors."""
    return (str(path) if path is not None else "config") + (" with --set" if overridden else "")


def _built(
    raw: dict[str, Any],
    path: str | Path | None,
    file_model: Any,
    where: str,
    options: dict[str, str] | None,
    context: dict[str, Any] | None,
) -> tuple[Experiment, Commands]:
    exp, commands = build_file(raw, where, options, context)
    # every command's experiment is loaded here, before anything runs
    check_printable(exp, where)
    check_clash(exp, where)
    if exp.run.name is None and path is not None:
        # The file's name often names its model: say so when --set trains another one, in
        # the words typed (model.name is stored with its file's path made absolute).
        said = file_model or ModelConfig.model_fields["name"].default
        changed = exp.model.name != (absolute_model_name(said) if isinstance(said, str) else said)
        stem = stem_name(Path(path))  # a file's name may hold anything: escaped
        exp.run.name = one_line(stem + (f" model.name={raw['model']['name']}" if changed else ""))
    return exp, commands


def to_toml(exp: Experiment, commands: Commands | None = None, encoding: str = "utf-8") -> str:
    """The config as TOML, to be written in `encoding`. A TOML file is UTF-8: in any other
    encoding (stdout under PYTHONIOENCODING=ascii, a C locale with UTF-8 mode off) each
    non-ASCII character is TOML's own escape (`\\u00e9`), not the stream's `\\xe9`, which no
    TOML reader takes, nor a Latin-1 byte, which is not UTF-8."""
    import codecs

    import tomli_w

    # TOML has no null: unset optional keys are left out (they take their defaults).
    def drop_none(d: dict[str, Any]) -> dict[str, Any]:
        return {
            k: drop_none(v) if isinstance(v, dict) else v for k, v in d.items() if v is not None
        }

    tables = exp.to_dict() | (commands.model_dump(mode="json") if commands else {})
    text = tomli_w.dumps(drop_none(tables))
    if codecs.lookup(encoding).name == "utf-8":
        return text
    return "".join(c if c.isascii() else _toml_escape(c) for c in text)


def _toml_escape(char: str) -> str:
    """`char` as a TOML basic string's escape: tomli_w writes every non-ASCII character (a
    value's, a quoted key's) inside one, never in a bare key, a literal string or a comment."""
    code = ord(char)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def describe(
    fields: dict[str, FieldInfo] = _FILE_FIELDS, prefix: str = ""
) -> list[tuple[str, str]]:
    """(dotted key, help) for every key of a TOML file, for `dlperf config keys`."""
    rows: list[tuple[str, str]] = []
    for name, field in fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            rows += describe(annotation.model_fields, f"{prefix}{name}.")
        else:
            rows.append((f"{prefix}{name}", " ".join((field.description or "").split())))
    return rows
