"""Every figure dlperf draws, in one place: matplotlib with the Agg backend, files only.

curves.py: loss-curve fits, regressions and the cluster plan; scaling.py: scaling studies;
staleness.py: the asynchronous-SGD study; roofline.py: `dlperf predict --plot`;
max_batch.py: `dlperf scale max-batch`.
"""

import warnings

from matplotlib.figure import Figure

# A name the figures' font (DejaVu Sans) has no glyph for (a class folder named 猫) is drawn
# as a box; matplotlib also warned, once per draw and save, with its own source lines: eight
# lines of stderr for one `dlperf data describe`. The names stay whole in the text output.
warnings.filterwarnings("ignore", r"Glyph \d+ .* missing from font", UserWarning)


def tight_layout(fig: Figure, rect: tuple[float, float, float, float] | None = None) -> None:
    """`fig.tight_layout(rect=rect)`, or the figure left as drawn where its labels cannot fit
    (a 200-character class name): matplotlib then changes nothing and warns, with its own
    source lines, on the user's stderr."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Tight layout not applied", UserWarning)
        fig.tight_layout(rect=rect)
