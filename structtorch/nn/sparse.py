"""Linear chain potentials over sparse indicator features (per-position bags of feature ids)."""

from __future__ import annotations

import weakref

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from .._backend import backend_for
from .._checks import check_int
from .._extension import chain_ops
from .._library import NotScriptable
from .._threads import call_threads

__all__ = ["SparseFeaturePotentials"]

PAD = -1  # the padding feature id of the padded (B, T, K) form
CHECKED_IDS = 8  # the ids tensors whose range a model remembers having checked


class _BagSum(torch.autograd.Function):
    """The unary scores of padded bags, ``out[r] = sum_k values[r, k] * weight[ids[r, k]]`` (ids
    (R, K) int64 with -1 padding, values (R, K) or empty), by the compiled kernels of
    ``csrc/bags.cpp``, with the weights' dense gradient scattered straight into the rows of the
    features that occur: no sort (``nn.EmbeddingBag``'s backward sorts every id on every call,
    0.87 s of a 1.28 s evaluation of a CoNLL-2000-sized CRF), no cached structure."""

    @staticmethod
    @call_threads()  # as every operator: fewer threads while the machine is busy
    def forward(ctx, weight: Tensor, ids: Tensor, values: Tensor) -> Tensor:
        ctx.save_for_backward(ids, values)
        ctx.num_features = weight.shape[0]
        return chain_ops().bag_sum_forward(ids, values, weight.contiguous())

    @staticmethod
    @once_differentiable
    @call_threads()
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None]:
        ids, values = ctx.saved_tensors
        return chain_ops().bag_sum_backward(ids, values, grad.contiguous(), ctx.num_features), None, None


class SparseFeaturePotentials(NotScriptable, nn.Module):
    """The linear model of :class:`LinearChainPotentials` over sparse features, without one-hots.

    Each position carries a bag of active feature ids (word identity, suffixes, window features,
    ...); its unary score for label j is the sum of ``weight[f, j]`` over the ids f in its bag
    (times an optional value per id), plus a per-label bias. Scores come from compiled bag sums on
    the CPU (their backward adds each position's gradient into the rows of its ids, sorting
    nothing) and from ``nn.EmbeddingBag(mode="sum")`` elsewhere, with ``sparse_grad``, learned
    values or the offsets form. Time and memory are O(nnz N) for nnz active ids, never
    O(B T num_features): a dense one-hot input of 823 sentences with 10^5 features would take
    gigabytes, this takes the ids.

    Two input forms:

    - padded: ``ids`` (B, T, K) int64, the K slots of each position holding feature ids in
      [0, num_features) or the padding id -1 (unused slots; positions beyond a sequence's length
      may be all -1). This is the form :class:`structtorch.data.SequenceData` and
      :func:`structtorch.train.fit` carry (``x = ids``).
    - offsets: ``ids`` (nnz,) int64, ``offsets`` (B * T,) int64 the start of each position's bag in
      ``ids`` (row-major over (b, t), non-decreasing, ``offsets[0] = 0``) and ``shape=(B, T)``.

    The score <w, Psi(x, y)> is linear in the parameters, so the model works with
    :class:`structtorch.StructuredHingeLoss`, :class:`structtorch.LinearChainCRF`-style NLLs and
    the block-coordinate Frank-Wolfe solver (``structtorch.train.fit(..., solver="bcfw")``).

    Parameters
    ----------
    num_features : int
        F, the number of distinct feature ids.
    num_labels : int
        N.
    bias : bool
        Add a per-label bias to the unary scores.
    sparse_grad : bool
        Sparse gradients for the feature weights (``nn.EmbeddingBag(sparse=True)``; needs an
        optimizer that takes them, such as SGD or SparseAdam).
    boundary : bool
        Also learn start and end scores (N,) and return them: ``forward`` then gives the 4-tuple
        ``(unary, transitions, start, end)`` of the loss protocol (still linear in the parameters,
        as BCFW needs).

    Attributes
    ----------
    emission : nn.EmbeddingBag
        ``emission.weight`` (F, N): the score of feature f for label j.
    bias : nn.Parameter (N,) or None
    transitions : nn.Parameter (N, N)
    start, end : nn.Parameter (N,) or None
        All parameters start at zero.

    Examples
    --------
    >>> import torch, structtorch as st
    >>> model = st.SparseFeaturePotentials(num_features=4, num_labels=2)
    >>> with torch.no_grad():
    ...     _ = model.emission.weight.copy_(torch.tensor([[1., 0.], [0., 1.], [2., 0.], [0., 0.]]))
    >>> ids = torch.tensor([[[0, 2], [1, -1], [3, -1]]])  # (B, T, K) feature ids, -1 unused slots
    >>> unary, transitions = model(ids)
    >>> unary  # each position sums the weights of its ids (plus the bias, here 0)
    tensor([[[3., 0.],
             [0., 1.],
             [0., 0.]]], grad_fn=<AddBackward0>)
    >>> transitions.shape
    torch.Size([2, 2])
    """

    def __init__(self, num_features: int, num_labels: int, *, bias: bool = True,
                 sparse_grad: bool = False, boundary: bool = False) -> None:
        super().__init__()
        self.num_features = check_int("num_features", num_features, 1)
        self.num_labels = check_int("num_labels", num_labels, 1)
        self.emission = nn.EmbeddingBag(num_features, num_labels, mode="sum", sparse=sparse_grad)
        nn.init.zeros_(self.emission.weight)
        self.bias = nn.Parameter(torch.zeros(num_labels)) if bias else None
        self.transitions = nn.Parameter(torch.zeros(num_labels, num_labels))
        self.start = nn.Parameter(torch.zeros(num_labels)) if boundary else None
        self.end = nn.Parameter(torch.zeros(num_labels)) if boundary else None
        self._checked: tuple = ()  # (weakref to ids checked, their version, least id), newest first

    def __getstate__(self) -> dict:
        """Pickled (``torch.save(model)``, ``copy.deepcopy``) without the weak reference."""
        return {**super().__getstate__(), "_checked": ()}

    def extra_repr(self) -> str:
        return (f"num_features={self.num_features}, num_labels={self.num_labels}, "
                f"bias={self.bias is not None}, boundary={self.start is not None}")

    def _check_ids(self, name: str, ids: Tensor) -> None:
        """Dtype, device, and on the CPU the range of the ids; the range once per ids tensor while
        it stays unchanged (its version counter), remembering the last ``CHECKED_IDS`` tensors, so
        full-batch training (and a solver's fixed chunks of the data) scans them once."""
        if ids.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"{name} must be an int64 (or int32) tensor of feature ids, got {ids.dtype}")
        if ids.device != self.emission.weight.device:
            raise ValueError(f"{name} is on {ids.device} but the model is on {self.emission.weight.device}")
        least = PAD if name == "ids" and ids.dim() == 3 else 0
        checked = getattr(self, "_checked", None) or ()  # absent (or None) in models pickled before
        if any(ref() is ids and (version, low) == (ids._version, least) for ref, version, low in checked):
            return
        if ids.numel() and ids.device.type == "cpu":
            low, high = int(ids.min()), int(ids.max())
            if low < least or high >= self.num_features:
                bad = low if low < least else high
                raise ValueError(f"{name} must hold feature ids in [{least}, num_features) = "
                                 f"[{least}, {self.num_features}), found {bad}")
        alive = tuple(entry for entry in checked if entry[0]() is not None and entry[0]() is not ids)
        self._checked = ((weakref.ref(ids), ids._version, least), *alive)[:CHECKED_IDS]

    def _padded_scores(self, ids: Tensor, values: Tensor | None, dtype: torch.dtype) -> Tensor:
        """Scores (B * T, N) of the padded form: on the "compiled" backend (CPU) with dense gradients
        and fixed values, the compiled bag sums (:class:`_BagSum`); elsewhere ``nn.EmbeddingBag``."""
        self._check_ids("ids", ids)
        B, T, K = ids.shape
        if K == 0:  # no slots: every bag is empty (nn.EmbeddingBag refuses (R, 0) input)
            none = ids.new_empty(0, dtype=torch.long)
            return self.emission(none, ids.new_zeros(B * T, dtype=torch.long),
                                 per_sample_weights=None if values is None else values.reshape(0))
        flat = ids.reshape(B * T, K)
        learned_values = values is not None and values.requires_grad
        compiled = backend_for(self.emission.weight) == "compiled"
        if compiled and not self.emission.sparse and not learned_values:
            given = flat.new_empty(0, dtype=dtype) if values is None else values.reshape(B * T, K)
            return _BagSum.apply(self.emission.weight, flat.long().contiguous(), given.contiguous())
        keep = (flat != PAD).to(dtype)
        weights = keep if values is None else keep * values.reshape(B * T, K)
        return self.emission(flat.clamp(min=0), per_sample_weights=weights)

    def forward(self, ids: Tensor, offsets: Tensor | None = None, *, shape: tuple[int, int] | None = None,
                values: Tensor | None = None) -> tuple[Tensor, ...]:
        """Chain potentials of bags of feature ids.

        Parameters
        ----------
        ids : Tensor (B, T, K) int64 with -1 padding, or (nnz,) int64 with ``offsets``
        offsets : Tensor (B * T,) int64, optional
            Start of each position's bag in the flat ``ids`` (offsets form only).
        shape : (B, T)
            The batch shape of the offsets form.
        values : Tensor, optional
            A real value per id (same shape as ``ids``), for non-binary features; padding slots
            are ignored whatever their value.

        Returns
        -------
        unary : Tensor (B, T, N)
        transitions : Tensor (N, N)
        start, end : Tensor (N,)
            Only with ``boundary=True``.
        """
        if not isinstance(ids, Tensor):
            raise TypeError(f"ids must be a torch.Tensor of shape (B, T, K), got {type(ids).__name__}")
        dtype = self.emission.weight.dtype
        if values is not None:
            if not isinstance(values, Tensor) or values.shape != ids.shape:
                got = tuple(values.shape) if isinstance(values, Tensor) else type(values).__name__
                raise ValueError(f"values must be a tensor of the shape of ids {tuple(ids.shape)}, got {got}")
            values = values.to(dtype)
        if offsets is None:
            if shape is not None:
                raise ValueError("shape is for the offsets form; the padded form (B, T, K) carries its shape")
            if ids.dim() != 3:
                raise ValueError(f"ids must have shape (B, T, K) (padded with -1), got {tuple(ids.shape)}; "
                                 "pass offsets= and shape= for the flat form")
            B, T, K = ids.shape
            scores = self._padded_scores(ids, values, dtype)
        else:
            if ids.dim() != 1:
                raise ValueError(f"ids must have shape (nnz,) with offsets, got {tuple(ids.shape)}")
            if (not isinstance(shape, (tuple, list)) or len(shape) != 2
                    or not all(isinstance(s, int) and s >= 0 for s in shape)):
                raise ValueError(f"shape must be (B, T), two non-negative ints, with offsets; got {shape!r}")
            B, T = shape
            if not isinstance(offsets, Tensor) or offsets.dim() != 1 or offsets.numel() != B * T:
                got = tuple(offsets.shape) if isinstance(offsets, Tensor) else type(offsets).__name__
                raise ValueError(f"offsets must have shape (B * T,) = ({B * T},), got {got}")
            if offsets.dtype not in (torch.int64, torch.int32):
                raise TypeError("offsets must be an int64 (or int32) tensor of positions in ids, got "
                                f"{offsets.dtype}")
            self._check_ids("ids", ids)
            if offsets.numel():
                if int(offsets[0]) != 0 or bool((offsets.diff() < 0).any()) or int(offsets[-1]) > ids.numel():
                    raise ValueError("offsets must start at 0, be non-decreasing and stay <= len(ids)")
            scores = self.emission(ids, offsets.to(ids.dtype), per_sample_weights=values)
        unary = scores.reshape(B, T, self.num_labels)
        if self.bias is not None:
            unary = unary + self.bias
        if self.start is not None:
            return unary, self.transitions, self.start, self.end
        return unary, self.transitions
