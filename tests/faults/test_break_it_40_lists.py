"""Break-it round 40, T1 C5: an empty item in a command-line list (`scale --workers '1,,2'` or
'1,', `--per-worker-batch`, `distill --top-k '10,,20'`, `infer bench --batch '1,,4'`) was dropped
without a word, where `scale allreduce --sizes` and `serve bench --concurrency` refuse it (round
17 had left `distill --top-k 5,,10`). Every flag that is short for a list key refuses it now, in
one line naming the key, exit 2, before anything is read or run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import CliResult

Cli = Callable[..., CliResult]

EXAMPLES = Path(__file__).parents[2] / "examples"


@pytest.mark.parametrize(
    ("argv", "key", "given"),
    [
        (["scale", "run", "digits_smallcnn.toml", "--workers", "1,,2", "--emit", "slurm"],
         "scale.workers", "1,,2"),
        (["scale", "run", "digits_smallcnn.toml", "--workers", "1,", "--emit", "slurm"],
         "scale.workers", "1,"),
        (["scale", "run", "digits_smallcnn.toml", "--per-worker-batch", "16, ,32", "--emit",
          "slurm"], "scale.per_worker_batch", "16, ,32"),
        (["distill", "distill_digits.toml", "--top-k", "10,,20"], "distill.top_k", "10,,20"),
        (["infer", "bench", "missing.onnx", "--batch", "1,,4"], "infer.batch", "1,,4"),
    ],
)  # fmt: skip
def test_an_empty_item_in_a_list_flag_is_refused(
    cli: Cli, tmp_path: Path, argv: list[str], key: str, given: str
) -> None:
    for name in ("digits_smallcnn.toml", "distill_digits.toml"):
        (tmp_path / name).write_text((EXAMPLES / name).read_text())
    result = cli(*argv)
    assert result.code == 2, result.err
    lines = [line for line in result.err.splitlines() if line.strip()]
    assert lines == [
        f"error: {key}: {given!r} holds an empty item between its commas "
        "(leave out the empty item, e.g. 1,2)"
    ], result.err
    assert not result.out.strip()


def test_a_list_without_an_empty_item_is_read_as_before(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "exp.toml").write_text((EXAMPLES / "digits_smallcnn.toml").read_text())
    argv = [
        "exp.toml",
        "--workers",
        "1, 2",
        "--steps",
        "5",
        "--global-batch",
        "64",
        "--emit",
        "slurm",
    ]
    result = cli("scale", "run", *argv)
    assert result.code == 0, result.err
    assert "--workers" in result.out and "1, 2" in result.out, result.out  # the job passes it on
