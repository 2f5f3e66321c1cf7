"""Substructure mining over itemsets and itemset sequences (Nowozin 2009, Part I, ch. 2 and 4).

Data types
----------
* **Itemset** (a set instance or pattern): a ``frozenset`` (or ``set``) of non-negative ints.
* **Itemset sequence**: a ``tuple`` (or ``list``) of itemsets, ``(s_1, ..., s_l)``. The empty
  sequence ``()`` is the least element; ``(frozenset(),)`` (one empty element) is a different sequence.

Relations
---------
* Sets: ``t <= s`` iff ``t`` is a subset of ``s``.
* Sequences (Def. 16, the robust gapped relation): ``s <= t`` iff there are indices
  ``i_1 < ... < i_l`` with ``s_k`` a subset of ``t_{i_k}``; decided by the greedy earliest match.

Enumeration
-----------
Reverse search (Algorithm 2) over the reduction maps of Example 1 (sets: drop the largest item) and
Def. 17 / Lemma 5 (sequences: drop the largest item of the last element, or the last element when it
is empty). :func:`parent` is the reduction map and :func:`children` its inverse (one child per
admissible item, erratum 14), so a depth-first walk from the empty pattern visits every pattern once.

Miners
------
:func:`frequent_patterns` (Problem 2) and :func:`best_patterns` (the boosting subproblem with the
Theorem 2 gain bound, which holds for all *supersets* of a pattern, erratum 4).

The miners report patterns whose itemsets are all non-empty, and ``max_size`` counts items
(``sum(len(s_k))``). Sequence nodes that end in an empty element, e.g. ``({a}, {})`` ("a, followed by
anything"), are visited as internal nodes of the enumeration tree (the parent of ``({a}, {b})``) but are
not reported; nodes with an empty element before the last are never visited (they only encode minimum
gaps). This restricted tree is closed under the reduction map, so each reported pattern is still
enumerated exactly once.

Vectorized counting
-------------------
The data are encoded once: item ids are compacted, each (instance, position) pair gets a flat index
``n * L + j`` (``L`` the longest sequence; a set is a sequence of length 1), with a CSR list of the items
at each position and an inverted list of the positions of each item. Each search node keeps one boolean
array ``M`` over all flat positions: ``M[n, j]`` is True iff position ``j`` of instance ``n`` comes after
the greedy earliest match of the pattern's prefix ``(s_1, ..., s_{l-1})`` and contains the last element
``s_l``. Then ``instance n contains the pattern iff M[n].any()``, and

* extending the last element by item ``e`` is ``M & X_e`` (one gather over the positions of ``e``),
* appending an empty element is ``M'[n, j] = any(M[n, :j])`` (a cumulative OR along each row; the
  earliest True is the greedy match of the whole pattern, so this is exact by Def. 16's greedy lemma),
* the supports (and the label-weighted sums of the gain bound) of *all* item extensions of a node come
  from one gather of the items at the node's True positions, a ``np.unique`` of (instance, item) keys and
  a ``np.bincount`` -- no Python loop over instances or (pattern, instance) pairs.

Sequences of single items
-------------------------
When no itemset of the data holds two items (PrefixSpan's setting), no pattern element can either, and
:func:`frequent_patterns` grows the patterns level by level on pseudo-projected databases instead of
walking the tree node by node: each pattern keeps, per instance that contains it, the position after
its greedy earliest match, and the supports of the extensions of *all* the patterns of a level come
from one count over (pattern, item) keys of the distinct items of their suffixes. The result, order
included, is that of the reverse search.
"""

from __future__ import annotations

import heapq
import itertools
import math
import numbers
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "SetPattern",
    "SequencePattern",
    "contains",
    "parent",
    "children",
    "enumerate_patterns",
    "occurrence_matrix",
    "separating_weights",
    "frequent_patterns",
    "best_patterns",
    "gain",
    "gain_bound",
]

SetPattern = frozenset
SequencePattern = tuple

_SETS = (set, frozenset)
_ITEM_MAX = 2**63 - 1  # items are counted as int64


# --------------------------------------------------------------------------------------------------
# validation


def _check_itemset(name: str, s: object) -> frozenset:
    if not isinstance(s, _SETS):
        raise TypeError(f"{name} must be a set or frozenset of non-negative ints (int64 item ids), got "
                        f"{type(s).__name__}")
    for i in s:
        if isinstance(i, bool) or not isinstance(i, numbers.Integral):
            raise TypeError(f"{name} must contain ints, got an item of type {type(i).__name__}")
        if not 0 <= i <= _ITEM_MAX:
            raise ValueError(f"{name} must contain non-negative int64 item ids (in [0, 2**63 - 1]), "
                             f"got item {i}")
    return frozenset(int(i) for i in s)


def _check_sequence(name: str, s: object) -> tuple[frozenset, ...]:
    if isinstance(s, _SETS) or not isinstance(s, (list, tuple)):
        raise TypeError(f"{name} must be a list or tuple of frozensets (an itemset sequence), "
                        f"got {type(s).__name__}")
    return tuple(_check_itemset(f"{name}[{k}]", e) for k, e in enumerate(s))


def _is_graph(x: object) -> bool:
    """A networkx graph, a DFS code (tuple of 5-tuples of ints) or a (node_labels, edges, edge_labels)
    triple of arrays, tensors, lists or tuples; never an itemset sequence (whose elements are sets)."""
    if hasattr(x, "nodes") and hasattr(x, "edges"):
        return True
    if not isinstance(x, (tuple, list)) or not x:
        return False
    if isinstance(x, tuple) and all(isinstance(e, tuple) and len(e) == 5 and
                                    all(isinstance(v, numbers.Integral) for v in e) for e in x):
        return True
    return len(x) == 3 and all(hasattr(e, "shape") or isinstance(e, (list, tuple)) for e in x)


def _check_data(data: object) -> tuple[str, list]:
    """('sets' | 'sequences', validated instances)."""
    if isinstance(data, (str, bytes)) or not isinstance(data, Sequence):
        raise TypeError(f"data must be a list of itemsets or of itemset sequences, got {type(data).__name__}")
    if len(data) == 0:
        raise ValueError("data must be non-empty")
    kind = "sets" if isinstance(data[0], _SETS) else "sequences"
    check = _check_itemset if kind == "sets" else _check_sequence
    out = []
    for n, x in enumerate(data):
        if (kind == "sets") != isinstance(x, _SETS):
            raise TypeError(f"data[{n}] is a {type(x).__name__} but data[0] is a "
                            f"{type(data[0]).__name__}: data must be all itemsets or all sequences")
        out.append(check(f"data[{n}]", x))
    return kind, out


def _check_support(name: str, value: object, n: int) -> int:
    """A count (int >= 1) or a fraction (float in (0, 1]) as a count."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be an int count >= 1 or a float fraction in (0, 1], "
                        f"got {type(value).__name__}")
    if isinstance(value, numbers.Integral):
        if value < 1:
            raise ValueError(f"{name} as a count must be >= 1, got {value}")
        return int(value)
    value = float(value)
    if not (0.0 < value <= 1.0):
        raise ValueError(f"{name} as a fraction must be in (0, 1], got {value}")
    return max(1, math.ceil(value * n - 1e-9))


def _check_max_size(max_size: object) -> float:
    if max_size is None:
        return math.inf
    if isinstance(max_size, bool) or not isinstance(max_size, numbers.Integral):
        raise TypeError(f"max_size must be an int or None, got {type(max_size).__name__}")
    if max_size < 1:
        raise ValueError(f"max_size must be >= 1, got {max_size}")
    return int(max_size)


def _check_labels(y: object, weights: object, n: int) -> tuple[np.ndarray, np.ndarray]:
    yy = np.asarray(y.detach().cpu() if hasattr(y, "detach") else y)
    if yy.shape != (n,):
        raise ValueError(f"y must have shape ({n},) (one label per instance), got {tuple(yy.shape)}")
    if yy.dtype == bool or not np.isin(yy, (-1, 1)).all():
        raise ValueError("y must contain only the labels -1 and +1")
    ww = np.asarray(weights.detach().cpu() if hasattr(weights, "detach") else weights)
    if ww.shape != (n,):
        raise ValueError(f"weights must have shape ({n},) (one weight per instance), got {tuple(ww.shape)}")
    if ww.dtype == bool or not np.issubdtype(ww.dtype, np.number):
        raise TypeError(f"weights must be real numbers, got dtype {ww.dtype}")
    ww = ww.astype(np.float64)
    if not np.isfinite(ww).all() or (ww < 0).any():
        raise ValueError("weights must be finite and non-negative")
    return yy.astype(np.float64), ww


# --------------------------------------------------------------------------------------------------
# relation, reduction map and its inverse


def _contains_sequence(pattern: tuple[frozenset, ...], instance: tuple[frozenset, ...]) -> bool:
    j = 0
    for s in pattern:
        while j < len(instance) and not s <= instance[j]:
            j += 1
        if j == len(instance):
            return False
        j += 1
    return True


def contains(pattern: object, instance: object) -> bool:
    """Whether ``pattern`` is a substructure of ``instance``.

    Parameters
    ----------
    pattern, instance
        Two itemsets (subset test), two itemset sequences (Def. 16: greedy earliest match of each
        pattern element as a subset of a later instance element, gaps allowed), or two labeled graphs
        (dispatched to :func:`structtorch.mining.graphs.contains`).

    Returns
    -------
    bool
    """
    if _is_graph(pattern) or _is_graph(instance):
        from structtorch.mining import graphs  # lazy: graphs are optional here

        return graphs.contains(pattern, instance)
    if isinstance(pattern, _SETS):
        p = _check_itemset("pattern", pattern)
        if not isinstance(instance, _SETS):
            raise TypeError(f"instance must be an itemset like pattern, got {type(instance).__name__}")
        return p <= _check_itemset("instance", instance)
    return _contains_sequence(_check_sequence("pattern", pattern), _check_sequence("instance", instance))


def parent(pattern: object) -> object:
    """The reduction map ``f`` (Example 1 for sets, Def. 17 for sequences).

    Sets lose their largest item. Sequences lose the largest item of their last element, or the last
    element itself when it is empty. ``f(s)`` is covered by ``s`` and repeated application reaches the
    empty pattern.

    Raises
    ------
    ValueError
        For the empty pattern (the root has no parent).
    """
    if isinstance(pattern, _SETS):
        s = _check_itemset("pattern", pattern)
        if not s:
            raise ValueError("pattern is the empty set, which has no parent")
        return s - {max(s)}
    s = _check_sequence("pattern", pattern)
    if not s:
        raise ValueError("pattern is the empty sequence, which has no parent")
    if not s[-1]:
        return s[:-1]
    return s[:-1] + (s[-1] - {max(s[-1])},)


def children(pattern: object, alphabet: Sequence[int] | int) -> list:
    """The inverse reduction map ``f^-1`` over a finite alphabet (Example 1; Lemma 5 with erratum 14).

    Parameters
    ----------
    pattern
        An itemset or an itemset sequence.
    alphabet
        The items (an iterable of non-negative ints) or their number ``A`` (items ``0..A-1``).

    Returns
    -------
    list
        Sets: ``t | {e}`` for each ``e > max t``. Sequences: ``(s..., {})`` first, then
        ``(s_1, ..., s_l | {e})`` for each ``e > max s_l`` (none for the empty sequence, whose only
        child is ``({},)``). Ordered by item.
    """
    if isinstance(alphabet, numbers.Integral) and not isinstance(alphabet, bool):
        items = list(range(int(alphabet)))
    else:
        items = sorted(_check_itemset("alphabet", frozenset(alphabet)))
    if isinstance(pattern, _SETS):
        s = _check_itemset("pattern", pattern)
        top = max(s, default=-1)
        return [s | {e} for e in items if e > top]
    s = _check_sequence("pattern", pattern)
    if not s:
        return [(frozenset(),)]
    top = max(s[-1], default=-1)
    return [s + (frozenset(),)] + [s[:-1] + (s[-1] | {e},) for e in items if e > top]


def enumerate_patterns(root: object, alphabet: Sequence[int] | int, *, max_length: int,
                       max_items: int) -> Iterator:
    """Reverse search (Algorithm 2) from ``root`` over a bounded alphabet, without a data predicate.

    Visits every pattern below ``root`` with at most ``max_items`` items and (for sequences) at most
    ``max_length`` elements exactly once, in depth-first preorder. Meant for tests and small alphabets.
    """
    stack = [root]
    while stack:
        s = stack.pop()
        yield s
        kids = []
        for c in children(s, alphabet):
            n_items = len(c) if isinstance(c, _SETS) else sum(len(e) for e in c)
            length = 1 if isinstance(c, _SETS) else len(c)
            if n_items <= max_items and length <= max_length:
                kids.append(c)
        stack.extend(reversed(kids))


# --------------------------------------------------------------------------------------------------
# gains


def gain(support: np.ndarray, y: np.ndarray, weights: np.ndarray, direction: int = 1) -> float:
    """``gain(t, d) = sum_n w_n y_n h(x_n; (t, d)) = 2 d sum_{t <= x_n} w_n y_n - d sum_n w_n y_n``.

    ``support`` is the boolean vector ``[t <= x_n]_n``.
    """
    wy = np.asarray(weights, dtype=np.float64) * np.asarray(y, dtype=np.float64)
    return float(direction * (2.0 * wy[np.asarray(support, bool)].sum() - wy.sum()))


def gain_bound(support: np.ndarray, y: np.ndarray, weights: np.ndarray) -> float:
    """Theorem 2's ``mu(t) = max(mu_1, mu_-1)``: an upper bound on ``gain(q, d)`` for all ``q >= t``.

    ``mu_1 = 2 sum_{y_n=+1, t<=x_n} w_n - sum_n w_n y_n``, ``mu_-1 = 2 sum_{y_n=-1, t<=x_n} w_n +
    sum_n w_n y_n`` (erratum 4: the bound is for supersets of ``t``). Needs ``weights >= 0``.
    """
    s = np.asarray(support, bool)
    y = np.asarray(y, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    total = float((w * y).sum())
    return max(2.0 * float(w[s & (y > 0)].sum()) - total, 2.0 * float(w[s & (y < 0)].sum()) + total)


# --------------------------------------------------------------------------------------------------
# encoded data and search nodes


def _plain_arrays(data: object) -> tuple[str, np.ndarray, np.ndarray, np.ndarray] | None:
    """``(kind, sequence lengths, itemset sizes, items)`` of plain input, by C-level passes; else None.

    Plain input is a non-empty list or tuple of sets / frozensets of ``int`` (itemsets), or of lists /
    tuples of them (sequences), with items in ``[0, 2**63 - 1]``. The items are listed itemset by
    itemset. Anything else -- other integer types, subclasses, invalid data -- gives None, and
    :func:`_encode` falls back to the per-item checks of :func:`_check_data` (and their messages).
    """
    if type(data) not in (list, tuple) or not data:
        return None
    outer = set(map(type, data))
    if outer <= {frozenset, set}:
        kind, elems = "sets", data
    elif outer <= {tuple, list}:
        kind, elems = "sequences", list(itertools.chain.from_iterable(data))
        if not set(map(type, elems)) <= {frozenset, set}:
            return None
    else:
        return None
    items = list(itertools.chain.from_iterable(elems))
    if not set(map(type, items)) <= {int}:
        return None
    try:
        arr = np.array(items, dtype=np.int64)
    except OverflowError:
        return None
    if arr.size and arr.min() < 0:
        return None
    n = len(data)
    seq_len = np.ones(n, np.int64) if kind == "sets" else np.fromiter(map(len, data), np.int64, n)
    return kind, seq_len, np.fromiter(map(len, elems), np.int64, len(elems)), arr


def _arrays(data: object) -> tuple[str, np.ndarray, np.ndarray, np.ndarray]:
    """Validate ``data`` (a list of itemsets or of itemset sequences): :func:`_plain_arrays` of it."""
    arrays = _plain_arrays(data)
    if arrays is None:
        _, instances = _check_data(data)  # raises on invalid data
        arrays = _plain_arrays(instances)
        assert arrays is not None
    return arrays


def _encode(data: object) -> _Encoded:
    """Validate ``data`` and encode it for the reverse search (:class:`_Encoded`)."""
    return _Encoded(*_arrays(data))


def _compact(items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The sorted distinct items and the index of each item among them."""
    if items.size and items.max() < 4 * items.size + 4096:  # small ids: one count instead of a sort
        present = np.bincount(items) > 0
        return np.flatnonzero(present), (np.cumsum(present) - 1)[items]
    return np.unique(items, return_inverse=True)


class _Encoded:
    """The instances as flat positions (``n * L + j``) with CSR item lists and inverted item lists.

    Built from :func:`_plain_arrays`: ``seq_len[n]`` itemsets in instance ``n`` (1 for sets),
    ``set_len[k]`` items in itemset ``k``, and the items of all itemsets in order.
    """

    def __init__(self, kind: str, seq_len: np.ndarray, set_len: np.ndarray, items: np.ndarray) -> None:
        self.sequences = kind == "sequences"
        self.N = seq_len.size
        self.L = max(1, int(seq_len.max()))
        self.vocab, compact = _compact(items)
        self.V = self.vocab.size
        row = np.repeat(np.arange(self.N), seq_len)  # the instance of each itemset
        first = np.cumsum(seq_len) - seq_len
        flat = row * self.L + np.arange(set_len.size) - first[row]  # the position of each itemset
        counts = np.zeros(self.N * self.L, dtype=np.int64)
        counts[flat] = set_len
        self.valid = np.zeros(self.N * self.L, dtype=bool)
        self.valid[flat] = True
        self.indptr = np.concatenate([[0], np.cumsum(counts)])
        owner = np.repeat(np.arange(set_len.size), set_len)
        self.items = compact[np.lexsort((compact, owner))].astype(np.int64)  # sorted in each itemset
        pos = np.repeat(np.arange(self.N * self.L), counts)
        order = np.argsort(self.items, kind="stable")
        self.item_ptr = np.concatenate([[0], np.cumsum(np.bincount(self.items, minlength=self.V))])
        self.item_pos = pos[order]

    def support(self, M: np.ndarray) -> np.ndarray:
        return M.reshape(self.N, self.L).any(axis=1)

    def extension_pairs(self, M: np.ndarray, above: int) -> tuple[np.ndarray, np.ndarray]:
        """The distinct (instance, item) pairs with item > ``above`` at a True position of ``M``."""
        p = np.flatnonzero(M)
        starts, ends = self.indptr[p], self.indptr[p + 1]
        k = ends - starts
        total = int(k.sum())
        if total == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        offs = np.cumsum(k) - k
        idx = np.arange(total) - np.repeat(offs, k) + np.repeat(starts, k)
        items = self.items[idx]
        rows = np.repeat(p // self.L, k)
        keep = items > above
        keys = np.sort(rows[keep] * self.V + items[keep])
        if keys.size > 1:
            keys = keys[np.concatenate(([True], keys[1:] != keys[:-1]))]
        return keys // self.V, keys % self.V

    def extend(self, M: np.ndarray, e: int) -> np.ndarray:
        pe = self.item_pos[self.item_ptr[e]:self.item_ptr[e + 1]]
        out = np.zeros_like(M)
        out[pe] = M[pe]
        return out

    def append_empty(self, M: np.ndarray) -> np.ndarray:
        M2 = M.reshape(self.N, self.L)
        seen = np.logical_or.accumulate(M2, axis=1)
        out = np.zeros_like(M2)
        out[:, 1:] = seen[:, :-1]
        return out.reshape(-1) & self.valid


@dataclass
class _Node:
    pattern: tuple[tuple[int, ...], ...]  # compact ids; () is the root (the empty pattern)
    M: np.ndarray
    size: int

    @property
    def top(self) -> int:
        return self.pattern[-1][-1] if self.pattern and self.pattern[-1] else -1

    @property
    def reportable(self) -> bool:
        return bool(self.pattern) and bool(self.pattern[-1])

    def child(self, enc: _Encoded, e: int | None) -> _Node:
        if e is None:
            return _Node(self.pattern + ((),), enc.append_empty(self.M), self.size)
        return _Node(self.pattern[:-1] + (self.pattern[-1] + (e,),), enc.extend(self.M, e), self.size + 1)


def _root(enc: _Encoded) -> _Node:
    # the node "(empty element)": every valid position matches it; for sets this is the empty set
    return _Node(((),), enc.valid.copy(), 0)


def _decode(enc: _Encoded, pattern: tuple[tuple[int, ...], ...]) -> object:
    elems = tuple(frozenset(int(enc.vocab[i]) for i in e) for e in pattern)
    return elems if enc.sequences else elems[0]


def _can_append(enc: _Encoded, node: _Node) -> bool:
    return enc.sequences and node.reportable


def occurrence_matrix(patterns: Sequence, data: Sequence) -> np.ndarray:
    """Binary features ``phi_t(x_n) = 1[t <= x_n]`` (Def. 3) of many patterns on many instances.

    Each pattern is replayed over all instances at once on the encoded data (one masked gather per
    item and one cumulative OR per element boundary, as in the miners), not tested per instance.

    Parameters
    ----------
    patterns : sequence of itemsets or of itemset sequences (the kind of ``data``; graphs dispatch to
        :func:`structtorch.mining.graphs.occurrence_matrix`)
    data : list of itemsets or list of itemset sequences

    Returns
    -------
    ndarray of bool, shape (len(data), len(patterns))
    """
    if isinstance(data, Sequence) and len(data) and _is_graph(data[0]):
        from structtorch.mining import graphs

        return graphs.occurrence_matrix(patterns, data)
    enc = _encode(data)
    kind = "sequences" if enc.sequences else "sets"
    if isinstance(patterns, (str, bytes)) or not isinstance(patterns, Sequence):
        raise TypeError(f"patterns must be a list of patterns, got {type(patterns).__name__}")
    index = {int(v): i for i, v in enumerate(enc.vocab.tolist())}
    out = np.zeros((enc.N, len(patterns)), dtype=bool)
    for k, pattern in enumerate(patterns):
        if kind == "sets":
            if not isinstance(pattern, _SETS):
                raise TypeError(f"patterns[{k}] must be an itemset like the instances of data, "
                                f"got {type(pattern).__name__}")
            elems: tuple[frozenset, ...] = (_check_itemset(f"patterns[{k}]", pattern),)
        else:
            elems = _check_sequence(f"patterns[{k}]", pattern)
            if not elems:
                out[:, k] = True
                continue
        if any(i not in index for e in elems for i in e):
            continue  # an item that occurs nowhere
        M = enc.valid.copy()
        for m, e in enumerate(elems):
            if m:
                M = enc.append_empty(M)
            for i in sorted(e):
                M = enc.extend(M, index[i])
        out[:, k] = enc.support(M)
    return out


def separating_weights(data: Sequence, y: object, *, rho: float = 1.0) -> list[tuple[object, float]]:
    """Theorem 1's constructive separation: weights on the training instances as patterns.

    With 0/1 indicator features ``phi_t(x) = 1[t <= x]`` (erratum 22), the recursion over the
    sub-poset of distinct training instances ``beta_{s_n} = y_n rho - sum_{s_m < s_n} beta_{s_m}``
    (``s_m`` ranging over the instances properly contained in ``s_n``) gives
    ``F(s_n) = sum_m beta_{s_m} 1[s_m <= s_n] = y_n rho`` on every training instance, so the data are
    separated with margin ``rho / ||beta||_1`` after l1 normalisation (at least ``1 / N^3`` for
    ``rho = 1``). The weak learners of Def. 5 are ``(s_m, sign beta)`` with ``alpha = |beta|``.

    Parameters
    ----------
    data : list of itemsets or itemset sequences
    y : (N,) array-like of -1 / +1, equal on equal instances (consistent labels)
    rho : float > 0

    Returns
    -------
    list of (pattern, beta)
        One entry per distinct instance, in an order where each pattern follows all its sub-patterns.
    """
    kind, instances = _check_data(data)
    yy, _ = _check_labels(y, np.ones(len(instances)), len(instances))
    if isinstance(rho, bool) or not isinstance(rho, numbers.Real) or not (0 < float(rho) < math.inf):
        raise ValueError(f"rho must be a finite number > 0, got {rho!r}")
    label: dict[object, float] = {}
    for n, x in enumerate(instances):
        if label.setdefault(x, yy[n]) != yy[n]:
            raise ValueError(f"y must be consistent: data[{n}] equals an earlier instance with the "
                             "other label")
    distinct = list(label)
    C = occurrence_matrix(distinct, distinct)  # C[m, k] = distinct[k] <= distinct[m]
    np.fill_diagonal(C, False)
    order, done = [], np.zeros(len(distinct), bool)
    while len(order) < len(distinct):  # topological: instances whose proper sub-instances are placed
        ready = np.flatnonzero(~done & ~(C & ~done[None, :]).any(axis=1))
        done[ready] = True
        order.extend(ready.tolist())
    beta = np.zeros(len(distinct))
    for m in order:
        beta[m] = label[distinct[m]] * float(rho) - beta[C[m]].sum()
    return [(distinct[m], float(beta[m])) for m in order]


# --------------------------------------------------------------------------------------------------
# sequences of single items: level-wise growth of pseudo-projected databases


class _ItemSequences:
    """Sequences of single items laid end to end (empty itemsets dropped: they match no element).

    ``item[p]`` is the (compact) item at flat position ``p``, ``end[p]`` the end of its sequence and
    ``prev[p]`` the previous position of the same item in the same sequence (-1 if none). A *state*
    ``p`` stands for the suffix ``item[p:end[p]]``; its distinct items are at the positions ``q >= p``
    with ``prev[q] < p`` (their first occurrences), so no deduplication is needed. Positions are int32
    when they fit (half the memory traffic of the gathers).
    """

    def __init__(self, seq_len: np.ndarray, set_len: np.ndarray, items: np.ndarray) -> None:
        self.vocab, item = _compact(items)
        self.V = self.vocab.size
        row = np.repeat(np.arange(seq_len.size), seq_len)[set_len > 0]  # the instance of each item
        count = np.bincount(row, minlength=seq_len.size)
        off = np.concatenate([[0], np.cumsum(count)])
        self.dtype = np.int32 if item.size < 2**31 - 1 else np.int64
        self.item = item.astype(self.dtype)
        self.end = off[1:][row].astype(self.dtype)
        self.starts = off[:-1][count > 0].astype(self.dtype)
        self.has_next = np.arange(1, item.size + 1) < self.end
        key = row * self.V + item
        order = np.argsort(key, kind="stable")
        same = key[order[1:]] == key[order[:-1]]
        self.prev = np.full(item.size, -1, dtype=self.dtype)
        self.prev[order[1:][same]] = order[:-1][same]

    def extensions(self, node: np.ndarray, state: np.ndarray, n_nodes: int) -> tuple[np.ndarray, np.ndarray]:
        """For each pair ``(node[k], state[k])`` (``node < n_nodes``) and each distinct item after
        ``state[k]``: the key ``node[k] * V + item`` and the item's first position ``q``."""
        k = self.end[state] - state
        offsets = np.cumsum(k, dtype=self.dtype) - k
        q = np.arange(int(k.sum()), dtype=self.dtype) + np.repeat(state - offsets, k)
        first = self.prev[q] < np.repeat(state, k)
        q = q[first]
        key_type = np.int32 if n_nodes * self.V < 2**31 else np.int64
        base = node.astype(key_type) * key_type(self.V)
        return np.repeat(base, k)[first] + self.item[q], q


def _frequent_keys(keys: np.ndarray, size: int, sigma: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The keys in ``[0, size)`` that occur at least ``sigma`` times (sorted), their counts, and the rank
    of each entry's key among them (-1 for an infrequent key)."""
    if size <= 8 * keys.size + 4096:  # a dense count
        counts = np.bincount(keys, minlength=size)
        freq = np.flatnonzero(counts >= sigma)
        rank = np.full(size, -1, dtype=keys.dtype)
        rank[freq] = np.arange(freq.size)
        return freq, counts[freq], rank[keys]
    uniq, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
    ok = counts >= sigma
    rank = np.where(ok, np.cumsum(ok) - 1, -1)
    return uniq[ok], counts[ok], rank[inverse]


_CHUNK = 1 << 22  # suffix entries scanned at once: bounds the temporary arrays and the pending pairs


def _runs(k: np.ndarray, budget: int) -> np.ndarray:
    """Cut points ``0 = c_0 < ... < c_m = len(k)`` splitting ``k`` into runs summing to about ``budget``."""
    total = np.cumsum(k)
    cuts = np.searchsorted(total, budget * np.arange(1, int(total[-1]) // budget + 1))
    return np.unique(np.concatenate([[0], cuts, [k.size]]))


def _grow(seqs: _ItemSequences, node: np.ndarray, state: np.ndarray, n_nodes: int, sigma: int,
          pairs: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The frequent one-item extensions of ``n_nodes`` patterns with the pairs ``(node, state)``.

    Returns the frequent keys ``pattern * V + item`` (sorted), their supports, and the pairs of the
    extensions (``node`` now indexing the frequent keys; none unless ``pairs``). The suffixes are
    scanned in runs of about ``_CHUNK`` entries; with more than one run, a first pass counts the keys
    and a second one collects the pairs.
    """
    cuts = _runs(seqs.end[state] - state, _CHUNK)
    if cuts.size == 2:
        keys, q = seqs.extensions(node, state, n_nodes)
        freq, support, rank = _frequent_keys(keys, n_nodes * seqs.V, sigma)
        keep = (rank >= 0) & seqs.has_next[q] if pairs else np.zeros(q.size, dtype=bool)
        return freq, support, rank[keep], q[keep] + 1
    runs = list(zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True))
    freq, support = _count_runs(seqs, node, state, n_nodes, runs)
    freq, support = freq[support >= sigma], support[support >= sigma]
    nodes, states = [np.zeros(0, np.int64)], [np.zeros(0, seqs.dtype)]
    for a, b in runs if pairs and freq.size else []:  # the second pass, when there are pairs to keep
        keys, q = seqs.extensions(node[a:b], state[a:b], n_nodes)
        rank = np.minimum(np.searchsorted(freq, keys), freq.size - 1)
        keep = (freq[rank] == keys) & seqs.has_next[q]
        nodes.append(rank[keep])
        states.append(q[keep] + 1)
    return freq, support, np.concatenate(nodes), np.concatenate(states)


def _count_runs(seqs: _ItemSequences, node: np.ndarray, state: np.ndarray, n_nodes: int,
                runs: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """The keys of the extensions of the pairs, run by run, and their counts (sorted by key)."""
    size = n_nodes * seqs.V
    if size <= _CHUNK:  # one dense count
        counts = np.zeros(size, dtype=np.int64)
        for a, b in runs:
            counts += np.bincount(seqs.extensions(node[a:b], state[a:b], n_nodes)[0], minlength=size)
        keys = np.flatnonzero(counts)
        return keys, counts[keys]
    counted = [np.unique(seqs.extensions(node[a:b], state[a:b], n_nodes)[0], return_counts=True)
               for a, b in runs]
    keys, inverse = np.unique(np.concatenate([u for u, _ in counted]), return_inverse=True)
    return keys, np.bincount(inverse, weights=np.concatenate([c for _, c in counted])).astype(np.int64)


def _batches(seqs: _ItemSequences, ids: np.ndarray, node: np.ndarray,
             state: np.ndarray) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Split the patterns ``ids`` (with their pairs) into runs of patterns with about ``_CHUNK`` suffix
    entries each: ``(ids, node, state)`` per run, ``node`` indexing the run's ``ids``. A run of
    patterns without pairs (each ends every sequence that holds it) has nothing to extend: dropped."""
    cuts = _runs(np.bincount(node, weights=seqs.end[state] - state, minlength=ids.size), _CHUNK)
    if cuts.size == 2:
        return [(ids, node, state)]
    out = []
    for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True):
        sel = (node >= a) & (node < b)
        if sel.any():
            out.append((ids[a:b], node[sel] - a, state[sel]))
    return out


def _frequent_item_sequences(seqs: _ItemSequences, sigma: int, limit: float) -> list[tuple[object, int]]:
    """:func:`frequent_patterns` on sequences of single items (PrefixSpan's setting), in batches.

    A pattern keeps one ``(pattern, state)`` pair per instance that contains it, ``state`` being the
    position right after its greedy earliest match (a pseudo-projected database). The extensions of a
    whole batch of patterns are counted at once: each pair contributes the distinct items of its
    suffix, keyed ``pattern * V + item``, and one count over the keys gives every support. The frequent
    extensions form the next batch -- on the data of the benchmarks, a batch is a whole level -- split
    so that no batch scans much more than ``_CHUNK`` entries; batches are grown depth first.
    """
    single = [frozenset((v,)) for v in seqs.vocab.tolist()]
    patterns: list[tuple] = [()]  # by id; id 0 is the empty pattern, held by every non-empty instance
    grown: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (parent id, item, support) per batch
    root = (np.zeros(1, np.int64), np.zeros(seqs.starts.size, np.int64), seqs.starts)
    stack = [root] if seqs.starts.size else []
    while stack:
        ids, node, state = stack.pop()
        more = len(patterns[ids[0]]) + 1 < limit  # whether the extensions are extended in turn
        freq, support, node, state = _grow(seqs, node, state, ids.size, sigma, pairs=more)
        if freq.size == 0:
            continue
        parent, item = ids[freq // seqs.V], freq % seqs.V
        new = np.arange(len(patterns), len(patterns) + freq.size)
        patterns.extend([patterns[a] + (single[e],)
                         for a, e in zip(parent.tolist(), item.tolist(), strict=True)])
        grown.append((parent, item, support))
        if more and node.size:
            stack.extend(_batches(seqs, new, node, state))
    if not grown:
        return []
    parent, item, support = (np.concatenate(a) for a in zip(*grown, strict=True))
    order = _preorder(parent, item, np.fromiter(map(len, patterns[1:]), np.int64, parent.size))
    supports = support.tolist()
    return [(patterns[i + 1], supports[i]) for i in order.tolist()]


def _preorder(parent: np.ndarray, item: np.ndarray, size: np.ndarray) -> np.ndarray:
    """The order of the reverse search of :func:`_frequent_search` over the patterns ``1, 2, ...``
    (pattern ``k + 1`` is ``parent[k]`` extended by ``item[k]``, of ``size[k]`` items).

    On sequences of single items that order is lexicographic in the items, a prefix first: sort the
    item codes padded with -1.
    """
    codes = np.full((parent.size + 1, int(size.max())), -1, dtype=np.int64)
    for d in range(1, codes.shape[1] + 1):  # parents have one item less: fill level by level
        k = np.flatnonzero(size == d)
        codes[k + 1] = codes[parent[k]]
        codes[k + 1, d - 1] = item[k]
    return np.lexsort(codes[1:].T[::-1])


# --------------------------------------------------------------------------------------------------
# miners


def frequent_patterns(data: Sequence, min_support: int | float, *,
                      max_size: int | None = None) -> list[tuple[object, int]]:
    """All patterns with support at least ``min_support`` (Problem 2), by pruned reverse search.

    Parameters
    ----------
    data : list of itemsets or list of itemset sequences (or of graphs, dispatched to ``graphs``)
    min_support : int or float
        An ``int`` is a count of instances (>= 1); a ``float`` in (0, 1] is a fraction of
        ``len(data)``, rounded up to a count.
    max_size : int, optional
        The largest number of items in a pattern (unbounded when None).

    Returns
    -------
    list of (pattern, support)
        Each non-empty frequent pattern once (itemsets as frozensets, sequences as tuples of non-empty
        frozensets), with its support as a count of instances, in depth-first order of the
        reverse-search tree (a node's leaf children, those of size ``max_size``, come right after it).
    """
    if isinstance(data, Sequence) and len(data) and _is_graph(data[0]):
        from structtorch.mining import graphs

        return graphs.frequent_patterns(data, min_support, max_size=max_size)
    arrays = _arrays(data)
    kind, seq_len, set_len, items = arrays
    sigma = _check_support("min_support", min_support, seq_len.size)
    limit = _check_max_size(max_size)
    if kind == "sequences" and set_len.max(initial=0) <= 1:
        return _frequent_item_sequences(_ItemSequences(seq_len, set_len, items), sigma, limit)
    return _frequent_search(_Encoded(*arrays), sigma, limit)


def _frequent_search(enc: _Encoded, sigma: int, limit: float) -> list[tuple[object, int]]:
    """:func:`frequent_patterns` by depth-first reverse search over the position masks (any data)."""
    out: list[tuple[object, int]] = []
    stack: list[tuple[_Node, int]] = [(_root(enc), 0)]
    while stack:
        node, support = stack.pop()
        if node.reportable:
            out.append((_decode(enc, node.pattern), support))
        if node.size >= limit:
            continue
        kids: list[tuple[_Node, int]] = []
        if _can_append(enc, node):
            c = node.child(enc, None)
            count = int(enc.support(c.M).sum())
            if count >= sigma:
                kids.append((c, count))
        _, items = enc.extension_pairs(node.M, node.top)
        counts = np.bincount(items, minlength=enc.V)
        for e in np.flatnonzero(counts >= sigma).tolist():
            if node.size + 1 >= limit:  # a leaf: its support is known, no need for its positions
                pattern = node.pattern[:-1] + (node.pattern[-1] + (e,),)
                out.append((_decode(enc, pattern), int(counts[e])))
            else:
                kids.append((node.child(enc, e), int(counts[e])))
        stack.extend(reversed(kids))
    return out


def best_patterns(data: Sequence, y: object, weights: object, *, top_k: int = 1,
                  max_size: int | None = None,
                  min_support: int | float = 1) -> list[tuple[object, int, float]]:
    """The ``top_k`` weak learners ``(t, d)`` of largest gain (the boosting subproblem, Problem 1).

    ``gain(t, d) = sum_n w_n y_n h(x_n; (t, d))`` with the stump ``h = d`` if ``t <= x_n`` else ``-d``
    (Def. 5). Search: a greedy descent (best single-item extension from the best singleton) gives an
    initial lower bound; then a best-first search ordered by Theorem 2's bound ``mu`` (which bounds
    every superset, erratum 4) pops nodes until the best remaining bound cannot beat the current
    ``top_k``-th gain. Exact.

    Parameters
    ----------
    data : list of itemsets or list of itemset sequences (graphs are dispatched to ``graphs``)
    y : (N,) array-like of -1 / +1
    weights : (N,) array-like, finite and >= 0 (the boosting weights lambda)
    top_k : int
        How many (pattern, direction) pairs to return; one direction per pattern (the better one).
    max_size : int, optional
        The largest number of items in a pattern (unbounded when None).
    min_support : int or float
        Patterns must occur in at least this many instances (count) or this fraction of them; the
        default 1 keeps the search finite (patterns that occur nowhere all share one constant gain).

    Returns
    -------
    list of (pattern, direction, gain)
        Sorted by decreasing gain; ``direction`` is +1 or -1. Fewer than ``top_k`` when fewer patterns
        qualify.
    """
    if isinstance(data, Sequence) and len(data) and _is_graph(data[0]):
        from structtorch.mining import graphs

        return graphs.best_patterns(data, y, weights, top_k=top_k, max_size=max_size, min_support=min_support)
    enc = _encode(data)
    yy, ww = _check_labels(y, weights, enc.N)
    if isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral) or top_k < 1:
        raise ValueError(f"top_k must be an int >= 1, got {top_k!r}")
    sigma = _check_support("min_support", min_support, enc.N)
    limit = _check_max_size(max_size)
    wpos = np.where(yy > 0, ww, 0.0)
    wneg = np.where(yy < 0, ww, 0.0)
    total = float((ww * yy).sum())

    best: list[tuple[float, int, tuple]] = []  # min-heap of (gain, -tiebreak, pattern)
    seen: dict[tuple, int] = {}
    tick = itertools.count()

    def threshold() -> float:
        return best[0][0] if len(best) >= top_k else -math.inf

    def offer(pattern: tuple, g_plus: float) -> None:
        if pattern in seen:
            return
        d = 1 if g_plus >= 0 else -1
        g = d * g_plus
        if len(best) < top_k:
            heapq.heappush(best, (g, -next(tick), pattern))
        elif g > best[0][0]:
            heapq.heapreplace(best, (g, -next(tick), pattern))
        else:
            return
        seen[pattern] = d

    def item_children(node: _Node) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Items with enough support, and the bound mu and the gain g(+1) of each extension."""
        rows, items = enc.extension_pairs(node.M, node.top)
        cnt = np.bincount(items, minlength=enc.V)
        sp = np.bincount(items, weights=wpos[rows], minlength=enc.V)
        sn = np.bincount(items, weights=wneg[rows], minlength=enc.V)
        ok = np.flatnonzero(cnt >= sigma)
        mu = np.maximum(2 * sp[ok] - total, 2 * sn[ok] + total)
        return ok, mu, 2 * (sp[ok] - sn[ok]) - total

    def bound(M: np.ndarray) -> tuple[int, float]:
        s = enc.support(M)
        return int(s.sum()), max(2 * float(wpos[s].sum()) - total, 2 * float(wneg[s].sum()) + total)

    # greedy lower bound: follow the best single-item extension
    node = _root(enc)
    while node.size < limit:
        ok, mu, gp = item_children(node)
        if ok.size == 0:
            break
        i = int(np.argmax(np.abs(gp)))
        node = node.child(enc, int(ok[i]))
        offer(node.pattern, float(gp[i]))

    # best-first search on mu; children are materialized when popped
    root = _root(enc)
    heap: list[tuple[float, int, _Node, int | None]] = [(-math.inf, next(tick), root, -1)]
    while heap:
        negmu, _, par, e = heapq.heappop(heap)
        if -negmu <= threshold():
            break
        node = par if e == -1 else par.child(enc, e)
        if node.size >= limit:
            continue
        ok, mu, gp = item_children(node)
        for e2, m, g in zip(ok.tolist(), mu.tolist(), gp.tolist(), strict=True):
            offer(node.pattern[:-1] + (node.pattern[-1] + (e2,),), g)
            if node.size + 1 < limit and m > threshold():
                heapq.heappush(heap, (-m, next(tick), node, e2))
        if _can_append(enc, node):
            c = node.child(enc, None)
            count, m = bound(c.M)
            if count >= sigma and m > threshold():
                heapq.heappush(heap, (-m, next(tick), c, -1))
    ranked = sorted(best, key=lambda t: (-t[0], -t[1]))
    return [(_decode(enc, p), seen[p], float(g)) for g, _, p in ranked]
