"""Distributions over structures: linear-chain labelings and semi-Markov segmentations.

:class:`ChainDistribution` and :class:`SemiMarkovDistribution` hold one batch of potentials, checked
once at construction (``check_chain`` / ``check_semimarkov``), and compute on first use, then cache:

* ``argmax`` / ``max``: the best structure and its score (Viterbi; the score's gradient is the
  indicator of the structure);
* ``log_partition`` (B,): log of the sum of exp(score) over all structures;
* ``marginals``: expectations of the structure's indicator features, the gradient of the
  log-partition (chain: node (B, T, N) and ``edge_marginals`` (B, T-1, N, N); semi-Markov: a
  :class:`SegmentMarginals`);
* ``entropy`` (B,): the exact Shannon entropy of p(y) = exp(score(y) - logZ), in nats;
* ``log_prob(structure)`` (B,), ``sample(n)`` (forward filtering, backward sampling) and
  ``kbest(k)`` (the k highest-scoring distinct structures).

Float results are differentiable w.r.t. the potentials (samples, ``argmax`` and the structures of
``kbest`` are discrete), in the potentials' dtype. As everywhere in structtorch, on CPU they are
computed in float64 and rounded once. float16/bfloat16 potentials are widened at construction and
results come back in their dtype (or the promoted one beside float32/float64 potentials), as
:func:`structtorch._precision.mixed_precision` does for the functions; autocast is off inside.

The entropy is logZ - <marginals, potentials>: exact, but its absolute rounding error grows with
the magnitude of the scores (about 1e-16 times the largest |score|, in float64).

Results are cached per object and per autograd mode (grad enabled or not, inference mode or not):
build a new distribution for every forward pass when training (a cached result's graph is freed by
its first ``backward``).

Conventions for degenerate rows:

* a zero-length row has exactly one structure, the empty one: log-partition 0, max 0, entropy 0,
  ``log_prob`` 0, samples and argmax all -1 (no starts);
* an infeasible row (every structure scores -inf) has log-partition and max -inf, ``log_prob``
  -inf for any structure, entropy 0 (by convention, NaN-free, with zero gradients), zero
  marginals, samples and argmax all -1 (no starts), and its k-best scores are all -inf.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch
from torch import Tensor

from ._checks import LengthsLike, cast_checked, check_generator, check_int, check_labels
from ._numerics import NEG_INF, accumulate
from ._precision import _no_autocast, map_tensors, widen
from .chain import _ops as _chain_ops
from .chain import _torch as _chain_torch
from .chain.layout import Chain, check_chain
from .chain.linear import _path_score, _score_paths, _viterbi_path, kbest, path_score
from .chain.sampling import sample_chain
from .lossaug.chain import chain_loss_augmented
from .lossaug.semimarkov import segmentation_loss_augmented
from .lossaug.spec import HLike
from .semimarkov import _ops as _sm_ops
from .semimarkov import _torch as _sm_torch
from .semimarkov._torch import POTENTIALS as _SM_POTENTIALS
from .semimarkov._torch import guard as _sm_guard
from .semimarkov.kbest import kbest_segmentations
from .semimarkov.layout import SemiMarkov, check_segmentation, check_semimarkov, semimarkov_score
from .semimarkov.plif import SegmentPLiF
from .semimarkov.sampling import sample_segmentations

__all__ = ["ChainDistribution", "SemiMarkovDistribution", "SegmentMarginals"]



def _node(x: Tensor, create_graph: bool) -> Tensor:
    """A distinct autograd node for ``x``: a view connected to ``x`` when the graph is kept and ``x``
    requires grad, else a fresh leaf."""
    if create_graph and x.requires_grad:
        return x.view(x.shape)
    return x.detach().clone().requires_grad_()


def _logz_and_grads(fn: Callable[..., Tensor], parts: Sequence[Tensor]) -> tuple[Tensor, list[Tensor]]:
    """``fn(*parts)`` (a (B,) log-partition) and its gradients w.r.t. every part (the marginals),
    differentiable w.r.t. the parts when grad mode is on and one of them requires grad."""
    create_graph = torch.is_grad_enabled() and any(p.requires_grad for p in parts)
    context = torch.enable_grad() if create_graph else torch.inference_mode(False)
    with context, torch.enable_grad():
        nodes = [_node(p, create_graph) for p in parts]
        logz = fn(*nodes)
        total = torch.where(torch.isfinite(logz.detach()), logz, 0.0).sum()
        grads = torch.autograd.grad(total, nodes, create_graph=create_graph, allow_unused=True)
    grads = [torch.zeros_like(n) if g is None else g for g, n in zip(grads, nodes, strict=True)]
    if not create_graph:
        logz, grads = logz.detach(), [g.detach() for g in grads]
    return logz, grads


def _entropy(logz: Tensor, grads: Sequence[Tensor], parts: Sequence[Tensor]) -> Tensor:
    """(B,) logZ - <marginals, potentials>, with -inf potentials (marginal 0) left out, and 0 on
    rows without a feasible structure."""
    inner = logz.new_zeros(logz.shape)
    for mu, theta in zip(grads, parts, strict=True):
        theta = accumulate(theta)
        safe = torch.where(theta == NEG_INF, 0.0, theta)
        inner = inner + (accumulate(mu) * safe).flatten(1).sum(1)  # B = 0 too
    feasible = logz > NEG_INF
    return torch.where(feasible, logz - torch.where(feasible, inner, 0.0), 0.0)


class _StructureDistribution:
    """Shared machinery: the result dtype, autocast off, and the cache."""

    def __init__(self, device: torch.device, result: torch.dtype | None) -> None:
        self._device = device
        self._result = result
        self._cache: dict[tuple, Any] = {}

    def _narrow(self, t: Tensor) -> Tensor:
        if self._result is None or not t.is_floating_point() or t.dtype == self._result:
            return t
        return cast_checked(t, self._result, "a result of the distribution", "the potentials")

    def _run(self, name: str | None, fn: Callable[[], Any]) -> Any:
        """``fn()`` with autocast off, floating results in the result dtype; cached under ``name``
        (None: not cached) and the autograd mode."""
        if name is None:  # not cached (and traceable by torch.compile: no inference-mode query)
            with _no_autocast(self._device.type):
                return map_tensors(fn(), self._narrow)
        key = (name, torch.is_grad_enabled(), torch.is_inference_mode_enabled())
        if key not in self._cache:
            with _no_autocast(self._device.type):
                self._cache[key] = map_tensors(fn(), self._narrow)
        return self._cache[key]

    def _internal(self, name: str, fn: Callable[[], Any]) -> Any:
        """``fn()`` cached under ``name`` and the autograd mode, in the compute dtype."""
        key = ("_" + name, torch.is_grad_enabled(), torch.is_inference_mode_enabled())
        if key not in self._cache:
            with _no_autocast(self._device.type):
                self._cache[key] = fn()
        return self._cache[key]


class ChainDistribution(_StructureDistribution):
    """The distribution p(y) = exp(score(y) - logZ) over the labelings y of each linear chain.

    Parameters
    ----------
    unary : Tensor (B, T, N)
        Label scores per position.
    transitions : Tensor (N, N) or (B, T-1, N, N)
        ``transitions[..., i, j]`` scores label i at t followed by label j at t + 1.
    start, end : Tensor (N,) or (B, N), optional
        Scores of the first and the last label.
    lengths : Tensor (B,), optional
        Integer lengths in [0, T]; None means all T.

    Notes
    -----
    Potentials may be -inf (forbidden); NaN and +inf are rejected, as by :func:`structtorch.viterbi`.
    See the module docstring for dtypes, caching and the conventions on empty and infeasible rows.

    Examples
    --------
    >>> dist = ChainDistribution(torch.randn(2, 5, 3), torch.randn(3, 3))
    >>> dist.entropy.shape, dist.sample(4).shape
    (torch.Size([2]), torch.Size([4, 2, 5]))
    """

    def __init__(
        self,
        unary: Tensor,
        transitions: Tensor,
        *,
        start: Tensor | None = None,
        end: Tensor | None = None,
        lengths: LengthsLike = None,
    ) -> None:
        (unary, transitions, start, end), result = widen((unary, transitions, start, end))
        self._chain = check_chain(unary, transitions, start, end, lengths)
        super().__init__(self._chain.unary.device, result)

    @property
    def lengths(self) -> Tensor:
        """Tensor (B,) int64: the length of each chain."""
        return self._chain.lengths

    @property
    def num_labels(self) -> int:
        """N, the number of labels."""
        return self._chain.shape[2]

    def __repr__(self) -> str:
        B, T, N = self._chain.shape
        return f"ChainDistribution(B={B}, T={T}, N={N})"

    def _logz64(self) -> Tensor:
        """(B,) log-partition in the accumulation dtype (float64 on CPU), differentiable."""
        def compute() -> Tensor:
            chain = self._chain
            return _chain_torch.guard(chain, _chain_ops.log_partition(chain), "the log-partition")
        return self._internal("logz", compute)

    @property
    def log_partition(self) -> Tensor:
        """Tensor (B,): log of the sum of exp(score) over all labelings; 0 for zero-length rows, -inf
        for infeasible ones. Its gradient is the marginals (as :func:`structtorch.log_partition`)."""
        return self._run("log_partition", lambda: cast_checked(
            self._logz64(), self._chain.unary.dtype, "the log-partition", self._chain.potentials))

    @property
    def argmax(self) -> Tensor:
        """Tensor (B, T) int64: the best labeling, -1 beyond each length and on infeasible rows (ties
        as :func:`structtorch.viterbi`)."""
        return self._run("argmax", lambda: _viterbi_path(self._chain))

    @property
    def max(self) -> Tensor:
        """Tensor (B,): the best score (0 for zero-length rows, -inf for infeasible ones); its gradient
        is the indicator of ``argmax``."""
        return self._run("max", lambda: _score_paths(self._chain, self.argmax))

    def _expectations(self) -> tuple[Tensor, list[Tensor], list[Tensor]]:
        """(logZ, marginals, potentials): logZ (B,) and d logZ / d (unary (B, T, N), per-position
        transitions (B, T-1, N, N), start (B, N), end (B, N)), in the accumulation dtype."""
        def compute():
            chain = _chain_torch.accumulating(self._chain)
            B, T, N = chain.shape
            trans = chain.transitions
            if chain.shared:
                trans = trans.expand(B, max(T - 1, 0), N, N)
            parts = [chain.unary, trans, chain.start, chain.end]

            def logz(u: Tensor, a: Tensor, s: Tensor, e: Tensor) -> Tensor:
                return _chain_ops.log_partition(Chain(u, a.contiguous(), s, e, chain.lengths.clone()))

            value, grads = _logz_and_grads(logz, parts)
            return value, grads, parts
        return self._internal("expectations", compute)

    @property
    def marginals(self) -> Tensor:
        """Tensor (B, T, N): node marginals p(y_t = j), 0 beyond each length and on infeasible rows;
        differentiable when a potential requires grad."""
        return self._run("marginals", lambda: self._expectations()[1][0].to(self._chain.unary.dtype))

    @property
    def edge_marginals(self) -> Tensor:
        """Tensor (B, T-1, N, N): ``edge_marginals[b, t, i, j]`` = p(y_t = i, y_{t+1} = j), 0 for
        steps beyond each length and on infeasible rows; differentiable. Summed over t (and b) it is
        the gradient of the log-partition w.r.t. shared (N, N) transitions."""
        return self._run("edge_marginals", lambda: self._expectations()[1][1].to(self._chain.unary.dtype))

    @property
    def entropy(self) -> Tensor:
        """Tensor (B,): the exact entropy -sum_y p(y) log p(y) in nats, computed as
        logZ - <marginals, potentials> (-inf potentials, whose marginals are 0, left out) in the
        accumulation dtype; 0 for zero-length and infeasible rows. Differentiable (double backward
        through the log-partition)."""
        def compute() -> Tensor:
            logz, grads, parts = self._expectations()
            return _entropy(logz, grads, parts).to(self._chain.unary.dtype)
        return self._run("entropy", compute)

    def log_prob(self, structure: Tensor) -> Tensor:
        """Log-probability of given labelings.

        Parameters
        ----------
        structure : Tensor (B, T) integer
            Labels in [0, N) within each length (entries beyond are ignored).

        Returns
        -------
        Tensor (B,)
            score(structure) - logZ, taken in the accumulation dtype; -inf for a labeling that uses a
            -inf potential and on infeasible rows, 0 on zero-length rows. Differentiable.
        """
        chain = self._chain
        labels = check_labels(structure, chain.mask(), chain.shape[2], name="structure")

        def compute() -> Tensor:
            logz = self._logz64()
            score = _path_score(chain, labels)
            out = torch.where(logz == NEG_INF, NEG_INF, score - logz.to(score.dtype))
            return cast_checked(out, chain.unary.dtype, "the log-probability", chain.potentials)
        return self._run(None, compute)

    def sample(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        """``n`` labelings per chain drawn from the distribution: (n, B, T) int64, -1 beyond each
        length and on infeasible rows (see :func:`structtorch.sample`)."""
        n = check_int("n", n, 1)
        check_generator(generator)
        return self._run(None, lambda: sample_chain(self._chain, n, generator))

    def score(self, structure: Tensor) -> Tensor:
        """Scores (B,) of given labelings (B, T), as :func:`structtorch.path_score`."""
        c = self._chain
        return self._run(None, lambda: path_score(c.unary, c.transitions, structure, start=c.start, end=c.end,
                                                  lengths=c.lengths))

    def loss_augmented(self, target: Tensor, *, h: HLike = None, rescaling: str = "margin",
                       weights: Tensor | None = None, cost: Tensor | None = None,
                       algorithm: str = "auto") -> tuple[Tensor, Tensor, Tensor]:
        """The most violating labeling for ``target`` (B, T): ``(value (B,), path (B, T), hamming
        (B,))`` as :func:`structtorch.loss_augmented` returns them (the value's gradient is
        the structured hinge's subgradient). :func:`structtorch.structured_hinge` takes this
        distribution as its structure."""
        return self._run(None, lambda: chain_loss_augmented(
            self._chain, target, h=h, rescaling=rescaling, weights=weights, cost=cost, algorithm=algorithm))

    def kbest(self, k: int) -> tuple[Tensor, Tensor]:
        """The k highest-scoring distinct labelings (see :func:`structtorch.kbest`).

        Parameters
        ----------
        k : int
            >= 1.

        Returns
        -------
        scores : Tensor (B, k)
            Descending; -inf where fewer than k feasible labelings exist. Differentiable (the gradient
            of each is the indicator of its labeling).
        paths : Tensor (B, k, T) int64
            -1 beyond each length and in the missing entries.
        """
        k = check_int("k", k, 1)
        c = self._chain
        return self._run(None, lambda: kbest(c.unary, c.transitions, k, start=c.start, end=c.end,
                                             lengths=c.lengths))


class SegmentMarginals(NamedTuple):
    """Marginals of a :class:`SemiMarkovDistribution`: the gradients of its log-partition w.r.t. the
    segment potentials, i.e. the probabilities (expected counts) of the structure's parts.

    Attributes
    ----------
    positions : Tensor (B, T, N)
        p(position t lies in a segment of label n) = d logZ / d content.
    segments : Tensor (B, T, S, N)
        p(the segment [e-d, e) with label n is part of the segmentation) at ``[b, e-1, d-1, n]``, the
        indexing of ``segment_scores`` (= d logZ / d segment_scores), with S = min(max_len, T) (1 when
        T = 0). Its sum over ends, ``segments.sum(1)`` (B, S, N), is the expected number of segments
        of each length and label (= d logZ / d length_scores); its sum over lengths,
        ``segments.sum(2)`` (B, T, N), is p(a segment of label n ends at t) (= d logZ / d boundary).
    transitions : Tensor (B, N, N)
        Expected number of segments of label m followed by one of label n, per row (summed over rows
        it is d logZ.sum() / d transitions).
    start, end : Tensor (B, N)
        p(the first / last segment has label n).

    All are 0 beyond each length and on infeasible rows.
    """

    positions: Tensor
    segments: Tensor
    transitions: Tensor
    start: Tensor
    end: Tensor


class SemiMarkovDistribution(_StructureDistribution):
    """The distribution p(y) = exp(score(y) - logZ) over the segmentations y of each sequence.

    A segmentation splits [0, L) into segments [s, e) of lengths 1 <= e - s <= max_len with labels n;
    its score is that of :mod:`structtorch.semimarkov.layout` (content sums, length, boundary and
    segment scores, transitions between consecutive segments, start and end).

    Parameters
    ----------
    content : Tensor (B, T, N)
        Per-position label scores, summed over each segment.
    transitions : Tensor (N, N)
        ``transitions[m, n]`` scores a segment of label m followed by one of label n.
    max_len : int
        S, the longest segment (>= 1).
    length_scores : Tensor (S, N) or (B, S, N), optional
        ``length_scores[d-1, n]`` scores a segment of length d and label n.
    boundary : Tensor (B, T, N), optional
        ``boundary[b, e-1, n]`` scores a segment of label n ending at e.
    segment_scores : Tensor (B, T, S, N), optional
        ``segment_scores[b, e-1, d-1, n]``: any further score of the segment [e-d, e).
    start, end : Tensor (N,) or (B, N), optional
        Scores of the first and the last segment's label.
    lengths : Tensor (B,), optional
        Integer lengths in [0, T]; None means all T.

    Notes
    -----
    Structures are ``(labels, starts)`` pairs as returned by :func:`structtorch.semimarkov_viterbi`:
    labels (B, T) integer, starts (B, T) bool (True where a segment begins). See the module
    docstring for dtypes, caching and the conventions on empty and infeasible rows.

    ``log_partition``, ``argmax``, ``max`` and ``log_prob`` run the compiled kernels on CPU (O(B T S N
    + B T N^2)); ``marginals`` and ``entropy`` differentiate the PyTorch reference recursion in
    float64 (a loop over segment ends), with per-row transitions so that every row gets its own
    expected transition counts; ``sample`` and ``kbest`` are batched PyTorch loops over segment ends.
    """

    def __init__(
        self,
        content: Tensor,
        transitions: Tensor,
        *,
        max_len: int,
        length_scores: Tensor | None = None,
        boundary: Tensor | None = None,
        segment_scores: Tensor | None = None,
        start: Tensor | None = None,
        end: Tensor | None = None,
        lengths: LengthsLike = None,
        segment_plif: SegmentPLiF | None = None,
    ) -> None:
        tensors, result = widen((content, transitions, length_scores, boundary, segment_scores, start, end,
                                  segment_plif))
        content, transitions, length_scores, boundary, segment_scores, start, end, segment_plif = tensors
        self._sm = check_semimarkov(content, transitions, max_len, length_scores, boundary, segment_scores,
                                    start, end, lengths, segment_plif)
        self.max_len = int(max_len)
        super().__init__(self._sm.content.device, result)

    @property
    def lengths(self) -> Tensor:
        """Tensor (B,) int64: the length of each sequence."""
        return self._sm.lengths

    @property
    def num_labels(self) -> int:
        """N, the number of labels."""
        return self._sm.shape[3]

    def __repr__(self) -> str:
        B, T, _, N = self._sm.shape
        return f"SemiMarkovDistribution(B={B}, T={T}, N={N}, max_len={self.max_len})"

    def _no_plif(self, what: str) -> None:
        if self._sm.segment_plif is not None:
            raise NotImplementedError(f"{what} with a segment_plif is not supported yet (log_partition, max, "
                                      "argmax, log_prob, score and loss_augmented are)")

    @property
    def _dtype(self) -> torch.dtype:
        return self._sm.content.dtype

    def _logz64(self) -> Tensor:
        """(B,) log-partition in float64 (the kernels' precision), differentiable."""
        def compute() -> Tensor:
            sm = self._sm
            if sm.shape[1] == 0:
                return accumulate(sm.content.sum(dim=(1, 2)))  # zeros, connected to the graph
            return _sm_guard(sm, _sm_ops.log_partition(sm), "the log-partition")
        return self._internal("logz", compute)

    @property
    def log_partition(self) -> Tensor:
        """Tensor (B,): log of the sum of exp(score) over all segmentations; 0 for zero-length rows,
        -inf for infeasible ones (as :func:`structtorch.semimarkov_log_partition`)."""
        return self._run("log_partition", lambda: cast_checked(
            self._logz64(), self._dtype, "the log-partition", _SM_POTENTIALS))

    def _viterbi(self) -> tuple[Tensor, Tensor, Tensor]:
        return self._internal("viterbi", lambda: _sm_ops.viterbi(self._sm))

    @property
    def argmax(self) -> tuple[Tensor, Tensor]:
        """The best segmentation: labels (B, T) int64 (-1 beyond each length and on infeasible rows)
        and starts (B, T) bool, as :func:`structtorch.semimarkov_viterbi` returns them."""
        return self._run("argmax", lambda: self._viterbi()[1:])

    @property
    def max(self) -> Tensor:
        """Tensor (B,): the best score (0 for zero-length rows, -inf for infeasible ones); its gradient
        is the indicator of ``argmax``."""
        def compute() -> Tensor:
            best, labels, starts = self._viterbi()
            score = semimarkov_score(self._sm, labels, starts).to(self._dtype)
            return _sm_guard(self._sm, torch.where(best > NEG_INF, score, NEG_INF), "the Viterbi score")
        return self._run("max", compute)

    def _expectations(self, segments: bool) -> tuple[Tensor, list[Tensor], list[Tensor]]:
        """(logZ, marginals, potentials) with potentials [content, length_scores, boundary,
        transitions per row (B, N, N), start, end] and, with ``segments`` or given segment scores,
        segment_scores (zeros when not given) last; float64 reference recursion."""
        def compute():
            sm = self._sm
            B, T, S, N = sm.shape
            trans = sm.transitions.expand(B, N, N)
            parts = [sm.content, sm.length_scores, sm.boundary, trans, sm.start, sm.end]
            if sm.segment_scores is not None:
                parts.append(sm.segment_scores)
            elif segments:
                parts.append(sm.content.new_zeros(B, T, S, N))
            parts = [accumulate(x) for x in parts]

            def logz(content, length, boundary, trans, start, end, segment=None):
                model = SemiMarkov(content, trans, length, boundary, segment, start, end, sm.lengths.clone())
                return _sm_torch.log_partition(model)

            value, grads = _logz_and_grads(logz, parts)
            return value, grads, parts
        key = "expectations" if segments or self._sm.segment_scores is not None else "expectations_nosegments"
        return self._internal(key, compute)

    @property
    def marginals(self) -> SegmentMarginals:
        """The :class:`SegmentMarginals` (positions, segments, transitions, start, end): gradients of
        the log-partition w.r.t. the segment potentials, per row; differentiable when a potential
        requires grad. Memory O(B T S N) for ``segments`` (S = min(max_len, T)); ``entropy`` does not
        build it unless ``segment_scores`` were given."""
        self._no_plif("marginals")
        def compute() -> SegmentMarginals:
            _, g, _ = self._expectations(segments=True)
            content, length, boundary, trans, start, end, segment = (x.to(self._dtype) for x in g)
            return SegmentMarginals(content, segment, trans, start, end)
        return self._run("marginals", compute)

    @property
    def entropy(self) -> Tensor:
        """Tensor (B,): the exact entropy -sum_y p(y) log p(y) in nats, computed as
        logZ - <marginals, potentials> (-inf potentials left out) in float64; 0 for zero-length and
        infeasible rows. Differentiable."""
        self._no_plif("entropy")
        def compute() -> Tensor:
            logz, grads, parts = self._expectations(segments=False)
            return _entropy(logz, grads, parts).to(self._dtype)
        return self._run("entropy", compute)

    def _structure(self, structure: object) -> tuple[Tensor, Tensor]:
        """Validated (labels, starts) (B, T): labels in range (0 beyond each length), a start at
        position 0, one label per segment, no segment longer than max_len."""
        sm = self._sm
        B, T, S, N = sm.shape
        if not isinstance(structure, (tuple, list)) or len(structure) != 2:
            raise TypeError(f"structure must be a (labels, starts) pair of (B, T) = ({B}, {T}) tensors, "
                            f"got {type(structure).__name__}")
        return check_segmentation(*structure, sm)

    def log_prob(self, structure: tuple[Tensor, Tensor]) -> Tensor:
        """Log-probability of given segmentations.

        Parameters
        ----------
        structure : (labels, starts)
            labels : Tensor (B, T) integer, in [0, N) within each length, constant inside each
            segment; starts : Tensor (B, T) bool, True where a segment begins (position 0 always
            begins one; entries beyond each length are ignored). Segments are at most max_len long.

        Returns
        -------
        Tensor (B,)
            score(structure) - logZ in float64, cast once; -inf for a segmentation that uses a -inf
            potential and on infeasible rows, 0 on zero-length rows. Differentiable.
        """
        labels, starts = self._structure(structure)

        def compute() -> Tensor:
            logz = self._logz64()
            score = semimarkov_score(self._sm, labels, starts)
            out = torch.where(logz == NEG_INF, NEG_INF, score - logz.to(score.dtype))
            return cast_checked(out, self._dtype, "the log-probability", _SM_POTENTIALS)
        return self._run(None, compute)

    def sample(self, n: int, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """``n`` segmentations per sequence drawn from the distribution: ``(labels, starts)``, each
        (n, B, T) (see :func:`structtorch.semimarkov_sample`)."""
        self._no_plif("sample")
        n = check_int("n", n, 1)
        check_generator(generator)
        return self._run(None, lambda: sample_segmentations(self._sm, n, generator))

    def score(self, structure: tuple[Tensor, Tensor]) -> Tensor:
        """Scores (B,) of given segmentations ``(labels, starts)``, as
        :func:`structtorch.semimarkov_score`."""
        labels, starts = self._structure(structure)
        return self._run(None, lambda: semimarkov_score(self._sm, labels, starts))

    def loss_augmented(self, target: tuple[Tensor, Tensor], *, h: HLike = None, rescaling: str = "margin",
                       weights: Tensor | None = None, cost: Tensor | None = None,
                       algorithm: str = "auto") -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """The most violating segmentation for ``target`` = (labels, starts): ``(value (B,), labels
        (B, T), starts (B, T), hamming (B,))`` as :func:`structtorch.semimarkov_loss_augmented`
        returns them. ``cost`` is not supported for segmentations (a ValueError)."""
        if cost is not None:
            raise ValueError("cost is not supported for semi-Markov models (use h and weights)")
        if not isinstance(target, (tuple, list)) or len(target) != 2:
            raise TypeError("target must be a (labels, starts) pair of (B, T) tensors")
        return self._run(None, lambda: segmentation_loss_augmented(
            self._sm, target[0], target[1], h=h, rescaling=rescaling, weights=weights, algorithm=algorithm))

    def kbest(self, k: int) -> tuple[Tensor, Tensor, Tensor]:
        """The k highest-scoring distinct segmentations: ``(scores (B, k), labels (B, k, T), starts
        (B, k, T))`` (see :func:`structtorch.semimarkov_kbest`)."""
        self._no_plif("kbest")
        k = check_int("k", k, 1)
        return self._run(None, lambda: kbest_segmentations(self._sm, k))
