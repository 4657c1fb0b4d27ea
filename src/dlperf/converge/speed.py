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

Ring (`ring`): Pollux's T_grad, γ and fit, with the sync time of a ring all-reduce over K
workers (Patarasuk & Yuan 2009; NCCL's ring): every worker sends 2(K − 1)/K of the gradient
bytes, in 2(K − 1) steps of one hop each,
    T_sync = b·2(K − 1)/K + h·2(K − 1)    (0 when K = 1)
with b = bytes/bandwidth and h the latency of one hop, one (b, h) within a node and another
across nodes (the ring's slowest link sets every step). The bandwidth term tends to 2b as K
grows, so the sync time levels off where Pollux's α_s + β_s·(K − 2) keeps rising: fitted to
Pollux's placements of at most 4 GPUs, Pollux's form predicts 16 GPUs 103% too slow.

Every fitted coefficient carries a 90% interval (linearised least squares: ±1.645 standard
errors, on log θ for Pollux), or the reason the measurements cannot determine it (e.g. no
study of 1 and 2 workers says anything of the sync time per worker beyond 2). A prediction
that rests on such a coefficient is refused unless the coefficient is fixed (`fixed`, e.g. to a
paper's value); one outside the measured workers, nodes, servers or batches says how far
outside it is and what it assumes.

Speed tables have one row per measured configuration with the columns `workers`, `ps`
(Optimus), `nodes` (Pollux), `global_batch`, `step_time_s` and, for Pollux, `sync_time_s`.
The Pollux traces' own columns (`placement` or `num_nodes`/`num_replicas`, `local_bsz`,
`step_time`, `sync_time`) are read as well, and so are the summaries of the finished runs of
a `dlperf scale` study (`ps` = 0 there: all-reduce).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy.optimize import least_squares, nnls

from dlperf.converge.tables import header, numbers, read_numbers, read_table
from dlperf.errors import UserError
from dlperf.parsing import parse_numbers

if TYPE_CHECKING:
    from dlperf.store import RunStore

MODELS = ("optimus-sync", "optimus-async", "pollux", "ring")
# The all-reduce models: compute time and a sync time by link, placed by workers and nodes.
ALLREDUCE = ("pollux", "ring")
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
    "ring": {
        "alpha_g": "gradient time, fixed part (s)",
        "beta_g": "gradient time per sample of local batch (s)",
        "bw_intra": "ring all-reduce within one node: bytes/bandwidth (s, ×2(K−1)/K)",
        "hop_intra": "ring all-reduce within one node: latency of one hop (s, ×2(K−1))",
        "bw_inter": "ring all-reduce across nodes: bytes/bandwidth (s, ×2(K−1)/K)",
        "hop_inter": "ring all-reduce across nodes: latency of one hop (s, ×2(K−1))",
        "gamma": "overlap of compute and sync (1 none, larger more)",
    },
}


# Optimus: what must vary, independently of the other terms, to determine each coefficient.
VARIES = {
    "optimus-sync": {
        "theta0": "the batch per worker M/w",
        "theta1": "M/w, w/p, w and p (the fixed time is what none of them explains)",
        "theta2": "the workers per server w/p",
        "theta3": "the worker count w",
        "theta4": "the server count p",
    },
    "optimus-async": {
        "theta0": "w/p, w and p (the fixed time is what none of them explains)",
        "theta1": "the workers per server w/p",
        "theta2": "the worker count w",
        "theta3": "the server count p",
    },
}
UNDETERMINED = "not identifiable from these points: needs runs "
Z90 = 1.6448536269514722  # a two-sided 90% interval is ±1.645 standard errors


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
    # 90% interval of each coefficient the data determine (None: no residual to estimate it)
    intervals: dict[str, list[float] | None] = field(default_factory=dict)
    undetermined: dict[str, str] = field(default_factory=dict)  # coefficient -> why
    fixed: dict[str, float] = field(default_factory=dict)  # set by the user, not fitted
    # measured [least, most] of workers, ps or nodes, and batch (Pollux: per worker)
    span: dict[str, list[float]] = field(default_factory=dict)
    # the measured configurations [workers, ps or nodes, global batch]: what tells a reader of
    # the fit (`converge plan`) which of Optimus's predictions they determine
    measured: list[list[float]] = field(default_factory=list)

    def default_batch(self, workers: float) -> float:
        """The global batch to predict at when none is given: Optimus's models take a fixed
        global batch; Pollux's the usual per-worker batch on every worker."""
        if self.model in ALLREDUCE:
            return self.typical_local_batch * workers
        return self.typical_batch


# A placement names the GPUs on each node, one digit a node (Pollux's traces, e.g. 1244):
# read as text, since through a float "1.5" was 1, "10" a node of 0 GPUs, and 17 digits past
# a float's 15-16 a different placement.
_PLACEMENT = re.compile(r"[1-9]+")
# The fix for a global batch below the workers, a row's or --predict's.
LEAST_BATCH = "a data-parallel step takes at least one sample a worker: the batch is the global one"
# The columns each key of `SpeedData` is read from, by table shape, for the lines that name one.
OWN_COLUMNS = {
    "workers": "workers",
    "ps": "ps",
    "nodes": "nodes",
    "batch": "global_batch",
    "step": "step_time_s",
    "sync": "sync_time_s",
}
TRACE_COLUMNS = {
    **OWN_COLUMNS,
    "workers": "num_replicas",
    "nodes": "num_nodes",
    "batch": "local_bsz",
    "step": "step_time",
    "sync": "sync_time",
}


# The longest time a table may hold: a fit squares the times and sums them, within float64's
# range (about 1.8e308), as a curve's values are (`curve.LARGEST`). A step of 1e308 s was
# blamed on a --fix that was not given (Optimus), or scipy's "Residuals are not finite"
# (Pollux), break-it round 30, C11.
LONGEST = 1e150


def load_csv(path: Path) -> SpeedData:
    """A speed table in dlperf's shape or one of the Pollux traces (placements, scalability),
    each row checked, a bad one named by its line."""
    columns = header(path)
    trace = ["local_bsz", "step_time", "sync_time"]
    if "placement" in columns:
        lines, texts = read_table(path, ["placement", *trace])
        c = {name: numbers(path, name, lines, texts[name]) for name in trace}
        placements = zip(lines, texts["placement"], strict=True)
        digits = [_placement(f"{path}:{line}", p) for line, p in placements]
        c["num_nodes"] = [float(len(d)) for d in digits]
        c["num_replicas"] = [float(sum(map(int, d))) for d in digits]
    elif "num_replicas" in columns:
        lines, c = read_numbers(path, ["num_nodes", "num_replicas", *trace])
    else:
        lines, c = read_numbers(
            path, ["workers", "global_batch", "step_time_s"], ("ps", "nodes", "sync_time_s")
        )
        return from_rows(
            [dict(zip(c, values, strict=True)) for values in zip(*c.values(), strict=True)],
            str(path),
            lines,
        )
    workers = np.asarray(c["num_replicas"], float)
    data = SpeedData(
        workers=workers,
        global_batch=np.asarray(c["local_bsz"], float) * workers,
        step_time=np.asarray(c["step_time"], float),
        nodes=np.asarray(c["num_nodes"], float),
        sync_time=np.asarray(c["sync_time"], float),
    )
    _check_rows(data, lambda i: f"{path}:{lines[i]}", TRACE_COLUMNS)
    return data


def _placement(where: str, text: str | None) -> str:
    """A placement's digits, one node each; a UserError naming `where` for anything else."""
    digits = (text or "").strip()
    if _PLACEMENT.fullmatch(digits) is None:
        raise UserError(
            f"{where}: placement {text!r} is not a placement",
            "one digit 1-9 per node, the GPUs on it, e.g. 1244",
        )
    return digits


def from_rows(rows: list[dict[str, Any]], source: str, lines: list[int] | None = None) -> SpeedData:
    """A speed table from dicts with the keys workers, global_batch, step_time_s and
    optionally ps, nodes, sync_time_s (e.g. the summaries of a `dlperf scale` study); a bad
    row is named by its line of a file (`lines`), else by its number."""
    if not rows:
        raise UserError(f"{source} has no measurements")

    def row_at(i: int) -> str:
        return f"{source}:{lines[i]}" if lines is not None else f"{source}: row {i + 1}"

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
            raise UserError(f"{row_at(i)} has no {', '.join(missing)}")

    def column(key: str) -> np.ndarray:
        values = np.asarray([float(row[key]) for row in rows], float)
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
    _check_rows(data, row_at, OWN_COLUMNS)
    return data


def _check_rows(data: SpeedData, row_at: Callable[[int], str], names: dict[str, str]) -> None:
    """Each row's measurement is one that can be: a UserError naming the first row that is
    not (`row_at`) and its column (`names`, by key). Workers, servers and nodes are whole
    numbers, as `--predict` takes them (a table of 1.5 workers is a mistake: a column
    shifted, a mean of runs), and a node runs at least one worker; batches (whole numbers of
    samples) and step times are above 0 and sync times not below (a batch of 0 was fitted,
    one of -32 was scipy's "Residuals are not finite", one of 32.5 fitted)."""

    for key, column, least in (("workers", data.workers, 1), ("ps", data.ps, 0),
                               ("nodes", data.nodes, 1)):  # fmt: skip
        if column is None:
            continue
        bad = np.flatnonzero((column != np.round(column)) | (column < least))
        if bad.size:
            raise UserError(
                f"{row_at(int(bad[0]))}: {names[key]} must be a whole number ≥ {least}, "
                f"got {column[bad[0]]:g}"
            )
    if data.nodes is not None:
        bad = np.flatnonzero(data.nodes > data.workers)
        if bad.size:
            i = int(bad[0])
            raise UserError(
                f"{row_at(i)}: {data.nodes[i]:g} nodes for {data.workers[i]:g} workers",
                "every node runs at least one worker",
            )
    # Pollux's traces give the batch per worker: shown as given.
    batch = data.global_batch / data.workers if names["batch"] == "local_bsz" else data.global_batch
    for key, column, strict in (("batch", batch, True), ("step", data.step_time, True),
                                ("sync", data.sync_time, False)):  # fmt: skip
        if column is None:
            continue
        bad = np.flatnonzero(column <= 0 if strict else column < 0)
        if bad.size:
            i = int(bad[0])
            raise UserError(
                f"{row_at(i)}: {names[key]} must be {'>' if strict else '≥'} 0, got {column[i]:g}"
            )
        if key != "batch" and (bad := np.flatnonzero(column > LONGEST)).size:
            i = int(bad[0])
            raise UserError(
                f"{row_at(i)}: {names[key]} {column[i]:g} is too large to fit: a fit squares the "
                "times, past what a float holds",
                "the column is seconds: a typo, or another unit?",
            )
        if key != "batch":
            continue
        # A batch counts samples: 32.5 is a typo or a mean, not a measurement (as workers are)
        bad = np.flatnonzero(column != np.round(column))
        if bad.size:
            i = int(bad[0])
            raise UserError(f"{row_at(i)}: {names[key]} must be a whole number, got {column[i]:g}")
    # A data-parallel step gives each worker at least one sample (Pollux's local_bsz, a whole
    # number above 0, does): a global batch of 4 over 16 workers was fitted.
    bad = np.flatnonzero(data.global_batch < data.workers)
    if bad.size:
        i = int(bad[0])
        raise UserError(
            f"{row_at(i)}: {names['batch']} {data.global_batch[i]:g} is less than "
            f"{names['workers']} {data.workers[i]:g}",
            LEAST_BATCH,
        )


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
        return np.asarray(_optimus_design(fit.model, w, p, m) @ theta)
    return _pollux_time(theta, n, w, m / w, fit.model)[1]


def steps_per_second(fit: SpeedFit, workers: Any, global_batch: Any, ps: Any = 1.0) -> np.ndarray:
    """Optimus's f(p, w): model updates per second (async: all workers' updates together)."""
    return rate(fit, workers, step_time(fit, workers, global_batch, ps))


def rate(fit: SpeedFit, workers: Any, step_time_s: Any) -> np.ndarray:
    """Model updates per second at step time `step_time_s`: every worker's under
    optimus-async, one a step otherwise."""
    t = np.asarray(step_time_s, float)
    return np.asarray(workers, float) / t if fit.model == "optimus-async" else 1.0 / t


def _in_rowspace(design: np.ndarray, row: np.ndarray) -> bool:
    """Whether `row` · θ is determined by `design` · θ (estimable): `row` is a combination of
    the design's rows. Columns are scaled to 1 first, so units do not set the tolerance."""
    scale = np.maximum(np.abs(design).max(axis=0), 1e-300)
    a, b = design / scale, np.atleast_2d(row) / scale
    return bool(np.linalg.matrix_rank(np.vstack([a, b])) == np.linalg.matrix_rank(a))


def _fitted(
    data: SpeedData, model: str, theta: np.ndarray, predicted: np.ndarray, **found: Any
) -> SpeedFit:
    """The fit of `model` to `data` at θ, with the error of its `predicted` step times, the
    data's typical batches, measured span and configurations, and what the fit `found`."""

    def typical(batch: np.ndarray) -> float:
        values, counts = np.unique(batch, return_counts=True)
        return float(values[np.argmax(counts)])

    pollux = model in ALLREDUCE
    places = data.nodes if pollux else data.ps
    assert places is not None  # checked by the fit
    local = data.global_batch / data.workers
    # The measured range of each: Pollux's batch is the batch per worker.
    keys = ("workers", "nodes", "batch per worker") if pollux else ("workers", "ps", "batch")
    ranged = np.column_stack([data.workers, places, local if pollux else data.global_batch])
    low, high = ranged.min(axis=0), ranged.max(axis=0)
    rel = np.abs(predicted - data.step_time) / data.step_time * 100.0
    return SpeedFit(
        model=model,
        params=dict(zip(MEANINGS[model], map(float, theta), strict=True)),
        error_pct=float(rel.mean()),
        max_error_pct=float(rel.max()),
        n_points=len(data),
        typical_batch=typical(data.global_batch),
        typical_local_batch=typical(local),
        span={k: [float(a), float(b)] for k, a, b in zip(keys, low, high, strict=True)},
        measured=np.column_stack([data.workers, places, data.global_batch]).tolist(),
        **found,
    )


def _check_names(model: str, keys: Iterable[str], where: str) -> list[str]:
    """`model`'s coefficient names; UserError naming any of `keys` that is not one."""
    names = list(MEANINGS[model])
    unknown = [k for k in keys if k not in names]
    if unknown:
        raise UserError(
            f"{where}: {model} has no {', '.join(unknown)}",
            f"its coefficients are {', '.join(names)}",
        )
    return names


def fit_optimus(data: SpeedData, model: str, fixed: dict[str, float]) -> SpeedFit:
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
    names = list(MEANINGS[model])
    design = _optimus_design(model, data.workers, data.ps, data.global_batch)
    free = [i for i, name in enumerate(names) if name not in fixed]
    if len(data) < len(free):
        raise UserError(
            f"{len(data)} measurements are too few for {len(free)} coefficients of {model}"
        )
    theta = np.array([fixed.get(name, 0.0) for name in names])
    x = design[:, free]
    with np.errstate(over="ignore", invalid="ignore"):
        held = design @ theta  # the fixed terms' step time; what the free ones must explain:
        rest = data.step_time - held
        fits = bool(np.isfinite(rest @ rest))  # least squares' own sum, finite
    if not fits:
        i = int(np.argmax(np.where(np.isnan(rest), np.inf, np.abs(rest))))
        where = f"workers={data.workers[i]:g}, ps={data.ps[i]:g}, batch={data.global_batch[i]:g}"
        raise _unfit(model, fixed, where, float(held[i]), float(data.step_time[i]))
    theta[free], _ = nnls(x, rest)
    residual = design @ theta - data.step_time
    dof = len(data) - np.linalg.matrix_rank(x)
    # Linearised: the covariance of the unconstrained least squares at NNLS's solution.
    cov = float(residual @ residual) / dof * np.linalg.pinv(x.T @ x) if dof > 0 else None
    intervals: dict[str, list[float] | None] = {}
    undetermined = {}
    for j, i in enumerate(free):
        if not _in_rowspace(x, np.eye(len(free))[j]):
            undetermined[names[i]] = f"{UNDETERMINED}that vary {VARIES[model][names[i]]}"
        elif cov is not None:
            half = Z90 * math.sqrt(max(cov[j, j], 0.0))
            intervals[names[i]] = [max(theta[i] - half, 0.0), theta[i] + half]
        else:
            intervals[names[i]] = None
    notes = [] if dof > 0 else ["no residual left to estimate intervals from: measure more"]
    return _fitted(
        data,
        model,
        theta,
        design @ theta,
        converged=True,
        message="NNLS solved exactly",
        notes=notes,
        intervals=intervals,
        undetermined=undetermined,
        fixed=dict(fixed),
    )


def _unfit(
    model: str, fixed: dict[str, float], where: str, t: float, measured: float, what: str = "step"
) -> UserError:
    """The one line for values of --fix whose model time at a measured configuration (`where`)
    no fit can work with: not finite, 0, or so large its squared error overflows a float."""
    fixes = ",".join(f"{k}={v:g}" for k, v in fixed.items())
    why = "too large to fit" if t > 0 else "no step takes 0 s" if t == 0 else "not a number"
    hint = "fix each at a value of the size the measured times suggest, e.g. a paper's"
    if fixed.get("gamma", 1.0) > 10:
        hint = "γ = 10 already overlaps compute and sync nearly perfectly: fix gamma in 1-10"
    return UserError(
        f"--fix {fixes}: the {model} {what} time at {where} comes out {t:.3g} s against a "
        f"measured {measured:.3g} s: {why}",
        hint,
    )


def _sync_terms(model: str, workers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """What multiplies each of a link's two sync constants: Pollux's 1 and K − 2 (workers
    beyond 2); a ring's 2(K − 1)/K (bandwidth) and 2(K − 1) (hops)."""
    if model == "ring":
        return 2 * (workers - 1) / workers, 2 * (workers - 1)
    return np.ones_like(workers), np.maximum(workers - 2, 0)


def _pollux_time(
    theta: np.ndarray,
    nodes: np.ndarray,
    workers: np.ndarray,
    local: np.ndarray,
    model: str = "pollux",
) -> tuple[np.ndarray, np.ndarray]:
    """(T_grad, T_iter) for each configuration, the sync time by `model`'s form."""
    a_g, b_g, a_in, b_in, a_out, b_out, gamma = theta
    t_grad = a_g + b_g * local
    across = nodes > 1
    first, second = _sync_terms(model, workers)
    t_sync = np.where(across, a_out, a_in) * first + np.where(across, b_out, b_in) * second
    t_sync = np.where(workers > 1, t_sync, 0.0)
    return t_grad, (t_grad**gamma + t_sync**gamma) ** (1.0 / gamma)


# Each all-reduce model's pairs of constants a, b and where the runs must be that tell them
# apart: T_grad's a + b·x (x the batch per worker), then each link's sync constants (Pollux:
# a + b·x, x the workers beyond 2; ring: a·2(K − 1)/K + b·2(K − 1), x the workers K).
PAIRS = {
    "pollux": (
        ("alpha_g", "beta_g", "at 2 or more batch sizes per worker"),
        ("alpha_intra", "beta_intra", "on one node"),
        ("alpha_inter", "beta_inter", "across nodes"),
    ),
    "ring": (
        ("alpha_g", "beta_g", "at 2 or more batch sizes per worker"),
        ("bw_intra", "hop_intra", "on one node"),
        ("bw_inter", "hop_inter", "across nodes"),
    ),
}


@dataclass
class _Pair:
    """What measurements at the values `seen` of x determine of a + b·x."""

    seen: set[float]
    a: bool  # a is determined (or fixed)
    b: bool

    def known_at(self, x: float) -> bool:
        """Whether a + b·x is determined: both terms, or measured at this very x."""
        return (self.a and (self.b or x == 0)) or x in self.seen


def _pair(seen: set[float], fixed_a: bool, fixed_b: bool, ring: bool = False) -> _Pair:
    """Pollux's a + b·x: a alone at x = 0. A ring's two terms are both nonzero at every K ≥ 2,
    so one worker count tells only their sum there."""
    if ring:
        a = fixed_a or len(seen) >= 2 or (fixed_b and bool(seen))
        b = fixed_b or len(seen) >= 2 or (fixed_a and bool(seen))
        return _Pair(seen, a, b)
    a = fixed_a or len(seen) >= 2 or (fixed_b and bool(seen)) or seen == {0.0}
    b = fixed_b or len(seen) >= 2 or (fixed_a and any(x > 0 for x in seen))
    return _Pair(seen, a, b)


def _link_x(model: str, workers: np.ndarray) -> np.ndarray:
    """The x of a link's sync pair: Pollux's workers beyond 2, a ring's workers."""
    return workers if model == "ring" else np.maximum(workers - 2, 0)


def _pollux_pairs(data: SpeedData, fixed: dict[str, float], model: str) -> dict[str, _Pair]:
    """Each pair's status, by the name of its a: x is the batch per worker for T_grad, and
    `_link_x` of the workers for the sync time of runs on one node and across nodes."""
    assert data.nodes is not None
    n, w = data.nodes, data.workers
    x = _link_x(model, w)
    grad, intra, inter = PAIRS[model]
    xs = {grad[0]: data.global_batch / w, intra[0]: x[(w > 1) & (n == 1)], inter[0]: x[n > 1]}
    return {
        a: _pair(set(xs[a].tolist()), a in fixed, b in fixed, model == "ring" and a != grad[0])
        for a, b, _ in PAIRS[model]
    }


def _pollux_undetermined(pairs: dict[str, _Pair], gamma: bool, model: str) -> dict[str, str]:
    """Why each coefficient the measurements leave open is open (γ: whether any run had
    several workers, or γ was fixed)."""
    why: dict[str, str] = {}
    for a, b, where in PAIRS[model]:
        pair = pairs[a]
        if pair.a and pair.b:
            continue
        # Open pairs were measured at one x at most (two determine both terms).
        if not pair.seen and model == "ring" and a != "alpha_g":
            opened = dict.fromkeys((a, b), f"at 2 or more worker counts {where}")
        elif not pair.seen:
            runs = "with 2 or more workers on one node" if a == "alpha_intra" else where
            opened = {a: runs, b: f"with 3 or more workers {where}"}
        elif a == "alpha_g":
            (batch,) = pair.seen
            text = f"{where} (all at {batch:g}; only their sum there is known)"
            opened = {a: text, b: text}
        elif model == "ring":
            (workers,) = pair.seen
            text = (
                f"at 2 or more worker counts {where} (all at {workers:g} workers: the sync time "
                "there is known, not how it splits between bandwidth and per-hop latency)"
            )
            opened = {a: text, b: text}
        else:
            (beyond,) = pair.seen
            counts = "3 or more workers" if beyond == 0 else "2 worker counts"
            opened = {
                a: f"at 2 worker counts {where} (all at {beyond + 2:g} workers)",
                b: f"with {counts} {where} (all at {beyond + 2:g} workers)",
            }
        known = {a: pair.a, b: pair.b}
        why |= {k: UNDETERMINED + v for k, v in opened.items() if not known[k]}
    if not gamma:
        why["gamma"] = f"{UNDETERMINED}with 2 or more workers"
    return why


def fit_pollux(data: SpeedData, fixed: dict[str, float], model: str = "pollux") -> SpeedFit:
    """Pollux's model, or with `model` "ring" its sync time as a ring all-reduce's."""
    if data.nodes is None or data.sync_time is None:
        raise UserError(
            f"{model} needs 'nodes' and 'sync_time_s' for every measurement",
            "a Pollux trace, or a `dlperf scale` study that timed compute on its own",
        )
    n, w = data.nodes, data.workers
    names = list(MEANINGS[model])
    pairs = _pollux_pairs(data, fixed, model)
    several = bool(np.any(w > 1))
    undetermined = _pollux_undetermined(pairs, several or "gamma" in fixed, model)
    # A coefficient no row informs stays where it starts: a fitted value would be noise.
    informed = {"alpha_g": True, "beta_g": True, "gamma": several}
    for a, b, _ in PAIRS[model][1:]:
        # A link's sync time: runs on it (Pollux's b: beyond 2 workers; a ring's hops: any).
        seen = pairs[a].seen
        informed |= {a: bool(seen), b: bool(seen) if model == "ring" else any(x > 0 for x in seen)}
    free = np.array([informed[k] and k not in fixed for k in names])
    # At one batch per worker only α_g + β_g·m is determined, neither alone: one coefficient,
    # not two (1-4 workers at one batch were refused as too few for 5).
    grad = pairs[PAIRS[model][0][0]]
    determined = int(free.sum()) - (0 if grad.a or grad.b else 1)
    if len(data) < determined:
        raise UserError(
            f"{len(data)} measurements are too few for the {determined} coefficients of "
            f"{model} they determine",
            "measure more worker counts or batch sizes",
        )
    local = data.global_batch / w
    grad = data.step_time - data.sync_time
    if (bad := np.flatnonzero(grad <= 0)).size:
        i = int(bad[0])
        raise UserError(
            "sync time must be shorter than step time in every row: measurement "
            f"{i + 1} has {data.sync_time[i]:g} s of {data.step_time[i]:g} s"
        )
    if len(np.unique(local)) > 1:
        b_g, a_g = np.polyfit(local, grad, 1)
    else:
        # Weak scaling at one local batch: only α_g + β_g·m is determined, so start halfway.
        b_g, a_g = float(np.median(grad)) / 2 / local[0], float(np.median(grad)) / 2
    # A start inside the bounds even when no sync time was exposed (fully overlapped).
    sync0 = float(np.median(data.sync_time[w > 1])) if several else 0.0
    sync0 = max(sync0, 1e-3 * float(np.median(data.step_time)))
    # A ring's hops start small: its bandwidth term is most of a measured sync time.
    per = sync0 / (100 if model == "ring" else 10)
    start = np.array([max(a_g, 1e-4), max(b_g, 1e-6), sync0, per, sync0, per, 1.5])
    for _, name, _ in PAIRS[model][1:]:
        if not informed[name]:
            start[names.index(name)] = 0.0  # no row beyond 2 workers: no per-worker term seen
    theta = np.array([fixed.get(k, v) for k, v in zip(names, start, strict=True)])
    lower = np.array([1e-8] * 6 + [1.0])[free]
    upper = np.array([np.inf] * 6 + [10.0])[free]

    def full(x: np.ndarray) -> np.ndarray:
        out = theta.copy()
        out[free] = x
        return out

    def residuals(x: np.ndarray) -> np.ndarray:
        t_grad, t_iter = _pollux_time(full(x), n, w, local, model)
        return np.concatenate([np.log(t_grad / grad), np.log(t_iter / data.step_time)])

    x0 = np.clip(theta[free], lower, upper)
    if fixed:  # values of --fix may put the times where they cannot be computed
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            t_grad, t_iter = _pollux_time(full(x0), n, w, local, model)
            bad_grad = ~np.isfinite(np.log(t_grad / grad))
            bad_iter = ~np.isfinite(np.log(t_iter / data.step_time))
        if np.any(bad_grad | bad_iter):
            i = int(np.flatnonzero(bad_grad | bad_iter)[0])
            where = f"workers={w[i]:g}, nodes={n[i]:g}, batch={data.global_batch[i]:g}"
            if bad_iter[i]:
                raise _unfit(model, fixed, where, float(t_iter[i]), float(data.step_time[i]))
            raise _unfit(model, fixed, where, float(t_grad[i]), float(grad[i]), "gradient")
    result = least_squares(residuals, x0, bounds=(lower, upper), x_scale="jac")
    theta = full(result.x)
    notes = []
    # A link never measured stays undetermined, but those who read only the values (e.g.
    # `converge plan`) get the measured link's constants rather than start values.
    _, (a_intra, b_intra, _), (a_inter, b_inter, _) = PAIRS[model]
    links = {"intra": (a_intra, b_intra), "inter": (a_inter, b_inter)}
    for link, other in (("inter", "intra"), ("intra", "inter")):
        if pairs[links[link][0]].seen or not pairs[links[other][0]].seen:
            continue
        copied = [k for k in links[link] if k not in fixed]
        for name in copied:
            theta[names.index(name)] = theta[names.index(name.replace(link, other))]
        if copied:
            notes.append(f"{', '.join(copied)} copied from the other link: no {link}-node runs")
    intervals, barely = _log_intervals(result, theta, free, names, undetermined)
    undetermined |= barely
    return _fitted(
        data,
        model,
        theta,
        _pollux_time(theta, n, w, local, model)[1],
        converged=bool(result.success),
        message=str(result.message),
        notes=notes,
        intervals=intervals,
        undetermined=undetermined,
        fixed=dict(fixed),
    )


def _log_intervals(
    result: Any,
    theta: np.ndarray,
    free: np.ndarray,
    names: list[str],
    undetermined: dict[str, str],
) -> tuple[dict[str, list[float] | None], dict[str, str]]:
    """90% intervals of the free, determined coefficients from the Jacobian at the solution,
    on log θ (so they stay positive and hold their point): θ·exp(±1.645·se(log θ)); and the
    coefficients the measured step times barely depend on (an interval wider than a factor
    of 10^6 either way, or a direction the residuals do not see at all), with why.
    A coefficient held at its lower bound (e.g. a ring's hop latency the data put at 0) has
    no log to take: its interval is [bound, θ + 1.645·se(θ)], on θ itself."""
    # Active at its lower bound: the point lies on the bound, not inside it.
    pinned = np.asarray(result.active_mask) < 0
    # d residual / d log θ, and d residual / d θ for the pinned ones.
    jac = np.asarray(result.jac) * np.where(pinned, 1.0, theta[free])
    dof = len(result.fun) - int(free.sum())
    out: dict[str, list[float] | None] = {}
    barely: dict[str, str] = {}
    _, sv, vt = np.linalg.svd(jac, full_matrices=False)
    # Variance of each log θ; a direction with no singular value has infinite variance (a
    # pseudo-inverse would give it none, and a zero-width interval).
    blind = sv <= 1e-9 * sv.max()
    weight = vt.T**2
    var = weight[:, ~blind] @ (1.0 / sv[~blind] ** 2)
    var = np.where((weight[:, blind] > 1e-12).any(axis=1), np.inf, var)
    for j, name in enumerate(k for k, on in zip(names, free, strict=True) if on):
        if name in undetermined:
            continue
        value = float(theta[names.index(name)])
        if dof <= 0:
            out[name] = None
            continue
        half = Z90 * math.sqrt(float(result.fun @ result.fun) / dof * var[j])
        if pinned[j] and math.isfinite(half):
            out[name] = [value, min(value + half, 10.0) if name == "gamma" else value + half]
            continue
        if not half <= math.log(1e6):
            barely[name] = f"{UNDETERMINED}in which it moves the step time (these barely do)"
            continue
        spread = math.exp(half)
        low, high = value / spread, value * spread
        if name == "gamma":  # γ lives in [1, 10]
            low, high = max(low, 1.0), min(high, 10.0)
        out[name] = [low, high]
    return out, barely


def given(model: str, params: dict[str, Any], source: str, batch: float = 0.0) -> SpeedFit:
    """A speed model whose coefficients are given, not fitted (e.g. a paper's): every one of
    `model`'s, each a number ≥ 0, in any order; `batch` the global batch to predict at."""
    check_model(model)
    names = _check_names(model, params, source)
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


def fit(data: SpeedData, model: str, fixed: dict[str, float] | None = None) -> SpeedFit:
    """`model` fitted to `data`, the coefficients in `fixed` held at their values."""
    check_model(model)
    fixed = fixed or {}
    names = _check_names(model, fixed, "--fix")
    if set(fixed) == set(names):
        raise UserError(f"--fix gives every coefficient of {model}: nothing is left to fit")
    for name, value in fixed.items():
        low = 1.0 if name == "gamma" else 0.0
        if not value >= low:
            raise UserError(f"--fix: {name} must be ≥ {low:g}, got {value:g}")
    if model in ALLREDUCE:
        return fit_pollux(data, fixed, model)
    return fit_optimus(data, model, fixed)


def _matches(value: Any, wanted: str) -> bool:
    """A summary value equals a value typed on the command line (2 matches 2.0)."""
    try:
        return float(value) == float(wanted)
    except (TypeError, ValueError):
        return str(value) == wanted


def from_study(store: RunStore, study_id: int, where: dict[str, str] | None = None) -> SpeedData:
    """The finished runs of a study (e.g. `dlperf scale`), one measurement per run, read from
    each run's summary: workers, global_batch, step_time_s and optionally ps, nodes,
    sync_time_s. Failed, killed and unfinished points are left out; `where` keeps the runs
    whose summary holds those values. A study that mixes several settings (comm, strategy,
    bucket_mb) must be narrowed to one."""
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
    return ("workers", "nodes", "batch") if model in ALLREDUCE else ("workers", "ps", "batch")


# What a prediction beyond the measured range of each key takes for granted, by model family.
ASSUMES = {
    "optimus": {
        "workers": "that each θ term stays linear in w, w/p and M/w",
        "ps": "that the per-server terms stay linear in p and w/p",
        "batch": "that compute time stays linear in the batch per worker M/w",
    },
    "pollux": {
        "workers": "that sync time grows linearly with the workers beyond 2 and overlaps "
        "compute as measured (γ)",
        "nodes": "that the across-node constants hold for any number of nodes",
        "batch per worker": "that gradient time stays linear in the batch per worker "
        "(α_g + β_g·m: no memory limit, no change of kernels)",
    },
    "ring": {
        "workers": "that sync time follows a ring all-reduce (the fitted bandwidth time "
        "×2(K−1)/K plus the fitted hop latency ×2(K−1)) and overlaps compute as measured (γ)",
        "nodes": "that the across-node constants hold for any number of nodes (one ring "
        "through every node's link)",
        "batch per worker": "that gradient time stays linear in the batch per worker "
        "(α_g + β_g·m: no memory limit, no change of kernels)",
    },
}


def rests_on(fit: SpeedFit, at: dict[str, float], data: SpeedData | None = None) -> list[str]:
    """The coefficients the measurements leave undetermined that a prediction at `at` needs:
    for Optimus, its measured configurations (`fit.measured`, also in a fit read back from
    its JSON) stand for them, as its estimability depends on nothing else (every undetermined
    coefficient when it records none); for Pollux, the `data` fitted."""
    if not fit.undetermined:
        return []
    names = list(MEANINGS[fit.model])
    if fit.model.startswith("optimus"):
        if not fit.measured:
            return list(fit.undetermined)
        free = [i for i, k in enumerate(names) if k not in fit.fixed]
        design = _optimus_design(fit.model, *np.array(fit.measured, float).T)[:, free]
        values = (np.array([at[k]]) for k in ("workers", "ps", "batch"))
        row = _optimus_design(fit.model, *values)[0, free]
        # Estimable: the row is a combination of measured rows, though its terms may not be.
        if _in_rowspace(design, row):
            return []
        return [names[i] for i, v in zip(free, row, strict=True)
                if names[i] in fit.undetermined and v != 0]  # fmt: skip
    assert data is not None  # a Pollux or ring fit's callers have its data
    w, local = at["workers"], at["batch"] / at["workers"]
    pairs = _pollux_pairs(data, fit.fixed, fit.model)
    several = bool(np.any(data.workers > 1)) or "gamma" in fit.fixed
    structural = _pollux_undetermined(pairs, several, fit.model)
    needed = [("alpha_g", "beta_g", local)]
    if w > 1:
        a, b, _ = PAIRS[fit.model][1 if at["nodes"] == 1 else 2]
        needed.append((a, b, float(_link_x(fit.model, np.array(w)))))
    missing = ["gamma"] if w > 1 and "gamma" in structural else []
    for a, b, x in needed:
        if not pairs[a].known_at(x):
            missing += [k for k in (a, b) if k in structural and (k == a or x != 0)]
    # One the step times barely depend on matters only beyond them: inside, neither do the
    # predictions.
    if _outside(fit, at):
        uses = {a for a, _, _ in needed} | {b for _, b, x in needed if x != 0}
        uses |= {"gamma"} if w > 1 else set()
        missing += [k for k in fit.undetermined if k in uses and k not in structural]
    return missing


def _outside(fit: SpeedFit, at: dict[str, float]) -> list[str]:
    """How far outside the measured range each of the configuration's values lies, and what
    the prediction then assumes."""
    values = {**at, "batch per worker": at["batch"] / at["workers"]}
    notes = []
    for key, (least, most) in fit.span.items():
        value = values[key]
        if least <= value <= most:
            continue
        side = (
            f"{value / most:.3g}× the largest"
            if value > most
            else f"1/{least / value:.3g} of the smallest"
        )
        notes.append(
            f"{key} {value:g} is outside the measured {least:g}–{most:g} ({side}): "
            f"assumes {ASSUMES[fit.model.split('-')[0]][key]}"
        )
    return notes


def predict_at(fit: SpeedFit, text: str, data: SpeedData | None = None) -> dict[str, Any]:
    """The step time and samples/s at a configuration such as 'workers=8,ps=2' (1 node or
    server unless given; the batch is global, by default `fit.default_batch`), with notes on
    how far outside the measured range it lies. Refused when it rests on a coefficient that
    `data`, the measurements fitted, leave undetermined."""
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
    # checked after the default batch is filled in: a fixed global batch (Optimus's) is
    # below the workers asked for as readily as a given one
    said = "" if "batch" in at else ", the table's typical batch,"
    at = {"ps": 1.0, "nodes": 1.0, "batch": fit.default_batch(at["workers"]), **at}
    if at["batch"] < at["workers"]:
        raise UserError(
            f"--predict {text}: batch {at['batch']:g}{said} is less than workers {at['workers']:g}",
            LEAST_BATCH,
        )
    missing = rests_on(fit, at, data) if data is not None else []
    if missing:
        raise UserError(
            f"--predict {text}: rests on {missing[0]}, {fit.undetermined[missing[0]]}",
            f"measure such runs, or fix it with --fix {missing[0]}=VALUE, e.g. the paper's",
        )
    t = float(step_time(fit, at["workers"], at["batch"], at["ps"], at["nodes"])[0])
    return {**{k: at[k] for k in keys}, "step_time_s": t, "samples_per_s": at["batch"] / t,
            "outside": _outside(fit, at)}  # fmt: skip


def measured_at(data: SpeedData, at: dict[str, float]) -> float | None:
    """The median measured step time at exactly this configuration, if the data have it
    (a prediction there is an in-sample fit, and its error says how well the model fits)."""
    hit = (data.workers == at["workers"]) & np.isclose(data.global_batch, at["batch"])
    for key, column in (("ps", data.ps), ("nodes", data.nodes)):
        if key in at and column is not None:
            hit &= column == at[key]
    return float(np.median(data.step_time[hit])) if hit.any() else None


@dataclass
class SpeedReport:
    fit: SpeedFit
    predictions: list[dict[str, Any]]  # one per configuration asked for (`predict_at`)

    @property
    def warnings(self) -> list[str]:
        fit = self.fit
        failed = f"the {fit.model} fit did not converge ({fit.message}); best attempt shown"
        keys = config_keys(fit.model)
        outside = [
            f"prediction at {','.join(f'{k}={p[k]:g}' for k in keys)}: {note}"
            for p in self.predictions
            for note in p["outside"]
        ]
        return ([] if fit.converged else [failed]) + fit.notes + outside

    def to_dict(self) -> dict[str, Any]:
        """As `converge speed fit --json` prints it and `converge plan --speed` reads it."""
        meanings = MEANINGS[self.fit.model]
        return {**asdict(self.fit), "meanings": meanings, "predictions": self.predictions}


def fit_measured(
    model: str,
    open_store: Callable[[], RunStore],
    csv: Path | None = None,
    study_id: int | None = None,
    where: dict[str, str] | None = None,
    predict: list[str] | None = None,
    fixed: dict[str, float] | None = None,
) -> SpeedReport:
    """Fit `model` to a speed table (`csv`) or to a study's runs (`study_id`, narrowed by
    `where`, from the store `open_store` opens), holding the coefficients `fixed` at their
    values, and predict the configurations `predict`."""
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
    result = fit(data, model, fixed)
    result.basis = (
        f"{model} fitted to {result.n_points} measured step times of {source}; in-sample "
        f"error {result.error_pct:.1f}% mean, {result.max_error_pct:.1f}% max"
    )
    if result.fixed:
        result.basis += "; fixed: " + ", ".join(f"{k}={v:g}" for k, v in result.fixed.items())
    predictions = []
    for text in predict or []:
        # With the measured step time at the configuration and the error (null when the
        # data hold no such configuration).
        prediction = predict_at(result, text, data)
        measured = measured_at(data, prediction)
        error = (prediction["step_time_s"] / measured - 1) * 100 if measured else None
        predictions.append({**prediction, "measured_step_time_s": measured, "error_pct": error})
    return SpeedReport(result, predictions)
