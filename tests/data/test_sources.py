"""Each loader on files written here in the real on-disk formats, and the split rules."""

from __future__ import annotations

import gzip
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from dlperf.config import AugmentConfig, DataConfig
from dlperf.data import DATASETS, Split, load_data, make_loader
from dlperf.errors import UserError
from dlperf.shipped import dataset_table

RNG = np.random.default_rng(0)


def write_cifar(root: Path, hundred: bool = False, per_batch: int = 20, test: int = 10) -> None:
    """The python-pickle layout of cifar-10-batches-py / cifar-100-python."""
    if hundred:
        folder, names, meta = root / "cifar-100-python", [("train", 5 * per_batch)], "meta"
        label_key, meta_content = "fine_labels", {"fine_label_names": [f"c{i}" for i in range(100)]}
        n_classes = 100
    else:
        folder = root / "cifar-10-batches-py"
        names = [(f"data_batch_{i}", per_batch) for i in range(1, 6)]
        meta, label_key, n_classes = "batches.meta", "labels", 10
        meta_content = {"label_names": [f"c{i}" for i in range(10)], "num_vis": 3072}
    folder.mkdir(parents=True)
    for name, n in [*names, ("test" if hundred else "test_batch", test)]:
        entry = {
            "data": RNG.integers(0, 256, (n, 3072), dtype=np.uint8),
            label_key: RNG.integers(0, n_classes, n).tolist(),
        }
        (folder / name).write_bytes(pickle.dumps(entry))
    (folder / meta).write_bytes(pickle.dumps(meta_content))


def write_idx(folder: Path, prefix: str, n: int) -> np.ndarray:
    """Gzipped idx files as distributed (magic 2051 for images, 2049 for labels)."""
    folder.mkdir(parents=True, exist_ok=True)
    images = RNG.integers(0, 256, (n, 28, 28), dtype=np.uint8)
    labels = RNG.integers(0, 10, n, dtype=np.uint8)
    with gzip.open(folder / f"{prefix}-images-idx3-ubyte.gz", "wb") as f:
        f.write(struct.pack(">IIII", 2051, n, 28, 28) + images.tobytes())
    with gzip.open(folder / f"{prefix}-labels-idx1-ubyte.gz", "wb") as f:
        f.write(struct.pack(">II", 2049, n) + labels.tobytes())
    return images


def write_jpegs(root: Path, per_class: int = 6) -> None:
    for split in ("train", "val"):
        for label in ("cat", "dog"):
            folder = root / split / label
            folder.mkdir(parents=True)
            for i in range(per_class):
                pixels = RNG.integers(0, 256, (40 + i, 50, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(folder / f"{i}.jpg")


def write_files_of(name: str, root: Path) -> None:
    """Tiny files in `name`'s real on-disk format; the bundled sets need none."""
    if name.startswith("cifar"):
        write_cifar(root, hundred=name == "cifar100")
    elif name in ("mnist", "fashionmnist"):
        raw = root / ("MNIST" if name == "mnist" else "FashionMNIST") / "raw"
        for prefix in ("train", "t10k"):
            write_idx(raw, prefix, 50)


def test_dataset_table_lists_every_reader() -> None:
    """`dlperf datasets` prints datasets.toml so as not to import the readers."""
    table = dataset_table()
    assert list(table) == list(DATASETS)
    for name, reader in DATASETS.items():
        assert table[name]["source"] == (reader.__doc__ or "").strip().splitlines()[0]
    # The config or the folder decides these sets' classes and shape.
    assert not {"classes", "shape"} & set().union(
        *(table[name].keys() for name in ("synthetic", "imagefolder", "npz"))
    )


@pytest.mark.parametrize(
    "name", ["digits", "mnist5k", "cifar10", "cifar100", "mnist", "fashionmnist"]
)
def test_dataset_table_gives_the_classes_and_shape_read(tmp_path: Path, name: str) -> None:
    write_files_of(name, tmp_path)
    data = load_data(DataConfig(name=name, root=str(tmp_path)))
    meta = dataset_table()[name]
    assert (meta["classes"], tuple(meta["shape"])) == (data.num_classes, data.shape)


def test_cifar10_pickle_batches(tmp_path: Path) -> None:
    write_cifar(tmp_path)
    data = load_data(DataConfig(name="cifar10", root=str(tmp_path), val_fraction=0.1))
    assert (len(data.train), len(data.val), len(data.test)) == (90, 10, 10)
    assert data.train.images.dtype == torch.uint8 and data.shape == (3, 32, 32)
    assert data.classes[:2] == ["c0", "c1"] and data.num_classes == 10


def test_cifar100_pickle_batches(tmp_path: Path) -> None:
    write_cifar(tmp_path, hundred=True)
    data = load_data(DataConfig(name="cifar100", root=str(tmp_path)))
    assert data.num_classes == 100 and len(data.test) == 10


def test_cifar_images_keep_the_channel_layout(tmp_path: Path) -> None:
    write_cifar(tmp_path)
    raw = pickle.loads((tmp_path / "cifar-10-batches-py" / "test_batch").read_bytes())["data"]
    data = load_data(DataConfig(name="cifar10", root=str(tmp_path)))
    # CIFAR rows are 1024 red, then 1024 green, then 1024 blue values.
    assert torch.equal(data.test.images[0], torch.from_numpy(raw[0].reshape(3, 32, 32)))


@pytest.mark.parametrize(("name", "folder"), [("mnist", "MNIST"), ("fashionmnist", "FashionMNIST")])
def test_gzipped_idx_files(tmp_path: Path, name: str, folder: str) -> None:
    raw = tmp_path / folder / "raw"
    write_idx(raw, "train", 50)
    test_images = write_idx(raw, "t10k", 12)
    data = load_data(DataConfig(name=name, root=str(tmp_path), val_fraction=0.2))
    assert (len(data.train), len(data.val), len(data.test)) == (40, 10, 12)
    assert torch.equal(data.test.images[:, 0], torch.from_numpy(test_images))


@pytest.mark.parametrize("in_memory", [True, False])
def test_imagefolder_jpegs(tmp_path: Path, in_memory: bool) -> None:
    write_jpegs(tmp_path)
    cfg = DataConfig(
        name="imagefolder",
        root=str(tmp_path),
        image_size=16,
        in_memory=in_memory,
        val_fraction=0.25,
        num_workers=0,
    )
    data = load_data(cfg)
    assert data.classes == ["cat", "dog"] and data.shape == (3, 16, 16)
    assert (len(data.train), len(data.val), len(data.test)) == (9, 3, 12)
    assert data.in_memory is in_memory
    loader = make_loader(data, data.train, cfg, 4, torch.device("cpu"), AugmentConfig(flip=True))
    x, y = next(iter(loader))
    assert x.shape == (4, 3, 16, 16) and x.dtype == torch.float32 and y.shape == (4,)


def test_imagefolder_streams_when_too_large(tmp_path: Path) -> None:
    write_jpegs(tmp_path)
    cfg = DataConfig(name="imagefolder", root=str(tmp_path), image_size=16, max_memory_gb=1e-6)
    assert not load_data(cfg).in_memory


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        (DataConfig(name="cifar10", root="nowhere"), "data.root 'nowhere' has no readable cifar10"),
        (DataConfig(name="mnist", root="nowhere"), "has no readable MNIST idx files"),
        (DataConfig(name="imagefolder", root="nowhere", image_size=8), "nowhere/train not found"),
        (DataConfig(name="imagefolder", root="nowhere"), "data.image_size is required"),
        (DataConfig(name="digit"), "unknown dataset 'digit' (did you mean 'digits'?)"),
        (
            DataConfig(name="digits", mean=[0.1, 0.2]),
            "data.mean has 2 values; digits has 1 channels",
        ),
    ],
)
def test_bad_data_gives_one_clear_error(cfg: DataConfig, message: str) -> None:
    with pytest.raises(UserError) as info:
        load_data(cfg)
    assert message in str(info.value)


def test_corrupt_cifar_batch_is_bad_input(tmp_path: Path) -> None:
    write_cifar(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").write_bytes(b"not a pickle")
    with pytest.raises(UserError, match="no readable cifar10"):
        load_data(DataConfig(name="cifar10", root=str(tmp_path)))


@pytest.mark.parametrize("name", ["digits", "mnist5k"])
def test_bundled_sets_split_deterministically_and_disjointly(name: str) -> None:
    a, b = load_data(DataConfig(name=name)), load_data(DataConfig(name=name))
    assert torch.equal(a.train.labels, b.train.labels) and torch.equal(a.test.images, b.test.images)
    total = {"digits": 1797, "mnist5k": 5000}[name]
    assert len(a.train) + len(a.val) + len(a.test) == total
    assert len(a.test) == round(total * 0.2)
    c = load_data(DataConfig(name=name, split_seed=1))
    assert not torch.equal(a.test.labels, c.test.labels)


def test_three_way_split_is_a_partition() -> None:
    from dlperf.data.sources import _three_way

    ids = Split(torch.arange(1000))
    train, val, test = _three_way(ids, DataConfig(val_fraction=0.1, test_fraction=0.2))
    parts = [set(s.labels.tolist()) for s in (train, val, test)]
    assert [len(p) for p in parts] == [720, 80, 200]
    assert set().union(*parts) == set(range(1000)) and sum(len(p) for p in parts) == 1000


def test_limit_and_statistics() -> None:
    data = load_data(DataConfig(name="digits", limit=100))
    assert len(data.train) == 100
    assert 0.2 < data.mean[0] < 0.4 and 0.3 < data.std[0] < 0.5
    fixed = load_data(DataConfig(name="digits", mean=[0.5], std=[0.25]))
    assert fixed.mean == (0.5,) and fixed.std == (0.25,)


def test_synthetic_shape_and_classes() -> None:
    data = load_data(DataConfig(name="synthetic", shape=[3, 24, 20], num_classes=7, size=64))
    assert data.train.images.shape == (64, 3, 24, 20) and int(data.train.labels.max()) < 7
    assert len(data.val) == len(data.test) == 8


def test_torchvision_loader_matches_tensor_loader_without_augmentation() -> None:
    cfg = DataConfig(name="digits", num_workers=0)
    data = load_data(cfg)
    fast = make_loader(data, data.test, cfg, 50, torch.device("cpu"))
    classic = make_loader(
        data, data.test, cfg.model_copy(update={"loader": "torchvision"}), 50, torch.device("cpu")
    )
    (x1, y1), (x2, y2) = next(iter(fast)), next(iter(classic))
    assert torch.equal(y1, y2)
    torch.testing.assert_close(x1, x2, atol=1e-5, rtol=1e-5)
