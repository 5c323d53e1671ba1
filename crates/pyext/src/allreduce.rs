//! SwitchML-style allreduce workers (`hostlib::allreduce` over `ports::allreduce`) and the
//! quantization they use, on numpy arrays.

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use hostlib::allreduce::{quant, Worker, WorkerConfig};
use ports::allreduce::WorkerSocket;
use pyo3::exceptions::{PyTimeoutError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

fn verr(e: impl ToString) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// The raw bytes of `arr` as a C-contiguous numpy array of `dtype` (one copy).
fn array_bytes(py: Python<'_>, arr: &Bound<'_, PyAny>, dtype: &str) -> PyResult<Vec<u8>> {
    let np = py.import("numpy")?;
    let a = np.call_method1("ascontiguousarray", (arr, dtype))?;
    let b = a.call_method0("tobytes")?;
    Ok(b.cast::<PyBytes>()?.as_bytes().to_vec())
}

fn f32s(py: Python<'_>, arr: &Bound<'_, PyAny>) -> PyResult<Vec<f32>> {
    Ok(array_bytes(py, arr, "float32")?.chunks_exact(4).map(|c| f32::from_ne_bytes(c.try_into().unwrap())).collect())
}
fn i32s(py: Python<'_>, arr: &Bound<'_, PyAny>) -> PyResult<Vec<i32>> {
    Ok(array_bytes(py, arr, "int32")?.chunks_exact(4).map(|c| i32::from_ne_bytes(c.try_into().unwrap())).collect())
}
fn u32s(py: Python<'_>, arr: &Bound<'_, PyAny>) -> PyResult<Vec<u32>> {
    Ok(array_bytes(py, arr, "uint32")?.chunks_exact(4).map(|c| u32::from_ne_bytes(c.try_into().unwrap())).collect())
}

/// A numpy array of `dtype` holding `bytes` (native order).
fn to_array<'py>(py: Python<'py>, bytes: Vec<u8>, dtype: &str) -> PyResult<Bound<'py, PyAny>> {
    let np = py.import("numpy")?;
    np.call_method1("frombuffer", (PyBytes::new(py, &bytes), dtype))?.call_method0("copy")
}

fn ne_bytes<const N: usize, T: Copy>(xs: &[T], f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    xs.iter().flat_map(|&x| f(x)).collect()
}

/// One allreduce worker: a UDP socket bound to `bind`, contributions sent to `dest`.
#[pyclass(module = "inswitch._native")]
pub struct AllreduceWorker {
    inner: WorkerSocket,
}

#[pymethods]
impl AllreduceWorker {
    #[new]
    #[pyo3(signature = (bind, dest, job, worker, workers, slots, rto_s=0.005))]
    fn new(bind: &str, dest: &str, job: u16, worker: u16, workers: u16, slots: u16, rto_s: f64) -> PyResult<Self> {
        if workers == 0 || worker >= workers {
            return Err(verr(format!("worker id {worker} must be below the worker count {workers}")));
        }
        if slots == 0 {
            return Err(verr("a job needs at least one slot"));
        }
        if !(rto_s > 0.0 && rto_s < 10.0) {
            return Err(verr(format!("rto_s must be in (0, 10), not {rto_s}")));
        }
        let dest: SocketAddr = dest.parse().map_err(|e| verr(format!("bad address {dest:?}: {e}")))?;
        let sock = UdpSocket::bind(bind).map_err(|e| verr(format!("cannot bind {bind}: {e}")))?;
        let cfg = WorkerConfig { job, worker, workers, slots, rto_ns: (rto_s * 1e9) as u64 };
        Ok(AllreduceWorker { inner: WorkerSocket::new(Worker::new(cfg), sock, dest) })
    }

    /// SUM of float32 arrays over the job's workers (a new float32 array, the input's
    /// length). Raises TimeoutError after `timeout_s`.
    #[pyo3(signature = (arr, timeout_s=60.0))]
    fn allreduce_f32<'py>(&mut self, py: Python<'py>, arr: &Bound<'py, PyAny>, timeout_s: f64) -> PyResult<Bound<'py, PyAny>> {
        let xs = f32s(py, arr)?;
        let inner = &mut self.inner;
        let out = py.detach(|| inner.allreduce_f32(&xs, Duration::from_secs_f64(timeout_s))).map_err(verr)?;
        let out = out.ok_or_else(|| PyTimeoutError::new_err(format!("allreduce did not finish within {timeout_s} s")))?;
        to_array(py, ne_bytes(&out, f32::to_ne_bytes), "float32")
    }

    /// Wrapping SUM of int32 arrays over the job's workers.
    #[pyo3(signature = (arr, timeout_s=60.0))]
    fn allreduce_i32<'py>(&mut self, py: Python<'py>, arr: &Bound<'py, PyAny>, timeout_s: f64) -> PyResult<Bound<'py, PyAny>> {
        let xs = i32s(py, arr)?;
        let inner = &mut self.inner;
        let out = py.detach(|| inner.allreduce_i32(&xs, Duration::from_secs_f64(timeout_s))).map_err(verr)?;
        let out = out.ok_or_else(|| PyTimeoutError::new_err(format!("allreduce did not finish within {timeout_s} s")))?;
        to_array(py, ne_bytes(&out, i32::to_ne_bytes), "int32")
    }

    /// Counters: packets_sent, packets_received, bytes_sent, bytes_received (UDP payload),
    /// retransmissions, ignored.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.inner.worker.stats();
        let d = PyDict::new(py);
        d.set_item("packets_sent", s.packets_sent)?;
        d.set_item("packets_received", s.packets_received)?;
        d.set_item("bytes_sent", s.bytes_sent)?;
        d.set_item("bytes_received", s.bytes_received)?;
        d.set_item("retransmissions", s.retransmissions)?;
        d.set_item("ignored", s.ignored)?;
        Ok(d)
    }
}

/// Per-chunk exponent codes of a float32 array (uint32 array, one per 32 values).
#[pyfunction]
fn allreduce_exponents<'py>(py: Python<'py>, arr: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let codes = quant::exponents(&f32s(py, arr)?);
    to_array(py, ne_bytes(&codes, u32::to_ne_bytes), "uint32")
}

/// float32 values to int32 with the agreed per-chunk codes, for `workers` workers.
#[pyfunction]
fn allreduce_quantize<'py>(
    py: Python<'py>,
    arr: &Bound<'py, PyAny>,
    codes: &Bound<'py, PyAny>,
    workers: u32,
) -> PyResult<Bound<'py, PyAny>> {
    let (xs, codes) = (f32s(py, arr)?, u32s(py, codes)?);
    if codes.len() != xs.len().div_ceil(wire::allreduce::ELEMS) || workers == 0 {
        return Err(verr("one code per 32 values, and at least one worker"));
    }
    to_array(py, ne_bytes(&quant::quantize(&xs, &codes, workers), i32::to_ne_bytes), "int32")
}

/// Aggregated int32 values back to float32 (NaN for a chunk with a non-finite input).
#[pyfunction]
fn allreduce_dequantize<'py>(
    py: Python<'py>,
    arr: &Bound<'py, PyAny>,
    codes: &Bound<'py, PyAny>,
    workers: u32,
) -> PyResult<Bound<'py, PyAny>> {
    let (qs, codes) = (i32s(py, arr)?, u32s(py, codes)?);
    if codes.len() != qs.len().div_ceil(wire::allreduce::ELEMS) || workers == 0 {
        return Err(verr("one code per 32 values, and at least one worker"));
    }
    to_array(py, ne_bytes(&quant::dequantize(&qs, &codes, workers), f32::to_ne_bytes), "float32")
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<AllreduceWorker>()?;
    m.add_function(wrap_pyfunction!(allreduce_exponents, m)?)?;
    m.add_function(wrap_pyfunction!(allreduce_quantize, m)?)?;
    m.add_function(wrap_pyfunction!(allreduce_dequantize, m)?)?;
    Ok(())
}
