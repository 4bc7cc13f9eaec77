"""Text networks: BERT encoders with a sequence-classification head, torch only.

A text dataset row is ``(2, L)`` integers: token ids, then the attention mask (1 for a real
token, 0 for padding), written by ``python -m fasdl.datasets cola`` as int32 and handed to
the model as int64 by :func:`fasdl.training.augment.to_tensors`. So a text model's input shape is
``(2, L)``, L at most its 512 positions.

The network is BERT's (Devlin et al. 2019) in torch.nn's layers: word + position + token-type
embeddings, LayerNorm and dropout; L post-LayerNorm encoder layers with GELU (the layout and
parameter count of BERT's, since ``nn.TransformerEncoderLayer`` packs Q, K and V into one
projection of the same size); the pooler (dense + tanh on the first, [CLS], token) and a
linear classifier. ``bert-base`` has BERT-Base-uncased's shapes: 109,482,240 parameters
without the head, 417.65 MiB of float32 with a 2-way head (the FasDL workload's 417.17 MiB
within 0.12 %). ``bert-mini`` is Google's BERT-Mini shape (L=4, H=256, A=4) with a 1,024-token
vocabulary (the importer's default size when it builds its own WordPiece vocabulary; the
generated text set needs 100; 8,192 rows would add 7 MiB to every exchange, unused) and no
dropout. No pre-trained weights: layers start from torch's own initialisation, not BERT's
normal(0, 0.02): trained from scratch with the runtime's plain SGD with momentum (no Adam),
BERT's kept the attention near uniform and the models at chance, while torch's, without
dropout, leave that plateau after a number of epochs that depends on the seed (measured:
docs/results.md, "Measurements behind design choices").
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

TEXT_ROWS = 2  # token ids; attention mask


@dataclass(frozen=True)
class BertShape:
    vocab: int
    hidden: int
    layers: int
    heads: int
    intermediate: int
    max_positions: int = 512
    type_vocab: int = 2
    dropout: float = 0.1


BERT_SHAPES: dict[str, BertShape] = {
    "bert-base": BertShape(vocab=30522, hidden=768, layers=12, heads=12, intermediate=3072),
    "bert-mini": BertShape(vocab=1024, hidden=256, layers=4, heads=4, intermediate=1024,
                           dropout=0.0),
}
TEXT_MODELS = frozenset(BERT_SHAPES)


class BertClassifier(nn.Module):
    """BERT encoder + pooler + classifier over ``(B, 2, L)`` int64 rows (ids; mask)."""

    def __init__(self, shape: BertShape, num_classes: int) -> None:
        super().__init__()
        self.shape = shape
        self.word = nn.Embedding(shape.vocab, shape.hidden)
        self.position = nn.Embedding(shape.max_positions, shape.hidden)
        self.token_type = nn.Embedding(shape.type_vocab, shape.hidden)
        self.embedding_norm = nn.LayerNorm(shape.hidden, eps=1e-12)
        self.dropout = nn.Dropout(shape.dropout)
        layer = nn.TransformerEncoderLayer(
            shape.hidden, shape.heads, shape.intermediate, shape.dropout, activation="gelu",
            layer_norm_eps=1e-12, batch_first=True)
        # dense batches only: nested tensors (an inference shortcut that drops the padding)
        # would make eval-mode logits depend on how much of a batch is padding
        self.encoder = nn.TransformerEncoder(layer, shape.layers, enable_nested_tensor=False)
        self.pooler = nn.Linear(shape.hidden, shape.hidden)
        self.classifier = nn.Linear(shape.hidden, num_classes)

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        ids, mask = self._checked(rows)
        positions = torch.arange(ids.shape[1], device=ids.device)
        hidden = self.word(ids) + self.position(positions) + self.token_type(
            torch.zeros_like(ids))
        hidden = self.dropout(self.embedding_norm(hidden))
        hidden = self.encoder(hidden, src_key_padding_mask=mask == 0)
        pooled = torch.tanh(self.pooler(hidden[:, 0]))
        logits: torch.Tensor = self.classifier(self.dropout(pooled))
        return logits

    def _checked(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """ids and mask; a clear error instead of an index error deep in an embedding."""
        if rows.dim() != 3 or rows.shape[1] != TEXT_ROWS or rows.dtype != torch.int64:
            raise ValueError(f"text rows must be (B, 2, L) int64 (ids; mask), got "
                             f"{tuple(rows.shape)} {rows.dtype}")
        ids, mask = rows[:, 0], rows[:, 1]
        if ids.shape[1] > self.shape.max_positions:
            raise ValueError(f"sequence length {ids.shape[1]} > the model's "
                             f"{self.shape.max_positions} positions")
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.shape.vocab):
            raise ValueError(f"token ids span [{int(ids.min())}, {int(ids.max())}], the "
                             f"model's vocabulary has {self.shape.vocab}: import the text "
                             f"with a vocabulary of at most {self.shape.vocab} tokens")
        return ids, mask


def check_text_shape(name: str, input_shape: tuple[int, ...]) -> None:
    """Raise ValueError unless ``input_shape`` is ``(2, L)`` with L within the positions."""
    positions = BERT_SHAPES[name].max_positions
    if (len(input_shape) != 2 or input_shape[0] != TEXT_ROWS
            or not 1 <= input_shape[1] <= positions):
        raise ValueError(f"input_shape of text model {name!r} must be (2, L) (token ids; "
                         f"attention mask) with 1 <= L <= {positions}, got {input_shape}")


def build_text_model(name: str, num_classes: int, input_shape: tuple[int, ...]) -> nn.Module:
    check_text_shape(name, input_shape)
    return BertClassifier(BERT_SHAPES[name], num_classes)
