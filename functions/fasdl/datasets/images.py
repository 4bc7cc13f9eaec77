"""Import your own images: one folder per class of JPEG/PNG files.

``python -m fasdl.datasets images SRC OUT --size H W``: every subfolder of SRC is a class
(its name the class name; names sorted, labels 0..n-1; hidden folders skipped), every
``.jpg``/``.jpeg``/``.png`` file directly in it an image of that class (other and hidden
files, and deeper folders, are skipped). Each image is opened with Pillow, turned upright by
its EXIF orientation (phone photos), converted to RGB and resized to H×W (bilinear), and
stored as uint8 N×3×H×W, the layout the workers read (fasdl.training.data). The train/test
split is a seeded stratified shuffle (fasdl.datasets.split); ``train/meta.json``
(fasdl.datasets.meta) holds the class names and the training split's per-channel mean and
std. Pillow is needed at import time only: workers read arrays, not images.

No class folder, fewer than two, a class without images, or an image Pillow cannot read (a
corrupt file, another format under a .jpg name) raises :class:`DatasetError` naming it.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np

from fasdl.contract.errors import DatasetError
from fasdl.datasets.meta import write_splits
from fasdl.datasets.output import staged_output
from fasdl.datasets.split import DEFAULT_TEST_FRACTION, check_test_fraction, stratified_split

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
FORMATS = ("JPEG", "PNG")
MAX_SIDE = 4096
BAD_NAMED = 10  # bad files named in the one error line; the rest counted

def class_folders(source: Path) -> list[Path]:
    """The class folders of ``source``, sorted by name; at least two."""
    if not source.is_dir():
        raise DatasetError(f"{source}: not a folder (expected one folder per class of "
                           f"JPEG/PNG images)")
    folders = sorted((path for path in source.iterdir()
                      if path.is_dir() and not path.name.startswith(".")),
                     key=lambda path: path.name)
    if not folders:
        raise DatasetError(f"{source}: no class folders (expected one folder per class of "
                           f"JPEG/PNG images)")
    if len(folders) < 2:
        raise DatasetError(f"{source}: one class folder ({folders[0].name}), need at least 2 "
                           f"classes")
    return folders


def image_files(folder: Path) -> list[Path]:
    """The JPEG/PNG files of one class folder, sorted by name; at least one."""
    files = sorted((path for path in folder.iterdir()
                    if path.is_file() and not path.name.startswith(".")
                    and path.suffix.lower() in IMAGE_SUFFIXES), key=lambda path: path.name)
    if not files:
        raise DatasetError(f"{folder}: class {folder.name!r} has no images "
                           f"({', '.join(IMAGE_SUFFIXES)} files)")
    return files


def load_image(path: Path, height: int, width: int) -> np.ndarray:
    """One image as uint8 3×H×W: upright, RGB, resized bilinearly."""
    from PIL import Image, ImageOps  # import time only, never in a worker

    try:
        with Image.open(path) as image:
            if image.format not in FORMATS:
                raise DatasetError(f"{path}: a {image.format} image, expected JPEG or PNG")
            upright = ImageOps.exif_transpose(image).convert("RGB")
            pixels = np.asarray(upright.resize((width, height), Image.Resampling.BILINEAR),
                                dtype=np.uint8)
    except (OSError, ValueError, SyntaxError, EOFError, struct.error, zlib.error,
            Image.DecompressionBombError) as error:
        if isinstance(error, DatasetError):
            raise
        raise DatasetError(f"{path}: not a readable image ({error})") from None
    return pixels.transpose(2, 0, 1)


def read_images(source: Path, height: int, width: int
                ) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(x uint8 N×3×H×W, y int64 N, class names) of the class folders of ``source``."""
    folders = class_folders(source)
    files = [image_files(folder) for folder in folders]
    x = np.empty((sum(len(names) for names in files), 3, height, width), dtype=np.uint8)
    y = np.repeat(np.arange(len(folders), dtype=np.int64), [len(names) for names in files])
    bad: list[str] = []
    for row, path in enumerate(path for names in files for path in names):
        try:
            x[row] = load_image(path, height, width)
        except DatasetError as error:  # every bad file is named, not only the first
            bad.append(str(error))
    if bad:
        more = f"; and {len(bad) - BAD_NAMED} more" if len(bad) > BAD_NAMED else ""
        raise DatasetError(f"{len(bad)} image(s) cannot be imported: "
                           + "; ".join(bad[:BAD_NAMED]) + more)
    return x, y, [folder.name for folder in folders]


def import_images(source: str | Path, out_dir: str | Path, *, size: tuple[int, int],
                  test_fraction: float = DEFAULT_TEST_FRACTION, seed: int = 0,
                  force: bool = False) -> dict[str, int]:
    """Write ``{out_dir}/train`` (with meta.json) and ``{out_dir}/test``, both or neither
    (fasdl.datasets.output); returns rows per split."""
    height, width = size
    for name, side in (("H", height), ("W", width)):
        if not 1 <= side <= MAX_SIDE:
            raise ValueError(f"--size {name} must be in [1, {MAX_SIDE}], got {side}")
    check_test_fraction(test_fraction)
    x, y, names = read_images(Path(source), height, width)
    train_rows, test_rows = stratified_split(y, test_fraction, seed)
    with staged_output(out_dir, force=force) as staging:
        write_splits(staging, "images", (x[train_rows], y[train_rows]),
                     (x[test_rows], y[test_rows]), class_names=names)
    return {"train": len(train_rows), "test": len(test_rows)}
