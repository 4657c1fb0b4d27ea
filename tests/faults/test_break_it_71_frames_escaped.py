"""Break-it round 71, S2 cause 1: the frames under "the model raised ..." were printed raw. A
model file's source line holding ESC[2J, an OSC title with BEL or U+202E, or a file name holding
ESC, cleared the screen, retitled the window or reversed the text, where the line above escapes
them (faults.md: every error line escapes control characters). Each frame line is escaped now."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.conftest import CliResult

SOURCE = (
    "def net(num_classes=10, **kw):\n"
    '    raise RuntimeError("x")  # \x1b[2J\x1b]0;PWNED\x07 \u202e evil\n'
)


def test_a_model_frame_holding_control_characters_is_escaped(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    for name in ("evil.py", "x\x1b[2Jy.py"):
        (tmp_path / name).write_text(SOURCE)
        shown = cli("analyze", f"{tmp_path / name}:net", "--input", "1,8,8")
        assert shown.code == 1
        assert shown.err.startswith("error: the model raised RuntimeError: x\n")
        assert not any(c in shown.err for c in "\x1b\x07\u202e"), shown.err
        assert "\\x1b[2J\\x1b]0;PWNED\\x07 \\u202e evil" in shown.err
    assert 'x\\x1b[2Jy.py", line 2, in net' in shown.err
