//! NetSHa from Python: a path of in-memory switches between the search servers and the
//! agent ([`programs::netsha::path::SwitchPath`]), fed and read in bulk. Answers cross the
//! boundary as bytes of packed little-endian arrays (`numpy.frombuffer` on the Python side),
//! never one Python object per answer or packet.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use programs::netsha::path::{answer_frame, parse_frame, SwitchPath};
use programs::netsha::NetshaConfig;
use wire::netsha::{self as nw};

fn u32s(b: &[u8]) -> PyResult<Vec<u32>> {
    if !b.len().is_multiple_of(4) {
        return Err(PyValueError::new_err("uint32 array bytes must be a multiple of 4"));
    }
    Ok(b.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
}

fn f64s(b: &[u8]) -> PyResult<Vec<f64>> {
    if !b.len().is_multiple_of(8) {
        return Err(PyValueError::new_err("float64 array bytes must be a multiple of 8"));
    }
    Ok(b.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect())
}

/// Server `server`'s answer packets: each carries one query's answers, at most
/// `per_packet` of them, in the order given.
fn server_frames(server: usize, q: &[u32], i: &[u32], d: &[f64], per_packet: usize) -> PyResult<Vec<Vec<u8>>> {
    let mut frames = Vec::new();
    let mut at = 0;
    while at < q.len() {
        let mut end = (at + per_packet).min(q.len());
        if let Some(off) = q[at..end].iter().position(|&x| x != q[at]) {
            end = at + off;
        }
        let mut repr = nw::NetshaRepr::default();
        for j in at..end {
            match repr.queries.last_mut() {
                Some(b) if b.qid == q[j] => b.answers.push((i[j], d[j])),
                _ => repr.queries.push(nw::QueryAnswers { qid: q[j], answers: vec![(i[j], d[j])] }),
            }
        }
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut buf).map_err(|e| PyValueError::new_err(e.to_string()))?;
        frames.push(answer_frame(server, &buf, true));
        at = end;
    }
    Ok(frames)
}

/// Servers → switches → agent, in memory, on virtual time.
#[pyclass(module = "inswitch._native", unsendable)]
pub struct NetshaPath {
    path: SwitchPath,
    frames_in: u64,
}

#[pymethods]
impl NetshaPath {
    /// `hops`: one program spec per switch (`"netsha:registers=100,slots=12,..."`), or
    /// `None` for a switch that only forwards.
    #[new]
    fn new(hops: Vec<Option<String>>, servers: usize) -> PyResult<Self> {
        if hops.is_empty() || servers == 0 || servers >= 250 {
            return Err(PyValueError::new_err("need at least one switch and 1..249 servers"));
        }
        let cfgs = hops
            .iter()
            .enumerate()
            .map(|(i, h)| match h {
                None => Ok(None),
                Some(spec) => {
                    let mut c = NetshaConfig::from_spec(spec).map_err(PyValueError::new_err)?;
                    c.name = format!("{}_{i}", c.name);
                    Ok(Some(c))
                }
            })
            .collect::<PyResult<Vec<_>>>()?;
        Ok(NetshaPath { path: SwitchPath::new(&cfgs, servers), frames_in: 0 })
    }

    /// Server `server` sends answers at `now_ns`: `qids`, `ids` (uint32) and `dists`
    /// (float64) as little-endian bytes. Each packet carries one query's answers (a server
    /// answers each query on its own, §2.3), at most `per_packet` of them. Returns the
    /// packets sent.
    #[allow(clippy::too_many_arguments)]
    fn send(
        &mut self,
        py: Python<'_>,
        server: usize,
        qids: &[u8],
        ids: &[u8],
        dists: &[u8],
        per_packet: usize,
        now_ns: u64,
    ) -> PyResult<usize> {
        let (q, i, d) = (u32s(qids)?, u32s(ids)?, f64s(dists)?);
        if q.len() != i.len() || q.len() != d.len() {
            return Err(PyValueError::new_err("qids, ids and dists differ in length"));
        }
        if server >= self.path.servers() || per_packet == 0 || per_packet > nw::MAX_ANSWERS {
            return Err(PyValueError::new_err("bad server or per_packet (1..=120)"));
        }
        let frames = server_frames(server, &q, &i, &d, per_packet)?;
        let n = frames.len();
        self.frames_in += n as u64;
        py.detach(|| self.path.send(server, &frames, now_ns));
        Ok(n)
    }

    /// Every server answers its part of a wave at `now_ns`, in parallel: `servers`,
    /// `qids`, `ids` (uint32) and `dists` (float64) as little-endian bytes, one entry per
    /// answer. Each server's answers are packed as `send` packs them; the switch receives
    /// one packet per server at a time, so the servers' passes interleave. Returns the
    /// packets sent.
    #[allow(clippy::too_many_arguments)]
    fn send_concurrent(
        &mut self,
        py: Python<'_>,
        servers: &[u8],
        qids: &[u8],
        ids: &[u8],
        dists: &[u8],
        per_packet: usize,
        now_ns: u64,
    ) -> PyResult<usize> {
        let (sv, q, i, d) = (u32s(servers)?, u32s(qids)?, u32s(ids)?, f64s(dists)?);
        if q.len() != i.len() || q.len() != d.len() || q.len() != sv.len() {
            return Err(PyValueError::new_err("servers, qids, ids and dists differ in length"));
        }
        if per_packet == 0 || per_packet > nw::MAX_ANSWERS || sv.iter().any(|&s| s as usize >= self.path.servers()) {
            return Err(PyValueError::new_err("bad server or per_packet (1..=120)"));
        }
        let mut frames = Vec::with_capacity(self.path.servers());
        for s in 0..self.path.servers() {
            let pick: Vec<usize> = (0..sv.len()).filter(|&j| sv[j] as usize == s).collect();
            let qs: Vec<u32> = pick.iter().map(|&j| q[j]).collect();
            let is: Vec<u32> = pick.iter().map(|&j| i[j]).collect();
            let ds: Vec<f64> = pick.iter().map(|&j| d[j]).collect();
            frames.push(server_frames(s, &qs, &is, &ds, per_packet)?);
        }
        let n: usize = frames.iter().map(|f| f.len()).sum();
        self.frames_in += n as u64;
        py.detach(|| self.path.send_concurrent(&frames, now_ns));
        Ok(n)
    }

    /// Advance every switch to `now_ns` (timers, recirculations).
    fn tick(&mut self, py: Python<'_>, now_ns: u64) {
        py.detach(|| self.path.tick(now_ns));
    }

    /// Tick from `from_ns` to `until_ns` in steps of `step_ns`; returns the end time.
    fn settle(&mut self, py: Python<'_>, from_ns: u64, until_ns: u64, step_ns: u64) -> u64 {
        py.detach(|| self.path.settle(from_ns, until_ns, step_ns))
    }

    /// What the agent received since the last call: `(frames, qids, ids, dists)`, the
    /// arrays as little-endian bytes (uint32, uint32, float64).
    fn take_agent<'py>(&mut self, py: Python<'py>) -> (usize, Bound<'py, PyBytes>, Bound<'py, PyBytes>, Bound<'py, PyBytes>) {
        let frames = self.path.take_agent_rx();
        let (mut q, mut i, mut d) = (Vec::new(), Vec::new(), Vec::new());
        for f in &frames {
            if let Some(r) = parse_frame(f) {
                for b in r.queries {
                    for (id, dist) in b.answers {
                        q.extend_from_slice(&b.qid.to_le_bytes());
                        i.extend_from_slice(&id.to_le_bytes());
                        d.extend_from_slice(&dist.to_le_bytes());
                    }
                }
            }
        }
        (frames.len(), PyBytes::new(py, &q), PyBytes::new(py, &i), PyBytes::new(py, &d))
    }

    /// NetSHa counters of switch `hop` (answer outcomes, answers sent and cleared by
    /// cause, drops by reason), and the switch's recirculations.
    fn counters<'py>(&mut self, py: Python<'py>, hop: usize) -> PyResult<Bound<'py, PyDict>> {
        if hop >= self.path.switches() {
            return Err(PyValueError::new_err("no such switch"));
        }
        let d = PyDict::new(py);
        for (k, v) in self.path.netsha_events(hop) {
            d.set_item(k, v)?;
        }
        for (k, v) in self.path.netsha_drops(hop) {
            d.set_item(format!("drop_{k}"), v)?;
        }
        let c = self.path.counters(hop);
        d.set_item("recirculations", c.recirculations)?;
        d.set_item("pktgen_packets", c.pktgen_packets)?;
        d.set_item("drops_total", c.drops.iter().sum::<u64>())?;
        d.set_item("frames_in", self.frames_in)?;
        Ok(d)
    }

    /// The controller's selection entries (§4) on switch 0: entry j says bucket `keys[j]`
    /// (int64/uint64) of LSH table `tables[j]` (uint32) is held by the servers in
    /// `bitmaps[j]` (uint32), all little-endian arrays. Returns the entries written.
    fn install_selection(&mut self, tables: &[u8], keys: &[u8], bitmaps: &[u8]) -> PyResult<usize> {
        let (t, b) = (u32s(tables)?, u32s(bitmaps)?);
        if !keys.len().is_multiple_of(8) || keys.len() / 8 != t.len() || t.len() != b.len() {
            return Err(PyValueError::new_err("tables, keys and bitmaps must have one entry each"));
        }
        for (j, c) in keys.chunks_exact(8).enumerate() {
            let k = u64::from_le_bytes(c.try_into().unwrap());
            self.path.install_selection(t[j] as usize, k, b[j]).map_err(PyValueError::new_err)?;
        }
        Ok(t.len())
    }

    /// Query packets through switch 0's server selection: query j has QID `qids[j]`
    /// (uint32), bucket keys `keys[j*tables..]` (int64/uint64) and vector
    /// `vectors[j*dim..]` (float32). Returns, per query, the bitmap (uint32, little-endian
    /// bytes) of the servers that received it intact.
    #[pyo3(signature = (qids, keys, vectors, tables, dim, now_ns))]
    #[allow(clippy::too_many_arguments)]
    fn select<'py>(
        &mut self,
        py: Python<'py>,
        qids: &[u8],
        keys: &[u8],
        vectors: &[u8],
        tables: usize,
        dim: usize,
        now_ns: u64,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let q = u32s(qids)?;
        if keys.len() != q.len() * tables * 8 || vectors.len() != q.len() * dim * 4 || self.path.servers() > 32 {
            return Err(PyValueError::new_err("keys must hold tables and vectors dim values per query, at most 32 servers"));
        }
        let mut out = Vec::with_capacity(q.len() * 4);
        for (j, &qid) in q.iter().enumerate() {
            let r = nw::QueryRepr {
                qid,
                keys: keys[j * tables * 8..(j + 1) * tables * 8]
                    .chunks_exact(8)
                    .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
                    .collect(),
                vector: vectors[j * dim * 4..(j + 1) * dim * 4]
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                    .collect(),
            };
            let mut body = vec![0u8; r.buffer_len()];
            r.emit(&mut body).map_err(|e| PyValueError::new_err(format!("query {qid}: {e}")))?;
            let got = py.detach(|| self.path.send_query(&body, now_ns));
            let mut bits = 0u32;
            for (s, f) in got {
                let ok = f.len() > 42
                    && nw::QueryPacket::new_checked(&f[42..]).ok().and_then(|p| nw::QueryRepr::parse(&p).ok()).as_ref() == Some(&r);
                if ok {
                    bits |= 1 << s;
                }
            }
            out.extend_from_slice(&bits.to_le_bytes());
        }
        Ok(PyBytes::new(py, &out))
    }

    #[getter]
    fn switches(&self) -> usize {
        self.path.switches()
    }
}

/// A NetSHa payload (the Rust encoder) for answers given as little-endian arrays;
/// consecutive answers of one query form one block.
#[pyfunction]
fn netsha_encode<'py>(py: Python<'py>, qids: &[u8], ids: &[u8], dists: &[u8]) -> PyResult<Bound<'py, PyBytes>> {
    let (q, i, d) = (u32s(qids)?, u32s(ids)?, f64s(dists)?);
    if q.len() != i.len() || q.len() != d.len() {
        return Err(PyValueError::new_err("qids, ids and dists differ in length"));
    }
    let mut repr = nw::NetshaRepr::default();
    for j in 0..q.len() {
        match repr.queries.last_mut() {
            Some(b) if b.qid == q[j] => b.answers.push((i[j], d[j])),
            _ => repr.queries.push(nw::QueryAnswers { qid: q[j], answers: vec![(i[j], d[j])] }),
        }
    }
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut buf).map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(PyBytes::new(py, &buf))
}

/// A NetSHa payload's answers (the Rust parser), as little-endian `(qids uint32, ids
/// uint32, dists float64)` arrays; `ValueError` if the payload is malformed.
#[pyfunction]
fn netsha_decode<'py>(py: Python<'py>, payload: &[u8]) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyBytes>, Bound<'py, PyBytes>)> {
    let repr =
        nw::NetshaPacket::new_checked(payload).and_then(|p| nw::NetshaRepr::parse(&p)).map_err(|e| PyValueError::new_err(e.to_string()))?;
    let (mut q, mut i, mut d) = (Vec::new(), Vec::new(), Vec::new());
    for b in &repr.queries {
        for &(id, dist) in &b.answers {
            q.extend_from_slice(&b.qid.to_le_bytes());
            i.extend_from_slice(&id.to_le_bytes());
            d.extend_from_slice(&dist.to_le_bytes());
        }
    }
    Ok((PyBytes::new(py, &q), PyBytes::new(py, &i), PyBytes::new(py, &d)))
}

/// A query packet's payload (`wire::netsha::QueryRepr`) from little-endian `keys` (uint64 or
/// int64, one per LSH table) and `vector` (float32).
#[pyfunction]
fn netsha_query_encode<'py>(py: Python<'py>, qid: u32, keys: &[u8], vector: &[u8]) -> PyResult<Bound<'py, PyBytes>> {
    if !keys.len().is_multiple_of(8) || !vector.len().is_multiple_of(4) {
        return Err(PyValueError::new_err("keys must be 8-byte and vector 4-byte values"));
    }
    let r = nw::QueryRepr {
        qid,
        keys: keys.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect(),
        vector: vector.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect(),
    };
    let mut buf = vec![0u8; r.buffer_len()];
    r.emit(&mut buf).map_err(|e| PyValueError::new_err(format!("query {qid}: {e}")))?;
    Ok(PyBytes::new(py, &buf))
}

/// A query packet's `(qid, keys uint64, vector float32)` (little-endian bytes), or `None` if
/// the payload is not a well-formed query.
#[pyfunction]
fn netsha_query_decode<'py>(py: Python<'py>, payload: &[u8]) -> Option<(u32, Bound<'py, PyBytes>, Bound<'py, PyBytes>)> {
    let r = nw::QueryPacket::new_checked(payload).and_then(|p| nw::QueryRepr::parse(&p)).ok()?;
    let keys: Vec<u8> = r.keys.iter().flat_map(|k| k.to_le_bytes()).collect();
    let vector: Vec<u8> = r.vector.iter().flat_map(|v| v.to_le_bytes()).collect();
    Some((r.qid, PyBytes::new(py, &keys), PyBytes::new(py, &vector)))
}

/// Answers per packet a server may send so that a switch with this spec reduces all of them.
#[pyfunction]
fn netsha_answers_per_packet(spec: &str) -> PyResult<usize> {
    Ok(NetshaConfig::from_spec(spec).map_err(PyValueError::new_err)?.answers_per_packet())
}

/// One measurement: `frames` (server, frame) through a fresh path until `seconds` pass;
/// returns (seconds, frames, answers).
fn measure(hops: &[Option<NetshaConfig>], frames: &[(usize, Vec<u8>, usize)], seconds: f64) -> (f64, u64, u64) {
    let mut path = SwitchPath::new(hops, 4);
    let start = std::time::Instant::now();
    let (mut n_frames, mut n_answers, mut now) = (0u64, 0u64, 1_000u64);
    'outer: loop {
        for chunk in frames.chunks(32) {
            let server = chunk[0].0;
            let batch: Vec<Vec<u8>> = chunk.iter().map(|f| f.1.clone()).collect();
            path.send(server, &batch, now);
            now += 1_000;
            path.tick(now);
            n_frames += chunk.len() as u64;
            n_answers += chunk.iter().map(|f| f.2 as u64).sum::<u64>();
            path.agent_rx.clear();
            if start.elapsed().as_secs_f64() >= seconds {
                break 'outer;
            }
        }
    }
    (start.elapsed().as_secs_f64(), n_frames, n_answers)
}

/// `inswitch bench netsha`: answers per second through one switch running `spec`, and
/// through a forwarding-only switch in the same run, on one core, in memory.
#[pyfunction]
#[pyo3(signature = (spec, answers_per_packet, queries=64, seconds=2.0))]
fn netsha_bench<'py>(py: Python<'py>, spec: &str, answers_per_packet: usize, queries: u32, seconds: f64) -> PyResult<Bound<'py, PyDict>> {
    let cfg = NetshaConfig::from_spec(spec).map_err(PyValueError::new_err)?;
    let per = answers_per_packet.clamp(1, cfg.answers_per_packet());
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let frames: Vec<(usize, Vec<u8>, usize)> = (0..4096usize)
        .map(|i| {
            let answers: Vec<(u32, f64)> = (0..per)
                .map(|j| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    ((i * per + j) as u32, ((x >> 40) as f32 / 1e4) as f64)
                })
                .collect();
            let r = nw::NetshaRepr { queries: vec![nw::QueryAnswers { qid: i as u32 % queries, answers }] };
            let mut buf = vec![0u8; r.buffer_len()];
            r.emit(&mut buf).expect("valid payload");
            (i % 4, answer_frame(i % 4, &buf, true), per)
        })
        .collect();
    let (ns, nf, na) = py.detach(|| measure(&[Some(cfg.clone())], &frames, seconds));
    let (fs, ff, fa) = py.detach(|| measure(&[None], &frames, seconds));
    let d = PyDict::new(py);
    d.set_item("spec", spec)?;
    d.set_item("answers_per_packet", per)?;
    d.set_item("queries", queries)?;
    d.set_item("netsha_answers_per_s", na as f64 / ns)?;
    d.set_item("netsha_packets_per_s", nf as f64 / ns)?;
    d.set_item("forward_answers_per_s", fa as f64 / fs)?;
    d.set_item("forward_packets_per_s", ff as f64 / fs)?;
    d.set_item("ratio_netsha_forward", (na as f64 / ns) / (fa as f64 / fs))?;
    Ok(d)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(netsha_bench, m)?)?;
    m.add_function(wrap_pyfunction!(netsha_encode, m)?)?;
    m.add_function(wrap_pyfunction!(netsha_decode, m)?)?;
    m.add_function(wrap_pyfunction!(netsha_query_encode, m)?)?;
    m.add_function(wrap_pyfunction!(netsha_query_decode, m)?)?;
    m.add_class::<NetshaPath>()?;
    m.add_function(wrap_pyfunction!(netsha_answers_per_packet, m)?)?;
    Ok(())
}
