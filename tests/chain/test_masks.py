"""Any (B, T) mask (issue 25): every chain function and every CRF method on an interleaved mask
equals the same computation on the sequences compacted by hand, with results back at the mask's
positions; masks with the first position off and all-off rows included."""

from __future__ import annotations

import numpy as np
import torch
from brute import Instance, instances
from hypothesis import given
from hypothesis import strategies as st_

import structtorch as st


@st_.composite
def masked(draw):
    """(instance with lengths = T, mask (B, T) bool: random bits, often with the first column off
    and an all-off row)."""
    inst = draw(instances(max_t=6))
    B, T, _ = inst.unary.shape
    rng = np.random.default_rng(draw(st_.integers(0, 2**32 - 1)))
    mask = torch.from_numpy(rng.random((B, T)) < draw(st_.sampled_from([0.3, 0.6, 0.9])))
    if T and draw(st_.booleans()):
        mask[:, 0] = False
    if draw(st_.booleans()):
        mask[int(rng.integers(B))] = False
    return inst, mask


def compacted(inst: Instance, mask: torch.Tensor) -> Instance:
    """The chain over each row's masked-in positions, moved to the front by hand (the transition
    between masked-in positions p < q is the one into q)."""
    B, T, N = inst.unary.shape
    unary = torch.zeros_like(inst.unary)
    trans = inst.transitions if inst.transitions.dim() == 2 else torch.zeros_like(inst.transitions)
    for b in range(B):
        p = mask[b].nonzero().flatten()
        unary[b, :len(p)] = inst.unary[b, p]
        if inst.transitions.dim() == 4 and len(p) > 1:
            trans[b, :len(p) - 1] = inst.transitions[b, p[1:] - 1]
    return Instance(unary, trans, inst.start, inst.end, mask.sum(1))


def spread(x: torch.Tensor, mask: torch.Tensor, fill) -> torch.Tensor:
    """Per-position results (B, T, ...) of the compacted chains back at the mask's positions."""
    out = torch.full_like(x, fill)
    for b in range(mask.shape[0]):
        p = mask[b].nonzero().flatten()
        out[b, p] = x[b, :len(p)]
    return out


def gather(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-position inputs (B, T, ...) at the mask's positions, moved to the front."""
    out = torch.zeros_like(x)
    for b in range(mask.shape[0]):
        p = mask[b].nonzero().flatten()
        out[b, :len(p)] = x[b, p]
    return out


def close(a, b):
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5, equal_nan=True)


def fixed_case() -> tuple[Instance, torch.Tensor]:
    """An interleaved mask with the first position off, a full row and an all-off row."""
    g = torch.Generator().manual_seed(0)
    B, T, N = 3, 6, 3
    inst = Instance(torch.randn(B, T, N, generator=g, dtype=torch.float64),
                    torch.randn(B, T - 1, N, N, generator=g, dtype=torch.float64),
                    torch.randn(N, generator=g, dtype=torch.float64), None, torch.full((B,), T))
    mask = torch.tensor([[0, 1, 0, 1, 1, 0], [1] * 6, [0] * 6], dtype=torch.bool)
    return inst, mask


@given(case=masked(), seed=st_.integers(0, 2**31))
def test_chain_functions_on_any_mask(case, seed):
    """On the default backend; the interpreted triton backend (the device path) below."""
    check_chain_functions(*case, seed)


def test_chain_functions_on_an_interleaved_mask(backend):
    check_chain_functions(*fixed_case(), seed=1)
    check_gradients(*fixed_case())


def check_chain_functions(inst: Instance, mask: torch.Tensor, seed: int) -> None:
    ref = compacted(inst, mask)
    B, T, N = inst.unary.shape
    kw = {"start": inst.start, "end": inst.end}
    args, ref_args = (inst.unary, inst.transitions), (ref.unary, ref.transitions)
    score, path = st.viterbi(*args, mask=mask, **kw)
    ref_score, ref_path = st.viterbi(*ref_args, lengths=ref.lengths, **kw)
    close(score, ref_score)
    assert torch.equal(path, spread(ref_path, mask, -1))
    close(st.log_partition(*args, mask=mask, **kw), st.log_partition(*ref_args, lengths=ref.lengths, **kw))
    close(st.marginals(*args, mask=mask, **kw), spread(st.marginals(*ref_args, lengths=ref.lengths, **kw), mask, 0))
    scores, paths = st.kbest(*args, 3, mask=mask, **kw)
    ref_scores, ref_paths = st.kbest(*ref_args, 3, lengths=ref.lengths, **kw)
    close(scores, ref_scores)
    assert torch.equal(paths, spread(ref_paths.transpose(1, 2), mask, -1).transpose(1, 2))
    rng = np.random.default_rng(seed)
    labels = torch.from_numpy(rng.integers(0, N, (B, T)))
    labels[~mask] = -100  # anything outside the mask
    close(st.path_score(*args, labels, mask=mask, **kw),
          st.path_score(*ref_args, gather(labels, mask).clamp(min=0), lengths=ref.lengths, **kw))
    close(st.train.chain_nll(*args, labels, mask=mask, reduction="none", **kw),
          st.train.chain_nll(*ref_args, gather(labels, mask).clamp(min=0), lengths=ref.lengths, reduction="none",
                             **kw))
    weights = torch.from_numpy(rng.integers(0, 3, (B, T)))
    target = torch.where(mask, spread(ref_path, mask, -1).clamp(min=0), -100)  # a feasible target
    for rescaling in ("margin", "slack") if bool(torch.isfinite(ref_score).all()) else ():
        value, found, count = st.loss_augmented(*args, target, mask=mask, weights=weights,
                                                rescaling=rescaling, **kw)
        ref_value, ref_found, ref_count = st.loss_augmented(
            *ref_args, ref_path.clamp(min=0), lengths=ref.lengths, weights=gather(weights, mask),
            rescaling=rescaling, **kw)
        close(value, ref_value)
        assert torch.equal(found, spread(ref_found, mask, -1)) and torch.equal(count, ref_count)
    draws = st.sample(*args, 4, mask=mask, generator=torch.Generator().manual_seed(seed), **kw)
    ref_draws = st.sample(*ref_args, 4, lengths=ref.lengths, generator=torch.Generator().manual_seed(seed), **kw)
    assert torch.equal(draws, spread(ref_draws.permute(1, 2, 0), mask, -1).permute(2, 0, 1))


@given(case=masked())
def test_gradients_on_any_mask(backend, case):
    check_gradients(*case)


def check_gradients(inst: Instance, mask: torch.Tensor) -> None:
    """d logZ / d unary is the marginals at the mask's positions and 0 elsewhere; the transitions'
    gradient equals the compacted chain's (per-position: at the entries into masked-in positions)."""
    unary = inst.unary.double().requires_grad_()
    trans = inst.transitions.double().requires_grad_()
    start, end = (None if x is None else x.double() for x in (inst.start, inst.end))
    inst = Instance(inst.unary, inst.transitions, start, end, inst.lengths)
    logz = st.log_partition(unary, trans, mask=mask, start=inst.start, end=inst.end)
    finite = torch.isfinite(logz)
    grads = torch.autograd.grad(torch.where(finite, logz, 0).sum(), (unary, trans), allow_unused=True)
    ref = compacted(Instance(unary.detach(), trans.detach(), inst.start, inst.end, inst.lengths), mask)
    ref_unary, ref_trans = ref.unary.requires_grad_(), ref.transitions.requires_grad_()
    ref_logz = st.log_partition(ref_unary, ref_trans, lengths=ref.lengths, start=inst.start, end=inst.end)
    ref_grads = torch.autograd.grad(torch.where(finite, ref_logz, 0).sum(), (ref_unary, ref_trans))
    close(grads[0], spread(ref_grads[0], mask, 0))
    if trans.dim() == 2:
        close(grads[1], ref_grads[1])
        return
    want = torch.zeros_like(trans)
    for b in range(mask.shape[0]):
        p = mask[b].nonzero().flatten()
        want[b, p[1:] - 1] = ref_grads[1][b, :max(len(p) - 1, 0)]
    close(grads[1], want)


@given(case=masked(), seed=st_.integers(0, 2**31))
def test_crf_methods_on_any_mask(case, seed):
    """On the default backend (the mask's handling is the same on every backend)."""
    check_crf_methods(*case, seed)


def test_crf_methods_on_an_interleaved_mask(backend):
    check_crf_methods(*fixed_case(), seed=2)


def check_crf_methods(inst: Instance, mask: torch.Tensor, seed: int) -> None:
    B, T, N = inst.unary.shape
    crf = st.LinearChainCRF(N).to(inst.unary.dtype)
    emissions = inst.unary.clamp(min=-1e3)  # a CRF's emissions are finite
    tags = torch.from_numpy(np.random.default_rng(seed).integers(0, N, (B, T)))
    tags[~mask] = -100  # the Hugging Face ignore index outside the mask
    moved, lengths = gather(emissions, mask), mask.sum(1)
    close(crf(emissions, tags, mask), crf(moved, gather(tags, mask).clamp(min=0), lengths=lengths))
    close(crf.log_likelihood(emissions, tags, mask), -crf(moved, gather(tags, mask).clamp(min=0), lengths=lengths))
    score, path = crf.decode(emissions, mask)
    ref_score, ref_path = crf.decode(moved, lengths=lengths)
    close(score, ref_score)
    assert torch.equal(path, spread(ref_path, mask, -1))
    scores, paths = crf.decode(emissions, mask, k=2)
    ref_scores, ref_paths = crf.decode(moved, lengths=lengths, k=2)
    close(scores, ref_scores)
    assert torch.equal(paths, spread(ref_paths.transpose(1, 2), mask, -1).transpose(1, 2))
    node, edge = crf.marginals(emissions, mask, edges=True)
    ref_node, ref_edge = crf.marginals(moved, lengths=lengths, edges=True)
    close(node, spread(ref_node, mask, 0))
    for b in range(B):  # the edge of consecutive masked-in positions p < q sits at p
        p = mask[b].nonzero().flatten()
        want = torch.zeros_like(edge[b])
        want[p[:-1]] = ref_edge[b, :max(len(p) - 1, 0)]
        close(edge[b], want)
    close(crf.entropy(emissions, mask), crf.entropy(moved, lengths=lengths))
    draws = crf.sample(emissions, 3, mask, generator=torch.Generator().manual_seed(seed))
    ref_draws = crf.sample(moved, 3, lengths=lengths, generator=torch.Generator().manual_seed(seed))
    assert torch.equal(draws, spread(ref_draws.permute(1, 2, 0), mask, -1).permute(2, 0, 1))
