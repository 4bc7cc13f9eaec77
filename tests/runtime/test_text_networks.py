"""Text workloads in the runtime: BERT networks over (B, 2, L) int rows, int32 rows as int64
tensors (pixels untouched), MCC next to accuracy, exports and python -m fasdl.evaluate for
text models, the trigger's dataset check, and one K-REDUCE iteration of bert-base."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.metrics import matthews_corrcoef

from fasdl.contract.plan import PlanError
from fasdl.evaluate import main as evaluate_main
from fasdl.exchange.channel.memory import MemoryChannel
from fasdl.exchange.kreduce import KReduceWorker
from fasdl.run import dataset_check
from fasdl.training.augment import evaluation_tensors
from fasdl.training.augment import to_tensors as data_to_tensors
from fasdl.training.classification import Confusion
from fasdl.training.data import LocalFiles, write_dataset
from fasdl.training.export import (
    ExportError,
    build_exported,
    describe,
    load_meta,
    load_tensors,
)
from fasdl.training.networks import build_model, build_seeded_model, parameter_count
from tests.runtime.exported_model import export_files, workload
from tests.runtime.kreduce_helpers import make_plan, run_parallel

LENGTH = 16


def _rows(count: int, vocab: int, seed: int = 0) -> np.ndarray:
    """int32 text rows: [CLS]=2 first, random ids, then padding (id 0, mask 0)."""
    rng = np.random.default_rng(seed)
    x = np.zeros((count, 2, LENGTH), dtype=np.int32)
    for row, length in zip(x, rng.integers(3, LENGTH + 1, count), strict=True):
        row[0, :length] = rng.integers(5, vocab, length)
        row[0, 0] = 2
        row[1, :length] = 1
    return x


def test_int32_rows_become_int64_and_pixels_stay_scaled() -> None:
    x = _rows(3, 1024)
    features, labels = data_to_tensors(x, np.array([0, 1, 0], dtype=np.int64))
    assert features.dtype == torch.int64 and torch.equal(features, torch.from_numpy(x).long())
    assert labels.dtype == torch.int64
    pixels, _ = data_to_tensors(np.array([[0, 51, 255]], dtype=np.uint8),
                                np.array([1], dtype=np.int64))
    assert pixels.dtype == torch.float32
    assert torch.equal(pixels, torch.tensor([[0, 51, 255]], dtype=torch.float32) / 255.0)


def test_bert_mini_classifies_rows_and_refuses_what_it_cannot_read() -> None:
    model = build_seeded_model("bert-mini", 0, 2, (2, LENGTH))
    features, _ = data_to_tensors(_rows(4, 1024), np.zeros(4, dtype=np.int64))
    assert model(features).shape == (4, 2)
    with pytest.raises(ValueError, match="vocabulary has 1024"):
        model(features + 1024)
    with pytest.raises(ValueError, match=r"\(B, 2, L\) int64"):
        model(features.float())
    for shape in [(3, 32, 32), (2, 513), (1, 16)]:
        with pytest.raises(ValueError, match=r"must be \(2, L\)"):
            build_model("bert-mini", 2, shape)
    with pytest.raises(ValueError, match="channels, height, width"):
        build_model("cnn", 2, (2, LENGTH))
    # padding does not change the logits of the real tokens (the mask hides it)
    model.eval()
    longer = torch.cat([features, torch.zeros_like(features)], dim=2)
    torch.testing.assert_close(model(longer), model(features), rtol=1e-4, atol=1e-5)


def test_bert_base_has_bert_base_uncased_shapes() -> None:
    # 109,482,240 without the head (BERT-Base-uncased with its pooler) + 768·2 + 2
    assert parameter_count("bert-base", 2, (2, 128)) == 109_482_240 + 1538
    assert parameter_count("bert-mini", 2, (2, 128)) == 3_619_586


def test_mcc_matches_scikit_learn_and_is_binary_only() -> None:
    rng = np.random.default_rng(1)
    truth, predicted = rng.integers(0, 2, 500), rng.integers(0, 2, 500)
    predicted[:300] = truth[:300]
    confusion = Confusion(2)
    confusion.add(truth[:123], predicted[:123])
    confusion.add(truth[123:], predicted[123:])
    assert confusion.mcc() == pytest.approx(matthews_corrcoef(truth, predicted), abs=1e-12)
    assert confusion.accuracy() == np.mean(truth == predicted)
    always = Confusion(2)
    always.add(truth, np.ones_like(truth))  # one predicted class: 0 by convention
    assert always.mcc() == 0.0 == matthews_corrcoef(truth, np.ones_like(truth))
    ten = Confusion(10)
    ten.add(truth, predicted)
    assert ten.mcc() is None and ten.accuracy() == confusion.accuracy()


@pytest.fixture(scope="module")
def text_split(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("text") / "test"
    x = _rows(40, 300, seed=2)
    write_dataset(folder, x, (x[:, 0, 1] % 2).astype(np.int64))
    return folder


def test_export_and_evaluate_cli_report_the_mcc_worker_zero_computes(
        text_split: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = build_seeded_model("bert-mini", 7, 2, (2, LENGTH))
    with torch.no_grad():  # a model that is not at chance, so the MCC is not 0 by accident
        model.classifier.bias.copy_(torch.tensor([0.0, 0.1]))
    meta = {"model": "bert-mini", "num_classes": "2", "input_shape": f"2,{LENGTH}"}
    path, described = export_files(model, tmp_path, meta, workload("bert-mini"))
    x, y = np.load(text_split / "x.npy"), np.load(text_split / "y.npy")
    model.eval()
    with torch.no_grad():  # one batch, as worker 0 evaluates 40 rows
        predicted = model(evaluation_tensors(x, y, "none")[0]).argmax(1).numpy()
    expected = Confusion(2)
    expected.add(y, predicted)
    assert evaluate_main([str(path), str(text_split), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["mcc"] == expected.mcc() and result["accuracy"] == expected.accuracy()
    assert result["model"] == "bert-mini" and result["samples"] == 40
    assert evaluate_main([str(path), str(text_split)]) == 0
    assert f"MCC {expected.mcc():.4f}" in capsys.readouterr().out
    rebuilt = build_exported(load_meta(described.read_bytes()),
                             load_tensors(path.read_bytes()))
    features, _ = data_to_tensors(x, y)
    model.eval()
    assert torch.equal(rebuilt(features), model(features))
    wrong = tmp_path / "wrong"
    write_dataset(wrong, np.zeros((3, 2, 8), dtype=np.int32), np.zeros(3, dtype=np.int64))
    assert evaluate_main([str(path), str(wrong)]) == 2
    assert "rows are (2, 8), the model (bert-mini) expects (2, 16)" in capsys.readouterr().err
    with pytest.raises(ExportError, match=r"'input_shape' must be \[2, L\].* for bert-mini"):
        describe(model, {**meta, "input_shape": "3,4,4"}, workload("bert-mini"))


def test_the_trigger_accepts_text_rows_and_refuses_other_int32_shapes(tmp_path: Path) -> None:
    plan = make_plan(2, 1, 4, 4, "bsp", samples=8, model="bert-mini")
    prefix = tmp_path / plan.workload.dataset
    write_dataset(prefix, _rows(8, 300), np.zeros(8, dtype=np.int64))
    write_dataset(prefix / "test", _rows(4, 300), np.zeros(4, dtype=np.int64))
    reader = LocalFiles(tmp_path)

    def size_of(key: str) -> int | None:
        path = tmp_path / key
        return path.stat().st_size if path.exists() else None

    assert dataset_check.check_dataset(plan, reader, size_of) == plan
    write_dataset(prefix, np.zeros((8, 3, LENGTH), dtype=np.int32), np.zeros(8, dtype=np.int64))
    with pytest.raises(PlanError, match=r"int32 text x must be N x 2 x L"):
        dataset_check.check_dataset(plan, reader, size_of)


def test_one_kreduce_iteration_of_bert_base() -> None:
    """W=2, K=1 under bsp over the memory channel: both workers end with the same merged
    parameters, moved from the initial ones, and a finite loss (about ln 2)."""
    plan = make_plan(2, 1, 2, 2, "bsp", learning_rate=0.01, model="bert-base")
    model = build_seeded_model("bert-base", 0, 2, (2, LENGTH))
    before = torch.nn.utils.parameters_to_vector(model.parameters()).detach().numpy().copy()
    channel = MemoryChannel()
    workers = [KReduceWorker(plan, w, channel, model if w == 0 else copy.deepcopy(model),
                             "run-bert", 0, wait_timeout_s=120.0) for w in range(2)]
    batches = [data_to_tensors(_rows(2, 30522, seed=w), np.array([0, 1], dtype=np.int64))
               for w in range(2)]
    losses: list[float] = []
    run_parallel([lambda w=w: losses.append(workers[w].step(*batches[w], 0).loss)
                  for w in range(2)])
    assert len(losses) == 2 and all(0.1 < loss < 5.0 for loss in losses)
    assert np.array_equal(workers[0].parameters, workers[1].parameters)
    assert workers[0].parameters.size == before.size == 109_483_778
    assert not np.array_equal(workers[0].parameters, before)
    for worker in workers:
        worker.close()
