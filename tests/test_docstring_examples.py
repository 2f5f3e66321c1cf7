"""The runnable examples in the docstrings of the central public names (issue 40, item 5).

Each listed name must carry an ``Examples`` section with ``>>>`` lines, and every example must
pass under the stdlib doctest (NORMALIZE_WHITESPACE | ELLIPSIS), each docstring on its own: the
examples import what they use (names of their own module are available too, as under Sphinx).
"""

from __future__ import annotations

import doctest
import inspect

import pytest

import structtorch as st
import structtorch.lp as lp

CENTRAL = {  # name as a user writes it -> the object whose docstring holds the example
    "LinearChainCRF": st.LinearChainCRF,
    "SemiMarkovCRF": st.SemiMarkovCRF,
    "viterbi": st.viterbi,
    "log_partition": st.log_partition,
    "marginals": st.marginals,
    "loss_augmented": st.loss_augmented,
    "StructuredHingeLoss": st.StructuredHingeLoss,
    "structured_hinge": st.structured_hinge,
    "SparseFeaturePotentials": st.SparseFeaturePotentials,
    "LinearChainPotentials": st.LinearChainPotentials,
    "allowed_transitions": st.allowed_transitions,
    "word_mask": st.word_mask,
    "tokens_to_words": st.tokens_to_words,
    "chunk_f1": st.chunk_f1,
    "train.fit": st.train.fit,
    "semimarkov_viterbi": st.semimarkov_viterbi,
    "semimarkov_loss_augmented": st.semimarkov_loss_augmented,
    "lp.MAPRelaxation": lp.MAPRelaxation,
    "lp.map_lp": lp.map_lp,
    "lp.multicut": lp.multicut,
    "lp.map_exact": lp.map_exact,
    "lp.round_connected": lp.round_connected,
}
FLAGS = doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS


def _docstring_test(name: str, obj: object) -> doctest.DocTest:
    """The doctest of ``obj``'s own docstring (not its members'), in a fresh copy of its module's
    namespace."""
    module = inspect.getmodule(getattr(obj, "__wrapped__", obj))
    finder = doctest.DocTestFinder(recurse=False)
    tests = finder.find(obj, name, module=False, globs=dict(vars(module)) if module else {})
    return next((t for t in tests if t.examples), None)


@pytest.mark.parametrize("name", list(CENTRAL))
def test_docstring_example_runs(name):
    test = _docstring_test(name, CENTRAL[name])
    assert test is not None, f"{name}'s docstring has no example (an 'Examples' section with >>> lines)"
    report: list[str] = []
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    result = runner.run(test, out=report.append)
    assert result.failed == 0, "".join(report)
