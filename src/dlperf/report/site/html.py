"""HTML building blocks of the report: one escaped page template with its CSS inline, tables,
and figures embedded as base64 PNG data URIs. Every stored string goes through `esc`: run
names, config values and errors come from users."""

from __future__ import annotations

import base64
import html
import io
import json
import math
from collections.abc import Iterable, Sequence
from typing import Any

DPI = 80  # the figures' resolution: a page of 50 runs stays light and quick to draw

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
.error { color: #a00; } .warning { color: #a60; } .info { color: #06a; }
.finished { color: #080; } .failed, .lost, .killed { color: #a00; } .running { color: #a60; }
p.note { color: #555; font-size: 0.9em; }
"""


def esc(value: Any) -> str:
    """Any value as escaped HTML text."""
    return html.escape(fmt(value), quote=True)


def fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
            return f"{value:.4g}"
        return f"{value:.4g}" if abs(value) < 1 else f"{value:,.4g}"
    if isinstance(value, dict | list | tuple):
        return json.dumps(value, default=str)
    return str(value)


def _numeric(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def table(columns: Sequence[str], rows: Iterable[Sequence[Any]], raw: Sequence[int] = ()) -> str:
    """An HTML table; cells are escaped except those of the columns in `raw` (already HTML,
    built here from escaped parts: links, severity marks)."""
    head = "".join(f"<th>{esc(c)}</th>" for c in columns)
    body = []
    for row in rows:
        cells = []
        for i, value in enumerate(row):
            if i in raw:
                cells.append(f"<td>{value}</td>")
            elif _numeric(value):
                cells.append(f'<td class="num">{esc(value)}</td>')
            else:
                cells.append(f"<td>{esc(value)}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def key_values(pairs: dict[str, Any]) -> str:
    """A two-column table of flattened keys and their values."""
    if not pairs:
        return '<p class="note">nothing stored</p>'
    rows = "".join(
        f'<tr><th>{esc(k)}</th><td class="value">{esc(v)}</td></tr>' for k, v in pairs.items()
    )
    return f"<table>{rows}</table>"


def link(href: str, text: Any) -> str:
    return f'<a href="{html.escape(href, quote=True)}">{esc(text)}</a>'


def png(fig: Any) -> str:
    """A matplotlib Figure as a base64 PNG data URI."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


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
