"""Every figure dlperf draws, in one place: matplotlib with the Agg backend, files only.

curves.py: loss-curve fits, regressions and the cluster plan; scaling.py: scaling studies;
staleness.py: the asynchronous-SGD study; roofline.py: `dlperf predict --plot`;
max_batch.py: `dlperf scale max-batch`.
"""

import atexit
import os
import shutil
import sys
import tempfile
import textwrap
import warnings
from pathlib import Path
from typing import Any


def _writable_config() -> None:
    """Point MPLCONFIGDIR at a temporary folder of this process's (removed as it ends) when
    matplotlib's config or cache folder cannot be made or written: a HOME that cannot be
    written, an account with no home. matplotlib fell back to such a folder itself, but only
    after two warnings on stderr at every figure ("mkdir -p failed ..." and advice to set
    MPLCONFIGDIR); the figures are the same, the fonts are looked up again in each process.
    The folders are Linux's (and FreeBSD's), $XDG_CONFIG_HOME or ~/.config and
    $XDG_CACHE_HOME or ~/.cache, each /matplotlib; elsewhere matplotlib's rule is left to it."""
    if os.environ.get("MPLCONFIGDIR") or not sys.platform.startswith(("linux", "freebsd")):
        return
    try:
        folders = [
            Path(os.environ.get(variable) or Path.home() / default, "matplotlib")
            for variable, default in (("XDG_CONFIG_HOME", ".config"), ("XDG_CACHE_HOME", ".cache"))
        ]
        for folder in folders:
            folder.mkdir(parents=True, exist_ok=True)
        if all(os.access(folder, os.W_OK) for folder in folders):
            return
    except (OSError, RuntimeError):  # RuntimeError: Path.home() of an account with no home
        pass
    own = tempfile.mkdtemp(prefix="matplotlib-")
    atexit.register(shutil.rmtree, own, ignore_errors=True)
    os.environ["MPLCONFIGDIR"] = own


_writable_config()

from matplotlib.figure import Figure  # noqa: E402 (after the folders are settled: its import looks)
from matplotlib.text import Text  # noqa: E402
from matplotlib.ticker import LogFormatter, ScalarFormatter  # noqa: E402

# A name the figures' font (DejaVu Sans) has no glyph for (a class folder named 猫) is drawn
# as a box; matplotlib also warned, once per draw and save, with its own source lines: eight
# lines of stderr for one `dlperf data describe`. The names stay whole in the text output.
warnings.filterwarnings("ignore", r"Glyph \d+ .* missing from font", UserWarning)


def literal_text(fig: Figure) -> None:
    """Have matplotlib draw every text on `fig` as written. A `$` pair in a run name, metric
    key or file name is the user's text, not maths markup: parsed, `train/a$b$c` was drawn as
    "train/abc" in italics and `bad $\\foo{$` ended the command in a ParseFatalException.
    Tick labels that matplotlib's own formatters write from numbers keep their maths (10^3 on
    a log axis); labels given to set_xticks are text. Each Text reads the setting when it is
    made, so a global rcParams['text.parse_math'] could not tell the two apart (and would
    change the figures of a program that imports dlperf). Called before a figure is first
    laid out or saved: tight_layout below and the report's fit."""
    texts = fig.findobj(Text)  # first: it makes the ticks the axes' locators place now
    numbers: set[Text] = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            numbers.add(axis.offsetText)  # "1e6" or "×10^6" over the ticks
            for ticks, formatter in ((axis.majorTicks, axis.get_major_formatter()),
                                     (axis.minorTicks, axis.get_minor_formatter())):  # fmt: skip
                # Given labels (set_xticks) make all their ticks then; a numeric axis makes
                # more while drawing, which read matplotlib's default: maths, as these.
                if isinstance(formatter, ScalarFormatter | LogFormatter):
                    numbers.update(t for tick in ticks for t in (tick.label1, tick.label2))
    for text in texts:
        if text not in numbers:
            text.set_parse_math(False)


def tight_layout(fig: Figure, rect: tuple[float, float, float, float] | None = None) -> None:
    """`fig.tight_layout(rect=rect)`, or the figure left as drawn where its labels cannot fit
    (a 200-character class name): matplotlib then changes nothing and warns, with its own
    source lines, on the user's stderr. The figure's texts are drawn as written
    (literal_text), before the layout measures them."""
    literal_text(fig)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Tight layout not applied", UserWarning)
        fig.tight_layout(rect=rect)


# After matplotlib's ten colours a line changes its dashes, so 40 lines each look their own:
# run 11 was drawn as run 1 (same colour, same solid line).
DASHES = ("-", "--", ":", "-.")
LOOKS = 10 * len(DASHES)


def look(i: int) -> dict[str, Any]:
    """The colour and line style of the `i`th line (from 0) of a figure of many."""
    return {"color": f"C{i % 10}", "linestyle": DASHES[i // 10 % len(DASHES)]}


def fold(text: Text, room: float) -> None:
    """Wrap `text` (a title, an axis label) into lines of at most `room` pixels along its
    direction: a 100-character metric key or a long run name ran off the figure. Lines break
    at spaces where they can, else inside a word; the text itself is kept whole."""
    whole = text.get_text()
    text.set_parse_math(False)  # the user's text, as literal_text draws it: measured so

    def length() -> float:
        box = text.get_window_extent()
        return box.height if round(text.get_rotation()) % 180 == 90 else box.width

    chars = max((len(line) for line in whole.splitlines()), default=0)
    while chars > 1 and length() > room:
        chars = max(1, min(chars - 1, int(chars * room / length())))
        lines = [
            part
            for line in whole.splitlines()
            for part in textwrap.wrap(line, chars, break_on_hyphens=False) or [""]
        ]
        text.set_text("\n".join(lines))
