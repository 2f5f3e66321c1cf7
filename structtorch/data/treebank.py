"""A synthetic dependency treebank: sentences drawn from a small head-driven grammar, with heads and
relation labels (Universal-Dependencies-like names), projective by construction, optionally made
non-projective by extraposition.

Each clause is a verb (the root's child) with a subject noun phrase on its left, an optional adverb
before it, an optional object noun phrase and an optional oblique prepositional phrase on its right.
A noun phrase is a noun with an optional determiner and up to two adjectives on its left and an
optional prepositional modifier (``nmod``) on its right; a prepositional phrase is a noun with its
preposition (``case``) on its left. Whether a prepositional phrase attaches to the verb (``obl``)
or to the noun before it (``nmod``) depends on its noun: nouns of one half of the vocabulary go
with verbs, of the other half with nouns (a lexical preference a parser must learn). With
``extraposition`` > 0, the subject's prepositional modifier moves to the end of the sentence with
that probability, which makes its arc cross the verb's: a non-projective tree. ``noise`` replaces
words by random ones.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .._checks import check_int, check_number

__all__ = ["Treebank", "synthetic_treebank", "RELATIONS", "WORD_CLASSES"]

RELATIONS = ("root", "nsubj", "obj", "obl", "advmod", "det", "amod", "nmod", "case")
"""The relation labels, by index."""

WORD_CLASSES = {"VERB": (1, 21), "NOUN": (21, 61), "DET": (61, 65), "ADJ": (65, 81), "ADV": (81, 89),
                "ADP": (89, 95)}
"""Word ids of each class, [first, last); nouns below 41 prefer attaching to verbs. 0 pads."""

VOCABULARY = 95
"""The number of word ids (0 is padding)."""


@dataclass
class Treebank:
    """Sentences with their trees.

    Attributes
    ----------
    words : Tensor (B, T) int64
        Word ids of words 1..T (column t holds word t + 1), 0 beyond each length.
    heads : Tensor (B, T + 1) int64
        The head of each word (position 0 the root), -1 at the root and beyond each length.
    relations : Tensor (B, T + 1) int64
        The relation of each word to its head (an index of :data:`RELATIONS`), -1 where heads is.
    lengths : Tensor (B,) int64
    """

    words: torch.Tensor
    heads: torch.Tensor
    relations: torch.Tensor
    lengths: torch.Tensor

    def __len__(self) -> int:
        return int(self.lengths.shape[0])

    def batch(self, index: torch.Tensor) -> Treebank:
        """The sentences ``index``, trimmed to their longest."""
        T = max(int(self.lengths[index].max()), 1) if len(index) else 1
        return Treebank(self.words[index, :T], self.heads[index, :T + 1], self.relations[index, :T + 1],
                        self.lengths[index])


class _Sentence:
    """A tree under construction: words with their head and relation (indices into the lists)."""

    def __init__(self, g: torch.Generator):
        self.g, self.words, self.heads, self.relations = g, [], [], []

    def chance(self, p: float) -> bool:
        return bool(torch.rand((), generator=self.g) < p)

    def word(self, cls: str, low: int | None = None, high: int | None = None) -> int:
        first, last = WORD_CLASSES[cls]
        return int(torch.randint(low or first, high or last, (), generator=self.g))

    def node(self, word: int, head: int, relation: str) -> int:
        self.words.append(word)
        self.heads.append(head)
        self.relations.append(RELATIONS.index(relation))
        return len(self.words) - 1

    def phrase(self, head: int, relation: str, depth: int, verbal: bool | None = None) -> list:
        """A noun phrase (``verbal`` None) or a prepositional phrase attaching to a verb (True) or a
        noun (False) under ``head``: (its nodes in order, the nmod phrase's nodes or None)."""
        half = (21, 41) if verbal else (41, 61)
        noun = self.node(self.word("NOUN", *(half if verbal is not None else (None, None))), head, relation)
        left = []
        if verbal is not None:
            left.append(self.node(self.word("ADP"), noun, "case"))
        else:
            if self.chance(0.8):
                left.append(self.node(self.word("DET"), noun, "det"))
            for _ in range(int(torch.randint(0, 3, (), generator=self.g))):
                left.append(self.node(self.word("ADJ"), noun, "amod"))
        modifier = None
        if depth < 2 and self.chance(0.35):
            modifier = self.phrase(noun, "nmod", depth + 1, verbal=False)[0]
        return [*left, noun, *(modifier or [])], modifier

    def clause(self, extraposition: float) -> list:
        verb = self.node(self.word("VERB"), -1, "root")
        order = []
        if self.chance(0.3):
            order.append(self.node(self.word("ADV"), verb, "advmod"))
        subject, moved = self.phrase(verb, "nsubj", 0)
        if moved is not None and self.chance(extraposition):
            subject = [x for x in subject if x not in moved]  # extraposed to the end
        else:
            moved = None
        order += [*subject, verb]
        if self.chance(0.7):
            order += self.phrase(verb, "obj", 0)[0]
        if self.chance(0.4):
            order += self.phrase(verb, "obl", 1, verbal=True)[0]
        return order + (moved or [])


def synthetic_treebank(n: int, *, extraposition: float = 0.0, noise: float = 0.05, max_length: int = 40,
                       seed: int = 0) -> Treebank:
    """``n`` sentences of the module's grammar (sentences longer than ``max_length`` are redrawn).

    Parameters
    ----------
    n : int
        Sentences.
    extraposition : float
        Probability that the subject's prepositional modifier moves to the sentence's end (a
        non-projective tree); 0 gives projective trees only.
    noise : float
        Probability that a word is replaced by a random word id.
    max_length : int
        The longest sentence, >= 4.
    seed : int

    Returns
    -------
    Treebank
    """
    n = check_int("n", n, 1)
    check_number("extraposition", extraposition, low=0.0, high=1.0)
    check_number("noise", noise, low=0.0, high=1.0)
    max_length = check_int("max_length", max_length, 4)
    g = torch.Generator().manual_seed(check_int("seed", seed))
    sentences = []
    while len(sentences) < n:
        s = _Sentence(g)
        order = s.clause(extraposition)
        if len(order) <= max_length:
            sentences.append((s, order))
    T = max(len(order) for _, order in sentences)
    words = torch.zeros(n, T, dtype=torch.long)
    heads = torch.full((n, T + 1), -1, dtype=torch.long)
    relations = torch.full((n, T + 1), -1, dtype=torch.long)
    for b, (s, order) in enumerate(sentences):
        position = {node: i + 1 for i, node in enumerate(order)}  # words are 1..L, the root 0
        for node, i in position.items():
            word = s.words[node]
            if s.chance(noise):
                word = int(torch.randint(1, VOCABULARY, (), generator=g))
            words[b, i - 1] = word
            heads[b, i] = 0 if s.heads[node] < 0 else position[s.heads[node]]
            relations[b, i] = s.relations[node]
    lengths = torch.tensor([len(order) for _, order in sentences])
    return Treebank(words, heads, relations, lengths)
