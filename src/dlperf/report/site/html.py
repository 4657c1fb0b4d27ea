"""HTML building blocks of the report: one escaped page template with its CSS inline, tables,
and figures embedded as base64 PNG data URIs. Every stored string goes through `esc`: run
names, config values and errors come from users."""

from __future__ import annotations

import base64
import html
import io
import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from dlperf import formatting
from dlperf.formatting import scaled, unit
from dlperf.report import literal_text, tight_layout

# Figures are drawn at the content column's width, so that the browser shows them 1:1 and a
# font's points read as on paper (10 pt at 100 dpi: 14 px, the body text's size).
COLUMN_PX = 1100
DPI = 100
FIG_WIDTH_IN = COLUMN_PX / DPI
MIN_FONT_PT = 9.0  # smaller text, drawn for a narrower figure, is raised to this

CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 0 auto; max-width: 1100px;
       padding: 1em 2em 3em; color: #222; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; } h2 { font-size: 1.2em; margin-top: 1.6em;
     border-bottom: 1px solid #ddd; }
nav { margin-bottom: 1em; font-size: 0.9em; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 2px 8px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.value { max-width: 700px; overflow-wrap: anywhere; font-family: monospace; }
figure { margin: 1em 0; } figcaption { font-size: 0.85em; color: #555; }
img { max-width: 100%; height: auto; border: 1px solid #eee; }
figure img { display: block; width: 100%; box-sizing: border-box; }
details > summary { cursor: pointer; color: #555; font-size: 0.9em; margin: 0.5em 0; }
.error { color: #a00; } .warning { color: #a60; } .info { color: #06a; }
.finished { color: #080; } .failed, .lost, .killed { color: #a00; } .running { color: #a60; }
p.note { color: #555; font-size: 0.9em; }
"""


def esc(value: Any) -> str:
    """Any value as escaped HTML text."""
    return html.escape(fmt(value), quote=True)


def fmt(value: Any) -> str:
    """A value as text: a number as the terminal's tables print it (12345.6: "12,346"),
    lists and dicts as JSON."""
    if isinstance(value, dict | list | tuple):
        return json.dumps(value, default=str)
    return formatting.fmt(value)


def quantity(key: str, value: Any) -> str:
    """A summary value read by a person: as `formatting.scaled` shows it (1.09 GB, 12.3 s,
    1,234 samples/s, 93.2%), else as `fmt` (a list or dict as JSON)."""
    return scaled(key, value) or fmt(value)


def as_set(key: str, value: Any) -> str:
    """A config value as the user set it: a float whole, as its shortest round-trip repr
    (0.12345, 0.050001, 123456789.5), where `fmt`'s 4 significant digits showed lr 0.12345
    and 0.12346 both as 0.1235, and 0.050001 as the default 0.05; anything else as `fmt`
    (a list or dict as JSON, whose floats are whole too). `key` is unused: the signature is
    `key_values`' `shown`."""
    return repr(value) if isinstance(value, float) else fmt(value)


def _rate(key: str) -> str | None:
    """The unit of a key whose figures a table shows without it, in its header instead: a
    rate (samples/s), which is never scaled; seconds and bytes are, so each cell says which."""
    kind = unit(key)
    return kind if kind and kind.endswith("/s") else None


def table_figure(key: str, value: Any) -> str:
    """A summary value in a table whose column is named by `heading`: as `quantity` shows it
    on a run's page (efficiency 44.3%, train time 52 ms, throughput 1,562), less a rate's
    unit, so that a figure reads the same on the index, a study's page and its run's page."""
    shown = quantity(key, value)
    rate = _rate(key)
    return shown.removesuffix(f" {rate}") if rate else shown


def heading(label: str, key: str) -> str:
    """The header of a column of `key`'s figures as `table_figure` shows them: the unit named
    where the cells leave it out (a rate), else the label alone (the cells carry theirs)."""
    rate = _rate(key)
    return f"{label} ({rate})" if rate else label


# Names longer than this are cut in tables (the index), whole in the cell's title (hover).
NAME_CHARS = 80


def short_name(value: Any) -> str:
    """A name for a table cell, as HTML: escaped, cut to NAME_CHARS with the whole name in
    its title attribute when longer (a 10,000-character name filled the index)."""
    text = fmt(value)
    if len(text) <= NAME_CHARS:
        return html.escape(text)
    cut = html.escape(text[: NAME_CHARS - 1]) + "…"
    return f'<span title="{html.escape(text, quote=True)}">{cut}</span>'


def _numeric(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def table(
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    raw: Sequence[int] = (),
    keys: dict[int, str] | None = None,
) -> str:
    """An HTML table; cells are escaped except those of the columns in `raw` (already HTML,
    built here from escaped parts: links, severity marks). A number in a column of `keys`
    (column: summary key) is shown as `table_figure` shows that key's values."""
    keys = keys or {}
    head = "".join(f"<th>{esc(c)}</th>" for c in columns)
    body = []
    for row in rows:
        cells = []
        for i, value in enumerate(row):
            if i in raw:
                cells.append(f"<td>{value}</td>")
            elif _numeric(value):
                shown = table_figure(keys[i], value) if i in keys else fmt(value)
                cells.append(f'<td class="num">{html.escape(shown)}</td>')
            else:
                cells.append(f"<td>{esc(value)}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def key_values(pairs: dict[str, Any], shown: Callable[[str, Any], str] | None = None) -> str:
    """A two-column table of flattened keys and their values, each shown as `shown(key,
    value)` says (default: `fmt`) with the stored value in its title where the two differ
    (a value shown whole, `as_set`'s 0.12345, needs none)."""
    if not pairs:
        return '<p class="note">nothing stored</p>'
    rows = []
    for k, v in pairs.items():
        text = shown(k, v) if shown else fmt(v)
        raw = json.dumps(v, default=str)
        told = text in (fmt(v), raw)
        title = "" if told else f' title="{html.escape(raw, quote=True)}"'
        rows.append(f'<tr><th>{esc(k)}</th><td class="value"{title}>{html.escape(text)}</td></tr>')
    return f"<table>{''.join(rows)}</table>"


def link(href: str, text: Any) -> str:
    return f'<a href="{html.escape(href, quote=True)}">{esc(text)}</a>'


def png(fig: Any) -> str:
    """A matplotlib Figure as a base64 PNG data URI, fitted to the page by `fit`."""
    fit(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    return png_bytes(buffer.getvalue())


def fit(fig: Any) -> None:
    """Make a figure, whoever drew it, read on the page: as wide as the content column (shown
    1:1, neither shrunk nor blown up), no text under MIN_FONT_PT, and margins fitted to its
    labels and legends (constrained layout) so that none is cut off; its texts drawn as
    written (a run name holding `$`), before the layout measures them."""
    from matplotlib.text import Text

    literal_text(fig)
    fig.set_size_inches(FIG_WIDTH_IN, fig.get_figheight())
    for text in fig.findobj(Text):
        if text.get_fontsize() < MIN_FONT_PT:
            text.set_fontsize(MIN_FONT_PT)
    notes = [t for t in fig.texts if t.get_text()]
    if not notes:
        fig.set_layout_engine("constrained")
        return
    # Constrained layout leaves text placed on the figure itself (a scale study's footnote)
    # where it is, under the axes it moves: keep the axes clear of it instead.
    boxes = [t.get_window_extent().transformed(fig.transFigure.inverted()) for t in notes]
    low = max((b.y1 for b in boxes if b.y0 < 0.5), default=0.0)
    high = min((b.y0 for b in boxes if b.y0 >= 0.5), default=1.0)
    fig.set_layout_engine(None)
    tight_layout(fig, rect=(0, low, 1, high))


def png_bytes(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def figure(uri: str, caption: str) -> str:
    text = esc(caption)
    return f'<figure><img src="{uri}" alt="{text}"><figcaption>{text}</figcaption></figure>'


def page(title: str, body: str, home: bool = False) -> str:
    nav = "" if home else f"<nav>{link('index.html', '← all runs and studies')}</nav>"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head>"
        f"<body>{nav}<h1>{esc(title)}</h1>{body}</body></html>\n"
    )


def status(value: str) -> str:
    return f'<span class="{html.escape(value, quote=True)}">{esc(value)}</span>'
