"""Break-it round 35, the user's data: review of the fixers' commits (R1).

C4: the refusal of a --classes list read partly as names, partly as indices listed the
classes to give without name_text, the way `--classes`' other lines show them: a folder named
"2 " read as "2", one the list offered that picks nothing as typed.
"""

from __future__ import annotations

import pytest

from dlperf.data.describe import pick_classes
from dlperf.errors import UserError


def test_c4_the_names_offered_are_shown_as_the_other_lines_show_them() -> None:
    with pytest.raises(UserError) as caught:
        pick_classes("imagefolder", ["1", "10", "2 "], ["0", "1"])
    assert caught.value.hint == "give class names alone: 1, 10, '2 '"
