"""Registration of structtorch's PyTorch operators (``torch.ops.structtorch.*``).

Each dynamic program's kernel entry point is one operator: its schema is inferred from the Python
signature, its implementation (which picks the backend named by its ``backend`` argument) serves
every device, on fewer threads while the machine is busy (:func:`structtorch._threads.call_threads`),
and a fake implementation gives ``torch.compile`` the output shapes without running
it. Registered with the plain ``torch.library.Library`` API, so that neither importing structtorch
nor calling an operator imports ``torch._dynamo``. Autograd is not registered on the operators:
the autograd Functions of ``chain/_ops.py`` and ``semimarkov/_ops.py`` call them outside autograd.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ._threads import call_threads

LIBRARY = torch.library.Library("structtorch", "DEF")


def operator(name: str, fake: Callable) -> Callable[[Callable], Callable]:
    """Decorator: register the function as ``torch.ops.structtorch.<name>`` with the fake
    implementation ``fake``; returns the operator."""

    def register(fn: Callable):
        LIBRARY.define(name + torch.library.infer_schema(fn, mutates_args=()))
        LIBRARY.impl(name, call_threads()(fn), "CompositeExplicitAutograd")  # fewer threads when busy
        torch.library.register_fake(f"structtorch::{name}", fake, lib=LIBRARY)
        return getattr(torch.ops.structtorch, name).default

    return register


def vmap_rule(op, rule: Callable) -> None:
    """Register ``rule(info, in_dims, *args) -> (outputs, out_dims)`` as the vmap rule of ``op``."""
    torch.library.register_vmap(op, rule, lib=LIBRARY)


def save_for_backward(ctx, inputs: tuple, output: tuple) -> None:
    """``setup_context`` of the autograd Functions over a (result, *state) operator: saves the
    tensor inputs (None kept) and the outputs, keeps the trailing non-tensor arguments (the
    backend's name, scalars) as ``ctx.options``, and marks the state non-differentiable. Gradients
    are not materialized (no zeros are made for the state): the result's gradient is None when
    the result is unused."""
    first = next((i for i, x in enumerate(inputs) if isinstance(x, (str, float, int))), len(inputs))
    ctx.options = inputs[first:]
    ctx.save_for_backward(*inputs[:first], *output)
    ctx.mark_non_differentiable(*output[1:])
    ctx.set_materialize_grads(False)
