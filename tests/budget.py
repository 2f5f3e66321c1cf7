"""The public calls whose GPU launches and host syncs are held to a budget, as functions of the
sequence length T, under every option set of each call (test_launch_budget.py asserts the budgets;
benchmarks/launches.py prints the table).

``CALLS["name"]`` runs a call with its defaults and ``CALLS["name [option]"]`` with one option
set (see :data:`OPTIONS`). Each entry builds small inputs and returns a closure running one call
(forward and backward where the name says so, as ``torch.autograd.grad``: a training step that
sets the gradients to None, as ``optimizer.zero_grad()`` does, accumulates nothing).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

import structtorch as st

B, N, S = 2, 4, 3  # batch, labels, longest segment (the interpreter runs the programs one by one)
PLIF_POINTS = 4

Options = Callable[[int], dict]
Make = Callable[[int, dict], Callable[[], object]]


def _gen(T: int, k: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(100 * T + k)


def _randn(T: int, k: int, *shape: int, grad: bool = False) -> torch.Tensor:
    return torch.randn(*shape, generator=_gen(T, k), dtype=torch.float64, requires_grad=grad)


def _lengths(T: int) -> torch.Tensor:
    return torch.tensor([T, 1])


def _target(T: int) -> torch.Tensor:
    return torch.randint(0, N, (B, T), generator=torch.Generator().manual_seed(T + 1))


def _word_mask(T: int, lengths: torch.Tensor) -> torch.Tensor:
    """A first-sub-token mask: [CLS] off, every third piece a continuation, padding beyond."""
    t = torch.arange(T)
    return (t > 0) & (t % 3 != 2) & (t < lengths[:, None])


def _backward(out: torch.Tensor, *inputs: torch.Tensor) -> None:
    torch.autograd.grad(out.sum(), inputs)


def _h(counts: torch.Tensor) -> torch.Tensor:
    """A custom h: nonlinear and sign-changing."""
    return 3.0 * torch.sin(counts)


def _costs(T: int, k: int, *shape: int) -> torch.Tensor:
    """Non-negative integer costs in float64 (the table takes them)."""
    return torch.randint(0, 4, shape, generator=_gen(T, k)).double()


# a table sized by the values of weights or costs reads them on the host unless max_count sizes it
# (a bound from the shapes: 3 per position here)


# -- option sets: T -> keyword arguments (the key "transitions" replaces the positional transitions)

CHAIN = {
    "": lambda T: {"lengths": _lengths(T)},
    "start/end": lambda T: {"lengths": _lengths(T), "start": _randn(T, 3, N), "end": _randn(T, 4, B, N)},
    "mask": lambda T: {"mask": _word_mask(T, _lengths(T))},
    "transitions (B, T-1, N, N)": lambda T: {"lengths": _lengths(T), "transitions": _randn(T, 5, B, T - 1, N, N)},
}

LOSS = {  # both rescalings
    "": lambda T: {},
    "h callable": lambda T: {"h": _h},
    "h tensor": lambda T: {"h": _h(torch.arange(T + 1.0, dtype=torch.float64))},
    "weights": lambda T: {"weights": torch.randint(0, 3, (B, T), generator=_gen(T, 6)), "max_count": 3 * T},
    "cost": lambda T: {"cost": _costs(T, 7, B, T, N), "max_count": 3 * T},
    "algorithm hamming": lambda T: {"algorithm": "hamming"},
}

CHAIN_LOSS = {
    **LOSS,
    "pair_cost": lambda T: {"pair_cost": _costs(T, 8, B, T - 1, N, N), "max_count": 3 * T},
    "start/end": lambda T: {"start": _randn(T, 3, N), "end": _randn(T, 4, B, N)},
    "mask": lambda T: {"mask": _word_mask(T, _lengths(T)), "lengths": None},
    "ignore_index": lambda T: {"target": torch.where(torch.arange(T) % 3 == 1, -100, _target(T)),
                               "ignore_index": -100},
}

WINDOW_LOSS = {**LOSS, "pair_cost": CHAIN_LOSS["pair_cost"]}

SEMIMARKOV = {
    "": lambda T: {},
    "length_scores": lambda T: {"length_scores": _randn(T, 9, S, N)},
    "boundary": lambda T: {"boundary": _randn(T, 10, B, T, N)},
    "segment_scores": lambda T: {"segment_scores": _randn(T, 11, B, T, S, N)},
    "start/end": lambda T: {"start": _randn(T, 3, N), "end": _randn(T, 4, B, N)},
}

PLIF = {"segment_plif": lambda T: {"segment_plif": st.SegmentPLiF(
    torch.rand(B, T, N, generator=_gen(T, 12), dtype=torch.float64), _randn(T, 13, N, PLIF_POINTS), 0.0, 1.0)}}

SEMIMARKOV_LOSS = {
    **{key: value for key, value in LOSS.items() if key != "cost"},
    **{key: value for key, value in SEMIMARKOV.items() if key},
    **PLIF,
    "loss segment": lambda T: {"loss": "segment"},
    "loss boundary": lambda T: {"loss": "boundary"},
    "loss zero_one": lambda T: {"loss": "zero_one"},
    "loss segment, h callable": lambda T: {"loss": "segment", "h": _h},
}

CRF = {
    "": lambda T: {},
    "constraints": lambda T: {"constraints": torch.arange(N)[:, None] <= torch.arange(N) + 1},
}


# -- the calls: (T, keyword arguments) -> a closure running one call


def _chain_call(run: Callable, grad: bool = False) -> Make:
    def make(T: int, kw: dict) -> Callable[[], object]:
        u, a = _randn(T, 1, B, T, N, grad=grad), _randn(T, 2, N, N, grad=grad)
        a = kw.pop("transitions", a)
        if grad:
            a.requires_grad_(True)
        return lambda: run(u, a, kw)
    return make


def _marginals_backward(T: int, kw: dict) -> Callable[[], object]:
    weights = _randn(T, 14, B, T, N)
    return _chain_call(lambda u, a, kw: _backward(st.marginals(u, a, **kw) * weights, u, a), True)(T, kw)


def _loss_augmented(rescaling: str) -> Make:
    def make(T: int, kw: dict) -> Callable[[], object]:
        u, a = _randn(T, 1, B, T, N), _randn(T, 2, N, N)
        target = kw.pop("target", None)
        target = _target(T) if target is None else target
        kw.setdefault("lengths", _lengths(T))
        return lambda: st.loss_augmented(u, a, target, rescaling=rescaling, **kw)
    return make


def _window_loss_augmented(rescaling: str) -> Make:
    def make(T: int, kw: dict) -> Callable[[], object]:
        scores, target, lengths = _randn(T, 1, B, T, N, N, N), _target(T), _lengths(T)
        return lambda: st.window_loss_augmented(scores, target, rescaling=rescaling, lengths=lengths, **kw)
    return make


def _window_viterbi(T: int, kw: dict) -> Callable[[], object]:
    scores, lengths = _randn(T, 1, B, T, N, N, N), _lengths(T)
    return lambda: st.window_viterbi(scores, lengths=lengths, **kw)


def _semimarkov_call(run: Callable, grad: bool = False) -> Make:
    def make(T: int, kw: dict) -> Callable[[], object]:
        content, trans = _randn(T, 1, B, T, N, grad=grad), _randn(T, 2, N, N, grad=grad)
        lengths = _lengths(T)
        return lambda: run(content, trans, lengths, kw)
    return make


def _segmentation(T: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A target segmentation: segments of two positions, labels cycling."""
    labels = torch.arange(T).div(2, rounding_mode="floor").remainder(N).expand(B, T)
    return labels, (torch.arange(T) % 2 == 0).expand(B, T)


def _semimarkov_loss_augmented(rescaling: str) -> Make:
    def make(T: int, kw: dict) -> Callable[[], object]:
        c, a, lengths = _randn(T, 1, B, T, N), _randn(T, 2, N, N), _lengths(T)
        labels, starts = _segmentation(T)
        return lambda: st.semimarkov_loss_augmented(c, a, labels, starts, max_len=S, lengths=lengths,
                                                    rescaling=rescaling, **kw)
    return make


def _crf(T: int, kw: dict) -> tuple[st.LinearChainCRF, torch.Tensor, torch.Tensor]:
    crf = st.LinearChainCRF(N, **kw).double()
    return crf, _randn(T, 1, B, T, N, grad=True), _word_mask(T, _lengths(T))


def _crf_nll(T: int, kw: dict) -> Callable[[], object]:
    crf, u, mask = _crf(T, kw)
    tags = _target(T).clamp(max=1)  # allowed under the constraints' transitions
    return lambda: _backward(crf(u, tags, mask), u, *crf.parameters())


def _crf_decode(T: int, kw: dict) -> Callable[[], object]:
    crf, u, mask = _crf(T, kw)
    return lambda: crf.decode(u.detach(), mask)


def _hinge(rescaling: str) -> Make:
    def make(T: int, kw: dict) -> Callable[[], object]:
        u, a = _randn(T, 1, B, T, N, grad=True), _randn(T, 2, N, N, grad=True)
        loss = st.StructuredHingeLoss(rescaling=rescaling, **kw)
        target = _target(T) if "ignore_index" not in kw else torch.where(torch.arange(T) % 3 == 1, -100, _target(T))
        lengths = _lengths(T)
        return lambda: _backward(loss(u, a, target, lengths=lengths), u, a)
    return make


HINGE = {"": lambda T: {}, "h callable": lambda T: {"h": _h}, "ignore_index": lambda T: {"ignore_index": -100}}

_SM = dict(max_len=S)

BASE: dict[str, tuple[Make, dict[str, Options]]] = {
    "viterbi": (_chain_call(lambda u, a, kw: st.viterbi(u, a, **kw)), CHAIN),
    "log_partition fwd+bwd": (_chain_call(lambda u, a, kw: _backward(st.log_partition(u, a, **kw), u, a), True),
                              CHAIN),
    "marginals": (_chain_call(lambda u, a, kw: st.marginals(u, a, **kw)), CHAIN),
    "marginals fwd+bwd": (_marginals_backward, CHAIN),
    "kbest": (_chain_call(lambda u, a, kw: st.kbest(u, a, 3, **kw)), CHAIN),
    "sample": (_chain_call(lambda u, a, kw: st.sample(u, a, 2, generator=torch.Generator().manual_seed(0), **kw)),
               CHAIN),
    "window_viterbi": (_window_viterbi, {"": lambda T: {}}),
    "loss_augmented margin": (_loss_augmented("margin"), CHAIN_LOSS),
    "loss_augmented slack": (_loss_augmented("slack"), CHAIN_LOSS),
    "window_loss_augmented margin": (_window_loss_augmented("margin"), WINDOW_LOSS),
    "window_loss_augmented slack": (_window_loss_augmented("slack"), WINDOW_LOSS),
    "semimarkov_viterbi": (_semimarkov_call(lambda c, a, lengths, kw: st.semimarkov_viterbi(
        c, a, lengths=lengths, **_SM, **kw)), {**SEMIMARKOV, **PLIF}),
    "semimarkov_log_partition fwd+bwd": (_semimarkov_call(lambda c, a, lengths, kw: _backward(
        st.semimarkov_log_partition(c, a, lengths=lengths, **_SM, **kw), c, a), True), {**SEMIMARKOV, **PLIF}),
    "semimarkov_kbest": (_semimarkov_call(lambda c, a, lengths, kw: st.semimarkov_kbest(
        c, a, 3, lengths=lengths, **_SM, **kw)), SEMIMARKOV),
    "semimarkov_sample": (_semimarkov_call(lambda c, a, lengths, kw: st.semimarkov_sample(
        c, a, 2, lengths=lengths, generator=torch.Generator().manual_seed(0), **_SM, **kw)), SEMIMARKOV),
    "semimarkov_loss_augmented margin": (_semimarkov_loss_augmented("margin"), SEMIMARKOV_LOSS),
    "semimarkov_loss_augmented slack": (_semimarkov_loss_augmented("slack"), SEMIMARKOV_LOSS),
    "LinearChainCRF NLL fwd+bwd": (_crf_nll, {**CRF, "ignore_index": lambda T: {"ignore_index": -100}}),
    "LinearChainCRF decode": (_crf_decode, CRF),
    "StructuredHingeLoss margin fwd+bwd": (_hinge("margin"), HINGE),
    "StructuredHingeLoss slack fwd+bwd": (_hinge("slack"), HINGE),
}


def base_name(name: str) -> str:
    """The call of an entry of :data:`CALLS` ("viterbi [mask]" -> "viterbi")."""
    return name.split(" [")[0]


def _entry(make: Make, options: Options) -> Callable[[int], Callable[[], object]]:
    return lambda T: make(T, options(T))


def _heads(T: int) -> torch.Tensor:
    """Gold heads (B, T + 1) of sentences of T and 1 words: a chain to the root."""
    heads = torch.arange(-1, T).expand(B, T + 1).clone()
    heads[1, 2:] = -1
    return heads


def _tree_call(run: Callable) -> Make:
    """A call on dependency arc scores (B, T + 1, T + 1) (or span scores (B, T, T, N) for CKY)."""
    def make(T: int, kw: dict) -> Callable[[], object]:
        arcs, spans = _randn(T, 12, B, T + 1, T + 1, grad=True), _randn(T, 13, B, T, T, N, grad=True)
        return lambda: run(arcs, spans, _lengths(T), kw)

    return make


TREES = {"": lambda T: {}, "single_root": lambda T: {"single_root": True}}
TREE_CALLS = {
    "dependency_viterbi": (_tree_call(lambda a, s, n, kw: st.dependency_viterbi(a, n, **kw)), TREES),
    "dependency_log_partition fwd+bwd": (_tree_call(lambda a, s, n, kw: _backward(
        st.dependency_log_partition(a, n, **kw), a)), TREES),
    "DependencyCRF NLL fwd+bwd": (_tree_call(lambda a, s, n, kw: _backward(
        st.DependencyCRF(**kw)(a, _heads(a.shape[1] - 1), n), a)), TREES),
    "cky_viterbi": (_tree_call(lambda a, s, n, kw: st.cky_viterbi(s, n)), {"": lambda T: {}}),
    "cky_log_partition fwd+bwd": (_tree_call(lambda a, s, n, kw: _backward(st.cky_log_partition(s, n), s)),
                                  {"": lambda T: {}}),
}
BASE.update(TREE_CALLS)


CALLS: dict[str, Callable[[int], Callable[[], object]]] = {
    (name if not key else f"{name} [{key}]"): _entry(make, options)
    for name, (make, sets) in BASE.items() for key, options in sets.items()
}
