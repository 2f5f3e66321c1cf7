"""structtorch.segment_f1 (segmental F1@k, Lea et al. 2017) against hand-computed cases and a
brute-force reference of the MS-TCN evaluation (frame sets, dataset-level TP / FP / FN)."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as hs

import structtorch as st
from structtorch.metrics import get_segments, segment_f1


def t(*rows):
    return torch.tensor(rows, dtype=torch.long)


def reference(pred_rows, gold_rows, overlap, ignore=()):
    """MS-TCN's ``f_score`` on frame sets: each predicted segment in order takes the gold segment of
    largest IoU (same label, else 0; the first on ties); TP if that IoU >= overlap and the gold segment
    is not used yet, else FP; FN = unused gold. Counts summed over the rows."""

    def segments(row):
        out, pos = [], 0
        for label, run in itertools.groupby(row):
            n = len(list(run))
            if label not in ignore:
                out.append((label, set(range(pos, pos + n))))
            pos += n
        return out

    tp = fp = fn = 0
    for p_row, g_row in zip(pred_rows, gold_rows, strict=True):
        p_segs, g_segs = segments(p_row), segments(g_row)
        used = [False] * len(g_segs)
        for label, frames in p_segs:
            ious = [len(frames & g) / len(frames | g) if g_label == label else 0.0 for g_label, g in g_segs]
            if not ious:
                fp += 1
                continue
            best = max(range(len(ious)), key=lambda j: (ious[j], -j))
            if ious[best] >= overlap and not used[best]:
                used[best] = True
                tp += 1
            else:
                fp += 1
        fn += used.count(False)
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0


def unmatched_rule(pred_rows, gold_rows, overlap):
    """The textbook phrasing: a predicted segment is a TP if its IoU with some still unmatched gold
    segment of its label reaches ``overlap`` (that segment is then matched)."""
    tp = fp = fn = 0
    for p_row, g_row in zip(pred_rows, gold_rows, strict=True):
        g_segs = get_segments(g_row)
        used = [False] * len(g_segs)
        for label, s, e in get_segments(p_row):
            hit = next((j for j, (gl, gs, ge) in enumerate(g_segs) if gl == label and not used[j]
                        and max(0, min(e, ge) - max(s, gs)) / (max(e, ge) - min(s, gs)) >= overlap), None)
            if hit is None:
                fp += 1
            else:
                used[hit] = True
                tp += 1
        fn += used.count(False)
    return 2 * tp / (2 * tp + fp + fn) if tp else 0.0


def test_get_segments():
    assert get_segments([3, 3, 1, 1, 1, 3]) == [(3, 0, 2), (1, 2, 5), (3, 5, 6)]
    assert get_segments([]) == []
    assert get_segments([7]) == [(7, 0, 1)]


@pytest.mark.parametrize("pred, gold, overlap, expected", [
    # identical: every segment matched
    ([0, 0, 1, 1, 2], [0, 0, 1, 1, 2], 0.5, 1.0),
    # boundary shifted by one: IoUs 3/4 and 4/5
    ([0, 0, 0, 1, 1, 1, 1, 1], [0, 0, 0, 0, 1, 1, 1, 1], 0.5, 1.0),
    # 0: IoU 4/6; 1: IoU 2/4 = 0.5 exactly, a TP at 0.5, not at 0.6
    ([0, 0, 0, 0, 0, 0, 1, 1], [0, 0, 0, 0, 1, 1, 1, 1], 0.5, 1.0),
    ([0, 0, 0, 0, 0, 0, 1, 1], [0, 0, 0, 0, 1, 1, 1, 1], 0.6, 2 * 1 / (2 * 1 + 1 + 1)),
    # over-segmentation: 4 predicted segments, 2 gold. 0[0,2) IoU 2/4 TP; 1[2,3) no overlap FP;
    # 0[3,5) IoU 1/5 FP; 1[5,8) IoU 3/4 TP -> TP 2, FP 2, FN 0
    ([0, 0, 1, 0, 0, 1, 1, 1], [0, 0, 0, 0, 1, 1, 1, 1], 0.5, 4 / 6),
    # at 0.1 the 0[3,5) piece still fails (0.2 >= 0.1 but gold 0 is used): the same
    ([0, 0, 1, 0, 0, 1, 1, 1], [0, 0, 0, 0, 1, 1, 1, 1], 0.1, 4 / 6),
    # a wrong label everywhere: TP 0
    ([1, 1, 1, 1], [0, 0, 0, 0], 0.1, 0.0),
    # under-segmentation: one predicted 0 over two gold 0 runs split by a 2: IoU 3/7 with each
    ([0, 0, 0, 0, 0, 0, 0], [0, 0, 0, 2, 0, 0, 0], 0.4, 2 * 1 / (2 * 1 + 0 + 2)),
    ([0, 0, 0, 0, 0, 0, 0], [0, 0, 0, 2, 0, 0, 0], 0.5, 0.0),
])
def test_hand_computed(pred, gold, overlap, expected):
    assert segment_f1(t(pred), t(gold), overlap=overlap) == pytest.approx(expected)
    assert reference([pred], [gold], overlap) == pytest.approx(expected)


def test_best_iou_then_used_is_the_reference_rule_at_low_overlap():
    """Gold 0[0,6) 2[6,7) 0[7,8); predicted 0[0,2) 1[2,3) 0[3,8). 0[0,2): IoU 2/6 with 0[0,6), TP.
    1[2,3): FP. 0[3,8): its best IoU, 3/8, is with 0[0,6), already used, so it is an FP (MS-TCN),
    although its IoU with the unmatched 0[7,8) is 1/5 >= 0.1. TP 1, FP 2, FN 2."""
    gold = [0, 0, 0, 0, 0, 0, 2, 0]
    pred = [0, 0, 1, 0, 0, 0, 0, 0]
    f1 = segment_f1(t(pred), t(gold), overlap=0.1)
    assert f1 == pytest.approx(2 * 1 / (2 * 1 + 2 + 2))
    assert f1 == pytest.approx(reference([pred], [gold], 0.1))
    assert unmatched_rule([pred], [gold], 0.1) == pytest.approx(2 * 2 / (2 * 2 + 1 + 1))  # TP 2, FP 1, FN 1


def test_counts_are_summed_over_the_batch_and_lengths_cut():
    pred = t([0, 0, 1, 1, -1, -1], [2, 2, 2, 2, 2, 2])
    gold = t([0, 0, 1, 1, 0, 0], [2, 2, 2, 0, 0, 0])
    lengths = torch.tensor([4, 6])
    # row 0: 2 TP; row 1: 2[0,6) vs 2[0,3): IoU 1/2 -> TP; gold 0[3,6) FN. TP 3, FP 0, FN 1
    assert segment_f1(pred, gold, lengths, overlap=0.5) == pytest.approx(6 / 7)
    assert segment_f1(pred, gold, [4, 6], overlap=0.5) == pytest.approx(6 / 7)
    # not the mean of the per-row F1s (1 and 2/3)
    assert segment_f1(pred, gold, lengths, overlap=0.5) != pytest.approx((1 + 2 / 3) / 2)
    # the -1 padding would count as segments without the lengths
    assert segment_f1(pred[:1, :4], gold[:1, :4]) == 1.0
    assert st.segment_f1 is segment_f1 and "segment_f1" in st.__all__ and "segment_f1" in st.metrics.__all__


def test_ignore_drops_background_segments():
    pred = t([0, 0, 0, 1, 1, 1])
    gold = t([0, 1, 1, 1, 1, 1])
    # 0[0,3) vs 0[0,1): IoU 1/3, FP; 1[3,6) vs 1[1,6): IoU 3/5, TP; TP 1, FP 1, FN 1
    assert segment_f1(pred, gold, overlap=0.5) == pytest.approx(0.5)
    assert segment_f1(pred, gold, overlap=0.5, ignore=0) == 1.0
    assert segment_f1(pred, gold, overlap=0.5, ignore=[0, 1]) == 0.0  # no segment left


def test_errors():
    a = t([0, 1, 1])
    with pytest.raises(ValueError, match="same shape"):
        segment_f1(a, t([0, 1, 1, 1]))
    with pytest.raises(ValueError, match=r"shape \(B, T\)"):
        segment_f1(torch.tensor([0, 1, 1]), torch.tensor([0, 1, 1]))
    with pytest.raises(TypeError, match="integer label ids"):
        segment_f1(a.float(), a)
    with pytest.raises(TypeError, match="tensor"):
        segment_f1([[0, 1, 1]], a)
    with pytest.raises(ValueError, match="overlap"):
        segment_f1(a, a, overlap=0.0)
    with pytest.raises(ValueError, match="overlap"):
        segment_f1(a, a, overlap=1.5)
    with pytest.raises(ValueError, match="lengths"):
        segment_f1(a, a, torch.tensor([1, 2]))
    with pytest.raises(ValueError, match=r"\[0, T\]"):
        segment_f1(a, a, torch.tensor([4]))
    with pytest.raises(ValueError, match="lengths"):
        segment_f1(a, a, torch.tensor([1.0]))
    with pytest.raises(TypeError, match="ignore"):
        segment_f1(a, a, ignore="0")


rows = hs.lists(hs.integers(0, 2), min_size=0, max_size=12)


@settings(max_examples=300, deadline=None)
@given(hs.lists(hs.tuples(rows, rows), min_size=1, max_size=4), hs.sampled_from([0.1, 0.25, 0.5, 0.75, 1.0]),
       hs.sampled_from([(), (0,)]), hs.data())
def test_matches_brute_force(pairs, overlap, ignore, data):
    T = max(max(len(p), len(g)) for p, g in pairs)
    lengths = [data.draw(hs.integers(0, min(len(p), len(g)))) for p, g in pairs]
    pred = torch.full((len(pairs), T), -1, dtype=torch.long)
    gold = torch.full((len(pairs), T), 5, dtype=torch.long)
    for b, (p, g) in enumerate(pairs):
        pred[b, :len(p)] = torch.tensor(p, dtype=torch.long)
        gold[b, :len(g)] = torch.tensor(g, dtype=torch.long)
    p_rows = [p[:n] for (p, _), n in zip(pairs, lengths, strict=True)]
    g_rows = [g[:n] for (_, g), n in zip(pairs, lengths, strict=True)]
    got = segment_f1(pred, gold, torch.tensor(lengths), overlap=overlap, ignore=ignore or None)
    assert got == pytest.approx(reference(p_rows, g_rows, overlap, set(ignore)), abs=1e-12)
    if overlap >= 0.5 and not ignore:  # at most one candidate gold segment: both rules agree,
        assert got == pytest.approx(unmatched_rule(p_rows, g_rows, overlap), abs=1e-12)
        assert got == pytest.approx(segment_f1(gold, pred, torch.tensor(lengths), overlap=overlap))  # symmetric
