"""structtorch.metrics.chunk_f1 against seqeval's default (conlleval) mode."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as hs

import structtorch as st
from structtorch.metrics import chunk_f1, get_chunks

seqeval = pytest.importorskip("seqeval.metrics")

CASES = [
    # (gold, pred): hand-made sequences covering conlleval's boundary rules
    ([["B-NP", "I-NP", "O", "B-VP"]], [["B-NP", "I-NP", "O", "B-VP"]]),  # all correct
    ([["B-NP", "I-NP", "O"]], [["B-NP", "O", "O"]]),  # right type and start, wrong end
    ([["O", "I-NP", "I-NP", "O"]], [["O", "B-NP", "I-NP", "O"]]),  # I after O starts a chunk
    ([["B-NP", "I-VP", "I-VP"]], [["B-NP", "B-VP", "I-VP"]]),  # a type change starts a chunk
    ([["B-NP", "B-NP", "I-NP"]], [["B-NP", "I-NP", "I-NP"]]),  # B inside a chunk splits it
    ([["I-NP", "I-NP", "B-NP"]], [["I-NP", "I-NP", "I-NP"]]),  # IOB1-style
    ([["B-PP", "I-PP"], ["I-PP", "O"]], [["B-PP", "I-PP"], ["B-PP", "O"]]),  # no chunk crosses rows
    ([["O", "O"]], [["O", "B-NP"]]),  # no gold chunk: recall 0 of 0
    ([["B-NP"]], [["O"]]),  # no predicted chunk
    ([["B-NP", "I-NP", "I-ADJP", "O", "B-ADJP", "I-NP"]], [["B-NP", "I-ADJP", "I-ADJP", "O", "I-ADJP", "B-NP"]]),
]


def reference(gold, pred):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # seqeval warns on 0/0
        overall = [seqeval.precision_score(gold, pred), seqeval.recall_score(gold, pred),
                   seqeval.f1_score(gold, pred)]
        report = seqeval.classification_report(gold, pred, output_dict=True, zero_division=0)
    return overall, {k: v for k, v in report.items() if not k.endswith(" avg")}


def check(gold, pred, scheme="BIO"):
    ours = chunk_f1(pred, gold, scheme=scheme)
    overall, per_type = reference(gold, pred)
    assert [ours.precision, ours.recall, ours.f1] == pytest.approx(overall, abs=1e-12)
    assert set(ours.per_type) == set(per_type)
    for kind, scores in per_type.items():
        mine = ours.per_type[kind]
        assert [mine["precision"], mine["recall"], mine["f1"]] == pytest.approx(
            [scores["precision"], scores["recall"], scores["f1-score"]], abs=1e-12), kind
        assert mine["support"] == scores["support"]
    assert float(ours) == ours.f1


@pytest.mark.parametrize("gold, pred", CASES)
def test_fixed_cases_match_seqeval(gold, pred):
    check(gold, pred)


def test_chunks_follow_conlleval():
    assert get_chunks(["O", "I-NP", "I-NP", "B-NP", "I-VP"]) == [("NP", 1, 2), ("NP", 3, 3), ("VP", 4, 4)]
    assert get_chunks(["B-NP", "E-NP", "S-VP", "I-VP"], "BIOES") == [("NP", 0, 1), ("VP", 2, 2), ("VP", 3, 3)]
    assert get_chunks(["U-X", "B-X", "L-X"], "BILOU") == [("X", 0, 0), ("X", 1, 2)]


def test_known_values():
    gold = [["B-NP", "I-NP", "O", "B-VP", "B-NP"]]
    pred = [["B-NP", "I-NP", "O", "B-NP", "B-NP"]]
    s = chunk_f1(pred, gold)
    assert (s.num_pred, s.num_gold, s.num_correct) == (3, 3, 2)
    assert s.f1 == pytest.approx(2 / 3)
    assert s.per_type["VP"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1}


def test_tensor_form_with_lengths_ignores_padding():
    names = ["O", "B-NP", "I-NP", "B-VP", "I-VP"]
    gold = torch.tensor([[1, 2, 0, 3, 0], [2, 2, 1, 0, 0]])
    pred = torch.tensor([[1, 2, 0, 3, 4], [2, 2, 1, -1, -1]])  # -1: Viterbi padding
    lengths = torch.tensor([4, 3])
    s = chunk_f1(pred, gold, lengths, names)
    check([[names[i] for i in row[:n]] for row, n in zip(gold.tolist(), lengths.tolist(), strict=True)],
          [[names[i] for i in row[:n]] for row, n in zip(pred.tolist(), lengths.tolist(), strict=True)])
    assert s.f1 == 1.0


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="scheme must be one of"):
        chunk_f1([["O"]], [["O"]], scheme="XYZ")
    with pytest.raises(ValueError, match=r"pred\[0\]\[0\] 'E-NP' is not 'O' or <B/I>-<type> for the BIO scheme"):
        chunk_f1([["E-NP"]], [["O"]])
    with pytest.raises(ValueError, match="labels .* is needed"):
        chunk_f1(torch.zeros(1, 2, dtype=torch.long), torch.zeros(1, 2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"pred must have shape \(B, T\)"):
        chunk_f1(torch.zeros(2, dtype=torch.long), torch.zeros(1, 2, dtype=torch.long), labels=["O"])
    with pytest.raises(ValueError, match="label id 5 in row 0"):
        chunk_f1(torch.full((1, 2), 5), torch.zeros(1, 2, dtype=torch.long), labels=["O"])
    with pytest.raises(ValueError, match="sequence 0 has 1 predicted and 2 gold tags"):
        chunk_f1([["O"]], [["O", "O"]])


def test_malformed_inputs_name_the_argument_and_the_expected_form():
    """Issue 21 item 9: each of these raised a bare AttributeError/TypeError or read a flat list
    of tags as sequences of characters."""
    tags = ["O", "B-X", "I-X"]
    with pytest.raises(TypeError, match="pred must be .* list of tag-name sequences.*flat list of str"):
        chunk_f1(["B-X", "I-X", "O"], ["B-X", "I-X", "O"])
    with pytest.raises(TypeError, match=r"gold must be .*got NoneType"):
        chunk_f1([["O"]], None)
    with pytest.raises(TypeError, match=r"pred must be .*got NoneType"):
        chunk_f1(None, [["O"]])
    with pytest.raises(TypeError, match=r"pred\[0\] holds integers: pass label ids as a \(B, T\) tensor"):
        chunk_f1([[1, 2]], [[1, 2]])
    with pytest.raises(TypeError, match=r"gold\[0\]\[1\] must be a tag string .* got float"):
        chunk_f1([["O", "O"]], [["O", 1.5]])
    with pytest.raises(TypeError, match="pred must be .*got a tensor of torch.float32"):
        chunk_f1(torch.tensor([[0.0, 1.0]]), torch.tensor([[0, 1]]), labels=tags)
    with pytest.raises(TypeError, match="pred must be .*got ndarray of float64"):
        chunk_f1(np.array([[0.0, 1.0]]), np.array([[0, 1]]), labels=tags)
    with pytest.raises(TypeError, match=r"lengths must be an integer tensor of shape \(1,\), got torch.float32"):
        chunk_f1(torch.tensor([[1, 2]]), torch.tensor([[1, 2]]), torch.tensor([2.0]), labels=tags)
    with pytest.raises(TypeError, match="labels must be a sequence of tag names"):
        chunk_f1(torch.tensor([[1, 2]]), torch.tensor([[1, 2]]), labels=3)
    with pytest.raises(TypeError, match=r"pred\[0\] must be a sequence of tag strings, got int"):
        chunk_f1([3], [["O"]])


def test_numpy_ids_and_list_lengths_are_read_as_tensors():
    tags = ["O", "B-X", "I-X"]
    pred = np.array([[1, 2, 0], [1, 0, 0]])
    gold = np.array([[1, 2, 0], [0, 1, 0]])
    want = chunk_f1(torch.from_numpy(pred), torch.from_numpy(gold), torch.tensor([3, 2]), labels=tags)
    assert chunk_f1(pred, gold, [3, 2], labels=tags) == want
    assert chunk_f1(pred, gold, np.array([3, 2]), labels=tags) == want
    assert want.num_gold == 2 and want.num_correct == 1


@pytest.mark.parametrize("scheme", ["BIO", "IOB2", "IOB1", "BIOES", "IOBES", "BIOUL", "BILOU"])
def test_constraints_and_metrics_accept_the_same_schemes(scheme):
    """Issue 21 item 7: one scheme table and one tag parser for allowed_transitions and chunk_f1."""
    from structtorch.schemes import SCHEMES

    tags = ["O"] + [f"{p}-X" for p in SCHEMES[scheme]]
    allowed, first, last = st.allowed_transitions(scheme, tags)
    assert allowed.shape == (len(tags), len(tags))
    assert chunk_f1([tags], [tags], scheme=scheme).f1 == 1.0
    wrong = "Z-X"
    for call in (lambda: st.allowed_transitions(scheme, ["O", wrong]), lambda: chunk_f1([[wrong]], [["O"]], scheme=scheme)):
        with pytest.raises(ValueError, match=f"'Z-X' is not 'O' or <{'/'.join(SCHEMES[scheme])}>-<type> for the {scheme} scheme"):
            call()
    with pytest.raises(ValueError, match="scheme must be one of"):
        st.allowed_transitions(scheme.lower(), tags)


BIO_TAGS = ["O", "B-A", "I-A", "B-B", "I-B", "B-C", "I-C"]
BIOES_TAGS = BIO_TAGS + ["E-A", "S-A", "E-B", "S-B"]


@hs.composite
def tag_pairs(draw, tags):
    lengths = draw(hs.lists(hs.integers(0, 12), min_size=1, max_size=5))
    seqs = [[draw(hs.lists(hs.sampled_from(tags), min_size=n, max_size=n)) for n in lengths] for _ in range(2)]
    return seqs[0], seqs[1]


@settings(max_examples=300, deadline=None)
@given(tag_pairs(BIO_TAGS))
def test_random_bio_sequences_match_seqeval(pair):
    check(*pair)


@settings(max_examples=150, deadline=None)
@given(tag_pairs(BIOES_TAGS))
def test_random_bioes_sequences_match_seqeval(pair):
    check(*pair, scheme="BIOES")
