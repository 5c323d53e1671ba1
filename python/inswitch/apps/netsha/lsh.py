"""Server-side LSH (NetSHa §2.1, §5): E2LSH p-stable hash functions, L tables of k
concatenated hashes; an exact-bucket index (E2LSH, what Layered-LSH servers use) and a
TLSH-style ternary index (what TLSH and NetSHa servers use).

Ternary matching: a query's hash value is "don't care" where its projection falls within
`delta` (a fraction of the bucket width) of a bucket boundary, as a TCAM entry with masked
bits; a data point matches a table if it agrees on every position the query cares about.
Near neighbours that fall just across a boundary are then still found, without probing
neighbouring buckets one by one."""

from __future__ import annotations

import numpy as np


class HashFamily:
    """The L × k p-stable functions h(v) = floor((a·v + b) / w), shared by every server."""

    def __init__(self, d: int, tables: int, k: int, w: float, seed: int = 0) -> None:
        rng = np.random.default_rng(seed + 7919)
        self.tables, self.k, self.w = tables, k, w
        self.a = rng.standard_normal((tables * k, d)).astype(np.float32)
        self.b = rng.uniform(0.0, w, size=tables * k).astype(np.float32)
        # Fold a signature of k integers into one 64-bit bucket key.
        self.mix = rng.integers(1, 2**61, size=k, dtype=np.int64) | 1

    def project(self, x: np.ndarray) -> np.ndarray:
        """(n, L, k) projections in units of buckets."""
        p = (x @ self.a.T + self.b) / self.w
        return p.reshape(x.shape[0], self.tables, self.k)

    def keys(self, proj: np.ndarray) -> np.ndarray:
        """(n, L) bucket keys of projections."""
        sig = np.floor(proj).astype(np.int64)
        return (sig * self.mix).sum(axis=2)


class E2LshIndex:
    """Exact-bucket hash tables over one server's rows."""

    def __init__(self, fam: HashFamily, data: np.ndarray, ids: np.ndarray) -> None:
        self.data, self.ids = data, ids
        keys = fam.keys(fam.project(data))
        self.tables: list[dict[int, np.ndarray]] = []
        for t in range(fam.tables):
            order = np.argsort(keys[:, t], kind="stable")
            sk = keys[order, t]
            uniq, start = np.unique(sk, return_index=True)
            ends = np.append(start[1:], len(sk))
            self.tables.append({int(u): order[s:e] for u, s, e in zip(uniq, start, ends)})
        self.bucket_keys = keys

    def candidates(self, qkeys: np.ndarray, qproj: np.ndarray) -> np.ndarray:
        found = [self.tables[t].get(int(k)) for t, k in enumerate(qkeys)]
        found = [f for f in found if f is not None]
        if not found:
            return np.empty(0, dtype=np.int64)
        return np.unique(np.concatenate(found))


class TernaryIndex:
    """TLSH-style ternary matching over one server's signatures."""

    def __init__(self, fam: HashFamily, data: np.ndarray, ids: np.ndarray, delta: float = 0.1) -> None:
        self.data, self.ids, self.delta = data, ids, delta
        proj = fam.project(data)
        self.sig = np.floor(proj).astype(np.int32)
        self.bucket_keys = fam.keys(proj)

    def candidates(self, qkeys: np.ndarray, qproj: np.ndarray) -> np.ndarray:
        qsig = np.floor(qproj).astype(np.int32)
        frac = qproj - qsig
        care = (frac > self.delta) & (frac < 1.0 - self.delta)
        match = np.all((self.sig == qsig[None]) | ~care[None], axis=2)
        return np.flatnonzero(match.any(axis=1))


def local_answers(index: E2LshIndex | TernaryIndex, q: np.ndarray, qkeys: np.ndarray, qproj: np.ndarray, cap: int) -> tuple[np.ndarray, np.ndarray]:
    """A server's answer to a query: its best `cap` candidates, global ids and distances
    (computed in float32, as a server would), nearest first."""
    rows = index.candidates(qkeys, qproj)
    if rows.size == 0:
        return np.empty(0, dtype=np.uint32), np.empty(0, dtype=np.float64)
    diff = index.data[rows] - q[None, :]
    d = np.sqrt(np.einsum("ij,ij->i", diff, diff, dtype=np.float32))
    if rows.size > cap:
        part = np.argpartition(d, cap - 1)[:cap]
        rows, d = rows[part], d[part]
    order = np.argsort(d, kind="stable")
    return index.ids[rows[order]].astype(np.uint32), d[order].astype(np.float64)
