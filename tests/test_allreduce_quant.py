"""SwitchML-style quantization (hostlib::allreduce::quant through inswitch._native): the
per-chunk exponent bounds every value, the round trip is within half a quantization step,
and n workers' quantized values can never overflow the switch's 32-bit sum; a non-finite
input makes its chunk NaN (overflow handling), never a wrong finite number."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from inswitch import _native

ELEMS = 32
BOUND = float(np.float32(3e38))
finite = st.floats(min_value=-BOUND, max_value=BOUND, allow_nan=False, allow_infinity=False, width=32)


@settings(max_examples=200, deadline=None)
@given(xs=hnp.arrays(np.float32, st.integers(1, 200), elements=finite), n=st.integers(1, 1000))
def test_round_trip_and_no_overflow(xs: np.ndarray, n: int) -> None:
    codes = _native.allreduce_exponents(xs)
    assert codes.dtype == np.uint32 and len(codes) == -(-len(xs) // ELEMS)
    q = _native.allreduce_quantize(xs, codes, n)
    # The worst case: every one of n workers at this worker's largest magnitude.
    assert int(np.abs(q.astype(np.int64)).max()) * n < 2**31
    back = _native.allreduce_dequantize(q, codes, n)
    for c in range(len(codes)):
        chunk = xs[c * ELEMS:(c + 1) * ELEMS].astype(np.float64)
        m = float(np.abs(chunk).max())
        if m == 0:
            assert not back[c * ELEMS:(c + 1) * ELEMS].any()
            continue
        # Exponent e with max|x| < 2^e <= 2 max|x|; step 2^(e - 30 + ceil(log2 n)).
        e = int(np.frexp(m)[1])
        assert m < 2.0**e <= 2 * m
        step = 2.0 ** (e - 30 + int(np.ceil(np.log2(n))) if n > 1 else e - 30)
        err = np.abs(back[c * ELEMS:(c + 1) * ELEMS].astype(np.float64) - chunk)
        assert (err <= step / 2 + np.abs(chunk) * 2**-24 + 1e-45).all()


@given(xs=hnp.arrays(np.float32, st.integers(1, 100), elements=finite), n=st.integers(2, 64), data=st.data())
def test_sum_of_workers_is_exact_in_integers(xs: np.ndarray, n: int, data: st.DataObject) -> None:
    # n workers whose values are each at most this chunk's magnitude (the agreed exponent):
    # the int64 sum of their quantized values stays within int32, so the switch's wrapping
    # 32-bit sum equals it.
    codes = _native.allreduce_exponents(xs)
    ws = [_native.allreduce_quantize((xs * data.draw(st.sampled_from([1.0, -1.0, 0.5]))).astype(np.float32), codes, n)
          for _ in range(n)]
    total = np.sum([w.astype(np.int64) for w in ws], axis=0)
    assert np.abs(total).max() < 2**31


def test_nonfinite_chunk_is_nan_and_others_untouched() -> None:
    xs = np.arange(96, dtype=np.float32)
    xs[40] = np.inf
    codes = _native.allreduce_exponents(xs)
    assert codes[1] == 2**32 - 1
    q = _native.allreduce_quantize(xs, codes, 4)
    assert not q[32:64].any(), "a non-finite chunk sends zeros"
    back = _native.allreduce_dequantize(q * 4, codes, 4)
    assert np.isnan(back[32:64]).all()
    assert np.allclose(back[:32], xs[:32] * 4) and np.allclose(back[64:], xs[64:] * 4)
