"""Break-it round 66, Z1 C, fixer FA: torch's C++ backtrace inside a one-line error.

Before: a model.kwargs integer past int64 (`--set model.kwargs.width=99999999999999999999`)
given to nn.Linear failed in torch with a TypeError whose text quotes a C++ error with its
backtrace ("Overflow when unpacking long long\\nException raised from THPUtils_unpackLong at
/__w/pytorch/.../python_numbers.h:79 (most recent call first):\\nframe #0: c10::Error::Error(...)
... frame #23: _start + 0x21 (...)\\n"), and `dlperf analyze` printed it all inside its one
line: 1.5 KB of frames, addresses and build paths, exit 2.

Now errors.error_text, where every line dlperf makes of an exception's text takes it (the
factory's line, a failed run's stored error, the CLI's lines), leaves torch's C++ backtrace
out: the line ends with torch's message and the hint, exit 2.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from torch import nn

from dlperf.errors import error_said, error_text
from tests.conftest import CliResult

Cli = Callable[..., CliResult]

OVERFLOW = "99999999999999999999"  # past int64: torch's C++ unpacking of a size overflows

WIDE = """
import torch.nn as nn
def make(num_classes=10, in_channels=1, width=16):
    return nn.Sequential(
        nn.Flatten(), nn.Linear(64 * in_channels, width), nn.ReLU(), nn.Linear(width, num_classes)
    )
"""

TORCH_SAYS = (
    "TypeError: empty(): argument 'size' failed to unpack the object at pos 1 with error "
    '"Overflow when unpacking long long"'
)


def test_error_text_leaves_torchs_cpp_backtrace_out() -> None:
    with pytest.raises(TypeError) as raised:
        nn.Linear(64, int(OVERFLOW))
    assert "Exception raised from" in str(raised.value)  # torch's text holds its backtrace
    assert error_said(raised.value) == TORCH_SAYS
    assert "frame #" not in error_text(raised.value)


def test_error_text_of_a_cpp_error_is_its_message() -> None:
    """A RuntimeError whose text ends in a backtrace (torch's c10::Error as it words one)."""
    text = (
        "boom\nException raised from f at /__w/pytorch/pytorch/x.cpp:79 (most recent call "
        "first):\nframe #0: c10::Error::Error() + 0x9d (0x7f in /lib/libc10.so)\n"
        "<omitting python frames>\nframe #1: _start + 0x21 (0x55 in python)\n"
    )
    assert error_text(RuntimeError(text)) == "boom"
    assert error_text(RuntimeError("a\nb")) == "a\nb"  # other lines are the message's


def test_factory_line_without_the_backtrace(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "m_w.py").write_text(WIDE)
    model = str(tmp_path / "m_w.py") + ":make"
    result = cli("analyze", model, "--input", "1,8,8", "--set", f"model.kwargs.width={OVERFLOW}")
    assert result.code == 2, result.err
    assert result.err.strip() == (
        f"error: factory {model} failed: {TORCH_SAYS} "
        f"(check the values given in [model] kwargs: width={OVERFLOW})"
    )
