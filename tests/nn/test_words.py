"""word_mask and the word <-> sub-token maps (issue 25, item 2)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st_

import structtorch as st


@st_.composite
def tokenized(draw):
    """Rows of word_ids as a fast tokenizer writes them: None first ([CLS]), each word split into
    1-3 pieces, None last ([SEP]), rows of different lengths."""
    rows = []
    for _ in range(draw(st_.integers(1, 4))):
        row = [None]
        for w in range(draw(st_.integers(0, 5))):
            row += [w] * draw(st_.integers(1, 3))
        rows.append(row + [None])
    return rows


def test_word_mask_of_lists_and_tensors():
    ids = [[None, 0, 0, 1, 2, 2, None], [None, 0, 1, None]]
    want = torch.tensor([[0, 1, 0, 1, 1, 0, 0], [0, 1, 1, 0, 0, 0, 0]], dtype=torch.bool)
    assert torch.equal(st.word_mask(ids), want)
    as_tensor = torch.tensor([[-1, 0, 0, 1, 2, 2, -1], [-100, 0, 1, -100, -100, -100, -100]])
    assert torch.equal(st.word_mask(as_tensor), want)
    assert st.word_mask(ids, length=9).shape == (2, 9)
    assert st.word_mask([]).shape == (0, 0)


def test_word_mask_errors():
    with pytest.raises(TypeError, match="word_ids must be a list of per-row lists"):
        st.word_mask("abc")
    with pytest.raises(TypeError, match=r"word_ids row 0 must hold non-negative ints or None"):
        st.word_mask([[None, 0.5]])
    with pytest.raises(ValueError, match="word_ids row 0 has 3 tokens, more than length = 2"):
        st.word_mask([[None, 0, None]], length=2)
    with pytest.raises(TypeError, match="word_ids must be an integer tensor"):
        st.word_mask(torch.zeros(2, 3))
    with pytest.raises(ValueError, match=r"mask row 0 has 2 positions but words has W = 1"):
        st.words_to_tokens(torch.zeros(1, 1, dtype=torch.long), torch.tensor([[True, True]]))


@given(rows=tokenized())
def test_words_round_trip_and_the_crf_over_words(rows):
    """Word tags -> sub-token targets (-100 elsewhere) -> word tags is the identity; the CRF on the
    sub-tokens with the word mask equals the CRF on the words' first-piece emissions."""
    mask = st.word_mask(rows)
    B, T = mask.shape
    W = max(max((w for w in r if w is not None), default=-1) + 1 for r in rows)
    words = torch.randint(0, 3, (B, max(W, 1)), generator=torch.Generator().manual_seed(W))
    counts = mask.sum(1)
    tokens = st.words_to_tokens(words, mask)
    assert torch.equal(tokens[mask], torch.cat([words[b, :int(counts[b])] for b in range(B)]))
    assert (tokens[~mask] == -100).all()
    back = st.tokens_to_words(tokens, mask, num_words=words.shape[1])
    inside = torch.arange(words.shape[1]) < counts[:, None]
    assert torch.equal(back[inside], words[inside]) and (back[~inside] == -1).all()

    crf = st.LinearChainCRF(3).double()
    emissions = torch.randn(B, T, 3, generator=torch.Generator().manual_seed(T), dtype=torch.float64)
    first = st.tokens_to_words(emissions, mask, fill=0.0, num_words=words.shape[1])
    torch.testing.assert_close(crf(emissions, tokens, mask), crf(first, words.clamp(min=0), lengths=counts))
    path = crf.decode(emissions, mask)[1]
    assert torch.equal(st.tokens_to_words(path, mask, num_words=words.shape[1]),
                       crf.decode(first, lengths=counts)[1])


def test_num_words_and_fill_are_checked():
    mask = torch.tensor([[0, 1, 0, 1, 1]], dtype=torch.bool)
    tags = torch.tensor([[0, 1, 2, 3, 4]])
    with pytest.raises(ValueError, match="num_words must be an int >= 0"):
        st.tokens_to_words(tags, mask, num_words=-1)
    with pytest.raises(TypeError, match="num_words must be an int"):
        st.tokens_to_words(tags, mask, num_words=2.0)
    with pytest.raises(ValueError, match="fill = 0.5 would be truncated"):
        st.tokens_to_words(tags, mask, fill=0.5)
    with pytest.raises(ValueError, match="fill = 0.5 would be truncated"):
        st.words_to_tokens(tags[:, :3], mask, fill=0.5)
    assert st.tokens_to_words(tags, mask, num_words=3).tolist() == [[1, 3, 4]]
    scores = st.tokens_to_words(tags.double(), mask, fill=float("-inf"), num_words=4)
    assert scores.tolist() == [[1.0, 3.0, 4.0, float("-inf")]]


def test_word_mask_refuses_negative_ids_and_takes_numpy_ints():
    """Issue 41: a negative id in a list was taken as a special token (None) while the error for
    other bad rows said "non-negative"; rows of numpy ints were refused as if they were not ints;
    a bad length gave torch's own errors."""
    import numpy as np

    with pytest.raises(ValueError, match=r"word_ids row 1 must hold non-negative ints or None.*-1 at position 1"):
        st.word_mask([[None, 0], [None, -1, 0, None]])
    want = st.word_mask([[None, 0, 0, 1, None]])
    assert torch.equal(st.word_mask([[None, np.int64(0), np.int32(0), np.uint8(1), None]]), want)
    assert torch.equal(st.word_mask([[None, *np.array([0, 0, 1]), None]]), want)
    assert torch.equal(st.word_mask(np.array([[-1, 0, 0, 1, -1]])), want)
    with pytest.raises(TypeError, match="word_ids row 0 must hold non-negative ints or None"):
        st.word_mask([[None, np.bool_(True)]])
    for ids in ([[0, 1]], torch.tensor([[0, 1]])):
        with pytest.raises(ValueError, match="length must be an int >= 0"):
            st.word_mask(ids, length=-1)
        with pytest.raises(TypeError, match="length must be an int"):
            st.word_mask(ids, length=2.0)
    with st.set_validation(False):  # a value check: off with the others
        assert torch.equal(st.word_mask([[None, -1, 0]]), torch.tensor([[False, False, True]]))
