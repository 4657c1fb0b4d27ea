"""dlperf.report.site.html: the report's HTML pieces: escaping, units read from summary keys,
numbers as a person reads them, tables, and figures fitted to the page."""

from __future__ import annotations

import base64
import html as std_html
import math

import pytest
from matplotlib.figure import Figure

from dlperf.report.site import html


@pytest.mark.parametrize(
    ("key", "kind"),
    [
        ("train_time_s", "s"), ("phases.data", "s"), ("step_time_spread.min", "s"),
        ("peak_memory_bytes", "B"), ("h2d_bytes_per_s", "B/s"), ("busbw_gbps", "GB/s"),
        ("error_pct", "%"), ("scoring_images_per_s", "images/s"), ("throughput", "samples/s"),
        ("throughput_spread.max", "samples/s"), ("test_accuracy", "fraction"),
        ("efficiency", "fraction"), ("epochs", None), ("steps", None),
    ],
)  # fmt: skip
def test_unit_is_read_from_the_key(key: str, kind: str | None) -> None:
    assert html.unit(key) == kind


@pytest.mark.parametrize(
    ("key", "value", "shown"),
    [
        ("train_time_s", 12.34, "12.3 s"),
        ("train_time_s", 0.004591, "4.59 ms"),
        ("train_time_s", 2.5e-6, "2.5 µs"),
        ("train_time_s", 0.0, "0 s"),
        ("train_time_s", 90.0, "1.5 min"),
        ("train_time_s", 7200.0, "2 h"),
        ("peak_memory_bytes", 1.09e9, "1.09 GB"),
        ("peak_memory_bytes", 512, "512 B"),
        ("error_pct", 3.14159, "3.1%"),
        ("test_accuracy", 0.932, "93.2%"),
        ("throughput", 1234.4, "1,234 samples/s"),
        ("throughput", 12.34, "12.3 samples/s"),
        ("train_time_s", math.nan, "nan"),
        ("epochs", 12345.6, "12,346"),
        ("train_time_s", "n/a", "n/a"),
        ("train_time_s", True, "yes"),  # a boolean is no number of seconds
    ],
)
def test_quantity_scales_times_sizes_and_fractions(key: str, value: object, shown: str) -> None:
    assert html.quantity(key, value) == shown


def test_table_figure_drops_a_rates_unit_that_the_column_names() -> None:
    assert html.table_figure("throughput", 1562.2) == "1,562"
    assert html.table_figure("efficiency", 0.443) == "44.3%"
    assert html.table_figure("train_time_s", 2.0) == "2 s"


def test_esc_and_fmt_escape_text_and_write_containers_as_json() -> None:
    assert html.esc('<b a="1">&') == "&lt;b a=&quot;1&quot;&gt;&amp;"
    assert html.fmt({"a": [1, 2]}) == '{"a": [1, 2]}'
    assert html.fmt((1, "x")) == '[1, "x"]'


def test_short_name_cuts_a_long_name_keeping_it_whole_in_the_title() -> None:
    assert html.short_name("<r>") == "&lt;r&gt;"
    long = "n" * 100 + "<"
    cut = html.short_name(long)
    assert cut.startswith('<span title="' + std_html.escape(long, quote=True) + '">')
    assert cut.endswith("n" * (html.NAME_CHARS - 1) + "…</span>")


def test_table_escapes_cells_but_raw_columns_and_shows_keyed_numbers_with_units() -> None:
    out = html.table(
        ["run", "<col>", "time", "n"],
        [['<a href="x">1</a>', "<i>", 0.5, 12345.6]],
        raw=[0],
        keys={2: "train_time_s"},
    )
    assert out == (
        "<table><tr><th>run</th><th>&lt;col&gt;</th><th>time</th><th>n</th></tr>"
        '<tr><td><a href="x">1</a></td><td>&lt;i&gt;</td><td class="num">500 ms</td>'
        '<td class="num">12,346</td></tr></table>'
    )


def test_key_values_titles_a_value_shown_otherwise_than_stored() -> None:
    assert html.key_values({}) == '<p class="note">nothing stored</p>'
    out = html.key_values({"train_time_s": 0.5, "epochs": 3}, html.quantity)
    assert '<th>train_time_s</th><td class="value" title="0.5">500 ms</td>' in out
    assert '<th>epochs</th><td class="value">3</td>' in out


def test_page_links_home_except_on_the_index_and_escapes_the_title() -> None:
    run = html.page("run <1>", "<p>body</p>")
    assert run.startswith("<!DOCTYPE html>") and "<title>run &lt;1&gt;</title>" in run
    assert '<nav><a href="index.html">← all runs and studies</a></nav>' in run
    assert "<nav>" not in html.page("dlperf report", "", home=True)
    assert html.status("failed") == '<span class="failed">failed</span>'
    assert html.link('a"b.html', "<x>") == '<a href="a&quot;b.html">&lt;x&gt;</a>'


def test_png_fits_a_figure_to_the_column_and_raises_small_text() -> None:
    fig = Figure(figsize=(4, 3))
    ax = fig.subplots()
    ax.set_title("t", fontsize=6)
    uri = html.png(fig)
    assert fig.get_figwidth() == html.FIG_WIDTH_IN
    assert ax.title.get_fontsize() == html.MIN_FONT_PT
    assert uri.startswith("data:image/png;base64,")
    data = base64.b64decode(uri.split(",", 1)[1])
    assert data[:4] == b"\x89PNG"
    width = int.from_bytes(data[16:20], "big")  # the IHDR chunk's width
    assert width == html.COLUMN_PX
    assert html.figure(uri, "a <b>") == (
        f'<figure><img src="{uri}" alt="a &lt;b&gt;"><figcaption>a &lt;b&gt;</figcaption></figure>'
    )
