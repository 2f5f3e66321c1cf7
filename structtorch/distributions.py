"""Distributions over structures: linear-chain labelings, semi-Markov segmentations, dependency trees
and labeled constituency trees.

:class:`ChainDistribution` and :class:`SemiMarkovDistribution` hold one batch of potentials, checked
once at construction (``check_chain`` / ``check_semimarkov``), and compute on first use, then cache.
They are thin: each property calls its structure's function on the validated type
(``viterbi_chain``, ``expectations_semimarkov``, ...: the public function of the same operation
without the checks), and only the cache, the result dtype and autocast live here.

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

from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import Tensor

from ._checks import LengthsLike, cast_checked, check_bool, check_generator, check_int, check_number
from ._expectations import cross_entropy, entropy, log_prob, logz_and_grads
from ._numerics import accumulate
from ._precision import _no_autocast, map_tensors, widen
from .chain.linear import (
    allowed_labels,
    chain_parts,
    expectations_chain,
    kbest_chain,
    log_partition_chain,
    log_prob_chain,
    marginals_chain,
    path_score_chain,
    viterbi_chain,
)
from .chain.masking import masked_chain
from .chain.sampling import sample_chain
from .lossaug.chain import loss_augmented_chain, no_costs, partial_loss_augmented_chain
from .lossaug.semimarkov import loss_augmented_semimarkov
from .lossaug.spec import HLike
from .semimarkov.kbest import kbest_semimarkov
from .semimarkov.layout import check_segmentation, masked_semimarkov
from .semimarkov.plif import SegmentPLiF
from .semimarkov.sampling import sample_semimarkov
from .semimarkov.segments import (
    expectations_semimarkov,
    log_partition_semimarkov,
    log_prob_semimarkov,
    score_semimarkov,
    semimarkov_parts,
    viterbi_semimarkov,
)
from .trees import _ops as _tree_ops
from .trees.constituency import cky_loss_augmented, cky_viterbi
from .trees.constituency import log_partition_fn as cky_logz_fn
from .trees.dependency import dependency_viterbi
from .trees.dependency import log_partition_fn as dependency_logz_fn
from .trees.dependency import loss_augmented as dependency_loss_augmented_with_target
from .trees.layout import checked_arcs, checked_spans, span_score, tree_score
from .trees.layout import words as tree_words
from .trees.sampling import sample_heads, sample_spans

__all__ = ["ChainDistribution", "SemiMarkovDistribution", "SegmentMarginals"]


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
        if name is None or torch.compiler.is_compiling():  # not cached (torch.compile traces no
            with _no_autocast(self._device.type):  # inference-mode query)
                return map_tensors(fn(), self._narrow)
        key = (name, torch.is_grad_enabled(), torch.is_inference_mode_enabled())
        if key not in self._cache:
            with _no_autocast(self._device.type):
                self._cache[key] = map_tensors(fn(), self._narrow)
        return self._cache[key]

    def _put(self, x: Tensor, fill: float | int, lead: int = 0) -> Tensor:
        """Per-position results (*lead dims, B, T, ...) of the compacted chain back at the mask's
        positions (``fill`` elsewhere); without a mask as they are."""
        if self._moved.index is None:
            return x
        return self._moved.put(x.movedim(tuple(range(lead)), tuple(range(2, 2 + lead))), fill).movedim(
            tuple(range(2, 2 + lead)), tuple(range(lead)))

    def _take(self, x: object, lead: int = 0) -> object:
        """Per-position inputs (*lead dims, B, T, ...) at the mask's positions, compacted."""
        if self._moved.index is None or not isinstance(x, Tensor) or x.dim() < 2 + lead:
            return x
        moved = self._moved.take_positions(x.movedim(tuple(range(lead)), tuple(range(2, 2 + lead))))
        if not isinstance(moved, Tensor):
            return moved
        return moved.movedim(tuple(range(2, 2 + lead)), tuple(range(lead)))

    @property
    def batch_shape(self) -> torch.Size:
        """(B,), as ``torch.distributions`` names it: one structure per row."""
        return torch.Size(self.lengths.shape)

    @property
    def event_shape(self) -> torch.Size:
        """(T,): a structure is a labeling of T positions (a segmentation: its labels and starts)."""
        return torch.Size(self._potentials().shape[1:2])

    @property
    def mode(self) -> Any:
        """The most probable structure: :attr:`argmax`."""
        return self.argmax

    def cross_entropy(self, other: Any) -> Tensor:
        """Tensor (B,): -sum_y p(y) log q(y) of this distribution p and ``other`` q (of the same class,
        over the same rows: shapes and lengths), exact (logZ_q - <marginals of p, potentials of q>);
        +inf where p gives probability to a structure that q forbids (a -inf potential), 0 on rows
        where p has no structure. Differentiable w.r.t. both."""
        self._same_rows(other)
        return self._run(None, lambda: self._cross_entropy64(other).to(self._potentials().dtype))

    def kl_divergence(self, other: Any) -> Tensor:
        """Tensor (B,): KL(p || q) = cross-entropy - entropy of this distribution p and ``other`` q,
        exact, +inf where p gives probability to a structure that q forbids; also
        ``torch.distributions.kl_divergence(p, q)``."""
        self._same_rows(other)
        return self._run(None, lambda: (self._cross_entropy64(other) - self._entropy64()).to(
            self._potentials().dtype))

    def _same_rows(self, other: Any) -> None:
        if type(other) is not type(self):
            raise TypeError(f"other must be a {type(self).__name__}, got {type(other).__name__}")
        mine, theirs = self._potentials(), other._potentials()
        if mine.shape != theirs.shape or not torch.equal(self.lengths, other.lengths.to(self.lengths.device)):
            raise ValueError(f"other must be a distribution over the same rows: shapes {tuple(mine.shape)} "
                             f"and {tuple(theirs.shape)}, the same lengths")

    def _internal(self, name: str, fn: Callable[[], Any]) -> Any:
        """``fn()`` cached under ``name`` and the autograd mode (not while ``torch.compile`` traces),
        in the compute dtype."""
        if torch.compiler.is_compiling():
            with _no_autocast(self._device.type):
                return fn()
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
        ``transitions[..., i, j]`` scores label i at t followed by label j at t + 1; per step
        (T-1, N, N) or (1, T-1, N, N) are broadcast over the batch.
    start, end : Tensor (N,) or (B, N), optional
        Scores of the first and the last label.
    lengths : Tensor (B,), optional
        Integer lengths in [0, T]; None means all T.
    mask : Tensor (B, T) bool, optional
        Instead of ``lengths``: each row's positions, any pattern (as for :func:`structtorch.viterbi`);
        per-position results (``argmax``, ``marginals``, ``sample``, ...) come back at them, and
        structures given (``log_prob``, ``score``, ``loss_augmented``) are read there.

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
        mask: Tensor | None = None,
    ) -> None:
        (unary, transitions, start, end), result = widen((unary, transitions, start, end))
        self._chain, self._moved = masked_chain(unary, transitions, start, end, lengths, mask)
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
        return self._internal("logz", lambda: log_partition_chain(self._chain, accumulated=True))

    def _potentials(self) -> Tensor:
        return self._chain.unary

    def _entropy64(self) -> Tensor:
        logz, grads, parts = self._expectations()
        return entropy(logz, grads, parts)

    def _cross_entropy64(self, other: ChainDistribution) -> Tensor:
        logz, grads, _ = self._expectations()
        return cross_entropy(logz, grads, other._logz64(), chain_parts(other._chain))

    def _viterbi(self) -> tuple[Tensor, Tensor]:
        return self._internal("viterbi", lambda: viterbi_chain(self._chain))

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
        return self._run("argmax", lambda: self._put(self._viterbi()[1], -1))

    @property
    def max(self) -> Tensor:
        """Tensor (B,): the best score (0 for zero-length rows, -inf for infeasible ones); its gradient
        is the indicator of ``argmax``."""
        return self._run("max", lambda: self._viterbi()[0])

    def _expectations(self) -> tuple[Tensor, list[Tensor], list[Tensor]]:
        """(logZ, marginals, potentials): logZ (B,) and d logZ / d (unary (B, T, N), per-position
        transitions (B, T-1, N, N), start (B, N), end (B, N)), in the accumulation dtype."""
        return self._internal("expectations", lambda: expectations_chain(self._chain))

    @property
    def marginals(self) -> Tensor:
        """Tensor (B, T, N): node marginals p(y_t = j), 0 beyond each length and on infeasible rows;
        differentiable when a potential requires grad."""
        return self._run("marginals", lambda: self._put(
            self._expectations()[1][0].to(self._chain.unary.dtype), 0))

    @property
    def edge_marginals(self) -> Tensor:
        """Tensor (B, T-1, N, N): ``edge_marginals[b, t, i, j]`` = p(y_t = i, y_{t+1} = j), 0 for
        steps beyond each length and on infeasible rows; differentiable. Summed over t (and b) it is
        the gradient of the log-partition w.r.t. shared (N, N) transitions."""
        return self._run("edge_marginals", lambda: self._moved.put_edges(
            self._expectations()[1][1].to(self._chain.unary.dtype), 0))

    @property
    def entropy(self) -> Tensor:
        """Tensor (B,): the exact entropy -sum_y p(y) log p(y) in nats, computed as
        logZ - <marginals, potentials> (-inf potentials, whose marginals are 0, left out) in the
        accumulation dtype; 0 for zero-length and infeasible rows. Differentiable (double backward
        through the log-partition)."""
        return self._run("entropy", lambda: self._entropy64().to(self._chain.unary.dtype))

    def log_prob(self, structure: Tensor) -> Tensor:
        """Log-probability of given labelings.

        Parameters
        ----------
        structure : Tensor (..., B, T) integer
            Labels in [0, N) within each length (entries beyond are ignored); leading sample
            dimensions, e.g. ``sample(n)``'s (n, B, T), score every sample against its row.

        Returns
        -------
        Tensor (..., B)
            score(structure) - logZ, taken in the accumulation dtype; -inf for a labeling that uses a
            -inf potential and on infeasible rows, 0 on zero-length rows. Differentiable.
        """
        chain, logz = self._chain, self._logz64
        structure = self._take(structure, max(structure.dim() - 2, 0) if isinstance(structure, Tensor) else 0)
        if isinstance(structure, Tensor) and structure.dim() > 2:
            lead, n = structure.shape[:-2], structure[..., 0, 0].numel()
            rows = torch.arange(chain.shape[0], device=chain.unary.device).repeat(n)
            tiled = chain.rows(rows)
            flat = structure.reshape(-1, structure.shape[-1])
            return self._run(None, lambda: log_prob_chain(tiled, flat, logz().repeat(n), name="structure")
                             .reshape(*lead, -1))
        return self._run(None, lambda: log_prob_chain(chain, structure, logz(), name="structure"))

    def sample(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        """``n`` labelings per chain drawn from the distribution: (n, B, T) int64, -1 beyond each
        length and on infeasible rows (see :func:`structtorch.sample`)."""
        n = check_int("n", n, 1)
        check_generator(generator)
        return self._run(None, lambda: self._put(sample_chain(self._chain, n, generator), -1, lead=1))

    def rsample(self, n: int = 1, *, temperature: float = 1.0, hard: bool = True,
                generator: torch.Generator | None = None) -> Tensor:
        """Relaxed, differentiable samples by perturb-and-MAP: (n, B, T, N), 0 beyond each length.

        Each draw adds Gumbel noise to the unary scores; its *soft* sample is the node marginals of
        the perturbed chain with every score divided by ``temperature`` (tau), differentiable in
        the potentials; as tau -> 0 it tends to the one-hot of the perturbed chain's best labeling.
        With ``hard`` (the default) the forward value is that one-hot labeling and the gradient is
        the soft sample's (straight-through). A relaxation, not exact sampling: noise on the unary
        scores alone draws the perturbed argmax from p exactly only where positions are
        independent (zero transitions); use :meth:`sample` for exact draws.

        Parameters
        ----------
        n : int
            Draws per chain.
        temperature : float
            tau > 0.
        hard : bool
            One-hot forward values with straight-through gradients, or the soft samples.
        generator : torch.Generator, optional
        """
        n, tau = _relaxation_arguments(n, temperature, hard, generator)
        return self._run(None, lambda: self._put(self._rsample(n, tau, hard, generator), 0, lead=1))

    def _rsample(self, n: int, tau: float, hard: bool, generator: torch.Generator | None) -> Tensor:
        chain = self._chain
        B, T, N = chain.shape
        tiled = chain.rows(torch.arange(B, device=chain.unary.device).repeat(n))
        noise = _gumbel(tiled.unary, generator)
        perturbed = type(chain)(tiled.unary + noise, tiled.transitions, tiled.start, tiled.end, tiled.lengths,
                                tiled.name).map(lambda x: x / tau)
        soft = marginals_chain(perturbed).reshape(n, B, T, N)
        if not hard:
            return soft
        path = viterbi_chain(perturbed.map(torch.Tensor.detach))[1].reshape(n, B, T)
        return _straight_through(path, soft)

    def score(self, structure: Tensor) -> Tensor:
        """Scores (B,) of given labelings (B, T), as :func:`structtorch.path_score`."""
        return self._run(None, lambda: path_score_chain(self._chain, self._take(structure), name="structure"))

    def loss_augmented(self, target: Tensor, *, h: HLike = None, rescaling: str = "margin",
                       weights: Tensor | None = None, cost: Tensor | None = None,
                       algorithm: str = "auto", pair_cost: Tensor | None = None,
                       ignore_index: int | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """The most violating labeling for ``target`` (B, T): ``(value (B,), path (B, T), count
        (B,))`` as :func:`structtorch.loss_augmented` returns them (the value's gradient is
        the structured hinge's subgradient; ``pair_cost`` (B, T-1, N, N) the costs of label
        pairs; partial targets, (B, T, N) bool or ``ignore_index``, as there).
        :func:`structtorch.structured_hinge` takes this distribution as its structure."""
        target, weights, cost = (self._take(x) for x in (target, weights, cost))
        if isinstance(pair_cost, Tensor):
            pair_cost = self._moved.take_transitions(pair_cost)
        allowed = allowed_labels(target, self._chain, ignore_index, "target")
        if allowed is not None:
            no_costs(weights, cost, pair_cost)
            value, path, count = self._run(None, lambda: partial_loss_augmented_chain(
                self._chain, allowed, h=h, rescaling=rescaling, algorithm=algorithm))
        else:
            value, path, count = self._run(None, lambda: loss_augmented_chain(
                self._chain, target, h=h, rescaling=rescaling, weights=weights, cost=cost,
                algorithm=algorithm, pair_cost=pair_cost))
        return value, self._put(path, -1), count

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
        scores, paths = self._run(None, lambda: kbest_chain(self._chain, k))
        return scores, self._put(paths.transpose(1, 2), -1).transpose(1, 2)


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
    transitions : Tensor (N, N) or (B, T-1, N, N)
        ``transitions[m, n]`` scores a segment of label m followed by one of label n; per row and
        position, ``transitions[b, s - 1, m, n]`` scores it for a segment of label n starting at s
        ((T-1, N, N) and (1, T-1, N, N) broadcast over the batch; computed by the PyTorch
        recursions).
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
    mask : Tensor (B, T) bool, optional
        Instead of ``lengths``: each row's positions, any pattern; the per-position potentials
        (content, boundary, segment scores, PLiF tracks) are read there and per-position results
        (``argmax``, ``marginals``, ``sample``, ...) come back there.

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
        mask: Tensor | None = None,
    ) -> None:
        tensors, result = widen((content, transitions, length_scores, boundary, segment_scores, start, end,
                                  segment_plif))
        content, transitions, length_scores, boundary, segment_scores, start, end, segment_plif = tensors
        self._sm, self._moved = masked_semimarkov(content, transitions, max_len, length_scores, boundary,
                                                  segment_scores, start, end, lengths, segment_plif, mask)
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
        return self._internal("logz", lambda: log_partition_semimarkov(self._sm, accumulated=True))

    def _potentials(self) -> Tensor:
        return self._sm.content

    def _entropy64(self) -> Tensor:
        self._no_plif("entropy")
        logz, grads, parts = self._expectations(segments=False)
        return entropy(logz, grads, parts)

    def _cross_entropy64(self, other: SemiMarkovDistribution) -> Tensor:
        self._no_plif("cross_entropy")
        other._no_plif("cross_entropy")
        if self._sm.shape != other._sm.shape:
            raise ValueError(f"other must have the same max_len: {self.max_len} and {other.max_len}")
        segments = self._sm.segment_scores is not None or other._sm.segment_scores is not None
        logz, grads, _ = self._expectations(segments=segments)
        return cross_entropy(logz, grads, other._logz64(), semimarkov_parts(other._sm, segments))

    @property
    def log_partition(self) -> Tensor:
        """Tensor (B,): log of the sum of exp(score) over all segmentations; 0 for zero-length rows,
        -inf for infeasible ones (as :func:`structtorch.semimarkov_log_partition`)."""
        return self._run("log_partition", lambda: cast_checked(
            self._logz64(), self._dtype, "the log-partition", self._sm.potentials))

    def _viterbi(self) -> tuple[Tensor, Tensor, Tensor]:
        return self._internal("viterbi", lambda: viterbi_semimarkov(self._sm))

    @property
    def argmax(self) -> tuple[Tensor, Tensor]:
        """The best segmentation: labels (B, T) int64 (-1 beyond each length and on infeasible rows)
        and starts (B, T) bool, as :func:`structtorch.semimarkov_viterbi` returns them."""
        return self._run("argmax", lambda: self._put_segmentation(*self._viterbi()[1:]))

    @staticmethod
    def as_target(best: tuple[Tensor, Tensor]) -> Tensor:
        """The labels (B, T) of a segmentation ``(labels, starts)``: what :func:`structtorch.train.fit`
        compares with the data's labels."""
        return best[0]

    @property
    def max(self) -> Tensor:
        """Tensor (B,): the best score (0 for zero-length rows, -inf for infeasible ones); its gradient
        is the indicator of ``argmax``."""
        return self._run("max", lambda: self._viterbi()[0])

    def _expectations(self, segments: bool) -> tuple[Tensor, list[Tensor], list[Tensor]]:
        """(logZ, marginals, potentials) with potentials [content, length_scores, boundary,
        transitions per row (B, N, N), start, end] and, with ``segments`` or given segment scores,
        segment_scores (zeros when not given) last; float64 reference recursion."""
        key = "expectations" if segments or self._sm.segment_scores is not None else "expectations_nosegments"
        return self._internal(key, lambda: expectations_semimarkov(self._sm, segments))

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
            return SegmentMarginals(self._put(content, 0), self._put(segment, 0), trans, start, end)
        return self._run("marginals", compute)

    @property
    def entropy(self) -> Tensor:
        """Tensor (B,): the exact entropy -sum_y p(y) log p(y) in nats, computed as
        logZ - <marginals, potentials> (-inf potentials left out) in float64; 0 for zero-length and
        infeasible rows. Differentiable."""
        return self._run("entropy", lambda: self._entropy64().to(self._dtype))

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

            Leading sample dimensions (..., B, T), e.g. ``sample(n)``'s, score every sample against
            its row.

        Returns
        -------
        Tensor (..., B)
            score(structure) - logZ in float64, cast once; -inf for a segmentation that uses a -inf
            potential and on infeasible rows, 0 on zero-length rows. Differentiable.
        """
        structure = self._take_segmentation(structure)
        if isinstance(structure, (tuple, list)) and len(structure) == 2 and isinstance(structure[0], Tensor) \
                and structure[0].dim() > 2:
            labels, starts = structure
            lead, n = labels.shape[:-2], labels[..., 0, 0].numel()
            rows = torch.arange(self._sm.shape[0], device=self._sm.content.device).repeat(n)
            tiled = self._sm.rows(rows)
            flat_labels, flat_starts = check_segmentation(labels.reshape(-1, labels.shape[-1]),
                                                          starts.reshape(-1, starts.shape[-1]), tiled)
            return self._run(None, lambda: log_prob_semimarkov(tiled, flat_labels, flat_starts,
                                                               self._logz64().repeat(n)).reshape(*lead, -1))
        labels, starts = self._structure(structure)
        return self._run(None, lambda: log_prob_semimarkov(self._sm, labels, starts, self._logz64()))

    def sample(self, n: int, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """``n`` segmentations per sequence drawn from the distribution: ``(labels, starts)``, each
        (n, B, T) (see :func:`structtorch.semimarkov_sample`)."""
        self._no_plif("sample")
        n = check_int("n", n, 1)
        check_generator(generator)
        return self._run(None, lambda: self._put_segmentation(*sample_semimarkov(self._sm, n, generator),
                                                              lead=1))

    def score(self, structure: tuple[Tensor, Tensor]) -> Tensor:
        """Scores (B,) of given segmentations ``(labels, starts)``, as
        :func:`structtorch.semimarkov_score`."""
        labels, starts = self._structure(self._take_segmentation(structure))
        return self._run(None, lambda: score_semimarkov(self._sm, labels, starts))

    def loss_augmented(self, target: tuple[Tensor, Tensor], *, h: HLike = None, rescaling: str = "margin",
                       weights: Tensor | None = None, cost: Tensor | None = None,
                       algorithm: str = "auto",
                       loss: str = "hamming") -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """The most violating segmentation for ``target`` = (labels, starts): ``(value (B,), labels
        (B, T), starts (B, T), count (B,))`` as :func:`structtorch.semimarkov_loss_augmented`
        returns them (``loss``: "hamming", "segment", "boundary" or "zero_one"). ``cost`` is not
        supported for segmentations (a ValueError)."""
        if cost is not None:
            raise ValueError("cost is not supported for semi-Markov models (use h and weights)")
        if not isinstance(target, (tuple, list)) or len(target) != 2:
            raise TypeError("target must be a (labels, starts) pair of (B, T) tensors")
        target, weights = self._take_segmentation(target), self._take(weights)
        value, labels, starts, count = self._run(None, lambda: loss_augmented_semimarkov(
            self._sm, target[0], target[1], h=h, rescaling=rescaling, weights=weights, algorithm=algorithm,
            loss=loss))
        return (value, *self._put_segmentation(labels, starts), count)

    def kbest(self, k: int) -> tuple[Tensor, Tensor, Tensor]:
        """The k highest-scoring distinct segmentations: ``(scores (B, k), labels (B, k, T), starts
        (B, k, T))`` (see :func:`structtorch.semimarkov_kbest`)."""
        self._no_plif("kbest")
        k = check_int("k", k, 1)
        scores, labels, starts = self._run(None, lambda: kbest_semimarkov(self._sm, k))
        labels, starts = self._put_segmentation(labels.transpose(1, 2), starts.transpose(1, 2))
        return scores, labels.transpose(1, 2), starts.transpose(1, 2)

    def rsample(self, n: int = 1, *, temperature: float = 1.0, hard: bool = True,
                generator: torch.Generator | None = None) -> Tensor:
        """Relaxed, differentiable samples by perturb-and-MAP: (n, B, T, N) per-position label
        indicators, 0 beyond each length (as :meth:`ChainDistribution.rsample`: Gumbel noise on the
        content scores, the perturbed distribution's position marginals at ``temperature``, with
        ``hard`` the one-hot labels of its best segmentation and the soft sample's gradient). A
        relaxation, not exact sampling; :meth:`sample` draws exactly."""
        self._no_plif("rsample")
        n, tau = _relaxation_arguments(n, temperature, hard, generator)
        return self._run(None, lambda: self._put(self._rsample(n, tau, hard, generator), 0, lead=1))

    def _rsample(self, n: int, tau: float, hard: bool, generator: torch.Generator | None) -> Tensor:
        sm = self._sm
        B, T, _, N = sm.shape
        tiled = sm.rows(torch.arange(B, device=sm.content.device).repeat(n))
        noise = _gumbel(tiled.content, generator)
        perturbed = tiled.replace(content=tiled.content + noise).map(lambda x: x / tau)
        soft = expectations_semimarkov(perturbed, False)[1][0].to(sm.content.dtype).reshape(n, B, T, N)
        if not hard:
            return soft
        labels = viterbi_semimarkov(perturbed.detached())[1].reshape(n, B, T)
        return _straight_through(labels, soft)

    def _put_segmentation(self, labels: Tensor, starts: Tensor, lead: int = 0) -> tuple[Tensor, Tensor]:
        """Labels (-1) and starts (False) back at the mask's positions."""
        return self._put(labels, -1, lead), self._put(starts, False, lead)

    def _take_segmentation(self, structure: object) -> object:
        """A (labels, starts) pair (..., B, T) read at the mask's positions; anything else as it is."""
        if not isinstance(structure, (tuple, list)) or len(structure) != 2 or not all(
                isinstance(x, Tensor) for x in structure):
            return structure
        return tuple(self._take(x, x.dim() - 2) for x in structure)


def _relaxation_arguments(n: object, temperature: object, hard: object,
                          generator: object) -> tuple[int, float]:
    """``rsample``'s arguments checked: (n, temperature)."""
    n = check_int("n", n, 1)
    tau = check_number("temperature", temperature, low=0.0)
    if tau == 0:
        raise ValueError("temperature must be > 0")
    check_bool("hard", hard)
    check_generator(generator)
    return n, tau


def _gumbel(like: Tensor, generator: torch.Generator | None) -> Tensor:
    """Standard Gumbel noise of ``like``'s shape, dtype and device (drawn in float64)."""
    u = torch.rand(like.shape, generator=generator, dtype=torch.float64, device=like.device)
    return -torch.log(-torch.log(u.clamp(min=torch.finfo(u.dtype).tiny))).to(like.dtype)


def _straight_through(labels: Tensor, soft: Tensor) -> Tensor:
    """The one-hot ``labels`` (..., T) (0 where -1) with the gradient of ``soft`` (..., T, N)."""
    onehot = torch.nn.functional.one_hot(labels.clamp(min=0), soft.shape[-1]).to(soft.dtype)
    return onehot * (labels >= 0).unsqueeze(-1) + soft - soft.detach()


class _TreeDistribution(_StructureDistribution):
    """Shared parts of the tree distributions: the scores, lengths, log-partition and marginals (the
    gradient of the log-partition), entropy and cross-entropy; the subclasses give the structure's
    functions."""

    _name = "scores"

    def _logz_fn(self):
        raise NotImplementedError

    @property
    def lengths(self) -> Tensor:
        """Tensor (B,) int64: the words of each sentence."""
        return self._lengths

    def _potentials(self) -> Tensor:
        return self._scores

    def _logz64(self) -> Tensor:
        return self._internal("logz", lambda: self._logz_fn()(accumulate(self._scores)))

    def _expectations(self) -> tuple[Tensor, list[Tensor]]:
        return self._internal("expectations",
                              lambda: logz_and_grads(self._logz_fn(), [accumulate(self._scores)]))

    def _entropy64(self) -> Tensor:
        logz, grads = self._expectations()
        return entropy(logz, grads, [self._scores])

    def _cross_entropy64(self, other: _TreeDistribution) -> Tensor:
        logz, grads = self._expectations()
        return cross_entropy(logz, grads, other._logz64(), [other._scores])

    @property
    def log_partition(self) -> Tensor:
        """Tensor (B,): log of the sum of exp(score) over the trees; 0 without words, -inf without a
        tree. Its gradient is :attr:`marginals`."""
        return self._run("log_partition", lambda: cast_checked(self._logz64(), self._scores.dtype,
                                                               "the log-partition", self._name))

    @property
    def marginals(self) -> Tensor:
        """Tensor shaped as the scores: the probability of each part (arc or labeled span), 0 where
        no tree uses it; differentiable."""
        return self._run("marginals", lambda: self._expectations()[1][0].to(self._scores.dtype))

    @property
    def entropy(self) -> Tensor:
        """Tensor (B,): the exact entropy in nats, logZ - <marginals, scores> (0 without words or a
        tree); differentiable."""
        return self._run("entropy", lambda: self._entropy64().to(self._scores.dtype))

    def _sampled(self, n: object, generator: object, draw) -> Tensor:
        """``draw(scores, n)`` on the detached scores in the accumulation dtype, without a graph,
        ``n`` and ``generator`` checked."""
        n = check_int("n", n, 1)
        check_generator(generator)
        with torch.no_grad():
            return draw(accumulate(self._scores.detach()), n)

    def _log_prob(self, structure: Tensor, event: int, score) -> Tensor:
        """score(structure) - logZ for structures (..., B, *event shape) with leading dimensions."""
        if not isinstance(structure, Tensor):
            raise TypeError(f"structure must be a tensor, got {type(structure).__name__}")
        B = self._scores.shape[0]
        lead = structure.shape[:-(event + 1)]
        flat = structure.reshape(-1, *structure.shape[-event:])
        reps = flat.shape[0] // max(B, 1)
        scores = accumulate(self._scores).repeat(reps, *(1,) * (self._scores.dim() - 1))
        value = score(scores, flat, self._lengths.repeat(reps))
        out = log_prob(value, self._logz64().repeat(reps), self._scores.dtype, self._name)
        return self._run(None, lambda: out.reshape(*lead, B))


class DependencyDistribution(_TreeDistribution):
    """The distribution p(tree) = exp(score(tree) - logZ) over the dependency trees of each sentence.

    Parameters
    ----------
    arc_scores : Tensor (B, T + 1, T + 1)
        ``arc_scores[b, h, m]`` scores the arc h -> m (position 0 the root; see
        :func:`structtorch.dependency_log_partition`).
    lengths : Tensor (B,), optional
        Words per sentence; None means T.
    projective, single_root : bool
        The trees: projective ones (Eisner) or all of them (matrix-tree theorem, Chu-Liu-Edmonds);
        with exactly one child of the root or not.

    Examples
    --------
    >>> dist = DependencyDistribution(torch.randn(2, 6, 6), projective=False)
    >>> dist.argmax.shape, dist.sample(3).shape, dist.entropy.shape
    (torch.Size([2, 6]), torch.Size([3, 2, 6]), torch.Size([2]))
    """

    _name = "arc_scores"

    def __init__(self, arc_scores: Tensor, lengths: LengthsLike = None, *, projective: bool = True,
                 single_root: bool = False) -> None:
        arc_scores, result = widen(arc_scores)
        self._scores, self._lengths, self.projective, self.single_root = checked_arcs(
            arc_scores, lengths, projective, single_root)
        super().__init__(self._scores.device, result)

    def __repr__(self) -> str:
        B, T1, _ = self._scores.shape
        return (f"DependencyDistribution(B={B}, T={T1 - 1}, projective={self.projective}, "
                f"single_root={self.single_root})")

    def _logz_fn(self):
        return dependency_logz_fn(self.projective, self.single_root, self._lengths)

    @property
    def argmax(self) -> Tensor:
        """Tensor (B, T + 1) int64: the heads of the best tree (-1 at the root, beyond each length
        and without a tree), as :func:`structtorch.dependency_viterbi`."""
        return self._run("argmax", lambda: _tree_ops.best_heads(
            accumulate(self._scores.detach()), self._lengths, self.projective, self.single_root))

    @staticmethod
    def as_target(best: Tensor) -> Tensor:
        """The words' heads (B, T) of heads (B, T + 1): the form of the labels of
        :class:`structtorch.SequenceData` for :func:`structtorch.train.fit` (-1 beyond each length)."""
        return best[..., 1:]

    def _heads(self, structure: object) -> object:
        """Heads (..., B, T + 1) from heads or from the words' heads (..., B, T) (the root column
        prepended); anything else as it is (for the checks to name)."""
        words = self._scores.shape[1] - 1
        if isinstance(structure, Tensor) and structure.dim() >= 2 and structure.shape[-1] == words:
            return torch.cat([torch.full_like(structure[..., :1], -1), structure], -1)
        return structure

    @property
    def max(self) -> Tensor:
        """Tensor (B,): the best tree's score; its gradient is the indicator of its arcs."""
        return self._run("max", lambda: dependency_viterbi(
            self._scores, self._lengths, projective=self.projective, single_root=self.single_root)[0])

    def log_prob(self, structure: Tensor) -> Tensor:
        """Log-probability (..., B) of heads (..., B, T + 1) (leading sample dimensions, e.g.
        ``sample(n)``'s): score - logZ, differentiable; -inf where a head uses a -inf arc or the
        sentence has no tree. The heads must form a tree of the distribution's kind (not checked)."""
        def score(scores: Tensor, heads: Tensor, lengths: Tensor) -> Tensor:
            inside = tree_words(lengths, heads.shape[1])
            return tree_score(scores, torch.where(inside, heads.long(), -1))

        return self._log_prob(self._heads(structure), 1, score)

    def sample(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        """``n`` trees per sentence drawn exactly: heads (n, B, T + 1) (see
        :func:`structtorch.dependency_sample`)."""
        return self._sampled(n, generator, lambda scores, k: sample_heads(
            scores, self._lengths, k, self.projective, self.single_root, generator))

    def score(self, structure: Tensor) -> Tensor:
        """Scores (B,) of heads (B, T + 1), or of the words' heads (B, T) (differentiable)."""
        inside = tree_words(self._lengths, self._scores.shape[1])
        return tree_score(self._scores, torch.where(inside, self._heads(structure).long(), -1))

    def loss_augmented(self, target: Tensor, *, h: HLike = None, rescaling: str = "margin",
                       weights: Tensor | None = None, cost: Tensor | None = None,
                       ignore_index: int | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """The most violating tree for the gold heads ``target`` (B, T + 1) (or the words' heads (B, T),
        as :func:`structtorch.train.fit` passes them): ``(value (B,), heads (B, T + 1), loss (B,))``,
        the value in the structured hinge's form (as
        :func:`structtorch.loss_augmented`): max over trees y' of s(y') + Delta - s(target) (margin)
        or Delta (1 + s(y') - s(target)) (slack), Delta the Hamming loss of the heads (or the sum
        of per-arc ``cost``); with ``ignore_index``, partial annotation (s(target) the best tree
        that agrees with the annotated heads); see :func:`structtorch.dependency_loss_augmented`.
        :func:`structtorch.structured_hinge` takes this distribution as its structure."""
        _no_tree_loss_options(h, weights)
        value, heads, loss, target_score = dependency_loss_augmented_with_target(
            self._scores, self._heads(target), self._lengths, rescaling, self.projective, self.single_root,
            cost, ignore_index)
        if rescaling == "margin":
            value = value - target_score
        return value, heads, loss


class TreeDistribution(_TreeDistribution):
    """The distribution p(tree) = exp(score(tree) - logZ) over the labeled binary (constituency)
    trees of each sentence.

    Parameters
    ----------
    span_scores : Tensor (B, T, T, N)
        ``span_scores[b, i, j, n]`` scores words i..j as a constituent labeled n (see
        :func:`structtorch.cky_log_partition`).
    lengths : Tensor (B,), optional
        Words per sentence; None means T.

    Examples
    --------
    >>> dist = TreeDistribution(torch.randn(2, 5, 5, 3))
    >>> dist.argmax.shape, dist.sample(4).shape, dist.log_prob(dist.argmax).shape
    (torch.Size([2, 5, 5, 3]), torch.Size([4, 2, 5, 5, 3]), torch.Size([2]))
    """

    _name = "span_scores"

    def __init__(self, span_scores: Tensor, lengths: LengthsLike = None) -> None:
        span_scores, result = widen(span_scores)
        self._scores, self._lengths = checked_spans(span_scores, lengths)
        super().__init__(self._scores.device, result)

    def __repr__(self) -> str:
        B, T, _, N = self._scores.shape
        return f"TreeDistribution(B={B}, T={T}, N={N})"

    @property
    def event_shape(self) -> torch.Size:
        """(T, T, N): a tree is the 0/1 indicator of its labeled spans."""
        return torch.Size(self._scores.shape[1:])

    def _logz_fn(self):
        return cky_logz_fn(self._lengths)

    def _viterbi(self) -> tuple[Tensor, Tensor]:
        return self._internal("viterbi", lambda: cky_viterbi(self._scores, self._lengths))

    @property
    def argmax(self) -> Tensor:
        """Tensor (B, T, T, N): the best tree's labeled spans (0/1), as :func:`structtorch.cky_viterbi`."""
        return self._run("argmax", lambda: self._viterbi()[1])

    @property
    def max(self) -> Tensor:
        """Tensor (B,): the best tree's score; its gradient is the indicator of its labeled spans."""
        return self._run("max", lambda: self._viterbi()[0])

    def log_prob(self, structure: Tensor) -> Tensor:
        """Log-probability (..., B) of labeled trees (..., B, T, T, N) 0/1 (leading sample dimensions,
        e.g. ``sample(n)``'s): score - logZ, differentiable. The spans must form a binary tree (not
        checked)."""
        return self._log_prob(structure, 3, span_score)

    def sample(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        """``n`` trees per sentence drawn exactly: (n, B, T, T, N) 0/1 (see
        :func:`structtorch.cky_sample`)."""
        return self._sampled(n, generator, lambda scores, k: sample_spans(
            scores, self._lengths, k, generator).to(self._scores.dtype))

    def score(self, structure: Tensor) -> Tensor:
        """Scores (B,) of labeled trees (B, T, T, N) 0/1 (differentiable)."""
        return span_score(self._scores, structure, self._lengths)

    def loss_augmented(self, target: Tensor, *, h: HLike = None, rescaling: str = "margin",
                       weights: Tensor | None = None,
                       cost: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """The most violating tree for the gold spans ``target`` (B, T, T, N): ``(value (B,), spans,
        loss (B,))`` with the value in the structured hinge's form (max over trees y' of s(y') +
        Delta - s(target) for margin rescaling; see :func:`structtorch.cky_loss_augmented`)."""
        _no_tree_loss_options(h, weights)
        value, spans, loss = cky_loss_augmented(self._scores, target, self._lengths, rescaling=rescaling,
                                                cost=cost)
        if rescaling == "margin":
            value = value - self.score(target)
        return value, spans, loss


def _no_tree_loss_options(h: object, weights: object) -> None:
    """Trees take the Hamming loss itself (or per-part costs): h and weights are refused by name."""
    given = [name for name, x in (("h", h), ("weights", weights)) if x is not None]
    if given:
        raise ValueError(f"{' and '.join(given)} are not supported for trees: their loss is the Hamming loss "
                         "of the parts (or cost= per part)")


def _kl(p: _StructureDistribution, q: _StructureDistribution) -> Tensor:
    return p.kl_divergence(q)


for _cls in (ChainDistribution, SemiMarkovDistribution, DependencyDistribution, TreeDistribution):
    torch.distributions.kl.register_kl(_cls, _cls)(_kl)
