//! `_native.PcapWriter`: the switch's own pcapng writer (`ports::pcap`) for captures made
//! in Python, e.g. of an in-process switch on simulated time (`inswitch kvs --pcap`).

use std::fs::File;

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;

use ports::{monotonic_ns, Direction, PcapngWriter};

/// One port's capture file: frames with a time in ns from when the writer was opened
/// (simulated or real), in or out of the switch.
#[pyclass(module = "inswitch._native")]
pub struct PcapWriter {
    inner: Option<PcapngWriter<File>>,
    origin_mono_ns: u64,
}

#[pymethods]
impl PcapWriter {
    #[new]
    fn new(path: &str, if_name: &str) -> PyResult<Self> {
        let w = PcapngWriter::create(path, if_name).map_err(|e| PyOSError::new_err(format!("{path}: {e}")))?;
        Ok(PcapWriter { inner: Some(w), origin_mono_ns: monotonic_ns() })
    }

    /// Append `frame`, `t_ns` after the writer was opened; `inbound`: into the switch.
    fn write(&mut self, frame: &[u8], t_ns: u64, inbound: bool) -> PyResult<()> {
        let w = self.inner.as_mut().ok_or_else(|| PyOSError::new_err("the capture is closed"))?;
        let dir = if inbound { Direction::Inbound } else { Direction::Outbound };
        w.write_frame(frame, self.origin_mono_ns.wrapping_add(t_ns), dir).map_err(|e| PyOSError::new_err(e.to_string()))
    }

    /// Push what is buffered to the file.
    fn flush(&mut self) -> PyResult<()> {
        match self.inner.as_mut() {
            Some(w) => w.flush().map_err(|e| PyOSError::new_err(e.to_string())),
            None => Ok(()),
        }
    }

    /// Flush and close.
    fn close(&mut self) -> PyResult<()> {
        self.flush()?;
        self.inner = None;
        Ok(())
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PcapWriter>()
}
