"""What a run whose loss stopped being finite is advised to try: the one wording of the
engine's failure line (dlperf.engine.loop.Diverged) and of the doctor's `diverged` fix, which
leaves out a setting the run already has in force. Torch-free: the doctor reads it too."""

from __future__ import annotations

CLIP = 1.0  # the train.grad_clip advised: the gradients' global norm clipped to 1
# A training loss that rose past this many times its first had diverged: an evaluation loss
# that is not finite then follows from the weights training made, not from the model's eval
# mode (a classifier's cross-entropy starts near ln K and falls; x100 is far past noise).
BLOW_UP = 100.0
# ... times at least this: a loss that starts near 0 (a fine-tune's 3e-4, or 0) passes x100 its
# first on noise; past 100 a loss of ordinary scale (cross-entropy, a mean squared error of
# standardised targets) has blown up wherever it started.
BLOW_UP_FLOOR = 1.0
# The advice of a dlperf.track run, in the terms of the user's own loop: it has no train.lr.
LOOP_FIX = (
    "try a lower learning rate in your loop, or clip its gradients "
    f"(torch.nn.utils.clip_grad_norm_(model.parameters(), {CLIP}) before optimizer.step())"
)


def fp32_advice(precision: str | None) -> list[str]:
    """`run.precision = "fp32"`, unless the run trained in fp32 (None: not known, advised)."""
    return [] if precision == "fp32" else ['run.precision = "fp32"']


def _or_fp32(said: str, precision: str | None) -> str:
    """`said`, then `, or try run.precision = "fp32"` where that is not in force."""
    return said + "".join(f", or try {advice}" for advice in fp32_advice(precision))


def diverged_fix(
    step: int | None, lr: float | None, grad_clip: float | None, precision: str | None
) -> str:
    """The advice for a training loss that was not finite at `step` (1: before any update;
    None: not known) of a run at learning rate `lr`, clipping at `grad_clip` (None: none) and
    at `precision` (None: not known). A lower learning rate is always worth a try; clipping
    at CLIP where the run clips at more or not at all; fp32 where it trained in another."""
    if step == 1:
        # The first step's loss comes from the initial weights: no learning rate made it.
        said = (
            "before any update, so the model itself, not the learning rate: look at its "
            "forward and the initial values of its layers"
        )
        return _or_fp32(said, precision)
    now = f" (now {lr:g})" if lr is not None else ""
    clip = []
    if grad_clip is None or grad_clip > CLIP:
        clip = [f"train.grad_clip = {CLIP}" + (f" (now {grad_clip:g})" if grad_clip else "")]
    return "try " + either([f"a lower train.lr{now}", *clip, *fp32_advice(precision)])


def blown_up(
    first: tuple[int, float], peak: tuple[int, float], last: tuple[int, float] | None = None
) -> str | None:
    """How a training loss rose from its `first` (step, value) to its largest, `peak`, where
    that was past BLOW_UP times max(|first|, BLOW_UP_FLOOR), and its `last` (None: not known)
    was too: "from 2.3 (step 1) to 1.7e+32 (step 2)"; None where not. A spike that came back
    down is not a blow-up: the weights evaluated then gave ordinary losses."""
    limit = BLOW_UP * max(abs(first[1]), BLOW_UP_FLOOR)
    if not peak[1] > limit or (last is not None and not last[1] > limit):
        return None
    rose = f"from {first[1]:g} (step {first[0]}) to {peak[1]:g} (step {peak[0]})"
    return rose + (f", still {last[1]:g} at step {last[0]}" if last and last != peak else "")


def evaluation_fix(precision: str | None) -> str:
    """The advice for an evaluation loss that was not finite (the training loss was)."""
    return _or_fp32("look at what its forward does when not training (model.eval())", precision)


def either(options: list[str]) -> str:
    """`a`, `a or b`, `a, b, or c`."""
    if len(options) <= 2:
        return " or ".join(options)
    return ", ".join(options[:-1]) + ", or " + options[-1]
