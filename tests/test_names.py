"""Public names follow one rule (``<structure>_<operation>``, the linear chain without a prefix);
former names still work, with a DeprecationWarning (issue 22)."""

from __future__ import annotations

import pytest
import torch

import structtorch as st

DEPRECATED = {  # old name: (new name, arguments)
    "viterbi_window": ("window_viterbi", lambda g: ((g["scores"],), {})),
    "loss_augmented_viterbi": ("loss_augmented", lambda g: ((g["unary"], g["trans"], g["target"]),
                                                            {"rescaling": "slack"})),
    "loss_augmented_viterbi_window": ("window_loss_augmented", lambda g: ((g["scores"], g["target"]), {})),
}


def _inputs():
    gen = torch.Generator().manual_seed(0)
    return {"scores": torch.randn(2, 4, 3, 3, generator=gen, dtype=torch.float64),
            "unary": torch.randn(2, 4, 3, generator=gen, dtype=torch.float64),
            "trans": torch.randn(3, 3, generator=gen, dtype=torch.float64),
            "target": torch.randint(0, 3, (2, 4), generator=gen)}


@pytest.mark.parametrize("old", list(DEPRECATED))
def test_old_names_warn_and_equal_the_new_ones(old):
    new, args = DEPRECATED[old]
    a, kw = args(_inputs())
    with pytest.warns(DeprecationWarning, match=f"structtorch.{old} is deprecated.*use structtorch.{new}"):
        got = getattr(st, old)(*a, **kw)
    want = getattr(st, new)(*a, **kw)
    assert all(torch.equal(x, y) for x, y in zip(got, want, strict=True))
    assert old in st.__all__ and new in st.__all__


def test_old_names_compile_without_graph_breaks():
    g = _inputs()
    torch._dynamo.reset()
    fn = torch.compile(lambda s: st.viterbi_window(s)[0], fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(fn(g["scores"]), st.window_viterbi(g["scores"])[0])


def test_public_dynamic_programs_follow_the_naming_rule():
    operations = ("viterbi", "log_partition", "marginals", "kbest", "sample", "score", "loss_augmented")
    structures = ("window", "semimarkov", "dependency", "cky")
    names = [n for n in st.__all__ if callable(getattr(st, n)) and n[0].islower() and n not in DEPRECATED]
    dps = [n for n in names if any(n.endswith(op) for op in operations) or n in ("path_score",)]
    for name in dps:
        prefix = name.split("_")[0]
        rest = name[len(prefix) + 1:]
        assert name in operations or name == "path_score" or (prefix in structures and rest in operations), name


def test_the_public_namespace_is_the_api_page():
    """Issue 54, item 5: dir(structtorch) lists the names the API page documents (``structtorch.X``
    anywhere on it, deprecated names in double backquotes), and nothing else (no importlib, no
    modules imported on the way)."""
    import re
    from pathlib import Path

    page = (Path(__file__).parents[1] / "docs" / "api.rst").read_text()
    documented = set(re.findall(r"structtorch\.([A-Za-z_]\w*)", page))
    public = {n for n in dir(st) if not n.startswith("_")}
    assert public - set(DEPRECATED) == documented, (public - documented, documented - public)
    assert all(f"``{old}``" in page for old in DEPRECATED)
    for name in public:
        getattr(st, name)  # each resolves
