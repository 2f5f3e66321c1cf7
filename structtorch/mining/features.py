"""Mined patterns as precomputed binary features for structured models (Nowozin 2009, §4.5).

A pattern dictionary ``T`` (frequent patterns, or those an :class:`~structtorch.mining.LPBoost` model
selected) defines the feature map ``Phi_T(x) = [1[t <= x]]_{t in T}``. Structured models need it per
position or per node: :meth:`SubstructureFeatures.transform_windows` evaluates it on a sliding window
of an itemset sequence around each position (chain and semi-Markov models), and
:meth:`SubstructureFeatures.transform_neighbourhoods` on the r-hop neighbourhood of each node of a
labeled graph (``lp`` graph models). The outputs are ordinary tensors: they enter
``LinearChainPotentials`` (dense), ``SparseFeaturePotentials`` (through :meth:`to_ids`), the signals
or contents of ``HiddenSemiMarkovSVM``, or a linear map to ``lp`` unaries, with no change to
inference or training.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from structtorch.mining.sequences import _SETS, _check_itemset, _check_sequence, _is_graph, occurrence_matrix

__all__ = ["SubstructureFeatures"]


def _strip(entry: object) -> object:
    """A pattern from a pattern or from a miner's ``(pattern, support)`` / ``(pattern, d, gain)`` row."""
    if isinstance(entry, tuple) and len(entry) in (2, 3) and isinstance(entry[-1], numbers.Real) and (
            not isinstance(entry[0], numbers.Real)):
        return entry[0]
    return entry


def _kind(pattern: object) -> str:
    if isinstance(pattern, _SETS):
        return "sets"
    if _is_graph(pattern):
        return "graphs"
    return "sequences"


def _normalize(kind: str, pattern: object, name: str) -> tuple[object, object]:
    """(hashable key, pattern): itemsets as frozensets, sequences as tuples of frozensets (lists and
    sets are documented pattern forms); graphs keep their form, keyed by their labels and edges."""
    if kind == "sets":
        p = _check_itemset(name, pattern)
        return p, p
    if kind == "sequences":
        p = _check_sequence(name, pattern)
        return p, p
    from structtorch.mining.graphs import _as_graph  # networkx loads with graph patterns only

    g = _as_graph(pattern, name)
    return (tuple(g.labels), tuple(tuple(sorted(a.items())) for a in g.adj)), pattern


class SubstructureFeatures:
    """The binary feature map of a fixed pattern dictionary.

    Parameters
    ----------
    patterns : sequence
        Patterns of one kind: itemsets (sets or frozensets), itemset sequences (lists or tuples of
        sets) or graphs (DFS codes, ``(node_labels, edges, edge_labels)`` triples or networkx
        graphs). The rows returned by :func:`frequent_patterns` (``(pattern, support)``) and
        :func:`best_patterns` (``(pattern, direction, gain)``) are accepted as they are. Itemsets
        and sequences are stored as frozensets and tuples of frozensets; duplicates (equal after
        that, or graphs with equal labels and edges) are dropped, order kept.

    Attributes
    ----------
    patterns : list
    kind : {"sets", "sequences", "graphs"}

    Examples
    --------
    >>> from structtorch.mining import SubstructureFeatures, frequent_patterns
    >>> f = frozenset
    >>> data = [(f({1}), f({2})), (f({2}), f({1})), (f({1, 2}),)]
    >>> feats = SubstructureFeatures(frequent_patterns(data, 2))
    >>> feats.transform(data).shape
    torch.Size([3, 2])
    """

    def __init__(self, patterns: Sequence) -> None:
        if isinstance(patterns, (str, bytes)) or not isinstance(patterns, Sequence):
            raise TypeError(f"patterns must be a list of patterns, got {type(patterns).__name__}")
        if len(patterns) == 0:
            raise ValueError("patterns must be non-empty")
        stripped = [_strip(p) for p in patterns]
        kinds = {_kind(p) for p in stripped}
        if len(kinds) > 1:
            raise TypeError("patterns must be all of one kind (itemsets, sequences or graphs), "
                            f"got {sorted(kinds)}")
        self.kind = kinds.pop()
        unique: dict[object, object] = {}  # normalized key -> the pattern, first occurrence kept
        for k, p in enumerate(stripped):
            key, p = _normalize(self.kind, p, f"patterns[{k}]")
            unique.setdefault(key, p)
        self.patterns = list(unique.values())

    @classmethod
    def from_model(cls, model: Any) -> SubstructureFeatures:
        """The patterns a fitted :class:`~structtorch.mining.TCBoost` / ``LPBoost`` selected (all
        one-vs-one classifiers together for multiclass models)."""
        if not hasattr(model, "patterns_"):
            raise TypeError("model must be a fitted TCBoost or LPBoost (it has no patterns_)")
        multiclass = hasattr(model, "estimators_") and len(model.classes_) > 2
        groups = model.patterns_ if multiclass else [model.patterns_]
        return cls([t for group in groups for t, _ in group])

    def __len__(self) -> int:
        return len(self.patterns)

    def __repr__(self) -> str:
        return f"SubstructureFeatures({len(self)} {self.kind} patterns)"

    # ---------------------------------------------------------------------------------------------

    def _matrix(self, instances: Sequence) -> np.ndarray:
        return occurrence_matrix(self.patterns, instances)

    @staticmethod
    def _tensor(occ: np.ndarray, shape: tuple[int, ...], dtype: torch.dtype, sparse: bool) -> Tensor:
        dense = torch.from_numpy(np.ascontiguousarray(occ)).reshape(shape)
        if sparse:
            return dense.to_sparse().to(dtype)
        return dense.to(dtype)

    def transform(self, data: Sequence, *, dtype: torch.dtype = torch.float32,
                  sparse: bool = False) -> Tensor:
        """``Phi_T(x_n)`` for every instance.

        Parameters
        ----------
        data : list of instances of the patterns' kind
        dtype : torch.dtype
            Output dtype (``torch.bool`` for a mask).
        sparse : bool
            Return a ``torch.sparse_coo`` tensor.

        Returns
        -------
        Tensor ``(n, |T|)``, ``|T|`` the number of patterns
        """
        occ = self._matrix(data)
        return self._tensor(occ, occ.shape, dtype, sparse)

    def transform_windows(self, sequence_batch: Sequence, width: int, *, dtype: torch.dtype = torch.float32,
                          sparse: bool = False) -> Tensor:
        """The features of a window of ``width`` itemsets around each position.

        The window of position ``j`` covers positions ``j - (width - 1) // 2`` to ``j + width // 2``
        clipped to the sequence (so ``width = 1`` is the position alone). Sequence patterns are tested
        on the window as a sequence (temporal order inside the window counts); itemset patterns on the
        union of its itemsets (a bag of words around the position). All ``B T`` windows are matched in
        one vectorized pass.

        Parameters
        ----------
        sequence_batch : list of B itemset sequences
            Lengths may differ; T is the longest.
        width : int >= 1
        dtype, sparse
            As in :meth:`transform`.

        Returns
        -------
        Tensor ``(B, T, |T|)``
            Zero at padding positions ``j >= len(sequence_batch[b])``.
        """
        if self.kind == "graphs":
            raise TypeError("transform_windows needs itemset or sequence patterns; these are graphs "
                            "(use transform_neighbourhoods)")
        if isinstance(width, bool) or not isinstance(width, numbers.Integral) or width < 1:
            raise ValueError(f"width must be an int >= 1, got {width!r}")
        if isinstance(sequence_batch, (str, bytes)) or not isinstance(sequence_batch, Sequence) or (
                len(sequence_batch) == 0):
            raise ValueError("sequence_batch must be a non-empty list of itemset sequences")
        seqs = [_check_sequence(f"sequence_batch[{b}]", s) for b, s in enumerate(sequence_batch)]
        B, T = len(seqs), max(len(s) for s in seqs)
        if T == 0:
            return self._tensor(np.zeros((0, len(self))), (B, 0, len(self)), dtype, sparse)
        left, right = (width - 1) // 2, width // 2
        windows, where = [], []
        for b, s in enumerate(seqs):
            for j in range(len(s)):
                w = s[max(0, j - left):j + right + 1]
                windows.append(frozenset().union(*w) if self.kind == "sets" else w)
                where.append(b * T + j)
        occ = np.zeros((B * T, len(self)), dtype=bool)
        if windows:
            occ[where] = self._matrix(windows)
        return self._tensor(occ, (B, T, len(self)), dtype, sparse)

    def transform_neighbourhoods(self, graph: Any, radius: int, *, dtype: torch.dtype = torch.float32,
                                 sparse: bool = False) -> Tensor:
        """The features of each node's ``radius``-hop neighbourhood (the induced subgraph on the nodes
        within ``radius`` edges of it), for per-node inputs of ``lp`` graph models.

        Parameters
        ----------
        graph : (node_labels (V,), edges (E, 2), edge_labels (E,)) or networkx.Graph
        radius : int >= 0
        dtype, sparse
            As in :meth:`transform`.

        Returns
        -------
        Tensor ``(V, |T|)``
        """
        if self.kind != "graphs":
            raise TypeError(f"transform_neighbourhoods needs graph patterns; these are {self.kind}")
        if isinstance(radius, bool) or not isinstance(radius, numbers.Integral) or radius < 0:
            raise ValueError(f"radius must be an int >= 0, got {radius!r}")
        import scipy.sparse as sp

        from structtorch.mining.graphs import _as_graph

        g = _as_graph(graph, "graph")
        V = len(g.labels)
        rows = [u for u in range(V) for v in g.adj[u]]
        cols = [v for u in range(V) for v in g.adj[u]]
        A = sp.csr_matrix((np.ones(len(rows), dtype=np.int64), (rows, cols)), shape=(V, V))
        reach = sp.identity(V, dtype=np.int64, format="csr")
        step = (A + reach).astype(bool).astype(np.int64)
        for _ in range(radius):
            reach = (reach @ step).astype(bool).astype(np.int64)
        subgraphs = []
        for v in range(V):
            nodes = reach.indices[reach.indptr[v]:reach.indptr[v + 1]]
            pos = {int(u): k for k, u in enumerate(nodes.tolist())}
            edges = [(pos[u], pos[w], lab) for u in pos for w, lab in g.adj[u].items() if w in pos and u < w]
            subgraphs.append((np.asarray([g.labels[u] for u in pos], dtype=np.int64),
                              np.asarray([e[:2] for e in edges], dtype=np.int64).reshape(-1, 2),
                              np.asarray([e[2] for e in edges], dtype=np.int64)))
        occ = self._matrix(subgraphs)
        return self._tensor(occ, occ.shape, dtype, sparse)

    @staticmethod
    def to_ids(features: Tensor, *, offset: int = 0) -> Tensor:
        """Binary features ``(..., |T|)`` as padded active ids (..., K) int64 with -1 padding, the input of
        :class:`structtorch.SparseFeaturePotentials` (K is the most active features at one position;
        add ``offset`` to place them after other feature ids)."""
        if not isinstance(features, Tensor) or features.dim() < 1:
            raise TypeError("features must be a tensor of shape (..., |T|)")
        on = features.to_dense() != 0 if features.is_sparse else features != 0
        K = max(int(on.sum(-1).max()) if on.numel() else 0, 1)
        order = torch.sort(on.to(torch.int8), dim=-1, descending=True, stable=True).indices[..., :K]
        active = torch.gather(on, -1, order)
        return torch.where(active, order + offset, torch.full_like(order, -1))
