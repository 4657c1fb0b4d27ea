"""Properties of experiment configs over generated keys, values and TOML documents.

Whatever `--set` or a TOML file holds, loading gives a validated Experiment or raises
UserError with one line; never another exception. A value in a key's range is what the
resolved config holds, and survives `to_toml` and loading again; a value outside it is
refused with a message naming the key. The ranges below are the specification, written
out rather than read from dlperf.config, so a bound that goes missing there fails here.

Hypothesis runs derandomized and without its example database: every run tries the same
examples.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import pytest
import tomli_w
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from dlperf.config import describe, load_experiment, load_file, to_toml
from dlperf.config.base import FIGURE_MAX, FIGURE_MIN, MIN_STD, PPP_MIN
from dlperf.config.loading import _FILE_FIELDS
from dlperf.config.predict import FLOPS_MAX
from dlperf.errors import UserError

# Every count's bound: what a C int holds (dlperf.config's Count and Size).
INT = 2**31
# config.Rate's bound: a learning rate beyond it overflows SGD's float32 arithmetic.
RATE_MAX = 10**12
REPEATABLE = settings(derandomize=True, database=None, deadline=None, max_examples=150)


@dataclass(frozen=True)
class Range:
    """A numeric key's values: `kind` from `low` (excluded when `low_open`) up to `high`
    (excluded when `high_open`; None: no upper bound)."""

    kind: type
    low: float  # an int for a whole-number key
    high: int | None = None
    low_open: bool = False
    high_open: bool = True

    def valid(self) -> st.SearchStrategy[Any]:
        if self.kind is int:
            high = None if self.high is None else self.high - self.high_open
            return st.integers(self.low + self.low_open, high)
        return st.floats(
            self.low,
            self.high,
            exclude_min=self.low_open,
            exclude_max=self.high is not None and self.high_open,
            allow_nan=False,
            allow_infinity=False,
        )

    def invalid(self) -> st.SearchStrategy[Any]:
        """Below the range, above it, of the wrong kind, or not a number at all."""
        if self.kind is int:
            below = st.integers(max_value=self.low - (not self.low_open))
            # a whole-number key refuses fractions even within its bounds
            wrong = st.integers(self.low, self.low + 100).map(lambda n: n + 0.5)
        else:
            below = st.floats(max_value=self.low, exclude_max=not self.low_open)
            wrong = st.sampled_from([float("nan"), float("inf"), float("-inf")])
        # strict: neither a bool (`--set train.epochs=true`) nor a number in quotes
        choices = [below, wrong, st.booleans(), st.sampled_from(["fast", "1,5", "", "5"])]
        if self.high is not None:
            choices.append(
                st.integers(min_value=self.high + (not self.high_open))
                if self.kind is int
                else st.floats(min_value=self.high, exclude_min=not self.high_open)
            )
        return st.one_of(*choices)


NUMERIC = {
    "data.num_workers": Range(int, 0, INT),
    "data.max_memory_gb": Range(float, 0),
    "data.val_fraction": Range(float, 0, 1),
    "data.test_fraction": Range(float, 0, 1),
    "data.split_seed": Range(int, 0, 2**32),
    "data.limit": Range(int, 1, INT),
    "data.image_size": Range(int, 1, INT),
    "data.holdout": Range(float, 0, 1),
    "train.backbone_lr_scale": Range(float, 0, 100, low_open=True, high_open=False),
    "data.num_classes": Range(int, 2, INT),
    "data.size": Range(int, 1, INT),
    "train.epochs": Range(int, 1, 1_000_000, high_open=False),
    "train.batch_size": Range(int, 1, INT),
    "train.lr": Range(float, 0, RATE_MAX, low_open=True, high_open=False),
    "train.momentum": Range(float, 0, 1),
    "train.weight_decay": Range(float, 0, 1, high_open=False),
    "train.grad_clip": Range(float, 0, low_open=True),
    "train.label_smoothing": Range(float, 0, 1),
    "train.schedule.gamma": Range(float, 0, 1, low_open=True, high_open=False),
    "train.schedule.warmup_epochs": Range(float, 0),
    "train.schedule.min_lr": Range(float, 0),
    "augment.crop_padding": Range(int, 0, INT),
    "augment.cutout": Range(int, 0, INT),
    "augment.batch_aug_m": Range(int, 1, 64, high_open=False),
    "target.accuracy": Range(float, 0, 1, low_open=True, high_open=False),
    "run.seed": Range(int, 0, 2**32),
    "run.threads": Range(int, 1, INT),
    "run.warmup_steps": Range(int, 0, INT),
    "run.log_every": Range(int, 1, INT),
    "run.profile.warmup": Range(int, 0, INT),
    "run.profile.active": Range(int, 1, INT),
    "scale.global_batch": Range(int, 1, INT),
    "scale.per_worker_batch": Range(int, 1, INT),
    "scale.steps": Range(int, 1, INT),
    "scale.epochs": Range(int, 1, INT),
    "scale.warmup_steps": Range(int, 0, INT),
    "scale.repeat": Range(int, 1, INT),
    "scale.threads_per_worker": Range(int, 1, INT),
    "scale.price_per_hour": Range(float, 0),
    "scale.nnodes": Range(int, 1, INT),
    "scale.node_rank": Range(int, 0, INT),
    "scale.chunks": Range(int, 1, INT),
    "scale.memory_cap_gb": Range(float, 0, low_open=True),
    "serve.port": Range(int, 0, 65535, high_open=False),
    "serve.max_batch": Range(int, 1, INT),
    "serve.max_wait_ms": Range(float, 0, 600_000, high_open=False),
    "serve.queue": Range(int, 1, INT),
    "serve.threads": Range(int, 1, INT),
    "serve.max_body_mb": Range(float, 0, low_open=True),
    "serve.max_pixels": Range(int, 1, INT),
    "serve.read_timeout_s": Range(float, 0, low_open=True),
    "serve.max_connections": Range(int, 1, INT),
    "detect.size": Range(int, 96, 640, high_open=False),
    "distill.top_p": Range(int, 1, INT),
    "distill.teacher": Range(int, 1, INT),
    "distill.pretrain_epochs": Range(int, 1, INT),
    "distill.finetune_epochs": Range(int, 1, INT),
    "distill.finetune_lr": Range(float, 0, RATE_MAX, low_open=True, high_open=False),
    "distill.score_batch": Range(int, 1, INT),
    "analyze.batch": Range(int, 1, INT),
    "analyze.classes": Range(int, 1, INT),
    "predict.ppp": Range(float, PPP_MIN, 1, high_open=False),
    "predict.peak_tflops": Range(float, FIGURE_MIN, int(FIGURE_MAX), high_open=False),
    "predict.flops": Range(float, 1, int(FLOPS_MAX), high_open=False),
    "predict.reps": Range(int, 1, INT),
    "export.num_classes": Range(int, 2, INT),
    "export.opset": Range(int, 1, INT),
    "export.rtol": Range(float, 0),
    "export.atol": Range(float, 0),
    "infer.topk": Range(int, 1, INT),
    "infer.threads": Range(int, 1, INT),
    "infer.repeats": Range(int, 1, INT),
    "converge.upto": Range(float, 0, 1, low_open=True, high_open=False),
    "converge.upto_step": Range(float, 0, low_open=True),
}
# Any finite number: its range depends on converge.metric, checked where it is used.
FINITE = {"converge.target"}
UNIT = st.floats(0, 1)
COMMS = ["allreduce", "fp16", "bf16", "powersgd", "noop"]
STRATEGIES = ["ddp", "dp", "mirrored", "multiworker"]
ALLREDUCES = ["nccl", "hierarchical", "one-device", "auto", "ring"]


def choices(allowed: list[str]) -> tuple[st.SearchStrategy[Any], st.SearchStrategy[Any]]:
    """A list key of choices: one or more of them; none, or one that is not a choice."""
    some = st.lists(st.sampled_from(allowed), max_size=2)
    unknown = st.text().filter(lambda t: t not in allowed)
    return (
        st.lists(st.sampled_from(allowed), min_size=1, max_size=3, unique=True),
        st.just([]) | st.builds(lambda good, bad: [*good, bad], some, unknown),
    )


# A list of a study's points (scale.workers, distill.top_k, ...) refuses a repeated value.
LISTS = {  # key: (valid, invalid)
    "data.shape": (
        st.lists(st.integers(1, 512), min_size=3, max_size=3),
        st.lists(st.integers(1, 512), max_size=5).filter(lambda s: len(s) != 3)
        | st.lists(st.integers(-5, 0), min_size=3, max_size=3),
    ),
    "data.mean": (
        st.lists(UNIT, min_size=1, max_size=4),
        st.just([]) | st.lists(st.floats(1, exclude_min=True), min_size=1, max_size=4),
    ),
    "data.std": (
        st.lists(st.floats(MIN_STD, 1), min_size=1, max_size=4),
        st.just([])
        | st.lists(st.floats(max_value=MIN_STD, exclude_max=True), min_size=1, max_size=4),
    ),
    "train.schedule.milestones": (
        st.lists(st.integers(1, 1000), max_size=4),
        st.lists(st.integers(max_value=0), min_size=1, max_size=4),
    ),
    "scale.workers": (
        st.lists(st.integers(1, 1024), min_size=1, max_size=4, unique=True),
        st.just([]) | st.lists(st.integers(max_value=0), min_size=1, max_size=4),
    ),
    "scale.bucket_mb": (
        st.lists(st.floats(0, 1024, exclude_min=True), max_size=3, unique=True),
        st.lists(st.floats(max_value=0), min_size=1, max_size=3),
    ),
    "distill.top_k": (
        st.lists(st.integers(1, 10_000), min_size=1, max_size=4, unique=True),
        st.just([]) | st.lists(st.integers(max_value=0), min_size=1, max_size=4),
    ),
    "analyze.input": (
        st.lists(st.integers(1, 512), min_size=1, max_size=4),
        st.just([]) | st.lists(st.integers(max_value=0), min_size=1, max_size=4),
    ),
    "export.input": (
        st.lists(st.integers(1, 512), min_size=3, max_size=3),
        st.lists(st.integers(1, 512), max_size=5).filter(lambda s: len(s) != 3)
        | st.lists(st.integers(-5, 0), min_size=3, max_size=3),
    ),
    "infer.batch": (
        st.lists(st.integers(1, 1024), min_size=1, max_size=4, unique=True),
        st.just([]) | st.lists(st.integers(max_value=0), min_size=1, max_size=4),
    ),
    "scale.comm": choices(COMMS),
    # empty: the framework's default strategy and all-reduce
    "scale.strategy": (
        st.lists(st.sampled_from(STRATEGIES), max_size=3, unique=True),
        choices(STRATEGIES)[1].filter(bool),
    ),
    "scale.allreduce": (
        st.lists(st.sampled_from(ALLREDUCES), max_size=3, unique=True),
        choices(ALLREDUCES)[1].filter(bool),
    ),
}
CHOICES = {
    "model.transfer": ["scratch", "finetune", "feature-extract"],
    "model.head": ["new", "keep"],
    "data.loader": ["tensor", "torchvision"],
    "train.optimizer": ["sgd", "adamw"],
    "train.schedule.kind": ["multistep", "cosine", "constant"],
    "run.precision": ["fp32", "bf16", "fp16"],
    "run.timing": ["off", "coarse", "phases"],
    "scale.mode": ["strong", "weak"],
    "scale.backend": ["auto", "gloo", "nccl"],
    "scale.framework": ["torch", "tensorflow"],
    "scale.on_failure": ["continue", "stop"],
    "detect.ap_method": ["area", "11point"],
    "analyze.precision": ["fp32", "bf16", "fp16"],
    "analyze.activations": ["all", "conv-pool-fc"],
    "analyze.macs_convention": ["dlperf", "torchinfo", "ptflops", "fvcore"],
    "converge.metric": ["loss", "accuracy", "error"],
    "converge.form": ["ensemble", "optimus", "power"],
}
FLAGS = [
    "data.download",
    "data.in_memory",
    "train.nesterov",
    "augment.flip",
    "run.channels_last",
    "run.compile",
    "run.checkpoint",
    "run.profile.enabled",
    "run.profile.record_shapes",
    "run.profile.profile_memory",
    "run.profile.with_stack",
    "scale.synthetic",
    "scale.comm_split",
    "scale.allow_oversubscribe",
    "scale.plots",
    "analyze.train",
    "analyze.bias",
    "predict.measure",
    "export.dynamic_batch",
    "export.single_file",
]
# Checked where they are used (the registries, the device, the file system), not on loading.
TEXTS = ["model.name", "model.weights", "data.name"]
TEXTS += ["run.device", "run.out_dir"]
TEXTS += ["scale.device", "scale.rdzv", "distill.unlabeled", "distill.student"]
TEXTS += ["detect.model", "detect.train_split", "detect.val_split"]
TEXTS += ["predict.device", "infer.torch", "converge.x", "converge.y", "converge.key"]
NAME = st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True)
KWARGS = st.dictionaries(NAME, st.integers() | st.booleans() | st.text(max_size=5), max_size=3)

VALID: dict[str, st.SearchStrategy[Any]] = {
    **{key: r.valid() for key, r in NUMERIC.items()},
    **{key: valid for key, (valid, _) in LISTS.items()},
    **{key: st.sampled_from(values) for key, values in CHOICES.items()},
    **{key: st.booleans() for key in FLAGS},
    **{key: st.text() for key in TEXTS},
    **{key: st.floats(allow_nan=False, allow_infinity=False) for key in FINITE},
    # a name is shown in terminals, HTML and MLflow: no character of Unicode's category C
    # (controls, format characters such as U+202E, private and unassigned ones; since round 26)
    "run.name": st.text(st.characters(blacklist_categories=["Cc", "Cf", "Cs", "Co", "Cn"])),
    # an address: not blank, no white space at an edge (round 31)
    "serve.host": st.text(min_size=1).filter(lambda t: t.strip() == t),
    # a path: not blank, which read as the current directory (round 35)
    "data.root": st.text().filter(lambda t: t.strip() != ""),
}
INVALID: dict[str, st.SearchStrategy[Any]] = {
    **{key: r.invalid() for key, r in NUMERIC.items()},
    **{key: invalid for key, (_, invalid) in LISTS.items()},
    **{key: st.text().filter(lambda t, v=values: t not in v) for key, values in CHOICES.items()},
    **{key: st.floats(0.1, 0.9) | st.lists(st.booleans(), max_size=2) for key in FLAGS},
    **{key: st.sampled_from([float("nan"), float("inf"), True, "0.9"]) for key in FINITE},
    "run.name": st.tuples(
        st.text(max_size=5), st.characters(whitelist_categories=["Cc"]), st.text(max_size=5)
    ).map("".join),
    "serve.host": st.sampled_from(["", " ", " 127.0.0.1", "::1\n"]),
    "data.root": st.sampled_from(["", " ", "\t"]),
}


def literal(value: Any) -> str:
    """`value` as the TOML text `--set key=TEXT` reads back as `value`."""
    return tomli_w.dumps({"v": value}).removeprefix("v = ").strip()


def load_all(path: Path | None, overrides: list[str] | None = None) -> tuple[Any, str, str]:
    """A file's experiment and command sections as one tree, that tree as TOML, and the
    experiment's hash."""
    exp, commands = load_file(path, overrides)
    tree = exp.to_dict() | commands.model_dump(mode="json")
    return tree, to_toml(exp, commands), exp.config_hash()


def lookup(tree: dict[str, Any], key: str) -> Any:
    for part in key.split("."):
        tree = tree[part]
    return tree


def nest(flat: dict[str, Any]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for key, value in flat.items():
        *sections, name = key.split(".")
        node = tree
        for section in sections:
            node = node.setdefault(section, {})
        node[name] = value
    return tree


def with_key(table: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[tuple[str, Any]]:
    return st.sampled_from(sorted(table)).flatmap(lambda k: st.tuples(st.just(k), table[k]))


def one_line(error: UserError) -> str:
    message = str(error)
    assert "\n" not in message, message
    return message


def problem(flat: dict[str, Any]) -> str | None:
    """The key a valid document breaks by combining values, if it does (the first one in
    the order Experiment._consistent checks them)."""
    nesterov = flat.get("train.optimizer", "sgd") == "sgd" and flat.get("train.nesterov")
    if nesterov and flat.get("train.momentum", 0.9) == 0:
        return "train.nesterov"
    kind = flat.get("train.schedule.kind", "constant")
    if kind == "multistep" and not flat.get("train.schedule.milestones"):
        return "train.schedule.milestones"
    if flat.get("model.transfer", "scratch") != "scratch" and "model.weights" not in flat:
        return "model.transfer"
    if kind == "cosine" and flat.get("train.schedule.min_lr", 0) > flat.get("train.lr", 0.05):
        return "train.schedule.min_lr"
    return None


@pytest.fixture(scope="module")
def exp_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One file rewritten by every example (hypothesis runs them within one test call)."""
    return tmp_path_factory.mktemp("props") / "exp.toml"


def test_every_key_has_a_specified_range_or_kind() -> None:
    own = {"model.kwargs", "run.name", "serve.host", "data.root"}  # each with strategies of its own
    specified = {*NUMERIC, *LISTS, *CHOICES, *FLAGS, *TEXTS, *FINITE, *own}
    assert {key for key, _ in describe()} == specified


def bounds(key: str) -> dict[str, Any]:
    """The JSON schema of a numeric key's value, as pydantic checks it (None left out)."""
    fields = _FILE_FIELDS
    *sections, name = key.split(".")
    for section in sections:
        fields = fields[section].annotation.model_fields  # type: ignore[union-attr]
    field = fields[name]
    annotation = (
        Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation
    )
    schema = TypeAdapter(annotation).json_schema()
    return next(s for s in schema.get("anyOf", [schema]) if s["type"] != "null")


# Checked by a validator of its own (its message gives an example), not by Field bounds.
VALIDATED = {"target.accuracy"}


@pytest.mark.parametrize("key", sorted(NUMERIC.keys() - VALIDATED))
def test_each_range_here_is_the_one_the_config_checks(key: str) -> None:
    # A bound added to the config but not here made the valid strategy draw refused values.
    r = NUMERIC[key]
    expected: dict[str, Any] = {"type": "integer" if r.kind is int else "number"}
    expected["exclusiveMinimum" if r.low_open else "minimum"] = r.low
    if r.high is not None:
        expected["exclusiveMaximum" if r.high_open else "maximum"] = r.high
    assert bounds(key) == expected


# Up to 4 keys a command line: 60 lines set about as many keys' values (150) as 150 lines of
# one key did, for 60 loads (each example's time is mostly hypothesis's own and the loads').
@settings(REPEATABLE, max_examples=60)
@given(st.lists(with_key(VALID), min_size=1, max_size=4, unique_by=lambda pair: pair[0]))
def test_a_valid_set_is_the_resolved_value(exp_file: Path, pairs: list[tuple[str, Any]]) -> None:
    assume(problem(dict(pairs)) is None)  # e.g. multistep alone: tested with documents
    tree, text, digest = load_all(None, [f"{key}={literal(value)}" for key, value in pairs])
    exp_file.write_text(text)
    again, _, again_digest = load_all(exp_file)
    for key, value in pairs:
        assert lookup(tree, key) == value, key
        assert lookup(again, key) == value, key
    assert again_digest == digest


@REPEATABLE
@given(with_key(INVALID))
def test_an_invalid_value_is_refused_naming_its_key(pair: tuple[str, Any]) -> None:
    key, value = pair
    with pytest.raises(UserError) as info:
        load_experiment(None, [f"{key}={literal(value)}"])
    assert key in one_line(info.value)


KEY_PARTS = sorted({part for key, _ in describe() for part in key.split(".")})
NEAR_KEYS = st.lists(st.sampled_from(KEY_PARTS) | st.text(max_size=6), min_size=1, max_size=4)
SET_VALUES = st.sampled_from(["1", "-1", "0.5", "nan", "x", "[1, 2]", "true", '"s"', "{a=1}", ""])


@REPEATABLE
@given(
    st.lists(
        st.tuples(NEAR_KEYS.map(".".join), SET_VALUES | st.text(max_size=8)).map("=".join)
        | st.text(max_size=12),
        max_size=4,
    )
)
def test_any_set_resolves_or_is_one_line_user_error(assignments: list[str]) -> None:
    try:
        load_experiment(None, assignments)
    except UserError as e:
        one_line(e)


# Each document holds about half of the 145 keys: 50 documents draw each key's value about 25
# times (150 drew it 75 times).
@settings(REPEATABLE, max_examples=50)
@given(st.fixed_dictionaries({}, optional={**VALID, "model.kwargs": KWARGS}))
def test_a_valid_document_loads_and_round_trips(exp_file: Path, flat: dict[str, Any]) -> None:
    exp_file.write_text(tomli_w.dumps(nest(flat)))
    broken = problem(flat)
    if broken is not None:
        with pytest.raises(UserError) as info:
            load_experiment(exp_file)
        assert broken in one_line(info.value)
        return
    resolved, text, _ = load_all(exp_file)
    assert all(lookup(resolved, key) == value for key, value in flat.items())
    exp_file.write_text(text)
    assert load_all(exp_file)[0] == resolved


SCALARS = st.integers() | st.floats() | st.booleans() | st.text(max_size=6) | st.dates()
TOML_VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(KEY_PARTS) | st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)


@REPEATABLE
@given(st.dictionaries(st.sampled_from(KEY_PARTS) | st.text(max_size=6), TOML_VALUES, max_size=4))
def test_any_document_loads_or_is_one_line_user_error(exp_file: Path, doc: dict[str, Any]) -> None:
    exp_file.write_text(tomli_w.dumps(doc))
    try:
        load_experiment(exp_file)
    except UserError as e:
        one_line(e)


@REPEATABLE
@given(st.binary(max_size=40) | st.text(max_size=40).map(str.encode))
def test_any_bytes_load_or_are_one_line_user_error(exp_file: Path, content: bytes) -> None:
    exp_file.write_bytes(content)
    try:
        load_experiment(exp_file)
    except UserError as e:
        one_line(e)
