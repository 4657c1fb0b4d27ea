"""dlperf.errors: the error table's exceptions (message, hint, exit code) and `interrupted`,
which tells a stop signal from an error, however the code it landed in wrapped it."""

from __future__ import annotations

import signal

import pytest

from dlperf import stopping
from dlperf.errors import (
    CheckFailed,
    ModelOsExit,
    NoSuchRun,
    StoreGone,
    UserError,
    exit_call,
    interrupted,
    model_exited,
    not_utf8,
)


def test_the_error_table_s_exit_codes_and_one_line() -> None:
    assert (UserError.exit_code, NoSuchRun.exit_code, StoreGone.exit_code) == (2, 2, 1)
    assert CheckFailed.exit_code == 1
    hinted = UserError("no model 'resnet2'", "did you mean resnet20?")
    assert str(hinted) == "no model 'resnet2' (did you mean resnet20?)"
    assert str(UserError("bad")) == "bad" and UserError("bad").hint is None
    gone = StoreGone("run store went away", run_id=3)
    assert isinstance(gone, UserError) and (gone.message, gone.hint, gone.run_id) == (
        "run store went away", None, 3,
    )  # fmt: skip


def test_not_utf8_names_the_file_and_the_byte() -> None:
    with pytest.raises(UnicodeDecodeError) as e:
        b"caf\xe9".decode()
    error = not_utf8("exp.toml", e.value)
    assert (error.message, error.hint) == (
        "exp.toml: not UTF-8 text (byte 0xe9)",
        "save it as UTF-8",
    )


def chained(inner: BaseException, *, cause: bool) -> BaseException:
    """`RuntimeError` raised while handling `inner`, as its cause or its context."""
    try:
        try:
            raise inner
        except BaseException as e:
            if cause:
                raise RuntimeError("wrapped") from e
            raise RuntimeError("while handling")  # noqa: B904
    except RuntimeError as outer:
        return outer


def test_an_interrupt_is_told_however_it_was_wrapped() -> None:
    assert interrupted(KeyboardInterrupt())
    assert interrupted(chained(KeyboardInterrupt(), cause=True))
    assert interrupted(chained(KeyboardInterrupt(), cause=False))
    assert interrupted(chained(chained(KeyboardInterrupt(), cause=True), cause=False))
    assert not interrupted(ValueError("bad input"))
    assert not interrupted(chained(ValueError("x"), cause=True))


def test_a_cycle_of_causes_ends() -> None:
    a, b = ValueError("a"), ValueError("b")
    a.__context__, b.__context__ = b, a
    assert not interrupted(a)


def test_after_a_stop_signal_any_error_is_its_consequence(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stopping, "_state", stopping._State())
    assert not interrupted(ImportError("numpy half imported"))
    stopping.noted(signal.SIGTERM)
    assert interrupted(ImportError("numpy half imported"))


def test_a_models_exit_is_named_by_the_call_it_made() -> None:
    assert exit_call(ModelOsExit(3)) == "os._exit"
    assert exit_call(SystemExit(3)) == "sys.exit" and exit_call(None) == "sys.exit"
    try:
        raise ModelOsExit(3)
    except SystemExit:  # model_exited reads the exception being handled
        assert model_exited(3, "during training").startswith("the model called os._exit(3)")
