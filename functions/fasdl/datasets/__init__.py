"""Builders that turn public datasets into the runtime's x.npy/y.npy format (no pickle)."""

from fasdl.datasets.cifar10 import import_cifar10_binary
from fasdl.datasets.digits import build_digits

__all__ = ["build_digits", "import_cifar10_binary"]
