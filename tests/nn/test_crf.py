"""LinearChainCRF: NLL against enumeration, decoding, marginals, training, module behaviour."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

import structtorch as st


def test_nll_equals_minus_log_probability(backend):
    torch.manual_seed(0)
    B, T, N = 3, 4, 3
    crf = st.LinearChainCRF(N).double()
    u = torch.randn(B, T, N, dtype=torch.float64)
    labels = torch.randint(0, N, (B, T))
    lengths = torch.tensor([4, 2, 1])
    nll = crf(u, labels, lengths=lengths)
    A, s, e = crf.transitions.detach(), crf.start.detach(), crf.end.detach()
    for b in range(B):
        L = int(lengths[b])

        def score(y, b=b, L=L):
            return (s[y[0]] + e[y[-1]] + sum(u[b, t, y[t]] for t in range(L))
                    + sum(A[y[t], y[t + 1]] for t in range(L - 1)))

        logz = torch.logsumexp(torch.stack([score(y) for y in itertools.product(range(N), repeat=L)]), 0)
        expected = logz - score(labels[b, :L].tolist())
        assert math.isclose(nll[b].item(), expected.item(), rel_tol=1e-10, abs_tol=1e-10)


def test_crf_learns_a_deterministic_rule():
    """Labels cycle y_t = y_{t-1} + 1 mod N; only x_0 reveals y_0: transitions must carry it."""
    torch.manual_seed(0)
    B, T, N = 32, 12, 3
    y0 = torch.randint(0, N, (B, 1))
    labels = (y0 + torch.arange(T)) % N
    x = torch.randint(0, N, (B, T))
    x[:, 0] = labels[:, 0]
    position = torch.zeros(B, T, 1)
    position[:, 0] = 1.0
    unary_net = torch.nn.Embedding(N, N)
    crf = st.LinearChainCRF(N)
    opt = torch.optim.Adam(list(unary_net.parameters()) + list(crf.parameters()), lr=0.1)

    def unary():
        return unary_net(x) * position  # only the first position carries evidence

    first = crf(unary(), labels).mean().item()
    for _ in range(80):
        loss = crf(unary(), labels).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.1 * first
    _, path = crf.decode(unary())
    assert (path == labels).float().mean() > 0.99
    marg = crf.marginals(unary())
    torch.testing.assert_close(marg.sum(-1), torch.ones(B, T))


def test_decode_respects_lengths():
    crf = st.LinearChainCRF(4)
    score, path = crf.decode(torch.randn(2, 5, 4), lengths=torch.tensor([5, 2]))
    assert (path[1, 2:] == -1).all() and (path[0] >= 0).all()


def test_crf_rejects_wrong_dtype_and_bad_labels():
    crf = st.LinearChainCRF(3)
    with pytest.raises(TypeError, match="transitions has dtype torch.float32 but emissions has dtype torch.float64"):
        crf(torch.zeros(1, 2, 3, dtype=torch.float64), torch.zeros(1, 2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"tags must lie in \[0, N\) = \[0, 3\) within each length; tags\[0, 1\] = 3"):
        crf(torch.zeros(1, 2, 3), torch.tensor([[0, 3]]))
    with pytest.raises(ValueError, match=r"emissions must have shape \(B, T, num_labels = 3\), got \(1, 2, 5\)"):
        crf.decode(torch.zeros(1, 2, 5))
    with pytest.raises(ValueError, match="num_labels must be a positive int"):
        st.LinearChainCRF(0)


def test_viterbi_module_is_parameter_free():
    layer = st.Viterbi()
    assert list(layer.parameters()) == []
    score, path = layer(torch.zeros(1, 2, 2), torch.zeros(2, 2))
    assert path.tolist() == [[0, 0]]
