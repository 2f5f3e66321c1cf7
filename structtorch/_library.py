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

import functools
from collections.abc import Callable

import torch

from ._threads import call_threads

LIBRARY = torch.library.Library("structtorch", "DEF")


OPERATORS: dict[str, Callable] = {}
"""The registered operators by name, as :func:`operator` returns them."""


def operator(name: str, fake: Callable) -> Callable[[Callable], Callable]:
    """Decorator: register the function as ``torch.ops.structtorch.<name>`` with the fake
    implementation ``fake``; returns the operator's caller (:func:`eager_call`), which also
    stays in :data:`OPERATORS` under ``name``."""

    def register(fn: Callable):
        threaded = call_threads()(fn)  # fewer threads when busy
        LIBRARY.define(name + torch.library.infer_schema(fn, mutates_args=()))
        LIBRARY.impl(name, threaded, "CompositeExplicitAutograd")
        torch.library.register_fake(f"structtorch::{name}", fake, lib=LIBRARY)
        OPERATORS[name] = eager_call(getattr(torch.ops.structtorch, name).default, threaded)
        return OPERATORS[name]

    return register


EXPORT_HINT = ("use torch.export.export instead (then AOTInductor, or torch.onnx.export(..., dynamo=True)): "
               "it captures structtorch's operators with symbolic batch sizes and lengths")


def refuse_jit_tracing() -> None:
    """Raise under ``torch.jit.trace``: the fast paths call kernels outside the dispatcher, and the
    general path's control flow depends on lengths, masks and value checks, which a trace would
    freeze at the example's values: a traced model would answer other inputs wrongly, silently."""
    if torch.jit.is_tracing():
        raise RuntimeError("torch.jit.trace cannot record structtorch's dynamic programs faithfully (their "
                           "control flow depends on the lengths, masks and checks of each call, which a "
                           "trace freezes at the example's values); " + EXPORT_HINT)


class NotScriptable:
    """Mixin of structtorch's modules: ``torch.jit.script`` refuses them with a clear error (their
    Python, keyword-only arguments and dispatch to custom operators are beyond TorchScript)."""

    def __prepare_scriptable__(self):
        raise RuntimeError(f"torch.jit.script cannot compile structtorch.{type(self).__name__} (TorchScript "
                           "does not take its Python); " + EXPORT_HINT)


def eager_call(op: torch._ops.OpOverload, implementation: Callable) -> Callable:
    """A caller of ``op`` that runs its Python ``implementation`` straight away on plain eager
    tensors (what the dispatcher would do, without its 20-60 us of boxing and Python callback per
    call), and the operator itself under ``torch.compile``, ``torch.func`` transforms, dispatch or
    function modes (fake tensors, ``FlopCounterMode``) and for tensor subclasses or meta tensors.
    The operator stays reachable as its attribute ``op``."""

    @functools.wraps(implementation)
    def call(*args):
        if plain_eager(args):
            return implementation(*args)
        refuse_jit_tracing()
        return op(*args)

    call.op = op  # type: ignore[attr-defined]
    return call


PLAIN = (torch.Tensor, torch.nn.Parameter)
"""The tensor types that run without the dispatcher (no subclass)."""


def intercepted() -> bool:
    """Whether something stands between a call and the kernels: ``torch.compile`` tracing,
    ``torch.func`` transforms, dispatch or function modes, ``torch.jit.trace`` (which the
    operators' callers then refuse: :func:`refuse_jit_tracing`)."""
    return (torch.compiler.is_compiling() or torch._C._are_functorch_transforms_active()
            or bool(torch._C._len_torch_dispatch_stack()) or torch._C._is_torch_function_mode_enabled()
            or torch._C._is_tracing())


def plain_eager(args: tuple) -> bool:
    """Whether ``args`` are plain tensors (lists of them, or other values) on a real device, in
    eager mode with no transform or mode in the way (see :func:`eager_call`)."""
    if intercepted():
        return False
    for x in args:
        for t in x if isinstance(x, (list, tuple)) else (x,):
            if isinstance(t, torch.Tensor) and (type(t) not in PLAIN or t.is_meta):
                return False
    return True


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


def transformed() -> bool:
    """Whether a ``torch.func`` transform (``vmap``, ``grad``, ``jacrev``, ``jacfwd``, ``hessian``)
    is active, outside ``torch.compile``: there the differentiable dynamic programs run their
    PyTorch references (plain operators, which every transform takes: batching rules, forward- and
    reverse-mode derivatives of any order) instead of the kernels' autograd Functions."""
    return torch._C._are_functorch_transforms_active() and not torch.compiler.is_compiling()


def apply(function: type[torch.autograd.Function], *args):
    """``function.apply(*args)`` for an autograd Function written with ``setup_context`` (the form
    ``torch.func`` transforms and ``torch.compile`` need), at the cost of the old form in eager
    mode: there PyTorch binds the arguments of every call to the forward's signature with
    ``inspect`` (about 50 us, more than a small kernel), so outside transforms and compilation the
    call goes to an equivalent Function in the old form (forward and setup_context in one), and
    where no input requires grad (or grad mode is off) to the forward alone. Under a ``torch.func``
    transform (:func:`transformed`) a Function with a ``reference`` runs it instead: the same
    outputs (those the callers read) from the PyTorch recursion."""
    if transformed() and hasattr(function, "reference"):
        return function.reference(*args)
    if torch.compiler.is_compiling() or torch._C._are_functorch_transforms_active():
        return function.apply(*args)
    if not torch.is_grad_enabled() or not any(isinstance(x, torch.Tensor) and x.requires_grad for x in args):
        with torch.no_grad():  # no graph to record: the forward alone (as apply runs it)
            return function.forward(*args)
    return _eager_form(function).apply(*args)


@functools.cache
def _eager_form(function: type[torch.autograd.Function]) -> type[torch.autograd.Function]:
    """``function`` (forward, setup_context, backward) as one old-form Function (its forward takes
    ``ctx``), with the same backward."""

    def forward(ctx, *args):
        output = function.forward(*args)
        function.setup_context(ctx, args, output)
        return output

    body = {"forward": staticmethod(forward), "backward": staticmethod(function.backward),
            "__doc__": function.__doc__, "__module__": function.__module__}
    return type(function.__name__, (torch.autograd.Function,), body)
