"""Brute-force enumeration of every structure on small instances: the reference of the exactness
tests (one enumerator per structure, shared by all test files).

- Linear chains: random :class:`Instance` (hypothesis ``instances``), ``enumerate_row`` (every
  labeling of a row with its score), ``brute_logsumexp``, ``brute_best`` (Viterbi's tie rule).
- Linear chains also: ``brute_marginals``.
- Segmentations: ``compositions`` (segment lengths), ``brute`` (every segmentation of a row with
  its score), hypothesis ``problems`` and their tensors, ``all_segmentations`` (as tensors).
- Graph labelings: ``lp_brute`` (the MAP over all labelings, with hard or soft connectivity),
  hypothesis ``lp_graphs``, ``random_potentials``, ``is_connected``, ``labeling_score``.
- Graph partitions: ``partitions``, ``partition_vectors``, ``brute_range`` (stability ranges),
  hypothesis ``multicut_problems``.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import torch
from hypothesis import strategies as st

import structtorch

NEG_INF = float("-inf")

# ---- linear chains ---------------------------------------------------------------------------


@dataclass
class Instance:
    unary: torch.Tensor  # (B, T, N) float64
    transitions: torch.Tensor  # (N, N) or (B, T-1, N, N)
    start: torch.Tensor | None
    end: torch.Tensor | None
    lengths: torch.Tensor

    @property
    def tol(self) -> float:
        """Absolute tolerance for non-integer results (float32 instances are integer-valued)."""
        return 1e-9 if self.unary.dtype == torch.float64 else 2e-5

    @property
    def kwargs(self) -> dict:
        return {"start": self.start, "end": self.end, "lengths": self.lengths}

    def args(self):
        return self.unary, self.transitions


def _values(rng, shape, integer: bool, p_inf: float) -> np.ndarray:
    x = rng.integers(-2, 3, size=shape).astype(float) if integer else rng.normal(size=shape)
    x[rng.random(shape) < p_inf] = -np.inf
    return x


@st.composite
def instances(draw, max_t: int = 6, max_n: int = 4, max_b: int = 3):
    """Random chains: float64 (integer-valued or Gaussian) or float32 (integer-valued, so that
    float32 sums are exact), shared or per-position transitions, (N,) or (B, N) start/end."""
    B = draw(st.integers(1, max_b))
    T = draw(st.integers(0, max_t))
    N = draw(st.integers(1, max_n))
    lengths = draw(st.lists(st.integers(0, T), min_size=B, max_size=B))
    dtype = draw(st.sampled_from([torch.float64, torch.float64, torch.float32]))
    integer = dtype == torch.float32 or draw(st.booleans())
    p_inf = draw(st.sampled_from([0.0, 0.0, 0.2, 0.5]))
    shared = draw(st.booleans())
    start_shape, end_shape = (draw(st.sampled_from([None, (N,), (B, N)])) for _ in range(2))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))

    def make(shape, p):
        return None if shape is None else torch.tensor(_values(rng, shape, integer, p), dtype=dtype)

    return Instance(
        unary=make((B, T, N), p_inf / 2),
        transitions=make((N, N) if shared else (B, max(T - 1, 0), N, N), p_inf),
        start=make(start_shape, p_inf / 2),
        end=make(end_shape, p_inf / 2),
        lengths=torch.tensor(lengths, dtype=torch.long),
    )


def _per_row(x, b: int, N: int) -> np.ndarray:
    if x is None:
        return np.zeros(N)
    return x.double().numpy() if x.dim() == 1 else x[b].double().numpy()


def enumerate_row(inst: Instance, b: int):
    """All labelings of row b with their float64 scores, and the edge/node indicator arrays."""
    L = int(inst.lengths[b])
    N = inst.unary.shape[2]
    u = inst.unary[b].double().numpy()
    A = inst.transitions.double().numpy()
    s, e = _per_row(inst.start, b, N), _per_row(inst.end, b, N)
    out = []
    for y in itertools.product(range(N), repeat=L):
        if L == 0:
            out.append((y, 0.0))
            continue
        terms = [s[y[0]], e[y[-1]]] + [u[t, y[t]] for t in range(L)]
        for t in range(L - 1):
            terms.append(A[y[t], y[t + 1]] if A.ndim == 2 else A[b, t, y[t], y[t + 1]])
        out.append((y, float(np.sum(terms))))
    return out


def brute_logsumexp(scores) -> float:
    arr = np.array(scores, dtype=float)
    m = arr.max()
    if m == -np.inf:
        return -np.inf
    return float(m + np.log(np.exp(arr - m).sum()))


def brute_best(rows):
    """(score, path) with the documented tie-break: reverse-lexicographically smallest."""
    best = max(s for _, s in rows)
    if best == -np.inf:
        return best, None
    ties = [y for y, s in rows if s == best]
    return best, min(ties, key=lambda y: tuple(reversed(y)))


def brute_edge_marginals(inst, b):
    """(node (T, N), edge (T-1, N, N)) marginals of row b by enumeration; zeros when infeasible."""
    rows = enumerate_row(inst, b)
    T, N = inst.unary.shape[1:]
    logz = brute_logsumexp([s for _, s in rows])
    edge = np.zeros((max(T - 1, 0), N, N))
    node = np.zeros((T, N))
    if logz == -np.inf:
        return node, edge
    for y, s in rows:
        p = np.exp(s - logz)
        for t, j in enumerate(y):
            node[t, j] += p
        for t in range(len(y) - 1):
            edge[t, y[t], y[t + 1]] += p
    return node, edge


def pad(y, T: int) -> list[int]:
    return list(y) + [-1] * (T - len(y))


def brute_marginals(inst, b):
    rows = enumerate_row(inst, b)
    T, N = inst.unary.shape[1:]
    logz = brute_logsumexp([s for _, s in rows])
    node = np.zeros((T, N))
    if logz == -np.inf:
        return node
    for y, s in rows:
        for t, j in enumerate(y):
            node[t, j] += np.exp(s - logz)
    return node


# ---- segmentations ---------------------------------------------------------------------------

PLIF_LOW, PLIF_HIGH = -1.0, 1.5


def compositions(L, S):
    if L == 0:
        yield ()
        return
    for d in range(1, min(S, L) + 1):
        for rest in compositions(L - d, S):
            yield (d,) + rest


def brute(p, b, L, S, N):
    """[(labels tuple, starts tuple, score)] over all segmentations of row b."""
    p = {k: v if v is None or k in ("trans", "content", "boundary", "segment", "plif") or v.ndim == (3 if k == "length" else 2)
         else np.broadcast_to(v, (p["content"].shape[0],) + v.shape) for k, v in p.items()}
    out = []
    for parts in compositions(L, S):
        for labs in np.ndindex(*(N,) * len(parts)):
            score, pos, labels, starts = 0.0, 0, [], []
            for i, (d, n) in enumerate(zip(parts, labs, strict=True)):
                e = pos + d
                score += p["content"][b, pos:e, n].sum() + p["length"][b, d - 1, n] + p["boundary"][b, e - 1, n]
                if p["segment"] is not None:
                    score += p["segment"][b, e - 1, d - 1, n]
                if p.get("plif") is not None:
                    tracks, ordinates = p["plif"]
                    support = np.linspace(PLIF_LOW, PLIF_HIGH, ordinates.shape[1])
                    score += np.interp(tracks[b, pos:e, n].mean(), support, ordinates[n])
                score += p["start"][b, n] if i == 0 else p["trans"][labs[i - 1], n]
                labels += [n] * d
                starts += [True] + [False] * (d - 1)
                pos = e
            if parts:
                score += p["end"][b, labs[-1]]
            out.append((tuple(labels), tuple(starts), float(score)))
    return out


@st.composite
def problems(draw):
    B, T, N, S = draw(st.integers(1, 2)), draw(st.integers(0, 6)), draw(st.integers(1, 3)), draw(st.integers(1, 4))
    integer = draw(st.booleans())
    p_inf = draw(st.sampled_from([0.0, 0.15]))
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))

    def v(*shape):
        x = rng.integers(-2, 3, size=shape).astype(float) if integer else rng.normal(size=shape)
        x[rng.random(shape) < p_inf] = -np.inf
        return x

    shared = draw(st.booleans())  # (S, N) length scores and (N,) start/end, broadcast over the batch
    p = {"content": v(B, T, N), "trans": v(N, N), "length": v(S, N) if shared else v(B, S, N),
         "boundary": v(B, T, N), "start": v(N) if shared else v(B, N), "end": v(N) if shared else v(B, N),
         "segment": v(B, T, S, N) if draw(st.booleans()) else None,
         "plif": (rng.normal(size=(B, T, N)), rng.normal(size=(N, draw(st.integers(2, 5)))))
         if draw(st.booleans()) else None}
    lengths = draw(st.lists(st.integers(0, T), min_size=B, max_size=B))
    return p, S, torch.tensor(lengths), integer


def tensors(p):
    """The problem as keyword arguments of the semi-Markov functions."""
    t = {k: None if v is None or k == "plif" else torch.tensor(v) for k, v in p.items()}
    plif = None if p.get("plif") is None else structtorch.SegmentPLiF(*map(torch.tensor, p["plif"]), PLIF_LOW, PLIF_HIGH)
    return t["content"], t["trans"], dict(length_scores=t["length"], boundary=t["boundary"],
                                          segment_scores=t["segment"], start=t["start"], end=t["end"],
                                          segment_plif=plif)


def all_segmentations(L: int, T: int, N: int, S: int):
    """(labels (M, T), starts (M, T)) of every segmentation of [0, L), padded to T."""
    labels, starts = [], []
    for parts in compositions(L, S):
        for labs in itertools.product(range(N), repeat=len(parts)):
            lab = torch.full((T,), -1, dtype=torch.long)
            sts = torch.zeros(T, dtype=torch.bool)
            pos = 0
            for d, n in zip(parts, labs, strict=True):
                lab[pos:pos + d], sts[pos] = n, True
                pos += d
            labels.append(lab)
            starts.append(sts)
    return torch.stack(labels), torch.stack(starts)


# ---- graph labelings (LP relaxations) ----------------------------------------------------------

FIVE_CYCLE = torch.tensor([[0, 1], [1, 2], [2, 3], [3, 4], [0, 4]])  # i-a-b-j-c-i with i=0, j=3


def labeling_score(unary, pairwise, edges, y):
    return float(unary[np.arange(len(y)), y].sum() + pairwise[np.arange(len(edges)), y[edges[:, 0]], y[edges[:, 1]]].sum())


def is_connected(nodes, edges):
    """The subgraph induced by ``nodes`` (a set) is connected (the empty set counts)."""
    nodes = set(nodes)
    if len(nodes) <= 1:
        return True
    seen, todo = set(), [next(iter(nodes))]
    while todo:
        k = todo.pop()
        if k in seen:
            continue
        seen.add(k)
        todo += [int(b) for a, b in edges.tolist() if a == k and b in nodes] + [
            int(a) for a, b in edges.tolist() if b == k and a in nodes]
    return seen == nodes


def lp_brute(unary, pairwise, edges, connected=(), soft=None):
    """max over labelings of score - sum_c w_c [label plane c disconnected]; -inf if none allowed."""
    V, L = unary.shape
    best = -np.inf
    for y in itertools.product(range(L), repeat=V):
        y = np.array(y)
        if any(not is_connected(np.nonzero(y == c)[0], edges) for c in connected):
            continue
        s = labeling_score(unary, pairwise, edges, y)
        for c, w in (soft or {}).items():
            s -= w * (not is_connected(np.nonzero(y == c)[0], edges))
        best = max(best, s)
    return best


@st.composite
def lp_graphs(draw, max_nodes=6):
    V = draw(st.integers(2, max_nodes))
    pairs = [(i, j) for i in range(V) for j in range(i + 1, V)]
    chosen = draw(st.lists(st.sampled_from(pairs), unique=True, max_size=min(len(pairs), 8)))
    edges = torch.tensor(sorted(chosen), dtype=torch.long).reshape(-1, 2)
    return V, edges


def cvxpy_smoothed(unary, pairwise, edges, smoothing, cuts=(), return_objective=False):
    """The smoothed relaxation of MAPRelaxation (node variables smoothed), written directly in cvxpy
    on the full local polytope with the cut rows as given and solved by Clarabel to 1e-10: mu (V, L)
    (and the objective)."""
    import cvxpy as cp

    V, L = unary.shape
    E = len(edges)
    mu = cp.Variable((V, L))
    mue = cp.Variable((E, L * L)) if E else None
    cons = [mu >= 0, cp.sum(mu, axis=1) == 1] + ([mue >= 0] if E else [])
    for e, (i, j) in enumerate(edges.tolist()):
        M = cp.reshape(mue[e], (L, L), order="C")
        cons += [cp.sum(M, axis=1) == mu[i], cp.sum(M, axis=0) == mu[j]]
    for c, i, j, S in cuts:
        cons.append(mu[i, c] + mu[j, c] - sum(mu[k, c] for k in S) <= 1)
    obj = cp.sum(cp.multiply(unary.numpy(), mu))
    if E:
        obj = obj + cp.sum(cp.multiply(pairwise.reshape(E, -1).numpy(), mue))
    problem = cp.Problem(cp.Maximize(obj - smoothing / 2 * cp.sum_squares(mu)), cons)
    problem.solve(solver=cp.CLARABEL, tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-10)
    return (torch.tensor(mu.value), problem.value) if return_objective else torch.tensor(mu.value)


def random_potentials(V, E, L, seed, integer=False):
    rng = np.random.default_rng(seed)
    draw = (lambda *s: rng.integers(-3, 4, size=s).astype(float)) if integer else (lambda *s: rng.normal(size=s))
    return torch.tensor(draw(V, L)), torch.tensor(draw(E, L, L))


# ---- graph partitions (multicut) -------------------------------------------------------------

def partitions(n):
    if n == 0:
        yield []
        return
    for p in partitions(n - 1):
        for k in range(max(p, default=-1) + 2):
            yield p + [k]


def partition_vectors(edges, V):
    """Distinct z vectors (cut indicators) of all partitions of V nodes."""
    e = edges.numpy()
    Z = {tuple((np.array(p)[e[:, 0]] != np.array(p)[e[:, 1]]).astype(float)) for p in partitions(V)}
    return np.array(sorted(Z))


def brute_range(Z, w, zs, d):
    plus = min([w @ (z - zs) / (d @ (zs - z)) for z in Z if d @ (zs - z) > 1e-12], default=math.inf)
    minus = -min([w @ (z - zs) / (d @ (z - zs)) for z in Z if d @ (z - zs) > 1e-12], default=math.inf)
    return minus, plus


@st.composite
def multicut_problems(draw, max_nodes=6, complete=False):
    from structtorch.lp.clustering import all_pairs  # loads the LP stack only for these tests

    V = draw(st.integers(3, max_nodes))
    edges = all_pairs(V)
    if not complete:
        keep = draw(st.lists(st.booleans(), min_size=len(edges), max_size=len(edges)))
        edges = edges[torch.tensor(keep, dtype=torch.bool)]
        if len(edges) == 0:
            edges = all_pairs(V)[:1]
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    return V, edges, torch.tensor(rng.normal(size=len(edges))), torch.tensor(rng.normal(size=len(edges)))


def check_kbest(got_scores, got_structs, lookup, k, tol):
    """Scores equal the k best enumerated ones (``lookup``: structure -> score; -inf padded), each
    structure scores what is reported and valid structures are distinct."""
    expected = sorted((s for s in lookup.values() if s > -np.inf), reverse=True)[:k]
    expected += [-np.inf] * (k - len(expected))
    np.testing.assert_allclose(got_scores, expected, atol=tol)
    seen = set()
    for score, struct in zip(got_scores, got_structs, strict=True):
        if score == -np.inf:
            continue
        assert struct not in seen
        seen.add(struct)
        assert np.isclose(lookup[struct], score, atol=tol)
