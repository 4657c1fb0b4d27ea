"""A study's stop (`sweep`, `distill`, `scale`): the line that says which study stopped and
how to go on, as `run` says it for its run."""

from __future__ import annotations

import contextlib
import shlex
import sys
from types import TracebackType
from typing import TYPE_CHECKING

from dlperf.stopping import settled
from dlperf.store.urls import masked_words

if TYPE_CHECKING:
    from collections.abc import Callable

    from dlperf.store import RunStore

# The kinds of study a stop leaves to be measured anew (`dlperf scale`, `scale allreduce`)
MEASURED_ANEW = ("scale", "allreduce")


class StudyStop:
    """Around a study's command (`sweep`, `distill`, `scale`, `scale allreduce`): a stop
    signal's exit says which study stopped and how to go on, as `run` does for its run; they
    exited 130 with nothing said. `watch` names the study once the store is open (a stop
    before says nothing: nothing is stored). `resumable`: the study's command continues it
    with --resume (its finished work skipped); a scaling study or an all-reduce benchmark
    (MEASURED_ANEW) is measured anew instead."""

    def __init__(
        self,
        kind: str,
        resume: int | None,
        new: bool,
        say: Callable[[str], None],
    ):
        self.kind, self.resume, self.new = kind, resume, new
        # A scaling study (or an all-reduce benchmark) is measured anew, never continued: its
        # points are timings of now.
        self.resumable = kind not in MEASURED_ANEW
        self.say = say
        self.store: RunStore | None = None
        self.made: int | None = None
        self.found: Callable[[str, str], int] | None = None

    def watch(
        self, store: RunStore, name: str | None, find: Callable[[], int | None] | None = None
    ) -> None:
        """The study is `name`'s of its kind; None: this process stores none (a node of a
        multi-node scaling study but the first). `find`: the study the command continues
        without --resume or --new, where that is not the newest of its name (a sweep's)."""
        if name is None:
            return
        self.store, self.name = store, name
        self.find = find or (lambda: store.find_study(name, self.kind))
        # The study this command makes, by its id: the newest of its name at the stop was
        # another command's where two ran at once (two terminals, two CI jobs on one store).
        create = store.create_study
        # What __exit__ gives back: the instance's own (a test's, another StudyStop's) or none.
        self.found = vars(store).get("create_study")

        def made(name: str, kind: str) -> int:
            self.made = create(name, kind)
            return self.made

        store.create_study = made  # type: ignore[method-assign]

    def __enter__(self) -> StudyStop:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, _: TracebackType | None
    ) -> None:
        if self.store is not None:
            if self.found is None:
                del self.store.create_study  # the class's own again
            else:
                self.store.create_study = self.found  # type: ignore[method-assign,assignment]
        # Not once the study settled (`stopping.settle`): a second stop then cut its output
        # only, and its line said to continue a study with nothing left to run.
        if isinstance(error, KeyboardInterrupt) and self.store is not None and not settled():
            # Any error now is the stop's consequence (dlperf.errors.interrupted): the line is
            # left out, the stop goes on.
            with contextlib.suppress(Exception):
                self.say(self._line())

    def _line(self) -> str:
        study: int | None
        if self.resume is not None:
            study = self.resume
        elif self.made is not None or self.new:
            study = self.made
        else:
            study = self.find()
        if study is None:  # not made by this command
            return f"{self.kind} stopped before its study was stored"
        if not self.resumable:
            article = "an" if self.kind[0] in "aeiou" else "a"
            return (
                f"{self.kind} study {study} stopped; {article} {self.kind} study is not "
                "continued: run the command again to measure it anew"
            )
        # This very command line, the study named: --new would start another one.
        words = [w for w in sys.argv[1:] if w != "--new"]
        shown = masked_words(words)
        if self.resume is None:
            shown += ["--resume", str(study)]
        done = "points" if self.kind == "sweep" else "stages"
        # Said where the password was hidden: the line's command runs once it is put back.
        hid = shown[: len(words)] != words
        fill = "; put the --db password back in place of ***" if hid else ""
        return (
            f"{self.kind} study {study} stopped; continue it (the {done} that finished are "
            f"skipped{fill}): {shlex.join(['dlperf', *shown])}"
        )
