"""
Scaling out: several processes, and checkpoints that resume
===========================================================

Two things a long training needs: more processes working on it, and a way to stop and resume it.
:func:`structtorch.train.fit` does both:

- under ``torch.distributed`` every process calls ``fit`` with the same training set. By
  subgradient steps (``solver="subgradient"``, the model wrapped in ``DistributedDataParallel``)
  each process takes its share of every batch. By cutting planes (``solver="cutting_plane"``)
  each process runs the loss-augmented oracle on its share of the sequences and rank 0 solves the
  dual QP, so all processes end with the same weights and history as one process would have.
  (BCFW runs in one process and says so.)
- ``fit(..., checkpoint=path)`` writes the whole training state after every epoch; the same call
  resumes after the last epoch written and ends where an uninterrupted run would have.

Both run here on :func:`structtorch.data.make_tagging_data` with a linear chain model.
"""

# %%
# Checkpoints
# -----------
# ``checkpoint=path`` (with ``checkpoint_every=k`` epochs, default 1) saves the model, the
# optimizer and scheduler, the RNG states, the history and best-epoch selection, and the solver's
# own state (BCFW's blocks; the cutting planes' working set, dual and Gram matrix). Each write
# goes to a temporary file that is synced and renamed over ``path``, so a process killed at any
# moment leaves the previous checkpoint whole. Here a run "stops" after 5 epochs; a new model and
# the same call with ``epochs=12`` resume it at epoch 6.
import os
import tempfile
import time

import torch

import structtorch as st

start_time = time.perf_counter()
train_data = st.data.make_tagging_data(48, min_length=10, max_length=25, seed=1)
folder = tempfile.mkdtemp()
path = os.path.join(folder, "tagger.pt")


def run(epochs, checkpoint=None):
    torch.manual_seed(0)  # the model's initial weights
    model = st.LinearChainPotentials(8, 5)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    history = st.train.fit(model, train_data, st.StructuredHingeLoss(), epochs=epochs, C=1.0, batch_size=8,
                           optimizer=opt, progress=False, checkpoint=checkpoint)
    return model, history


run(5, checkpoint=path)  # stopped (or killed) after epoch 5
print(f"checkpoint: {os.path.getsize(path)} bytes")
resumed, h_resumed = run(12, checkpoint=path)  # a new process: the same call, more epochs
straight, h_straight = run(12)  # for comparison: no interruption
print(f"resumed run: {len(h_resumed)} epochs, objective {h_resumed['objective'][-1]:.6f}")
print("weights equal to the uninterrupted run's, bit for bit:",
      all(torch.equal(a, b) for a, b in zip(resumed.parameters(), straight.parameters(), strict=True)))
print("histories equal (but the times):",
      [{k: v for k, v in e.items() if k != "time"} for e in h_resumed.epochs]
      == [{k: v for k, v in e.items() if k != "time"} for e in h_straight.epochs])

# %%
# A checkpoint of another training is refused with an error that names the difference, never
# silently loaded: here another C.
try:
    model = st.LinearChainPotentials(8, 5)
    st.train.fit(model, train_data, st.StructuredHingeLoss(), epochs=12, C=0.5, batch_size=8,
                 optimizer=torch.optim.Adam(model.parameters(), lr=0.05), progress=False, checkpoint=path)
except ValueError as error:
    print("ValueError:", error)

# %%
# The exact solvers resume the same way: the cutting planes keep their working set, so the
# resumed run does not repeat an oracle pass.
cp = os.path.join(folder, "svm.pt")
st.train.fit(st.LinearChainPotentials(8, 5), train_data, st.StructuredHingeLoss("slack"), epochs=4, C=0.1,
             solver="cutting_plane", solver_options={"variant": "n_slack"}, progress=False, checkpoint=cp)
h = st.train.fit(st.LinearChainPotentials(8, 5), train_data, st.StructuredHingeLoss("slack"), epochs=100,
                 C=0.1, solver="cutting_plane", solver_options={"variant": "n_slack"}, progress=False,
                 checkpoint=cp)
print(f"n-slack cutting planes resumed at iteration 5: converged {h.converged} after {len(h)} iterations, "
      f"gap {h['gap'][-1]:.1e}")

# %%
# Several processes
# -----------------
# A script for ``torchrun --nproc-per-node 2 train.py`` (or any launcher that sets ``RANK``,
# ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT``): the process group first, then the same
# ``fit`` calls as in one process. ``gloo`` runs on CPUs, ``nccl`` on GPUs (then each process
# moves its model to its own device). With checkpoints, rank 0 writes and every rank reads the
# same file.
WORKER = '''
import torch
import torch.distributed as dist

import structtorch as st

dist.init_process_group("gloo")  # reads RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
rank, world = dist.get_rank(), dist.get_world_size()
data = st.data.make_tagging_data(48, min_length=10, max_length=25, seed=1)  # the same on every rank

# 1-slack cutting planes: each process runs the oracle on its share of the sequences,
# rank 0 solves the dual QP and sends the weights to all (float64: see below)
torch.manual_seed(0)
model = st.LinearChainPotentials(8, 5).double()
data64 = st.SequenceData(data.x.double(), data.labels, data.lengths)
history = st.train.fit(model, data64, st.StructuredHingeLoss(), epochs=300, C=0.1, solver="cutting_plane",
                       progress=False, solver_options={"tol": 1e-2})
if rank == 0:
    print(f"cutting planes on {world} processes: converged {history.converged} after {len(history)} "
          f"iterations, objective {history['objective'][-1]!r}, gap {history['gap'][-1]:.1e}")

# subgradient steps: the model in DistributedDataParallel; each process takes its share of
# every batch of 16 and DDP averages the gradients
torch.manual_seed(0)
model = st.LinearChainPotentials(8, 5)
ddp = torch.nn.parallel.DistributedDataParallel(model)
history = st.train.fit(ddp, data, st.StructuredHingeLoss(), epochs=3, C=1.0, batch_size=16,
                       progress=False, optimizer=torch.optim.Adam(ddp.parameters(), lr=0.05))
weights = [torch.zeros_like(model.emission.weight) for _ in range(world)]
dist.all_gather(weights, model.emission.weight.detach())
if rank == 0:
    print(f"DDP subgradient steps: objective {history['objective'][-1]:.4f} after 3 epochs; "
          f"every process holds the same weights: {all(torch.equal(w, weights[0]) for w in weights)}")
dist.destroy_process_group()
'''

# %%
# We launch it on two local processes (what ``torchrun`` does, without its own start-up time)
# when this machine has at least two CPUs for them (on one, the two processes take turns and the
# run takes over 10 s: then only the command is shown), and compare the cutting planes with one
# process. In float64 the two runs take the same iterations to the same objective (to rounding);
# in float32 the different order of the sums can change the solver's path near the tolerance,
# not the certificate.
import socket
import subprocess
import sys

cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
script = os.path.join(folder, "train.py")
with open(script, "w") as f:
    f.write(WORKER)
if cpus >= 2:
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "2",
           "OMP_NUM_THREADS": "1"}
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, script], env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)]
    outputs = [p.communicate(timeout=300) for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError("the two-process run failed:\n" + "\n".join(err[-2000:] for _, err in outputs))
    print(outputs[0][0].strip())
    print(f"(two processes, start-up included: {time.perf_counter() - t0:.1f} s)")
else:
    print(f"one CPU here: run it with  torchrun --nproc-per-node 2 {os.path.basename(script)}")

torch.manual_seed(0)
train64 = st.SequenceData(train_data.x.double(), train_data.labels, train_data.lengths)
one = st.train.fit(st.LinearChainPotentials(8, 5).double(), train64, st.StructuredHingeLoss(), epochs=300,
                   C=0.1, solver="cutting_plane", progress=False, solver_options={"tol": 1e-2})
print(f"cutting planes in one process: converged {one.converged} after {len(one)} iterations, "
      f"objective {one['objective'][-1]!r}, gap {one['gap'][-1]:.1e}")

# %%
# On data this small two processes cost more than they save (start-up, and an exchange of
# planes per iteration). The oracle is what gets shared: with two processes the hidden
# semi-Markov SVM of the gene demo, whose oracle is a long semi-Markov search, ran 1.85x as fast
# per iteration; 1-slack training on 8,936 chunking sentences, whose oracle pass takes about
# 0.1 s, gained nothing (``benchmarks/distributed.py``).
print(f"total {time.perf_counter() - start_time:.1f} s")
