"""CoNLL-2000-style chunking data: reading and writing the three-column format, a synthetic
generator with a toy grammar and window indicator features. The tag <-> id mapping
(:func:`encode_tags`, :func:`decode_tags`, :func:`to_bio`) lives in :mod:`structtorch.schemes`
and is re-exported here.

The format has one token per line, ``word POS chunk-tag`` separated by whitespace, and a blank
line between sentences::

    The DT B-NP
    cat NN I-NP
    sat VBD B-VP
    . . O

A *sentence* here is a tuple of equally long columns, e.g. ``(words, pos, chunks)`` as
:func:`read_conll` (default) and :func:`synthetic_chunking` return it. Feature extraction turns
sentences into the padded bags of feature ids that :class:`structtorch.SparseFeaturePotentials`
scores, and :func:`encode_tags` the chunk tags into label ids; together they make the
:class:`structtorch.data.SequenceData` that :func:`structtorch.train.fit` trains on.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import torch
from torch import Tensor

from .._checks import check_int, check_number
from ..schemes import decode_tags, encode_tags, to_bio  # their home; re-exported here
from ..sequence_data import SequenceData

__all__ = [
    "read_conll",
    "write_conll",
    "synthetic_chunking",
    "window_features",
    "token_features",
    "encode_tags",
    "decode_tags",
    "to_bio",
    "conll_sequence_data",
    "CHUNK_TYPES",
]

Sentence = tuple[list[str], ...]
PAD = -1  # the padding feature id (as SparseFeaturePotentials reads it)


# ---------------------------------------------------------------------------------------------
# the three-column format


def read_conll(path: str | Path, *, columns: Sequence[int] = (0, 1, 2)) -> list[Sentence]:
    """Read a CoNLL file: one token per line (whitespace-separated columns), blank lines between
    sentences. ``-DOCSTART-`` lines are skipped.

    Parameters
    ----------
    path : str or Path
    columns : sequence of int
        The columns to keep, in this order: (0, 1, 2) gives ``(words, pos, chunks)`` for the
        CoNLL-2000 format; (0, 2) gives ``(words, chunks)``; -1 is the last column.

    Returns
    -------
    list of tuples of lists of str
        One tuple per sentence holding one list (of the sentence's length) per requested column.

    Raises
    ------
    ValueError
        A line with too few columns (the message names the file and line).
    """
    columns = [check_int("columns[i]", c) for c in columns]
    if not columns:
        raise ValueError("columns must name at least one column")
    need = max(max(columns) + 1, max(-c for c in columns))
    sentences: list[Sentence] = []
    rows: list[list[str]] = []

    def flush() -> None:
        if rows:
            sentences.append(tuple([row[c] for row in rows] for c in columns))
            rows.clear()

    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            fields = line.split()
            if not fields:
                flush()
                continue
            if fields[0] == "-DOCSTART-":
                flush()
                continue
            if len(fields) < need:
                raise ValueError(f"{path}:{number}: expected at least {need} whitespace-separated columns "
                                 f"(columns={tuple(columns)}), got {len(fields)}: {line.rstrip()!r}")
            rows.append(fields)
    flush()
    return sentences


def write_conll(path: str | Path, sentences: Iterable[Sequence[Sequence[str]]]) -> None:
    """Write sentences (tuples of equally long columns, e.g. ``(words, pos, chunks)``) in the CoNLL
    format: one token per line, columns separated by one space, a blank line after each sentence.

    Raises
    ------
    ValueError
        Columns of different lengths, or a field that is empty or holds whitespace.
    """
    lines = []
    for i, sentence in enumerate(sentences):
        cols = [list(c) for c in sentence]
        if not cols or len({len(c) for c in cols}) != 1:
            raise ValueError(f"sentence {i}: needs one or more columns of one length, got lengths "
                             f"{[len(c) for c in cols]}")
        for row in zip(*cols, strict=True):
            for field in row:
                if not isinstance(field, str) or len(field.split()) != 1 or field != field.strip():
                    raise ValueError(f"sentence {i}: field {field!r} is empty or holds whitespace")
            lines.append(" ".join(row))
        lines.append("")
    Path(path).write_text("\n".join(lines) + ("\n" if lines else ""), encoding="utf-8")


# ---------------------------------------------------------------------------------------------
# window features


def _shape(word: str) -> str:
    """Word shape with runs collapsed: "Dog" -> "Xx", "3.5" -> "d.d", "e-mail" -> "x-x"."""
    out: list[str] = []
    for ch in word:
        c = "X" if ch.isupper() else "x" if ch.isalpha() else "d" if ch.isdigit() else ch
        if not out or out[-1] != c:
            out.append(c)
    return "".join(out)


def token_features(words: Sequence[str], pos: Sequence[str] | None = None, *,
                   window: int = 2) -> list[list[str]]:
    """Indicator feature names of each token of one sentence (classic CoNLL-2000 chunking templates).

    At each offset d in [-window, window]: the lower-cased word ``w[d]``, the POS ``p[d]``, and for
    ``|d| <= 1`` the word shape ``sh[d]``; at the token: its 2- and 3-letter suffixes and its
    capitalization; conjunctions: word bigrams ``w[-1]|w[0]``, ``w[0]|w[1]``, POS bigrams over
    adjacent offsets, POS trigrams centred at -1, 0 and 1 (within the window), and ``w[0]|p[0]``.
    Offsets beyond the sentence read ``<s>`` (before) and ``</s>`` (after).

    Parameters
    ----------
    words : sequence of str (L,)
    pos : sequence of str (L,), optional
        POS tags; None drops the POS templates.
    window : int
        The largest offset.

    Returns
    -------
    list of L lists of str
        Every token has the same number of features (one per template).
    """
    L = len(words)
    if pos is not None and len(pos) != L:
        raise ValueError(f"words and pos must have one length, got {L} and {len(pos)}")
    lower = [w.lower() for w in words]

    def at(seq: Sequence[str], i: int) -> str:
        return seq[i] if 0 <= i < L else ("<s>" if i < 0 else "</s>")

    shapes = [_shape(w) for w in words]
    offsets = range(-window, window + 1)
    feats = []
    for i in range(L):
        w = lower[i]
        f = [f"w[{d}]={at(lower, i + d)}" for d in offsets]
        f += [f"sh[{d}]={at(shapes, i + d)}" for d in offsets if abs(d) <= 1]
        f += [f"suf2={w[-2:]}", f"suf3={w[-3:]}", f"cap={words[i][:1].isupper()}"]
        f += [f"w[-1]|w[0]={at(lower, i - 1)}|{w}", f"w[0]|w[1]={w}|{at(lower, i + 1)}"]
        if pos is not None:
            f += [f"p[{d}]={at(pos, i + d)}" for d in offsets]
            f += [f"p[{d}]|p[{d + 1}]={at(pos, i + d)}|{at(pos, i + d + 1)}" for d in offsets[:-1]]
            f += [f"p[{d - 1}]|p[{d}]|p[{d + 1}]={at(pos, i + d - 1)}|{at(pos, i + d)}|{at(pos, i + d + 1)}"
                  for d in (-1, 0, 1) if abs(d) + 1 <= window]
            f += [f"w[0]|p[0]={w}|{pos[i]}"]
        feats.append(f)
    return feats


def window_features(
    sentences: Sequence[Sequence[Sequence[str]]],
    vocab: Mapping[str, int] | None = None,
    *,
    window: int = 2,
    pos: bool = True,
    min_count: int = 1,
) -> tuple[Tensor, Tensor, dict[str, int]]:
    """Padded bags of indicator-feature ids, for :class:`structtorch.SparseFeaturePotentials`.

    Build the feature vocabulary on the training sentences (``vocab=None``) and pass it for test
    sentences: features not in it are dropped (their slots padded).

    Parameters
    ----------
    sentences : sequence of B sentences
        Each a tuple of columns ``(words, pos, ...)`` (e.g. from :func:`read_conll` or
        :func:`synthetic_chunking`); columns after the POS (the chunk tags) are ignored.
    vocab : mapping str -> int, optional
        Feature name -> id in [0, F). None: built from ``sentences``, ids in order of first
        occurrence.
    window : int
        Offsets -window..window (see :func:`token_features` for the templates).
    pos : bool
        Whether column 1 holds POS tags (False for ``(words, chunks)`` sentences: POS templates off).
    min_count : int
        When building the vocabulary, keep the features seen at least this often.

    Returns
    -------
    ids : Tensor (B, T, K) int64
        Feature ids of each token, slot k holding template k (see :func:`token_features`), -1
        for a feature not in the vocabulary and beyond each length; K = the number of templates,
        T the longest sentence.
    lengths : Tensor (B,) int64
    vocab : dict str -> int
        The vocabulary used (the given one, or the one built), F = len(vocab).
    """
    check_int("window", window, 0)
    check_int("min_count", min_count, 1)
    if vocab is not None and min_count != 1:
        raise ValueError("min_count applies when building the vocabulary (vocab=None)")
    names = []
    for i, sentence in enumerate(sentences):
        if isinstance(sentence, str) or not sentence or isinstance(sentence[0], str):
            raise TypeError(f"sentence {i} must be a tuple of columns (words, pos, ...), "
                            f"got {sentence!r:.60}")
        if pos and len(sentence) < 2:
            raise ValueError(f"sentence {i} has no POS column; pass pos=False for (words, ...) sentences")
        names.append(token_features(sentence[0], sentence[1] if pos else None, window=window))
    if vocab is None:
        counts = Counter(f for sent in names for tok in sent for f in tok)
        vocab = {}
        for sent in names:
            for tok in sent:
                for f in tok:
                    if f not in vocab and counts[f] >= min_count:
                        vocab[f] = len(vocab)
    else:
        vocab = dict(vocab)
    lengths = torch.tensor([len(s) for s in names], dtype=torch.long)
    T = int(lengths.max()) if len(names) else 0
    K = max((len(tok) for sent in names for tok in sent), default=0)
    ids = torch.full((len(names), T, K), PAD, dtype=torch.long)
    for b, sent in enumerate(names):
        if sent:
            rows = [[vocab.get(f, PAD) for f in tok] for tok in sent]
            ids[b, : len(sent)] = torch.tensor(rows, dtype=torch.long)
    return ids, lengths, vocab


def conll_sequence_data(
    sentences: Sequence[Sequence[Sequence[str]]],
    vocab: Mapping[str, int] | None = None,
    labels: Sequence[str] | None = None,
    *,
    window: int = 2,
    min_count: int = 1,
) -> tuple[SequenceData, dict[str, int], list[str]]:
    """``(words, pos, chunks)`` sentences -> SequenceData (x = feature ids (B, T, K), labels (B, T),
    lengths (B,)) with the feature vocabulary and tag names (built when not given: pass the
    training set's to the test set). Chunk tags come from the last column."""
    ids, lengths, vocab = window_features(sentences, vocab, window=window, min_count=min_count)
    tags, _, labels = encode_tags([s[-1] for s in sentences], labels)
    return SequenceData(ids, tags, lengths), vocab, labels


# ---------------------------------------------------------------------------------------------
# the synthetic generator

CHUNK_TYPES = ("NP", "VP", "PP", "ADJP", "ADVP")

_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"
_SUFFIXES = {
    "noun": ("tion", "ment", "ness", "er", "ity", "ism"),
    "verb": ("ize", "ate", "ish", "en"),
    "adj": ("ous", "ful", "ive", "al", "ic"),
}
_DET = ("the", "a", "this", "that", "these", "every", "some", "no", "its", "their")
_PRON = ("he", "she", "it", "we", "they", "you")
_OBJ_PRON = ("it", "you", "him", "her", "us", "them")
_AUX = ("will", "can", "may", "must", "should", "would", "might")
_COPULA = (("is", "VBZ"), ("was", "VBD"), ("seems", "VBZ"), ("became", "VBD"), ("remains", "VBZ"))
_PREP = ("in", "on", "at", "with", "from", "by", "of", "about", "over", "into", "under", "after")
_INTENS = ("very", "quite", "too", "rather", "so")
_CC = ("and", "but", "or")
_FLAT = ("fast", "hard", "early", "late", "well", "straight", "high", "low")  # adjective and adverb


class _Lexicon:
    """Word forms per class, fixed (independent of the data seed) so train and test share them.

    Open classes have a known part (drawn for any data) and a held-out part (drawn only with
    ``unknown > 0``, unseen in training data generated without it). ``shared`` stems are both
    nouns (NN) and verbs (VB), and their "-s" forms both NNS and VBZ.
    """

    def __init__(self, size: int) -> None:
        rng = random.Random(2000)
        stems: set[str] = set()

        def stem() -> str:
            while True:
                syllables = rng.choice((1, 2, 2, 3))
                s = "".join(rng.choice(_CONSONANTS) + rng.choice(_VOWELS) for _ in range(syllables))
                s += rng.choice(_CONSONANTS)
                if s not in stems:
                    stems.add(s)
                    return s

        def words(kind: str, count: int) -> list[str]:
            return [stem() + rng.choice(_SUFFIXES[kind]) for _ in range(count)]

        def split(ws: list[str]) -> tuple[list[str], list[str]]:
            cut = max(1, int(0.8 * len(ws)))
            return ws[:cut], ws[cut:]

        self.noun = split(words("noun", size))
        self.verb = split(words("verb", size // 2))
        self.adj = split(words("adj", size // 2))
        self.adv = split([w + "ly" for w in words("adj", size // 4)])
        self.proper = split([stem().capitalize() for _ in range(size // 4)])
        self.shared = [stem() for _ in range(max(2, size // 5))]


_LEXICONS: dict[int, _Lexicon] = {}


def synthetic_chunking(
    n: int,
    *,
    seed: int = 0,
    vocab_size: int = 200,
    unknown: float = 0.0,
    pos_noise: float = 0.1,
    max_pps: int = 2,
) -> list[Sentence]:
    """Sample ``n`` sentences of a toy English-like grammar with CoNLL-2000 POS and chunk tags.

    The grammar: ``S -> CLAUSE ((",") CC CLAUSE)? "."``, a clause being an optional fronted
    ADVP, a subject NP, a VP and a complement (nothing, an NP, two NPs, or a predicative ADJP
    after a copula), then up to ``max_pps`` PP-NP pairs and an optional ADVP. NPs are a pronoun
    or ``DET? (ADV? ADJ)* NOUN+``, proper nouns or numbers; VPs ``AUX? RB? VB`` or a finite verb,
    optionally with an infinitive (``wants to go`` is one VP: ``to`` is B-PP before an NP and
    I-VP before a verb). Chunk types: ``CHUNK_TYPES`` (NP, VP, PP, ADJP, ADVP); commas, ``and``/
    ``but``/``or`` and the final period are ``O``.

    Ambiguity makes context and transitions matter: some stems are both nouns and verbs (NN/VB,
    NNS/VBZ); ``fast``, ``hard``, ... are adjectives inside NPs and ADJPs and adverbs in ADVPs;
    adjacent NPs (``gave the man a book``) need a B- inside a noun run; and the POS tags of
    ambiguous words are those of the other reading with probability ``pos_noise``, as from an
    automatic tagger.

    Parameters
    ----------
    n : int
        Number of sentences.
    seed : int
        Seeds the sentences; the word forms per class do not depend on it (only on ``vocab_size``),
        so sets drawn with different seeds come from one distribution.
    vocab_size : int
        Number of noun forms (other open classes scale with it); 20% of each open class is held out.
    unknown : float
        Probability that an open-class word comes from the held-out forms (never drawn with 0:
        use 0 for training data and e.g. 0.1 for test data to get unknown words).
    pos_noise : float
        Probability that an ambiguous word carries the POS tag of its other reading.
    max_pps : int
        The most prepositional phrases per clause.

    Returns
    -------
    list of (words, pos, chunks) tuples of lists of str
        The structure :func:`read_conll` returns; chunk tags are valid BIO.
    """
    check_int("n", n, 0)
    check_int("seed", seed)
    check_int("vocab_size", vocab_size, 10)
    check_int("max_pps", max_pps, 0)
    check_number("unknown", unknown, low=0.0, high=1.0)
    check_number("pos_noise", pos_noise, low=0.0, high=1.0)
    lex = _LEXICONS.setdefault(vocab_size, _Lexicon(vocab_size))
    rng = random.Random(seed)
    return [_Sentence(rng, lex, unknown, pos_noise, max_pps).build() for _ in range(n)]


class _Sentence:
    """One sentence under construction: tokens as (word, POS, chunk tag)."""

    def __init__(self, rng: random.Random, lex: _Lexicon, unknown: float, pos_noise: float,
                 max_pps: int) -> None:
        self.rng, self.lex, self.unknown, self.pos_noise, self.max_pps = rng, lex, unknown, pos_noise, max_pps
        self.tokens: list[tuple[str, str, str]] = []

    def pick(self, forms: tuple[list[str], list[str]]) -> str:
        known, held_out = forms
        pool = held_out if held_out and self.rng.random() < self.unknown else known
        return self.rng.choice(pool)

    def add(self, chunk: str | None, *words: tuple[str, str]) -> None:
        """Words (word, POS) forming one chunk of type ``chunk`` (None: each word is O)."""
        for i, (word, pos) in enumerate(words):
            tag = "O" if chunk is None else f"{'B' if i == 0 else 'I'}-{chunk}"
            self.tokens.append((word, pos, tag))

    def ambiguous(self, word: str, pos: str, other: str) -> tuple[str, str]:
        return word, other if self.rng.random() < self.pos_noise else pos

    # -- phrases ---------------------------------------------------------------------------------

    def noun(self) -> tuple[str, str]:
        r = self.rng.random()
        if r < 0.25:
            stem = self.rng.choice(self.lex.shared)
            return self.ambiguous(stem + "s", "NNS", "VBZ") if self.rng.random() < 0.3 else \
                self.ambiguous(stem, "NN", "VB")
        word = self.pick(self.lex.noun)
        return (word + "s", "NNS") if r < 0.45 else (word, "NN")

    def adjective(self) -> list[tuple[str, str]]:
        words = []
        if self.rng.random() < 0.15:
            words.append((self.rng.choice(_INTENS), "RB"))
        if self.rng.random() < 0.25:
            words.append(self.ambiguous(self.rng.choice(_FLAT), "JJ", "RB"))
        else:
            words.append((self.pick(self.lex.adj), "JJ"))
        return words

    def np(self, subject: bool = False) -> None:
        r = self.rng.random()
        if r < 0.15:
            self.add("NP", (self.rng.choice(_PRON if subject else _OBJ_PRON), "PRP"))
            return
        if r < 0.25:
            names = [(self.pick(self.lex.proper), "NNP") for _ in range(self.rng.choice((1, 1, 2)))]
            self.add("NP", *names)
            return
        words = []
        if r < 0.32:
            words.append((str(self.rng.randint(2, 999)), "CD"))
        elif self.rng.random() < 0.6:
            words.append((self.rng.choice(_DET), "DT"))
        for _ in range(self.rng.choice((0, 0, 1, 1, 2))):
            words += self.adjective()
        words += [self.noun() for _ in range(self.rng.choice((1, 1, 1, 2, 2, 3)))]
        self.add("NP", *words)

    def verb(self, form: str) -> tuple[str, str]:
        """A verb: form "VB" (bare), "VBD" (-ed), "VBZ" (-s) or "VBG" (-ing)."""
        if self.rng.random() < 0.3:
            stem = self.rng.choice(self.lex.shared)
            if form == "VB":
                return self.ambiguous(stem, "VB", "NN")
            if form == "VBZ":
                return self.ambiguous(stem + "s", "VBZ", "NNS")
        else:
            stem = self.pick(self.lex.verb)
        suffix = {"VB": "", "VBD": "d" if stem.endswith("e") else "ed", "VBZ": "s", "VBG": "ing"}[form]
        return (stem[:-1] if form == "VBG" and stem.endswith("e") else stem) + suffix, form

    def vp(self) -> None:
        words = []
        if self.rng.random() < 0.4:
            words.append((self.rng.choice(_AUX), "MD"))
            if self.rng.random() < 0.15:
                words.append((self.rng.choice(("not", "never", "also", "often")), "RB"))
            words.append(self.verb("VB"))
        else:
            words.append(self.verb(self.rng.choice(("VBD", "VBZ"))))
        if self.rng.random() < 0.15:  # "wants to go" is one VP
            words += [("to", "TO"), self.verb("VB")]
        self.add("VP", *words)

    def advp(self) -> None:
        words = [(self.rng.choice(_INTENS), "RB")] if self.rng.random() < 0.2 else []
        if self.rng.random() < 0.3:
            words.append(self.ambiguous(self.rng.choice(_FLAT), "RB", "JJ"))
        else:
            words.append((self.pick(self.lex.adv), "RB"))
        self.add("ADVP", *words)

    def pp(self) -> None:
        if self.rng.random() < 0.15:
            self.add("PP", ("to", "TO"))
        else:
            self.add("PP", (self.rng.choice(_PREP), "IN"))
        self.np()

    def clause(self) -> None:
        rng = self.rng
        if rng.random() < 0.1:
            self.advp()
            self.add(None, (",", ","))
        self.np(subject=True)
        r = rng.random()
        if r < 0.2:  # copula + predicative adjective
            self.add("VP", rng.choice(_COPULA))
            self.add("ADJP", *self.adjective())
        else:
            self.vp()
            if r < 0.6:
                self.np()
            elif r < 0.8:  # ditransitive: adjacent NPs
                self.np()
                self.np()
        for _ in range(rng.randint(0, self.max_pps)):
            self.pp()
        if rng.random() < 0.2:
            self.advp()

    def build(self) -> Sentence:
        self.clause()
        if self.rng.random() < 0.25:
            if self.rng.random() < 0.5:
                self.add(None, (",", ","))
            self.add(None, (self.rng.choice(_CC), "CC"))
            self.clause()
        self.add(None, (".", "."))
        word, pos, tag = self.tokens[0]
        self.tokens[0] = (word[:1].upper() + word[1:], pos, tag)
        words, tags, chunks = (list(c) for c in zip(*self.tokens, strict=True))
        return words, tags, chunks
