"""What `converge fit | predict | regress` print: their results as tables and lines, in the
order the command shows them (`Table`s for the console, `str`s as lines), so that a notebook
gets the same view with `str()`. Warnings about a result are returned apart: they go to
stderr."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from dlperf.converge.results import MEASURED_BASIS, EnsembleStepPrediction, StepPrediction
from dlperf.formatting import fmt
from dlperf.table import Table

if TYPE_CHECKING:
    from dlperf.converge.curve import FitReport
    from dlperf.converge.results import Regression

Block = Table | str
BETAS = ("beta0", "beta1", "beta2")


def beta_table(rows: list[dict[str, Any]], metric: str) -> Table:
    """`fitting.beta_table`'s rows (several curves) as one table."""
    return Table(
        f"Optimus fits of {len(rows)} curves, {metric} (90% intervals)",
        ["run", "model", "depth", "device", "β0", "β0 5–95%", "β1", "β1 5–95%", "β2",
         "β2 5–95%", "rmse fit", "rmse held out"],
        [
            [row["source"], row["model"], row["depth"], row["device"],
             *(cell for b in BETAS for cell in
               (row[b], f"{fmt(row[f'{b}_5%'])}–{fmt(row[f'{b}_95%'])}")),
             row["rmse"], row["heldout_rmse"]]
            for row in rows
        ],
    )  # fmt: skip


def fit_blocks(r: FitReport) -> list[Block]:
    """One curve's fit: each form's coefficients with their intervals, the fit's error on
    the window and on later points, and which form predicts those better."""
    h = r.heldout
    # A run's stored key named: a fit of train/loss read as one of val/loss (both "loss").
    fitted = r.metric if r.curve.key is None else f"{r.metric} from {r.curve.key}"
    blocks: list[Block] = [
        Table(
            f"{r.curve.label}: {r.n_fit} points to step {r.fits['optimus'].last_step:g}, {fitted}",
            ["form", "coefficient", "value", "5%", "95%"],
            [
                [form, name, value, *r.ci[form][name]]
                for form, f in r.fits.items()
                for name, value in f.params.items()
            ],
        ),
        Table(
            f"fit error (held out: {h['n_points']} later points)",
            ["form", "rmse fit", "rmse held out"],
            [[form, f.rmse, h.get(f"{form}_rmse")] for form, f in r.fits.items()],
        ),
    ]
    if "better" in h:
        blocks.append(f"{h['better']} predicts the held-out points better")
    return blocks


def _bases(predictions: list[Any]) -> list[Block]:
    return [f"{d.source}: {d.basis}" for d in predictions]


def _already(curve: str, target: float, metric: str, where: str) -> str:
    """That `curve` is at the target by its first step, `where` ("its first step 1"), as
    `converge plan` says of a curve at the target: the step predicted is that first step."""
    side = "above" if metric == "accuracy" else "below"
    return f"the {curve} curve is already at or {side} the target {target:g} {metric} at {where}"


def _at_first(
    predictions: Sequence[StepPrediction | EnsembleStepPrediction], curve: str, metric: str
) -> list[Block]:
    return [
        f"{d.source}: "
        f"{_already(_read(d, curve), d.target, metric, f'its first step {d.predicted_step}')}"
        for d in predictions
        if d.at_first_step
    ]


def _read(d: StepPrediction | EnsembleStepPrediction, curve: str) -> str:
    """ "measured" for a prediction read off the measured points (nothing was fitted)."""
    return "measured" if d.basis.startswith(MEASURED_BASIS) else curve


def _steps(*values: float | None) -> list[float | None]:
    """Step cells as floats, so that `fmt` prints them alike: a whole-step prediction is an
    int (`curve.reported_step`) and its interval floats, and the table printed 738971604054
    beside 738,971,604,054 (break-it round 53, T3 C3)."""
    return [None if v is None else float(v) for v in values]


def form_blocks(
    predictions: list[StepPrediction], form: str, target: float, metric: str
) -> list[Block]:
    """`predict --form optimus | power`: the step reaching the target for each curve."""
    asymptote = "β2" if form == "optimus" else "c"
    table = Table(
        f"{form} model: step reaching {metric} {target:g}",
        ["source", "predicted step", "5%", "95%", "epoch", "actual step", "error %",
         f"asymptote ({asymptote})", "plateau"],
        [
            [d.source, *(_steps(d.predicted_step) if d.reachable else ["unreachable"]),
             *_steps(*(d.interval or (None, None))), d.predicted_epoch,
             *_steps(d.actual_step), d.error_pct, d.asymptote, d.plateau]
            for d in predictions
        ],
    )  # fmt: skip
    return [table, *_at_first(predictions, "fitted", metric), *_bases(predictions)]


def form_warnings(predictions: list[StepPrediction], metric: str) -> list[str]:
    """Each curve whose fit levels off short of the target."""
    return [
        f"{d.source}: unreachable, the fitted curve levels off at {d.plateau:.4g} {metric} "
        f"({'β2' if d.form == 'optimus' else 'c'} = {d.asymptote:.4g})"
        for d in predictions
        if not d.reachable
    ]


def ensemble_blocks(
    predictions: list[EnsembleStepPrediction], target: float, metric: str
) -> list[Block]:
    """`predict --form ensemble`: the step's posterior median and 90% interval per curve."""
    table = Table(
        f"ensemble: step reaching {metric} {target:g} (posterior median, 90% interval)",
        ["source", "predicted step", "5%", "95%", "P(reach)", "epoch", "actual step",
         "error %", "plateau", "plateau 5%", "plateau 95%"],
        [
            [d.source, *(_steps(d.predicted_step) if d.reachable else [d.verdict]),
             *_steps(*(d.interval or (None, None))), d.p_reachable, d.predicted_epoch,
             *_steps(d.actual_step), d.error_pct, d.plateau, *d.plateau_interval]
            for d in predictions
        ],
    )  # fmt: skip
    return [table, *_at_first(predictions, "measured", metric), *_bases(predictions)]


def ensemble_warnings(predictions: list[EnsembleStepPrediction]) -> list[str]:
    """Why a curve has no answer, or what an answer's open upper end (95% "-") means."""
    return [f"{d.source}: {d.verdict}, {d.reason}" for d in predictions if d.reason]


def prediction_view(
    predictions: Sequence[StepPrediction | EnsembleStepPrediction],
    form: str,
    target: float,
    metric: str,
) -> tuple[list[Block], list[str]]:
    """`converge predict`'s tables and lines, and its warnings, for either kind of
    prediction (`form` says which all of them are)."""
    if form == "ensemble":
        ensemble = [p for p in predictions if isinstance(p, EnsembleStepPrediction)]
        return ensemble_blocks(ensemble, target, metric), ensemble_warnings(ensemble)
    fitted = [p for p in predictions if isinstance(p, StepPrediction)]
    return form_blocks(fitted, form, target, metric), form_warnings(fitted, metric)


def _never(beta0: float, beta2: float, target: float, metric: str) -> str:
    """Why a predicted curve has no step reaching `target`: it levels off short of it, or it
    falls past it only after more steps than a float counts (β0 = 1e-310; `converge plan`
    says how many)."""
    from dlperf.converge.curve import to_decreasing

    past = beta0 > 0 and to_decreasing(target, metric) > beta2
    return "more steps than a float counts" if past else "unreachable"


def regression_blocks(result: Regression, predict_at: str | None) -> list[Block]:
    """`converge regress`: the coefficients of log β, then the prediction for `predict_at`
    and its comparison with a measured run, when there are those."""
    coef, rmse = result.coef, result.rmse_log
    blocks: list[Block] = [
        Table(
            f"log β regressed on {', '.join(result.features)} over {len(result.runs)} runs",
            ["column", *BETAS],
            [[col, *(coef[b][i] for b in BETAS)] for i, col in enumerate(result.columns)]
            + [["rmse (log)", *(rmse[b] for b in BETAS)]],
        )
    ]
    pred = result.prediction
    if pred is None:
        return blocks
    target = pred.target
    rows: list[list[Any]] = [[b, getattr(pred, b)] for b in BETAS]
    if target is not None:
        step = pred.predicted_step
        never = _never(pred.beta0, pred.beta2, target, result.metric)
        rows.append([f"step reaching {target:g}", never if step is None else float(step)])
        if pred.predicted_epoch is not None:
            rows.append([f"epoch reaching {target:g}", pred.predicted_epoch])
        if pred.actual_step is not None:
            rows.append(["measured step (a run with these features)", *_steps(pred.actual_step)])
            rows.append(["error %", pred.error_pct])
    c = pred.compare
    if c is not None:
        rows += [
            [f"compared with {c.legend}: curve error % (mean, {c.n_points} points)",
             c.curve_error_pct],
            ["curve rmse", c.curve_rmse],
        ]  # fmt: skip
        if target is not None:
            rows += [
                [f"measured step reaching {target:g}",
                 "not reached" if c.actual_step is None else float(c.actual_step)],
                [f"measured epoch reaching {target:g}", c.actual_epoch],
                ["predicted epoch", c.predicted_epoch],
                ["error % on the steps (and epochs) to the target", c.error_pct],
            ]  # fmt: skip
    blocks.append(Table(f"prediction for {predict_at}", ["", "value"], rows))
    if target is not None and pred.at_first_step:
        where = f"the runs' first step {pred.predicted_step}"
        blocks.append(_already("predicted", target, result.metric, where))
    return [*blocks, f"basis: {pred.basis}"]
