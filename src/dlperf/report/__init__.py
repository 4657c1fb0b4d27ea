"""Every figure dlperf draws, in one place: matplotlib with the Agg backend, files only.

curves.py: loss-curve fits, regressions and the cluster plan; scaling.py: scaling studies;
staleness.py: the asynchronous-SGD study; roofline.py: `dlperf predict --plot`;
max_batch.py: `dlperf scale max-batch`.
"""

import warnings

# A name the figures' font (DejaVu Sans) has no glyph for (a class folder named 猫) is drawn
# as a box; matplotlib also warned, once per draw and save, with its own source lines: eight
# lines of stderr for one `dlperf data describe`. The names stay whole in the text output.
warnings.filterwarnings("ignore", r"Glyph \d+ .* missing from font", UserWarning)
