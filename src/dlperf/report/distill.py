"""The figure of a distill study (matplotlib, a file only): student test accuracy against
K, with the teacher's and the labelled-only baseline's accuracy as lines."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from matplotlib.figure import Figure  # no pyplot: files only, no global state

from dlperf.paths import save_figure
from dlperf.report import tight_layout

if TYPE_CHECKING:
    from dlperf.distill.summary import BaselineRow, DistillResult, Student, Trained


def figure_name(result: DistillResult) -> str:
    """The figure's file name, made of the recipe it shows: P, the Ks, the student and the
    pool, so that another recipe in the same study gets a figure of its own
    (`distill_top-p2_top-k25-50_smallcnn_digits-holdout-0.5.png`)."""
    students = result.students
    ks = "-".join(str(s.top_k) for s in students)
    model = _part(str(result.baseline.model if result.baseline else None))
    return f"distill_top-p{students[0].top_p}_top-k{ks}_{model}_{_part(result.unlabeled)}.png"


def _part(text: str) -> str:
    """`text` (a model's name or file path, a pool) as part of a file name: no separators,
    and at most 80 characters, since a name holds 255 bytes; a longer one keeps its end (the
    file and the factory) after a digest of the whole, so that two recipes still differ."""
    part = re.sub(r"[^\w.]+", "-", text, flags=re.ASCII).strip("-")
    if len(part) <= 80:
        return part
    return f"{hashlib.sha1(text.encode()).hexdigest()[:8]}-{part[-70:]}"


def distill_figure(result: DistillResult) -> Path | None:
    """Draw what `dlperf distill` ran into its study's directory (`figure_name`); None when
    no student finished."""
    if not any(s.test_accuracy is not None for s in result.students):
        return None
    path = Path(result.directory) / figure_name(result)
    study = (result.study_id, result.name)
    fig = draw_distill(study, result.teacher, result.baseline, result.students)
    return save_figure(fig, path)


def draw_distill(
    study: tuple[int, str],
    teacher: Trained | None,
    baseline: BaselineRow | None,
    students: Sequence[Student],
) -> Figure:
    """Each student that finished, the teacher and the baseline (None: none in the study);
    `study`: its id and name."""
    students = sorted((s for s in students if s.test_accuracy is not None), key=lambda s: s.top_k)
    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    ks = [s.top_k for s in students]
    model = baseline.model if baseline else ""
    accuracies = [s.test_accuracy for s in students if s.test_accuracy is not None]  # all: typed
    ax.plot(ks, accuracies, "o-", color="C0", label=f"student ({model}) after fine-tuning")
    for i, s in enumerate(students):
        if s.pseudo_label_precision is not None:
            ax.annotate(
                f"prec. {s.pseudo_label_precision:.2f}",
                (ks[i], s.test_accuracy),
                textcoords="offset points",
                xytext=(0, 6),
                ha="center",
                fontsize=7,
            )
    same = baseline is not None and baseline.same_as_teacher
    lines = [("teacher" + (", also the baseline" if same else ""), teacher, "C3", "--")]
    if not same:
        lines.append(("baseline", baseline, "C2", ":"))
    for name, run, color, style in lines:
        if run is not None and run.test_accuracy is not None:
            label = f"{name} ({run.model}, run {run.run_id})"
            ax.axhline(run.test_accuracy, color=color, ls=style, label=label)
    if len(ks) > 1 and max(ks) / min(ks) >= 8:
        ax.set_xscale("log")
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.minorticks_off()
    ax.margins(x=0.08, y=0.15)  # room for the precision labels
    ax.set_xlabel("K: images kept per class")
    ax.set_ylabel("test accuracy (top-1)")
    top_p = students[0].top_p if students else "?"
    ax.set_title(f"distill study {study[0]} ({study[1]}), P = {top_p}", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    tight_layout(fig)
    return fig
