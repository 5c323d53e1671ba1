"""Datasets for the search experiments: the paper's `random`, scikit-learn's bundled
`digits`, `text` (sentence embeddings of a real text on this machine, all-MiniLM-L6-v2 run
in numpy by `embed.py`), and readers for `.fvecs`/`.bvecs`/`.ivecs` and ann-benchmarks
HDF5 files."""

from __future__ import annotations

import glob
import hashlib
import os
import re
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
    #: An E2LSH bucket width suited to the data's distances (None: the caller's default).
    lsh_width: Optional[float] = None


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
    if name == "text" or name.startswith("text:"):
        return text_dataset(name, n, queries, seed)
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


# ---- text: sentence embeddings ------------------------------------------------------------------

#: Real text that Debian-like machines ship (as `make demo`'s WordCount): the licence
#: texts, then Vim's documentation, read in this order until enough sentences are found.
TEXT_SOURCES = ["/usr/share/common-licenses/*", "/usr/share/vim/vim*/doc/*.txt"]
#: `--dataset text` embeds at most this many sentences (base + queries): about a minute of
#: one core here. `text:N` asks for more (or fewer), `text:FILE` embeds a file of yours.
TEXT_DEFAULT_SENTENCES = 2000
#: Distances between unit vectors lie in [0, 2] (near neighbours here 0.5–0.9 apart), so
#: random's width 32 would put everything in one bucket. 2000 sentences, 100 queries, K=50,
#: 4 servers: width 2 gives recall@50 TLSH 0.74 / Layered 0.42, 3 gives 0.975 / 0.80 (as
#: `random` at width 32), 4 gives 0.999 / 0.94.
TEXT_LSH_WIDTH = 3.0


def text_files() -> list[str]:
    out: list[str] = []
    for pattern in TEXT_SOURCES:
        for p in sorted(glob.glob(pattern)):
            if os.path.isfile(p) and not os.path.islink(p):
                out.append(p)
    return out


def split_sentences(text: str) -> list[str]:
    """Sentences of plain text: whitespace folded, split after . ! ? ; followed by space,
    kept if 5–60 words (headings, rulers and table rows are not sentences)."""
    flat = re.sub(r"\s+", " ", text)
    out = []
    for s in re.split(r"(?<=[.!?;])\s+", flat):
        s = s.strip()
        words = s.split()
        if 5 <= len(words) <= 60 and sum(c.isalpha() for c in s) >= len(s) // 2:
            out.append(s)
    return out


def text_corpus(limit: int, files: Optional[list[str]] = None) -> list[str]:
    """Up to `limit` distinct sentences from `files` (default: TEXT_SOURCES), in order."""
    seen: set[str] = set()
    out: list[str] = []
    for p in files if files is not None else text_files():
        try:
            with open(p, encoding="utf-8", errors="replace") as f:
                body = f.read()
        except OSError:
            continue
        if "\0" in body[:4096]:
            continue
        for s in split_sentences(body):
            if s not in seen:
                seen.add(s)
                out.append(s)
                if len(out) >= limit:
                    return out
    return out


def cache_dir() -> Path:
    """The user's cache dir (XDG_CACHE_HOME, else ~/.cache) / inswitch / netsha-text."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "inswitch" / "netsha-text"


def embed_cached(sentences: list[str], show_progress: bool = True) -> np.ndarray:
    """Embeddings of `sentences`, cached under cache_dir() keyed by the model (its package
    version and weight file size) and the corpus (SHA-256 of the sentences)."""
    from . import embed

    mdir = embed.model_dir()
    try:
        from importlib.metadata import version

        mver = version(embed.MODEL_PACKAGE)
    except Exception:  # metadata missing: the weights' size still tells models apart
        mver = "?"
    model_key = f"{embed.MODEL_NAME}-{mver}-{(mdir / 'model.safetensors').stat().st_size}"
    corpus_key = hashlib.sha256("\n".join(sentences).encode()).hexdigest()[:16]
    path = cache_dir() / f"{model_key}-{corpus_key}.npy"
    if path.exists():
        x = np.load(path)
        if x.shape == (len(sentences), 384):
            return x
    from threadpoolctl import threadpool_limits

    model = embed.MiniLM(mdir)
    # One BLAS thread: on a shared 2-core machine a second thread spins against other
    # processes and made embedding several times slower, not faster.
    with threadpool_limits(limits=1):
        if show_progress:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            with Progress(TextColumn("embedding sentences"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), transient=True) as prog:
                task = prog.add_task("embed", total=len(sentences))
                x = model.encode(sentences, progress=lambda k: prog.advance(task, k))
        else:
            x = model.encode(sentences)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp.npy")
    np.save(tmp, x)
    os.replace(tmp, path)
    return x


def text_dataset(spec: str, n: int, queries: int, seed: int = 0, show_progress: bool = True) -> Dataset:
    """`text` (at most TEXT_DEFAULT_SENTENCES sentences), `text:N` (at most N) or
    `text:FILE` (sentences of FILE): base n sentences (0: all), queries held-out ones."""
    arg = spec.partition(":")[2]
    files: Optional[list[str]] = None
    cap = TEXT_DEFAULT_SENTENCES
    if arg.isdigit():
        cap = int(arg)
    elif arg:
        if not Path(arg).is_file():
            raise DatasetError(f"text:{arg}: no such file")
        files, cap = [arg], 10**9
    want = min(cap, n + queries) if n else cap
    sentences = text_corpus(want, files)
    if len(sentences) <= queries:
        raise DatasetError(f"text: found {len(sentences)} sentences in {files or TEXT_SOURCES}, need more than {queries}")
    try:
        x = embed_cached(sentences, show_progress)
    except ImportError as e:
        raise DatasetError(str(e)) from e
    ds = _held_out("text", x, queries, seed)
    ds.lsh_width = TEXT_LSH_WIDTH
    return ds
