"""torch-struct's own dependency-tree and CKY tests (``torch_struct/test_algorithms.py``:
``test_labeled_proj_deptree``, ``test_non_proj``, ``test_generic_a``/``test_cky`` for the trees,
``test_generic_lengths`` and ``test_params`` for ``DepTree`` and ``CKY_CRF``), run on structtorch
through an adapter with torch-struct's conventions: ``DepTree`` potentials (B, N, N) (or labeled
(B, N, N, L)) with the root arcs on the diagonal and ``lengths`` counting words, ``CKY_CRF`` span
potentials (B, N, N, NT) as structtorch's, the Log and Max semirings, ``sum``, ``marginals``,
``score``, and torch-struct's ``to_parts``/``from_parts``. Their ``enumerate`` oracle is not in the
released torch-struct (0.5): brute-force enumeration stands in for it. Where torch-struct itself
is installed, its results must agree with the adapter's too.

``test_kmax`` runs on ``st.dependency_kbest``. Not mapped: the semirings that are
not Log or Max (entropy, sparsemax, sampled: structtorch has ``entropy`` and ``sample`` instead)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as hst
from test_trees import _dependency_trees  # every dependency tree of N words

import structtorch as st

torch_struct = pytest.importorskip("torch_struct")


class DepTree:
    """torch-struct's ``DepTree(semiring)`` on structtorch: ``semiring`` "log" or "max"."""

    def __init__(self, semiring: str = "log", multiroot: bool = True, projective: bool = True):
        self.semiring, self.multiroot, self.projective = semiring, multiroot, projective

    @staticmethod
    def arcs(vals: torch.Tensor) -> torch.Tensor:
        """(B, N, N) root-on-diagonal potentials as structtorch arc scores (B, N + 1, N + 1)."""
        B, N = vals.shape[:2]
        arcs = vals.new_zeros(B, N + 1, N + 1)
        arcs[:, 1:, 1:] = vals
        arcs[:, 0, 1:] = vals.diagonal(dim1=1, dim2=2)
        return arcs

    @staticmethod
    def parts(heads: torch.Tensor, N: int) -> torch.Tensor:
        """torch-struct's parts (B, N, N) (root arcs on the diagonal) of heads (B, N + 1)."""
        parts = torch.zeros(len(heads), N + 1, N + 1, dtype=torch.float64)
        m = torch.arange(1, N + 1)
        parts[torch.arange(len(heads))[:, None], heads[:, 1:].clamp(min=0), m] = (heads[:, 1:] >= 0).double()
        out = parts[:, 1:, 1:].clone()
        out.diagonal(dim1=1, dim2=2).copy_(parts[:, 0, 1:])
        return out

    def reduce(self, vals: torch.Tensor) -> torch.Tensor:
        """Labeled potentials (B, N, N, L) summed over the labels in the semiring."""
        if vals.dim() == 3:
            return vals
        return vals.logsumexp(-1) if self.semiring == "log" else vals.amax(-1)

    def sum(self, vals: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        kw = dict(projective=self.projective, single_root=not self.multiroot)
        arcs = self.arcs(self.reduce(vals))
        if self.semiring == "log":
            return st.dependency_log_partition(arcs, lengths, **kw)
        return st.dependency_viterbi(arcs, lengths, **kw)[0]

    def marginals(self, vals: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        leaf = vals.detach().requires_grad_()
        (grad,) = torch.autograd.grad(self.sum(leaf, lengths).sum(), leaf)
        return grad

    def score(self, vals: torch.Tensor, parts: torch.Tensor) -> torch.Tensor:
        return (vals * parts).flatten(1).sum(1)


class CKY_CRF(DepTree):  # noqa: N801 - torch-struct's name
    """torch-struct's ``CKY_CRF(semiring)`` on structtorch (span potentials (B, N, N, NT))."""

    def sum(self, vals: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        if self.semiring == "log":
            return st.cky_log_partition(vals, lengths)
        return st.cky_viterbi(vals, lengths)[0]


def _leaf(x: torch.Tensor) -> torch.Tensor:
    """A fresh leaf that requires grad: what torch-struct's charts expect of their input (they fill
    views of it in place, which autograd refuses on a leaf they mark themselves)."""
    return x.detach().clone().requires_grad_()


def _rand(labels: int = 0, low: int = 2) -> tuple[torch.Tensor, tuple[int, int]]:
    """torch-struct's ``_rand``: batch and N in [2, 4], uniform potentials."""
    batch, N = (int(x) for x in torch.randint(low, 5, (2,)))
    shape = (batch, N, N) + ((labels,) if labels else ())
    return torch.rand(shape, dtype=torch.float64), (batch, N)


def enumerate_deptree(vals: torch.Tensor, semiring: str, projective: bool = True,
                      multiroot: bool = True) -> torch.Tensor:
    """The oracle torch-struct's tests call ``struct.enumerate(vals)[0]``, by brute force."""
    out = []
    for b in range(vals.shape[0]):
        N = vals.shape[1]
        scores = torch.stack([sum(vals[b, h - 1 if h else m - 1, m - 1] for m, h in enumerate(t, 1))
                              for t in _dependency_trees(N, not multiroot, projective).tolist()])
        out.append(scores.logsumexp(0) if semiring == "log" else scores.max())
    return torch.stack(out)


@settings(max_examples=30, deadline=None)
@given(hst.sampled_from(["log", "max"]), hst.integers(0, 2**16))
def test_labeled_proj_deptree(semiring, seed):
    torch.manual_seed(seed)
    struct = DepTree(semiring)
    arc_scores = torch.rand(3, 5, 5, 7, dtype=torch.float64)
    count = enumerate_deptree(struct.reduce(arc_scores), semiring)
    alpha = struct.sum(arc_scores)
    assert torch.isclose(count, alpha).all()
    struct = DepTree("max")
    max_score = struct.sum(arc_scores)
    argmax = struct.marginals(arc_scores)
    assert torch.isclose(max_score, struct.score(arc_scores, argmax)).all()
    their = torch_struct.DepTree(torch_struct.LogSemiring if semiring == "log" else torch_struct.MaxSemiring)
    assert torch.allclose(their.sum(_leaf(arc_scores)), DepTree(semiring).sum(arc_scores))


@settings(max_examples=30, deadline=None)
@given(hst.integers(0, 2**16))
def test_non_proj(seed):
    """Single-root non-projective trees (torch-struct's deptree_part with multi_root=False)."""
    torch.manual_seed(seed)
    vals, (batch, N) = _rand()
    struct = DepTree("log", multiroot=False, projective=False)
    alpha = struct.sum(vals)
    count = enumerate_deptree(vals, "log", projective=False, multiroot=False)
    assert alpha.shape == count.shape == (batch,)
    assert torch.isclose(count, alpha).all()
    # torch-struct's matrix-tree theorem adds eps = 1e-5 to every weight: close, not equal
    assert torch.allclose(torch_struct.deptree_part(vals, multi_root=False), alpha, atol=1e-3)
    marginals = torch_struct.deptree_nonproj(vals, multi_root=False)
    assert torch.allclose(marginals, struct.marginals(vals), atol=1e-3)


@settings(max_examples=30, deadline=None)
@given(hst.sampled_from(["log", "max"]), hst.integers(0, 2**16))
def test_generic_a(semiring, seed):
    """sum = enumerate, and the Max semiring's score = the score of its argmax parts."""
    torch.manual_seed(seed)
    vals, (batch, N) = _rand()
    alpha = DepTree(semiring).sum(vals)
    count = enumerate_deptree(vals, semiring)
    assert alpha.shape[0] == batch and torch.isclose(count, alpha).all()
    struct = DepTree("max")
    assert torch.isclose(struct.sum(vals), struct.score(vals, struct.marginals(vals))).all()


@settings(max_examples=30, deadline=None)
@given(hst.sampled_from(["log", "max"]), hst.integers(0, 2**16))
def test_cky(semiring, seed):
    """CKY_CRF's sum against torch-struct's own and against enumeration of the bracketings."""
    torch.manual_seed(seed)
    vals, (batch, N) = _rand(labels=int(torch.randint(1, 4, ())))
    alpha = CKY_CRF(semiring).sum(vals)
    their = torch_struct.CKY_CRF(torch_struct.LogSemiring if semiring == "log" else torch_struct.MaxSemiring)
    assert torch.allclose(their.sum(_leaf(vals)), alpha)

    def brackets(i, j):
        if i == j:
            return [[(i, i)]]
        return [a + b + [(i, j)] for k in range(i, j) for a in brackets(i, k) for b in brackets(k + 1, j)]

    reduced = vals.logsumexp(-1) if semiring == "log" else vals.amax(-1)
    for b in range(batch):
        scores = torch.stack([sum(reduced[b, i, j] for i, j in t) for t in brackets(0, N - 1)])
        want = scores.logsumexp(0) if semiring == "log" else scores.max()
        assert torch.isclose(alpha[b], want)


@settings(max_examples=30, deadline=None)
@given(hst.data(), hst.integers(1, 20))
def test_generic_lengths(data, seed):
    model = data.draw(hst.sampled_from([CKY_CRF, DepTree]))
    torch.manual_seed(seed)
    vals, (batch, N) = _rand(labels=3 if model is CKY_CRF else 0)
    lengths = torch.tensor([data.draw(hst.integers(2, N)) for _ in range(batch - 1)] + [N])
    m = model("max").marginals(vals, lengths=lengths)
    maxes = model().score(vals, m)
    part = model().sum(vals, lengths=lengths)
    assert (maxes <= part).all()
    m_part = model("max").sum(vals, lengths=lengths)
    assert torch.isclose(maxes, m_part).all(), maxes - m_part
    if model is DepTree:  # torch-struct's parts round trip of the argmax
        seqs, extra = torch_struct.DepTree.from_parts(m)
        full = torch_struct.DepTree.to_parts(seqs, extra, lengths=lengths)
        assert (full == m.type_as(full)).all()
        their = torch_struct.DepTree(torch_struct.LogSemiring).sum(_leaf(vals), lengths=lengths)
        assert torch.allclose(their, part)


@settings(max_examples=20, deadline=None)
@given(hst.sampled_from([DepTree, CKY_CRF]), hst.integers(1, 10))
def test_params(model, seed):
    torch.manual_seed(seed)
    vals, _ = _rand(labels=2 if model is CKY_CRF else 0)
    vals.requires_grad_(True)
    model("log").sum(vals).sum().backward()
    assert vals.grad is not None and torch.isfinite(vals.grad).all()


@settings(max_examples=30, deadline=None)
@given(hst.integers(0, 2**16))
def test_kmax(seed):
    """torch-struct's KMaxSemiring(2) on DepTree: the best equals Max's, the second is no better,
    the first argmax equals Max's and the second differs (st.dependency_kbest)."""
    torch.manual_seed(seed)
    vals, _ = _rand()
    arcs = DepTree.arcs(vals)
    scores, heads = st.dependency_kbest(arcs, 2)
    max1 = DepTree("max").sum(vals)
    assert (scores[:, 0] == max1).all() and (scores[:, 1] <= max1).all()
    picked = DepTree("max").score(vals, DepTree.parts(heads[:, 1], vals.shape[1]))
    assert torch.allclose(picked, scores[:, 1])  # the second tree scores its value
    assert (heads[:, 1] != heads[:, 0]).any(1).all()
