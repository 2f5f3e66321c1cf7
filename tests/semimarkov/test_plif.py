"""PLiF: values, gradients, monotonicity, regularizer and errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import structtorch as st


def test_interpolates_and_clamps():
    plif = st.PLiF(5, 0.0, 4.0)
    plif.raw.data = torch.tensor([[0.0, 1.0, 4.0, 9.0, 16.0]])
    x = torch.tensor([-1.0, 0.0, 0.5, 1.0, 3.5, 4.0, 10.0])
    torch.testing.assert_close(plif(x), torch.tensor([0.0, 0.0, 0.5, 1.0, 12.5, 16.0, 16.0]))
    np.testing.assert_allclose(plif(x).detach(), np.interp(x, np.arange(5.0), [0, 1, 4, 9, 16]))


def test_several_functions_and_gradients():
    torch.manual_seed(0)
    plif = st.PLiF(7, -2.0, 3.0, num_functions=3).double()
    plif.raw.data.normal_()
    x = torch.rand(4, 5, 3, dtype=torch.float64) * 6 - 2.5
    y = plif(x)
    assert y.shape == (4, 5, 3)
    for k in range(3):
        xs = np.linspace(-2.0, 3.0, 7)
        np.testing.assert_allclose(y[..., k].detach(), np.interp(x[..., k], xs, plif.raw[k].detach()), rtol=1e-6)
    raw = plif.raw.detach().clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda w: torch.func.functional_call(plif, {"raw": w}, (x,)), (raw,))


@pytest.mark.parametrize("monotone, sign", [("increasing", 1), ("decreasing", -1)])
def test_monotone_parametrization(monotone, sign):
    torch.manual_seed(1)
    plif = st.PLiF(10, 0.0, 1.0, num_functions=2, monotone=monotone)
    plif.raw.data.normal_(0, 3)
    y = plif(torch.linspace(-0.5, 1.5, 200).unsqueeze(1).expand(200, 2))
    assert (sign * y.diff(dim=0) >= 0).all()
    assert (sign * plif.ordinates.diff(dim=1) > 0).all()


def test_smoothness_regularizer():
    plif = st.PLiF(4, 0.0, 3.0, num_functions=2)
    plif.raw.data = torch.tensor([[0.0, 2.0, 1.0, 4.0], [1.0, 1.0, 1.0, 1.0]])
    # |2-0| + |1-2| + |4-1| + |4-0| = 10 for the first, 0 for the constant one
    assert plif.smoothness().item() == 10.0


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        ((1, 0.0, 1.0), {}, "num_points must be an int >= 2"),
        ((5, 1.0, 1.0), {}, "need finite low < high"),
        ((5, 2.0, 1.0), {}, "need finite low < high"),
        ((5, float("-inf"), 1.0), {}, "need finite low < high"),
        ((5, 0.0, 1.0), {"num_functions": 0}, "num_functions must be an int >= 1"),
        ((5, 0.0, 1.0), {"monotone": "up"}, "monotone must be None, 'increasing' or 'decreasing'"),
    ],
)
def test_bad_arguments(args, kwargs, message):
    with pytest.raises(ValueError, match=message):
        st.PLiF(*args, **kwargs)


def test_wrong_last_axis():
    with pytest.raises(ValueError, match=r"x must have shape \(..., num_functions\) = \(..., 3\)"):
        st.PLiF(4, 0.0, 1.0, num_functions=3)(torch.zeros(5, 2))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_both_infinities_are_clamped_and_nan_obeys_the_validation_switch(dtype):
    """Issue 21 item 4: +inf was refused while -inf was clamped, as the docstring promises for both."""
    plif = st.PLiF(5, 0.0, 4.0).to(dtype)
    plif.raw.data = torch.tensor([[0.0, 1.0, 4.0, 9.0, 16.0]], dtype=dtype)
    x = torch.tensor([float("-inf"), -1.0, 2.0, 10.0, float("inf")], dtype=dtype, requires_grad=True)
    y = plif(x)
    assert y.tolist() == [0.0, 0.0, 4.0, 16.0, 16.0]
    (grad,) = torch.autograd.grad(y.sum(), plif.raw)
    assert torch.isfinite(grad).all() and grad.sum() == 5
    phi = st.semimarkov.plif.plif_basis(x.detach(), 5, 0.0, 4.0)
    torch.testing.assert_close(phi @ plif.raw[0].detach(), y.detach())
    nan = torch.tensor([1.0, float("nan")], dtype=dtype)
    with pytest.raises(ValueError, match=r"x contains NaN at index \(1, 0\); must not be NaN"):
        plif(nan)
    with st.set_validation(False):
        assert plif(nan)[0].item() == 1.0  # no check, no host sync; NaN stays NaN
        assert plif(nan)[1].isnan()
    with pytest.raises(ValueError, match="ordinates must be finite"):
        st.semimarkov.plif.plif_interpolate(torch.zeros(2, 1, dtype=dtype),
                                           torch.tensor([[0.0, float("-inf")]], dtype=dtype), 0.0, 1.0)
