"""Model registry: torch-only networks (no torchvision) sized for CIFAR-10-like inputs.

``mlp`` and ``cnn`` have no batch norm, so K-REDUCE under bsp is exactly large-batch SGD
(the equivalence test). ``resnet50``/``mobilenet`` are the paper's networks in torchvision's
layout, ImageNet stem included (ResNet-50: 7×7 stride-2 conv and a stride-2 max-pool;
MobileNetV2: stride-2 first conv and second stage), applied to 32×32 images as the paper's
workload coefficients imply: its training times (a, b, m) and the batches it ran (ResNet-50
at B = 512 in 3,328 MB) fit these, not CIFAR stems, whose activations take many times the
memory per sample (measured: docs/results.md, "Measurements behind design choices").
``resnet18`` and ``squeezenet`` keep small-image stems (3×3 stride-1 first conv). All end in
global average pooling, so their parameter count does not depend on the input size.
``mlp-resnet50-size``/``mlp-squeezenet-size`` are MLPs with those two models' parameter size
(for any input shape), for measuring exchange patterns where a real ResNet is too slow on a CPU.

Sizes are reported in MiB of float32 (2^20 bytes), the unit of the paper's Table 5.1: its
97.49 / 13.37 / 4.71 MB are exactly ResNet-50 / MobileNetV2 / SqueezeNet 1.1 with a 1000-way
classifier. With a 10-way head the same bodies are smaller (the classifier shrinks).

``bert-base``/``bert-mini`` (fasdl.training.text_networks) take text rows: input shape ``(2, L)``,
token ids and attention mask, instead of (channels, height, width).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import nn

from fasdl.contract.user_code import ModelRef, UserCodeError
from fasdl.training.text_networks import TEXT_MODELS, build_text_model
from fasdl.training.user_code import check_signature, load_function

# images: (channels, height, width); text: (2, sequence length), token ids and attention mask
InputShape = tuple[int, ...]
Builder = Callable[[int, InputShape], nn.Module]

# Paper Table 5.1 model sizes (MiB of float32), ImageNet-sized classifiers.
PAPER_MODEL_MB: dict[str, float] = {"resnet50": 97.49, "mobilenet": 13.37, "squeezenet": 4.71}
PAPER_NUM_CLASSES = 1000


def _mlp(num_classes: int, input_shape: InputShape) -> nn.Module:
    features = input_shape[0] * input_shape[1] * input_shape[2]
    return nn.Sequential(nn.Flatten(), nn.Linear(features, 128), nn.ReLU(),
                         nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, num_classes))


def _sized_mlp(target_mb: float) -> Builder:
    """An MLP (features → H → H → classes) whose float32 parameters total ``target_mb`` MiB.

    For the communication-pattern benchmark: the exchange volume S_m of a paper model at a
    compute cost a CPU can afford. H solves H² + (features + classes + 2)·H + classes = P.
    """
    def build(num_classes: int, input_shape: InputShape) -> nn.Module:
        features = input_shape[0] * input_shape[1] * input_shape[2]
        target = target_mb * 2**20 / 4
        linear = features + num_classes + 2
        hidden = max(1, round((-linear + math.sqrt(linear**2 + 4 * (target - num_classes)))
                              / 2))
        return nn.Sequential(nn.Flatten(), nn.Linear(features, hidden), nn.ReLU(),
                             nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, num_classes))

    return build


def _cnn(num_classes: int, input_shape: InputShape) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(input_shape[0], 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2, ceil_mode=True),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2),
        nn.Flatten(), nn.Linear(32 * 4, num_classes),
    )


def _compute_bound_cnn(num_classes: int, input_shape: InputShape) -> nn.Module:
    """A compute-bound stand-in (bench/adaptive.py): the input upsampled 4x, then three 3x3
    convolutions of 64 channels at that resolution; 0.29 MiB of parameters and ~80x the cnn's
    compute per sample, so that on 8x8 digits compute and a small exchange both matter."""
    return nn.Sequential(
        nn.Upsample(scale_factor=4), nn.Conv2d(input_shape[0], 64, 3, padding=1), nn.ReLU(),
        nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(), nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, num_classes))


def _conv_bn(inputs: int, outputs: int, kernel: int, stride: int = 1, groups: int = 1,
             relu: bool = True) -> nn.Sequential:
    layers: list[nn.Module] = [
        nn.Conv2d(inputs, outputs, kernel, stride, kernel // 2, groups=groups, bias=False),
        nn.BatchNorm2d(outputs),
    ]
    if relu:
        layers.append(nn.ReLU(inplace=True))
    return nn.Sequential(*layers)


class _BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inputs: int, width: int, stride: int) -> None:
        super().__init__()
        outputs = width * self.expansion
        self.body = nn.Sequential(_conv_bn(inputs, width, 3, stride),
                                  _conv_bn(width, outputs, 3, relu=False))
        self.shortcut: nn.Module = (nn.Identity() if stride == 1 and inputs == outputs
                                    else _conv_bn(inputs, outputs, 1, stride, relu=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.shortcut(x))


class _Bottleneck(_BasicBlock):
    expansion = 4

    def __init__(self, inputs: int, width: int, stride: int) -> None:
        super().__init__(inputs, width, stride)
        self.body = nn.Sequential(_conv_bn(inputs, width, 1), _conv_bn(width, width, 3, stride),
                                  _conv_bn(width, width * self.expansion, 1, relu=False))


def _imagenet_stem(in_channels: int) -> nn.Module:
    """torchvision's ResNet stem: 7×7 stride-2 conv, then a stride-2 max-pool (4× smaller)."""
    return nn.Sequential(_conv_bn(in_channels, 64, 7, 2), nn.MaxPool2d(3, 2, 1))


class ResNet(nn.Module):
    def __init__(self, block: type[_BasicBlock], depths: Sequence[int], num_classes: int,
                 in_channels: int, imagenet_stem: bool = False) -> None:
        super().__init__()
        layers: list[nn.Module] = [_imagenet_stem(in_channels) if imagenet_stem
                                   else _conv_bn(in_channels, 64, 3)]
        inputs = 64
        for stage, depth in enumerate(depths):
            width = 64 * 2**stage
            for index in range(depth):
                stride = 2 if stage > 0 and index == 0 else 1
                layers.append(block(inputs, width, stride))
                inputs = width * block.expansion
        self.features = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.classifier = nn.Linear(inputs, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.classifier(self.features(x))
        return logits


class _InvertedResidual(nn.Module):
    def __init__(self, inputs: int, outputs: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = inputs * expand
        layers: list[nn.Module] = [] if expand == 1 else [_conv_bn(inputs, hidden, 1)]
        layers += [_conv_bn(hidden, hidden, 3, stride, groups=hidden),
                   _conv_bn(hidden, outputs, 1, relu=False)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and inputs == outputs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.body(x)
        return x + out if self.residual else out


# (expansion t, channels c, repeats n, stride s): torchvision's MobileNetV2 table.
_MOBILENET_V2 = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                 (6, 160, 3, 2), (6, 320, 1, 1))


def _mobilenet(num_classes: int, input_shape: InputShape) -> nn.Module:
    layers: list[nn.Module] = [_conv_bn(input_shape[0], 32, 3, 2)]
    inputs = 32
    for expand, channels, repeats, stride in _MOBILENET_V2:
        for index in range(repeats):
            layers.append(_InvertedResidual(inputs, channels, stride if index == 0 else 1,
                                            expand))
            inputs = channels
    layers += [_conv_bn(inputs, 1280, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
               nn.Linear(1280, num_classes)]
    return nn.Sequential(*layers)


class _Fire(nn.Module):
    def __init__(self, inputs: int, squeeze: int, expand: int) -> None:
        super().__init__()
        self.squeeze = nn.Sequential(nn.Conv2d(inputs, squeeze, 1), nn.ReLU(inplace=True))
        self.expand1 = nn.Sequential(nn.Conv2d(squeeze, expand, 1), nn.ReLU(inplace=True))
        self.expand3 = nn.Sequential(nn.Conv2d(squeeze, expand, 3, padding=1),
                                     nn.ReLU(inplace=True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        squeezed = self.squeeze(x)
        return torch.cat([self.expand1(squeezed), self.expand3(squeezed)], 1)


def _squeezenet(num_classes: int, input_shape: InputShape) -> nn.Module:
    """SqueezeNet 1.1 (fire modules), 3×3 stride-1 stem for small images."""
    pool = nn.MaxPool2d(3, 2, ceil_mode=True)
    return nn.Sequential(
        nn.Conv2d(input_shape[0], 64, 3, padding=1), nn.ReLU(inplace=True), pool,
        _Fire(64, 16, 64), _Fire(128, 16, 64), nn.MaxPool2d(3, 2, ceil_mode=True),
        _Fire(128, 32, 128), _Fire(256, 32, 128), nn.MaxPool2d(3, 2, ceil_mode=True),
        _Fire(256, 48, 192), _Fire(384, 48, 192), _Fire(384, 64, 256), _Fire(512, 64, 256),
        nn.Conv2d(512, num_classes, 1), nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
    )


MODELS: dict[str, Builder] = {
    "mlp": _mlp,
    "cnn": _cnn,
    "cnn-compute": _compute_bound_cnn,
    "resnet18": lambda classes, shape: ResNet(_BasicBlock, (2, 2, 2, 2), classes, shape[0]),
    "resnet50": lambda classes, shape: ResNet(_Bottleneck, (3, 4, 6, 3), classes, shape[0],
                                              imagenet_stem=True),
    "mobilenet": _mobilenet,
    "squeezenet": _squeezenet,
    # size-matched stand-ins (S_m of the paper's ResNet-50 / SqueezeNet, MLP compute)
    "mlp-resnet50-size": _sized_mlp(PAPER_MODEL_MB["resnet50"]),
    "mlp-squeezenet-size": _sized_mlp(PAPER_MODEL_MB["squeezenet"]),
    # text: rows of (2, L) token ids and attention mask (fasdl.training.text_networks)
    "bert-base": lambda classes, shape: build_text_model("bert-base", classes, shape),
    "bert-mini": lambda classes, shape: build_text_model("bert-mini", classes, shape),
}


USER_BUILDER = "function(num_classes, input_shape) -> torch.nn.Module"


def build_user_model(reference: ModelRef, num_classes: int,
                     input_shape: InputShape) -> nn.Module:
    """The user's own model: ``file.py:function`` called as function(num_classes, input_shape)."""
    builder = load_function(reference, "workload.model")
    check_signature(builder, (num_classes, tuple(input_shape)), "workload.model", USER_BUILDER)
    model = builder(num_classes, tuple(input_shape))
    if not isinstance(model, nn.Module):
        raise UserCodeError("workload.model", f"{reference} returned {type(model).__name__}, "
                                              f"not a torch.nn.Module")
    return model


def build_model(model: str | ModelRef, num_classes: int = 10,
                input_shape: InputShape = (3, 32, 32)) -> nn.Module:
    """A freshly initialised model (seed torch before calling for identical replicas): a
    registry name, or the user's ``file.py:function``."""
    ref = model if isinstance(model, ModelRef) else ModelRef.parse(model, "workload.model")
    if ref.code is not None:
        return build_user_model(ref, num_classes, input_shape)
    name = ref.name
    builder = MODELS.get(name)
    if builder is None:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(sorted(MODELS))}, or "
                         f"path/to/file.py:function")
    if num_classes < 2:
        raise ValueError(f"num_classes must be >= 2, got {num_classes}")
    if name in TEXT_MODELS:  # (2, L): the text builder checks it
        return builder(num_classes, tuple(input_shape))
    if len(input_shape) != 3 or min(input_shape) < 1:
        raise ValueError(f"input_shape must be (channels, height, width), got {input_shape}")
    return builder(num_classes, input_shape)


def build_seeded_model(name: str, seed: int, num_classes: int = 10,
                       input_shape: InputShape = (3, 32, 32)) -> nn.Module:
    """The same initial weights in every worker (seed = the plan's training.seed).

    The global torch RNG is left as it was, so seeding here does not disturb dropout or
    data-order streams that a checkpoint restores.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build_model(name, num_classes, input_shape)


def parameter_count(name: str, num_classes: int = 10,
                    input_shape: InputShape = (3, 32, 32)) -> int:
    """Trainable parameters, counted on the meta device (no memory, no init cost)."""
    with torch.device("meta"):
        model = build_model(name, num_classes, input_shape)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def parameter_mb(name: str, num_classes: int = 10,
                 input_shape: InputShape = (3, 32, 32)) -> float:
    """Size of the flat float32 parameter vector in MiB (the unit of the paper's S_m)."""
    return parameter_count(name, num_classes, input_shape) * 4 / 2**20
