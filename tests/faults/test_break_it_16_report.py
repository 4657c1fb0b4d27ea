"""The sixteenth break-it round, part D, cause 2: `dlperf report`'s page of a distill study
showed its summary figures raw (test accuracy 0.8384, pseudo-label precision 1, scoring speed
34958) where every other page of the site shows the same figures as 83.8%, 100.0% and 34,958,
and its verdict read "Best K = 20: 0.9276, +0.0892 over the teacher (0.8384, run 1)". The
stages' table now shows each key as the run's own page does (less a rate's unit, which the
column names), and the verdict gives accuracies in percent and the gain in points."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dlperf.distill.summary import BaselineRow, Point, Trained, verdict
from dlperf.store import RunStore
from tests.conftest import CliResult

RECIPE = {"top_p": "1", "teacher": "1", "unlabeled": "digits:holdout=0.5"}


def _stage(store: RunStore, study: int, kind: str, summary: dict[str, Any], **tags: str) -> int:
    """A finished run of a distill study's stage, tagged as `dlperf distill` tags it."""
    run = store.create_run(f"dist-{tags['stage']}", kind, {"model": {"name": "smallcnn"}},
                           study_id=study)  # fmt: skip
    store.finish_run(run, "finished", summary=summary)
    store.set_tags(run, tags)
    return run


def test_a_distill_page_shows_figures_as_every_page_does(
    cli: Callable[..., CliResult], store: RunStore, tmp_path: Path
) -> None:
    """The tester's study: a teacher (also the baseline), students at K = 5 and 20."""
    study = store.create_study("dist", "distill")
    _stage(store, study, "run", {"test_accuracy": 0.8384}, stage="teacher")
    for k, kept, accuracy in ((5, 50, 0.9012), (20, 200, 0.9276)):
        select = {"selected": kept, "pseudo_label_precision": 1.0 if k == 5 else 0.995,
                  "scoring_images_per_s": 34958.4}  # fmt: skip
        _stage(store, study, "select", select, stage="select", top_k=str(k), **RECIPE)
        finetune = {"test_accuracy": accuracy}
        _stage(store, study, "run", finetune, stage="finetune", top_k=str(k), **RECIPE)
    out = tmp_path / "site"
    result = cli("report", "--study", str(study), "--out", str(out))
    assert result.code == 0, result.err
    page = (out / f"study-{study}.html").read_text(encoding="utf-8")

    def figures(run: int) -> list[str]:
        """Run `run`'s test accuracy, images kept, precision and scoring speed in the table."""
        stages = page.split("<h2>Stages</h2>")[1].split("</table>")[0]
        (cells,) = [row for row in stages.split("<tr>") if f'"run-{run}.html"' in row]
        return re.findall(r"<td[^>]*>([^<]*)</td>", cells)[-4:]

    assert figures(1) == ["83.8%", "-", "-", "-"]  # the teacher; its run page: 83.8%
    assert figures(2) == ["-", "50", "100.0%", "34,958"]  # K = 5's select run
    assert figures(3) == ["90.1%", "-", "-", "-"]  # K = 5's fine-tuning
    assert figures(4) == ["-", "200", "99.5%", "34,958"]
    run_page = (out / "run-2.html").read_text(encoding="utf-8")
    assert ">100.0%<" in run_page and ">34,958 images/s<" in run_page
    assert (
        "<p>Newest recipe: teacher run 1, P = 1, unlabelled images digits:holdout=0.5, student "
        "smallcnn. Best K = 20: 92.8%, +8.9 points over the teacher (83.8%, run 1); the teacher "
        "is also the baseline.</p>"
    ) in page


def test_the_verdict_in_percent_names_each_gain_in_points() -> None:
    """The report's verdict; `dlperf distill`'s keeps the fractions of its own table."""
    won = Point(50, 1, 0.9694, None)
    teacher, baseline = Trained(1, "resnet20", 0.9415), BaselineRow(2, "smallcnn", 0.95)
    assert verdict(won, teacher, baseline, percent=True) == (
        "best K = 50: 96.9%, +2.8 points over the teacher (94.2%, run 1); "
        "+1.9 points over the baseline (95.0%, run 2)"
    )
    assert verdict(won, teacher, baseline).startswith("best K = 50: 0.9694, +0.0279 over")
