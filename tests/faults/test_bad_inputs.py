"""A catalogue of bad input to every command, run through the real entry point.

Each case is a command line, the line it must print and its exit code: one line on stderr
that starts `error: `, says what is wrong and how to mend it, exit code 2, no traceback, and
nothing written to the run store. Click's own usage errors (an unknown option, a value of
the wrong type, a missing argument) too: one line naming the command's --help.

Every path argument is tried (a) in a directory that does not exist, (b) in a place that
even root cannot write to or create (/proc, /sys: the tests run as root, who ignores file
modes), and (c) as a directory where a file is expected, or a file where a directory is.
An output file's directory must exist (a typo would otherwise create a tree at the root);
the directories dlperf lays out itself (run.out_dir, detect make-shapes) have no case (a).

Cases marked xfail fail today in code owned elsewhere; their reason names the file and the
fix, and the mark comes off with the fix (strict: a case that starts passing is reported).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from dlperf.store import RunStore
from tests.conftest import REPO, TINY, CliResult
from tests.deploy.test_bench import holding_tensors_of
from tests.deploy.test_server import flat_classifier

POLLUX = REPO / "tests" / "fixtures" / "pollux" / "cifar10_validation-128.csv"
NOT_STORED = "no run 42 in the store"
DEEP = "[" * 50_000 + "]" * 50_000  # the TOML parser recursed until a RecursionError


def case(line: str, expected: str, code: int = 2, *, xfail: str = "", env: str = "") -> Any:
    """`line` with {onnx} for an exported classifier, {pollux} for a real loss curve and
    {deep} for a list nested 50,000 deep;
    `expected` is in the one line; `env` is NAME=VALUE pairs (separated by
    spaces) to set first."""
    marks = [pytest.mark.xfail(strict=True, reason=f"needs fix in {xfail}")] if xfail else []
    return pytest.param(line, expected, code, env, marks=marks, id=line)


FAST_RUN = "--set data.limit=64"  # two steps: a case that trains before it fails stays short
STUDY = "--workers 1 --mode weak --per-worker-batch 8 --steps 2"  # a valid scale study
TF = "--framework tensorflow --synthetic"
HVD = "--framework horovod --synthetic"
CURVE = "converge fit --csv {pollux} --y metric --metric accuracy"
PLAN = "converge plan --curve curve.json --speed speed.json --target 0.5"

CASES = [
    # --- the run store (--db), through the commands that open it first --------------------
    case("--db nodir/x.db runs list", "error: run store directory nodir does not exist"),
    case("--db /proc/forbidden/x.db calibrate", "run store directory /proc/forbidden does not"),
    case("--db /sys/x.db demo", "error: cannot open run store sqlite:////sys/x.db"),
    case("--db dir runs list", "error: run store dir is a directory (give a file in it"),
    case("--db exp.toml runs list", "cannot open run store sqlite:///exp.toml: file is not a"),
    case("--db nosuch://x runs list", "error: cannot open run store 'nosuch://x'"),
    # --- run: the experiment file --------------------------------------------------------
    case("run missing.toml", "error: missing.toml: no such experiment file"),
    case("run nodir/exp.toml", "error: nodir/exp.toml: no such experiment file"),
    case("run /proc/forbidden/exp.toml", "error: /proc/forbidden/exp.toml: no such experiment"),
    case("run dir", "error: dir is a directory, not an experiment file (give a TOML file in it)"),
    case("run bad.toml", "error: bad.toml: malformed TOML: Expected ']' at the end of a table"),
    case("run", "error: give an experiment file or --resume RUN_ID (not both)"),
    case("run exp.toml --resume 1", "error: give an experiment file or --resume RUN_ID"),
    case("run --resume 42", f"error: {NOT_STORED}"),
    case("run --resume 42 --set train.lr=1", "error: --resume continues a run with its stored"),
    # --- run: values out of range, of the wrong type, unknown keys and names ---------------
    case(
        "run exp.toml --set train.lr=-1",
        "error: exp.toml with --set: train.lr: must be greater than 0 (got -1)",
    ),
    case("run exp.toml --set train.lr=nan", "train.lr: must be a finite number (got nan)"),
    case("run exp.toml --set train.momentum=1", "train.momentum: must be less than 1 (got 1)"),
    case("run exp.toml --set train.weight_decay=-0.1", "train.weight_decay: must be at least 0"),
    case("run exp.toml --set train.batch_size=0", "train.batch_size: must be at least 1 (got 0)"),
    case("run exp.toml --set train.epochs=0", "train.epochs: must be at least 1 (got 0)"),
    case("run exp.toml --set train.grad_clip=0", "train.grad_clip: must be greater than 0"),
    case("run exp.toml --set train.label_smoothing=1.5", "train.label_smoothing: must be less"),
    case("run exp.toml --set train.schedule.warmup_epochs=-1", "warmup_epochs: must be at least 0"),
    case(
        "run exp.toml --set data.val_fraction=1", "data.val_fraction: must be less than 1 (got 1)"
    ),
    case("run exp.toml --set data.shape=[3,0,32]", "data.shape.1: must be at least 1 (got 0)"),
    case("run exp.toml --set augment.cutout=-1", "augment.cutout: must be at least 0 (got -1)"),
    case("run exp.toml --set augment.batch_aug_m=0", "augment.batch_aug_m: must be at least 1"),
    case("run exp.toml --set target.accuracy=95", "target.accuracy: is a fraction in (0, 1]"),
    case("run exp.toml --set run.threads=0", "run.threads: must be at least 1 (got 0)"),
    case("run exp.toml --set run.threads=4096", "error: 4096 threads asked for, but this host"),
    case("infer bench {onnx} --threads 4096", "error: 4096 threads asked for, but this host"),
    case("run exp.toml --set run.log_every=0", "run.log_every: must be at least 1 (got 0)"),
    case("run exp.toml --set 'run.name=\"a\x1b[2Jb\"'", "run.name: must hold no control"),
    case("run exp.toml --set 'run.name=\"a\\u0000b\"'", "run.name: must hold no control"),
    case("run exp.toml --set run.seed=-1", "run.seed: must be at least 0 (got -1)"),
    case(
        "run exp.toml --set train.lr=fast",
        "train.lr: Input should be a valid number (got 'fast')",
    ),
    case("run exp.toml --set train.epochs=2.5", "train.epochs: Input should be a valid integer"),
    case(
        "run exp.toml --set train.nesterov=true --set train.momentum=0",
        "train.nesterov: Nesterov momentum needs train.momentum > 0",
    ),
    case(
        "run exp.toml --set train.schedule.min_lr=1",
        "train.schedule.min_lr: must not exceed train.lr 0.05 (got 1)",
    ),
    case("run exp.toml --set train.lrr=1", "unknown key 'train.lrr' (did you mean 'train.lr'?)"),
    case("run exp.toml --set trian.lr=1", "unknown key 'trian' (did you mean 'train'?)"),
    case("run exp.toml --set train.lr", "error: --set 'train.lr': expected KEY=VALUE"),
    case("run exp.toml --set .lr=1", "error: --set '.lr=1': empty key (e.g. --set train.lr=0.01)"),
    case("run exp.toml --set run.timing=always", "run.timing: Input should be 'off', 'coarse' or"),
    case("run exp.toml --set model.name=resnet2", "error: unknown model 'resnet2' (did you mean"),
    # --- run: starting weights (transfer learning) ----------------------------------------
    case(
        "run exp.toml --set model.transfer=feature-extract",
        "model.transfer: feature-extract needs model.weights",
    ),
    case(
        "run exp.toml --set model.name=resnet18 --set model.weights=IMAGENET1K_V3",
        "error: unknown weights 'IMAGENET1K_V3' for resnet18 (did you mean IMAGENET1K_V1?)",
    ),
    case(
        "run exp.toml --set model.weights=IMAGENET1K_V1",
        "model.weights 'IMAGENET1K_V1': smallcnn is not a torchvision model",
    ),
    case(
        "run exp.toml --set model.name=resnet18 --set model.weights=IMAGENET1K_V1",
        "error: model.weights resnet18 IMAGENET1K_V1 could not be downloaded from https://",
        env="TORCH_HOME=torch https_proxy=http://127.0.0.1:9",  # refused at once: no network
    ),
    case("run exp.toml --set model.weights=run:42", f"error: {NOT_STORED}"),
    case("run exp.toml --set model.weights=run:x", "model.weights 'run:x': expected run:ID or"),
    case("run exp.toml --set model.weights=run:last:pre", "no finished run named 'pre'"),
    case("run exp.toml --set model.weights=nodir/w.pt", "model.weights nodir/w.pt: no such file"),
    case("run exp.toml --set model.weights=dir", "error: model.weights dir: is a directory"),
    # a weights file that is there is named by its absolute path, as model.weights is stored
    case("run exp.toml --set model.weights=exp.toml", "/exp.toml is text, not a state-dict file"),
    case(
        "run exp.toml --set model.weights=other.pt",
        "/other.pt do not fit the model: 1 of another shape (weights vs "
        "model) (0.weight 1 vs 32x1x3x3); 5 missing from the weights (0.bias, 2.weight, 2.bias, "
        "...); 1 not in the model (x)",
    ),
    case(
        "run exp.toml --set data.name=cifar11", "unknown dataset 'cifar11' (did you mean 'cifar10'"
    ),
    case("run exp.toml --set run.device=tpu", "error: unknown device 'tpu'"),
    case("run exp.toml --set train.batch_size=100000", "is larger than the 1294 training images"),
    # --- run: the model file, the data root, the output directory --------------------------
    # run names a model file by its absolute path, as model.name is stored
    case("run exp.toml --set model.name=nodir/net.py:build", "/nodir/net.py not found (use"),
    case(
        "run exp.toml --set model.name=/proc/forbidden/net.py:build",
        "model file /proc/forbidden/net.py not found",
    ),
    case("run exp.toml --set model.name=net.py:build", "/net.py is a directory (use path/to"),
    case(
        "run exp.toml --set data.name=cifar10 --set data.root=nodir",
        "data.root 'nodir' has no readable cifar10",
    ),
    case(
        "run exp.toml --set data.name=mnist --set data.root=/proc/forbidden",
        "data.root '/proc/forbidden' has no readable MNIST",
    ),
    case(
        "run exp.toml --set data.name=imagefolder --set data.image_size=8 --set data.root=exp.toml",
        "error: data.root exp.toml is a file, not a folder",
    ),
    case(f"run exp.toml --set run.out_dir=/sys/runs {FAST_RUN}", "/sys/runs"),
    case(f"run exp.toml --set run.out_dir=exp.toml {FAST_RUN}", "exp.toml"),
    # --- config ----------------------------------------------------------------------------
    case("config show nodir/exp.toml", "error: nodir/exp.toml: no such experiment file"),
    case("config show /proc/forbidden/exp.toml", "/proc/forbidden/exp.toml: no such experiment"),
    case("config show dir", "error: dir is a directory, not an experiment file"),
    case("config show bad.toml", "error: bad.toml: malformed TOML"),
    case("config show --set train.lr=0", "error: config with --set: train.lr: must be greater"),
    case("config show deep.toml", "error: deep.toml: nested too deeply (dlperf reads at most 32"),
    case("run deep.toml", "error: deep.toml: nested too deeply (dlperf reads at most 32"),
    case("run exp.toml --set model.kwargs.a={deep}", "error: --set value '[[[[[[[[[[[[[[[[[[[['"),
    case("config show --set model.kwargs.a={deep}", "[['...: nested too deeply (dlperf reads"),
    case("config keys extra", "error: Got unexpected extra argument"),
    # --- demo, models, datasets, devices ---------------------------------------------------
    case("demo --epochs 3", "error: No such option: --epochs (see dlperf demo --help)"),
    case("models --bogus", "error: No such option: --bogus"),
    case("datasets cifar10", "error: Got unexpected extra argument"),
    case("devices", "error: device file dir is a directory", env="DLPERF_DEVICES=dir"),
    case("devices", "error: bad.toml: malformed TOML", env="DLPERF_DEVICES=bad.toml"),
    # --- runs ------------------------------------------------------------------------------
    case("runs show 42", "error: no run 42 in the store"),
    case("runs show abc", "error: Invalid value for 'run_id'"),
    # --- sweep: the sweep file, its axes and options ------------------------------------------
    case("sweep missing.toml", "error: missing.toml: no such sweep file"),
    case("sweep nodir/s.toml", "error: nodir/s.toml: no such sweep file"),
    case("sweep /proc/forbidden/s.toml", "error: /proc/forbidden/s.toml: no such sweep file"),
    case("sweep dir", "error: dir: is a directory, not a sweep file"),
    case("sweep bad.toml", "error: bad.toml: malformed TOML"),
    case("sweep noaxes.toml", "error: noaxes.toml: no axes to sweep (add e.g. [grid]"),
    case("sweep lrr.toml", "point 1 (train.lrr=0.1): unknown key 'train.lrr' (did you mean"),
    case("sweep fast.toml", "point 1 (train.lr=fast): train.lr: Input should be a valid number"),
    case("sweep zip.toml", "[zip] axes must be of equal length: train.lr has 2, train.epochs has"),
    case("sweep novalues.toml", "error: novalues.toml: [grid] 'train.lr' has no values"),
    case("sweep nobase.toml", "base 'missing.toml': no such experiment file"),
    case("sweep repeats.toml", "error: repeats.toml: repeats: must be at least 1 (got 0)"),
    case("sweep sweep.toml --jobs 0", "error: --jobs must be at least 1, got 0"),
    case("sweep sweep.toml --jobs 4096", "error: --jobs 4096 is more than the"),
    case("sweep sweep.toml --resume 42", "error: no study 42 in the store"),
    case("sweep sweep.toml --resume 1 --new", "error: give --resume STUDY_ID or --new, not both"),
    case("sweep sweep.toml --on-failure maybe", "error: --on-failure 'maybe' (use continue or"),
    # --- distill: the experiment, the unlabelled images, K, P, teacher and student ---------
    case("distill missing.toml", "error: missing.toml: no such experiment file"),
    case("distill nodir/exp.toml", "error: nodir/exp.toml: no such experiment file"),
    case("distill /proc/forbidden/exp.toml", "error: /proc/forbidden/exp.toml: no such experi"),
    case("distill dir", "error: dir is a directory, not an experiment file"),
    case("distill bad.toml", "error: bad.toml: malformed TOML"),
    case("distill exp.toml", "error: give the unlabelled images with --unlabeled (e.g. mnist5k"),
    case("distill exp.toml --unlabeled mnist5k", "the teacher takes 1x8x8 (set --unlabeled mnist"),
    case("distill exp.toml --unlabeled synthetic:shape=[3,8,8]", "choose a set with 1 channel"),
    case("distill exp.toml --unlabeled digits", "these are the experiment's labelled images"),
    case("distill exp.toml --unlabeled cifar10:holdout=0.5", "holdout sets aside a share of"),
    case("distill exp.toml --unlabeled digits:holdout=1", "data.holdout: must be less than 1"),
    case("distill exp.toml --unlabeled mnist5k:size", "mnist5k:size: expected KEY=VALUE after"),
    case("distill exp.toml --unlabeled mnist5k:imgsize=8", "unknown key 'data.imgsize' (did you"),
    case("distill exp.toml --unlabeled nosuch", "error: unknown dataset 'nosuch'"),
    case("distill exp.toml --unlabeled npz:root=nodir/p.npz", "nodir/p.npz: not a readable .npz"),
    case("distill exp.toml --unlabeled npz:root=dir", "error: dir: not a readable .npz file"),
    case("distill exp.toml --unlabeled npz:root=bad.toml", "bad.toml: not a readable .npz file"),
    case("distill exp.toml --unlabeled npz:root=float.npz", "'images' is float32 of shape"),
    case("distill exp.toml --unlabeled digits:holdout=0.5 --top-k 0", "distill.top_k.0: must be"),
    case("distill exp.toml --unlabeled digits:holdout=0.5 --top-p 0", "distill.top_p: must be at"),
    case("distill exp.toml --unlabeled digits:holdout=0.5 --top-p 11", "--top-p 11 is more than"),
    case("distill exp.toml --unlabeled digits:holdout=0.5 --teacher 42", f"error: {NOT_STORED}"),
    case("distill exp.toml --unlabeled digits:holdout=0.5 --student resnet2", "unknown model"),
    case("distill exp.toml --unlabeled digits:holdout=0.5 --resume 42", "no study 42 in the"),
    case("distill exp.toml --unlabeled digits:holdout=0.5 --resume 1 --new", "give --resume"),
    case(
        "distill exp.toml --unlabeled digits:holdout=0.5 --set run.out_dir=/proc/forbidden",
        "error: cannot use /proc/forbidden",
    ),
    case("distill exp.toml --unlabeled digits:holdout=0.5 --set run.out_dir=exp.toml", "exp.toml"),
    case("runs list --study 42", "error: no study 42 in the store"),
    case("runs compare 1", "error: compare needs two or more run IDs (e.g. dlperf runs compare"),
    case("runs compare 42 43", f"error: {NOT_STORED}"),
    case("runs list --limit 0", "error: --limit must be at least 1, got 0"),
    # --- analyze, predict, calibrate -------------------------------------------------------
    case("analyze resnet2", "error: unknown model 'resnet2' (did you mean resnet32, resnet20"),
    case("analyze nodir/net.py:build", "error: model file nodir/net.py not found"),
    case("analyze /proc/forbidden/net.py:build", "model file /proc/forbidden/net.py not found"),
    case("analyze net.py:build", "error: model file net.py is a directory"),
    case("analyze exits.py:build", "error: model file exits.py called sys.exit(0) while import"),
    case("run exp.toml --set model.name=exits.py:build", "/exits.py called sys.exit(0) while"),
    case("analyze quits.py:build", "error: factory quits.py:build called sys.exit(3)"),
    case("analyze smallcnn --input 3,0,32", "analyze.input.1: must be at least 1 (got 0)"),
    case("analyze smallcnn --batch 0", "analyze.batch: must be at least 1 (got 0)"),
    case("analyze smallcnn --classes 0", "analyze.classes: must be at least 1 (got 0)"),
    case("analyze smallcnn --precision fp8", "analyze.precision: Input should be 'fp32'"),
    case("predict smallcnn", "error: give predict.device, a catalog device"),
    case("predict smallcnn --device V1000", "error: unknown device 'V1000' (did you mean V100"),
    case("predict smallcnn --device V100 --ppp 0", "predict.ppp: must be at least 1e-06 (got 0"),
    case("predict smallcnn --device V100 --ppp 1.5", "predict.ppp: must be at most 1 (got 1.5)"),
    case("predict smallcnn --measure --reps 0", "predict.reps: must be at least 1 (got 0)"),
    case("predict smallcnn --device V100 --batch 0", "analyze.batch: must be at least 1 (got 0)"),
    case("calibrate --name", "error: Option '--name' requires an argument."),
    case(
        "calibrate",
        "error: cannot write the device file /sys/devices.toml (cannot use /sys/devices.toml: "
        "Permission denied)",
        env="DLPERF_DEVICES=/sys/devices.toml",
    ),
    case(
        "calibrate",
        "error: cannot write the device file dir (cannot use dir: Is a directory)",
        env="DLPERF_DEVICES=dir",
    ),
    # --- staleness -------------------------------------------------------------------------
    case("staleness", "error: give --learner NAME=times ... or --speeds NAME=rate,..."),
    case("staleness --learner L1=a", "error: --learner 'L1=a': times must be numbers"),
    case("staleness --learner L1=1 --push-latency -1", "error: --push-latency must be ≥ 0"),
    case("staleness --speeds L1=nan --horizon 9", "error: --speeds: every value must be a number"),
    case("staleness --train nodir/exp.toml --learners 2", "nodir/exp.toml: no such experiment"),
    case(
        "staleness --train /proc/forbidden/x.toml --learners 2", "/proc/forbidden/x.toml: no such"
    ),
    case("staleness --train dir --learners 2", "error: dir is a directory, not an experiment"),
    case("staleness --train exp.toml --learners 0", "error: --learners must be ≥ 1, got 0"),
    case("staleness --train exp.toml --learners 2 --set train.lr=-1", "train.lr: must be greater"),
    # --- export ----------------------------------------------------------------------------
    case("export resnet2 --out x.onnx", "error: unknown model 'resnet2'"),
    case("export 42 --out x.onnx", f"error: {NOT_STORED}"),
    case("export smallcnn --input 1,8 --out x.onnx", "export.input: must have 3 or more values"),
    case("export smallcnn --input 1,8,8 --num-classes 0 --out x.onnx", "export.num_classes: must"),
    case(
        "export smallcnn --input 1,8,8 --num-classes 1 --out x.onnx",
        "export.num_classes: must be at least 2 (got 1)",
    ),
    case("export smallcnn --input 1,8,8 --rtol -1 --out x.onnx", "export.rtol: must be at least 0"),
    case(
        "export smallcnn --input 1,8,8 --out nodir/x.onnx",
        "error: cannot use nodir/x.onnx: No such file or directory",
    ),
    case(
        "export smallcnn --input 1,8,8 --out /proc/forbidden/x.onnx",
        "error: cannot use /proc/forbidden/x.onnx: No such file or directory",
    ),
    case(
        "export smallcnn --input 1,8,8 --out /sys/x.onnx",
        "error: cannot use /sys/x.onnx: Permission denied",
    ),
    case("export smallcnn --input 1,8,8 --out dir", "error: cannot use dir: Is a directory"),
    # --- report (the store is empty here: its own line comes before any directory's) ------
    case("report --out exp.toml", "error: --out exp.toml is a file, not a directory"),
    case("report --out site", "error: the run store holds no runs (train one: dlperf run"),
    case("report --out nodir/site", "error: the run store holds no runs"),
    # --- infer -----------------------------------------------------------------------------
    case("infer nodir/m.onnx img.png", "error: no model file nodir/m.onnx"),
    case("infer /proc/forbidden/m.onnx img.png", "error: no model file /proc/forbidden/m.onnx"),
    case("infer dir img.png", "error: no model file dir"),
    case("infer bad.toml img.png", "error: bad.toml is not an ONNX model"),
    case("infer {onnx} nodir/img.png", "error: no image file nodir/img.png"),
    case("infer {onnx} /proc/forbidden/img.png", "error: no image file /proc/forbidden/img.png"),
    case("infer {onnx} dir", "error: dir is a directory (give its image files"),
    case("infer {onnx} notimg.png", "error: notimg.png is not a readable image"),
    case("infer {onnx} img.png --labels nodir/l.txt", "error: no labels file nodir/l.txt"),
    case("infer {onnx} img.png --labels /proc/forbidden/l.txt", "no labels file /proc/forbidden"),
    case("infer {onnx} img.png --labels dir", "error: no labels file dir"),
    case("infer {onnx} img.png --topk 0", "infer.topk: must be at least 1 (got 0)"),
    case("infer {onnx}", "error: Missing argument 'images'."),
    case("infer bench nodir/m.onnx", "error: no model file nodir/m.onnx"),
    case("infer bench /proc/forbidden/m.onnx", "error: no model file /proc/forbidden/m.onnx"),
    case("infer bench dir", "error: no model file dir"),
    case("infer bench {onnx} --batch 0", "infer.batch.0: must be at least 1 (got 0)"),
    case("infer bench {onnx} --batch x", "infer.batch.0: Input should be a valid integer"),
    case("infer bench {onnx} --repeats 0", "infer.repeats: must be at least 1 (got 0)"),
    case("infer bench {onnx} --torch resnet2", "error: unknown model 'resnet2'"),
    case("infer bench {onnx} --threads -1", "infer.threads: must be at least 1 (got -1)"),
    # --- scale -----------------------------------------------------------------------------
    case(f"scale nodir/exp.toml {STUDY}", "error: nodir/exp.toml: no such experiment file"),
    case(f"scale /proc/forbidden/exp.toml {STUDY}", "/proc/forbidden/exp.toml: no such experiment"),
    case(f"scale dir {STUDY}", "error: dir is a directory, not an experiment file"),
    case(f"scale bad.toml {STUDY}", "error: bad.toml: malformed TOML"),
    case(f"scale exp.toml {STUDY} --set train.lr=-1", "train.lr: must be greater than 0 (got -1)"),
    case("scale run", "error: give an experiment file"),
    case("scale exp.toml --workers 0", "scale.workers.0: must be at least 1 (got 0)"),
    case(f"scale exp.toml {STUDY} --mode medium", "scale.mode: Input should be 'strong' or 'weak'"),
    case(f"scale exp.toml {STUDY} --backend mpi", "scale.backend: Input should be 'auto', 'gloo'"),
    case(f"scale exp.toml {STUDY} --comm zip", "scale.comm.0: Input should be 'allreduce', 'fp16'"),
    case(f"scale exp.toml {STUDY} --on-failure maybe", "scale.on_failure: Input should be 'cont"),
    case(
        f"scale exp.toml {STUDY} --set scale.nnodes=0", "scale.nnodes: must be at least 1 (got 0)"
    ),
    case("scale exp.toml --workers 1 --mode weak --per-worker-batch 8", "give one of scale.steps"),
    case(f"scale exp.toml {STUDY} --device V1000", "error: unknown device 'V1000'"),
    case(f"scale exp.toml {STUDY} --emit pbs", "error: unknown --emit 'pbs'"),
    case(
        f"scale exp.toml {STUDY} --emit slurm --out nodir/x.sbatch",
        "error: cannot use nodir/x.sbatch: No such file or directory",
    ),
    case(
        f"scale exp.toml {STUDY} --emit slurm --out /sys/x.sbatch",
        "error: cannot use /sys/x.sbatch: Permission denied",
    ),
    case(f"scale exp.toml {STUDY} --emit slurm --out dir", "error: cannot use dir: Is a directory"),
    # --- scale --framework tensorflow|horovod (checked before either starts) -------------------
    case(f"scale exp.toml {STUDY} --framework jax", "scale.framework: Input should be 'torch', '"),
    case(f"scale exp.toml {STUDY} {TF} --strategy ddp", "--strategy ddp is not a tensorflow str"),
    case(f"scale exp.toml {STUDY} --strategy multiworker", "--strategy multiworker is not a torch"),
    case(f"scale exp.toml {STUDY} {TF} --allreduce mpi", "scale.allreduce.0: Input should be 'nc"),
    case(f"scale exp.toml {STUDY} {TF} --allreduce nccl", "--allreduce nccl needs GPUs, and none"),
    case(f"scale exp.toml {STUDY} {TF} --allreduce ring", "--allreduce ring is not an all-reduce"),
    case(f"scale exp.toml {STUDY} {TF} --set model.name=resnet20", "no TensorFlow version here"),
    case(f"scale exp.toml {STUDY} {TF} --comm fp16", "--bucket-mb and --comm are DDP's"),
    case(
        f"scale exp.toml {STUDY} {TF} --strategy mirrored --nnodes 2 --emit slurm",
        "mirrored runs in one process on one node (use multiworker)",
    ),
    case(f"scale exp.toml {STUDY} {HVD} --strategy ddp", "--strategy ddp is not a horovod str"),
    case(f"scale exp.toml {STUDY} {HVD} --comm powersgd", "--comm powersgd is DDP's (horovod"),
    case(f"scale exp.toml {STUDY} {HVD} --allreduce ring", "--allreduce goes with --framework"),
    case(f"scale exp.toml {STUDY} {HVD} --nnodes 2 --emit slurm", "horovod runs on one node here"),
    case("scale allreduce --workers 1 --sizes 1XB", "error: bad message size '1XB'"),
    case("scale allreduce --workers 1 --iters 0", "error: --iters must be at least 1"),
    case(
        "scale exp.toml --workers 1 --mode weak --per-worker-batch 8 --steps 0",
        "error: --steps: scale.steps: must be at least 1 (got 0)",
    ),
    case(
        "scale exp.toml --workers 1 --mode weak --per-worker-batch 0 --steps 2 --emit slurm",
        "scale.per_worker_batch: must be at least 1 (got 0)",
    ),
    case(
        f"scale exp.toml {STUDY} --price-per-hour -1 --emit slurm",
        "scale.price_per_hour: must be at least 0 (got -1.0)",
    ),
    case(
        f"scale exp.toml {STUDY} --bucket-mb 0 --emit slurm",
        "scale.bucket_mb.0: must be greater than 0 (got 0)",
    ),
    # --- converge fit, predict, regress ----------------------------------------------------
    case(
        "converge fit --csv nodir/c.csv --y metric", "error: cannot read nodir/c.csv: No such file"
    ),
    case(
        "converge fit --csv /proc/forbidden/c.csv --y metric", "cannot read /proc/forbidden/c.csv"
    ),
    case("converge fit --csv dir --y metric", "error: cannot read dir: Is a directory"),
    case("converge fit --csv bad.toml --y metric", "error: bad.toml has no rows"),
    case(
        "converge fit --csv {pollux} --y metrik", "has no column 'metrik' (did you mean 'metric'?)"
    ),
    case(f"{CURVE} --upto 2", "converge.upto: must be at most 1 (got 2.0)"),
    case("converge fit --csv {pollux} --y metric --metric acc", "converge.metric: Input should"),
    case(f"{CURVE} --plot nodir/fit.png", "error: cannot use nodir/fit.png: No such file or"),
    case(f"{CURVE} --plot /sys/fit.png", "error: cannot use /sys/fit.png: Permission denied"),
    case(f"{CURVE} --plot dir", "error: cannot use dir: Is a directory"),
    case(f"{CURVE} --plot fit.xyz", "error: fit.xyz: not a figure format matplotlib writes"),
    case("converge fit 42", f"error: {NOT_STORED}"),
    case("converge fit", "error: give RUN_ID ... or --csv FILE (not both)"),
    case(
        f"{CURVE.replace('fit', 'predict')} --target 1.5", "an accuracy target must lie in [0, 1]"
    ),
    case(f"{CURVE.replace('fit', 'predict')} --target 0.9 --form cubic", "converge.form: Input"),
    case(CURVE.replace("fit", "predict"), "error: give converge.target, the value to reach"),
    case("converge predict --csv nodir/c.csv --y metric --target 1", "cannot read nodir/c.csv"),
    case(
        "converge regress nodir/c.csv:depth=2 --features depth --y metric",
        "cannot read nodir/c.csv",
    ),
    case(
        "converge regress /proc/forbidden/c.csv:depth=2 --features depth --y metric",
        "error: cannot read /proc/forbidden/c.csv",
    ),
    case(
        "converge regress dir:depth=2 --features depth --y metric",
        "cannot read dir: Is a directory",
    ),
    case("converge regress {pollux} --features depth --y metric", "has no depth (e.g."),
    case("converge regress 42 --features depth", f"error: {NOT_STORED}"),
    case(
        "converge regress {pollux}:depth=2 --features depth --y metric --plot /sys/r.png",
        "error: cannot use /sys/r.png",
    ),
    # --- converge speed fit, plan ----------------------------------------------------------
    case("converge speed fit --csv nodir/s.csv --model pollux", "error: cannot read nodir/s.csv"),
    case(
        "converge speed fit --csv /proc/forbidden/s.csv --model pollux",
        "cannot read /proc/forbidden/s.csv",
    ),
    case("converge speed fit --csv dir --model pollux", "error: cannot read dir: Is a directory"),
    case(
        "converge speed fit --csv optimus.csv --model polux", "error: unknown speed model 'polux'"
    ),
    case("converge speed fit 42 --model pollux", "error: no study 42 in the store"),
    case(
        "converge speed fit --csv optimus.csv --model optimus-sync --predict workers=0",
        "error: --predict 'workers=0': workers, ps and nodes are whole numbers ≥ 1",
    ),
    case("converge speed fit --csv optimus.csv", "error: Missing option '--model'."),
    case("converge plan", "error: plan needs --curve, --speed and --target"),
    case(PLAN.replace("curve.json", "nodir/c.json"), "error: cannot read curve fit nodir/c.json"),
    case(
        PLAN.replace("curve.json", "/proc/forbidden/c.json"), "cannot read curve fit /proc/forbid"
    ),
    case(PLAN.replace("curve.json", "dir"), "error: cannot read curve fit dir: Is a directory"),
    case(PLAN.replace("curve.json", "bad.toml"), "error: bad.toml is not JSON"),
    case(PLAN.replace("speed.json", "nodir/s.json"), "error: cannot read speed fit nodir/s.json"),
    case(
        PLAN.replace("speed.json", "/proc/forbidden/s.json"), "cannot read speed fit /proc/forbid"
    ),
    case(PLAN.replace("speed.json", "dir"), "error: cannot read speed fit dir: Is a directory"),
    case(PLAN.replace("speed.json", "curve.json"), "error: curve.json is not a speed fit"),
    case(f"{PLAN} --workers 0", "error: --workers needs counts ≥ 1, got '0'"),
    case(f"{PLAN} --ps x", "error: --ps must look like 1-16 or 2,4,8, got 'x'"),
    case(f"{PLAN} --batch 0", "error: the global batch must be a positive number, got 0"),
    case(f"{PLAN} --price-per-hour -1", "error: --price-per-hour must be 0 or more, got -1"),
    case(f"{PLAN} --plot /proc/forbidden/plan.png", "error: cannot use /proc/forbidden/plan.png"),
    case(f"{PLAN} --plot dir", "error: cannot use dir: Is a directory"),
    case("converge plan --cluster nodir/jobs.toml --gpus 4", "cannot read nodir/jobs.toml"),
    case("converge plan --cluster /proc/forbidden/j.toml --gpus 4", "cannot read /proc/forbidden"),
    case("converge plan --cluster dir --gpus 4", "error: cannot read dir: Is a directory"),
    case("converge plan --cluster bad.toml --gpus 4", "error: bad.toml is not valid TOML"),
    case("converge plan --cluster exp.toml --gpus 4", "error: exp.toml has no [[job]] tables"),
    case("converge plan --cluster jobs.toml --gpus 1", "error: 1 devices cannot give 1 jobs one"),
    # --- detect ----------------------------------------------------------------------------
    case("detect export --out d.onnx --model yolo", "error: unknown detector 'yolo'"),
    case("detect export --out d.onnx --size 33", "error: input size 33 not supported"),
    case("detect export --out d.onnx --weights nodir/w.pt", "error: no weights file nodir/w.pt"),
    case("detect export --out d.onnx --weights /proc/forbidden/w.pt", "no weights file /proc/forb"),
    case("detect export --out d.onnx --weights dir", "error: no weights file dir"),
    case("detect export --out d.onnx --weights bad.toml", "bad.toml is not a PyTorch weights file"),
    case("detect export --out d.onnx --labels nodir/l.txt", "error: no labels file nodir/l.txt"),
    case("detect export --out d.onnx --labels dir", "error: no labels file dir"),
    case("detect export --out nodir/d.onnx", "error: cannot use nodir/d.onnx: No such file or"),
    case("detect export --out /sys/d.onnx", "error: cannot use /sys/d.onnx: Permission denied"),
    case("detect export --out dir", "error: cannot use dir: Is a directory"),
    case("detect export --out d.onnx --num-classes 1", "error: --num-classes counts the back"),
    case("detect run nodir/d.onnx img.png", "error: no model file nodir/d.onnx"),
    case(
        "detect run /proc/forbidden/d.onnx img.png", "error: no model file /proc/forbidden/d.onnx"
    ),
    case("detect run dir img.png", "error: no model file dir"),
    case(
        "detect run {onnx} img.png", "is a classification model, not a detector (use dlperf infer)"
    ),
    case("detect make-shapes /proc/forbidden/shapes", "error: cannot use /proc/forbidden: No such"),
    case(
        "detect make-shapes /sys/shapes", "error: cannot use /sys/shapes: Operation not permitted"
    ),
    case("detect make-shapes exp.toml", "error: exp.toml is not a folder (give a new or empty"),
    case("detect make-shapes shapes --images 1", "error: make-shapes needs at least 2 images"),
    case("detect eval nodir/voc --weights other.pt", "error: nodir/voc is not a VOC data set"),
    case("detect eval dir", "error: detect eval tests trained weights"),
    case("detect finetune nodir/voc", "error: nodir/voc is not a VOC data set"),
    case("detect finetune /proc/forbidden/voc", "error: /proc/forbidden/voc is not a VOC data set"),
    case("detect finetune exp.toml", "error: exp.toml is not a VOC data set"),
    case("detect finetune dir --epochs 0", "--epochs: train.epochs: must be at least 1 (got 0)"),
    case("detect finetune dir --ap best", "detect.ap_method: Input should be 'area' or '11point'"),
    case("detect finetune dir --out dir", "error: cannot use dir: Is a directory"),
    case("detect finetune dir --out /sys/d.pt", "error: cannot use /sys/d.pt: Permission denied"),
    case("detect finetune dir --config nodir/d.toml", "error: nodir/d.toml: no such experiment"),
    case("detect finetune dir --config /proc/forbidden/d.toml", "/proc/forbidden/d.toml: no such"),
    case("detect finetune dir --config dir", "error: dir is a directory, not an experiment file"),
    case("detect finetune dir --config bad.toml", "error: bad.toml: malformed TOML"),
    case("detect finetune dir --set detect.lrr=1", "unknown key 'detect.lrr' (valid keys: model"),
    # --- break-it round, 2026-11-25 (docs/faults.md): encodings, store variants, images -----
    case("--db sqlite:// run exp.toml", "error: run store sqlite:// is in memory"),
    case("--db sqlite:///:memory: runs list", "is in memory: it would keep nothing"),
    case(  # refused at once: nothing listens on port 1; psycopg's message spans two lines
        "--db postgresql://u:secret@127.0.0.1:1/db runs list",
        "error: cannot open run store postgresql://u:***@127.0.0.1:1/db: connection failed",
    ),
    case("converge fit --csv latin1.csv --y metric", "error: latin1.csv: not UTF-8 text (byte"),
    case("converge speed fit --csv latin1.csv --model pollux", "latin1.csv: not UTF-8 text"),
    case(PLAN.replace("curve.json", "latin1.csv"), "error: latin1.csv: not UTF-8 text (byte"),
    case("converge plan --cluster latin1.csv --gpus 4", "error: latin1.csv: not UTF-8 text"),
    case("devices", "error: latin1.csv: not UTF-8 text", env="DLPERF_DEVICES=latin1.csv"),
    case("runs list --limit 99999999999999999999", "error: --limit must be at most"),
    case(
        "runs tag 1 a=x\x1b[31m",
        "error: runs tag 'a=x\\x1b[31m': the value holds U+001B, a control",
    ),
    case(
        "runs tag 1 a=\udcff",
        "error: runs tag 'a=\\udcff': the value holds a byte that is not UTF-8",
    ),
    case("analyze smallcnn --input 3,99999999,99999999", "is more than a tensor can hold"),
    case(
        "data describe imagefolder --set data.root=imgs --set data.image_size=8",
        "error: imgs/train/b/corrupt.jpg: cannot decode the image (",
    ),
    case(
        "run exp.toml --set data.name=imagefolder --set data.root=imgs --set data.image_size=8"
        " --set data.in_memory=false --set train.batch_size=2",
        "error: imgs/train/b/corrupt.jpg: cannot decode the image (",
    ),
    # --- serve -----------------------------------------------------------------------------
    case("serve nodir/m.onnx", "error: no model file nodir/m.onnx"),
    case("serve /proc/forbidden/m.onnx", "error: no model file /proc/forbidden/m.onnx"),
    case("serve dir", "error: no model file dir"),
    case("serve bad.toml", "error: bad.toml is not an ONNX model"),
    case("serve {onnx} --port 70000", "error: --port: serve.port: must be at most 65535"),
    case("serve {onnx} --max-batch 0", "serve.max_batch: must be at least 1 (got 0)"),
    case("serve {onnx} --set serve.max_wait_ms=-1", "serve.max_wait_ms: must be at least 0"),
    case("serve {onnx} --config nodir/s.toml", "error: nodir/s.toml: no such experiment file"),
    case("serve {onnx} --config /proc/forbidden/s.toml", "/proc/forbidden/s.toml: no such"),
    case("serve {onnx} --config dir", "error: dir is a directory, not an experiment file"),
    case("serve {onnx} --config bad.toml", "error: bad.toml: malformed TOML"),
    case("serve {onnx} --config exp.toml --set serve.prot=1", "unknown key 'serve.prot' (did you"),
    case("serve bench nonsense", "error: 'nonsense' is not an http:// URL"),
    case("serve bench http://example.com:80", "error: example.com is not a loopback address"),
    case("serve bench http://127.0.0.1:1 --concurrency 0", "error: --concurrency '0': expected"),
    case("serve bench http://127.0.0.1:1 --image nodir/i.png", "error: no image file nodir/i.png"),
    case("serve bench http://127.0.0.1:1 --image /proc/forbidden/i.png", "no image file /proc/for"),
    case("serve bench http://127.0.0.1:1 --image dir", "error: dir is a directory (give one"),
]


@pytest.fixture(scope="module")
def onnx_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A classifier of 1x8x8 images into 10 classes, any batch, with dlperf's metadata naming
    smallcnn (what `infer bench` rebuilds), for the cases that need a model: written with
    onnx's helper (Flatten, one linear layer), not exported (most of the first case's time),
    as each case is refused before a graph's weights matter. It holds smallcnn's parameters
    as initializers of their names, as smallcnn's export would: `infer bench` races no network
    that shares no name with the file (round 38)."""
    path = tmp_path_factory.mktemp("bad_inputs") / "small.onnx"
    flat_classifier(path, 1, 10, "smallcnn", model_kwargs={})
    return holding_tensors_of(path, "smallcnn", (1, 8, 8), 10)


def write_inputs(root: Path) -> None:
    """The good and bad files the cases name, relative to the working directory."""
    (root / "exp.toml").write_text(TINY.format(epochs=1))
    (root / "bad.toml").write_text("[model\n")
    (root / "deep.toml").write_text(f"[model]\nkwargs = {{ a = {DEEP} }}\n")
    (root / "dir").mkdir()
    torch.save({"0.weight": torch.zeros(1), "x": torch.zeros(1)}, root / "other.pt")
    (root / "net.py").mkdir()  # a directory that looks like a model file
    (root / "exits.py").write_text("import sys\nsys.exit(0)\n")  # a script, not a module
    (root / "quits.py").write_text("import sys\ndef build(**kw):\n    sys.exit(3)\n")
    Image.fromarray(np.zeros((8, 8), dtype=np.uint8)).save(root / "img.png")
    (root / "notimg.png").write_text("not an image")
    rows = [f"{w},{p},256,{0.5 / w + 0.01 + 0.02 * w / p:.4f}" for w in (1, 2, 4) for p in (1, 2)]
    (root / "optimus.csv").write_text("workers,ps,global_batch,step_time_s\n" + "\n".join(rows))
    (root / "curve.json").write_text(
        json.dumps({"metric": "loss", "beta0": 0.01, "beta1": 1.0, "beta2": 0.1, "last_step": 10})
    )
    speed = {
        "model": "optimus-sync",
        "params": {f"theta{i}": 0.01 for i in range(5)},
        "error_pct": 0.0,
        "max_error_pct": 0.0,
        "n_points": 6,
        "converged": True,
        "message": "",
        "typical_batch": 256.0,
        "typical_local_batch": 128.0,
    }
    (root / "speed.json").write_text(json.dumps(speed))
    for name, text in {
        "sweep": '[grid]\n"train.lr" = [0.1, 0.01]',
        "noaxes": "",
        "lrr": '[grid]\n"train.lrr" = [0.1]',
        "fast": '[grid]\n"train.lr" = ["fast"]',
        "zip": '[zip]\n"train.lr" = [0.1, 0.2]\n"train.epochs" = [1]',
        "novalues": '[grid]\n"train.lr" = []',
        "repeats": 'repeats = 0\n[grid]\n"train.lr" = [0.1]',
    }.items():
        (root / f"{name}.toml").write_text(f'base = "exp.toml"\n{text}\n')
    np.savez(root / "float.npz", images=np.zeros((2, 1, 8, 8), np.float32))
    (root / "nobase.toml").write_text('base = "missing.toml"\n[grid]\n"train.lr" = [0.1]\n')
    (root / "latin1.csv").write_bytes(b"step,metric\n1,0.\xe95\n")  # Latin-1, not UTF-8
    for split in ("train", "val"):  # an image folder with a truncated JPEG among good ones
        for label in ("a", "b"):
            (root / "imgs" / split / label).mkdir(parents=True)
            Image.new("RGB", (8, 8)).save(root / "imgs" / split / label / "good.jpg")
    good = (root / "imgs/train/a/good.jpg").read_bytes()
    (root / "imgs/train/b/corrupt.jpg").write_bytes(good[:100])
    (root / "jobs.toml").write_text(
        '[[job]]\nname = "a"\ncurve = "curve.json"\nspeed = "speed.json"\ntarget = 0.5\n'
    )


@pytest.mark.parametrize(("line", "expected", "code", "env"), CASES)
def test_bad_input_is_one_line(
    cli: Callable[..., CliResult],
    store: RunStore,
    onnx_model: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    line: str,
    expected: str,
    code: int,
    env: str,
) -> None:
    write_inputs(tmp_path)
    (tmp_path / "devices.toml").touch()  # empty: a missing file DLPERF_DEVICES names is refused
    monkeypatch.setenv("DLPERF_DEVICES", str(tmp_path / "devices.toml"))  # never ~/.config
    for assignment in env.split():
        monkeypatch.setenv(*assignment.split("=", 1))
    result = cli(*shlex.split(line.format(onnx=onnx_model, pollux=POLLUX, deep=DEEP)))
    lines = result.err.strip().splitlines()
    assert result.code == code and lines, (result.out, result.err)
    assert len(lines) == 1 and lines[0].startswith("error: "), result.err
    assert expected in lines[0], result.err
    assert store.list_runs() == [], "bad input must leave the run store untouched"
