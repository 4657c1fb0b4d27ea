from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dlperf.config import (
    PRECISIONS,
    DetectJob,
    PredictJob,
    ScaleJob,
    describe,
    load_experiment,
    load_file,
    load_job,
    shortcuts,
    to_toml,
)
from dlperf.config.detect import MOVED
from dlperf.errors import UserError
from dlperf.precision import DTYPES

ISSUE_EXAMPLE = """
[model]
name = "resnet20"          # registry or torchvision name, or "path/to/file.py:factory"
[data]
name = "digits"
[train]
epochs = 10
batch_size = 64
lr = 0.05
momentum = 0.9
weight_decay = 5e-4
[train.schedule]
kind = "multistep"         # multistep | cosine | constant
milestones = [6, 8]
gamma = 0.1
[augment]
crop_padding = 0
flip = false
cutout = 0                 # side of the square Cutout mask, 0 = off
batch_aug_m = 1            # batch augmentation: M augmented copies per sample
[target]
accuracy = 0.95            # records epochs and time to reach it
[run]
seed = 0
device = "auto"            # auto | cpu | cuda | cuda:1 | mps
precision = "fp32"         # fp32 | bf16 | fp16
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "exp.toml"
    path.write_text(text)
    return path


def test_documented_example_loads_exactly(tmp_path: Path) -> None:
    exp = load_experiment(write(tmp_path, ISSUE_EXAMPLE))
    assert exp.model.name == "resnet20"
    assert exp.train.schedule.milestones == [6, 8]
    assert exp.train.weight_decay == 5e-4
    assert exp.target.accuracy == 0.95
    assert exp.run.precision == "fp32"
    assert exp.run.name == "exp"  # the file's stem


def test_set_overrides_with_type_checking(tmp_path: Path) -> None:
    path = write(tmp_path, ISSUE_EXAMPLE)
    exp = load_experiment(
        path, ["train.lr=0.01", "augment.flip=true", "train.schedule.milestones=[3]"]
    )
    assert exp.train.lr == 0.01 and exp.augment.flip is True
    assert exp.train.schedule.milestones == [3]
    with pytest.raises(UserError, match=r"train.lr: Input should be a valid number"):
        load_experiment(path, ["train.lr=fast"])
    with pytest.raises(UserError, match="expected KEY=VALUE"):
        load_experiment(path, ["train.lr"])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[train]\nlrr = 0.1\n", "unknown key 'train.lrr' (did you mean 'train.lr'?)"),
        ("[trian]\nlr = 0.1\n", "unknown key 'trian' (did you mean 'train'?)"),
        (
            "[train.schedule]\nmilestone = [1]\n",
            "unknown key 'train.schedule.milestone' (did you mean 'train.schedule.milestones'?)",
        ),
        ("[train]\nepochs = 0\n", "train.epochs: must be at least 1 (got 0)"),
        (
            "[target]\naccuracy = 95\n",
            "target.accuracy: is a fraction in (0, 1], e.g. 0.95 (got 95)",
        ),
        ('[run]\nprecision = "fp8"\n', "run.precision: Input should be 'fp32', 'bf16' or 'fp16'"),
        ('[train.schedule]\nkind = "multistep"\n', "multistep needs at least one epoch"),
        ("[scale]\nworkers = []\n", "scale.workers: must have 1 or more values (got [])"),
        ('[scale]\ncomm = ["ring"]\n', "scale.comm.0: Input should be 'allreduce', 'fp16',"),
        ("[scale]\nsteps = 0\n", "scale.steps: must be at least 1 (got 0)"),
        ("[serve]\nport = 70000\n", "serve.port: must be at most 65535 (got 70000)"),
        ("[serve]\nqueu = 1\n", "unknown key 'serve.queu' (did you mean 'serve.queue'?)"),
        ("[detect]\nsize = 64\n", "detect.size: must be at least 96 (got 64)"),
        ("[detect]\nepochs = 0\n", "'detect.epochs' is 'train.epochs' now (give it as train"),
        ("[detect]\nbatch = 4\n", "'detect.batch' is 'train.batch_size' now"),
        ("[detect]\nthreads = 1\n", "'detect.threads' is 'run.threads' now"),
        (
            '[detect]\nap_method = "101point"\n',
            "detect.ap_method: Input should be 'area' or '11point' (got '101point')",
        ),
        ("[detect]\nap_metod = 1\n", "'detect.ap_metod' (did you mean 'detect.ap_method'"),
    ],
)
def test_bad_config_names_the_problem(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(UserError) as info:
        load_experiment(write(tmp_path, text))
    assert message in str(info.value)
    assert str(info.value).startswith(str(tmp_path / "exp.toml"))


def test_unknown_key_via_set(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"unknown key 'run.sed' \(did you mean 'run.seed'\?\)"):
        load_experiment(write(tmp_path, ISSUE_EXAMPLE), ["run.sed=1"])


def test_missing_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such experiment file"):
        load_experiment(tmp_path / "nope.toml")
    with pytest.raises(UserError, match="malformed TOML"):
        load_experiment(write(tmp_path, "[train\nlr = "))


def test_resolved_config_round_trips_through_toml(tmp_path: Path) -> None:
    exp = load_experiment(write(tmp_path, ISSUE_EXAMPLE), ["train.lr=0.2"])
    again = load_experiment(write(tmp_path, to_toml(exp)))
    assert again.to_dict() == exp.to_dict()
    assert again.config_hash() == exp.config_hash()


def test_every_key_has_help() -> None:
    rows = describe()
    assert (
        "train.schedule.milestones",
        "multistep: epochs at which the rate is multiplied by gamma.",
    ) in rows
    assert ("scale.steps", "Timed steps per point (give steps or epochs).") in rows
    assert ("serve.queue", "Waiting requests before the server answers 503.") in rows
    assert (
        "detect.val_split",
        "ImageSets/Main split AP@0.5 is measured on, before and after.",
    ) in rows
    assert not [key for key, _ in rows if key.startswith("detect.") and key[7:] in MOVED]
    assert all(text for _, text in rows if not _.endswith("kwargs")), [k for k, t in rows if not t]


STUDY = """
[scale]
workers = [1, 2, 4]
mode = "weak"
per_worker_batch = 32
steps = 50
"""


def test_flags_are_shortcuts_for_keys(tmp_path: Path) -> None:
    """A flag's value is typed as its key takes it, with no TOML text in between."""
    flags = {"workers": "1, 8", "steps": 9, "synthetic": True, "bucket_mb": "25,0.5", "mode": None}
    assert shortcuts("scale", flags) == {
        "scale.workers": [1, 8],
        "scale.steps": 9,
        "scale.synthetic": True,
        "scale.bucket_mb": [25, 0.5],
    }
    # defaults < file < --set < flags
    flags["steps"] = 9
    scale = load_job(ScaleJob, write(tmp_path, STUDY), ["scale.steps=7"], scale=flags).scale
    assert scale.workers == [1, 8] and scale.mode == "weak"
    assert scale.steps == 9 and scale.synthetic is True
    assert scale.bucket_mb == [25.0, 0.5]
    assert shortcuts("scale", {"mode": "weak"}) == {"scale.mode": "weak"}  # one, not a list
    assert shortcuts("serve", {"host": "::1", "port": 0}) == {"serve.host": "::1", "serve.port": 0}
    # a text key keeps text that reads as TOML, e.g. a split named "2007"
    assert shortcuts("detect", {"val_split": "2007"}) == {"detect.val_split": "2007"}
    assert shortcuts("train", {"lr": 0.05}) == {"train.lr": 0.05}
    # text for a key that holds no text is read as --set reads it; an optional list stays one
    given = {"peak_tflops": "8.73", "flops": "15.5G", "device": "V100"}
    predict = shortcuts("predict", given)
    assert predict == {
        "predict.peak_tflops": 8.73,
        "predict.flops": "15.5G",
        "predict.device": "V100",
    }
    assert load_job(PredictJob, None, [], predict=given).predict.flops == 15.5e9
    assert shortcuts("analyze", {"input": "5", "bias": False}) == {
        "analyze.input": [5],
        "analyze.bias": False,
    }


def test_a_bad_flag_is_named_as_typed(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"^--steps: scale.steps: must be at least 1 \(got 0\)$"):
        load_job(ScaleJob, write(tmp_path, STUDY), [], scale={"steps": 0})
    with pytest.raises(UserError, match=r"^--batch: train.batch_size: must be at least 1"):
        load_job(DetectJob, None, [], {"train.batch_size": "--batch"}, train={"batch_size": 0})
    with pytest.raises(UserError, match=r"^--peak-tflops: predict.peak_tflops: Input should be"):
        load_job(PredictJob, None, [], predict={"peak_tflops": "fast"})


def test_detect_defaults_are_the_fine_tuning_recipe(tmp_path: Path) -> None:
    """The recipe that learns make-shapes' set from random weights in about 5 minutes on 2
    CPU cores (docs/course.md): AdamW, decoupled weight decay 1e-4, a cosine schedule, in
    [train] and [run] beneath the user's file."""
    job = load_job(DetectJob, None, [])
    assert job.detect.model_dump() == {
        "model": "ssdlite320_mobilenet_v3_large",
        "size": None,
        "train_split": "train",
        "val_split": "val",
        "ap_method": "area",
    }
    train, run = job.experiment.train, job.experiment.run
    assert (train.epochs, train.batch_size, train.optimizer) == (20, 8, "adamw")
    assert (train.lr, train.momentum, train.weight_decay) == (0.003, 0.9, 1e-4)
    assert (train.schedule.kind, run.warmup_steps) == ("cosine", 1)
    assert (run.seed, run.threads, run.precision) == (0, None, "fp32")
    # a file that gives some [train] keys keeps the preset's others; --set and flags win
    path = write(tmp_path, '[train]\nlr = 0.01\n[train.schedule]\nkind = "multistep"\n'
                 "milestones = [5]\n")  # fmt: skip
    job = load_job(DetectJob, path, ["train.epochs=3"], train={"batch_size": 2})
    train = job.experiment.train
    assert (train.lr, train.epochs, train.batch_size, train.optimizer) == (0.01, 3, 2, "adamw")
    assert (train.schedule.kind, train.schedule.milestones) == ("multistep", [5])
    # the classifier's defaults stay the experiment's own
    assert load_experiment(None).train.optimizer == "sgd"


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ("detect.lr=0.05", "'detect.lr' is 'train.lr' now (give it as train.lr)"),
        (
            'detect.precision="bf16"',
            "'detect.precision' is 'run.precision' now (give it as run.precision)",
        ),
    ],
)
def test_a_recipe_key_under_detect_is_refused_with_its_new_place(setting: str, named: str) -> None:
    with pytest.raises(UserError) as info:
        load_job(DetectJob, None, [setting])
    assert str(info.value) == f"config with --set: {named}"


@pytest.mark.parametrize(
    ("setting", "refused"),
    [
        ("run.compile=true", "run.compile"),
        ("run.channels_last=true", "run.channels_last"),
        ("train.label_smoothing=0.1", "train.label_smoothing"),
        ("train.backbone_lr_scale=0.1", "train.backbone_lr_scale"),
        ("run.profile.enabled=true", "run.profile.enabled"),
        ('run.timing="phases"', "run.timing"),
    ],
)
def test_detection_refuses_what_it_cannot_honour(setting: str, refused: str) -> None:
    with pytest.raises(UserError) as info:
        load_job(DetectJob, None, [setting])
    assert str(info.value) == (
        f"config with --set: {refused}: detection cannot honour it (leave it out, or give it "
        "its default)"
    )


def test_detection_names_every_key_it_refuses() -> None:
    with pytest.raises(UserError, match=r"run\.compile, run\.channels_last: .* honour them"):
        load_job(DetectJob, None, ["run.compile=true", "run.channels_last=true"])


def test_detection_takes_what_the_step_honours() -> None:
    sets = ["train.grad_clip=1.0", "train.nesterov=true", 'train.optimizer="sgd"',
            'train.schedule.kind="constant"', 'run.precision="bf16"']  # fmt: skip
    exp = load_job(DetectJob, None, sets).experiment
    assert (exp.train.grad_clip, exp.train.nesterov, exp.train.schedule.kind) == (
        1.0, True, "constant",
    )  # fmt: skip
    assert exp.run.precision == "bf16"


def test_precision_names_are_declared_once() -> None:
    assert set(DTYPES) == set(PRECISIONS) == {"fp32", "bf16", "fp16"}


def test_command_sections_do_not_change_the_config_hash(tmp_path: Path) -> None:
    """[scale] and [serve] say how a command runs the experiment, not what it trains; [detect]
    trains a detector of its own."""
    plain = load_experiment(write(tmp_path, ISSUE_EXAMPLE))
    study, commands = load_file(
        write(tmp_path, ISSUE_EXAMPLE + STUDY), ["serve.port=9000", "detect.size=160"]
    )
    assert study.config_hash() == plain.config_hash()
    assert commands.model_dump()["scale"]["workers"] == [1, 2, 4]


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("train.epochs=true", "train.epochs: Input should be a valid integer (got True)"),
        ('train.epochs="5"', "train.epochs: Input should be a valid integer (got '5')"),
        ("train.lr=true", "train.lr: Input should be a valid number (got True)"),
        ("train.epochs=99999999999999999999999", "train.epochs: must be at most 1000000"),
        ("train.batch_size=4294967296", "train.batch_size: must be less than 2147483648"),
    ],
)
def test_numbers_are_strict_and_bounded(tmp_path: Path, setting: str, message: str) -> None:
    """A bool or a quoted number is not coerced into a count (`epochs=true` trained 1 epoch),
    and a count beyond a C int is refused before anything is built from it."""
    path = tmp_path / "exp.toml"
    path.write_text("[model]\nname = 'smallcnn'\n")
    with pytest.raises(UserError, match=re.escape(message)):
        load_experiment(path, [setting])


def test_a_byte_order_mark_is_read_past(tmp_path: Path) -> None:
    """Windows editors start UTF-8 files with a BOM; TOML's parser calls it an invalid
    statement at line 1."""
    path = tmp_path / "exp.toml"
    path.write_bytes("\ufeff[train]\nepochs = 3\n".encode())
    assert load_experiment(path).train.epochs == 3


DEEP = 50_000  # as a hostile file nests: tomllib's parser recurses once per level


@pytest.mark.parametrize(
    ("text", "overrides"),
    [
        (f"[model]\nkwargs = {{ a = {'[' * DEEP}{']' * DEEP} }}\n", []),
        ("", [f"model.kwargs.a={'[' * DEEP}{']' * DEEP}"]),
        ("", [f"model.kwargs.a={'{b=' * DEEP}1{'}' * DEEP}"]),
        ("", ["model.kwargs." + ".".join(["a"] * DEEP) + "=1"]),  # deep by key, not by value
        ("", ["model.kwargs.a=" + "[\n" * DEEP + "]" * DEEP]),  # its message stays one line
        (f"[model]\nkwargs = {{ a = {'[' * 40}{']' * 40} }}\n", []),  # parses; too deep to keep
    ],
    ids=["file", "set-list", "set-table", "set-key", "set-lines", "file-40"],
)
def test_deep_nesting_is_one_line(tmp_path: Path, text: str, overrides: list[str]) -> None:
    """A value nested 50,000 deep gave a RecursionError and 3,000 lines of traceback."""
    with pytest.raises(UserError, match="nested too deeply") as info:
        load_experiment(write(tmp_path, text), overrides)
    assert "\n" not in str(info.value)


def test_nesting_within_the_limit_is_kept(tmp_path: Path) -> None:
    exp = load_experiment(write(tmp_path, "[model]\nkwargs = { a = [[[1]]] }\n"))
    assert exp.model.kwargs == {"a": [[[1]]]}


@pytest.mark.parametrize("name", ["a\x1b[31mred", "nul\x00", "two\nlines", "bell\x07", "c1\x9b"])
def test_a_run_name_with_control_characters_is_refused(tmp_path: Path, name: str) -> None:
    """ESC and NUL in a name reached the terminal, the HTML report and MLflow raw."""
    with pytest.raises(UserError, match=r"run\.name: must hold no control characters") as info:
        load_experiment(write(tmp_path, ""), [f"run.name={json.dumps(name)}"])  # TOML escapes
    assert "\x1b" not in str(info.value) and "\x00" not in str(info.value)


def test_a_file_stem_with_control_characters_names_the_run_escaped(tmp_path: Path) -> None:
    path = tmp_path / "evil\x1b[2J.toml"
    path.write_text("")
    assert load_experiment(path).run.name == "evil\\x1b[2J"
