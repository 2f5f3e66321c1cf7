"""
Serving a trained tagger: torch.export, AOTInductor and ONNX
=============================================================

A tagger trained with structtorch leaves Python through ``torch.export``: the exported program
holds structtorch's operators (the Viterbi among them) with a symbolic batch size and length, so
one export serves every batch. From there, two ways to serve it: an AOTInductor package (compiled
ahead of time, loaded from C++ or Python) and, with :func:`structtorch.onnx_translation_table`, an
ONNX model for onnxruntime. Both must answer as the eager model on batches of other sizes and
lengths, masks included. ``torch.jit.trace`` and ``torch.jit.script`` are refused with an error
that points here (a trace would freeze the lengths and masks of its example call).

onnx, onnxscript and onnxruntime come with the ``export`` extra (``pip install
"structtorch[export]"``); AOTInductor needs a C++ compiler.
"""

# %%
# A small BIO tagger
# ------------------
# Word and POS embeddings, a convolution over three neighbours and a CRF with the BIO
# constraints, trained for a few epochs on :func:`structtorch.data.synthetic_chunking`.
import os
import statistics
import tempfile
import time

import numpy as np
import torch
from torch import nn

import structtorch as st
from structtorch.data import encode_tags, synthetic_chunking

torch.manual_seed(0)
torch.set_num_threads(1)
train_sents, test_sents = synthetic_chunking(300, seed=0), synthetic_chunking(64, seed=1)
train_tags, _, tags = encode_tags([s[2] for s in train_sents])
words = {w: i + 1 for i, w in enumerate(sorted({w.lower() for s in train_sents for w in s[0]}))}
pos = {p: i + 1 for i, p in enumerate(sorted({p for s in train_sents for p in s[1]}))}


def ids(sents, vocab, field, lower=False):
    T = max(len(s[0]) for s in sents)
    out = torch.zeros(len(sents), T, dtype=torch.long)
    for b, s in enumerate(sents):
        out[b, : len(s[0])] = torch.tensor([vocab.get(x.lower() if lower else x, 0) for x in s[field]])
    return out


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.words, self.pos = nn.Embedding(len(words) + 1, 32), nn.Embedding(len(pos) + 1, 8)
        self.conv = nn.Conv1d(40, 64, kernel_size=3, padding=1)
        self.out = nn.Linear(64, len(tags))
        self.crf = st.LinearChainCRF(len(tags), constraints=st.allowed_transitions("BIO", tags))

    def emissions(self, w, p):
        x = torch.cat([self.words(w), self.pos(p)], -1)
        return self.out(torch.relu(self.conv(x.transpose(1, 2))).transpose(1, 2))

    def forward(self, w, p, mask):  # what gets served: the best tag sequence and its score
        return self.crf.decode(self.emissions(w, p), mask)


model = Tagger()
w_train, p_train = ids(train_sents, words, 0, lower=True), ids(train_sents, pos, 1)
mask_train = w_train > 0
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
for _ in range(8):
    for idx in torch.randperm(len(train_sents)).split(32):
        loss = model.crf(model.emissions(w_train[idx], p_train[idx]), train_tags[idx].clamp(min=0),
                         mask_train[idx], reduction="mean")
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
model.eval()
w_test, p_test = ids(test_sents, words, 0, lower=True), ids(test_sents, pos, 1)
mask_test = w_test > 0
score, paths = model(w_test, p_test, mask_test)
gold = [s[2] for s in test_sents]
predicted = [[tags[k] for k in row[: len(g)]] for row, g in zip(paths.tolist(), gold, strict=True)]
print(f"test chunk F1 {st.chunk_f1(predicted, gold).f1:.3f}")

# %%
# One export, every batch
# -----------------------
# ``torch.export.export`` with a dynamic batch size and length; the exported program answers as
# the eager model on a batch of another size.
batch, length = torch.export.Dim("batch", min=1), torch.export.Dim("length", min=2)
dims = {0: batch, 1: length}
example = (w_test[:4], p_test[:4], mask_test[:4])
program = torch.export.export(model, example, dynamic_shapes=(dims, dims, dims))
exported = program.module()
same = torch.equal(exported(w_test, p_test, mask_test)[1], paths)
print(f"exported program, {len(test_sents)} sentences: same paths as eager: {same}")

# %%
# An AOTInductor package
# ----------------------
# Compiled ahead of time into one file; ``aoti_load_package`` (or the C++ runtime) runs it without
# the Python model.
folder = tempfile.mkdtemp()
began = time.perf_counter()
package = torch._inductor.aoti_compile_and_package(program, package_path=os.path.join(folder, "tagger.pt2"))
aoti = torch._inductor.aoti_load_package(package)
print(f"AOTInductor package compiled in {time.perf_counter() - began:.0f} s: same paths: "
      f"{torch.equal(aoti(w_test, p_test, mask_test)[1], paths)}")

# %%
# ONNX and onnxruntime
# --------------------
# ``torch.onnx.export`` of the same model, with structtorch's translations of its operators (the
# Viterbi as an ONNX loop over positions); onnxruntime then decodes without PyTorch.
import onnxruntime  # noqa: E402 - the export extra, needed from here on

onnx_program = torch.onnx.export(model, example, dynamic_shapes=(dims, dims, dims), dynamo=True,
                                 custom_translation_table=st.onnx_translation_table(), verbose=False)
onnx_path = os.path.join(folder, "tagger.onnx")
onnx_program.save(onnx_path)
options = onnxruntime.SessionOptions()
options.intra_op_num_threads = options.inter_op_num_threads = 1  # one thread, as PyTorch here
session = onnxruntime.InferenceSession(onnx_path, options)
names = [i.name for i in session.get_inputs()]


def run_onnx(w, p, mask):
    return session.run(None, dict(zip(names, (w.numpy(), p.numpy(), mask.numpy()), strict=True)))


onnx_score, onnx_paths = run_onnx(w_test, p_test, mask_test)
reference = score.detach().numpy()
relative = np.abs(onnx_score - reference) / np.maximum(np.abs(reference), 1.0)
print(f"onnxruntime: same paths: {np.array_equal(onnx_paths, paths.numpy())}, largest relative score "
      f"difference {relative.max():.1e}")

# %%
# Latency
# -------
# Median time of one call at batch 1 and 32 (one thread), for the eager model, the AOTInductor
# package and onnxruntime.


def median_ms(fn, *args, runs=200):
    fn(*args)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


rows = {}
with torch.no_grad():
    for size in (1, 32):
        args = (w_test[:size], p_test[:size], mask_test[:size])
        rows[size] = {"eager": median_ms(model, *args), "AOTInductor": median_ms(aoti, *args),
                      "onnxruntime": median_ms(run_onnx, *args)}
print("| batch | eager ms | AOTInductor ms | onnxruntime ms |\n|---|---|---|---|")
for size, r in rows.items():
    print(f"| {size} | {r['eager']:.2f} | {r['AOTInductor']:.2f} | {r['onnxruntime']:.2f} |")

import matplotlib.pyplot as plt  # noqa: E402

fig, ax = plt.subplots(figsize=(6, 3))
kinds = ["eager", "AOTInductor", "onnxruntime"]
for k, size in enumerate(rows):
    ax.bar(np.arange(3) + 0.4 * k, [rows[size][kind] for kind in kinds], width=0.4, label=f"batch {size}")
ax.set_xticks(np.arange(3) + 0.2, kinds)
ax.set_ylabel("ms per call (median)")
ax.legend()
plt.tight_layout()
plt.show()
