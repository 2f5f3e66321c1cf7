"""Linear chains: Viterbi, log-partition, marginals, path scores and k-best (``linear``), and
chains of order l (``window``).

Each structure has the same files: the public API (``linear.py``, ``window.py``), the PyTorch
reference loops (``_torch.py``) and the glue of the compiled CPU kernels (``_cpu.py``); which one
runs is decided in :mod:`structtorch._backend`.
"""

from .linear import Viterbi, kbest, log_partition, marginals, path_score, viterbi
from .sampling import sample
from .window import viterbi_window, window_score, window_viterbi

__all__ = ["viterbi", "log_partition", "marginals", "path_score", "kbest", "sample", "Viterbi",
           "window_viterbi", "window_score", "viterbi_window"]
