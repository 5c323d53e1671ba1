//! The one error type every parser in this crate returns.

use core::fmt;

/// Why a packet could not be viewed, parsed or emitted.
///
/// The variants are deliberately coarse: on the switch hot path a malformed packet is
/// dropped or forwarded untouched, and the only thing a caller needs is the category
/// (counted per category in the switch's drop statistics).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Error {
    /// The buffer is shorter than the header or a length field says it must be.
    Truncated,
    /// A field holds a value the format forbids (bad version, length field smaller than
    /// the header it describes, non-zero code in an echo message, ...).
    Malformed,
    /// The checksum does not verify.
    Checksum,
    /// Well-formed, but a variant this crate does not model (ARP for another link or
    /// network layer, an ICMP message other than echo, an IPv4 fragment, ...).
    Unsupported,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            Error::Truncated => "truncated packet",
            Error::Malformed => "malformed packet",
            Error::Checksum => "checksum mismatch",
            Error::Unsupported => "unsupported packet variant",
        };
        f.write_str(text)
    }
}

impl std::error::Error for Error {}

/// Result of every fallible operation in this crate.
pub type Result<T> = core::result::Result<T, Error>;
