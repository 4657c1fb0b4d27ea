"""dlperf.analytic.ops: sort, scatter and index_add (issue 41 leftover of break-it round 12,
C1). An LSTM packed with `enforce_sorted=False`, counted on real CPU tensors, ran aten.sort and
aten.scatter_ in its forward and aten.index_add in its backward, and `analyze` reported all
three as operators it has no handler for. torch.utils.flop_counter counts none of them, so the
counts are worked out by hand: a sort compares and moves values (no FLOPs, as fvcore and
ptflops count it), a scatter copies (none) unless it reduces (one per index element), and
scatter_add, scatter_reduce and index_add add one value per element they bring in."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from dlperf.analytic.ops import Cost, cost_of
from tests.conftest import CliResult
from tests.faults.test_break_it_12_counting import PACKED, SHAPE

aten = torch.ops.aten
Cli = Callable[..., CliResult]


def t(*shape: int) -> torch.Tensor:
    return torch.empty(*shape, device="meta")


SELF, INDEX, SRC = t(4, 6), t(2, 5), t(3, 6)  # scatter reads the first 2 x 5 of src: 10


def test_a_sort_is_no_flops() -> None:
    x = t(4, 6)
    assert cost_of(aten.sort.default, [x, 1], (x, x)) == Cost(0, 0)
    assert cost_of(aten.sort.stable, [x], (x, x), {"stable": True, "dim": 0}) == Cost(0, 0)


def test_a_scatter_copies_unless_it_reduces() -> None:
    assert cost_of(aten.scatter.src, [SELF, 0, INDEX, SRC], SELF) == Cost(0, 0)
    assert cost_of(aten.scatter_.src, [SELF, 0, INDEX, SRC], SELF) == Cost(0, 0)
    assert cost_of(aten.scatter.value, [SELF, 0, INDEX, 1.5], SELF) == Cost(0, 0)
    # reduce= is keyword-only: one add or multiply per index element, a value or a tensor's
    for reduce in ("add", "multiply"):
        kwargs = {"reduce": reduce}
        assert cost_of(aten.scatter_.reduce, [SELF, 0, INDEX, SRC], SELF, kwargs) == Cost(0, 10)
        assert cost_of(aten.scatter.reduce, [SELF, 0, INDEX, SRC], SELF, kwargs) == Cost(0, 10)
        value = [SELF, 0, INDEX, 2.0]
        assert cost_of(aten.scatter_.value_reduce, value, SELF, kwargs) == Cost(0, 10)


def test_scatter_add_and_scatter_reduce_add_one_value_per_index_element() -> None:
    assert cost_of(aten.scatter_add.default, [SELF, 0, INDEX, SRC], SELF) == Cost(0, 10)
    assert cost_of(aten.scatter_add_.default, [SELF, 0, INDEX, SRC], SELF) == Cost(0, 10)
    for reduce in ("sum", "prod", "amax", "amin"):  # one add, multiply or compare each
        args = [SELF, 0, INDEX, SRC, reduce]
        assert cost_of(aten.scatter_reduce.two, args, SELF) == Cost(0, 10)
    # mean: the sums, then every element of self divided by its count
    args = [SELF, 0, INDEX, SRC, "mean"]
    assert cost_of(aten.scatter_reduce_.two, args, SELF, {"include_self": False}) == Cost(0, 34)


def test_index_add_adds_each_source_element_once() -> None:
    source, index = t(2, 6), t(2)
    assert cost_of(aten.index_add.default, [SELF, 0, index, source], SELF) == Cost(0, 12)
    assert cost_of(aten.index_add_.default, [SELF, 0, index, source], SELF) == Cost(0, 12)
    # alpha scales the source as add's alpha does, which counts one FLOP per element too
    alpha = {"alpha": 2.0}
    assert cost_of(aten.index_add.default, [SELF, 0, index, source], SELF, alpha) == Cost(0, 12)


def test_torch_flop_counter_counts_none_of_them() -> None:
    """Why the counts above are by hand: FlopCounterMode has no formula for these ops."""
    x, index, src = torch.randn(4, 6), torch.randint(0, 4, (2, 5)), torch.randn(3, 6)
    with FlopCounterMode(display=False) as counter:
        x.sort(dim=1)
        x.clone().scatter_(0, index, src, reduce="add")
        x.scatter_add(0, index, src)
        x.scatter_reduce(0, index, src, "mean")
        x.index_add(0, torch.tensor([0, 2]), torch.randn(2, 6))
    assert counter.get_total_flops() == 0


def test_an_lstm_packed_unsorted_is_counted_with_no_operator_left_out(
    cli: Cli, tmp_path: Path
) -> None:
    (tmp_path / "packed.py").write_text(PACKED)
    result = cli("analyze", f"{tmp_path}/packed.py:lstm", *SHAPE, "--train", "--json")
    assert result.code == 0, result.err
    doc = json.loads(result.out)
    # before: {'aten.index_add': 1, 'aten.scatter_': 1, 'aten.sort': 1}, said in a warning
    assert doc["unsupported_ops"] == {}, doc["unsupported_ops"]
    assert "not counted" not in result.err, result.err
    sorted_ = cli("analyze", f"{tmp_path}/packed.py:sorted_lstm", *SHAPE, "--train", "--json")
    on_meta = json.loads(sorted_.out)["totals"]
    # The forward's sort (of the lengths) and scatter_ (their inverse order) add no FLOPs
    assert doc["totals"]["flops"] == on_meta["flops"]
