"""`dlperf report`: a static, offline HTML site of stored runs and studies (dlperf.report.site)."""

from __future__ import annotations

from pathlib import Path

import typer

from dlperf.cli import console
from dlperf.cli.app import Json, PathText, app, db_words, open_store
from dlperf.errors import UserError
from dlperf.parsing import one_line


@app.command()
def report(
    run_ids: list[int] = typer.Argument(
        None, metavar="RUN_ID", help="Run IDs (none: the newest 20 runs)."
    ),
    study: list[int] = typer.Option(
        [], "--study", metavar="ID", help="A study and every run of it (repeatable)."
    ),
    last: int = typer.Option(None, "--last", metavar="N", help="The newest N runs."),
    # Text, not a Path: Path('') is '.', which wrote the site into the current directory
    # (a path all the same, its ~ expanded: PathText).
    out_text: str = typer.Option(
        ..., "--out", metavar="DIR", help="Directory of the site.", click_type=PathText()
    ),
    as_json: Json = False,
) -> None:
    """Write a static HTML report that opens offline: DIR/index.html, one page per run
    (curves, phases, doctor's findings, config, system) and per study (scaling, all-reduce,
    sweep ranking), with every study a chosen run belongs to.

    Example: dlperf report --last 10 --out report
    """
    from dlperf.parsing import not_blank
    from dlperf.paths import writing
    from dlperf.report.site import build_report
    from dlperf.store.query import check_limit

    check_limit(last, "--last")
    where = "report writes its site into a directory"
    out = Path(not_blank(out_text, where, "dlperf report --out report"))
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file, not a directory", "give a directory for the site")
    with console.reporter() as rep, writing(out):
        store = open_store(create=False)
        done = build_report(store, out, run_ids or (), study, last, rep, db=db_words())
    console.gone(done.gone, "report")
    if console.printed_json(as_json, done.to_dict()):
        return
    console.out.print(
        f"{len(done.runs)} run(s), {len(done.studies)} study(ies): "
        f"{len(done.pages)} pages in {one_line(str(done.out))}{_removed(done.removed)}"
    )
    console.tell([], done.out / "index.html")


def _removed(pages: list[str]) -> str:
    """What the report removed of an earlier one in its directory, if anything."""
    if not pages:
        return ""
    return f"; removed {len(pages)} page{'s' if len(pages) > 1 else ''} of an earlier report"
