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


class _Encoded:
    """The instances as flat positions (``n * L + j``) with CSR item lists and inverted item lists."""

    def __init__(self, kind: str, instances: list) -> None:
        seqs = [(x,) for x in instances] if kind == "sets" else instances
        self.sequences = kind == "sequences"
        self.N = len(seqs)
        self.L = max(1, max(len(x) for x in seqs))
        vocab = sorted(set().union(*(e for x in seqs for e in x)))
        self.vocab = np.asarray(vocab, dtype=np.int64)
        self.V = len(vocab)
        index = {v: i for i, v in enumerate(vocab)}
        counts = np.zeros(self.N * self.L, dtype=np.int64)
        items: list[int] = []
        valid = np.zeros((self.N, self.L), dtype=bool)
        for n, x in enumerate(seqs):
            valid[n, :len(x)] = True
            for j, e in enumerate(x):
                counts[n * self.L + j] = len(e)
                items.extend(sorted(index[i] for i in e))
        self.valid = valid.reshape(-1)
        self.indptr = np.concatenate([[0], np.cumsum(counts)])
        self.items = np.asarray(items, dtype=np.int64)
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
    kind, instances = _check_data(data)
    if isinstance(patterns, (str, bytes)) or not isinstance(patterns, Sequence):
        raise TypeError(f"patterns must be a list of patterns, got {type(patterns).__name__}")
    enc = _Encoded(kind, instances)
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
    kind, instances = _check_data(data)
    sigma = _check_support("min_support", min_support, len(instances))
    limit = _check_max_size(max_size)
    enc = _Encoded(kind, instances)
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
    kind, instances = _check_data(data)
    yy, ww = _check_labels(y, weights, len(instances))
    if isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral) or top_k < 1:
        raise ValueError(f"top_k must be an int >= 1, got {top_k!r}")
    sigma = _check_support("min_support", min_support, len(instances))
    limit = _check_max_size(max_size)
    enc = _Encoded(kind, instances)
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
