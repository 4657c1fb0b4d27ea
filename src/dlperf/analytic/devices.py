"""The device catalog: built-in vendor figures (devices.toml) under the user's own file.

The user file ($DLPERF_DEVICES, else ~/.config/dlperf/devices.toml) adds devices and
overrides built-in ones key by key, so `[T4] price_per_hour_usd = 0.29` changes only the
price, and inside a table too: `[V100] peak_tflops = { fp32 = 1.0 }` changes only the fp32
peak. `dlperf calibrate` writes the measured machine there; its measured tables replace the
built-in ones whole. Each entry knows which of its figures the user's file set, so that a
prediction's basis does not credit a datasheet with them.
"""

from __future__ import annotations

import os
import tomllib
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from dlperf.config.base import FIGURE_MAX, FIGURE_MIN, PPP
from dlperf.errors import UserError, not_utf8
from dlperf.parsing import did_you_mean
from dlperf.paths import check_writable, locked_folder, replaced, told, writing

Kind = Literal[
    "conv",
    "conv_backward",
    "depthwise_conv",
    "depthwise_conv_backward",
    "matmul",
    "pool",
    "norm",
    "other",
]
"""Operator kinds a device can have a PPP of its own for (dlperf.analytic.ops.kind_of):
convolutions and their backward, depthwise ones (far fewer FLOPs per byte) and their
backward, matrix products (attention included), window pooling,
normalisation (batch, layer, group; forward and backward), and all other operators."""
KINDS: tuple[Kind, ...] = get_args(Kind)

CALIBRATED_BY = "dlperf calibrate"
"""How the `source` of an entry `dlperf calibrate` wrote begins (interleaved.calibrate)."""

# A machine's figures: a peak, a bandwidth or a price of 0, below 0 or not a number would
# turn a prediction into a division by zero, a negative time or a null; above FIGURE_MAX
# (config.base) a figure is no machine's, and so is a peak, a bandwidth or a PPP below
# FIGURE_MIN (1e-300 TFLOPS at a PPP of 1e-300 was 0 FLOP/s: a ZeroDivisionError). Within
# them, every product and quotient of figures a prediction forms stays finite.
Positive = Annotated[float, Field(ge=FIGURE_MIN, le=FIGURE_MAX)]
NotNegative = Annotated[float, Field(ge=0, le=FIGURE_MAX)]
# A device's plain PPP is a fraction of its peak, as `--ppp` is (config.base.PPP): "PPP 2 of
# the mydev entry" predicted a model faster than the peak. The calibrated `ppp_by_kind` and
# `ppp_mem` are measured, and kept above 1 where they come out so (a convolution that beats
# the square-matmul peak; docs/analyze.md): Positive, not PPP.


class Device(BaseModel):
    # strict as the config sections are: `fp32 = "10"` or `ppp = true` is an error, not 10.0
    # or 1.0 (a whole number still reads as a float: TOML writes 10 as an integer).
    model_config = ConfigDict(
        strict=True, extra="forbid", use_attribute_docstrings=True, allow_inf_nan=False
    )

    name: str
    """Catalog key, e.g. V100."""
    description: str = ""
    kind: Literal["gpu", "cpu"] = "gpu"
    peak_tflops: dict[str, Positive]
    """Peak 10^12 FLOP/s per precision (fp32, tf32, fp16, bf16)."""
    gpus_per_board: int = Field(1, ge=1)
    """GPUs on one board (a K80 has 2); every figure is one GPU's."""
    memory_bandwidth_gbs: Positive
    """Memory bandwidth in 10^9 bytes/s."""
    memory_gb: Positive | None = None
    interconnect_gbs: Positive | None = None
    """NVLink or PCIe bandwidth per GPU in 10^9 bytes/s."""
    price_per_hour_usd: NotNegative | None = None
    price_source: str | None = None
    ppp: PPP | None = None
    """Default platform percent of peak for compute, as a fraction (0 < ppp <= 1), used for
    every operator kind without a calibrated PPP of its own."""
    ppp_by_kind: dict[Kind, Positive] | None = None
    """PPP per operator kind (calibrated devices); a kind not listed uses `ppp`. Measured
    against the square-matmul peak, so a kind that beats it is above 1."""
    ppp_mem: Positive | None = None
    """Default fraction of the copy bandwidth reached (calibrated; above 1 where the
    calibration's kernel beat the copy)."""
    op_overhead_us: NotNegative | None = None
    """Fixed cost of one operator call in microseconds (dispatch, launch), calibrated."""
    threads: int | None = Field(None, ge=1)
    """CPU threads the calibration ran with."""
    source: str
    """Where the figures come from."""
    date: str
    """Date of the source (or of the calibration)."""

    # Not fields (a file cannot set them): what load_catalog learnt of where figures came from.
    _user_keys: frozenset[str] = PrivateAttr(default_factory=frozenset)
    """The keys the user's file set: `peak_tflops` for a whole table, `peak_tflops.fp32` for
    one key merged into a built-in table."""
    _user_file: str = PrivateAttr(default="")

    def __eq__(self, other: object) -> bool:
        """Equal figures are the same device, wherever they were read from: a device saved
        and read back is the one saved (pydantic's own equality compares the private
        attributes too)."""
        if not isinstance(other, Device):
            return NotImplemented
        return self.__dict__ == other.__dict__

    def from_user(self, key: str) -> str | None:
        """The user's file, where it set `key` (`memory_bandwidth_gbs`, `peak_tflops.fp16`)
        of this entry; else None (a built-in figure, or an entry made in code)."""
        table = key.partition(".")[0]
        if key in self._user_keys or table in self._user_keys:
            return self._user_file
        return None

    def peak_flops(self, precision: str) -> float:
        if precision not in self.peak_tflops:
            raise UserError(
                f"device {self.name} has no {precision} peak in {self._peaks_from()}",
                f"it lists {', '.join(self.peak_tflops)}",
            )
        return self.peak_tflops[precision] * 1e12

    def _peaks_from(self) -> str:
        """Where the peaks come from, for a refusal: the user's own table was blamed on "the
        catalog"."""
        if "peak_tflops" in self._user_keys:
            return self._user_file
        if any(key.startswith("peak_tflops.") for key in self._user_keys):
            return f"the catalog or {self._user_file}"
        return "the catalog"

    def peak_label(self, precision: str) -> str:
        """The peak at `precision` and what it is the peak of, e.g. one GPU of a board."""
        tflops = self.peak_flops(precision) / 1e12
        if self.gpus_per_board > 1:
            return (
                f"{tflops:g} TFLOPS {precision}: one of the {self.gpus_per_board} GPUs of a "
                f"{self.name} board (the board: {tflops * self.gpus_per_board:g} TFLOPS)"
            )
        return f"{tflops:g} TFLOPS {precision} of {self.name}"

    def kind_ppp(self) -> dict[str, float]:
        """The PPP of each operator kind: calibrated, else the device's `ppp`, else 1."""
        default = self.ppp or 1.0
        return {kind: (self.ppp_by_kind or {}).get(kind, default) for kind in KINDS}


def user_file() -> Path:
    if os.environ.get("DLPERF_DEVICES"):
        return Path(os.environ["DLPERF_DEVICES"])
    # The XDG spec: a relative XDG_CONFIG_HOME is invalid and ignored (it was read from the
    # working directory, so each directory had a catalog of its own).
    xdg = os.environ.get("XDG_CONFIG_HOME", "")
    config = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".config"
    return config / "dlperf" / "devices.toml"


def _read(text: str, where: str) -> dict[str, dict[str, Any]]:
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"{where}: malformed TOML: {e}") from None
    bad = [k for k, v in raw.items() if not isinstance(v, dict)]
    if bad:
        raise UserError(f"{where}: '{bad[0]}' is not a device table", "write [NAME] then keys")
    return raw


def _read_file(path: Path) -> dict[str, dict[str, Any]]:
    try:
        return _read(path.read_text(encoding="utf-8-sig"), str(path))
    except UnicodeDecodeError as e:
        raise not_utf8(path, e) from None


def _builtin() -> dict[str, dict[str, Any]]:
    """The entries of the catalog dlperf ships, by name (the user file's go over them)."""
    text = resources.files("dlperf.analytic").joinpath("devices.toml").read_text()
    return _read(text, "built-in devices.toml")


def load_catalog(path: Path | None = None) -> dict[str, Device]:
    """Built-in devices with the user file's entries merged over them, key by key."""
    entries = _builtin()
    given = path is not None
    path = path or user_file()
    if not given and os.environ.get("DLPERF_DEVICES") and not path.exists():
        # The user named this file: ignoring it left --device MINE to say only "unknown device".
        raise UserError(
            f"DLPERF_DEVICES={path}: no such file", "create it, or unset DLPERF_DEVICES"
        )
    if path.is_dir():
        raise UserError(f"device file {path} is a directory", "point DLPERF_DEVICES at a file")
    if path.exists() and not path.is_file():  # /dev/null reads empty; a FIFO blocks for ever
        raise UserError(
            f"device file {path} is not a regular file", "point DLPERF_DEVICES at a TOML file"
        )
    user_keys: dict[str, frozenset[str]] = {}
    if path.is_file():
        for name, fields in _read_file(path).items():
            if "name" in fields:  # it collided with the table's name in Device(name=...)
                raise UserError(
                    f"device {name}: 'name' is not a key of a device entry (the table's "
                    f"[{name}] is its name)",
                    f"see {path}",
                )
            entries[name], user_keys[name] = _merged(entries.get(name, {}), fields)
    catalog: dict[str, Device] = {}
    for name, fields in entries.items():
        try:
            catalog[name] = Device(name=name, **fields)
        except ValidationError as e:
            first = e.errors()[0]
            loc = ".".join(str(p) for p in first["loc"])
            raise UserError(f"device {name}: {loc}: {first['msg']}", f"see {path}") from None
        if name in user_keys:
            catalog[name]._user_keys = user_keys[name]
            catalog[name]._user_file = str(path)
    return catalog


def _merged(
    built_in: dict[str, Any], mine: dict[str, Any]
) -> tuple[dict[str, Any], frozenset[str]]:
    """The user's entry over the built-in one, key by key, and inside tables too: a table
    replaced whole dropped the built-in peaks it did not list (`peak_tflops = { fp32 = 1.0 }`
    left a V100 without fp16). An entry `dlperf calibrate` wrote is one measurement: its
    tables replace the vendor's whole (a measured fp32 beside a datasheet tf32 would mix
    them). Also the keys the user set, dotted inside a table merged key by key."""
    source = mine.get("source")
    whole = isinstance(source, str) and source.startswith(CALIBRATED_BY)
    merged = dict(built_in)
    keys: set[str] = set()
    for key, value in mine.items():
        old = built_in.get(key)
        if isinstance(value, dict) and isinstance(old, dict) and not whole:
            merged[key] = {**old, **value}
            keys.update(f"{key}.{inner}" for inner in value)
        else:
            merged[key] = value
            keys.add(key)
    return merged, frozenset(keys)


def check_calibrated_name(name: str, kind: str) -> None:
    """Refuse to save this host's calibration (a device of `kind`) under the name of a
    built-in device of another kind: the user file's entry is merged over the built-in one
    key by key, so a CPU calibrated as "T4" kept T4's price and interconnect (a cpu at
    $0.35/GPU-h from Google's GPU pricing, exit 0), and the catalog's real T4 was gone."""
    entry = _builtin().get(name)
    if entry is not None and entry.get("kind", "gpu") != kind:
        raise UserError(
            f"--name {name} is the catalog's {entry.get('kind', 'gpu')} {name} "
            f"({entry.get('description', name)}), and this host's device is a {kind}: its "
            f"entry would keep {name}'s price and interconnect",
            "choose another --name (see `dlperf devices`)",
        )


def get_device(name: str, path: Path | None = None) -> Device:
    catalog = load_catalog(path)
    if name in catalog:
        return catalog[name]
    # Every entry the name matches ignoring case: a file with [My GPU] and [my gpu] kept only
    # the last of the two under one lower-case key, and "MY GPU" silently picked it.
    matches = [k for k in catalog if k.lower() == name.lower()]
    if len(matches) == 1:
        return catalog[matches[0]]
    if matches:
        said = ", ".join(f"'{k}'" for k in matches[:-1]) + f" or '{matches[-1]}'"
        raise UserError(f"device '{name}' is ambiguous: {said}", "give it as spelled")
    hint = did_you_mean(name, catalog, "see `dlperf devices`", n=3, cutoff=0.4)
    raise UserError(f"unknown device '{name}'", hint)


def writable(path: Path) -> Path:
    """`path`, a device file, made sure it can be written (its missing folders made), so that
    `calibrate` fails before its minutes of measuring. One it cannot write is refused naming
    it and the way round: the OSError alone named only the folder that failed (a HOME that
    cannot be written: "cannot use /nonexistent"), not the file nor DLPERF_DEVICES."""
    try:
        return check_writable(path, make_parents=True)
    except OSError as e:
        said, bad = told(e)
        if not bad:  # a full disk, an I/O error: the system's, told as such
            raise
        home = "XDG_CONFIG_HOME" if os.path.isabs(os.environ.get("XDG_CONFIG_HOME", "")) else "HOME"
        fix = (
            "point DLPERF_DEVICES at a file you can write"
            if os.environ.get("DLPERF_DEVICES")
            else f"set DLPERF_DEVICES=FILE to a file you can write, or give a writable {home}"
        )
        raise UserError(f"cannot write the device file {path} ({said})", fix) from None


def save_device(device: Device, path: Path | None = None) -> Path:
    """Write (or replace) one device in the user file, keeping its other entries. The file is
    the user's own catalog, so it is replaced whole by one rename, never rewritten in place:
    a full disk or a kill mid-write left it cut short, every device in it lost. A link is
    written through (its target replaced, the link kept), the file's mode kept."""
    import tomli_w

    path = writable(path or user_file())
    real = Path(os.path.realpath(path))
    # Locked while read, changed and written back: two calibrations at once each read the
    # file before the other wrote it, and the later rename dropped the earlier one's device.
    with locked_folder(real.parent), writing(path):
        entries = _read_file(real) if real.is_file() else {}
        entries[device.name] = device.model_dump(exclude={"name"}, exclude_none=True)
        mode = real.stat().st_mode & 0o7777 if real.is_file() else None
        with replaced(real) as tmp, open(tmp, "w", encoding="utf-8") as f:
            f.write(tomli_w.dumps(entries))
            if mode is not None:
                os.fchmod(f.fileno(), mode)
            f.flush()
            os.fsync(f.fileno())  # the rename must not land before the data (a power cut)
    return path
