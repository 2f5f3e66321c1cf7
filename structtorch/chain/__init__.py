"""Linear chains: Viterbi, log-partition, marginals, path scores and k-best (``linear``), sampling
(``sampling``) and chains of order l (``window``).

The rooms of every structure package: the public API (``linear.py``, ``sampling.py``,
``window.py``), the canonical form and its checks (``layout.py``), the PyTorch reference loops
and the overflow guard (``_torch.py``), the compiled CPU glue (``_cpu.py``), the Triton kernels
(``_triton.py``), the operators (``_ops.py``) and the small-call lanes (``_quick.py``: the common
case of a call in one C++ call); :mod:`structtorch._backend` decides which runs.
"""

from .linear import Viterbi, kbest, log_partition, marginals, path_score, viterbi
from .sampling import sample
from .window import viterbi_window, window_log_partition, window_marginals, window_score, window_viterbi

__all__ = ["viterbi", "log_partition", "marginals", "path_score", "kbest", "sample", "Viterbi",
           "window_viterbi", "window_score", "window_log_partition", "window_marginals", "viterbi_window"]
