//! Hash units: the CRC engines a stage's hash distribution units compute, and identity.
//!
//! Tofino computes hashes over PHV fields with configurable CRC polynomials; programs here
//! pass the bytes of the fields they hash. The presets are the standard algorithms P4
//! programs name (`crc16`, `crc32`, `crc32c`, ...), each verified against its catalogue
//! check value for the ASCII string "123456789".

use serde::{Deserialize, Serialize};

/// A hash algorithm a hash unit can be configured with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HashAlgo {
    /// CRC-16/ARC (poly 0x8005, reflected): P4's `crc16`.
    Crc16,
    /// CRC-16/XMODEM (poly 0x1021, not reflected).
    Crc16Xmodem,
    /// CRC-16/KERMIT (CCITT poly 0x1021, reflected).
    Crc16Kermit,
    /// CRC-32/ISO-HDLC (Ethernet): P4's `crc32`.
    Crc32,
    /// CRC-32C (Castagnoli).
    Crc32c,
    /// CRC-32/MPEG-2 (poly 0x04C11DB7, not reflected, no final xor).
    Crc32Mpeg2,
    /// CRC-32/BZIP2.
    Crc32Bzip2,
    /// The low bits of the input taken as a big-endian number: P4's `identity`.
    Identity,
}

impl HashAlgo {
    pub const ALL: [HashAlgo; 8] = [
        HashAlgo::Crc16,
        HashAlgo::Crc16Xmodem,
        HashAlgo::Crc16Kermit,
        HashAlgo::Crc32,
        HashAlgo::Crc32c,
        HashAlgo::Crc32Mpeg2,
        HashAlgo::Crc32Bzip2,
        HashAlgo::Identity,
    ];

    /// Natural output width in bits.
    pub fn width(self) -> u32 {
        match self {
            HashAlgo::Crc16 | HashAlgo::Crc16Xmodem | HashAlgo::Crc16Kermit => 16,
            _ => 32,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            HashAlgo::Crc16 => "crc16",
            HashAlgo::Crc16Xmodem => "crc16_xmodem",
            HashAlgo::Crc16Kermit => "crc16_kermit",
            HashAlgo::Crc32 => "crc32",
            HashAlgo::Crc32c => "crc32c",
            HashAlgo::Crc32Mpeg2 => "crc32_mpeg2",
            HashAlgo::Crc32Bzip2 => "crc32_bzip2",
            HashAlgo::Identity => "identity",
        }
    }

    fn params(self) -> Option<&'static CrcParams> {
        Some(match self {
            HashAlgo::Crc16 => &CRC16_ARC,
            HashAlgo::Crc16Xmodem => &CRC16_XMODEM,
            HashAlgo::Crc16Kermit => &CRC16_KERMIT,
            HashAlgo::Crc32 => &CRC32_ISO_HDLC,
            HashAlgo::Crc32c => &CRC32C,
            HashAlgo::Crc32Mpeg2 => &CRC32_MPEG2,
            HashAlgo::Crc32Bzip2 => &CRC32_BZIP2,
            HashAlgo::Identity => return None,
        })
    }

    /// Hash `data` with this algorithm (full natural width).
    #[inline]
    pub fn compute(self, data: &[u8]) -> u32 {
        match self.params() {
            Some(p) => p.table().compute(data),
            None => identity(data),
        }
    }
}

#[inline]
fn identity(data: &[u8]) -> u32 {
    // The low 32 bits of the big-endian number the bytes spell.
    let tail = &data[data.len().saturating_sub(4)..];
    tail.iter().fold(0u32, |acc, &b| (acc << 8) | b as u32)
}

/// Rocksoft-model CRC parameters.
struct CrcParams {
    width: u32,
    poly: u32,
    init: u32,
    refin: bool,
    refout: bool,
    xorout: u32,
    table: std::sync::OnceLock<CrcTable>,
}

const fn crc(width: u32, poly: u32, init: u32, refin: bool, refout: bool, xorout: u32) -> CrcParams {
    CrcParams { width, poly, init, refin, refout, xorout, table: std::sync::OnceLock::new() }
}

static CRC16_ARC: CrcParams = crc(16, 0x8005, 0, true, true, 0);
static CRC16_XMODEM: CrcParams = crc(16, 0x1021, 0, false, false, 0);
static CRC16_KERMIT: CrcParams = crc(16, 0x1021, 0, true, true, 0);
static CRC32_ISO_HDLC: CrcParams = crc(32, 0x04C1_1DB7, 0xFFFF_FFFF, true, true, 0xFFFF_FFFF);
static CRC32C: CrcParams = crc(32, 0x1EDC_6F41, 0xFFFF_FFFF, true, true, 0xFFFF_FFFF);
static CRC32_MPEG2: CrcParams = crc(32, 0x04C1_1DB7, 0xFFFF_FFFF, false, false, 0);
static CRC32_BZIP2: CrcParams = crc(32, 0x04C1_1DB7, 0xFFFF_FFFF, false, false, 0xFFFF_FFFF);

/// A byte-at-a-time lookup table. Reflected algorithms run LSB-first on a reflected table;
/// the others run MSB-first with the register left-aligned in 32 bits.
struct CrcTable {
    t: [u32; 256],
    reflected: bool,
    width: u32,
    init: u32,
    refout_differs: bool,
    xorout: u32,
}

impl CrcParams {
    fn table(&'static self) -> &'static CrcTable {
        self.table.get_or_init(|| {
            let mut t = [0u32; 256];
            if self.refin {
                let rpoly = reflect(self.poly, self.width);
                for (i, e) in t.iter_mut().enumerate() {
                    let mut c = i as u32;
                    for _ in 0..8 {
                        c = if c & 1 != 0 { (c >> 1) ^ rpoly } else { c >> 1 };
                    }
                    *e = c;
                }
            } else {
                let poly = self.poly << (32 - self.width);
                for (i, e) in t.iter_mut().enumerate() {
                    let mut c = (i as u32) << 24;
                    for _ in 0..8 {
                        c = if c & 0x8000_0000 != 0 { (c << 1) ^ poly } else { c << 1 };
                    }
                    *e = c;
                }
            }
            CrcTable {
                t,
                reflected: self.refin,
                width: self.width,
                init: if self.refin { reflect(self.init, self.width) } else { self.init << (32 - self.width) },
                refout_differs: self.refin != self.refout,
                xorout: self.xorout,
            }
        })
    }
}

impl CrcTable {
    #[inline]
    fn compute(&self, data: &[u8]) -> u32 {
        let mut c = self.init;
        let v = if self.reflected {
            for &b in data {
                c = (c >> 8) ^ self.t[((c ^ b as u32) & 0xFF) as usize];
            }
            c
        } else {
            for &b in data {
                c = (c << 8) ^ self.t[(((c >> 24) ^ b as u32) & 0xFF) as usize];
            }
            c >> (32 - self.width)
        };
        let v = if self.refout_differs { reflect(v, self.width) } else { v };
        let mask = if self.width == 32 { u32::MAX } else { (1u32 << self.width) - 1 };
        (v ^ self.xorout) & mask
    }
}

fn reflect(v: u32, width: u32) -> u32 {
    v.reverse_bits() >> (32 - width)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalogue_check_values() {
        let s = b"123456789";
        assert_eq!(HashAlgo::Crc16.compute(s), 0xBB3D);
        assert_eq!(HashAlgo::Crc16Xmodem.compute(s), 0x31C3);
        assert_eq!(HashAlgo::Crc16Kermit.compute(s), 0x2189);
        assert_eq!(HashAlgo::Crc32.compute(s), 0xCBF4_3926);
        assert_eq!(HashAlgo::Crc32c.compute(s), 0xE306_9283);
        assert_eq!(HashAlgo::Crc32Mpeg2.compute(s), 0x0376_E6E7);
        assert_eq!(HashAlgo::Crc32Bzip2.compute(s), 0xFC89_1918);
    }

    #[test]
    fn identity_takes_low_bytes() {
        assert_eq!(HashAlgo::Identity.compute(&[1, 2, 3, 4, 5]), 0x0203_0405);
        assert_eq!(HashAlgo::Identity.compute(&[7]), 7);
        assert_eq!(HashAlgo::Identity.compute(&[]), 0);
    }
}
