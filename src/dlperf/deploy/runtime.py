"""ONNX Runtime sessions and the image preprocessing every inference path shares.

`dlperf infer`, `dlperf serve` and the detectors turn images into input tensors here, with
the preprocessing saved at export, so inference sees exactly what training saw.
"""

from __future__ import annotations

import contextlib
import io
import math
import re
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from dlperf import image_modes
from dlperf.blas import address_limit, room
from dlperf.deploy import meta as meta_io
from dlperf.deploy.meta import ModelMeta, Preprocess
from dlperf.errors import NoThreads, UserError, not_utf8, out_of_threads, threads_limit
from dlperf.image_modes import covered
from dlperf.paths import image_file
from dlperf.system import check_threads

FATAL = 4  # ONNX Runtime's log severities: 0 verbose, 1 info, 2 warning, 3 error, 4 fatal


def session(
    path: Path, threads: int | None = None, cpu: bool = False
) -> Any:  # -> ort.InferenceSession
    """A CPU (or CUDA, when onnxruntime-gpu has it and `cpu` is false) session with explicit
    intra-op threads: the default takes every core and fights any other worker on a small
    host."""
    import onnxruntime as ort

    check_threads(threads)  # serve, infer and detect run checked theirs apart, or not at all
    options = ort.SessionOptions()
    # Fatal only: ORT's C++ logger writes its warnings and errors, coloured, straight to
    # the stderr descriptor, ahead of the one line dlperf makes of the error it also raises.
    options.log_severity_level = FATAL
    if threads:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    model = in_memory(path)  # refused here where the memory left cannot hold its weights
    if isinstance(model, str):
        # ONNX Runtime takes a path as UTF-8 text only: a name holding a surrogate escape
        # (bytes read as ASCII in a C locale, or not UTF-8) was pybind11's "incompatible
        # constructor arguments. The following argument types are supported:", cut there.
        from dlperf.config.base import check_utf8_name  # pydantic's import: only here

        check_utf8_name("model", model)
    printed = io.StringIO()
    try:
        # ORT prints its failed first try ("EP Error ... Falling back ...") to stdout, the
        # command's data: kept from it, and said as a warning where the CPU then served.
        with contextlib.redirect_stdout(printed):
            made = ort.InferenceSession(
                model,
                options,
                providers=providers([] if cpu else ort.get_available_providers()),
            )
        if "EP Error" in printed.getvalue():  # a CUDA session that fell back: not silently
            warnings.warn(
                f"ONNX Runtime could not start the providers asked for {path}, and runs it on "
                f"{', '.join(made.get_providers())}: its timings are those",
                stacklevel=2,
            )
        return made
    except Exception as e:  # ORT raises its own Fail/InvalidGraph types
        if out_of_threads(e):  # its thread pools, started as the session is made: not the model
            raise NoThreads(
                f"ONNX Runtime could not start its threads for {path}",
                threads_limit(", or use --threads 1"),
            ) from None
        if isinstance(e, MemoryError) or any(words in str(e) for words in ORT_NO_MEMORY):
            raise NoMemory(
                f"ONNX Runtime ran out of memory loading {path}", more_memory()
            ) from None
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"ONNX Runtime cannot load {path}: {first}") from None


# How ONNX Runtime says it ran out of memory making a session: a C++ std::bad_alloc (in a
# RuntimeException, "Exception during initialization: std::bad_alloc"), or its allocator's words.
ORT_NO_MEMORY = ("std::bad_alloc", "Failed to allocate memory")


class NoMemory(UserError):
    """A model that the memory left cannot hold (a memory limit's, `ulimit -v`, or the host's):
    not the input's fault, so exit code 1, but one line all the same."""

    exit_code = 1


def more_memory() -> str:
    """What a model that did not fit needs: the address-space limit raised, named where one is
    set, else more memory."""
    limit = address_limit()
    if limit is None:
        return "give it more memory"
    return f"a memory limit, ulimit -v {limit // 1024}, is too low: raise it"


# Protobuf serializes no message of 2 GiB or more: a model with its weights over that cannot
# be handed to ONNX Runtime as one message, and its weights file stays mapped.
PROTOBUF_LIMIT = 2**31 - 2**20
# The address space that external weights read into memory need, with the session made of
# them, as a multiple of their size: in the protobuf, serialized into the bytes handed over,
# parsed again by ONNX Runtime and made its tensors. Short of about twice their size,
# protobuf's allocator failed inside onnx's load_external_data_for_tensor and the process
# died of SIGSEGV, where no line can be said (`infer` and `serve` under ulimit -v 600000 to
# 900000). Measured (onnx 1.23, onnxruntime 1.32, Linux x86-64): smallcnn at 3x224x224, 378
# MiB of weights, loaded under ulimit -v 1125000 and not 1100000 from 212,200 KiB mapped
# before, 2.36 times its weights. Kept: 2.5, which refuses a model a few percent short of
# what it needed to load rather than let one crash.
WEIGHTS_ROOM = 2.5


def in_memory(path: Path) -> str | bytes:
    """The model at `path` with its external weights (MODEL.onnx.data) read into memory, or
    its path where it has none or is too big (PROTOBUF_LIMIT). ONNX Runtime memory-maps an
    external weights file: a write in place (cp, an editor) then changes every answer of a
    running `serve`, and emptying the file kills it with SIGBUS. Read now, the weights are
    those checked at start, whatever the file becomes. A file onnx cannot read is left to
    ONNX Runtime, whose error `session` reports. Under an address-space limit that leaves
    too little room for the weights (WEIGHTS_ROOM), refused in one line (`NoMemory`)."""
    import onnx
    from onnx.external_data_helper import load_external_data_for_model, uses_external_data

    try:
        proto = onnx.load(str(path), load_external_data=False)
        files = {
            path.parent / entry.value
            for tensor in proto.graph.initializer
            if uses_external_data(tensor)
            for entry in tensor.external_data
            if entry.key == "location"
        }
        weights = sum(f.stat().st_size for f in files)
        if not files or path.stat().st_size + weights >= PROTOBUF_LIMIT:
            return str(path)
    except Exception:  # onnx's own errors (DecodeError, a missing file): ONNX Runtime's say
        return str(path)
    check_room(path, weights)
    try:
        load_external_data_for_model(proto, str(path.parent))
        serialized: bytes = proto.SerializeToString()
        return serialized
    except Exception:  # a file changed under it, or a MemoryError: ONNX Runtime's error says
        return str(path)


def check_room(path: Path, weights: int) -> None:
    """Refuse the model at `path`, whose external weights are `weights` bytes, where a set
    address-space limit leaves less room than reading them in needs (WEIGHTS_ROOM). Asked
    only under a limit: without one, an allocation that fails says so itself."""
    limit = address_limit()
    need = math.ceil(weights * WEIGHTS_ROOM)
    if limit is None or room(need):
        return
    raise NoMemory(
        f"cannot load {path}: less than {need / 2**20:,.0f} MiB of address space is left, "
        f"which its {weights / 2**20:,.0f} MiB of weights need",
        more_memory(),
    )


def open_model(
    path: Path, task: str, what: str, instead: str, threads: int | None = None
) -> tuple[ModelMeta, Any]:
    """The metadata and a session of an exported model that must be a `task` model (`what`,
    e.g. "a detector"); `instead` says what reads the other tasks' models."""
    meta = meta_io.load(path)
    if meta.task != task:
        raise UserError(f"{path} is a {meta.task} model, not {what}", instead)
    return meta, session(path, threads)


# ONNX Runtime's names of the float types a classifier's scores may have.
FLOAT_SCORES = ("tensor(float)", "tensor(double)", "tensor(float16)", "tensor(bfloat16)")


def check_scores(session: Any, path: Path, input_shape: tuple[int, ...]) -> None:
    """A classifier's first output must be float scores (logits), shape [batch, classes]: the
    softmax of booleans or of class indices is no probability, and `topk` ranks each row of a
    2-D array (a [batch, 10, 1] or [batch] one failed there, a traceback). `dlperf export`
    refuses such a model; this holds an ONNX file from elsewhere, or from before it did, to the
    same rule, before any image is read. `input_shape`: the metadata's (C, H, W)."""
    scores = session.get_outputs()[0]
    if scores.type not in FLOAT_SCORES:
        raise UserError(
            f"{path} gives {scores.type} scores; expected float scores (logits), which a "
            "classifier's probabilities are made from",
            "export the model's scores before any argmax, comparison or rounding",
        )
    declared = list(scores.shape)
    spec = session.get_inputs()[0]
    if declared:  # ONNX Runtime's [] is a single number or a shape it cannot tell: run it
        check_logits(declared, f"{path} gives", (spec.shape or [None])[0])
        return
    try:
        probe = session.run(None, {spec.name: np.zeros((1, *input_shape), np.float32)})[0]
    except Exception:  # the model's own failure: said where an image runs it, as before
        return
    check_logits(np.shape(probe), f"{path} gives", 1)


def check_logits(shape: Sequence[Any], scores_of: str, batch: Any = None) -> None:
    """Refuse scores of shape `shape` (ONNX Runtime's: a dimension may be a name, or None)
    unless [batch, classes] with two classes or more: `topk` ranks each row of a 2-D array,
    and a softmax over one score is 1.0 for every image. `scores_of` says whose they are:
    "m.onnx gives" (an ONNX file's, `check_scores`), "model 'm.py:f' returns in eval mode"
    (a model `dlperf export` is to write, export.check_scores). `batch`: the number of images
    the scores are of, where known (a count, or the input's first dimension, a name where it
    is dynamic); [classes, batch] scores were ranked as if each image's score were a class's
    (round 54's Left, fixed in round 55)."""
    said = "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"
    # a named batch (a dynamic one) is no fixed number of rows either
    if batch is not None and shape and isinstance(shape[0], int) and shape[0] != batch:
        raise UserError(
            f"{scores_of} scores of shape {said} for a batch of {batch} image"
            f"{'' if batch == 1 else 's'}; an exported classifier's scores have shape "
            "[batch, classes], the batch first: a row of class scores per image",
            "keep the batch dimension first in the model's forward (y.transpose(0, 1) if its "
            "scores are [classes, batch])",
        )
    if len(shape) != 2:
        raise UserError(
            f"{scores_of} scores of shape {said}; an exported classifier's scores have shape "
            "[batch, classes], a row of class scores per image, which `dlperf infer` and "
            "/predict rank",
            "flatten them to [batch, classes] in the model's forward (y.flatten(1))"
            if len(shape) > 2
            else "return a row of class scores per image; a single logit y per image as two "
            "classes' scores: torch.stack([torch.zeros_like(y), y], 1)",
        )
    if isinstance(shape[1], int) and shape[1] < 2:
        raise UserError(
            f"{scores_of} scores of shape {said}: one score per image; an exported classifier "
            "has a score per class, two or more (a softmax over one score is 1.0 for every "
            "image)",
            "return a single logit y as two classes' scores: torch.stack([torch.zeros_like(y), "
            "y], 1)",
        )


def providers(available: list[str]) -> list[Any]:
    """CUDA when onnxruntime-gpu has it, else the CPU. CUDA without TF32: its 10-bit
    mantissa would miss PyTorch's fp32 answers by more than export's parity tolerance."""
    chosen: list[Any] = []
    if "CUDAExecutionProvider" in available:
        chosen.append(("CUDAExecutionProvider", {"use_tf32": "0"}))
    return [*chosen, "CPUExecutionProvider"]


def read_labels(path: Path) -> list[str]:
    """One class name per line, in class-index order; blank lines are ignored."""
    meta_io.regular_file(path, "give a text file of class names, one a line")
    if not path.is_file():
        raise UserError(f"no labels file {path}")
    try:
        # utf-8-sig: Notepad and PowerShell start a UTF-8 file with a byte order mark, which
        # read as UTF-8 stayed in the first name ("\ufeffcat"; a detector's "__background__"
        # was then not recognised, and a second one added). splitlines() takes CRLF too.
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as e:
        raise not_utf8(path, e) from None
    labels = [line.strip() for line in text.splitlines() if line.strip()]
    if not labels:
        raise UserError(f"labels file {path} is empty", "write one class name per line")
    return labels


# Serve's cap on an upload (`--max-pixels`): a few KB of compressed PNG can claim gigapixels,
# refused before decoding, not after. A file the user names (infer, detect run) has training's.
MAX_PIXELS = 40_000_000


class ImageTooLarge(UserError):
    """The image has more pixels than the cap (a decompression bomb, or just too big)."""


def decode(data: bytes, source: str = "image", *, max_pixels: int | None = None) -> Image.Image:
    """Bytes of an image file (PNG, JPEG, ...) to a PIL image; anything else is bad input.

    `max_pixels` None (a file the user names: `infer`, `detect run`): training's cap, Pillow's
    decompression-bomb cap (twice PIL.Image.MAX_IMAGE_PIXELS, checked from the header as the
    file opens), as `dlperf.data.sources.opened_image` reads a data set's files, so that what
    training reads, inference reads; below it, without Pillow's DecompressionBombWarning (the
    user's own file, as in training). An int (`serve --max-pixels`, an upload): that cap too,
    checked from the header before any decoding."""
    image_modes.quiet_libtiff()  # a damaged TIFF's libtiff lines on fd 2: its line is ours
    try:
        with warnings.catch_warnings():
            if max_pixels is None:  # not for serve: its threads would race on the filters
                warnings.simplefilter("ignore", Image.DecompressionBombWarning)
                # A damaged file's warnings (a TIFF's "Tag data larger than file"): it
                # decodes, or its failure is the one line below, as training reads it.
                warnings.filterwarnings("ignore", category=UserWarning, module=r"PIL\.")
            image = Image.open(io.BytesIO(data))
    except Image.DecompressionBombError as e:  # Pillow's own cap: twice its MAX_IMAGE_PIXELS
        raise _over_pillows_cap(source, e, max_pixels) from None
    except MemoryError:  # the machine's, not the file's: infer's out-of-memory line, serve's 507
        raise
    except Exception as e:
        raise _unreadable(source, e) from None
    width, height = image.size
    if max_pixels is not None and width * height > max_pixels:
        raise ImageTooLarge(
            f"{source} is {width}x{height} pixels, more than the {max_pixels:,} accepted"
        )
    try:
        with warnings.catch_warnings():
            if max_pixels is None:
                warnings.filterwarnings("ignore", category=UserWarning, module=r"PIL\.")
            image.load()
    except MemoryError:  # a decoder's buffer under a memory limit ("not a readable image", exit 2)
        raise
    except Exception as e:
        raise _unreadable(source, e) from None
    return image


def _over_pillows_cap(source: str, error: Exception, max_pixels: int | None) -> ImageTooLarge:
    """The line for an image over Pillow's decompression-bomb cap, as its header says (nothing
    decoded yet), and the way on: an image resized under the cap (`max_pixels`, serve's, when
    that is lower) is read."""
    counts = re.fullmatch(
        r"Image size \((\d+) pixels\) exceeds limit of (\d+) pixels.*", str(error), re.DOTALL
    )
    if counts is None:  # another wording of a later Pillow: its own words
        return ImageTooLarge(f"{source} is too large to decode: {error}", "resize it first")
    pixels, cap = (int(n) for n in counts.groups())
    most = cap if max_pixels is None else min(cap, max_pixels)
    return ImageTooLarge(
        f"{source} is too large to decode: {pixels:,} pixels, over the {cap:,} dlperf decodes "
        "(Pillow's decompression-bomb cap, which training's readers keep too)",
        f"resize it to at most {most:,} pixels first",
    )


def _unreadable(source: str, error: Exception) -> UserError:
    # Pillow's decoders raise many types on a malformed file (OSError, SyntaxError,
    # EOFError, struct.error, IndexError, ...): all of them mean the bytes are bad.
    return UserError(
        f"{source} is not a readable image ({type(error).__name__})",
        "give a PNG, JPEG or another image file Pillow opens, whole",
    )


# The image mode that holds a model's channels, by their count: as `dlperf data samples`
# writes an array's images, and as Pillow reads them back (2 = grey and alpha).
CHANNEL_MODES = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}


def image_mode(channels: int, source: str = "image") -> str:
    """The mode an image is converted to for a model of `channels` channels; a model of any
    other count takes no image file (`source` names the image in that error)."""
    mode = CHANNEL_MODES.get(channels)
    if mode is None:
        raise UserError(
            f"{source}: the model takes {channels} channels; an image file gives 1 to 4 "
            f"({', '.join(CHANNEL_MODES.values())})",
            "give it arrays of its input's shape: `dlperf serve`'s tensor endpoint "
            "(/v2/models/NAME/infer), or ONNX Runtime",
        )
    return mode


def to_array(
    image: Image.Image, pre: Preprocess, source: str = "image", *, stretch: bool = False
) -> np.ndarray:
    """One image to a normalised float32 (C, H, W) array: to RGB, resized so it covers (H, W)
    and centre-cropped (`covered`), converted to the model's mode, scaled, normalised. For a
    square (H, W) that is, pixel for pixel, the tensor training's reader of image files
    (decode_file, then the loaders' normalisation) makes of the file, so a non-square photo
    is cropped, not squashed, as in training, and a 16-bit one spans its own range
    (`image_modes.rgb`, the conversion training used; `source` names the image in its
    errors). The mode follows the model's channels (`image_mode`): L, LA, RGB or RGBA; an
    image without alpha gets an opaque one, as Pillow converts it; an image with alpha, for
    a model of LA or RGBA, keeps it (converted before the resize, as Pillow resizes alpha).

    `stretch` (the detectors): the whole image resized to (H, W), its aspect ratio not
    kept and nothing cropped, as a torchvision detector's transform resizes it in
    fine-tuning and `detect eval` (`stretched`); its boxes then map back to the image by
    scaling x by width / W and y by height / H."""
    mode = image_mode(pre.channels, source)
    height, width = pre.size
    keep_alpha = mode in ("LA", "RGBA") and "A" in image.getbands()
    if keep_alpha:
        try:  # keep its alpha: image_modes.rgb drops it, as training on files does
            image = image.convert(mode)
        except ValueError as e:  # a mode PIL opens but cannot convert ("La")
            raise UserError(
                f"{source}: cannot decode image mode {image.mode} ({e})",
                f"save it as 8-bit {mode}",
            ) from None
    else:
        image = image_modes.rgb(image, source)
    if stretch:
        if mode != image.mode:
            image = image.convert(mode)
        x = stretched(np.asarray(image), height, width)
    else:
        # Resized and cropped in RGB, then converted, as training's decode_file makes the RGB
        # tensor a model of any channel count would see of the file.
        image = covered(image, height, width)
        if mode != image.mode:
            image = image.convert(mode)
        x = np.asarray(image, dtype=np.float32) / 255.0
    x = x[None] if x.ndim == 2 else x.transpose(2, 0, 1)
    mean = np.asarray(pre.mean, dtype=np.float32).reshape(-1, 1, 1)
    std = np.asarray(pre.std, dtype=np.float32).reshape(-1, 1, 1)
    return np.ascontiguousarray((x - mean) / std)


def stretched(pixels: np.ndarray, height: int, width: int) -> np.ndarray:
    """8-bit (h, w) or (h, w, C) pixels resized to (height, width) on [0, 1], float32, as
    torchvision's detection transform resizes an image to its fixed_size in training and
    evaluation: `torch.nn.functional.interpolate(mode="bilinear", align_corners=False)`, no
    antialiasing, so each output pixel blends the 2 x 2 input pixels around its centre.
    Only the rows it needs are made float: a 40-megapixel upload is never copied whole."""

    def taps(size: int, out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        # The output pixel's centre in input pixels, clamped at 0 as torch clamps it.
        centre = np.maximum((np.arange(out) + 0.5) * (size / out) - 0.5, 0.0)
        low = np.minimum(np.floor(centre).astype(np.intp), size - 1)
        return low, np.minimum(low + 1, size - 1), (centre - low).astype(np.float32)

    channels = (1,) * (pixels.ndim - 2)  # () for grey (h, w), (1,) for (h, w, C)
    top, bottom, dy = taps(pixels.shape[0], height)
    upper, lower = pixels[top].astype(np.float32), pixels[bottom].astype(np.float32)
    rows = upper + (lower - upper) * dy.reshape(-1, 1, *channels)
    left, right, dx = taps(pixels.shape[1], width)
    x = rows[:, left] + (rows[:, right] - rows[:, left]) * dx.reshape(-1, *channels)
    return np.asarray(x / 255.0, dtype=np.float32)


def load_images(paths: list[Path], pre: Preprocess) -> np.ndarray:
    """Image files to one (N, C, H, W) float32 batch."""
    arrays = []
    for path in paths:
        image_file(path)
        arrays.append(to_array(decode(path.read_bytes(), str(path)), pre, str(path)))
    return np.stack(arrays)


PROBABILITIES = "the model's scores are probabilities (recorded at export)"
"""What infer and the server say once of a model whose metadata records `probabilities`."""


def topk(
    logits: np.ndarray, k: int, labels: list[str], probabilities: bool = False
) -> list[list[dict[str, Any]]]:
    """Per row of logits, the k best classes as {index, label, probability}. `probabilities`:
    the scores are probabilities already (the model's metadata says so), ranked as they are."""
    scores = logits.astype(np.float64)
    probs = scores if probabilities else softmax(scores)
    best = np.argsort(-probs, axis=-1, kind="stable")[:, :k]
    return [
        [
            {
                "index": int(i),
                "label": labels[i] if i < len(labels) else str(int(i)),
                "probability": float(row[i]),
            }
            for i in indices
        ]
        for row, indices in zip(probs, best, strict=True)
    ]


def softmax(logits: np.ndarray) -> np.ndarray:
    """The softmax of each row, computed as scipy.special.softmax computes it: the row's
    largest logit subtracted first, so exp() never overflows and a -inf logit is 0. numpy's,
    not scipy's: importing scipy.special loads ~150 modules for these two lines."""
    shifted = np.exp(logits - np.max(logits, axis=-1, keepdims=True))
    return np.asarray(shifted / np.sum(shifted, axis=-1, keepdims=True))


def exported_batch(session: Any) -> int | None:
    """The batch size a graph was exported with; None where its batch is dynamic."""
    size = session.get_inputs()[0].shape[0]
    return size if isinstance(size, int) else None


def run_onnx(session: Any, x: np.ndarray) -> np.ndarray:
    """Logits for a batch (here, not in export: `dlperf infer` runs a model file without
    importing torch); a model exported with a fixed batch size gets it in chunks."""
    spec = session.get_inputs()[0]
    step = exported_batch(session) or len(x)
    outs = [session.run(None, {spec.name: x[i : i + step]})[0] for i in range(0, len(x), step)]
    return np.concatenate(outs)
