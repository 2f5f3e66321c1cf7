"""Handwritten words: the digit-sequence generator, the example end to end, and gradients from the
structured losses reaching the torchvision CNN."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("sklearn", reason="digit_sequences needs scikit-learn's bundled digits")

from structtorch.data import digit_sequences, digit_transitions  # noqa: E402
from structtorch.data import digits as digits_module  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def bigram_frequencies(data) -> torch.Tensor:
    """Empirical P(next | current) (10, 10) over the consecutive pairs inside the lengths."""
    inside = data.mask[:, 1:]
    current, following = data.labels[:, :-1][inside], data.labels[:, 1:][inside]
    counts = torch.zeros(10, 10).index_put_((current, following), torch.ones(len(current)), accumulate=True)
    return counts / counts.sum(1, keepdim=True)


def test_digit_sequences_structure():
    data = digit_sequences(64, min_length=3, max_length=7, size=16, noise=0.3, seed=5)
    B, T = data.labels.shape
    assert data.images.shape == (64, T, 1, 16, 16) and data.images.dtype == torch.float32
    assert data.labels.dtype == torch.int64 and data.lengths.shape == (64,)
    assert T == int(data.lengths.max()) <= 7 and int(data.lengths.min()) >= 3
    assert data.transitions.shape == (10, 10) and torch.allclose(data.transitions.sum(1), torch.ones(10))
    mask = data.mask
    assert 0 <= int(data.labels.min()) and int(data.labels.max()) <= 9
    assert len(set(data.labels[mask].tolist())) == 10
    assert (data.labels[~mask] == 0).all() and (data.images[~mask] == 0).all() and (data.image_ids[~mask] == -1).all()
    assert (data.images[mask].flatten(1).std(1) > 0).all(), "every character has an image"
    assert data.flat().shape == (64, T, 256) and len(data) == 64
    sub = data.batch(torch.tensor([3, 1]))
    assert torch.equal(sub.labels, data.labels[[3, 1]]) and torch.equal(sub.images, data.images[[3, 1]])


def test_clean_native_images_are_the_sklearn_digits_of_their_label():
    from sklearn.datasets import load_digits

    bunch = load_digits()
    data = digit_sequences(50, size=8, noise=0.0, split="all", seed=2)
    ids = data.image_ids[data.mask]
    assert torch.equal(torch.as_tensor(bunch.target)[ids], data.labels[data.mask])
    expected = torch.as_tensor(bunch.images, dtype=torch.float32)[ids] / 16
    assert torch.equal(data.images[data.mask][:, 0], expected)
    big = digit_sequences(50, size=32, noise=0.0, split="all", seed=2)
    assert big.images.shape[-2:] == (32, 32) and torch.equal(big.labels, data.labels)
    assert 0.0 <= float(big.images.min()) and float(big.images.max()) <= 1.0
    # bilinear upscaling keeps each image's mean ink closely
    torch.testing.assert_close(big.images[big.mask].mean((1, 2, 3)), data.images[data.mask].mean((1, 2, 3)),
                               atol=0.03, rtol=0)


def test_bigram_statistics_follow_the_transition_matrix():
    informative = digit_sequences(1500, min_length=8, max_length=8, seed=11)
    assert torch.equal(informative.transitions, digit_transitions("informative"))
    freq = bigram_frequencies(informative)  # about 1,050 pairs per row
    assert (freq - informative.transitions).abs().max() < 0.06
    assert (freq.max(1).values > 0.6).all(), "each digit has one strongly preferred successor"
    first = torch.bincount(informative.labels[:, 0], minlength=10) / 1500
    assert (first - 0.1).abs().max() < 0.04, "the first digit is uniform"

    uniform = digit_sequences(1500, min_length=8, max_length=8, transitions="uniform", seed=11)
    assert (bigram_frequencies(uniform) - 0.1).abs().max() < 0.05

    cycle = 0.5 * torch.eye(10) + 0.5 * torch.eye(10).roll(1, dims=1)  # stay, or move to i + 1
    custom = digit_sequences(300, min_length=5, max_length=5, transitions=cycle, seed=0)
    moves = (custom.labels[:, 1:] - custom.labels[:, :-1]) % 10
    assert set(moves.flatten().tolist()) == {0, 1}
    assert abs(moves.float().mean().item() - 0.5) < 0.05


def test_reproducible_by_seed_and_train_test_images_disjoint():
    kwargs = dict(min_length=2, max_length=6, size=16, noise=0.4)
    a, b = digit_sequences(40, seed=3, **kwargs), digit_sequences(40, seed=3, **kwargs)
    for name in ("images", "labels", "lengths", "image_ids", "transitions"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    c = digit_sequences(40, seed=4, **kwargs)
    assert not torch.equal(a.labels, c.labels) and not torch.equal(a.images, c.images)

    train = digit_sequences(2000, max_length=8, seed=0)
    test = digit_sequences(2000, max_length=8, split="test", seed=0)
    train_ids, test_ids = set(train.image_ids[train.mask].tolist()), set(test.image_ids[test.mask].tolist())
    assert not train_ids & test_ids
    # nearly every image of each half is used, and the halves cover all 1,797 digits
    assert len(train_ids) > 850 and len(test_ids) > 850
    _, _, test_mask = digits_module._digits()
    assert len(test_mask) == 1797 and int(test_mask.sum()) == 901  # the larger half of 5 odd classes
    assert all(test_mask[i] for i in test_ids) and not any(test_mask[i] for i in train_ids)


def test_digit_sequences_errors(monkeypatch):
    with pytest.raises(ValueError, match="shape \\(10, 10\\)"):
        digit_sequences(4, transitions=torch.ones(9, 9) / 9)
    with pytest.raises(ValueError, match="row 2 sums to"):
        bad = digit_transitions("uniform").clone()
        bad[2, 0] = 0.5
        digit_sequences(4, transitions=bad)
    with pytest.raises(ValueError, match="nonnegative"):
        bad = digit_transitions("uniform").clone()
        bad[0, :2] = torch.tensor([-0.1, 0.3])
        digit_sequences(4, transitions=bad)
    with pytest.raises(ValueError, match="'informative', 'uniform'"):
        digit_sequences(4, transitions="peaked")
    with pytest.raises(ValueError, match="split"):
        digit_sequences(4, split="validation")
    with pytest.raises(ValueError, match="min_length <= max_length"):
        digit_sequences(4, min_length=5, max_length=3)
    with pytest.raises(ValueError, match="noise"):
        digit_sequences(4, noise=-1.0)
    with pytest.raises(TypeError, match="n must be an int"):
        digit_sequences(4.0)

    digits_module._digits.cache_clear()
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    try:
        with pytest.raises(ImportError, match="pip install scikit-learn"):
            digit_sequences(4)
    finally:
        digits_module._digits.cache_clear()


def load_example():
    """examples/handwritten_words.py as a module (examples/ is not a package)."""
    pytest.importorskip("torchvision")
    spec = importlib.util.spec_from_file_location("handwritten_words", ROOT / "examples" / "handwritten_words.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_runs(tmp_path):
    pytest.importorskip("torchvision")
    pytest.importorskip("matplotlib")
    out = tmp_path / "words.png"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "handwritten_words.py"), "--train", "48", "--test", "24",
         "--epochs", "1", "--size", "8", "--device", "cpu", "--out", str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = [line for line in proc.stdout.splitlines() if line.startswith("| (")]
    assert [line.split(" | ")[0] for line in table] == ["| (a) CNN + CRF, NLL", "| (b) CNN + CRF, slack-rescaled hinge",
                                                         "| (c) CNN, per-character softmax"]
    for line in table:
        char, word = (float(v) for v in line.split(" | ")[1:3])
        assert 0.0 <= word <= char <= 1.0
    assert "| method | character accuracy | word accuracy |" in proc.stdout
    assert out.stat().st_size > 10_000


@pytest.mark.parametrize("method", ["nll", "hinge"])
def test_structured_losses_train_the_cnn(method):
    example = load_example()
    torch.manual_seed(0)
    words = digit_sequences(16, min_length=3, max_length=6, size=8, noise=0.1, seed=7)
    model = example.WordModel("small")
    conv = example.first_conv(model.cnn)
    assert conv is model.cnn[0][0] and conv.in_channels == 1
    opt = torch.optim.Adam([{"params": model.cnn.parameters(), "lr": 3e-3},
                            {"params": model.crf.parameters(), "lr": 0.05}])
    losses = []
    for step in range(12):
        loss = model.loss(words, method)
        opt.zero_grad()
        loss.backward()
        if step == 0:
            grad = conv.weight.grad
            assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0
            assert torch.isfinite(model.crf.transitions.grad).all() and model.crf.transitions.grad.abs().sum() > 0
        opt.step()
        losses.append(loss.item())
    assert losses[0] > 0 and all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < 0.3 * losses[0], losses


def test_softmax_baseline_and_accuracies():
    example = load_example()
    torch.manual_seed(0)
    words = digit_sequences(8, min_length=2, max_length=5, size=8, seed=1)
    model = example.WordModel("small")
    loss = model.loss(words, "softmax")
    assert abs(loss.item() - torch.log(torch.tensor(10.0)).item()) < 1.0  # about log 10 at the start
    pred = model.predict(words, "softmax")
    assert pred.shape == words.labels.shape and (pred[~words.mask] == 0).all()
    char, word = example.accuracies(words.labels.clone(), words)
    assert (char, word) == (1.0, 1.0)
    wrong = words.labels.clone()
    wrong[0, 0] = (wrong[0, 0] + 1) % 10
    char, word = example.accuracies(wrong, words)
    assert word == 7 / 8 and abs(char - (1 - 1 / int(words.lengths.sum()))) < 1e-6
    with pytest.raises(ValueError, match="method"):
        model.loss(words, "ctc")


def test_resnet18_backbone_gets_gradients_from_the_hinge():
    example = load_example()
    torch.manual_seed(0)
    words = digit_sequences(4, min_length=2, max_length=4, size=16, noise=0.2, seed=3)
    model = example.WordModel("resnet18")
    conv = example.first_conv(model.cnn)
    assert conv is model.cnn.conv1 and conv.in_channels == 1 and conv.stride == (1, 1)
    assert model.unary(words).shape == (*words.labels.shape, 10)
    loss = model.loss(words, "hinge")
    loss.backward()
    assert loss.item() > 0 and torch.isfinite(conv.weight.grad).all() and conv.weight.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="backbone"):
        example.WordModel("vgg")
