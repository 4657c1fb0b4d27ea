"""Break-it round 69, F7: `dlperf distill`'s unlabelled-pool errors name where the pool was given.

Before: every error of the pool (src/dlperf/distill/pool.py) began `--unlabeled SPEC`, also
when the value came from the file's [distill] section or from `--set distill.unlabeled=...`,
where every other key's error names the config (`dist.toml: distill.top_k.0: ...`,
`dist.toml with --set: ...`): the user searched their command for a flag they never typed.
And `NAME:holdout=F` with NAME not the experiment's set (`mnist5k`, or an unknown `nosuch`)
said holdout "takes no other keys", though only holdout was given.

Now a pool from the config is named as the config's other keys are, with the key and its value
as the file writes it (`dist.toml: distill.unlabeled = "..."`), and its hints give the key, not
the flag; `--unlabeled` on the command line still says `--unlabeled SPEC`. A holdout of another
set says it is not the experiment's own (naming both), an unknown name says it is no data set,
with the names it could be, as load_data says it; "takes no other keys" is said only of them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import CliResult, write_distill_exp

Cli = Callable[..., CliResult]

SETS = "digits, mnist5k, synthetic, cifar10, cifar100, mnist, fashionmnist, imagefolder, npz"


def _said(r: CliResult) -> str:
    """The one line a refused distill says (exit 2, nothing else)."""
    assert r.code == 2, (r.code, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1, r.err
    return lines[0]


@pytest.fixture
def exp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return write_distill_exp(tmp_path)


def _with_pool(exp: Path, spec: str) -> None:
    exp.write_text(exp.read_text() + f'[distill]\nunlabeled = "{spec}"\n')


def test_file_pool_names_the_file(cli: Cli, exp: Path) -> None:
    _with_pool(exp, "digits:holdout=0.5,image_size=4")
    assert _said(cli("distill", str(exp))) == (
        f'error: {exp}: distill.unlabeled = "digits:holdout=0.5,image_size=4": holdout sets '
        "aside a share of the experiment's own digits and takes no other keys (use "
        'distill.unlabeled = "digits:holdout=0.5")'
    )  # before: "error: --unlabeled digits:holdout=0.5,image_size=4: ..."


def test_file_pool_read_names_the_file(cli: Cli, exp: Path, tmp_path: Path) -> None:
    """An error found as the pool is read (its images' shape) names the file too."""
    images = np.random.default_rng(1).integers(0, 255, (8, 4, 8, 8), dtype=np.uint8)
    np.savez(tmp_path / "rgba.npz", images=images)
    _with_pool(exp, "npz:root=rgba.npz")
    assert _said(cli("distill", str(exp))) == (
        f'error: {exp}: distill.unlabeled = "npz:root=rgba.npz": images are 4x8x8, the '
        "teacher takes 1x8x8 (4 channel(s), not 1) (choose a set with 1 channel(s))"
    )


def test_set_pool_names_the_set(cli: Cli, exp: Path) -> None:
    _with_pool(exp, "digits:holdout=0.5")
    r = cli("distill", str(exp), "--set", 'distill.unlabeled="mnist5k:holdout=0.5"')
    assert _said(r) == (
        f'error: {exp} with --set: distill.unlabeled = "mnist5k:holdout=0.5": holdout sets '
        "aside a share of the experiment's own digits, not of mnist5k (use "
        'distill.unlabeled = "digits:holdout=0.5", or all of mnist5k\'s images: '
        'distill.unlabeled = "mnist5k")'
    )


def test_flag_pool_keeps_the_flag(cli: Cli, exp: Path) -> None:
    """The flag over the file's value: its error names the flag, as typed."""
    _with_pool(exp, "digits:holdout=0.5")
    r = cli("distill", str(exp), "--unlabeled", "mnist5k:holdout=0.5")
    assert _said(r) == (
        "error: --unlabeled mnist5k:holdout=0.5: holdout sets aside a share of the experiment's "
        "own digits, not of mnist5k (use --unlabeled digits:holdout=0.5, or all of mnist5k's "
        "images: --unlabeled mnist5k)"
    )  # before: "... own digits and takes no other keys (use --unlabeled digits:holdout=0.5)"


@pytest.mark.parametrize(
    ("name", "hint"),
    [("nosuch", f"choose one of {SETS}"), ("digit", "did you mean 'digits'?")],
)
def test_unknown_holdout_set_is_no_data_set(cli: Cli, exp: Path, name: str, hint: str) -> None:
    r = cli("distill", str(exp), "--unlabeled", f"{name}:holdout=0.5")
    assert _said(r) == (
        f"error: --unlabeled {name}:holdout=0.5: unknown dataset '{name}' ({hint})"
    )  # before: "... holdout sets aside a share of the experiment's own digits and takes no ..."
