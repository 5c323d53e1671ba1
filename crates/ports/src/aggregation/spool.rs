//! [`SpoolSource`]: a mapper's pairs read from one spool file per tree, so its memory does
//! not grow with its input (WordCount without a combiner writes a pair per word).
//!
//! A spool is a sequence of frames `<u32 BE key length, key, u32 BE value>`: the TCP
//! shuffle's frames, so a tcp-mode mapper sends its spool file as it is.

use std::fs::File;
use std::io::{BufRead, BufReader, ErrorKind, Read, Seek, SeekFrom, Write};
use std::path::PathBuf;

use hostlib::aggregation::{Error, PairSource};

/// Longest key a spool frame may announce: a longer length is taken for a corrupt file
/// (rather than allocating it); no protocol carries keys near this long.
pub const MAX_SPOOL_KEY: usize = 1 << 20;

/// Read buffer per spool file.
const BUF: usize = 1 << 16;

/// Append one frame.
pub fn write_frame(w: &mut impl Write, key: &[u8], value: u32) -> std::io::Result<()> {
    w.write_all(&(key.len() as u32).to_be_bytes())?;
    w.write_all(key)?;
    w.write_all(&value.to_be_bytes())
}

struct Spool {
    path: PathBuf,
    r: BufReader<File>,
    /// Byte offset of the next frame (for error messages).
    at: u64,
}

/// One spool file per tree index, read with buffered I/O.
pub struct SpoolSource {
    spools: Vec<Spool>,
}

impl SpoolSource {
    /// Open `paths[i]` as tree index `i`'s spool.
    pub fn open(paths: &[PathBuf]) -> Result<SpoolSource, String> {
        let spools = paths
            .iter()
            .map(|p| {
                let f = File::open(p).map_err(|e| format!("spool {}: {e}", p.display()))?;
                Ok(Spool { path: p.clone(), r: BufReader::with_capacity(BUF, f), at: 0 })
            })
            .collect::<Result<_, String>>()?;
        Ok(SpoolSource { spools })
    }
}

impl Spool {
    fn fail(&self, what: &str) -> Error {
        Error::Source(format!("spool {}: {what} at byte {}", self.path.display(), self.at))
    }

    fn read(&mut self, buf: &mut [u8], what: &str) -> Result<(), Error> {
        self.r.read_exact(buf).map_err(|e| match e.kind() {
            ErrorKind::UnexpectedEof => self.fail(&format!("truncated frame ({what} cut short)")),
            _ => self.fail(&e.to_string()),
        })
    }
}

impl PairSource for SpoolSource {
    fn trees(&self) -> usize {
        self.spools.len()
    }

    fn rewind(&mut self, tree: usize) -> Result<(), Error> {
        let s = &mut self.spools[tree];
        s.r.seek(SeekFrom::Start(0)).map_err(|e| Error::Source(format!("spool {}: {e}", s.path.display())))?;
        s.at = 0;
        Ok(())
    }

    fn next_pair(&mut self, tree: usize, key: &mut Vec<u8>) -> Result<Option<u32>, Error> {
        let s = &mut self.spools[tree];
        // A clean end is between frames only.
        match s.r.fill_buf() {
            Ok([]) => return Ok(None),
            Ok(_) => {}
            Err(e) => return Err(s.fail(&e.to_string())),
        }
        let mut w = [0u8; 4];
        s.read(&mut w, "key length")?;
        let n = u32::from_be_bytes(w) as usize;
        if n > MAX_SPOOL_KEY {
            return Err(s.fail(&format!("malformed frame (a key of {n} bytes; at most {MAX_SPOOL_KEY})")));
        }
        key.resize(n, 0);
        s.read(key, "key")?;
        s.read(&mut w, "value")?;
        s.at += 8 + n as u64;
        Ok(Some(u32::from_be_bytes(w)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("inswitch-spool-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn write(path: &PathBuf, pairs: &[(Vec<u8>, u32)]) {
        let mut w = std::io::BufWriter::new(File::create(path).unwrap());
        for (k, v) in pairs {
            write_frame(&mut w, k, *v).unwrap();
        }
    }

    fn read_all(src: &mut SpoolSource, tree: usize) -> Result<Vec<(Vec<u8>, u32)>, Error> {
        let mut key = Vec::new();
        let mut out = Vec::new();
        while let Some(v) = src.next_pair(tree, &mut key)? {
            out.push((key.clone(), v));
        }
        Ok(out)
    }

    #[test]
    fn spool_round_trip_and_rewind() {
        let d = tmp("rt");
        let a: Vec<(Vec<u8>, u32)> = (0..100_000u32).map(|i| (format!("w{}", i % 977).into_bytes(), i)).collect();
        let b = vec![(Vec::new(), 7), (vec![0u8, 1, 2], u32::MAX), (vec![b'x'; 3000], 1)];
        let paths = [d.join("a.bin"), d.join("b.bin"), d.join("empty.bin")];
        write(&paths[0], &a);
        write(&paths[1], &b);
        write(&paths[2], &[]);
        let mut src = SpoolSource::open(&paths).unwrap();
        assert_eq!(src.trees(), 3);
        assert_eq!(read_all(&mut src, 0).unwrap(), a);
        assert_eq!(read_all(&mut src, 1).unwrap(), b);
        assert_eq!(read_all(&mut src, 2).unwrap(), vec![]);
        src.rewind(1).unwrap();
        assert_eq!(read_all(&mut src, 1).unwrap(), b);
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn truncated_or_malformed_spool_is_an_error() {
        let d = tmp("bad");
        let p = d.join("t.bin");
        write(&p, &[(b"hello".to_vec(), 1), (b"world".to_vec(), 2)]);
        let full = std::fs::read(&p).unwrap();
        // Cut anywhere inside the second frame: the first frame reads, then a clear error.
        for cut in 14..full.len() {
            std::fs::write(&p, &full[..cut]).unwrap();
            let mut src = SpoolSource::open(std::slice::from_ref(&p)).unwrap();
            let mut key = Vec::new();
            assert_eq!(src.next_pair(0, &mut key).unwrap(), Some(1));
            let err = src.next_pair(0, &mut key).unwrap_err().to_string();
            assert!(err.contains("truncated frame") && err.contains("at byte 13"), "{err}");
        }
        // A length no frame can have.
        std::fs::write(&p, [0xff, 0xff, 0xff, 0xff, 1, 2, 3]).unwrap();
        let err = read_all(&mut SpoolSource::open(std::slice::from_ref(&p)).unwrap(), 0).unwrap_err().to_string();
        assert!(err.contains("malformed frame"), "{err}");
        let err = SpoolSource::open(&[d.join("missing.bin")]).err().unwrap();
        assert!(err.contains("missing.bin"), "{err}");
        std::fs::remove_dir_all(d).unwrap();
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]
        /// Any bytes as a spool: never a panic; the frames read before the end (or before
        /// the error) are exactly a prefix of the file, and an error names the file.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600), small in 0u8..4) {
            let d = tmp("fuzz");
            let p = d.join(format!("f{small}.bin"));
            // Half the cases with short announced lengths, so whole frames parse too.
            let mut bytes = bytes;
            if small > 0 && bytes.len() >= 4 {
                bytes[0..3].fill(0);
                bytes[3] %= 40;
            }
            std::fs::write(&p, &bytes).unwrap();
            let mut src = SpoolSource::open(std::slice::from_ref(&p)).unwrap();
            let (mut key, mut again) = (Vec::new(), Vec::new());
            let end = loop {
                match src.next_pair(0, &mut key) {
                    Ok(Some(v)) => write_frame(&mut again, &key, v).unwrap(),
                    Ok(None) => break None,
                    Err(e) => break Some(e.to_string()),
                }
            };
            proptest::prop_assert!(bytes.starts_with(&again));
            match end {
                None => proptest::prop_assert_eq!(again.len(), bytes.len()),
                Some(e) => proptest::prop_assert!(e.contains("f") && e.contains(".bin") && again.len() < bytes.len(), "{}", e),
            }
            std::fs::remove_dir_all(&d).unwrap();
        }
    }
}
