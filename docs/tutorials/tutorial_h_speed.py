"""
Speed: backends, validation, torch.compile, mixed precision, device ops, busy machines
======================================================================================

What decides how fast a structtorch call runs, and the switches that change it:

- the *backend* that runs the dynamic programs: compiled C++ kernels on CPU, Triton kernels on
  CUDA, PyTorch loops anywhere (``st.use_backend``);
- the *value checks* of every call (NaN, ranges, overflow), which ``st.set_validation(False)``
  skips;
- ``torch.compile``, which traces the structured layers without graph breaks;
- mixed precision (``torch.autocast``): half-precision potentials, computed in float32 or better;
- on a GPU, the number of kernel launches and host syncs per call, which
  :func:`structtorch.profiling.device_ops` counts without a GPU;
- on a busy machine, the threads per call (``st.set_adaptive_threads``).

Every figure below is measured when this page is built, on that machine's CPU.
"""

# %%
# Backends
# --------
# On CPU tensors the default backend is ``"compiled"``: C++ kernels built on first use, with
# float64 accumulators and hand-written backward passes. ``"torch"`` runs the reference PyTorch
# loops (one batched step per position). Both give the same results; ``st.use_backend`` forces one
# for a block (or, called plainly, for the process; or ``STRUCTTORCH_BACKEND=torch``).
import time

import torch

import structtorch as st

start_time = time.perf_counter()
torch.manual_seed(0)
unary = torch.randn(32, 50, 10, requires_grad=True)  # (B, T, N)
trans = torch.randn(10, 10, requires_grad=True)
lengths = torch.randint(20, 51, (32,))


def timed(fn, repeat=20):
    fn()  # warm up (the first call loads the kernels)
    t0 = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - t0) / repeat * 1e3  # ms per call


def crf_step():
    st.log_partition(unary, trans, lengths=lengths).sum().backward()


def decode():
    with torch.no_grad():
        st.viterbi(unary, trans, lengths=lengths)


for backend in ("compiled", "torch"):
    with st.use_backend(backend):
        print(f"{backend:>8}: log-partition fwd+bwd {timed(crf_step):6.2f} ms, Viterbi {timed(decode):6.2f} ms")
with st.use_backend("torch"):
    reference = st.log_partition(unary, trans, lengths=lengths)
print("same log-partition:", torch.allclose(reference, st.log_partition(unary, trans, lengths=lengths)))

# %%
# On CUDA tensors the default is ``"triton"`` (one fused launch per call, when Triton is
# installed); ``"torch"`` is the fallback everywhere else.
#
# Value checks
# ------------
# Every call checks its inputs: shapes, dtypes and devices (always), and values: NaN, ``+inf``,
# labels out of range, results that overflow. A bad value raises a ``ValueError`` naming the
# argument and the first bad index:
bad = unary.detach().clone()
bad[3, 7, 2] = float("nan")
try:
    st.viterbi(bad, trans.detach())
except ValueError as error:
    print("ValueError:", error)

# %%
# The value checks read the data: on CPU a few tens of microseconds per call, on a GPU one
# asynchronous device assertion per call (no host sync). Once a pipeline is known to be right,
# ``st.set_validation(False)`` (a context manager, or a plain call for the process) skips them;
# shape, dtype and device checks stay. The difference shows on short calls:
small_u, small_t = torch.randn(1, 20, 5), torch.randn(5, 5)
small_y = torch.randint(0, 5, (1, 20))


def short_calls():
    st.log_partition(small_u, small_t)
    st.structured_hinge(small_u, small_t, small_y)


on = timed(short_calls, repeat=100)
with st.set_validation(False):
    off = timed(short_calls, repeat=100)
    print("inside the block, validation_enabled() =", st.validation_enabled())
print(f"a short log-partition and hinge: {1e3 * on:.0f} us with value checks, {1e3 * off:.0f} us without")

# %%
# torch.compile
# -------------
# Every kernel is a ``torch.ops.structtorch`` operator with a fake (meta) implementation, so
# ``torch.compile(..., fullgraph=True)`` traces the CRF, Viterbi, the log-partition, the hinge
# losses and the semi-Markov programs without graph breaks. The gain is on a GPU (inductor fuses
# the encoder around the CRF; CUDA graphs remove the launch overhead); on a CPU and tiny inputs
# compiling costs seconds and gains nothing, so this page uses the cheap ``aot_eager`` backend
# and a tiny model, only to show that the graph is whole. Use ``backend="inductor"`` (the
# default) on a GPU.
crf = st.LinearChainCRF(5)
emissions = torch.randn(8, 12, 5, requires_grad=True)
tags, lens = torch.randint(0, 5, (8, 12)), torch.full((8,), 12)


def loss_fn(emissions, tags, lengths):
    return crf(emissions, tags, lengths=lengths, reduction="mean")


try:
    compiled = torch.compile(loss_fn, fullgraph=True, backend="aot_eager")
    t0 = time.perf_counter()
    for _ in range(2):  # the first calls trace and compile
        compiled(emissions, tags, lens).backward()
    compile_s = time.perf_counter() - t0
    same = torch.allclose(compiled(emissions, tags, lens), loss_fn(emissions, tags, lens))
    print(f"compiled with fullgraph=True in {compile_s:.1f} s; same loss as eager: {same}")
    print(f"per step: compiled {timed(lambda: compiled(emissions, tags, lens).backward()):.2f} ms, "
          f"eager {timed(lambda: loss_fn(emissions, tags, lens).backward()):.2f} ms (aot_eager on CPU)")
except Exception as error:  # e.g. a Python version that TorchDynamo does not support yet
    print(f"torch.compile is not available here ({type(error).__name__}): skipped")

# %%
# One graph for every batch size and length
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A training loop meets a new (B, T) at nearly every batch (trimmed to its longest sentence).
# Compile the step's forward - encoder, CRF loss, decoding - with ``dynamic=True``, and keep
# ``backward()`` and ``optimizer.step()`` outside it: the compiled forward records the autograd
# graph as eager code would, and its backward is compiled with it. Nothing in structtorch reads a
# size as a Python number while tracing, so one graph serves every shape; the set stance below
# makes a recompile an error. PyTorch specializes sizes 0 and 1: a batch of one sequence (or
# T = 2, whose one transition step is a size 1) compiles a second graph, unless the dimension is
# marked with ``torch._dynamo.mark_unbacked``; and a first batch whose size equals the number of
# labels shares its symbol (duck sizing), so start with another.
encoder = torch.nn.Linear(6, 5)


def step(x, labels, mask):
    return crf(encoder(x), labels, mask, reduction="token_mean")


try:
    compiled_step = torch.compile(step, dynamic=True, fullgraph=True, backend="aot_eager")
    optimizer = torch.optim.SGD([*encoder.parameters(), *crf.parameters()], lr=0.1)
    for i, (B, T) in enumerate([(8, 12), (6, 17), (9, 5), (3, 30), (7, 9)]):
        x, labels = torch.randn(B, T, 6), torch.randint(0, 5, (B, T))
        mask = torch.arange(T) < torch.randint(1, T + 1, (B,))[:, None]
        with torch.compiler.set_stance("fail_on_recompile" if i else "default"):
            loss = compiled_step(x, labels, mask)
        optimizer.zero_grad()
        loss.backward()  # outside the compiled function
        optimizer.step()
    print("five shapes, one graph (a recompile would have raised)")
except Exception as error:
    print(f"torch.compile is not available here ({type(error).__name__}): skipped")

# %%
# Mixed precision
# ---------------
# Under ``torch.autocast`` an encoder returns float16/bfloat16 emissions. The structured layers
# take them, compute in float32 or better (on CPU the dynamic programs accumulate in float64
# whatever the input dtype) and return the input dtype, or the promoted one beside float32
# parameters: the CRF's loss below is float32, its parameters' dtype.
encoder = torch.nn.Linear(16, 5)
x = torch.randn(8, 12, 16)
with torch.autocast("cpu", dtype=torch.bfloat16):  # "cuda" on a GPU
    em_bf16 = encoder(x)
    loss_bf16 = crf(em_bf16, tags, lengths=lens, reduction="mean")
loss_fp32 = crf(encoder(x), tags, lengths=lens, reduction="mean")
print(f"emissions {em_bf16.dtype}, loss {loss_bf16.dtype}: {loss_bf16.item():.4f} "
      f"(float32 throughout: {loss_fp32.item():.4f})")
score, path = st.viterbi(em_bf16, crf.transitions.detach().bfloat16())
print("bfloat16 Viterbi scores:", score.dtype, "- the path is the float64 recursion's:",
      torch.equal(path, st.viterbi(em_bf16.double(), crf.transitions.detach().bfloat16().double())[1]))

# %%
# Counting device operations
# --------------------------
# On a GPU each ATen operator is a kernel launch (5-10 us of overhead) and some (``item``,
# ``nonzero``) wait for the device: a host sync. A dynamic program written as PyTorch loops
# launches a few kernels per position; the Triton backend runs a call in one fused launch.
# :func:`structtorch.profiling.device_ops` counts what a call would launch and sync, on any
# machine: here the PyTorch loops, whose count grows with T, against the compiled CPU kernels.
from structtorch.profiling import device_ops

u, t = torch.randn(4, 40, 5), torch.randn(5, 5)
for backend in ("torch", "compiled"):
    with st.use_backend(backend), st.set_validation(False):
        counts = [device_ops(lambda T=T: st.viterbi(u[:, :T], t)) for T in (10, 40)]
    print(f"{backend:>8}: Viterbi ops at T = 10 and 40: {counts[0].ops}, {counts[1].ops}; syncs "
          f"{counts[1].syncs}; most frequent: {counts[1].names.most_common(2)}")

# %%
# The same count for the CUDA path runs the Triton kernels in Triton's interpreter on CPU
# tensors (slow, so not run on this page; ``TRITON_INTERPRET=1`` must be set before Triton is
# imported)::
#
#     TRITON_INTERPRET=1 python -c "
#     import torch, structtorch as st
#     from structtorch.profiling import device_ops
#     u, t = torch.randn(4, 40, 5), torch.randn(5, 5)
#     with st.use_backend('triton'), st.set_validation(False):
#         for T in (10, 40):
#             c = device_ops(lambda: st.viterbi(u[:, :T], t))
#             print(T, c.ops, c.launches, c.syncs, dict(c.kernels))"
#
# which prints ``4`` ops, ``1`` launch (``chain_viterbi``) and ``0`` syncs at both lengths. The
# test suite holds every public call to such a budget (``tests/test_launch_budget.py``: a count
# that does not grow with T, 6 to 16 leaf operators besides the Triton launches, no host sync
# with validation off).
#
# Busy machines
# -------------
# PyTorch's CPU operators open a parallel region over ``torch.get_num_threads()`` threads and wait
# for all of them at its end. When another process keeps a core busy, one thread is often
# descheduled and every region waits for it: a call made of many small regions can run several
# times slower at two threads than at one. So each structtorch call first looks at the free CPUs
# (``/proc/loadavg`` minus this process's own runnable threads, read at most every 50 ms) and, on
# a busy machine, runs on the free ones only, restoring the thread count after. On a quiet
# machine nothing changes. Switch it off to measure at a fixed thread count:
st.set_adaptive_threads(False)  # or STRUCTTORCH_ADAPTIVE_THREADS=0 in the environment
fixed = timed(crf_step)
st.set_adaptive_threads(True)  # the default
print(f"log-partition fwd+bwd at a fixed {torch.get_num_threads()} thread(s): {fixed:.2f} ms; "
      f"adaptive: {timed(crf_step):.2f} ms (equal on a quiet machine)")

# %%
# The adaptation covers structtorch's own calls; the encoder's operators (``nn.Linear``,
# convolutions) still use every thread. Where other jobs share the machine, ``torch.set_num_threads``
# to the cores you own is the simplest fix for the whole model.
print(f"total {time.perf_counter() - start_time:.1f} s")
