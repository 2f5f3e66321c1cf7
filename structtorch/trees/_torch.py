"""The PyTorch reference of the tree dynamic programs: Eisner's (1996) projective dependency DP
over complete and incomplete spans of positions 0..T (the root at 0) and CKY over the labeled spans
of a binary bracketing, both widened one width at a time, in any semiring (:class:`Semiring`): the
log semiring (log-partition), max-plus (best score) and max-plus over a count dimension (the best
score of the trees at each Hamming distance from a target: Bauer et al.'s 2014 table, which makes
slack rescaling exact). Every backend's kernel is tested against it; it is differentiable by
autograd (the best tree is the gradient of its score, the marginals that of the log-partition)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from .._checks import on_host
from .._numerics import NEG_INF, safe_logsumexp

Reduce = Callable[[Tensor, int], Tensor]


def best(x: Tensor, dim: int) -> Tensor:
    """max over ``dim`` whose gradient goes to the first maximal entry (a subgradient)."""
    return x.max(dim).values


def convolve(a: Tensor, b: Tensor) -> Tensor:
    """Max-plus convolution over the trailing count dimension (K + 1): out[..., k] = max over j <= k
    of a[..., j] + b[..., k - j] (the best pair of parts whose counts add up to k; counts beyond K
    are dropped, the caller's K bounds them)."""
    K1 = a.shape[-1]
    k = torch.arange(K1, device=a.device)
    offset = k[:, None] - k[None, :]  # [k, j] -> k - j, K1 (a -inf pad) where negative
    offset = torch.where(offset >= 0, offset, K1)
    padded = F.pad(b, (0, 1), value=NEG_INF)
    return best(a.unsqueeze(-2) + padded[..., offset], -1)


@dataclass(frozen=True)
class Semiring:
    """What the DPs need of a semiring: the sum over a dimension (``reduce``), the product
    (``times``) and the count dimension K + 1 its values carry at the end (``counts``; 0: none)."""

    reduce: Reduce
    times: Callable[[Tensor, Tensor], Tensor] = torch.add
    counts: int = 0

    def one(self, like: Tensor, *shape: int) -> Tensor:
        out = like.new_zeros(*shape, *self.trailing)
        if self.counts:
            out[..., 1:] = NEG_INF
        return out

    def zero(self, like: Tensor, *shape: int) -> Tensor:
        return like.new_full((*shape, *self.trailing), NEG_INF)

    @property
    def trailing(self) -> tuple[int, ...]:
        return (self.counts,) if self.counts else ()

    def where(self, keep: Tensor, x: Tensor, other: Tensor | float) -> Tensor:
        """torch.where with ``keep`` over the leading dimensions of ``x``."""
        return torch.where(keep.view(*keep.shape, *(1,) * (x.dim() - keep.dim())), x, other)


LOG = Semiring(safe_logsumexp)
MAX = Semiring(best)


def counting(K: int) -> Semiring:
    """Max-plus over counts 0..K (values (..., K + 1))."""
    return Semiring(best, convolve, K + 1)


def kmax(k: int) -> Semiring:
    """The k best values (values (..., k), descending): the product keeps the k best pairwise sums,
    the sum the k best of all its terms' lists. Eisner's DP is unambiguous (one derivation per
    tree), so its k best derivations are k distinct trees."""
    def times(a: Tensor, b: Tensor) -> Tensor:
        return (a.unsqueeze(-1) + b.unsqueeze(-2)).flatten(-2).topk(k, -1).values

    def reduce(x: Tensor, dim: int) -> Tensor:
        return x.movedim(dim, -2).flatten(-2).topk(k, -1).values

    return Semiring(reduce, times, k)


def with_counts(scores: Tensor, cost: Tensor, K: int) -> Tensor:
    """Scores (...) as count-semiring values (..., K + 1): the score at its integer ``cost``."""
    k = torch.arange(K + 1, device=scores.device)
    return torch.where(cost.unsqueeze(-1) == k, scores.unsqueeze(-1), NEG_INF)


class Chart:
    """A table of span values (B, T, T, *count) of a DP by width, kept twice: by start ``[s, w]``
    and by end ``[t, w]`` (the span [s, s + w] = [t - w, t]), so that the spans a width combines are
    plain slices (one op per width, not per split). Written one width at a time, in place."""

    def __init__(self, sr: Semiring, like: Tensor, B: int, T: int):
        self.by_start = sr.zero(like, B, T, T)
        self.by_end = sr.zero(like, B, T, T)

    def write(self, w: int, value: Tensor) -> None:
        """Set the spans of width ``w`` (B, T - w, *count), by start."""
        n = value.shape[1]
        self.by_start[:, :n, w] = value
        self.by_end[:, w:, w] = value

    def starting(self, n: int, widths: slice) -> Tensor:
        """(B, n, len(widths), *count): the spans of the given widths starting at s = 0..n-1."""
        return self.by_start[:, :n, widths]

    def ending(self, w: int, widths: slice) -> Tensor:
        """(B, T - w, len(widths), *count): the spans of the given widths ending at t = w..T-1,
        widths in decreasing order."""
        return self.by_end[:, w:, widths].flip(2)


def _diagonal(x: Tensor, offset: int) -> Tensor:
    """x[:, s, s + offset] (B, n, *count) for the (B, T, T, *count) tensor ``x``."""
    return torch.diagonal(x, offset, 1, 2).movedim(-1, 1)


def eisner(arcs: Tensor, lengths: Tensor, sr: Semiring, single_root: bool = False) -> Tensor:
    """(B, *count) value of the projective trees of each row in the semiring ``sr``: arcs (B, T+1,
    T+1, *count), ``arcs[b, h, m]`` the arc h -> m (position 0 the root), ``lengths`` (B,) words per
    row. The semiring's one for rows without words."""
    B, T1 = arcs.shape[:2]
    dev = arcs.device
    if T1 == 1:
        return sr.one(arcs, B)
    # complete and incomplete spans [s, t] by direction d (0: head at t, 1: head at s)
    complete = [Chart(sr, arcs, B, T1) for _ in range(2)]
    incomplete = [Chart(sr, arcs, B, T1) for _ in range(2)]
    for d in range(2):
        complete[d].write(0, sr.one(arcs, B, T1))
    for w in range(1, T1):
        n = T1 - w  # spans [s, t = s + w], s = 0..n-1
        # split r = s + k, k = 0..w-1: complete [s, r] headed at s + complete [r + 1, t] headed at t
        below = slice(0, w)
        joined = sr.reduce(sr.times(complete[1].starting(n, below), complete[0].ending(w, below)), 2)
        incomplete[0].write(w, sr.times(joined, _diagonal(arcs, -w)))  # t -> s
        incomplete[1].write(w, sr.times(joined, _diagonal(arcs, w)))  # s -> t
        # headed at t: complete[0][s, r] + incomplete[0][r, t], r = s..t-1
        c0 = sr.times(complete[0].starting(n, slice(0, w)), incomplete[0].ending(w, slice(1, w + 1)))
        # headed at s: incomplete[1][s, r] + complete[1][r, t], r = s+1..t
        c1 = sr.times(incomplete[1].starting(n, slice(1, w + 1)), complete[1].ending(w, slice(0, w)))
        complete[0].write(w, sr.reduce(c0, 2))
        complete[1].write(w, sr.reduce(c1, 2))
    right = complete[1].by_start  # (B, start, width, *count): spans headed at their left end
    rows = torch.arange(B, device=dev)
    if not single_root:
        value = right[rows, 0, lengths]  # [0, L] headed by the root
    else:  # the root's one child r heads words 1..r-1 leftwards and r+1..L rightwards
        r = torch.arange(1, T1, device=dev)  # (T,)
        L = lengths[:, None]
        left_part = complete[0].by_start[:, 1, : T1 - 1]  # [1, r] headed at r: start 1, width r - 1
        right_part = right[rows[:, None], r.expand(B, -1), (L - r).clamp(min=0)]  # [r, L] headed at r
        cand = sr.times(sr.times(arcs[:, 0, 1:], left_part), right_part)
        value = sr.reduce(sr.where(r[None] <= L, cand, NEG_INF), 1)
    return sr.where(lengths > 0, value, sr.one(arcs, B))


def cky_chart(spans: Tensor, sr: Semiring) -> Tensor:
    """The inside values (B, T, T, *count) by start and width (``[b, s, w]`` the span [s, s + w]) of
    span values (B, T, T, *count) (labels already summed), for every span of the batch's T words."""
    B, T = spans.shape[:2]
    chart = Chart(sr, spans, B, T)
    chart.write(0, _diagonal(spans, 0))
    for w in range(1, T):  # spans [s, s + w], split after s + k, k = 0..w-1
        inner = sr.reduce(sr.times(chart.starting(T - w, slice(0, w)), chart.ending(w, slice(0, w))), 2)
        chart.write(w, sr.times(inner, _diagonal(spans, w)))
    return chart.by_start


def cky(spans: Tensor, lengths: Tensor, sr: Semiring) -> Tensor:
    """(B, *count) value of the binary bracketings of each row in the semiring ``sr``: spans (B, T,
    T, *count) the value of span [i, j] (its labels already summed), ``lengths`` (B,) words per row.
    The semiring's one for rows without words."""
    B, T = spans.shape[:2]
    if T == 0:
        return sr.one(spans, B)
    value = cky_chart(spans, sr)[torch.arange(B, device=spans.device), 0, (lengths - 1).clamp(min=0)]
    return sr.where(lengths > 0, value, sr.one(spans, B))


def argmax_of(value: Callable[[Tensor], Tensor], scores: Tensor) -> tuple[Tensor, Tensor]:
    """(best (B,), indicator (like scores)): ``value`` of detached scores and its gradient (the
    best structure's parts; zero on rows where the value is -inf)."""
    with torch.enable_grad():
        leaf = scores.detach().requires_grad_()
        score = value(leaf)
        if not score.requires_grad:  # no parts at all (sentences without words)
            return score.detach(), torch.zeros_like(scores)
        finite = score > NEG_INF
        (grad,) = torch.autograd.grad(torch.where(finite, score, 0.0).sum(), leaf, allow_unused=True)
    return score.detach(), torch.zeros_like(scores) if grad is None else grad


def grad_of(reference, x: Tensor, grad: Tensor) -> Tensor:
    """grad (B,) times the gradient of ``reference(x)`` (B,) w.r.t. ``x``, by autograd (the PyTorch
    backend's backward); zeros where the value does not depend on ``x`` (no words)."""
    leaf = x.detach().requires_grad_()
    with torch.enable_grad():
        value = reference(leaf)
        if not value.requires_grad:
            return torch.zeros_like(x)
        (out,) = torch.autograd.grad(value, leaf, grad.to(value.dtype), allow_unused=True)
    return torch.zeros_like(x) if out is None else out.to(x.dtype)


def heads_of(indicator: Tensor, lengths: Tensor, found: Tensor) -> Tensor:
    """Heads (B, T + 1) from an arc indicator (B, T + 1, T + 1): -1 at the root, beyond each length
    and on rows without a tree (``found`` False)."""
    T1 = indicator.shape[1]
    m = torch.arange(T1, device=indicator.device)
    inside = (m >= 1) & (m <= lengths[:, None]) & found[:, None]
    return torch.where(inside, indicator.argmax(1), -1)


def log_partition(arcs: Tensor, lengths: Tensor, single_root: bool = False) -> Tensor:
    return eisner(arcs, lengths, LOG, single_root)


def viterbi(arcs: Tensor, lengths: Tensor, single_root: bool = False) -> tuple[Tensor, Tensor]:
    """(best score (B,), heads (B, T + 1)): the heads from the gradient of the best score (-1 at
    the root, beyond each length and on infeasible rows)."""
    score, grad = argmax_of(lambda a: eisner(a, lengths, MAX, single_root), arcs)
    return score, heads_of(grad, lengths, score > NEG_INF)


def kbest(arcs: Tensor, lengths: Tensor, k: int, single_root: bool = False) -> tuple[Tensor, Tensor]:
    """(scores (B, k) descending, heads (B, k, T + 1)) of the k best projective trees: the k-max
    semiring's table, each tree read off the gradient of its entry (-inf and heads -1 where fewer
    than k trees exist)."""
    B, T1 = arcs.shape[:2]
    with torch.enable_grad():
        leaf = arcs.detach().requires_grad_()
        values = torch.cat([leaf.unsqueeze(-1), leaf.new_full((B, T1, T1, k - 1), NEG_INF)], -1)
        table = eisner(values, lengths, kmax(k), single_root)  # (B, k)
        heads = []
        for j in range(k):
            found = table[:, j] > NEG_INF
            if not table.requires_grad:
                grad = torch.zeros_like(arcs)
            else:
                entry = torch.where(found, table[:, j], 0.0).sum()
                (grad,) = torch.autograd.grad(entry, leaf, retain_graph=True, allow_unused=True)
                grad = torch.zeros_like(arcs) if grad is None else grad
            heads.append(heads_of(grad, lengths, found))
    return table.detach(), torch.stack(heads, 1)


def count_table(arcs: Tensor, cost: Tensor, lengths: Tensor, single_root: bool = False) -> Tensor:
    """(B, T + 1) float: the best score of the projective trees whose integer ``cost`` (B, T + 1,
    T + 1), summed over their arcs, is exactly k = 0..T (-inf where none)."""
    K = arcs.shape[1] - 1
    return eisner(with_counts(arcs, cost, K), lengths, counting(K), single_root)


def count_viterbi(arcs: Tensor, cost: Tensor, lengths: Tensor, k: Tensor,
                  single_root: bool = False) -> tuple[Tensor, Tensor]:
    """(best score (B,), heads (B, T + 1)) among the trees of cost exactly ``k`` (B,)."""
    def value(a: Tensor) -> Tensor:
        return count_table(a, cost, lengths, single_root).gather(1, k[:, None]).squeeze(1)

    score, grad = argmax_of(value, arcs)
    return score, heads_of(grad, lengths, score > NEG_INF)


def cky_log_partition(spans: Tensor, lengths: Tensor) -> Tensor:
    """(B,) log-partition of the bracketings of span values (B, T, T) (labels summed already)."""
    return cky(spans, lengths, LOG)


def cky_brackets(spans: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
    """(best score (B,), the best bracketing's spans (B, T, T) 0/1, all 0 on infeasible rows) of
    span values (B, T, T) (labels maximized already)."""
    return argmax_of(lambda s: cky(s, lengths, MAX), spans)


def cky_count_table(spans: Tensor, cost: Tensor, lengths: Tensor) -> Tensor:
    """(B, 2T) float: the best score of the labeled trees whose integer ``cost`` (B, T, T, N),
    summed over their labeled spans, is exactly k = 0..2T-1 (-inf where none)."""
    K = max(2 * spans.shape[1] - 1, 0)
    labeled = with_counts(spans, cost, K)  # (B, T, T, N, K + 1)
    return cky(best(labeled, 3), lengths, counting(K))


def cky_count_viterbi(spans: Tensor, cost: Tensor, lengths: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
    """(best score (B,), labeled spans (B, T, T, N) 0/1) among the trees of cost exactly ``k``."""
    return argmax_of(lambda s: cky_count_table(s, cost, lengths).gather(1, k[:, None]).squeeze(1), spans)


def _words(lengths: Tensor, T1: int) -> tuple[Tensor, Tensor]:
    """(word (B, T + 1): positions 1..L, head (B, T + 1): positions 0..L)."""
    m = torch.arange(T1, device=lengths.device)
    return (m >= 1) & (m <= lengths[:, None]), m <= lengths[:, None]


def _structure(lengths: Tensor, T1: int) -> Tensor:
    """(B, T + 1, T + 1) bool: the arcs h -> m of each row's trees (h in 0..L, m in 1..L, h != m)."""
    word, head = _words(lengths, T1)
    eye = torch.eye(T1, dtype=torch.bool, device=lengths.device)
    return head[:, :, None] & word[:, None, :] & ~eye


TRACED_SQUARINGS = 11
"""Squarings of the reachability closure under ``torch.compile``/``torch.export``, where the
length is symbolic: paths of up to 2048 arcs (sentences of up to 2048 words)."""


def _closure(adj: Tensor) -> Tensor:
    """Reflexive-transitive closure (B, n, n) bool of a graph (B, n, n) bool, by squaring (as many
    times as n needs, or :data:`TRACED_SQUARINGS` times under a tracer: no specialization on n)."""
    n = adj.shape[-1]
    reach = (adj | torch.eye(n, dtype=torch.bool, device=adj.device)).to(torch.float32)
    squarings = TRACED_SQUARINGS if torch.compiler.is_compiling() else max(n - 1, 1).bit_length()
    for _ in range(squarings):
        reach = ((reach @ reach) > 0).to(torch.float32)
    return reach > 0


def spanning_feasible(allowed: Tensor, lengths: Tensor, single_root: bool) -> Tensor:
    """(B,) bool: some (non-projective) tree uses only ``allowed`` arcs (B, T + 1, T + 1): every
    word is reachable from the root (with ``single_root``, from one child of the root by word-to-word
    arcs). No host sync."""
    T1 = allowed.shape[1]
    word, _ = _words(lengths, T1)
    if not single_root:
        reach = _closure(allowed)[:, 0]  # (B, T + 1) reachable from the root
        return (reach | ~word).all(1)
    among = allowed.clone()
    among[:, 0] = False
    spans_all = (_closure(among) | ~word[:, None, :]).all(2)  # (B, T + 1): r reaches every word
    return (allowed[:, 0] & spans_all).any(1) | (lengths == 0)


def _feasible(structure: Tensor, allowed: Tensor, lengths: Tensor, single_root: bool) -> Tensor:
    """(B,) :func:`spanning_feasible`, skipped on the host when no arc of the structure is -inf
    (then every tree is allowed)."""
    if on_host(allowed) and not bool((structure & ~allowed).any()):
        return torch.ones_like(lengths, dtype=torch.bool)
    return spanning_feasible(allowed, lengths, single_root)


def matrix_tree(arcs: Tensor, lengths: Tensor, single_root: bool = False) -> Tensor:
    """(B,) log-partition of the non-projective trees by the matrix-tree theorem (Koo et al. 2007;
    Smith & Smith 2007): the log-determinant of the Laplacian of exp(arcs) over the words (the root
    row removed; with ``single_root`` the root's scores replace the first row and leave the
    diagonal). Each modifier's column is scaled by its largest arc first (the determinant scales by
    the product, added back), so that float32 stays accurate on long sentences; padded words get
    identity rows. -inf on rows without a tree, 0 without words; differentiable (the gradient is
    the arc marginals)."""
    T1 = arcs.shape[1]
    structure = _structure(lengths, T1)
    masked = arcs.masked_fill(~structure, NEG_INF)
    feasible = _feasible(structure, masked > NEG_INF, lengths, single_root)
    c = torch.nan_to_num(masked.detach().amax(1, keepdim=True), neginf=0.0)  # each word's best head
    A = torch.exp(masked - c)  # 0 off the structure and at forbidden arcs
    inner = A[:, 1:, 1:]
    padded = ~_words(lengths, T1)[0][:, 1:]
    lap = torch.diag_embed((inner if single_root else A[:, :, 1:]).sum(1) + padded.to(A.dtype)) - inner
    if single_root:
        lap = torch.cat([A[:, :1, 1:], lap[:, 1:]], 1)
    keep = (feasible & (lengths > 0))[:, None, None]
    eye = torch.eye(T1 - 1, dtype=arcs.dtype, device=arcs.device)
    logdet = torch.linalg.slogdet(torch.where(keep, lap, eye)).logabsdet
    value = logdet + c.squeeze(1)[:, 1:].masked_fill(padded, 0.0).sum(1)
    return torch.where(feasible, value, NEG_INF)


def _lex_argmax(P: np.ndarray, S: np.ndarray, present: np.ndarray, axis: int) -> np.ndarray:
    """Index of the lexicographic maximum of (P, S) along ``axis`` among ``present`` entries (the
    first one on ties; arbitrary where none is present)."""
    p = np.where(present, P, -np.inf)
    top = p.max(axis, keepdims=True)
    return np.where(present & (p == top), S, -np.inf).argmax(axis)


def _cycle(heads: np.ndarray) -> np.ndarray | None:
    """The nodes of a cycle of the graph m -> heads[m] (node 0 the root, heads[0] = -1), or None."""
    n = len(heads)
    state = np.zeros(n, dtype=np.int8)  # 0 new, 1 on the current walk, 2 done
    for start in range(1, n):
        walk, x = [], start
        while x > 0 and state[x] == 0:
            state[x] = 1
            walk.append(x)
            x = heads[x]
        if x > 0 and state[x] == 1:
            return np.array(walk[walk.index(x):])
        state[walk] = 2
    return None


def _chu_liu_edmonds(P: np.ndarray, S: np.ndarray, present: np.ndarray) -> np.ndarray | None:
    """Heads (n,) of the maximum spanning arborescence rooted at node 0 of the graph ``present`` (n, n)
    [h, m] under the weights (P, S) compared lexicographically (heads[0] = -1); None if none spans."""
    n = len(S)
    heads = np.full(n, -1)
    if n == 1:
        return heads
    if not present[:, 1:].any(0).all():
        return None
    heads[1:] = _lex_argmax(P[:, 1:], S[:, 1:], present[:, 1:], 0)
    cyc = _cycle(heads)
    if cyc is None:
        return heads
    in_cycle = np.zeros(n, dtype=bool)
    in_cycle[cyc] = True
    rest = np.flatnonzero(~in_cycle)  # node 0 stays first
    k = len(rest)  # the contracted node gets index k
    gain_p = P[:, cyc] - P[heads[cyc], cyc]  # entering the cycle at v replaces v's cycle arc
    gain_s = S[:, cyc] - S[heads[cyc], cyc]
    enter = _lex_argmax(gain_p[rest], gain_s[rest], present[np.ix_(rest, cyc)], 1)  # (k,) the v entered
    leave = _lex_argmax(P[np.ix_(cyc, rest)], S[np.ix_(cyc, rest)], present[np.ix_(cyc, rest)], 0)  # (k,)
    Pn, Sn = np.zeros((k + 1, k + 1)), np.zeros((k + 1, k + 1))
    pn = np.zeros((k + 1, k + 1), dtype=bool)
    for new, old in ((Pn, P), (Sn, S), (pn, present)):
        new[:k, :k] = old[np.ix_(rest, rest)]
    r = np.arange(k)
    Pn[:k, k], Sn[:k, k] = gain_p[rest, enter], gain_s[rest, enter]
    pn[:k, k] = present[np.ix_(rest, cyc)].any(1)
    Pn[k, :k], Sn[k, :k] = P[cyc[leave], rest], S[cyc[leave], rest]
    pn[k, :k] = present[np.ix_(cyc, rest)].any(0)
    sub = _chu_liu_edmonds(Pn, Sn, pn)
    if sub is None:
        return None
    out = heads.copy()
    for i in r[1:]:  # the nodes outside the cycle
        out[rest[i]] = cyc[leave[i]] if sub[i] == k else rest[sub[i]]
    h = sub[k]  # the contracted node's head: enter the cycle there, breaking its arc into v
    out[cyc[enter[h]]] = rest[h]
    return out


def chu_liu_edmonds(arcs: np.ndarray, single_root: bool) -> np.ndarray | None:
    """Heads (L + 1,) of the best non-projective tree of one sentence, arcs (L + 1, L + 1) float
    (-inf forbidden; the diagonal and column 0 ignored), by Chu-Liu-Edmonds' contraction (O(L^3)). With
    ``single_root`` the root's arcs also count -1 each, compared first (the fewest root children,
    then the best score: exact). None where no tree exists."""
    n = len(arcs)
    present = np.isfinite(arcs) & ~np.eye(n, dtype=bool)
    present[:, 0] = False
    P = np.zeros((n, n))
    if single_root:
        P[0] = -1.0
    heads = _chu_liu_edmonds(P, np.where(present, arcs, 0.0), present)
    if heads is None or (single_root and n > 1 and (heads[1:] == 0).sum() != 1):
        return None
    return heads


def mst(arcs: Tensor, lengths: Tensor, single_root: bool = False) -> Tensor:
    """Heads (B, T + 1) of the best non-projective trees (the reference: Chu-Liu-Edmonds on the host,
    one sentence at a time); -1 at the root, beyond each length and on rows without a tree."""
    B, T1 = arcs.shape[:2]
    host = arcs.detach().double().cpu().numpy()
    out = np.full((B, T1), -1, dtype=np.int64)
    for b, L in enumerate(lengths.tolist()):
        heads = chu_liu_edmonds(host[b, : L + 1, : L + 1], single_root)
        if heads is not None and L > 0:
            out[b, 1 : L + 1] = heads[1:]
    return torch.from_numpy(out).to(arcs.device)


def slack_choice(table: Tensor, gold: Tensor) -> tuple[Tensor, Tensor]:
    """(value (B,), count (B,)): the best slack-rescaled value k * (1 + best_k - gold) over the counts
    k of a count table (B, K + 1) and the count attaining it (the first); the target's own value,
    0 at count 0, is among them."""
    k = torch.arange(table.shape[1], device=table.device, dtype=table.dtype)
    cand = torch.where(table > NEG_INF, k * (1 + table - gold[:, None]), NEG_INF)
    cand[:, 0] = 0.0
    value, count = cand.max(1)
    return value, count


def keep_or_replace(score_of: Callable[[Tensor], Tensor], delta_of: Callable[[Tensor], Tensor], gold: Tensor,
                    found: Tensor, target: Tensor, rescaling: str,
                    none: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(value (B,), structure, Delta (B,)) of the loss-augmented search: the found structure, or the
    gold one where it attains the maximum (a zero subgradient) or nothing was found (``none`` (B,)).
    ``score_of`` and ``delta_of`` map structures to (B,) (differentiable scores); ``target`` is the
    gold score."""
    def value(y: Tensor) -> Tensor:
        delta = delta_of(y)
        return score_of(y) + delta if rescaling == "margin" else delta * (1 + score_of(y) - target)

    mine, theirs = value(gold), value(found)
    keep = (mine.detach() >= theirs.detach()) | none
    chosen = torch.where(keep.view(-1, *(1,) * (gold.dim() - 1)), gold, found)
    return torch.where(keep, mine, theirs), chosen, delta_of(chosen)
