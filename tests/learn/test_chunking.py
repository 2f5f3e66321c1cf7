"""CoNLL chunking data (structtorch.data.conll) and the chunking example end to end."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import structtorch as st
from structtorch.data.conll import (
    CHUNK_TYPES,
    conll_sequence_data,
    decode_tags,
    encode_tags,
    read_conll,
    synthetic_chunking,
    to_bio,
    token_features,
    window_features,
    write_conll,
)

ROOT = Path(__file__).resolve().parents[2]

TWO_SENTENCES = """\
Confidence NN B-NP
in IN B-PP
the DT B-NP
pound NN I-NP
is VBZ B-VP
widely RB I-VP
expected VBN I-VP
. . O

He PRP B-NP
reckons VBZ B-VP
. . O
"""


def test_read_conll_hand_written_file(tmp_path):
    path = tmp_path / "two.txt"
    path.write_text("-DOCSTART- -X- O\n\n" + TWO_SENTENCES + "\n\n")  # extra blank lines are fine
    sentences = read_conll(path)
    assert len(sentences) == 2
    words, pos, chunks = sentences[1]
    assert words == ["He", "reckons", "."] and pos == ["PRP", "VBZ", "."] and chunks == ["B-NP", "B-VP", "O"]
    assert sentences[0][2] == ["B-NP", "B-PP", "B-NP", "I-NP", "B-VP", "I-VP", "I-VP", "O"]
    pairs = read_conll(path, columns=(0, 2))
    assert pairs[1] == (["He", "reckons", "."], ["B-NP", "B-VP", "O"])
    assert read_conll(path, columns=(-1,))[0] == (sentences[0][2],)


def test_write_read_round_trip(tmp_path):
    path = tmp_path / "two.txt"
    path.write_text(TWO_SENTENCES)
    sentences = read_conll(path)
    again = tmp_path / "again.txt"
    write_conll(again, sentences)
    assert again.read_text() == TWO_SENTENCES + "\n"  # a blank line after every sentence
    assert read_conll(again) == sentences
    generated = synthetic_chunking(30, seed=4, unknown=0.2)
    write_conll(again, generated)
    assert read_conll(again) == generated


def test_conll_errors(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("The DT B-NP\ncat NN\n")
    with pytest.raises(ValueError, match=r"bad.txt:2: expected at least 3"):
        read_conll(path)
    assert read_conll(path, columns=(0, 1))[0] == (["The", "cat"], ["DT", "NN"])
    with pytest.raises(ValueError, match="whitespace"):
        write_conll(path, [(["a b"], ["NN"])])
    with pytest.raises(ValueError, match="one length"):
        write_conll(path, [(["a", "b"], ["NN"])])


def test_generator_structure():
    sentences = synthetic_chunking(200, seed=3)
    assert len(sentences) == 200
    kinds = set()
    for words, pos, chunks in sentences:
        assert len(words) == len(pos) == len(chunks) > 1
        assert to_bio(chunks) == chunks, "valid BIO: every chunk starts with B-"
        assert chunks[-1] == "O" and words[-1] == "."
        kinds |= {c[2:] for c in chunks if c != "O"}
    assert kinds == set(CHUNK_TYPES)
    # reproducible by seed, different across seeds
    assert synthetic_chunking(200, seed=3) == sentences
    assert synthetic_chunking(50, seed=4) != sentences[:50]
    # the valid BIO sequences score finitely under the BIO-constrained CRF
    data, _, labels = conll_sequence_data(sentences[:20])
    crf = st.LinearChainCRF(len(labels), constraints=st.allowed_transitions("BIO", labels))
    nll = crf(torch.zeros(*data.labels.shape, len(labels)), data.labels, lengths=data.lengths)
    assert torch.isfinite(nll).all()


def test_generator_unknown_words_and_ambiguity():
    train = synthetic_chunking(300, seed=0)
    seen = {w.lower() for s in train for w in s[0]}

    def unseen(test) -> float:
        words = [w.lower() for s in test for w in s[0] if not w.isdigit()]
        return sum(w not in seen for w in words) / len(words)

    known = unseen(synthetic_chunking(300, seed=1, unknown=0.0))
    assert known < 0.05, "without unknown=, test words come (nearly all) from the training vocabulary"
    assert unseen(synthetic_chunking(300, seed=1, unknown=0.3)) > known + 0.05
    # some word forms carry several POS tags and several chunk types
    tags_of: dict[str, set[str]] = {}
    for words, pos, _ in train:
        for w, p in zip(words, pos, strict=True):
            tags_of.setdefault(w.lower(), set()).add(p)
    assert sum(len(t) > 1 for t in tags_of.values()) > 10
    assert synthetic_chunking(0, seed=0) == []
    with pytest.raises(ValueError):
        synthetic_chunking(5, seed=0, unknown=1.5)


def test_to_bio():
    assert to_bio(["I-NP", "I-NP", "O", "I-VP", "I-PP", "B-PP", "I-PP"]) == \
        ["B-NP", "I-NP", "O", "B-VP", "B-PP", "B-PP", "I-PP"]


def test_token_features_small_example():
    feats = token_features(["The", "cat", "sat"], ["DT", "NN", "VBD"], window=2)
    assert len(feats) == 3 and len({len(f) for f in feats}) == 1
    cat = set(feats[1])
    for name in ("w[0]=cat", "w[-1]=the", "w[1]=sat", "w[2]=</s>", "w[-2]=<s>", "p[0]=NN", "p[-1]=DT",
                 "p[-1]|p[0]=DT|NN", "p[0]|p[1]=NN|VBD", "p[-1]|p[0]|p[1]=DT|NN|VBD", "suf3=cat",
                 "suf2=at", "sh[-1]=Xx", "sh[0]=x", "w[-1]|w[0]=the|cat", "w[0]|w[1]=cat|sat",
                 "w[0]|p[0]=cat|NN", "cap=False"):
        assert name in cat, name
    assert "cap=True" in feats[0] and "p[-2]|p[-1]=<s>|<s>" in feats[0]
    no_pos = token_features(["The", "cat"], None, window=1)
    assert not any(f.startswith("p[") for f in no_pos[0]) and "w[1]=cat" in no_pos[0]
    assert "sh[0]=d.d" in token_features(["3.25"], None)[0]


def test_window_features_shapes_padding_and_unseen():
    train = [(["The", "cat", "sat", "."], ["DT", "NN", "VBD", "."], ["B-NP", "I-NP", "B-VP", "O"]),
             (["A", "dog"], ["DT", "NN"], ["B-NP", "I-NP"])]
    ids, lengths, vocab = window_features(train)
    K = len(token_features(["x"], ["X"])[0])
    assert ids.shape == (2, 4, K) and ids.dtype == torch.int64 and lengths.tolist() == [4, 2]
    assert (ids[1, 2:] == -1).all() and (ids[0] >= 0).all() and (ids[1, :2] >= 0).all()
    assert int(ids.max()) == len(vocab) - 1
    names = {i: f for f, i in vocab.items()}
    assert {names[int(i)] for i in ids[0, 1]} == set(token_features(*train[0][:2])[1])
    # slot k holds template k
    assert names[int(ids[0, 1, 2])] == "w[0]=cat"
    # test data: unseen features dropped, the vocabulary unchanged
    test = [(["The", "bird", "sat"], ["DT", "NN", "VBD"], ["B-NP", "I-NP", "B-VP"])]
    t_ids, t_lengths, t_vocab = window_features(test, vocab)
    assert t_vocab == vocab and t_ids.shape == (1, 3, K)
    bird = {names[int(i)] for i in t_ids[0, 1] if i >= 0}
    assert bird == set(token_features(*test[0][:2])[1]) & set(vocab)
    assert "w[-1]=the" in bird and "w[0]=bird" not in bird and (t_ids[0, 1] == -1).sum() > 0
    # min_count drops rare features
    _, _, common = window_features(train, min_count=2)
    counts: dict[str, int] = {}
    for words, pos, _ in train:
        for tok in token_features(words, pos):
            for f in tok:
                counts[f] = counts.get(f, 0) + 1
    assert set(common) == {f for f, c in counts.items() if c >= 2}
    assert sorted(common.values()) == list(range(len(common)))
    assert "w[0]=cat" not in common and "p[0]=DT" in common
    # the ids feed SparseFeaturePotentials
    unary, _ = st.SparseFeaturePotentials(len(vocab), 3)(t_ids)
    assert unary.shape == (1, 3, 3)
    with pytest.raises(ValueError, match="POS"):
        window_features([(["a"],)])
    ids_np, _, _ = window_features([(["a", "b"], ["B-NP", "I-NP"])], pos=False)
    assert ids_np.shape[2] < K


def test_encode_decode_tags():
    tags = [["B-NP", "I-NP", "O"], ["B-VP"]]
    ids, lengths, labels = encode_tags(tags)
    assert labels == ["O", "B-NP", "I-NP", "B-VP", "I-VP"]
    assert ids.tolist() == [[1, 2, 0], [3, 0, 0]] and lengths.tolist() == [3, 1]
    assert decode_tags(ids, lengths, labels) == tags
    path = torch.tensor([[1, 2, 0], [3, -1, -1]])  # Viterbi's -1 padding
    assert decode_tags(path, lengths, labels) == tags
    with pytest.raises(ValueError, match="B-PP"):
        encode_tags([["B-PP"]], labels)


def _rows(stdout: str) -> dict[str, list[str]]:
    rows = {}
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 6 and not cells[0].startswith(("model", "---")):
            rows[cells[0]] = cells[1:]
    return rows


def test_chunking_example_end_to_end(tmp_path):
    args = ["--n-train", "150", "--n-test", "100", "--svm-passes", "4", "--crf-iters", "40",
            "--save-data", str(tmp_path)]
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "chunking.py"), *args],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = _rows(proc.stdout)
    assert set(rows) == {"baseline (chunk tag by POS)", "CRF, LBFGS", "SVM, BCFW"}, proc.stdout
    f1 = {name: float(cells[4]) for name, cells in rows.items()}
    accuracy = {name: float(cells[2]) for name, cells in rows.items()}
    baseline = f1["baseline (chunk tag by POS)"]
    assert 0.3 < baseline < 0.85
    for model in ("CRF, LBFGS", "SVM, BCFW"):
        assert f1[model] > baseline + 0.1 and f1[model] > 0.9, proc.stdout
        assert accuracy[model] > accuracy["baseline (chunk tag by POS)"]
    for kind in CHUNK_TYPES:
        assert re.search(rf"^\| {kind} \| \d+ \|", proc.stdout, flags=re.M), kind
    assert read_conll(tmp_path / "train.txt") and len(read_conll(tmp_path / "test.txt")) == 100
    assert "duality gap" in proc.stdout
    # the CoNLL-2000 layout: --data DIR reads DIR/train.txt and DIR/test.txt (the files just written)
    again = subprocess.run([sys.executable, str(ROOT / "examples" / "chunking.py"), "--data", str(tmp_path),
                            "--svm-passes", "1", "--crf-iters", "5"], capture_output=True, text=True, timeout=300,
                           cwd=ROOT)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"{tmp_path / 'train.txt'} / {tmp_path / 'test.txt'}" in again.stdout
