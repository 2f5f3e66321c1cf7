"""The demo runs end to end, and the synthetic data has the documented structure."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from _runner import ROOT, run_example

from structtorch.data import make_tagging_data


def test_tagging_data_structure():
    data = make_tagging_data(64, num_labels=4, num_features=3, min_length=5, max_length=9, seed=3)
    B, T, F = data.x.shape
    assert (B, F) == (64, 3) and T == int(data.lengths.max()) and T <= 9
    assert int(data.lengths.min()) >= 5
    inside = torch.arange(T) < data.lengths[:, None]
    moves = (data.labels[:, 1:] - data.labels[:, :-1]) % 4
    assert set(moves[inside[:, 1:]].tolist()) <= {0, 1}, "labels only stay or move to the next"
    assert (data.x[~inside] == 0).all() and (data.labels[~inside] == 0).all()
    again = make_tagging_data(64, num_labels=4, num_features=3, min_length=5, max_length=9, seed=3)
    assert torch.equal(again.x, data.x)


def test_demo_runs(tmp_path):
    out = tmp_path / "demo.png"
    stdout = run_example("tagging_demo.py", "--epochs", "2", "--out", str(out))
    assert "after training" in stdout and "structured SVM" in stdout and "baseline" in stdout
    assert out.stat().st_size > 10_000


def test_dependency_parser_example_runs(tmp_path):
    """examples/dependency_parser.py --quick: both experiments' tables and the figure."""
    out = tmp_path / "parser.png"
    stdout = run_example("dependency_parser.py", "--quick", "--out", str(out))
    for marker in ("CRF (Eisner)", "slack-rescaled hinge", "non-projective CRF", "test trees have crossing arcs"):
        assert marker in stdout
    assert out.stat().st_size > 10_000


def test_readme_tour_runs():
    """Each Python block of the README and of the guide's concepts, tour and pitfalls (docs/guide/)
    runs on its own, in a fresh namespace, as a newcomer would paste it (no block needs an earlier one)."""
    import linecache
    import re

    blocks = 0
    for page in ("README.md", "docs/guide/concepts.md", "docs/guide/tour.md", "docs/guide/pitfalls.md"):
        text = (ROOT / page).read_text()
        for match in re.finditer(r"```python\n(.*?)```", text, flags=re.S):
            code, line = match.group(1), text[:match.start()].count("\n") + 2
            # each block's source under a name of its own: torch.compile reads a traced frame's
            # source by file name
            name = f"<{page}, the block at line {line}>"
            linecache.cache[name] = (len(code), None, code.splitlines(keepends=True), name)
            exec(compile(code, name, "exec"), {})
            blocks += 1
    assert blocks >= 20


def test_bauer_examples_run(tmp_path):
    for script, args in (
        ("bauer_fig7.py", ["--sizes", "10", "--sigmas", "1", "--grid", "0.5", "1", "--epochs", "2", "--repeats", "1",
                           "--jobs", "2", "--cache", str(tmp_path / "runs.jsonl")]),
        ("bauer_fig7.py", ["--sizes", "10", "--sigmas", "1", "--grid", "1", "--repeats", "1",
                           "--solver", "cutting_plane", "--tol", "0.1"]),
        ("bauer_fig4.py", ["--lengths", "10", "20", "--brute-max", "4"]),
        ("bauer_fig5.py", ["--lengths", "5", "10", "--datasets", "2"]),
    ):
        out = tmp_path / script.replace(".py", "")
        run_example(script, *args, "--out", str(out))
        assert out.with_suffix(".md").read_text().count("|") > 10
        assert out.with_suffix(".png").stat().st_size > 10_000
    assert len((tmp_path / "runs.jsonl").read_text().splitlines()) == 4  # the first run: 2 rescalings x 2 C
    again = run_example("bauer_fig7.py", "--sizes", "10", "--sigmas", "1", "--grid", "1", "--epochs", "2",
                        "--repeats", "1", "--cache", str(tmp_path / "runs.jsonl"), "--out", str(tmp_path / "again"))
    assert "2 trainings: 2 from the cache, 0 to run" in again


def test_bauer_fig5_best_by_loss_matches_brute_force():
    """The script's M[L] (best score gap at each Hamming loss L, from loss_augmented) is exact."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bauer_fig5", ROOT / "examples" / "bauer_fig5.py")
    fig5 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fig5)
    gen = torch.Generator().manual_seed(5)
    for potentials in ("g", "unary+pair"):
        for _ in range(3):
            chain = fig5.draw_chain(4, 3, gen, potentials)
            M = fig5.best_by_loss(*chain)
            assert M.shape == (5,) and M[0] == 0
            torch.testing.assert_close(M, fig5.brute_best_by_loss(*chain), rtol=0, atol=1e-9)
            margin, slack = fig5.objectives(M)
            torch.testing.assert_close(slack, torch.arange(5.0, dtype=torch.float64) * (1 + M))
            assert margin[0] == slack[0] == 0


def test_gene_structure_demo_runs(tmp_path):
    out = tmp_path / "genes.png"
    stdout = run_example("gene_structure.py", "--quick", "--out", str(out))
    assert "| HSM SVM |" in stdout and "| HMM-like chain |" in stdout
    assert out.stat().st_size > 10_000


def test_lp_examples_run(tmp_path):
    for script, marker in (("connectivity_denoising.py", "CMRF integrality"), ("connected_segmentation.py", "| hard |")):
        out = tmp_path / script.replace(".py", "")
        assert marker in run_example(script, "--quick", "--out", str(out))
        assert out.with_suffix(".md").read_text().count("|") > 10
        assert out.with_suffix(".png").stat().st_size > 5_000


def test_multicut_example_runs(tmp_path):
    out = tmp_path / "multicut.md"
    stdout = run_example("multicut_stability.py", "--quick", "--out", str(out))
    assert "| karate |" in stdout and "0.4198" in stdout and "[-inf," in out.read_text()


def test_gpu_benchmark_script_runs_in_smoke_mode():
    """benchmarks/gpu.py can only time on a GPU; --smoke runs every table at tiny sizes on CPU."""
    import os

    env = {**os.environ, "TRITON_INTERPRET": "1"}
    root = Path(__file__).parent.parent
    proc = subprocess.run([sys.executable, str(root / "benchmarks/gpu.py"), "--smoke"], capture_output=True,
                          text=True, timeout=600, env=env, cwd=root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for title in ("Linear chain", "Semi-Markov", "Hamming table"):
        assert title in proc.stdout
    assert "| 2,5,3 | logZ fwd+bwd |" in proc.stdout


def test_lp_layers_benchmark_runs_at_a_tiny_size():
    """benchmarks/lp_layers.py (issue 51) on a 6 x 6 grid: every table, the QP path beside
    cvxpylayers with their differences within the layer's tolerances."""
    root = Path(__file__).parent.parent
    proc = subprocess.run([sys.executable, str(root / "benchmarks/lp_layers.py"), "--sizes", "6", "--epochs", "2",
                           "--repeats", "1"], capture_output=True, text=True, timeout=300, cwd=root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line.split(" | ") for line in proc.stdout.splitlines() if line.startswith("| MAPRelaxation")]
    assert len(rows) == 2 and all(float(r[5]) < 1e-4 and float(r[6].strip(" |")) < 1e-2 for r in rows), rows
    assert "| hard connectivity |" in proc.stdout and "| soft connectivity (0.5) |" in proc.stdout


def test_action_mining_example_runs():
    stdout = run_example("action_mining.py", "--n", "120", "--B", "1", "8", "--nu", "0.1", "--C", "10")
    assert "subsequence LPBoost" in stdout and "chi2-SVM, binarized" in stdout
    assert "84.72" in stdout and "87.04" in stdout  # Table 7 beside our figures
    assert "patterns per one-vs-one classifier" in stdout and stdout.count(" vs ") >= 30


def test_transformer_ner_example_runs(tmp_path):
    """--quick on generated data; then a local checkpoint (--model: an encoder and its tokenizer
    saved with save_pretrained) on CoNLL files (--data). The CRF never breaks BIO."""
    transformers = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    from structtorch.data.conll import synthetic_chunking, write_conll

    out = tmp_path / "ner.md"
    stdout = run_example("transformer_ner.py", "--quick", "--out", str(out))
    rows = [line.split("|") for line in out.read_text().splitlines()[2:]]
    assert [(r[1].strip(), r[2].strip()) for r in rows] == [("CRF", "0%"), ("softmax", "0%"), ("CRF", "30%"),
                                                            ("softmax", "30%")]
    assert all(r[5].strip() == "0.0%" for r in rows if r[1].strip() == "CRF"), stdout
    assert all(0.2 < float(r[3]) <= 1 for r in rows), stdout  # chunk F1 (the quick run is undertrained)

    data = tmp_path / "conll"
    data.mkdir()
    write_conll(data / "train.txt", synthetic_chunking(40, seed=5))
    write_conll(data / "test.txt", synthetic_chunking(20, seed=6))
    words = [w for s in synthetic_chunking(40, seed=5) for w in s[0]]
    tok = tokenizers.Tokenizer(tokenizers.models.WordPiece(unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tok.train_from_iterator(words, tokenizers.trainers.WordPieceTrainer(
        vocab_size=120, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]))
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]",
                                                cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")
    model = tmp_path / "model"
    fast.save_pretrained(model)
    transformers.BertModel(transformers.BertConfig(vocab_size=len(fast), hidden_size=16, num_hidden_layers=1,
                                                   num_attention_heads=2, intermediate_size=32,
                                                   max_position_embeddings=64)).save_pretrained(model)
    stdout = run_example("transformer_ner.py", "--quick", "--model", str(model), "--data", str(data),
                         "--max-length", "64")
    assert f"data: {data}; 40 training and 20 test sentences" in stdout and "| CRF | 30% |" in stdout
