"""Curve extrapolation as a distribution: a Bayesian average of curve families on a grid.

One least-squares curve gives one number, and from an early part of a curve that number can
be off by 100% with nothing to say so. Domhan et al. (IJCAI 2015) average 11 parametric
families sampled by MCMC; here six families of decreasing curves (error = 1 − accuracy, or
loss) share one form,

    y(k) = c + a · g(k / K; θ) / g(k_1 / K; θ),      c ≥ 0 (the plateau), a ≥ 0,

with K the last step of the fit window and k_1 its first step, so a is the drop from the
first point to the plateau in every family. The posterior is computed exactly on a grid
instead of sampled: c on a uniform grid over [0, min y) and the shape θ (one or two numbers)
on a log grid; for each grid point a is solved in closed form and, with a flat prior on a and
p(σ) ∝ 1/σ, integrating a and σ out leaves

    p(c, θ | y) ∝ (Σ w·g̃²)^(−1/2) · SSE(c, θ)^(−(n − 1)/2),

SSE the weighted sum of squared residuals at the best a, times the prior: equal per family,
uniform over each shape grid, and p(c) ∝ 1/(c + 0.02·min y) on the plateau (scale-invariant;
`plateau_prior="uniform"` for a flat one). Families are weighted by their
marginal likelihood (Bayesian model averaging, equal prior per family), each kept at no less
than FAMILY_FLOOR of the weight. Every grid point
gives a step at which the curve reaches the target (∞ when c is at or above it); the
prediction is the weighted median of those steps and the interval their 5th–95th weighted
percentiles.

A target not yet reached in the window is asked of the measured curve, not the smooth one:
4,000 grid points drawn by weight, each with Gaussian noise of the window's recent deviation
added at every future measurement (whole counts over the validation set when its size is
known), give the first step at which the noisy curve reaches the goal (seeded, so the answer
is the same every time; tenths of a second per curve). A validation curve crosses a value
near its plateau through its noise well before its smooth part does: the smooth crossing
answered late, or never, on the corpus of benchmarks/bench_curve_corpus.py. Two verdicts:
an answer (median and a split-conformal 90% interval, its upper end ∞ and said to be "not
bounded above" when more than 5% of the curves miss by MAX_REACH = 3 times the last step
seen) when the median lies within that, otherwise "cannot tell", with the reason (such as:
95% of the posterior levels off short of the target); "cannot tell" too for a target that
only a perfect score on the validation set reaches, when the window never had one.

The points are weighted as in the Optimus fit (1, 4, 16 by thirds: the near future depends
most on the recent past). `temper` > 1 widens the posterior, as if only n / temper points had
been measured; before the first passage it had to (TEMPER was 10, since untempered intervals
of the smooth crossing covered the measured step in 0 of the 6 Pollux cases), but with it the
untempered posterior (TEMPER = 1) covers 91-97% on the corpus: chosen on half of its curves
and checked on the other half (docs/converge.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from scipy.optimize import least_squares

from dlperf.converge.curve import (
    FEWEST,
    as_points,
    check_target,
    error_pct,
    first_reaching,
    flat_numbers,
    reported_step,
    thinned,
    to_decreasing,
    value_scale,
    weights,
    whole_step,
    whole_steps,
)
from dlperf.errors import UserError

Shape = Callable[..., np.ndarray]  # g(x, *θ), θ broadcast against x
Inverse = Callable[..., np.ndarray]  # x at which g(x, *θ) = v

N_ASYMPTOTE = 200  # grid points over the plateau c
TEMPER = 1.0  # the points count as n / TEMPER independent ones (see the module docstring)
PLATEAU_FLOOR = 0.02  # the log prior on c is flat below this share of min y (keeps it proper)
PRIORS = ("log", "uniform")  # on the plateau c
MAX_REACH = 3.0  # answer only when the 90% interval ends within this many times the steps seen
DRAWS = 4000  # curves drawn from the posterior for the first passage
MAX_AHEAD = 2000  # measured points simulated past the window at most
NOISE = 1.0  # the simulated noise, as a multiple of the recent residual deviation
# Every family keeps at least this share of the posterior: a prior over the mixture. With
# the marginal likelihood alone one family took 98-100% of the weight on curves none of them
# describes (an lr raised twice, a straight line) and the interval shrank to one step.
FAMILY_FLOOR = 0.01
# The noise after the window shrinks as (drop left / drop left at the window's end)^FADE. On
# the tuning sources (only) of benchmarks/bench_curve_corpus.py, FADE 0 / 0.5 / 1 gave
# never-reached targets an epoch in 14 / 7 / 7% (30%) and 14 / 0 / 0% (50%) of the cases,
# and said "cannot tell" on 3 / 6 / 14% and 12 / 15 / 24% of the reached ones: 0.5.
FADE = 0.5
RECENT = 6  # at least this many of the window's last points give the noise carried forward
MAX_VAL_SIZE = 100_000  # the largest validation set `val_size` looks for
VAL_SIZE_CELLS = 1 << 20  # values x candidate sizes `val_size` checks at once
# Split-conformal widening of the 90% interval, (low, high): its lower end is multiplied by
# exp(−low), its upper end by exp(high). The 95th percentiles of log(lower / measured) and
# log(measured / upper) over the 139 answered cases (both cuts) of the 29 curves of the 14
# tuning sources in benchmarks/bench_curve_corpus.py, on the public corpus of commit 2c81b95
# (88 curves, 28 sources), with FADE 0.5; the benchmark prints them (`--calibrate` prints
# only them). Recompute them, from the tuning sources only, when the corpus changes.
CALIBRATION = (0.065, 0.022)
# A window whose last third is not below its first third by STALL_Z standard errors of that
# difference does not improve: every family decreases, so such values leave the plateau to the
# prior (a loss flat at 0.5 got a plateau of 0.07 in [0, 0.48] and P(reach 0.1) = 0.58, break-it
# round 12). Of the 119 corpus curves of benchmarks/bench_curve_corpus.py seen to 30% and 50%,
# the windows that fall scored 1.65 and up, the 6 that do not (flat, or one wild point) 0.26 and
# below; pure noise scores below 1 in 78-83% of windows of 5-40 points.
STALL_Z = 1.0
# A grid posterior whose weight sits on fewer grid points than this (1 / Σ w², its effective
# number) is narrower than the grid's spacing, which then decides the answer: 0.1% noise on an
# Optimus curve put 95% on Weibull, whose 2-D grid fell nearest, and the plateau at 0.33 for
# 0.2 (break-it round 14, C7), at 1.2. Such a posterior is weighed again on shape grids moved
# onto each family's optimum (`_recentred`). The public corpus's windows (30% and 50% of 112
# curves) score 2.3 and up: they keep their answers.
MIN_SPREAD = 2.0


@dataclass(frozen=True)
class Family:
    name: str
    formula: str
    shape: Shape
    inverse: Inverse
    grid: tuple[np.ndarray, ...]  # one log-spaced axis per shape parameter


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family("pow", "c + a·x^−b", lambda x, b: x ** (-b), lambda v, b: v ** (-1.0 / b),
               (np.geomspace(0.02, 4.0, 120),)),
        Family("hyperbolic", "c + a/(1 + x/s)  (Optimus)", lambda x, s: 1.0 / (1.0 + x / s),
               lambda v, s: s * (1.0 / v - 1.0), (np.geomspace(1e-3, 1e3, 40),)),
        Family("exp", "c + a·exp(−x/s)", lambda x, s: np.exp(-x / s),
               lambda v, s: -s * np.log(v), (np.geomspace(0.02, 1e3, 40),)),
        Family("mmf", "c + a/(1 + (x/s)^d)", lambda x, s, d: 1.0 / (1.0 + (x / s) ** d),
               lambda v, s, d: s * np.maximum(1.0 / v - 1.0, 0.0) ** (1.0 / d),
               (np.geomspace(1e-3, 1e3, 24), np.geomspace(0.2, 4.0, 16))),
        Family("weibull", "c + a·exp(−(x/s)^d)", lambda x, s, d: np.exp(-((x / s) ** d)),
               lambda v, s, d: s * np.maximum(-np.log(v), 0.0) ** (1.0 / d),
               (np.geomspace(1e-2, 1e3, 24), np.geomspace(0.1, 4.0, 16))),
        # Straight to the plateau, reached at x = s: every other family decelerates from the
        # start, and curves that progress linearly (gradient clipping, a slow AdamW run) were
        # predicted 9-90% late with all the weight on one of them (issue 40).
        Family("linear", "c + a·max(1 − x/s, 0)", lambda x, s: np.maximum(1.0 - x / s, 0.0),
               lambda v, s: s * (1.0 - v), (np.geomspace(1.02, 200.0, 40),)),
    )
}  # fmt: skip


@dataclass(frozen=True)
class Trend:
    """How far a window's values fall (decreasing units): the means of its first and last m
    points (a third, at least 2), their noise, and that fall in standard errors."""

    early: float
    recent: float
    noise: float  # per point, from successive differences (first or second, the smaller)
    m: int
    z: float  # (early − recent) / (noise · √(2/m)); ±∞ for a fall without noise
    level: tuple[float, float, float]  # the last m values: lowest, median, highest

    @property
    def stalled(self) -> bool:
        """Not falling beyond the noise: flat, or moving away from lower values."""
        return self.z < STALL_Z


def trend(y: np.ndarray) -> Trend:
    """Whether the values y (decreasing units, in step order) fall: the last third's mean
    against the first third's, in standard errors of the noise. The noise is read from
    successive differences, first or second (the smaller: a smooth steep fall inflates the
    first, a jump the second), so that no fitted curve decides whether there is one."""
    y = np.asarray(y, float)
    m = max(2, len(y) // 3)
    noise = math.sqrt(
        min(float(np.mean(np.diff(y) ** 2)) / 2.0, float(np.mean(np.diff(y, 2) ** 2)) / 6.0)
    )
    early, recent = float(y[:m].mean()), float(y[-m:].mean())
    drop = early - recent
    scale = max(float(np.abs(y).max()), 1e-300)
    if abs(drop) <= 1e-9 * scale:  # the same values, to the float's rounding
        drop = 0.0
    se = max(noise * math.sqrt(2.0 / m), 1e-12 * scale)
    last = y[-m:]
    return Trend(
        early=early,
        recent=recent,
        noise=noise,
        m=m,
        z=drop / se,
        level=(float(last.min()), float(np.median(last)), float(last.max())),
    )


@dataclass
class Posterior:
    """Grid points of every family with their posterior weights (summing to 1)."""

    scale: float  # K: the last step of the fit window (x = k / K)
    x_first: float  # k_1 / K
    family: np.ndarray  # (m,) index into `families`
    c: np.ndarray  # (m,) plateau, decreasing units
    a: np.ndarray  # (m,) drop from the first point to the plateau
    theta: list[tuple[np.ndarray, ...]]  # per family: its grid points' shape parameters
    offsets: list[int]  # per family: where its points start in the flat arrays
    weight: np.ndarray  # (m,)
    families: tuple[str, ...]
    family_weight: dict[str, float]
    n_points: int
    noise: float  # the measurement noise of the window's last points (`_recent_noise`)
    spacing: float  # median steps between measured points: how often the curve is measured
    whole: bool  # the steps are whole numbers: a prediction is rounded up to one (`whole_step`)
    last_step: float
    best: float  # the lowest value in the fit window (decreasing units)
    plateau_prior: str  # "log" or "uniform"
    trend: Trend  # whether the window's values fall at all (`trend`)
    # the window's measured records: each step whose value is below every one before it, and
    # that value (decreasing units), so that a target a measured point reached gets its step
    records: tuple[np.ndarray, np.ndarray]
    # the bins the grid was fitted to (`curve.thinned`) when the n_points were more than
    # curve.MAX_POINTS
    binned: int | None = None
    resolution: float = 0.0  # the spacing of the plateau grid (values' units)
    # the families asked for that had as many parameters as points (`fit`)
    left_out: tuple[str, ...] = ()


def _checked(post: Any) -> Posterior:
    """`post`, a posterior `fit` made, for `predict` and `band`, whose callers in Python may
    pass anything: None failed as an AttributeError."""
    if not isinstance(post, Posterior):
        raise UserError(
            f"a posterior is what ensemble.fit returns, got {type(post).__name__}",
            "post = ensemble.fit(steps, values)",
        )
    return post


def _weighted_quantile(values: np.ndarray, weight: np.ndarray, q: float) -> float:
    """The smallest value whose cumulative weight reaches q (no interpolation, so a quantile
    that falls among the unreachable points is ∞)."""
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weight[order])
    return float(values[order][min(np.searchsorted(cum, q * cum[-1]), len(cum) - 1)])


def fit(
    k: np.ndarray,
    y: np.ndarray,
    families: tuple[str, ...] = tuple(FAMILIES),
    temper: float = TEMPER,
    weighted: bool = True,
    plateau_prior: str = "log",
) -> Posterior:
    """The grid posterior of a decreasing curve y(k) (loss, or error = 1 − accuracy). More
    than curve.MAX_POINTS points are fitted as that many bins (`curve.thinned`); the noise
    carried past the window, the spacing of the measurements, the lowest value and the trend
    stay those of every point."""
    k, y = as_points(k, y)
    if len(k) < FEWEST:
        # `converge predict` refuses a window this short first, naming the curve and the
        # window (`curve.fit_window`); this is for a caller from Python.
        raise UserError(
            f"ensemble.fit: {len(k)} points are too few to fit a curve",
            f"need ≥ {FEWEST}: give more of the curve",
        )
    if not (np.all(np.isfinite(k)) and np.all(np.isfinite(y))) or np.any(k <= 0):
        raise UserError("steps must be positive and values finite")
    if np.any(y < 0):
        raise UserError("loss/error values must be ≥ 0 (is the metric right?)")
    if plateau_prior not in PRIORS:
        raise UserError(f"unknown plateau prior '{plateau_prior}'", f"choose from {PRIORS}")
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        raise UserError(f"unknown curve family '{unknown[0]}'", f"choose from {list(FAMILIES)}")
    # The grid is solved on at most MAX_POINTS bins: over every point it took 125 s and 5.4 GB
    # for 10^6 rows (break-it round 12, C5b). Each bin stands for as many points, so the
    # weighting by thirds is kept; σ is integrated out, so the bins' smaller scatter is theirs.
    # What a bin's median shrinks (the noise, by about √(points per bin)) is read below from
    # every point, since the future it simulates is measured point by point.
    kb, yb = thinned(k, y)
    # A family with as many parameters (plateau, drop and its shape's) as points passes through
    # every one of them: the SSE at its exact fit is 0, and the likelihood with σ integrated
    # out has no bound there. On 4 points Weibull took 95% of the weight and the whole
    # posterior one grid point: the plateau 0.5948 in [0.5948, 0.5948] for 0.2 (break-it
    # round 29, P2 I). Such a family waits until the points outnumber its parameters.
    weighable = tuple(f for f in families if _parameters(f) < len(kb))
    if not weighable:
        fewest = min(_parameters(f) for f in families) + 1
        raise UserError(
            f"ensemble.fit: {len(kb)} points cannot weigh {', '.join(families)}: a family "
            f"passes through as many points as it has parameters",
            f"give at least {fewest} points, or families with fewer parameters",
        )
    left_out = tuple(f for f in families if f not in weighable)
    families = weighable
    scale = float(k.max())
    x = kb / scale
    # The grid is solved on values divided by about their largest (`curve.value_scale`) and its
    # plateaus and drops scaled back, so that c·y gets c times the answer for y: absolute
    # floors made values of 1e-11 reach 5e-12 at step 41, not 47 (break-it round 14, C1).
    level = value_scale(yb)
    c = np.linspace(0.0, float(yb.min()) / level, N_ASYMPTOTE, endpoint=False)
    # Later points weigh more (mean weight 1), as in the Optimus fit: the near future
    # depends most on the recent past.
    w = weights(len(kb)) if weighted else np.ones(len(kb))
    w = w / w.mean()
    # At least two points' worth: below one, the SSE exponent turns positive and rewards misfit.
    n_eff = max(len(kb) / temper, 2.0)
    c_floor = (
        max(PLATEAU_FLOOR * float(yb.min()) / level, 1e-12) if plateau_prior == "log" else None
    )
    grids = [(c, *FAMILIES[name].grid) for name in families]
    weighed = _weigh(families, grids, x, yb / level, w, n_eff, c_floor)
    if 1.0 / float(np.sum(weighed.post**2)) < MIN_SPREAD:
        # Narrower than the grid: its spacing, not the data, chose the answer (break-it round
        # 14, C7). Each family's grid is moved onto its own optimum and weighed again.
        grids = [
            _recentred(FAMILIES[name], grids[i], weighed, i, x, yb / level, w)
            for i, name in enumerate(families)
        ]
        weighed = _weigh(families, grids, x, yb / level, w, n_eff, c_floor)
    flat, prior, post, fam_idx, a_all, c_all, thetas, offsets = weighed
    # The floor: each family's own posterior, mixed in at FAMILY_FLOOR (computed per family,
    # since a family far behind the best underflows in `post`).
    floor = min(FAMILY_FLOOR, 1.0 / len(families))
    mixed = (1.0 - floor * len(families)) * post
    for i in range(len(families)):
        mine = fam_idx == i
        own = np.exp(flat[mine] - flat[mine].max()) * prior[mine]
        mixed[mine] += floor * own / own.sum()
    post = mixed
    family_weight = {name: float(post[fam_idx == i].sum()) for i, name in enumerate(families)}
    c_all, a_all = c_all * level, a_all * level  # in the values' units
    return Posterior(
        scale=scale,
        x_first=float(x[0]),
        family=fam_idx,
        c=c_all,
        a=a_all,
        theta=thetas,
        offsets=offsets,
        weight=post,
        families=tuple(families),
        family_weight=family_weight,
        n_points=len(k),
        noise=_recent_noise(k, y, c_all, a_all, fam_idx, thetas, offsets, families, flat),
        spacing=float(np.median(np.diff(k))),
        whole=whole_steps(k),
        last_step=scale,
        best=float(y.min()),
        plateau_prior=plateau_prior,
        trend=trend(y[np.argsort(k, kind="stable")]),
        records=_records(k, y),
        binned=len(kb) if len(kb) < len(k) else None,
        left_out=left_out,
        resolution=float(c[1] - c[0]) * level,
    )


def _parameters(family: str) -> int:
    """A family's free parameters: the plateau c, the drop a and its shape's."""
    return 2 + len(FAMILIES[family].grid)


class _Weighed(NamedTuple):
    """The grid's points, flat over families (c outer, θ inner within each family)."""

    flat: np.ndarray  # log likelihood, a and σ integrated out
    prior: np.ndarray
    post: np.ndarray  # flat · prior, normalised (no family floor yet)
    family: np.ndarray
    a: np.ndarray  # the best drop at each point (scaled values)
    c: np.ndarray  # the plateau at each point (scaled values)
    thetas: list[tuple[np.ndarray, ...]]
    offsets: list[int]


def _weigh(
    families: tuple[str, ...],
    grids: list[tuple[np.ndarray, ...]],
    x: np.ndarray,
    y: np.ndarray,
    w: np.ndarray,
    n_eff: float,
    c_floor: float | None,
) -> _Weighed:
    """Every family's grid points with their likelihood and prior: `grids` holds, per family,
    its plateau axis and then its shape axes; `c_floor`: the log prior's floor on the plateau,
    None for the uniform prior."""
    log_gg, log_sse, amp, cs, fam, thetas, offsets = [], [], [], [], [], [], []
    start = 0
    for i, name in enumerate(families):
        f = FAMILIES[name]
        c, *shape_axes = grids[i]
        r = y[None, :] - c[:, None]  # (n_c, n): what the shape term must explain
        rr = np.sum(w * r * r, axis=1)
        theta = tuple(t.ravel() for t in np.meshgrid(*shape_axes, indexing="ij"))
        ok, gg, a, sse = _grid_fit(f, theta, x, r, w, rr)
        log_gg.append(np.broadcast_to(np.log(gg), a.shape).ravel())
        log_sse.append(np.where(ok[None, :], np.log(sse), np.inf).ravel())
        amp.append(a.ravel())
        cs.append(np.repeat(c, len(theta[0])))
        fam.append(np.full(a.size, i))
        thetas.append(theta)
        offsets.append(start)
        start += a.size
    lsse, fam_idx, a_all, c_all = map(np.concatenate, (log_sse, fam, amp, cs))
    flat = -0.5 * np.concatenate(log_gg) - 0.5 * (n_eff - 1.0) * lsse
    # Equal prior per family, uniform over each family's shape grid; on the plateau c, by
    # default, p(c) ∝ 1/(c + floor): scale-invariant, since nothing says how low a curve can
    # go. The uniform prior puts most of its mass on plateaus near the last value, i.e. it
    # presumes the curve has nearly finished; on held-out curves it made the predicted step
    # late (docs/converge.md).
    prior = np.concatenate([np.full(len(v), 1.0 / len(v)) for v in log_sse])
    if c_floor is not None:
        prior = prior / (c_all + c_floor)
    post = np.exp(flat - flat.max()) * prior
    return _Weighed(flat, prior, post / post.sum(), fam_idx, a_all, c_all, thetas, offsets)


def _recentred(
    f: Family,
    grid: tuple[np.ndarray, ...],
    weighed: _Weighed,
    i: int,
    x: np.ndarray,
    y: np.ndarray,
    w: np.ndarray,
) -> tuple[np.ndarray, ...]:
    """Family i's plateau and shape axes `grid`, each moved by less than half a step (the
    plateaus added to, clipped at 0; the shapes multiplied, on their log spacing) so that a
    point lies on the family's least-squares optimum: its plateau and shape fitted
    continuously from its most likely grid point, the drop solved in closed form. The grid
    stays as fine and as wide; only where its points fall changes."""
    mine = np.flatnonzero(weighed.family == i)
    best = int(mine[np.argmax(weighed.flat[mine] + np.log(weighed.prior[mine]))])
    theta = np.log(_shape_params(weighed.thetas, weighed.offsets, i, best))
    sw = np.sqrt(w)
    plateaus, *shape_axes = grid
    # A window that reached 0 has every plateau at 0: only the shape moves.
    free = float(y.min()) > 0.0

    def residuals(q: np.ndarray) -> np.ndarray:
        c, shape = (q[0], q[1:]) if free else (0.0, q)
        with np.errstate(over="ignore", under="ignore", divide="ignore", invalid="ignore"):
            g = f.shape(x, *np.exp(shape))
            g = g / g[0]
        left = y - c
        if not np.all(np.isfinite(g)):
            g = np.zeros_like(x)
        a = max(float(np.sum(w * left * g) / max(float(np.sum(w * g * g)), 1e-300)), 0.0)
        out: np.ndarray = sw * (left - a * g)
        return out

    low = np.array([math.log(axis[0]) for axis in shape_axes])
    high = np.array([math.log(axis[-1]) for axis in shape_axes])
    start = theta
    if free:
        low, high = np.r_[0.0, low], np.r_[float(y.min()), high]
        start = np.r_[weighed.c[best], theta]
    start = np.clip(start, low, np.nextafter(high, -np.inf))
    optimum = least_squares(residuals, start, bounds=(low, high)).x
    c = float(optimum[0]) if free else 0.0
    moved = [np.maximum(plateaus + c - plateaus[np.argmin(np.abs(plateaus - c))], 0.0)]
    for axis, at in zip(shape_axes, optimum[int(free) :], strict=True):
        logs = np.log(axis)
        moved.append(axis * math.exp(at - logs[np.argmin(np.abs(logs - at))]))
    return tuple(moved)


def _records(k: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The steps (in order) whose value is below every value measured before them, and those
    values: the first measured step at or past any goal the window reached is among them."""
    order = np.argsort(k, kind="stable")
    ks, ys = k[order], y[order]
    new = np.flatnonzero(np.r_[True, ys[1:] < np.minimum.accumulate(ys)[:-1]])
    return ks[new], ys[new]


def passage(post: Posterior, goal: float) -> float | None:
    """The first measured step of the window at or past `goal` (decreasing units); None when
    no measured point of the window reached it."""
    steps, values = post.records
    hit = np.flatnonzero(values <= goal)
    return float(steps[hit[0]]) if len(hit) else None


def _grid_fit(
    f: Family,
    theta: tuple[np.ndarray, ...],
    x: np.ndarray,
    r: np.ndarray,
    w: np.ndarray,
    rr: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One family's least squares at every grid point, on the points x (k / K) with weights
    w: r (n_c, n) is what the shape term must explain at each plateau c, rr its weighted sum
    of squares. Returns, per shape θ, whether it can be normalised on the points (ok) and
    Σ w·g̃² (gg), and per (c, θ) the best amplitude a ≥ 0 and the weighted SSE."""
    with np.errstate(over="ignore", under="ignore", divide="ignore", invalid="ignore"):
        g = f.shape(x[None, :], *(t[:, None] for t in theta))
        g = g / g[:, :1]  # g̃(k_1) = 1, so a means the same in every family
    # Shapes that under- or overflow on the window cannot be normalised: left out.
    ok = np.all(np.isfinite(g), axis=1) & (g[:, -1] > 1e-9)
    g = np.where(ok[:, None], g, 1.0)
    gg = np.sum(w * g * g, axis=1)  # (n_θ,)
    gr = (w * r) @ g.T  # (n_c, n_θ)
    a = np.maximum(gr / gg, 0.0)  # a ≥ 0: a rising curve is a flat one here
    sse = np.maximum(rr[:, None] - 2 * a * gr + a * a * gg, 1e-300)
    return ok, gg, a, sse


def _recent_noise(
    k: np.ndarray,
    y: np.ndarray,
    c: np.ndarray,
    a: np.ndarray,
    family: np.ndarray,
    thetas: list[tuple[np.ndarray, ...]],
    offsets: list[int],
    families: tuple[str, ...],
    flat: np.ndarray,
) -> float:
    """The epoch-to-epoch noise of the window's last third (at least RECENT points): the
    residuals of the most likely grid point, differenced so that a slow misfit (a jump at an
    lr decay) does not count as noise. The noise shrinks as the learning rate decays, 3-7×
    on real logs between the second quarter and the last: carried forward from the whole
    window, it had late targets reached through noise long before they were (issue 40)."""
    best = int(np.argmax(flat))
    i = int(family[best])
    theta = _shape_params(thetas, offsets, i, best)
    shape = FAMILIES[families[i]].shape
    x = k / k.max()
    with np.errstate(over="ignore", under="ignore", divide="ignore", invalid="ignore"):
        g = shape(x, *theta) / shape(x[:1], *theta)
    resid = y - (c[best] + a[best] * g)
    recent = np.diff(resid[-min(len(k), max(RECENT, len(k) // 3)) :])
    return float(np.sqrt(np.mean(recent**2) / 2.0))


def val_size(values: np.ndarray, most: int = MAX_VAL_SIZE) -> int | None:
    """The number of validation images an accuracy (or error) curve counts over: the smallest
    n for which every value is a whole number of n-ths, to the precision the values were
    written with (0.9861 is 142/144 to four decimals); None when no n up to `most` (and up to
    what that precision can tell) fits, or the values are too few to tell."""
    v = np.asarray(values, float)
    if len(np.unique(v)) < 5 or np.any((v < 0) | (v > 1)):
        return None
    # The decimals the values were written with: 4 for 0.9861, ~16 for 142/144 itself.
    decimals = next(
        (d for d in range(13) if np.allclose(v, np.round(v, d), rtol=0, atol=1e-12)), 16
    )
    tol = 0.5 * 10.0**-decimals + 1e-12
    # A coarser n is ruled out by its own values; a finer one than a tenth of a count per
    # rounding unit would fit by chance. Counted in whole numbers, n·(half a unit) ≤ 0.1: of
    # 0.1 / tol, whose 1e-12 made it 199.9999996, 200 images at 3 decimals (20 at 2, 2000 at
    # 4) were truncated away (break-it round 56, C3).
    top = min(most, 2 * 10**decimals // 10)
    # The candidates that fit every value so far, a few values at a time: a table of every
    # value against every candidate took 1.6 GB an array for 2,000 values (break-it round 12).
    n = np.arange(1, top + 1)[:, None]
    start = 0
    while start < len(v) and len(n):
        part = v[start : start + max(1, VAL_SIZE_CELLS // len(n))]
        counts = part[None, :] * n
        n = n[np.all(np.abs(counts - np.round(counts)) <= n * tol + 1e-9, axis=1)]
        start += len(part)
    return int(n[0, 0]) if len(n) else None


def _shape_params(
    thetas: list[tuple[np.ndarray, ...]], offsets: list[int], i: int, points: Any
) -> tuple[Any, ...]:
    """The shape parameters θ of grid points `points` (flat indices, or one) of family i,
    whose points run c outer, θ inner from the family's offset."""
    n_theta = len(thetas[i][0])
    return tuple(t[(points - offsets[i]) % n_theta] for t in thetas[i])


def steps_to(post: Posterior, goal: float) -> np.ndarray:
    """The step at which each grid point's curve reaches `goal` (decreasing units); ∞ when
    its plateau is at or above the goal."""
    out = np.full(len(post.c), np.inf)
    for i, name in enumerate(post.families):
        f = FAMILIES[name]
        points = np.flatnonzero(post.family == i)
        c, a = post.c[points], post.a[points]
        th = _shape_params(post.theta, post.offsets, i, points)
        with np.errstate(over="ignore", under="ignore", divide="ignore", invalid="ignore"):
            # g(x)/g(x_1) = (goal − c)/a  ⇔  g(x) = v
            v = (goal - c) / a * f.shape(np.array(post.x_first), *th)
            x = f.inverse(v, *th)
        k = np.where(np.isfinite(x), np.maximum(x, 0.0) * post.scale, np.inf)
        out[points] = np.where(c < goal, np.where(a > 0, k, 0.0), np.inf)
    return out


def _curves(post: Posterior, points: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """The curves of grid points `points` at `steps` (decreasing units), one row each."""
    x = np.asarray(steps, float)[None, :] / post.scale
    curves = np.empty((len(points), x.shape[1]))
    for i, name in enumerate(post.families):
        mine = post.family[points] == i
        if not mine.any():
            continue
        chosen = points[mine]
        theta = tuple(t[:, None] for t in _shape_params(post.theta, post.offsets, i, chosen))
        shape = FAMILIES[name].shape
        with np.errstate(over="ignore", under="ignore", divide="ignore", invalid="ignore"):
            g = shape(x, *theta) / shape(np.array(post.x_first), *theta)
        curves[mine] = post.c[chosen][:, None] + post.a[chosen][:, None] * g
    return curves


def band(
    post: Posterior, steps: np.ndarray, draws: int = 2000, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The posterior's 5th, 50th and 95th percentile curves at `steps` (decreasing units),
    from `draws` grid points drawn by weight (seeded: the same figure every time); evaluating
    every grid point would take hundreds of MB for a figure. Values that do not fall (`trend`)
    draw no curve: their band is the last measured points' range, flat."""
    post, steps = _checked(post), flat_numbers(steps, "steps")
    if not len(steps):  # else it failed as a ValueError unpacking the percentiles
        raise UserError("steps are empty: band draws the curves at the steps given", "e.g. [100]")
    if not np.all(np.isfinite(steps) & (steps > 0)):  # step 0 or NaN drew a NaN band
        raise UserError("steps must be positive and finite")
    if post.trend.stalled:
        low, median, high = post.trend.level
        n = len(steps)
        return np.full(n, low), np.full(n, median), np.full(n, high)
    chosen = np.random.default_rng(seed).choice(len(post.weight), size=draws, p=post.weight)
    lo, mid, hi = np.nanpercentile(_curves(post, chosen, steps), [5, 50, 95], axis=0)
    return lo, mid, hi


def _fading(post: Posterior, chosen: np.ndarray, smooth: np.ndarray, fade: float) -> np.ndarray:
    """Each drawn curve's noise after the window relative to the window's end: its remaining
    drop to its plateau relative to the drop left at the last step, to the power `fade`, since
    the noise shrinks as a curve settles (as the learning rate decays)."""
    if fade == 0:
        return np.ones_like(smooth)
    c = post.c[chosen][:, None]
    left = _curves(post, chosen, np.array([post.last_step])) - c
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(left > 0, (smooth - c) / left, 1.0)
    return np.clip(ratio, 0.0, 1.0) ** fade


def first_passage(
    post: Posterior,
    goal: float,
    until: float,
    noise: float = NOISE,
    draws: int = DRAWS,
    seed: int = 0,
    val_size: int | None = None,
    fade: float = FADE,
) -> np.ndarray:
    """For `draws` curves drawn by weight, each with measurement noise (`noise` times the
    window's recent noise) added, the first measured step (every `post.spacing` steps after
    the window) at or below `goal`; ∞ when not by `until`. A noisy validation curve first
    reaches a value near its plateau well before the smooth curve does, and a plateau just
    short of the target is still reached through the noise: the smooth crossing alone answered
    late, or "never", on the corpus of benchmarks/bench_curve_corpus.py (docs/converge.md).
    With `val_size` the measured values are what a validation set of that many images can
    give: whole counts of errors, never below 0."""
    rng = np.random.default_rng(seed)
    chosen = rng.choice(len(post.weight), size=draws, p=post.weight)
    n_ahead = int(min(max(math.ceil((until - post.last_step) / post.spacing), 1), MAX_AHEAD))
    steps = post.last_step + post.spacing * np.arange(1, n_ahead + 1)
    smooth = _curves(post, chosen, steps)
    sigma = noise * post.noise * _fading(post, chosen, smooth, fade)
    noisy = smooth + sigma * rng.standard_normal((draws, n_ahead))
    if val_size:
        noisy = np.clip(np.round(noisy * val_size), 0, val_size) / val_size
    # Within the float's rounding of the goal (relative: an absolute 1e-12 reached 5e-12 at
    # 6e-12).
    hit = noisy <= goal + 1e-12 * abs(goal)
    return np.where(hit.any(axis=1), steps[np.argmax(hit, axis=1)], np.inf)


@dataclass
class EnsemblePrediction:
    target: float  # in the metric's units
    p_reachable: float  # posterior probability that the curve ever reaches the target
    verdict: str  # "answer" or "cannot tell" (see `predict`)
    # Why there is no answer; with an answer, None, or what its open upper end means
    reason: str | None
    # posterior median, rounded up to a whole step on an axis of whole steps; with an answer
    predicted_step: float | None
    # 90%, calibrated (see `calibrate`); with an answer; the upper end ∞ when not bounded
    interval: tuple[float, float] | None
    plateau: float  # posterior median of the plateau, in the metric's units
    plateau_interval: tuple[float, float]  # its 90% interval, in the metric's units
    family_weight: dict[str, float]
    actual_step: float | None
    error_pct: float | None
    at_first_step: bool = False  # the window's first measured point reached the target

    @property
    def reachable(self) -> bool:
        return self.predicted_step is not None


def calibrate(
    lo: float,
    hi: float,
    calibration: tuple[float, float],
    first: float,
    spacing: float,
    whole: bool = True,
) -> tuple[float, float]:
    """The posterior's 5th-95th percentile steps widened (or narrowed) by the split-conformal
    constants (see CALIBRATION), in whole steps on an axis of `whole` ones: not before
    `first`, the first step the prediction is about, and at least one `spacing` wide, since a
    curve measured every `spacing` steps is seen to pass its target only to within that (a
    single step, such as [14, 14], claimed what no measurement can tell)."""
    low, high = calibration
    lo = max(whole_step(lo * math.exp(-low), whole), first)
    hi = max(whole_step(hi * math.exp(high), whole), lo + spacing)
    return lo, hi


def conformal(
    lower: np.ndarray, upper: np.ndarray, actual: np.ndarray, level: float = 0.9
) -> tuple[float, float]:
    """Split-conformal constants (low, high) for `calibrate`, from uncalibrated intervals
    [lower, upper] (upper may be ∞) and the measured steps of calibration cases: the
    ⌈(n + 1)(1 − α/2)⌉-th smallest of log(lower / actual) and of log(actual / upper), α =
    1 − level, so that on cases exchangeable with these each end misses at most α/2 of the
    time (Vovk et al. 2005; Romano et al. 2019 for intervals). Too few cases for that rank
    (fewer than 19 at 90%): the largest score, a guarantee a little short of the level."""
    lower, upper, actual = (np.asarray(v, float) for v in (lower, upper, actual))
    if len(actual) == 0:
        raise UserError("no calibration cases: nothing to calibrate on")
    rank = min(math.ceil((len(actual) + 1) * (1.0 - (1.0 - level) / 2.0)), len(actual)) - 1
    with np.errstate(divide="ignore"):
        low = np.sort(np.log(lower / actual))[rank]
        high = np.sort(np.log(actual / upper))[rank]
    # An end that never missed (every upper end open) needs no widening, and gets none.
    return float(low), float(max(high, -1.0) if math.isfinite(high) else 0.0)


def _perfect_score(post: Posterior, goal: float, target: float, val_size: int | None) -> str | None:
    """Why a target that only a perfect score reaches gets no epoch; None for any other."""
    if not val_size or post.best <= 0 or math.floor(goal * val_size + 1e-9) > 0:
        return None
    n = val_size
    return (
        f"{target:g} needs {n}/{n}: the {n}-image validation set has no value between "
        f"{(n - 1) / n:.4g} and 1, and the {post.n_points} points up to step "
        f"{post.last_step:g} never had all {n} right; when the last one is learned, they "
        "cannot tell"
    )


def _stalled(post: Posterior, target: float, metric: str) -> str:
    """Why values that do not fall toward `target` get no step (one line, short enough for a
    160-column log with the source's name before it)."""
    t = post.trend
    early, recent = (float(to_decreasing(v, metric)) for v in (t.early, t.recent))
    where = (
        "flat" + (f" within noise ±{t.noise:.2g}" if t.noise > 0 else "")
        if t.z > -STALL_Z
        else "away from it"
    )
    return (
        f"the {post.n_points} points to step {post.last_step:g} do not move toward {target:g}: "
        f"{metric} {early:.3g} over the first {t.m}, {recent:.3g} over the last {t.m} ({where})"
    )


def predict(
    post: Posterior,
    target: float,
    metric: str,
    steps: np.ndarray | None = None,
    values: np.ndarray | None = None,
    max_reach: float = MAX_REACH,
    noise: float = NOISE,
    val_size: int | None = None,
    calibration: tuple[float, float] = CALIBRATION,
    fade: float = FADE,
) -> EnsemblePrediction:
    """The distribution of the step reaching `target` (metric units): median, 90% interval and
    P(reachable); compared with the measured curve when it is given and reaches the target.
    `val_size`: the number of validation images an accuracy (or error) curve counts over
    (see `val_size`), when known.

    Two verdicts. "answer": the median, when it lies within `max_reach` times the last step
    seen, and a 90% interval; its upper end is ∞ ("not bounded above", said in `reason`) when
    more than 5% of the curves do not reach the target by then. "cannot tell", with the
    reason, otherwise: most of the curves the points allow do not get there within sight. Not
    even "never": when 95% of the posterior levels off short of the target, the reason says
    so, but the slow recipe at lr 0.006 of issue 29 levels off at 0.73 in its first 20 epochs
    and then climbs to 0.81 by epoch 32. A target that needs a perfect score on a finite
    validation set that the window never had is "cannot tell" too: when the last image is
    learned is not in the curve. A target a measured point of the window already reached is
    answered with the first such point's step (`passage`), P(reachable) 1 and an interval of
    one measurement spacing ending there (not before the window's first step): never a step
    after the window.

    Values that do not fall beyond their noise (`trend`: flat, or moving away from the
    target) say nothing of a plateau below them, which every family has: the plateau is then
    their recent measured level, P(reachable) 0 (1 when a measured point reached the target)
    and a target not reached is "cannot tell", saying so."""
    post = _checked(post)
    check_target(target, metric)
    if steps is not None and values is not None:
        steps, values = as_points(steps, values)
    goal = float(to_decreasing(np.array(target), metric))
    stalled = post.trend.stalled
    level = [float(to_decreasing(v, metric)) for v in post.trend.level]
    if stalled and goal < post.best:
        return EnsemblePrediction(
            target=target,
            p_reachable=0.0,
            verdict="cannot tell",
            reason=_stalled(post, target, metric),
            predicted_step=None,
            interval=None,
            plateau=level[1],
            plateau_interval=(min(level), max(level)),
            family_weight=post.family_weight,
            actual_step=first_reaching(steps, values, metric, goal),
            error_pct=None,
        )
    reach = steps_to(post, goal)
    p_reach = float(post.weight[np.isfinite(reach)].sum())
    weight = post.weight
    first = post.last_step  # the earliest step a prediction can name
    if goal < post.best and noise > 0:
        # Not reached by any measured point of the window: when the measured curve will be.
        reach = first_passage(
            post, goal, max_reach * post.last_step, noise, val_size=val_size, fade=fade
        )
        weight = np.ones(len(reach))
        first = post.last_step + post.spacing
    elif goal < post.best:
        # The smooth curve alone: one that crosses the goal inside the window (through the
        # noise) says "right after it", not before.
        reach = np.maximum(reach, post.last_step)
    median = _weighted_quantile(reach, weight, 0.5)
    lo = _weighted_quantile(reach, weight, 0.05)
    hi = _weighted_quantile(reach, weight, 0.95)
    plateau_c = [_weighted_quantile(post.c, post.weight, q) for q in (0.05, 0.5, 0.95)]
    plateau_q = [float(to_decreasing(v, metric)) for v in plateau_c]
    # A grid point stands for the plateaus within half a grid spacing of it: a posterior on one
    # point said "between 0.1983 and 0.1983" for 0.2 (break-it round 29, P2 I).
    half = post.resolution / 2
    ends = (
        min(plateau_c[0], max(plateau_c[1] - half, 0.0)),
        max(plateau_c[2], plateau_c[1] + half),
    )
    plateau_lo, plateau_hi = sorted(float(to_decreasing(v, metric)) for v in ends)
    if stalled:  # the target was reached at a measured point: the level is what was measured
        p_reach, plateau_q = 1.0, level
        plateau_lo, plateau_hi = min(level), max(level)
    passed = passage(post, goal)
    if passed is not None:
        # A measured point of the window reached the goal: its step is the answer, not a
        # crossing after the window (calibrate's intervals start at its last step). The
        # measured passage, not the smooth curve's: a point that dips past the goal through
        # the noise reached it, as `actual step` counts; the curve was seen to pass it within
        # one measurement spacing before that step, and not before the first point measured.
        first = float(post.records[0][0])
        step = reported_step(passed, post.whole)
        span = (whole_step(max(step - post.spacing, first), post.whole), step)
        actual = first_reaching(steps, values, metric, goal)
        return EnsemblePrediction(
            target=target,
            p_reachable=1.0,
            verdict="answer",
            reason=None,
            predicted_step=step,
            interval=span,
            plateau=plateau_q[1],
            plateau_interval=(plateau_lo, plateau_hi),
            family_weight=post.family_weight,
            actual_step=actual,
            error_pct=error_pct(step, actual),
            at_first_step=passed == first,
        )
    limit = max_reach * post.last_step
    missing = float(weight[reach > limit].sum() / weight.sum())
    verdict, reason, interval = "answer", None, None
    perfect = _perfect_score(post, goal, target, val_size)
    if perfect is not None:
        verdict, reason = "cannot tell", perfect
    elif not (math.isfinite(median) and median <= limit):
        verdict = "cannot tell"
        reason = (
            f"the curve fitted to {post.n_points} points up to step {post.last_step:g} levels "
            f"off between {plateau_lo:.4g} and {plateau_hi:.4g} {metric} (90%), short of "
            f"{target:g}; whether something later (a schedule step) takes it there, they "
            "cannot tell"
            if p_reach <= 0.05
            else f"{missing:.0%} of the curves that the {post.n_points} points up to step "
            f"{post.last_step:g} allow do not reach {target:g} by step {limit:g} "
            f"({max_reach:g}× the steps seen)"
        )
    else:
        open_above = hi > limit
        lo, hi = calibrate(lo, min(hi, limit), calibration, first, post.spacing, post.whole)
        if open_above or hi > limit:
            # Past the steps the curves are followed to: the upper end is not bounded.
            hi = math.inf
            reason = (
                f"by step {limit:g} with 90%: not bounded above ({missing:.0%} of the curves "
                f"that the {post.n_points} points up to step {post.last_step:g} allow do not "
                f"reach {target:g} by then)"
            )
        median = min(max(median, lo), hi)
        interval = (lo, hi)
    predicted = reported_step(median, post.whole) if verdict == "answer" else None
    actual = first_reaching(steps, values, metric, goal)
    return EnsemblePrediction(
        target=target,
        p_reachable=p_reach,
        verdict=verdict,
        reason=reason,
        predicted_step=predicted,
        interval=interval,
        plateau=plateau_q[1],
        plateau_interval=(plateau_lo, plateau_hi),
        family_weight=post.family_weight,
        actual_step=actual,
        error_pct=error_pct(predicted, actual),
    )


def basis(post: Posterior) -> str:
    """One line saying what a prediction rests on."""
    weights = ", ".join(f"{n} {w:.0%}" for n, w in post.family_weight.items() if w >= 0.005)
    if post.trend.stalled:
        t = post.trend
        return (
            f"{post.n_points} points up to step {post.last_step:g} that do not fall beyond their "
            f"noise (the last {t.m} against the first {t.m}): the plateau is the last {t.m} "
            f"points' median and range as measured, not a fitted curve's; a step only for a "
            f"target a measured point reached (Bayesian average of {len(post.families)} curve "
            f"families: {weights})"
        )
    fitted = (
        f"{post.n_points} points"
        if post.binned is None
        else f"{post.binned:,} bins of {post.n_points:,} points"
    )
    left_out = (
        f"; {', '.join(post.left_out)} left out: as many parameters as points"
        if post.left_out
        else ""
    )
    return (
        f"Bayesian average of {len(post.families)} curve families ({weights}{left_out}) fitted "
        f"to {fitted} up to step {post.last_step:g}, {post.plateau_prior} prior on "
        "the plateau; median and 90% interval of the posterior"
    )
