"""LinearChainCRF's user-facing API: masks with any padding, reductions, both sign conventions,
time-first layout, k-best decoding, tagging-scheme constraints (against enumeration of the valid
sequences only) and a migration test against pytorch-crf."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as hs

import structtorch as st
from structtorch.nn.constraints import allowed_transitions

SCHEMES = {
    "BIO": ["O", "B-A", "I-A", "B-B", "I-B"],
    "IOB1": ["O", "B-A", "I-A", "B-B", "I-B"],
    "BIOES": ["O", "B-A", "I-A", "E-A", "S-A", "B-B", "E-B"],
    "BILOU": ["O", "B-A", "I-A", "L-A", "U-A"],
}


def valid(tags: list[str], scheme: str) -> bool:
    """An independent statement of each scheme's rules, tag by tag."""
    prev = "O"
    for tag in [*tags, "O"]:  # the end of a sentence acts as an O
        p, _, pk = prev.partition("-")
        c, _, ck = tag.partition("-")
        if scheme == "BIO" and c == "I" and not (p in "BI" and p != "O" and pk == ck):
            return False
        if scheme == "IOB1" and c == "B" and not (p in ("B", "I") and pk == ck):
            return False
        if scheme in ("BIOES", "BILOU"):
            last, single = ("E", "S") if scheme == "BIOES" else ("L", "U")
            inside_chunk = p in ("B", "I")
            if inside_chunk != (c in ("I", last)) or (inside_chunk and pk != ck):
                return False
            del single
        prev = tag
    return True


def random_batch(B: int, T: int, N: int, seed: int, left: bool):
    g = torch.Generator().manual_seed(seed)
    emissions = torch.randn(B, T, N, generator=g, dtype=torch.float64)
    tags = torch.randint(0, N, (B, T), generator=g)
    lengths = torch.randint(0, T + 1, (B,), generator=g)
    first = (T - lengths) * left if left else torch.zeros_like(lengths)
    t = torch.arange(T)
    mask = (t >= first[:, None]) & (t < (first + lengths)[:, None])
    return emissions, tags, lengths, first, mask


def left_align(x: torch.Tensor, first: torch.Tensor, lengths: torch.Tensor, fill=0):
    out = torch.full_like(x, fill)
    for b in range(x.shape[0]):
        L, f = int(lengths[b]), int(first[b])
        out[b, :L] = x[b, f:f + L]
    return out


@given(B=hs.integers(1, 4), T=hs.integers(0, 6), N=hs.integers(1, 4), seed=hs.integers(0, 10**6),
       left=hs.booleans())
def test_mask_with_left_or_right_padding_equals_lengths(B, T, N, seed, left):
    crf = st.LinearChainCRF(N).double()
    emissions, tags, lengths, first, mask = random_batch(B, T, N, seed, left)
    aligned_e, aligned_t = left_align(emissions, first, lengths), left_align(tags, first, lengths)
    nll = crf(emissions, tags, mask)
    torch.testing.assert_close(nll, crf(aligned_e, aligned_t, lengths=lengths))
    torch.testing.assert_close(crf.log_partition(emissions, mask), crf.log_partition(aligned_e, lengths=lengths))
    score, path = crf.decode(emissions, mask)
    ref_score, ref_path = crf.decode(aligned_e, lengths=lengths)
    torch.testing.assert_close(score, ref_score)
    assert torch.equal(left_align(path, first, lengths, -1), ref_path)
    assert (path[~mask] == -1).all()
    marg = crf.marginals(emissions, mask)
    torch.testing.assert_close(left_align(marg, first, lengths), crf.marginals(aligned_e, lengths=lengths))
    assert (marg[~mask] == 0).all()


def test_reductions_and_both_sign_conventions():
    crf = st.LinearChainCRF(3).double()
    emissions, tags, lengths, _, mask = random_batch(4, 5, 3, 0, False)
    nll = crf(emissions, tags, mask)
    assert (nll >= 0).all()
    torch.testing.assert_close(crf(emissions, tags, mask, reduction="sum"), nll.sum())
    torch.testing.assert_close(crf(emissions, tags, mask, reduction="mean"), nll.mean())
    torch.testing.assert_close(crf(emissions, tags, mask, reduction="token_mean"), nll.sum() / mask.sum())
    torch.testing.assert_close(crf.log_likelihood(emissions, tags, mask), -nll)
    with pytest.raises(ValueError, match="reduction must be one of"):
        crf(emissions, tags, mask, reduction="avg")


def test_time_first_layout_matches_batch_first():
    crf = st.LinearChainCRF(4).double()
    tf = st.LinearChainCRF(4, batch_first=False).double()
    tf.load_state_dict(crf.state_dict())
    emissions, tags, _, _, mask = random_batch(3, 6, 4, 1, True)
    torch.testing.assert_close(tf(emissions.transpose(0, 1), tags.t(), mask.t()), crf(emissions, tags, mask))
    _, path = tf.decode(emissions.transpose(0, 1), mask.t())
    assert torch.equal(path.t(), crf.decode(emissions, mask)[1])
    _, paths = tf.decode(emissions.transpose(0, 1), mask.t(), k=2)
    assert paths.shape == (6, 3, 2) and torch.equal(paths.permute(1, 2, 0), crf.decode(emissions, mask, k=2)[1])


def test_kbest_decoding_equals_kbest():
    crf = st.LinearChainCRF(3).double()
    emissions, _, lengths, _, _ = random_batch(3, 4, 3, 2, False)
    scores, paths = crf.decode(emissions, lengths=lengths, k=4)
    ref_scores, ref_paths = st.kbest(emissions, crf.transitions, 4, start=crf.start, end=crf.end, lengths=lengths)
    torch.testing.assert_close(scores, ref_scores)
    assert torch.equal(paths, ref_paths)


def test_bad_masks_and_arguments_are_clear_errors():
    crf = st.LinearChainCRF(3)
    emissions, tags = torch.randn(2, 4, 3), torch.zeros(2, 4, dtype=torch.long)
    with pytest.raises(TypeError, match="pass integer lengths as lengths="):
        crf(emissions, tags, torch.tensor([4, 2]))
    with pytest.raises(ValueError, match=r"mask must have shape \(B, T\) = \(2, 4\)"):
        crf(emissions, tags, torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="give mask or lengths, not both"):
        crf(emissions, tags, torch.ones(2, 4, dtype=torch.bool), lengths=torch.tensor([4, 4]))
    with pytest.raises(TypeError, match="constraints must be"):
        st.LinearChainCRF(3, constraints="BIO")
    with pytest.raises(ValueError, match=r"allowed_start must be a bool tensor of shape \(3,\)"):
        st.LinearChainCRF(3, constraints=(torch.ones(3, 3, dtype=torch.bool), torch.ones(2, dtype=torch.bool),
                                          torch.ones(3, dtype=torch.bool)))


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_allowed_transitions_agree_with_the_scheme_rules(scheme):
    labels = SCHEMES[scheme]
    allowed, first, last = allowed_transitions(scheme, labels)
    N = len(labels)
    for T in range(1, 4):
        for y in itertools.product(range(N), repeat=T):
            ok = bool(first[y[0]]) and bool(last[y[-1]]) and all(allowed[a, b] for a, b in zip(y, y[1:], strict=False))
            assert ok == valid([labels[i] for i in y], scheme), [labels[i] for i in y]


def test_allowed_transitions_errors_and_aliases():
    with pytest.raises(ValueError, match="scheme must be one of"):
        allowed_transitions("BIOX", ["O"])
    with pytest.raises(ValueError, match="label 'E-A' is not 'O' or <B/I>-<type> for the BIO scheme"):
        allowed_transitions("BIO", ["O", "E-A"])
    with pytest.raises(ValueError, match="must not repeat"):
        allowed_transitions("BIO", ["O", "O"])
    a = allowed_transitions("BIOUL", ["O", "B-A", "I-A", "L-A", "U-A"])
    b = allowed_transitions("BILOU", ["O", "B-A", "I-A", "L-A", "U-A"])
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert st.allowed_transitions is allowed_transitions


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_constrained_crf_trains_and_decodes_valid_sequences_only(scheme):
    labels = SCHEMES[scheme]
    N, T = len(labels), 4
    crf = st.LinearChainCRF(N, constraints=allowed_transitions(scheme, labels)).double()
    with torch.no_grad():
        crf.transitions.normal_()
    g = torch.Generator().manual_seed(3)
    emissions = torch.randn(6, T, N, generator=g, dtype=torch.float64) * 3
    _, paths = crf.decode(emissions, k=5)
    for row in paths.reshape(-1, T).tolist():
        assert valid([labels[i] for i in row], scheme)
    # the NLL is the negative log-probability among valid sequences only
    A, s, e = crf.transitions.detach(), crf.start.detach(), crf.end.detach()
    seqs = [y for y in itertools.product(range(N), repeat=T) if valid([labels[i] for i in y], scheme)]

    def score(b, y):
        return float(s[y[0]] + e[y[-1]] + sum(emissions[b, t, y[t]] for t in range(T))
                     + sum(A[y[t], y[t + 1]] for t in range(T - 1)))

    gold = torch.tensor([seqs[0], seqs[-1]] * 3)
    nll = crf(emissions, gold)
    for b in range(6):
        scores = np.array([score(b, y) for y in seqs])
        logz = np.log(np.exp(scores - scores.max()).sum()) + scores.max()
        assert np.isclose(float(nll[b].detach()), logz - score(b, tuple(gold[b].tolist())), atol=1e-9)
    bad = [y for y in itertools.product(range(N), repeat=T) if not valid([labels[i] for i in y], scheme)][0]
    assert crf(emissions[:1], torch.tensor([bad])).item() == float("inf")


def test_migration_from_pytorch_crf():
    """pytorch-crf's README examples, rewritten with structtorch, give the same numbers."""
    torchcrf = pytest.importorskip("torchcrf")
    torch.manual_seed(1)
    num_tags, seq_length, batch_size = 5, 3, 2
    theirs = torchcrf.CRF(num_tags)  # time-first, like its examples
    ours = st.LinearChainCRF.from_pytorch_crf(theirs)
    assert ours.batch_first is False
    emissions = torch.randn(seq_length, batch_size, num_tags)
    tags = torch.tensor([[0, 1], [2, 4], [3, 1]], dtype=torch.long)
    torch.testing.assert_close(ours.log_likelihood(emissions, tags, reduction="sum"), theirs(emissions, tags))
    mask = torch.tensor([[1, 1], [1, 1], [1, 0]], dtype=torch.uint8)
    torch.testing.assert_close(ours.log_likelihood(emissions, tags, mask, reduction="sum"),
                               theirs(emissions, tags, mask=mask))
    for reduction in ("none", "mean", "token_mean"):
        torch.testing.assert_close(ours.log_likelihood(emissions, tags, mask.bool(), reduction=reduction),
                                   theirs(emissions, tags, mask=mask, reduction=reduction))
    for m in (None, mask):
        _, path = ours.decode(emissions, None if m is None else m.bool())
        decoded = [[t for t in col if t >= 0] for col in path.t().tolist()]
        assert decoded == theirs.decode(emissions, mask=m)
    # batch-first
    theirs_bf, emissions_bf = torchcrf.CRF(num_tags, batch_first=True), emissions.transpose(0, 1)
    ours_bf = st.LinearChainCRF.from_pytorch_crf(theirs_bf)
    torch.testing.assert_close(ours_bf.log_likelihood(emissions_bf, tags.t(), mask.t().bool(), reduction="sum"),
                               theirs_bf(emissions_bf, tags.t(), mask=mask.t()))


def test_entropy_samples_and_edge_marginals_follow_the_mask():
    crf = st.LinearChainCRF(3, constraints=allowed_transitions("BIO", ["O", "B-A", "I-A"])).double()
    emissions, _, lengths, first, mask = random_batch(4, 6, 3, 5, True)
    aligned = left_align(emissions, first, lengths)
    trans, start, end = crf.scores()
    dist = st.ChainDistribution(aligned, trans, start=start, end=end, lengths=lengths)
    torch.testing.assert_close(crf.entropy(emissions, mask), dist.entropy)
    node, edge = crf.marginals(emissions, mask, edges=True)
    assert edge.shape == (4, 5, 3, 3)
    # edge marginals sum to the node marginals of the edge's first position, inside each sequence
    inner = mask[:, :-1] & mask[:, 1:]
    torch.testing.assert_close(edge.sum(-1)[inner], node[:, :-1][inner])
    assert (edge[~inner] == 0).all()
    draws = crf.sample(emissions, 50, mask, generator=torch.Generator().manual_seed(0))
    assert draws.shape == (50, 4, 6) and (draws[:, ~mask] == -1).all() and (draws[:, mask] >= 0).all()
    for row in draws.reshape(-1, 6).tolist():
        assert valid([["O", "B-A", "I-A"][i] for i in row if i >= 0], "BIO")


@pytest.mark.filterwarnings("ignore:the negative log-likelihood is \\+inf:RuntimeWarning")  # tested below
@given(T=hs.integers(1, 4), seed=hs.integers(0, 10**6), reduction=hs.sampled_from(["none", "sum", "mean"]))
def test_rows_where_the_constraints_forbid_every_labeling_have_nll_inf_not_nan(T, seed, reduction):
    """Issue 21 item 1. BIOES without O or S tags: a chunk needs two tags, so rows of length 1
    have no valid labeling (+inf, zero gradient), empty rows have NLL 0, longer rows the NLL
    among valid sequences; no NaN reaches any row's value or gradient."""
    labels = ["B-A", "I-A", "E-A"]
    crf = st.LinearChainCRF(3, constraints=allowed_transitions("BIOES", labels)).double()
    g = torch.Generator().manual_seed(seed)
    B = 4
    lengths = torch.tensor([T, 1, 0, min(T, 2)])
    emissions = torch.randn(B, T, 3, generator=g, dtype=torch.float64, requires_grad=True)
    tags = torch.randint(0, 3, (B, T), generator=g)
    nll = crf(emissions, tags, lengths=lengths)
    A, s, e = (x.detach() for x in crf.scores())
    for b in range(B):
        L = int(lengths[b])
        seqs = [y for y in itertools.product(range(3), repeat=L) if valid([labels[i] for i in y], "BIOES")]
        if L == 0:
            assert nll[b].item() == 0.0
        elif not seqs:
            assert nll[b].item() == float("inf")
        else:
            def score(y, b=b, L=L):
                return float(s[y[0]] + e[y[-1]] + sum(emissions.detach()[b, t, y[t]] for t in range(L))
                             + sum(A[y[t], y[t + 1]] for t in range(L - 1)))
            scores = np.array([score(y) for y in seqs])
            logz = np.log(np.exp(scores - scores.max()).sum()) + scores.max()
            want = logz - score(tuple(tags[b, :L].tolist())) if tuple(tags[b, :L].tolist()) in seqs else np.inf
            assert np.isclose(nll[b].item(), want, atol=1e-9) or nll[b].item() == want == np.inf
    assert not torch.isnan(nll).any()
    loss = crf(emissions, tags, lengths=lengths, reduction=reduction)
    assert not torch.isnan(loss).any()
    finite = torch.isfinite(nll)
    if finite.any():
        (grad,) = torch.autograd.grad(nll[finite].sum(), emissions, retain_graph=True)
        assert torch.isfinite(grad).all()
    (grad,) = torch.autograd.grad(nll.sum(), emissions)  # infeasible rows contribute 0
    assert torch.isfinite(grad).all() and (grad[1] == 0).all()
    nll_fn = st.train.chain_nll(emissions, A, tags, start=s, end=e, lengths=lengths, reduction="none")
    torch.testing.assert_close(nll_fn[~finite], nll[~finite].to(nll_fn.dtype))


def test_time_first_shape_errors_report_the_shape_passed():
    """Issue 21 item 8: the mask (and tags) were transposed before their shapes were checked."""
    crf = st.LinearChainCRF(3, batch_first=False)
    emissions = torch.randn(5, 3, 3)  # (T, B, N)
    with pytest.raises(ValueError, match=r"mask must have shape \(T, B\) = \(5, 3\), got \(3, 5\)"):
        crf(emissions, torch.zeros(5, 3, dtype=torch.long), torch.ones(3, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"tags must have shape \(T, B\) = \(5, 3\), got \(3, 5\)"):
        crf(emissions, torch.zeros(3, 5, dtype=torch.long))
    with pytest.raises(ValueError, match=r"mask must have shape \(T, B\) = \(5, 3\), got \(3, 5\)"):
        crf.decode(emissions, torch.ones(3, 5, dtype=torch.bool))


def test_errors_name_emissions_and_tags_without_rewriting():
    """Issue 22: the CRF validates once, through the chain checks, which take the argument's name
    (the messages were rewritten with a regex before)."""
    crf = st.LinearChainCRF(3)
    with pytest.raises(TypeError, match="transitions has dtype torch.float32 but emissions has dtype torch.float64"):
        crf(torch.randn(2, 4, 3, dtype=torch.float64), torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"tags must lie in \[0, N\) = \[0, 3\) within each length; tags\[0, 0\] = 5"):
        crf(torch.randn(2, 4, 3), torch.full((2, 4), 5))
    with pytest.raises(ValueError, match="overflows torch.float32 .*: rescale emissions, transitions, start and end"):
        crf.decode(torch.full((1, 4, 3), 3e38))
    with pytest.raises(ValueError, match=r"emissions contains NaN at index \(0, 1, 2\)"):
        crf.log_partition(torch.zeros(1, 4, 3).index_put_((torch.tensor(0), torch.tensor(1), torch.tensor(2)),
                                                          torch.tensor(float("nan"))))


def test_constraints_follow_a_loaded_state_dict():
    """The constraints are read once, at construction and when a state dict is loaded: a CRF built
    without them decodes under them after loading a constrained CRF's state."""
    tags = ["O", "B-X", "I-X"]
    constrained = st.LinearChainCRF(3, constraints=st.allowed_transitions("BIO", tags))
    plain = st.LinearChainCRF(3)
    emissions = torch.tensor([[[0.0, 0.0, 5.0], [0.0, 0.0, 5.0]]])  # I-X first: forbidden by BIO
    assert plain.decode(emissions)[1][0, 0] == 2
    plain.load_state_dict(constrained.state_dict())
    assert "constrained" in repr(plain)
    assert plain.decode(emissions)[1][0, 0] != 2


class _PeerCRF(torch.nn.Module):
    """A stand-in for ``torchcrf.CRF`` (its attributes), so that the test runs without pytorch-crf."""

    def __init__(self, num_tags: int, batch_first: bool = False) -> None:
        super().__init__()
        self.num_tags, self.batch_first = num_tags, batch_first
        self.transitions = torch.nn.Parameter(torch.randn(num_tags, num_tags))
        self.start_transitions = torch.nn.Parameter(torch.randn(num_tags))
        self.end_transitions = torch.nn.Parameter(torch.randn(num_tags))


def test_from_pytorch_crf_takes_a_batch_first_override():
    """Issue 41: from_pytorch_crf(crf, batch_first=...) raised "got multiple values for keyword
    argument 'batch_first'"; an explicit batch_first now overrides the peer's."""
    peer = _PeerCRF(4)  # time-first
    assert st.LinearChainCRF.from_pytorch_crf(peer).batch_first is False
    ours = st.LinearChainCRF.from_pytorch_crf(peer, batch_first=True, init_scale=0.5)
    assert ours.batch_first is True and ours.init_scale == 0.5
    assert torch.equal(ours.transitions, peer.transitions) and torch.equal(ours.end, peer.end_transitions)
    emissions, tags = torch.randn(2, 5, 4), torch.randint(0, 4, (2, 5))
    time_first = st.LinearChainCRF.from_pytorch_crf(peer)
    torch.testing.assert_close(ours(emissions, tags), time_first(emissions.transpose(0, 1), tags.t()))
    with pytest.raises(TypeError, match="batch_first must be a bool"):
        st.LinearChainCRF.from_pytorch_crf(peer, batch_first="yes")
    half = _PeerCRF(2)
    del half.start_transitions
    with pytest.raises(TypeError, match="crf must be a torchcrf.CRF.*without start_transitions"):
        st.LinearChainCRF.from_pytorch_crf(half)


def test_allowed_transitions_warns_of_unreachable_tags():
    """Issue 41: allowed_transitions("BIO", ["O", "B-X", "I-Y"]) made I-Y unreachable without a word."""
    import warnings

    with pytest.warns(UserWarning, match=r"under BIO no valid sequence of these labels contains 'I-Y'"):
        allowed, start, end = allowed_transitions("BIO", ["O", "B-X", "I-Y"])
    assert not start[2] and not allowed[:2, 2].any()  # only I-Y itself may precede I-Y
    with pytest.warns(UserWarning, match=r"under BIOES .* contains 'B-X', 'I-X' \("):  # no E-X: B-X never ends
        allowed_transitions("BIOES", ["O", "B-X", "I-X", "S-X"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for scheme, labels in (("BIO", ["O", "B-X", "I-X", "B-Y", "I-Y"]), ("IOB1", ["O", "I-X", "B-X"]),
                               ("BIOES", ["O", "B-X", "I-X", "E-X", "S-X"]), ("BIO", ["B-X", "I-X"])):
            allowed_transitions(scheme, labels)


def test_an_infinite_reduced_loss_warns_naming_the_rows():
    """Issue 41: a reduced loss of +inf (rows infeasible under the constraints) trained silently."""
    import warnings

    tags = ["O", "B-NP", "I-NP"]
    crf = st.LinearChainCRF(3, constraints=allowed_transitions("BIO", tags))
    emissions = torch.randn(3, 4, 3)
    gold = torch.tensor([[1, 2, 0, 0], [0, 2, 2, 0], [2, 0, 1, 2]])  # rows 1 and 2 are not BIO
    for reduction in ("mean", "sum", "token_mean"):
        with pytest.warns(RuntimeWarning, match=r"negative log-likelihood is \+inf for rows \[1, 2\] of 3"):
            assert crf(emissions, gold, reduction=reduction).item() == float("inf")
    trans, start, end = crf.scores()
    with pytest.warns(RuntimeWarning, match=r"\+inf for rows \[1, 2\] of 3"):
        st.train.chain_nll(emissions, trans, gold, start=start, end=end)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert torch.isinf(crf(emissions, gold)).tolist() == [False, True, True]  # per row: visible
        assert torch.isfinite(crf(emissions[:1], gold[:1], reduction="mean"))
        with st.set_validation(False):  # a value check: off with the others
            crf(emissions, gold, reduction="mean")


def test_input_dependent_transitions_keep_the_constraints_and_follow_the_mask():
    """Issue 54, item 4: LinearChainCRF(...)(emissions, tags, mask, transitions=...) with per-example,
    per-step transitions (and broadcast ones), as the functions with -inf where the constraints
    forbid; decode, log_partition and marginals alike; gradients reach the given transitions."""
    tags_names = ["O", "B-X", "I-X"]
    crf = st.LinearChainCRF(3, constraints=allowed_transitions("BIO", tags_names)).double()
    g = torch.Generator().manual_seed(0)
    B, T = 3, 5
    emissions = torch.randn(B, T, 3, generator=g, dtype=torch.float64)
    per_step = torch.randn(B, T - 1, 3, 3, generator=g, dtype=torch.float64, requires_grad=True)
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[0, 1] = False  # a gap: the transition into position 2 is the one used from position 0
    mask[1, 3:] = False
    tags = torch.tensor([[0, 0, 1, 2, 2], [1, 2, 0, 0, 0], [0, 1, 2, 2, 0]])
    trans, start, end = crf.scores()
    forbidden = torch.where(crf.allowed, per_step, float("-inf"))
    kw = dict(start=start, end=end, mask=mask)
    want = st.train.chain_nll(emissions, forbidden, tags, **kw, reduction="none")
    got = crf(emissions, tags, mask, transitions=per_step)
    torch.testing.assert_close(got, want)
    got.sum().backward()
    assert per_step.grad.abs().sum() > 0
    score, path = crf.decode(emissions, mask, transitions=per_step)
    ref_score, ref_path = st.viterbi(emissions, forbidden, **kw)
    torch.testing.assert_close(score, ref_score)
    assert torch.equal(path, ref_path)
    torch.testing.assert_close(crf.log_partition(emissions, mask, transitions=per_step),
                               st.log_partition(emissions, forbidden, **kw))
    torch.testing.assert_close(crf.marginals(emissions, mask, transitions=per_step), st.marginals(emissions, forbidden, **kw))
    shared = per_step[0].detach()  # (T-1, N, N) and (1, T-1, N, N): one set of steps for every row
    for broadcast in (shared, shared[None]):
        torch.testing.assert_close(crf(emissions, tags, mask, transitions=broadcast),
                                   crf(emissions, tags, mask, transitions=shared.expand(B, *shared.shape)))
        torch.testing.assert_close(st.log_partition(emissions, broadcast, mask=mask),
                                   st.log_partition(emissions, shared.expand(B, *shared.shape), mask=mask))
    with pytest.raises(ValueError, match="transitions must have shape"):
        crf(emissions, tags, transitions=torch.randn(B, T, 3, 3, dtype=torch.float64))
    with pytest.raises(TypeError, match="transitions"):
        crf.decode(emissions, transitions=[[0.0]])
