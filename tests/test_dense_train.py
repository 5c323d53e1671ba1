"""The dense INaaS tenant's model (`apps/inaas/dense_train.py`) without a rack: the numpy
MLP's gradient against central finite differences, and the digits read without importing
scikit-learn equal to `load_digits`'s. The training through the switch under a lease is
`tests/test_inaas_real.py::test_real_tenants_in_a_rack` (root)."""

from __future__ import annotations

import numpy as np

from inswitch.apps.allreduce.train_worker import digits_raw, digits_split
from inswitch.apps.inaas.dense_train import Mlp


def _loss(m: Mlp, x: np.ndarray, y: np.ndarray) -> float:
    z = m.logits(x).astype(np.float64)
    z -= z.max(axis=1, keepdims=True)
    return float(np.mean(np.log(np.exp(z).sum(axis=1)) - z[np.arange(len(y)), y]))


def test_mlp_gradient_is_the_cross_entropys() -> None:
    xtr, ytr, _, _ = digits_split()
    x, y = xtr[:16].astype(np.float64), ytr[:16]
    m = Mlp(seed=4, lr=0.1)
    m.params = [p.astype(np.float64) for p in m.params]  # float64 for the finite differences
    g = m.grad(x, y)
    assert g.shape == (m.size,) == (64 * 128 + 128 + 128 * 64 + 64 + 64 * 10 + 10,)
    rng = np.random.default_rng(0)
    flat = np.cumsum([0] + [p.size for p in m.params])
    checked = 0
    for k, p in enumerate(m.params):
        for i in rng.choice(p.size, 6, replace=False):
            old = p.flat[i]
            p.flat[i] = old + 1e-5
            up = _loss(m, x, y)
            p.flat[i] = old - 1e-5
            down = _loss(m, x, y)
            p.flat[i] = old
            assert abs((up - down) / 2e-5 - g[flat[k] + i]) < 1e-5, (k, i)
            checked += 1
    assert checked == 36


def test_mlp_learns_digits_with_the_exact_sum_of_four_workers() -> None:
    xtr, ytr, xte, yte = digits_split()
    m = Mlp(seed=1, lr=0.2)
    before = m.accuracy(xte, yte)
    shards = [np.arange(w, len(xtr), 4) for w in range(4)]
    for s in range(22):  # two epochs of 11 steps of 32 per worker
        b = slice(s % 11 * 32, (s % 11 + 1) * 32)
        m.step(sum(m.grad(xtr[sh[b]], ytr[sh[b]]) for sh in shards) / np.float32(4))
    assert before < 0.3 and m.accuracy(xte, yte) > 0.7


def test_digits_read_without_scikit_learn_equal_load_digits() -> None:
    from sklearn.datasets import load_digits

    d = load_digits()
    data, target = digits_raw()
    assert np.array_equal(data, d.data) and np.array_equal(target, d.target)
