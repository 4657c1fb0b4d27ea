"""Resource-speed models: how fast a job steps for a given allocation.

Optimus (Peng et al., EuroSys 2018, §3.2), parameter-server training with p servers, w workers
and global batch M, as steps per second:
    synchronous   f(p, w) = (θ0·M/w + θ1 + θ2·w/p + θ3·w + θ4·p)^−1
    asynchronous  f(p, w) = w · (θ0 + θ1·w/p + θ2·w + θ3·p)^−1
Both are linear in θ once inverted (1/f, resp. w/f, is a step time), so θ ≥ 0 comes from
non-negative least squares on measured step times, as in the paper.

Pollux (Qiao et al., OSDI 2021, §3.2), all-reduce over K workers with local batch m:
    T_grad = α_g + β_g·m,    T_sync = α_s + β_s·(K − 2)    (0 when K = 1)
    T_iter = (T_grad^γ + T_sync^γ)^(1/γ),    γ ≥ 1
with one (α_s, β_s) within a node and another across nodes; γ between 1 (no overlap of
compute and communication) and ∞ (perfect overlap). Fitted on log time, as the Pollux code
does, to T_grad = step − sync time and to T_iter = step time.

Speed tables have one row per measured configuration with the columns `workers`, `ps`
(Optimus), `nodes` (Pollux), `global_batch`, `step_time_s` and, for Pollux, `sync_time_s`.
The Pollux traces' own columns (`placement` or `num_nodes`/`num_replicas`, `local_bsz`,
`step_time`, `sync_time`) are read as well, and so are the summaries of the finished runs of
a `dlperf scale` study (`ps` = 0 there: all-reduce).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy.optimize import least_squares, nnls

from dlperf.converge.tables import header, read_columns
from dlperf.errors import UserError
from dlperf.parsing import parse_numbers

if TYPE_CHECKING:
    from dlperf.store import Store

MODELS = ("optimus-sync", "optimus-async", "pollux")
# What a `dlperf scale` study varies besides the allocation; one speed model fits one setting.
SETTINGS = ("comm", "strategy", "bucket_mb")

MEANINGS = {
    "optimus-sync": {
        "theta0": "compute time per sample per worker (×M/w)",
        "theta1": "fixed time per step",
        "theta2": "parameter transfer, a worker's share through each server (×w/p)",
        "theta3": "per-worker overhead (×w)",
        "theta4": "per-server overhead (×p)",
    },
    "optimus-async": {
        "theta0": "compute and fixed time per step",
        "theta1": "parameter transfer, a worker's share through each server (×w/p)",
        "theta2": "per-worker overhead (×w)",
        "theta3": "per-server overhead (×p)",
    },
    "pollux": {
        "alpha_g": "gradient time, fixed part (s)",
        "beta_g": "gradient time per sample of local batch (s)",
        "alpha_intra": "sync time within one node, fixed part (s)",
        "beta_intra": "sync time within one node, per worker beyond 2 (s)",
        "alpha_inter": "sync time across nodes, fixed part (s)",
        "beta_inter": "sync time across nodes, per worker beyond 2 (s)",
        "gamma": "overlap of compute and sync (1 none, larger more)",
    },
}


@dataclass
class SpeedData:
    workers: np.ndarray
    global_batch: np.ndarray
    step_time: np.ndarray  # seconds per step of one worker
    ps: np.ndarray | None = None
    nodes: np.ndarray | None = None
    sync_time: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.workers)


@dataclass
class SpeedFit:
    model: str
    params: dict[str, float]
    error_pct: float  # mean |predicted − measured| / measured of the step time, in %
    max_error_pct: float
    n_points: int
    converged: bool
    message: str
    notes: list[str] = field(default_factory=list)
    typical_batch: float = 0.0  # the most common global batch of the data, the plan's default
    typical_local_batch: float = 0.0  # the most common per-worker batch
    basis: str = ""  # what the fit rests on: the measurements and their source (fit_measured)

    def default_batch(self, workers: float) -> float:
        """The global batch to predict at when none is given: Optimus's models take a fixed
        global batch; Pollux's the usual per-worker batch on every worker."""
        return self.typical_local_batch * workers if self.model == "pollux" else self.typical_batch


def _array(values: list[float]) -> np.ndarray:
    return np.asarray(values, dtype=float)


def load_csv(path: Path) -> SpeedData:
    """A speed table in dlperf's shape or one of the Pollux traces (placements, scalability)."""
    columns = header(path)
    if "placement" in columns:
        c = read_columns(path, ["placement", "local_bsz", "step_time", "sync_time"])
        # A placement's digits are the workers (GPUs) on each node, e.g. 1244.
        digits = [str(int(p)) for p in c["placement"]]
        nodes = _array([len(d) for d in digits])
        workers = _array([sum(map(int, d)) for d in digits])
        local, step, sync = c["local_bsz"], c["step_time"], c["sync_time"]
    elif "num_replicas" in columns:
        c = read_columns(path, ["num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time"])
        nodes, workers = _array(c["num_nodes"]), _array(c["num_replicas"])
        local, step, sync = c["local_bsz"], c["step_time"], c["sync_time"]
    else:
        c = read_columns(
            path, ["workers", "global_batch", "step_time_s"], ("ps", "nodes", "sync_time_s")
        )
        return from_rows(
            [dict(zip(c, values, strict=True)) for values in zip(*c.values(), strict=True)],
            str(path),
        )
    return SpeedData(
        workers=workers,
        global_batch=_array(local) * workers,
        step_time=_array(step),
        nodes=nodes,
        sync_time=_array(sync),
    )


def from_rows(rows: list[dict[str, Any]], source: str) -> SpeedData:
    """A speed table from dicts with the keys workers, global_batch, step_time_s and
    optionally ps, nodes, sync_time_s (e.g. the summaries of a `dlperf scale` study)."""
    if not rows:
        raise UserError(f"{source} has no measurements")
    required = ("workers", "global_batch", "step_time_s")
    # One worker synchronises with nobody: `dlperf scale` times no sync for it.
    rows = [
        {**row, "sync_time_s": 0.0}
        if row.get("sync_time_s") is None and row.get("workers") == 1
        else row
        for row in rows
    ]
    for i, row in enumerate(rows):
        missing = [k for k in required if row.get(k) is None]
        if missing:
            raise UserError(f"{source}: row {i + 1} has no {', '.join(missing)}")

    def column(key: str) -> np.ndarray:
        values = _array([float(row[key]) for row in rows])
        if not np.all(np.isfinite(values)):
            raise UserError(f"{source}: '{key}' has non-finite values")
        return values

    def optional(key: str) -> np.ndarray | None:
        return None if any(row.get(key) is None for row in rows) else column(key)

    data = SpeedData(
        workers=column("workers"),
        global_batch=column("global_batch"),
        step_time=column("step_time_s"),
        ps=optional("ps"),
        nodes=optional("nodes"),
        sync_time=optional("sync_time_s"),
    )
    if np.any(data.workers < 1) or np.any(data.step_time <= 0):
        raise UserError(f"{source}: workers must be ≥ 1 and step times > 0")
    return data


def _optimus_design(model: str, w: np.ndarray, p: np.ndarray, m: np.ndarray) -> np.ndarray:
    if model == "optimus-sync":
        return np.column_stack([m / w, np.ones_like(w), w / p, w, p])
    return np.column_stack([np.ones_like(w), w / p, w, p])


def step_time(
    fit: SpeedFit,
    workers: np.ndarray | float,
    global_batch: np.ndarray | float,
    ps: np.ndarray | float = 1.0,
    nodes: np.ndarray | float = 1.0,
) -> np.ndarray:
    """Predicted seconds per step of one worker."""
    w, m = np.atleast_1d(np.asarray(workers, float)), np.atleast_1d(np.asarray(global_batch, float))
    w, m, p, n = np.broadcast_arrays(w, m, np.asarray(ps, float), np.asarray(nodes, float))
    theta = np.array(list(fit.params.values()))
    if fit.model.startswith("optimus"):
        return _optimus_design(fit.model, w, p, m) @ theta
    return _pollux_time(theta, n, w, m / w)[1]


def steps_per_second(fit: SpeedFit, workers: Any, global_batch: Any, ps: Any = 1.0) -> np.ndarray:
    """Optimus's f(p, w): model updates per second (async: all workers' updates together)."""
    t = step_time(fit, workers, global_batch, ps)
    return np.asarray(workers, float) / t if fit.model == "optimus-async" else 1.0 / t


def _errors(predicted: np.ndarray, measured: np.ndarray) -> tuple[float, float]:
    rel = np.abs(predicted - measured) / measured * 100.0
    return float(rel.mean()), float(rel.max())


def _typical(batch: np.ndarray) -> float:
    values, counts = np.unique(batch, return_counts=True)
    return float(values[np.argmax(counts)])


def fit_optimus(data: SpeedData, model: str) -> SpeedFit:
    if data.ps is None:
        raise UserError(
            f"{model} needs a 'ps' column (parameter servers per measurement)",
            "all-reduce traces such as Pollux's have none: use --model pollux",
        )
    if np.any(data.ps < 1):
        raise UserError(
            f"{model} needs parameter servers, but {int(np.sum(data.ps < 1))} measurements "
            "have ps = 0 (all-reduce)",
            "use --model pollux",
        )
    design = _optimus_design(model, data.workers, data.ps, data.global_batch)
    if len(data) < design.shape[1]:
        raise UserError(
            f"{len(data)} measurements are too few for {design.shape[1]} coefficients of {model}"
        )
    theta, _ = nnls(design, data.step_time)
    mean, worst = _errors(design @ theta, data.step_time)
    names = list(MEANINGS[model])
    return SpeedFit(
        model=model,
        params=dict(zip(names, map(float, theta), strict=True)),
        error_pct=mean,
        max_error_pct=worst,
        n_points=len(data),
        converged=True,
        message="NNLS solved exactly",
        typical_batch=_typical(data.global_batch),
        typical_local_batch=_typical(data.global_batch / data.workers),
    )


def _pollux_time(
    theta: np.ndarray, nodes: np.ndarray, workers: np.ndarray, local: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(T_grad, T_iter) for each configuration."""
    a_g, b_g, a_in, b_in, a_out, b_out, gamma = theta
    t_grad = a_g + b_g * local
    across = nodes > 1
    t_sync = np.where(across, a_out, a_in) + np.where(across, b_out, b_in) * np.maximum(
        workers - 2, 0
    )
    t_sync = np.where(workers > 1, t_sync, 0.0)
    return t_grad, (t_grad**gamma + t_sync**gamma) ** (1.0 / gamma)


def fit_pollux(data: SpeedData) -> SpeedFit:
    if data.nodes is None or data.sync_time is None:
        raise UserError(
            "pollux needs 'nodes' and 'sync_time_s' for every measurement",
            "a Pollux trace, or a `dlperf scale` study that timed compute on its own",
        )
    n, w = data.nodes, data.workers
    intra, inter = (w > 1) & (n == 1), n > 1
    # Only what was measured can be fitted: T_grad's 2 constants, and with several workers
    # γ and 2 sync constants per link measured.
    needed = 2 + (1 + 2 * (int(intra.any()) + int(inter.any())) if np.any(w > 1) else 0)
    if len(data) < needed:
        raise UserError(
            f"{len(data)} measurements are too few for the {needed} coefficients of pollux "
            "they determine",
            "measure more worker counts or batch sizes",
        )
    local = data.global_batch / w
    grad = data.step_time - data.sync_time
    if np.any(grad <= 0):
        raise UserError("sync time must be shorter than step time in every row")
    notes = []
    if len(np.unique(local)) > 1:
        b_g, a_g = np.polyfit(local, grad, 1)
    else:
        # Weak scaling at one local batch: only α_g + β_g·m is determined, so start halfway.
        b_g, a_g = float(np.median(grad)) / 2 / local[0], float(np.median(grad)) / 2
        notes.append(
            f"one local batch ({local[0]:g}) in every measurement: α_g and β_g are not "
            "told apart, so predictions at other batch sizes are guesses"
        )
    # A start inside the bounds even when no sync time was exposed (fully overlapped).
    sync0 = float(np.median(data.sync_time[w > 1])) if np.any(w > 1) else 0.0
    sync0 = max(sync0, 1e-3 * float(np.median(data.step_time)))
    start = np.array([max(a_g, 1e-4), max(b_g, 1e-6), sync0, sync0 / 10, sync0, sync0 / 10, 1.5])
    lower = np.array([1e-8] * 6 + [1.0])
    upper = np.array([np.inf] * 6 + [10.0])

    def residuals(theta: np.ndarray) -> np.ndarray:
        t_grad, t_iter = _pollux_time(theta, n, w, local)
        return np.concatenate([np.log(t_grad / grad), np.log(t_iter / data.step_time)])

    result = least_squares(residuals, start, bounds=(lower, upper), x_scale="jac")
    theta = result.x
    # Constants of a link that was never measured cannot be fitted: borrow the other link's.
    if not np.any(inter):
        theta[4:6] = theta[2:4]
        notes.append("no measurement across nodes: inter-node constants copied from intra-node")
    if not np.any(intra):
        theta[2:4] = theta[4:6]
        notes.append("no measurement within one node: intra-node constants copied from inter")
    mean, worst = _errors(_pollux_time(theta, n, w, local)[1], data.step_time)
    return SpeedFit(
        model="pollux",
        params=dict(zip(MEANINGS["pollux"], map(float, theta), strict=True)),
        error_pct=mean,
        max_error_pct=worst,
        n_points=len(data),
        converged=bool(result.success),
        message=str(result.message),
        notes=notes,
        typical_batch=_typical(data.global_batch),
        typical_local_batch=_typical(data.global_batch / data.workers),
    )


def given(model: str, params: dict[str, Any], source: str, batch: float = 0.0) -> SpeedFit:
    """A speed model whose coefficients are given, not fitted (e.g. a paper's): every one of
    `model`'s, each a number ≥ 0, in any order; `batch` the global batch to predict at."""
    check_model(model)
    names = list(MEANINGS[model])
    unknown = [k for k in params if k not in names]
    if unknown:
        raise UserError(
            f"{source}: {model} has no {', '.join(unknown)}",
            f"its coefficients are {', '.join(names)}",
        )
    missing = [k for k in names if k not in params]
    if missing:
        raise UserError(f"{source}: {model} needs {', '.join(missing)}")
    values = {}
    for name in names:
        try:
            values[name] = float(params[name])
        except (TypeError, ValueError):
            values[name] = math.nan
        if isinstance(params[name], bool) or not (
            math.isfinite(values[name]) and values[name] >= 0
        ):
            raise UserError(f"{source}: {name} must be a number ≥ 0, got {params[name]!r}")
    return SpeedFit(
        model=model,
        params=values,  # in the model's order, which `step_time` relies on
        error_pct=math.nan,  # nothing measured
        max_error_pct=math.nan,
        n_points=0,
        converged=True,
        message="coefficients given, not fitted",
        typical_batch=batch,
        basis=f"{model} with the coefficients given in {source}, not fitted",
    )


def check_model(model: str) -> None:
    if model not in MODELS:
        raise UserError(f"unknown speed model '{model}'", f"choose one of {', '.join(MODELS)}")


def fit(data: SpeedData, model: str) -> SpeedFit:
    check_model(model)
    return fit_pollux(data) if model == "pollux" else fit_optimus(data, model)


def _matches(value: Any, wanted: str) -> bool:
    """A summary value equals a value typed on the command line (2 matches 2.0)."""
    try:
        return float(value) == float(wanted)
    except (TypeError, ValueError):
        return str(value) == wanted


def from_study(store: Store, study_id: int, where: dict[str, str] | None = None) -> SpeedData:
    """The finished runs of a study (e.g. `dlperf scale`), one measurement per run, read from
    each run's summary: workers, global_batch, step_time_s and optionally ps, nodes,
    sync_time_s. Failed, killed and unfinished points are left out; `where` keeps the runs
    whose summary holds those values. A study that mixes several settings (comm, strategy,
    bucket_mb) must be narrowed to one."""
    store.get_study(study_id)
    source = f"study {study_id}"
    runs = [
        r
        for r in store.list_runs(study_id=study_id)
        if r.status == "finished"
        and all(_matches(r.summary.get(k), v) for k, v in (where or {}).items())
    ]
    if not runs:
        raise UserError(
            f"{source} has no finished runs" + (" that match --where" if where else ""),
            "see `dlperf runs list`",
        )
    settings = sorted({tuple(str(r.summary.get(k)) for k in SETTINGS) for r in runs})
    if len(settings) > 1:
        listed = "; ".join("/".join(s) for s in settings)
        i = next(i for i in range(len(SETTINGS)) if len({s[i] for s in settings}) > 1)
        raise UserError(
            f"{source} mixes {len(settings)} settings of {'/'.join(SETTINGS)} ({listed})",
            f"fit one at a time, e.g. --where {SETTINGS[i]}={settings[0][i]}",
        )
    return from_rows([r.summary for r in runs], source)


def config_keys(model: str) -> tuple[str, str, str]:
    """What places a configuration: Optimus's models count parameter servers, Pollux's nodes."""
    return ("workers", "nodes", "batch") if model == "pollux" else ("workers", "ps", "batch")


def predict_at(fit: SpeedFit, text: str) -> dict[str, float]:
    """The step time and samples/s at a configuration such as 'workers=8,ps=2' (1 node or
    server unless given; the batch is global, by default `fit.default_batch`)."""
    keys = config_keys(fit.model)
    at = parse_numbers(text, "--predict", "--predict workers=8,ps=2")
    if set(at) - set(keys) or "workers" not in at:
        raise UserError(
            f"--predict for {fit.model} takes {', '.join(f'{k}=N' for k in keys)} "
            f"(workers required), got {text!r}"
        )
    counts = {k: v for k, v in at.items() if k != "batch"}
    if any(v < 1 or not v.is_integer() for v in counts.values()) or at.get("batch", 1) <= 0:
        raise UserError(
            f"--predict {text!r}: workers, ps and nodes are whole numbers ≥ 1, batch is > 0"
        )
    at = {"ps": 1.0, "nodes": 1.0, "batch": fit.default_batch(at["workers"]), **at}
    t = float(step_time(fit, at["workers"], at["batch"], at["ps"], at["nodes"])[0])
    return {**{k: at[k] for k in keys}, "step_time_s": t, "samples_per_s": at["batch"] / t}


def measured_at(data: SpeedData, at: dict[str, float]) -> float | None:
    """The median measured step time at exactly this configuration, if the data have it
    (a prediction there is an in-sample fit, and its error says how well the model fits)."""
    hit = (data.workers == at["workers"]) & np.isclose(data.global_batch, at["batch"])
    for key, column in (("ps", data.ps), ("nodes", data.nodes)):
        if key in at and column is not None:
            hit &= column == at[key]
    return float(np.median(data.step_time[hit])) if hit.any() else None


def with_measurement(prediction: dict[str, float], data: SpeedData) -> dict[str, Any]:
    """A prediction with the measured step time at its configuration and its error (null
    when the data hold no such configuration)."""
    measured = measured_at(data, prediction)
    error = (prediction["step_time_s"] / measured - 1) * 100 if measured else None
    return {**prediction, "measured_step_time_s": measured, "error_pct": error}


@dataclass
class SpeedReport:
    fit: SpeedFit
    predictions: list[dict[str, Any]]  # one per configuration asked for (`predict_at`)

    @property
    def warnings(self) -> list[str]:
        fit = self.fit
        failed = f"the {fit.model} fit did not converge ({fit.message}); best attempt shown"
        return ([] if fit.converged else [failed]) + fit.notes

    def to_dict(self) -> dict[str, Any]:
        """As `converge speed fit --json` prints it and `converge plan --speed` reads it."""
        meanings = MEANINGS[self.fit.model]
        return {**asdict(self.fit), "meanings": meanings, "predictions": self.predictions}


def fit_measured(
    model: str,
    open_store: Callable[[], Store],
    csv: Path | None = None,
    study_id: int | None = None,
    where: dict[str, str] | None = None,
    predict: list[str] | None = None,
) -> SpeedReport:
    """Fit `model` to a speed table (`csv`) or to a study's runs (`study_id`, narrowed by
    `where`, from the store `open_store` opens), and predict the configurations `predict`."""
    if (study_id is None) == (csv is None):
        raise UserError("give STUDY_ID or --csv FILE (not both)")
    if where and study_id is None:
        raise UserError("--where selects runs of a study: give STUDY_ID")
    check_model(model)
    if csv is not None:
        data, source = load_csv(csv), f"{csv.name}"
    else:
        assert study_id is not None  # one of the two, checked above
        store = open_store()
        study = store.get_study(study_id)
        data = from_study(store, study_id, where)
        source = f"study {study_id} ({study['kind']}, {study['created']})"
    result = fit(data, model)
    result.basis = (
        f"{model} fitted to {result.n_points} measured step times of {source}; in-sample "
        f"error {result.error_pct:.1f}% mean, {result.max_error_pct:.1f}% max"
    )
    predictions = [with_measurement(predict_at(result, text), data) for text in predict or []]
    return SpeedReport(result, predictions)
