"""The Optimus coefficients as functions of run features, to predict unseen configurations.

Each run's curve is fitted on its own; then log β_j (j = 0, 1, 2) is regressed linearly on the
features: numbers as they are (ResNet depth 20, 32, 56), anything else one-hot against its
first level (GPU type). Logs keep every predicted β positive and let a feature scale β rather
than shift it. β is floored at 1e-9 before the log, since a fit may put β2 at exactly 0. A
feature with one value in every run cannot be told from the intercept, so it is left out
(`Regression.dropped`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from dlperf.errors import UserError
from dlperf.parsing import flatten, plain_number

if TYPE_CHECKING:
    from dlperf.store.record import RunRecord

FLOOR = 1e-9
BETAS = ("beta0", "beta1", "beta2")


@dataclass
class Regression:
    features: list[str]
    columns: list[str]  # "intercept", numeric features, "feature=level" indicators
    levels: dict[str, list[str]]  # categorical feature -> its levels, the first the reference
    coef: dict[str, list[float]]  # per β, one coefficient per column (on log β)
    rmse_log: dict[str, float]  # per β, in-sample RMSE of log β
    dropped: dict[str, str]  # feature -> the one value every run had, left out of `features`


def _is_number(value: Any) -> bool:
    try:
        plain_number(value)  # "1_0" is a level, not 10
    except (TypeError, ValueError):
        return False
    return not isinstance(value, bool)


def _check_finite(values: dict[str, Any], where: str) -> None:
    """A feature's value is a name (T4) or a finite number: 'nan' and 'inf' read as numbers
    that no regression can take (nan β, or an SVD that does not converge)."""
    for f, value in values.items():
        if _is_number(value) and not math.isfinite(float(value)):
            raise UserError(
                f"{where}{f}={value}: a feature's value must be a finite number or a name",
                f"e.g. {f}=20",
            )


def run_features(run: RunRecord, features: list[str]) -> dict[str, Any]:
    """A stored run's features: a summary, system or config key, looked up in that order, by
    its full name (model.name) or its last part (name), so `device` is the device the run
    used (system.device), not the one asked for (config.run.device, e.g. "auto"). Two are
    derived: `depth`, from the model name (`depth_of`: resnet56 → 56), and `gpu`, the
    first GPU's name ("cpu" when the run had none)."""
    sections = {
        "summary": run.summary,
        "system": run.system or {},
        "config": run.config or {},
    }
    flat = flatten(sections)
    derived: dict[str, Any] = {}
    depth = depth_of(flat.get("config.model.name"))
    if depth is not None:
        derived["depth"] = depth
    if "gpus" in sections["system"]:
        derived["gpu"] = (sections["system"]["gpus"] or ["cpu"])[0]
    found = {}
    for feature in features:
        matches = [v for k, v in flat.items() if k.endswith(f".{feature}") and v is not None]
        if not matches and feature in derived:
            matches = [derived[feature]]
        if not matches:
            raise UserError(
                f"run {run.id} has no feature '{feature}'",
                "features are summary, system or config keys, e.g. model.name",
            )
        found[feature] = matches[0]
    return found


def configuration(run: RunRecord) -> dict[str, Any]:
    """What a run trained where, as tables and legends name it: its model, the depth (the
    number ending the model name, `depth_of`) and the device (the first GPU's name, else
    the device it ran on); None where the run does not say."""
    model = (run.config or {}).get("model", {}).get("name")
    system = run.system or {}
    device = (system.get("gpus") or [None])[0] or system.get("device")
    return {"model": model, "depth": depth_of(model), "device": device}


def depth_of(model: Any) -> int | None:
    """The depth a model name says: the number ending a name of letters and that number
    (resnet56, resnet_56 → 56); None for any other name. Any digits ending the name read
    "=cmd|' /C calc'!A0" as depth 0 and efficientnet_b0, vit_b_16 or mobilenet_v2 as a
    variant's or a patch's number (break-it round 29, P3 C1)."""
    digits = re.fullmatch(r"[A-Za-z]+[-_]?([1-9]\d*)", str(model or ""))
    return int(digits.group(1)) if digits else None


def _key(value: Any) -> Any:
    """A feature's value as runs are told apart by it: 56 and "56.0" are one depth."""
    return plain_number(value) if _is_number(value) else str(value)


def differs(value: Any, wanted: Any) -> bool:
    """Whether a run's feature is not the value asked for (56 and "56.0" are one depth)."""
    return bool(_key(value) != _key(wanted))


def _design(
    rows: list[dict[str, Any]], features: list[str], levels: dict[str, list[str]]
) -> np.ndarray:
    columns = [np.ones(len(rows))]
    for f in features:
        if f in levels:
            for level in levels[f][1:]:
                columns.append(np.array([str(r[f]) == level for r in rows], float))
        else:
            columns.append(np.array([float(r[f]) for r in rows]))
    return np.column_stack(columns)


def fit(rows: list[dict[str, Any]], betas: np.ndarray, features: list[str]) -> Regression:
    """`rows[i]` holds run i's features, `betas[i]` its fitted (β0, β1, β2)."""
    for i, row in enumerate(rows):
        _check_finite({f: row[f] for f in features}, f"source {i + 1} has ")
    dropped = {f: str(rows[0][f]) for f in features if len({_key(r[f]) for r in rows}) == 1}
    features = [f for f in features if f not in dropped]
    if not features:
        every = ", ".join(f"{f}={v}" for f, v in dropped.items())
        raise UserError(
            f"nothing to regress on: {every} in every run (too few runs, or none that differ)",
            "give runs that differ in at least one feature",
        )
    levels = {
        f: sorted({str(r[f]) for r in rows})
        for f in features
        if not all(_is_number(r[f]) for r in rows)
    }
    columns = ["intercept"]
    for f in features:
        columns += [f"{f}={lv}" for lv in levels[f][1:]] if f in levels else [f]
    if len(rows) < len(columns):
        raise UserError(
            f"{len(rows)} runs are too few to fit {len(columns)} coefficients per β",
            f"columns: {', '.join(columns)}",
        )
    x = _design(rows, features, levels)
    y = np.log(np.maximum(np.asarray(betas, float), FLOOR))
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    rmse = np.sqrt(np.mean((x @ coef - y) ** 2, axis=0))
    return Regression(
        features=features,
        columns=columns,
        levels=levels,
        coef={b: coef[:, j].tolist() for j, b in enumerate(BETAS)},
        rmse_log={b: float(rmse[j]) for j, b in enumerate(BETAS)},
        dropped=dropped,
    )


def predict(reg: Regression, values: dict[str, Any]) -> np.ndarray:
    """(β0, β1, β2) for a configuration, which may be one no run had. A dropped feature may
    be left out, or given its one value."""
    missing = [f for f in reg.features if f not in values]
    if missing:
        raise UserError(f"the prediction needs {', '.join(missing)}", "e.g. --predict depth=50")
    _check_finite(values, "--predict ")
    for f, value in reg.dropped.items():
        if f in values and _key(values[f]) != _key(value):
            raise UserError(
                f"every run has {f}={value}: the regression cannot predict {f}={values[f]}"
            )
    for f, levels in reg.levels.items():
        if str(values[f]) not in levels:
            raise UserError(f"{f}={values[f]} was in no run", f"known: {', '.join(levels)}")
    for f in reg.features:
        if f not in reg.levels and not _is_number(values[f]):
            raise UserError(f"{f} is a number in the runs, got {values[f]!r}")
    x = _design([values], reg.features, reg.levels)[0]
    with np.errstate(over="ignore", invalid="ignore"):
        logs = [float(x @ np.array(reg.coef[b])) for b in BETAS]
        predicted = np.exp(logs)
    for b, log, beta in zip(BETAS, logs, predicted, strict=True):
        if not math.isfinite(beta):
            at = ",".join(f"{f}={values[f]}" for f in reg.features)
            raise UserError(
                f"--predict {at}: the predicted {b} overflows (log {b} = {log:.3g})",
                "predict nearer the runs' features",
            )
    return np.asarray(predicted)
