"""One structured training step on static tensors, for the CUDA-graph table of benchmarks/gpu.py.

A small MLP emission layer over random features, a structured loss on the chain (the structured
hinge with slack or margin rescaling on learned transitions, or the ``LinearChainCRF`` negative
log-likelihood), backward and an Adam step (``capturable=True`` on CUDA): the step that
tests/test_cuda.py captures in a CUDA graph and checks against eager, here at benchmark sizes and
with sequences of different lengths. :func:`capture` warms it up on a side stream, captures one
call and returns the graph to replay.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

import structtorch as st

LOSSES = ("hinge slack", "hinge margin", "CRF NLL")


def training_step(loss_name: str, B: int, T: int, N: int, device: torch.device, F: int = 32, H: int = 64,
                  seed: int = 0) -> Callable[[], torch.Tensor]:
    """A closure running one step (zero_grad, forward, loss, backward, optimizer step) that
    returns the loss; every tensor it reads or writes is allocated once, here."""
    if loss_name not in LOSSES:
        raise ValueError(f"loss_name must be one of {LOSSES}, got {loss_name!r}")
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, F, generator=g).to(device)
    tags = torch.randint(0, N, (B, T), generator=g).to(device)
    lengths = torch.randint(max(1, T // 2), T + 1, (B,), generator=g)
    lengths[0] = T
    lengths = lengths.to(device)
    torch.manual_seed(seed)
    emit = nn.Sequential(nn.Linear(F, H), nn.Tanh(), nn.Linear(H, N)).to(device)
    if loss_name == "CRF NLL":
        crf = st.LinearChainCRF(N).to(device)
        params = [*emit.parameters(), *crf.parameters()]

        def loss_fn() -> torch.Tensor:
            return crf(emit(x), tags, lengths=lengths, reduction="mean")
    else:
        transitions = nn.Parameter(torch.zeros(N, N, device=device))
        hinge = st.StructuredHingeLoss(rescaling=loss_name.split()[1], reduction="mean")
        params = [*emit.parameters(), transitions]

        def loss_fn() -> torch.Tensor:
            return hinge(emit(x), transitions, tags, lengths=lengths)

    opt = torch.optim.Adam(params, lr=1e-3, capturable=device.type == "cuda")

    def step() -> torch.Tensor:
        opt.zero_grad(set_to_none=False)
        loss = loss_fn()
        loss.backward()
        opt.step()
        return loss

    return step


def capture(step: Callable[[], torch.Tensor], warmup: int = 3) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
    """Run ``step`` ``warmup`` times on a side stream (kernels compiled, gradients and optimizer
    state allocated), then capture one call in a CUDA graph. Returns the graph and the static loss
    that each ``graph.replay()`` overwrites. Raises whatever the capture raises (a host sync inside
    the step, for one); the caller's stream is then no longer capturing."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            step()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    # The outer context restores the caller's stream even when the capture fails: torch.cuda.graph
    # leaves its stream current when ending the capture raises.
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        static_loss = step()
    graph.replay()  # one replay checked before timing: a broken graph fails here, not in the table
    torch.cuda.synchronize()
    return graph, static_loss
