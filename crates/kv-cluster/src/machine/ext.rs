//! Applying an extent-form entry ([`crate::extent`]): the command is parsed
//! over segments that are partly the entry's own framing and inline
//! arguments, partly the pool bytes its values name, so an argument whose
//! pieces all lie in the pool is stored by its extents (no value byte
//! moves). Each pool value's crc32c is checked first: a mismatch means this
//! member's pool no longer holds what its log says (a buffer freed while a
//! log entry named it), a local fault that halts the member rather than
//! applying other bytes.

use pmwire_resp::request::{Limits, Parsed};

use super::{refusal, Kind, MachineKeyspace, Ran, RedisMachine};
use crate::commands::{class, Class};
use crate::entry::EntryError;
use crate::extent::{Arg, ExtEntry};
use crate::machine::ExtentBytes;

/// A segment of the command: a range of the framing buffer, or pool bytes.
enum Piece {
    Framing(usize, usize),
    Pool(ExtentBytes, (u32, u32)),
}

/// The command's RESP bytes as pieces: framing and inline arguments in
/// `framing`, pool values as their extents' bytes (checked against their
/// crc32c). `Err(None)`: the entry is refused; `Err(Some(why))`: a local fault.
fn pieces<K: MachineKeyspace>(ks: &K, e: &ExtEntry<'_>, framing: &mut Vec<u8>) -> Result<Vec<Piece>, String> {
    let mut out = Vec::with_capacity(e.args.len() + 2);
    let mut start = 0;
    framing.extend_from_slice(format!("*{}\r\n", e.args.len()).as_bytes());
    for (i, a) in e.args.iter().enumerate() {
        framing.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        match a {
            Arg::Inline(b) => framing.extend_from_slice(b),
            Arg::Pool { crc, extents, .. } => {
                out.push(Piece::Framing(start, framing.len()));
                let mut sum = 0u32;
                for &x in extents {
                    let bytes = ks.extent_bytes(x).ok_or_else(|| format!("argument {i} names extent {x:?} outside this member's pool"))?;
                    sum = crc32c::crc32c_append(sum, bytes.bytes());
                    out.push(Piece::Pool(bytes, (x.buf_idx, u32::from(x.offset))));
                }
                if sum != *crc {
                    return Err(format!("argument {i}: the pool bytes its extents name fail their checksum (a buffer reused while the log named it)"));
                }
                start = framing.len();
            }
        }
        framing.extend_from_slice(b"\r\n");
    }
    out.push(Piece::Framing(start, framing.len()));
    Ok(out)
}

impl<K: MachineKeyspace> RedisMachine<K> {
    /// Runs an extent-form entry (module docs).
    pub(super) fn run_ext(&mut self, index: u64, e: &ExtEntry<'_>, time_ms: u64) -> Result<Ran, EntryError> {
        let mut framing = Vec::new();
        let pieces = match pieces(self.ks.get_mut(), e, &mut framing) {
            Ok(p) => p,
            Err(why) => {
                self.fault.get_or_insert(format!("entry {index}: {why}"));
                return Ok(Ran { applied: refusal(EntryError::Field("pool extent")), touched: Vec::new(), cleared: false });
            }
        };
        let segments: Vec<&[u8]> = pieces
            .iter()
            .map(|p| match p {
                Piece::Framing(a, b) => &framing[*a..*b],
                Piece::Pool(bytes, _) => bytes.bytes(),
            })
            .collect();
        let locs: Vec<Option<(u32, u32)>> = pieces.iter().map(|p| if let Piece::Pool(_, at) = p { Some(*at) } else { None }).collect();
        let mut parsed = Parsed::new(Limits { max_commands: 1, ..Limits::default() }).gather_lazily();
        let summary = parsed.parse(&segments);
        let total: usize = segments.iter().map(|s| s.len()).sum();
        if summary.error.is_some() || summary.consumed != total || summary.commands != 1 {
            return Err(EntryError::Commands);
        }
        if class(parsed.request(&segments, 0).arg(0)) == Class::Session {
            return Err(EntryError::NotReplicated);
        }
        self.ks.get_mut().set_segment_locs(&locs);
        let ran = self.run_parsed(index, (Kind::Command, e.seed, e.protocol), false, time_ms, &parsed, &segments);
        self.ks.get_mut().set_segment_locs(&[]);
        Ok(ran)
    }
}
