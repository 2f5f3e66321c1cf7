"""Validation shared by every public entry point: the one validation module.

Each structure builds its canonical form from these checks in its own type-and-checks room
(:class:`structtorch.chain.layout.Chain`, :class:`structtorch.semimarkov.layout.SemiMarkov`,
:class:`structtorch.lossaug.spec.LossSpec`). Bad input gets one ``ValueError``/``TypeError``
naming the argument and the expected shape (or range), and the backends can assume canonical,
contiguous tensors. Also here: scalar option
checks (``check_int``, ``check_number``) and the overflow contract of every result
(``guard_overflow``, ``cast_checked``): a result beyond its dtype's range raises, it is never
reported as inf or as an infeasible -inf.
"""

from __future__ import annotations

import functools
import math
import numbers
import os
import sys
import threading
import warnings
from collections.abc import Callable, Sequence

import torch
from torch import Tensor
from torch._C._functorch import get_unwrapped as _unwrap
from torch._C._functorch import is_functorch_wrapped_tensor as _is_wrapped

from . import _backend

LengthsLike = Tensor | Sequence[int] | None
FLOAT_DTYPES = (torch.float32, torch.float64)


def check_bool(name: str, value: object) -> bool:
    """``value`` when it is a bool; a TypeError otherwise (``bool("False")`` is True: a string or a
    number is refused, never cast)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool (True or False), got {value!r}")
    return value


def check_ignore_index(ignore_index: object, N: int) -> int | None:
    """``ignore_index`` (None, or an int outside the labels [0, N): a real label there would be
    read as "unlabeled" wherever it occurs)."""
    if ignore_index is None:
        return None
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, numbers.Integral):
        raise TypeError(f"ignore_index must be an int or None, got {ignore_index!r}")
    if 0 <= ignore_index < N:
        raise ValueError(f"ignore_index = {ignore_index} is a real label (in [0, N) = [0, {N})): every "
                         "position with that label would count as unlabeled; use a value outside, e.g. -100")
    return int(ignore_index)


def check_int(name: str, value: object, minimum: int | None = None) -> int:
    """``value`` as an int (bool refused), at least ``minimum`` when given."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value}")
    return int(value)


def check_generator(generator: object) -> torch.Generator | None:
    """``generator`` (a ``torch.Generator`` or None) for the samplers."""
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    return generator


def check_number(name: str, value: object, *, low: float = -math.inf, high: float = math.inf,
                 open_low: bool = False) -> float:
    """``value`` as a finite float in [low, high] (or (low, high] with ``open_low``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    value = float(value)
    below = value <= low if open_low else value < low
    if not math.isfinite(value) or below or value > high:
        left = "(" if open_low or low == -math.inf else "["
        interval = f"{left}{low:g}, {high:g}{')' if high == math.inf else ']'}"
        raise ValueError(f"{name} must be a finite number in {interval}, got {value}")
    return value


_VALIDATION = {"on": True}


class set_validation:  # noqa: N801 - used like a function, as torch's context managers are
    """Switch the value checks of inputs and results on (default) or off.

    Shape, dtype and device checks always run. Value checks (NaN/+inf potentials, lengths and
    labels out of range, results that overflow) read tensor values: while on, on CPU tensors they
    raise a ValueError naming the first bad entry, and on other devices they run as asynchronous
    device assertions (``torch._assert_async``: no host synchronization; the error surfaces at the
    next synchronization). On the "triton" backend a public call counts the bad entries of all its
    checked tensors on the device in one launch and makes one assertion at its end, whose message
    lists the checks made (:class:`one_assertion`). As always in CUDA, a failed device assertion leaves the
    CUDA context unusable: to find the entry, run the same call on CPU tensors, where the checks
    raise a ValueError naming the argument and the index. While off they do not run at all, so
    bad values give undefined results
    (the compiled kernels still bound-check every index they read). Usable as a plain call (for the
    process) or as a context manager (for a block), like :class:`structtorch.use_backend`.

    Parameters
    ----------
    enabled : bool
    """

    def __init__(self, enabled: bool) -> None:
        check_bool("enabled", enabled)
        self._previous = _VALIDATION["on"]
        _VALIDATION["on"] = enabled

    def __enter__(self) -> set_validation:
        return self

    def __exit__(self, *exc) -> None:
        _VALIDATION["on"] = self._previous


def validation_enabled() -> bool:
    """Whether value checks run (see :class:`set_validation`)."""
    return _VALIDATION["on"]


def on_host(x: Tensor) -> bool:
    """Whether value checks on ``x`` may read it on the host: CPU tensors outside ``torch.compile``
    tracing; elsewhere they are asynchronous assertions, which a compiled graph keeps (see
    :class:`set_validation`). CPU tensors on the "triton" backend (Triton's interpreter) take the
    GPU's path, so that the interpreter shows what runs on a GPU."""
    if x.device.type != "cpu" or torch.compiler.is_compiling():
        return False
    return _backend.requested() != "triton" or not _backend.triton_interpreted()


def plain(x: Tensor) -> Tensor:
    """``x`` itself, or under ``torch.func`` transforms the tensor it wraps (under ``vmap`` all
    vmapped values at once), so that value checks can read it."""
    while _is_wrapped(x):
        x = _unwrap(x)
    return x


class _Batch(threading.local):
    """Each thread's batch of device checks (``state``: None outside :func:`one_assertion`); the
    attribute is set in every thread from the start (``threading.local`` runs ``__init__`` per
    thread), so that a compiled graph's guard on it does not change after the first call
    (``torch.compile`` recompiled on the second)."""

    def __init__(self) -> None:
        self.state: dict | None = None


_BATCH = _Batch()


class one_assertion:  # noqa: N801 - used like a function, as torch's context managers are
    """Within it (a public call), the value checks that take the GPU's path on the "triton"
    backend are collected, and at the end one Triton launch (for up to
    :data:`structtorch._triton_checks.SLOTS` checked tensors) counts the bad entries of them all
    into one counter, nothing read on the host, followed by one device assertion whose message
    lists the checks made (where the list would pass CUDA's 254 bytes, the checks are split into
    groups, each with its counter and assertion: :func:`_message_groups`). The checks see the
    tensors as they are at the end of the call (inputs, which the call does not modify). Nested
    uses join the outermost one. Also a decorator."""

    def __enter__(self) -> one_assertion:
        self._outer = _BATCH.state is None
        if self._outer:
            _BATCH.state = {"checks": [], "messages": []}
        return self

    def __exit__(self, *exc) -> None:
        if not self._outer:
            return
        state, _BATCH.state = _BATCH.state, None
        if state["checks"] and exc[0] is None:
            from . import _triton_checks

            groups = _message_groups(state["checks"], state["messages"])
            flags = torch.zeros(len(groups), dtype=torch.int32, device=state["checks"][0][0].device)
            for g, (_, checks) in enumerate(groups):
                _triton_checks.count_all(checks, flags[g:g + 1])
            ok = flags == 0
            for g, (messages, _) in enumerate(groups):
                listed = "; ".join(messages)
                torch._assert_async(ok[g], device_message(f"{_FAILED}{listed}{_WHERE}"))

    def __call__(self, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with one_assertion():
                return fn(*args, **kwargs)
        return wrapper


def _counted(x: Tensor, kind: str, message: str, **params) -> bool:
    """Add the check of ``x`` (a kind of :mod:`structtorch._triton_checks`) to the open
    :class:`one_assertion`, which counts the bad entries of all its checks at its end; False
    (nothing done) outside one, under ``torch.compile``, under a ``torch.func`` transform (whose
    wrapped tensors a Triton launch cannot read) or off the "triton" backend, where the caller
    asserts on its own."""
    state = _BATCH.state
    if (state is None or torch.compiler.is_compiling() or torch._C._are_functorch_transforms_active()
            or _backend.backend_for(x) != "triton"):
        return False
    state["checks"].append((plain(x), kind, params))
    state["messages"].append(message)
    return True


_FAILED, _WHERE = "structtorch: a value check failed (", "); run it on CPU to see where"


def _message_groups(checks: list, messages: list[str]) -> list[tuple[list[str], list]]:
    """The checks of one call in groups whose assertion message (their distinct messages listed)
    fits :data:`DEVICE_MESSAGE_BYTES`: usually one group; a call with many checks gets one counter
    and one assertion per group, so that every message names its own checks whole."""
    room = DEVICE_MESSAGE_BYTES - len(_FAILED + _WHERE)
    groups: list[tuple[list[str], list]] = []
    for check, message in zip(checks, messages, strict=True):
        for listed, members in groups:
            if message in listed or len("; ".join([*listed, message]).encode()) <= room:
                listed.extend([] if message in listed else [message])
                members.append(check)
                break
        else:
            groups.append(([message], [check]))
    return groups


DEVICE_MESSAGE_BYTES = 254
"""The longest message of a device assertion: CUDA's ``_assert_async`` refuses 255 bytes or more
(``RuntimeError: Message length must be smaller than 255``, on every checked call)."""


def device_message(message: str) -> str:
    """``message`` cut to :data:`DEVICE_MESSAGE_BYTES` (UTF-8), its end kept: the middle of a long
    list of checks gives way to "..."."""
    if len(message.encode()) <= DEVICE_MESSAGE_BYTES:
        return message
    head, tail = message[:150], message[-(DEVICE_MESSAGE_BYTES - 160):]
    while len(f"{head}...{tail}".encode()) > DEVICE_MESSAGE_BYTES:  # multi-byte characters
        head, tail = head[:-1], tail[1:]
    return f"{head}...{tail}"


def require(ok: Tensor, message: str) -> None:
    """An asynchronous device assertion that ``ok`` (a bool tensor) holds everywhere, while value
    checks are on; for tensors that are not on the CPU, and under ``torch.compile`` (on CPU
    they raise ValueErrors on the spot)."""
    if _VALIDATION["on"]:
        ok = ok if torch.compiler.is_compiling() else plain(ok)
        torch._assert_async(ok.all(), device_message(f"structtorch: {message}"))


def check_that(ok: Callable[[], Tensor], message: str) -> None:
    """A value check: ``ok()`` (a bool tensor, built only while value checks are on) holds
    everywhere, else a ValueError with ``message`` on the host, an asynchronous device assertion
    elsewhere (see :func:`on_host`)."""
    if not _VALIDATION["on"]:
        return
    flags = ok()
    if not on_host(flags):
        require(flags, message)
    elif not bool(plain(flags).all()):
        raise ValueError(message)


def _equal(n: int, form: str) -> str:
    """`` = form.format(n)`` for a message, or nothing while ``torch.compile`` traces: formatting a
    symbolic size would specialize the graph to its value (a recompile for every length)."""
    return "" if torch.compiler.is_compiling() else " = " + form.format(n)


def _fmt(shape) -> str:
    return str(tuple(int(s) for s in shape))


def check_float(name: str, x: object, ref: Tensor | None = None, ref_name: str = "unary", *,
                posinf: bool = False, values: bool = True) -> Tensor:
    """Check that ``x`` is a float32/float64 tensor without NaN/+inf (-inf is allowed; +inf too
    with ``posinf``, for inputs that are clamped rather than scores).

    With ``ref`` (the unary scores), ``x`` must also share its dtype and device. With
    ``values=False`` only the metadata is checked: the caller checks the values of several
    arguments at once (:func:`check_all_values`).
    """
    if not isinstance(x, Tensor):
        raise not_a_tensor(name, x)
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name} must be float32 or float64, got {x.dtype}")
    if ref is not None:
        if x.dtype != ref.dtype:
            raise TypeError(f"{name} has dtype {x.dtype} but {ref_name} has dtype {ref.dtype}; use one dtype")
        check_device(name, x, ref, ref_name)
    if values:
        check_values(name, x, posinf=posinf)
    return x


def check_values(name: str, x: Tensor, *, posinf: bool = False) -> None:
    """Raise a ValueError locating the first NaN or +inf entry of ``x`` (-inf is allowed, and +inf
    with ``posinf``); an asynchronous assertion off the CPU (see :class:`set_validation`)."""
    if not _VALIDATION["on"]:
        return None
    what = "NaN" if posinf else "NaN or +inf"
    if not on_host(x):
        if not _counted(x, "nan" if posinf else "values", f"{name} contains {what}"):
            require(~_bad_values(x, posinf).any(), f"{name} contains {what}")
        return None
    x = plain(x)
    if x.numel() and not _may_hold_bad_values(x, posinf):
        return None
    bad = _bad_values(x, posinf)
    if bool(bad.any()):
        idx = tuple(int(i) for i in bad.nonzero()[0].tolist())
        what = "NaN" if bool(torch.isnan(x[idx])) else "+inf"
        rule = "must not be NaN" if posinf else "potentials must be finite or -inf"
        raise ValueError(f"{name} contains {what} at index {idx}; {rule}")


_MODES = {"values": 0, "nan": 1, "finite": 2}  # the float checks of csrc/checks.cpp


def first_bad(floats: Sequence[tuple[Tensor, str]], lengths: Tensor | None = None, T: int = 0,
              labels: Tensor | None = None, N: int = 0) -> int | None:
    """The value checks of host tensors in one compiled pass (``csrc/checks.cpp``): -1 when all
    pass; else the index of the first bad float tensor in ``floats`` ((tensor, mode) pairs, mode
    "values": no NaN or +inf, "nan": no NaN, "finite"), ``len(floats)`` for ``lengths`` outside
    [0, T], ``len(floats) + 1`` for ``labels`` (B, T) outside [0, N) within the lengths. None
    where the pass cannot run (kernels unavailable, a tensor not on the host, under ``torch.func``
    transforms): the caller checks each tensor as usual."""
    if torch.compiler.is_compiling() or torch._C._are_functorch_transforms_active():
        return None
    ops = _backend.fast_ops()
    if ops is None:
        return None
    tensors = [x for x, _ in floats]
    if any(x.device.type != "cpu" for x in tensors):
        return None
    return ops.first_bad(tensors, [_MODES[m] for _, m in floats], lengths, T, labels, N)


def check_all_values(floats: Sequence[tuple[str, Tensor, bool]], lengths: Tensor | None = None,
                     T: int = 0) -> None:
    """The value checks of several arguments at once: ``floats`` as (name, tensor, posinf) for
    :func:`check_values`, ``lengths`` in [0, T] as :func:`check_lengths`. On the host one compiled
    pass looks at them all, and only when it finds a bad entry do the single checks run, raising
    their usual errors; elsewhere the single checks run (asynchronous assertions)."""
    if not _VALIDATION["on"] or not floats:
        return
    if on_host(floats[0][1]):
        if first_bad([(x, "nan" if posinf else "values") for _, x, posinf in floats], lengths, T) == -1:
            return
    for name, x, posinf in floats:
        check_values(name, x, posinf=posinf)
    if lengths is not None:
        check_length_values(lengths, T)


def all_finite(x: Tensor) -> bool:
    """Whether every entry of host tensor ``x`` is finite (one compiled pass where available)."""
    found = first_bad([(x, "finite")])
    return found == -1 if found is not None else bool(torch.isfinite(plain(x)).all())


def _may_hold_bad_values(x: Tensor, posinf: bool) -> bool:
    """False when one reduction proves ``x`` (on the host) free of NaN (and of +inf unless
    ``posinf``): a NaN makes the sum NaN, a +inf makes it +inf or NaN (beside a -inf), and -inf
    entries alone make it -inf. True (look closer) otherwise, also when finite entries overflow."""
    total = float(x.detach().sum())
    return total != total or (not posinf and total == float("inf"))


def _bad_values(x: Tensor, posinf: bool) -> Tensor:
    return torch.isnan(x) if posinf else torch.isnan(x) | torch.isposinf(x)


def warn_infinite_loss(per_row: Tensor, reduced: Tensor, what: str) -> Tensor:
    """``reduced`` (a reduction of ``per_row`` (B,)), after a ``RuntimeWarning`` naming the rows
    whose loss is +inf when it is +inf (no labeling that the constraints allow is consistent with
    those rows' targets): a reduced loss of +inf trains on nothing. A value check: only while value
    checks are on (:class:`set_validation`) and on CPU tensors, where it reads one number (no device
    sync); elsewhere nothing runs."""
    if not _VALIDATION["on"] or reduced.dim() or not on_host(reduced):
        return reduced
    if not bool(torch.isposinf(plain(reduced.detach())).any()):  # under vmap: every mapped value
        return reduced
    rows = plain(per_row.detach())
    infinite = torch.isposinf(rows.reshape(-1, rows.shape[-1]) if rows.dim() else rows.reshape(1, 1)).any(0)
    bad = infinite.nonzero().flatten().tolist()
    listed = ", ".join(map(str, bad[:10])) + (f", ... ({len(bad) - 10} more)" if len(bad) > 10 else "")
    warnings.warn(f"{what} is +inf for rows [{listed}] of {infinite.numel()}: no labeling that the "
                  "constraints (or -inf scores) allow is consistent with their targets, so the reduced loss "
                  "is +inf and those rows give no gradient (e.g. partial labels without a word mask under "
                  "BIO; see the pitfalls page of the guide)", RuntimeWarning, stacklevel=caller_stacklevel())
    return reduced


_LIBRARIES = tuple(os.path.dirname(m.__file__) + os.sep for m in (torch, sys.modules[__package__]))


def caller_stacklevel() -> int:
    """The ``stacklevel`` (for ``warnings.warn`` called by the caller of this function) of the
    first frame outside torch and structtorch: the user's call, through ``nn.Module.__call__``
    or not, so that a warning points at it (and a DeprecationWarning shows by default)."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(_LIBRARIES):
        frame, level = frame.f_back, level + 1
    return level


def check_finite(name: str, x: Tensor, hint: str = "") -> None:
    """Raise a ValueError locating the first non-finite entry of ``x`` (-inf included; ``hint``
    is appended to the message); an asynchronous assertion off the CPU, nothing when value checks
    are off (see :class:`set_validation`)."""
    if not _VALIDATION["on"]:
        return
    if not on_host(x):
        if not _counted(x, "finite", f"{name} must be finite{hint}"):
            require(torch.isfinite(x).all(), f"{name} must be finite{hint}")
        return None
    x = plain(x)
    if not bool(torch.isfinite(x).all()):
        idx = tuple(int(i) for i in (~torch.isfinite(x)).nonzero()[0].tolist())
        where = f"; {name}[{', '.join(map(str, idx))}] = {float(x[idx])}" if idx else f" (got {float(x)})"
        raise ValueError(f"{name} must be finite{hint}{where}")


def check_target_score(gold: Tensor, message: str | None = None) -> None:
    """Raise a ValueError naming the first row whose target structure scores -inf (it uses a
    forbidden entry, or its score overflowed): loss-augmented inference needs a finite target
    score. An asynchronous assertion off the CPU, nothing when value checks are off. ``message``
    (with ``{}`` for the row) replaces the default."""
    if not _VALIDATION["on"]:
        return
    message = message or ("target has score -inf in row {}: it uses a forbidden (-inf) entry, or its score "
                          f"overflows {gold.dtype} (then rescale the potentials)")
    if not on_host(gold):
        return require(gold != float("-inf"), message.format("?"))
    bad = plain(gold) == float("-inf")
    if bool(bad.any()):
        raise ValueError(message.format(int(bad.nonzero()[0, 0])))


def check_device(name: str, x: Tensor, ref: Tensor, ref_name: str = "unary") -> None:
    if x.device != ref.device:
        raise ValueError(f"{name} is on {x.device} but {ref_name} is on {ref.device}; use one device")


def check_lengths(lengths: LengthsLike, B: int, T: int, device: torch.device,
                  ref_name: str = "unary", *, values: bool = True) -> Tensor:
    """Return lengths as an int64 (B,) tensor on ``device``; None means all T (``ref_name`` names
    the tensor that sets the device in errors). With ``values=False`` the range [0, T] is left to
    the caller (:func:`check_all_values`)."""
    if lengths is None:
        return torch.full((B,), T, dtype=torch.long, device=device)
    if not isinstance(lengths, Tensor):
        try:
            lengths = torch.as_tensor(lengths)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise TypeError(f"lengths must be a (B,) = ({B},) integer tensor: {exc}") from None
        lengths = lengths.to(device)
    if lengths.dtype.is_floating_point or lengths.dtype.is_complex or lengths.dtype == torch.bool:
        raise TypeError(f"lengths must be an integer tensor of shape ({B},), got {lengths.dtype}")
    if lengths.shape != (B,):
        raise ValueError(f"lengths must have shape (B,) = ({B},), got {_fmt(lengths.shape)}")
    if lengths.device != device:
        raise ValueError(f"lengths is on {lengths.device} but {ref_name} is on {device}; use one device")
    if values:
        check_length_values(lengths, T)
    return lengths.long().contiguous()


def check_length_values(lengths: Tensor, T: int) -> None:
    """Raise a ValueError when a length lies outside [0, T] (an asynchronous assertion off the CPU,
    nothing when value checks are off)."""
    if not lengths.shape[0] or not _VALIDATION["on"]:
        pass
    elif not on_host(lengths):
        message = f"lengths must lie in [0, T]{_equal(T, '[0, {}]')}"
        if not _counted(lengths, "range", message, lo=0, hi=T):
            require(((lengths >= 0) & (lengths <= T)).all(), message)
    elif bool((plain(lengths) < 0).any()) or bool((plain(lengths) > T).any()):
        raise ValueError(
            f"lengths must lie in [0, T] = [0, {T}], got min {int(lengths.min())} "
            f"and max {int(lengths.max())}"
        )


def not_a_tensor(name: str, x: object, shape: str = "") -> TypeError:
    """The TypeError for an argument ``x`` that should be a tensor (of ``shape``); for an FX proxy
    (``torch.fx.symbolic_trace``) it says what to do instead."""
    text = f"{name} must be a torch.Tensor{' of shape ' + shape if shape else ''}, got {type(x).__name__}"
    if type(x).__name__ == "Proxy" and type(x).__module__.startswith("torch.fx"):
        text += (": torch.fx.symbolic_trace cannot trace through structtorch's dynamic programs (their "
                 "control flow reads values); use torch.export.export, whose graphs hold them as operators")
    return TypeError(text)


def check_unary(unary: object, name: str = "unary", *, values: bool = True) -> Tensor:
    if not isinstance(unary, Tensor):
        raise not_a_tensor(name, unary, "(B, T, N)")
    if unary.dim() != 3:
        raise ValueError(f"{name} must have shape (B, T, N), got {_fmt(unary.shape)}")
    if unary.shape[2] < 1:
        raise ValueError(f"{name} must have at least one label (N >= 1), got {_fmt(unary.shape)}")
    return check_float(name, unary, values=values)


def check_labels(labels: object, mask: Tensor, N: int, name: str = "labels") -> Tensor:
    """Validate (B, T) integer labels against ``mask`` (B, T) of positions inside each length.

    Entries beyond each length are ignored (returned as 0).
    """
    labels = check_label_tensor(labels, tuple(mask.shape), mask.device, name)
    if _VALIDATION["on"]:
        bad = mask & ((labels < 0) | (labels >= N))
        if not on_host(bad):
            require(~bad.any(), f"{name} must lie in [0, N) = [0, {N}) within each length")
        elif bool(plain(bad).any()):
            b, t = (int(i) for i in plain(bad).nonzero()[0].tolist()[-2:])
            value = int(plain(labels)[..., b, t].flatten()[0])
            raise ValueError(
                f"{name} must lie in [0, N) = [0, {N}) within each length; {name}[{b}, {t}] = "
                f"{value}{_ignore_hint(value)}"
            )
    return torch.where(mask, labels.long(), torch.zeros((), dtype=torch.long, device=labels.device))


def _ignore_hint(value: int) -> str:
    """For a negative label (-100 is Hugging Face's ignore index): how to mark unlabeled positions."""
    if value >= 0:
        return ""
    return (f"; if {value} marks unlabeled positions (partial labels), pass ignore_index={value} (taken by "
            "LinearChainCRF, loss_augmented, structured_hinge and train.chain_nll)")


def check_in_range(x: Tensor, lengths: Tensor, low: int, high: int, message: str) -> None:
    """A value check of integer ``x`` (B, T): every entry at a position below its row's length lies
    in [low, high] (a ValueError with ``message`` on the host; on the "triton" backend one slot of
    the call's counting launch, elsewhere a device assertion)."""
    if not _VALIDATION["on"]:
        return
    T = x.shape[-1]
    if not on_host(x) and _counted(x, "labels", message, lo=low, hi=high, lengths=lengths, T=T):
        return
    inside = torch.arange(T, device=x.device) < lengths[:, None]
    check_that(lambda: ~inside | ((x >= low) & (x <= high)), message)


def check_label_values(labels: Tensor, lengths: Tensor, N: int, name: str = "labels") -> None:
    """The value check of :func:`check_labels` on a (B, T) int64 tensor from
    :func:`check_label_tensor`, with the row lengths (B,) instead of a mask; entries beyond each
    length are not cleaned (the kernels that read them clamp them)."""
    if not _VALIDATION["on"]:
        return
    T = labels.shape[-1]
    message = f"{name} must lie in [0, N){_equal(N, '[0, {})')} within each length"
    if on_host(labels):
        if first_bad([], lengths, T, labels, N) == -1:  # one compiled pass; else the errors below
            return
    elif _counted(labels, "labels", message, lo=0, hi=N - 1, lengths=lengths, T=T):
        return
    check_labels(labels, torch.arange(T, device=labels.device) < lengths[:, None], N, name)


def check_label_tensor(labels: object, shape: tuple[int, int], device: torch.device,
                       name: str = "labels") -> Tensor:
    """``labels`` as a contiguous (B, T) int64 tensor on ``device``, or a TypeError/ValueError: the
    checks of :func:`check_labels` that read no values."""
    B, T = shape
    if not isinstance(labels, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape (B, T) = ({B}, {T})")
    if labels.dtype.is_floating_point or labels.dtype.is_complex or labels.dtype == torch.bool:
        raise TypeError(f"{name} must be an integer tensor of shape (B, T) = ({B}, {T}), got {labels.dtype}")
    if labels.shape != (B, T):
        raise ValueError(f"{name} must have shape (B, T) = ({B}, {T}), got {_fmt(labels.shape)}")
    if labels.device != device:
        raise ValueError(f"{name} is on {labels.device} but unary is on {device}; use one device")
    return labels.long().contiguous()


def _finite_magnitude(xs: Sequence[Tensor]) -> float:
    """The largest |x| over the finite entries of ``xs`` (0 when there are none)."""
    mags = [torch.where(torch.isfinite(x), x.detach().abs(), 0).amax().double() for x in xs if x.numel()]
    return float(torch.stack(mags).amax()) if mags else 0.0


def guard_overflow(result: Tensor, potentials: Sequence[Tensor], terms: int, feasible: Callable[[], Tensor],
                   what: str, names: str) -> Tensor:
    """Return ``result`` (B, ...) of a DP, or raise a ValueError where it overflowed its dtype.

    +inf or NaN always means overflow. -inf means "no feasible structure", unless the finite
    ``potentials`` are large enough for a sum of ``terms`` of them to overflow; then ``feasible()``
    ((B,) bool: the DP rerun on the -inf pattern alone) tells a feasible row whose scores overflowed
    to -inf from an infeasible one. Costs one ``isfinite(result).all()`` when nothing is wrong. Off
    the CPU it only asserts, asynchronously, that no result is NaN or +inf.
    """
    if not _VALIDATION["on"]:
        return result
    if not on_host(result):
        message = _overflow(what, result.dtype, names)
        if not _counted(result, "values", message):
            require(~(torch.isnan(result) | torch.isposinf(result)).any(), message)
        return result
    if all_finite(result):
        return result
    bad = ~torch.isfinite(plain(result))
    hint = _overflow(what, result.dtype, names)
    if bool((torch.isnan(plain(result)) | torch.isposinf(plain(result))).any()):
        raise ValueError(hint)
    if _finite_magnitude(potentials) * terms < torch.finfo(result.dtype).max / 2:  # no sum reaches it: -inf
        return result
    rows = bad.flatten(1).any(1) if result.dim() > 1 else bad
    if bool((rows & feasible()).any()):
        raise ValueError(hint + "; a feasible structure's score overflowed to -inf")
    return result


def cast_checked(x: Tensor, dtype: torch.dtype, what: str, names: str) -> Tensor:
    """``x`` (computed in a wider dtype) cast to ``dtype``, or a ValueError where a finite entry
    becomes infinite in the cast (values that are already infinite keep their meaning)."""
    out = x.to(dtype)
    narrows = x.is_floating_point() and torch.finfo(dtype).max < torch.finfo(x.dtype).max
    if not _VALIDATION["on"] or not narrows:  # a cast that does not narrow cannot overflow
        return out
    if not on_host(x):
        require(~(torch.isfinite(x) & ~torch.isfinite(out)).any(), _overflow(what, dtype, names))
    elif not all_finite(out) and bool((torch.isfinite(plain(x)) & ~torch.isfinite(plain(out))).any()):
        raise ValueError(_overflow(what, dtype, names))
    return out


def _overflow(what: str, dtype: torch.dtype, names: str) -> str:
    return (f"{what} overflows {dtype} (beyond +-{torch.finfo(dtype).max:.3g}): rescale {names}, e.g. "
            "divide them by a constant (to forbid an entry, use -inf rather than a huge finite number)")


def forbidden_pattern(x: Tensor) -> Tensor:
    """0 where ``x`` is finite, -inf where it is -inf: the DP on these decides feasibility alone."""
    return torch.where(x == float("-inf"), x.detach(), torch.zeros((), dtype=x.dtype, device=x.device))
