"""`[predict]`: the device and PALEO's figures of `dlperf predict`."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, field_validator

from dlperf.config.analyze import AnalyzeJob
from dlperf.config.base import PPP, Count, Figure, Section
from dlperf.parsing import plain_number

# SI prefixes a number of FLOPs may carry: "15.5G" is 15.5e9.
SI = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
# FLOPs of one image: a count, so at least 1 (1e-300 was taken, and FLOPs ÷ peak printed inf
# images/s, null in JSON), and at most FLOPS_MAX, an exaFLOP (1000P), far past any model's
# image; 1e300 was shown as "1e+288 T" FLOPs, a time of 2e287 s.
FLOPS_MAX = 1e18
Flops = Annotated[float, Field(ge=1, le=FLOPS_MAX)]


class PredictConfig(Section):
    """`dlperf predict`: the device and PALEO's figures (the model is counted as [analyze]
    says: input, batch, train, precision, classes)."""

    device: str | None = None
    """Catalog device (`dlperf devices`); None with predict.measure: this machine,
    calibrated in the same rounds as the measurement."""
    ppp: PPP | None = None
    """Platform percent of peak in [1e-6, 1] for every operator kind; None: the device's
    calibrated rates, or a catalog GPU's peak (PPP = 1)."""
    peak_tflops: Figure | None = None
    """Peak in 10^12 FLOP/s at analyze.precision instead of the device's (e.g. 8.73 for a
    whole K80 board), from 1e-6 to 1e9; bandwidth stays the device's."""
    flops: Flops | None = None
    """FLOPs of one image (forward; training: forward + backward) for FLOPs / peak instead of
    the counted ones: a number from 1 to 1e18, or text with an SI prefix ("15.5G")."""
    measure: bool = False
    """Also run the model here, interleaved with calibration kernels, and compare; the result
    is stored as a run."""
    reps: Count | None = None
    """predict.measure: rounds of calibration kernels + one timed model run; None: 10.
    Refused without predict.measure, which alone runs them."""

    @field_validator("flops", mode="before")
    @classmethod
    def _si_prefix(cls, value: Any) -> Any:
        # Only text ending in a prefix is read here; anything else meets the strict number check.
        if isinstance(value, str) and value[-1:].upper() in SI:
            try:
                return plain_number(value[:-1]) * SI[value[-1].upper()]
            except ValueError:
                # no "(got ...)": the one-line error (config.loading) adds the value itself
                raise ValueError("expected a number of FLOPs per image, e.g. 15.5G") from None
        return value


class PredictJob(AnalyzeJob):
    predict: PredictConfig
