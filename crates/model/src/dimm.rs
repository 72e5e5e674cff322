//! One Optane DIMM: 64 B requests in, 256 B XPLine media accesses out,
//! through a small write-combining buffer (XBuffer) (seed 000 §2.1.1;
//! seed 004 §2.1).
//!
//! - A write that finds its XPLine in the XBuffer merges into it; otherwise
//!   it takes an entry, evicting the least recently used one when full.
//! - Evicting an entry writes its XPLine to the media: 256 B written, and
//!   first 256 B read when the entry is partial and was not filled by a
//!   read (the read-modify-write of seed 000 §5.2).
//! - A read that misses takes an entry too, filled from the media: reads
//!   compete with writes for the XBuffer (seed 004 §2.1).
//! - The media is one server: each access occupies it for bytes / bandwidth.
//!   A request needing an eviction is accepted only when the media starts
//!   that eviction, which is how the DIMM pushes back on the memory controller.
//!
//! Counters follow ipmctl's (seed 004 §2.1): requests received, media bytes
//! read and written. Invariants: at most `xbuffer_entries` entries; each
//! entry's line mask is non-empty unless it was filled by a read; the media
//! clock never runs backwards.

use serde::Serialize;

use crate::params::OptaneParams;

/// ipmctl-like counters of one DIMM (or a sum of DIMMs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct DimmCounters {
    /// 64 B write requests received (NWriteReq).
    pub write_requests: u64,
    /// 64 B read requests received (NReadReq).
    pub read_requests: u64,
    /// Bytes written to the media (NMediaWrite).
    pub media_bytes_written: u64,
    /// Bytes read from the media (NMediaRead), read-modify-writes included.
    pub media_bytes_read: u64,
}

impl DimmCounters {
    /// Media bytes written per byte received for writing (seed 000 §2.1.1's
    /// "in-DIMM write amplification"); 0 when nothing was received.
    pub fn write_amplification(&self, line_bytes: u64) -> f64 {
        if self.write_requests == 0 {
            return 0.0;
        }
        self.media_bytes_written as f64 / (self.write_requests * line_bytes) as f64
    }

    /// The sum of two sets of counters.
    pub fn plus(self, other: DimmCounters) -> DimmCounters {
        DimmCounters {
            write_requests: self.write_requests + other.write_requests,
            read_requests: self.read_requests + other.read_requests,
            media_bytes_written: self.media_bytes_written + other.media_bytes_written,
            media_bytes_read: self.media_bytes_read + other.media_bytes_read,
        }
    }

    /// These counters minus an earlier snapshot.
    pub fn since(self, earlier: DimmCounters) -> DimmCounters {
        DimmCounters {
            write_requests: self.write_requests - earlier.write_requests,
            read_requests: self.read_requests - earlier.read_requests,
            media_bytes_written: self.media_bytes_written - earlier.media_bytes_written,
            media_bytes_read: self.media_bytes_read - earlier.media_bytes_read,
        }
    }
}

/// One XBuffer entry.
#[derive(Clone, Copy, Debug)]
struct Entry {
    xpline: u64,
    /// Bit `i`: line `i` of the XPLine was written.
    mask: u8,
    /// The XPLine was read from the media, so a partial eviction needs no read.
    filled: bool,
    stamp: u64,
}

/// An Optane DIMM.
#[derive(Clone, Debug)]
pub struct Dimm {
    entries: Vec<Entry>,
    capacity: usize,
    lines_per_xpline: u64,
    full_mask: u8,
    xpline_bytes: u64,
    write_ns: f64,
    read_ns: f64,
    read_latency_ns: f64,
    tick: u64,
    media_free_ns: f64,
    counters: DimmCounters,
}

impl Dimm {
    /// An empty DIMM.
    pub fn new(p: &OptaneParams) -> Dimm {
        let lines = p.xpline_bytes / p.line_bytes;
        assert!((1..=8).contains(&lines), "an XPLine holds 1-8 lines");
        assert!(p.xbuffer_entries > 0, "an XBuffer has entries");
        Dimm {
            entries: Vec::with_capacity(p.xbuffer_entries),
            capacity: p.xbuffer_entries,
            lines_per_xpline: lines,
            full_mask: ((1u16 << lines) - 1) as u8,
            xpline_bytes: p.xpline_bytes,
            write_ns: p.xpline_bytes as f64 / p.media_write_gb_per_s,
            read_ns: p.xpline_bytes as f64 / p.media_read_gb_per_s,
            read_latency_ns: p.read_latency_ns,
            tick: 0,
            media_free_ns: 0.0,
            counters: DimmCounters::default(),
        }
    }

    /// The counters so far.
    pub fn counters(&self) -> DimmCounters {
        self.counters
    }

    /// When the media finishes the work queued so far.
    pub fn media_free_ns(&self) -> f64 {
        self.media_free_ns
    }

    /// Media time (ns) of one 256 B write and one 256 B read.
    pub fn media_costs_ns(&self) -> (f64, f64) {
        (self.write_ns, self.read_ns)
    }

    /// A 64 B write of DIMM-local line `line` arriving at `now`; returns when it is accepted.
    pub fn write(&mut self, now: f64, line: u64) -> f64 {
        self.counters.write_requests += 1;
        let (xpline, bit) = (line / self.lines_per_xpline, 1u8 << (line % self.lines_per_xpline));
        self.tick += 1;
        if let Some(e) = self.entries.iter_mut().find(|e| e.xpline == xpline) {
            e.mask |= bit;
            e.stamp = self.tick;
            return now;
        }
        let accepted = self.make_room(now);
        self.entries.push(Entry { xpline, mask: bit, filled: false, stamp: self.tick });
        accepted
    }

    /// A 64 B read of `line` arriving at `now`; returns when its data is back.
    pub fn read(&mut self, now: f64, line: u64) -> f64 {
        self.counters.read_requests += 1;
        let xpline = line / self.lines_per_xpline;
        self.tick += 1;
        if let Some(e) = self.entries.iter_mut().find(|e| e.xpline == xpline) {
            e.stamp = self.tick;
            return now;
        }
        let start = self.make_room(now).max(self.media_free_ns);
        self.media_free_ns = start + self.read_ns;
        self.counters.media_bytes_read += self.xpline_bytes;
        self.entries.push(Entry { xpline, mask: 0, filled: true, stamp: self.tick });
        start + self.read_latency_ns
    }

    /// Writes back every entry (end of a run).
    pub fn drain(&mut self) {
        while !self.entries.is_empty() {
            self.evict(0.0);
        }
    }

    /// Frees an entry if the buffer is full; returns when the request may proceed.
    fn make_room(&mut self, now: f64) -> f64 {
        if self.entries.len() < self.capacity {
            return now;
        }
        self.evict(now)
    }

    /// Evicts the least recently used entry; returns when the media starts on it.
    fn evict(&mut self, now: f64) -> f64 {
        let victim =
            (0..self.entries.len()).min_by_key(|&i| self.entries[i].stamp).expect("evict from an empty XBuffer");
        let e = self.entries.swap_remove(victim);
        let start = now.max(self.media_free_ns);
        let mut busy = 0.0;
        if e.mask != 0 {
            if e.mask != self.full_mask && !e.filled {
                busy += self.read_ns;
                self.counters.media_bytes_read += self.xpline_bytes;
            }
            busy += self.write_ns;
            self.counters.media_bytes_written += self.xpline_bytes;
        }
        self.media_free_ns = start + busy;
        assert!(self.media_free_ns >= start, "media clock ran backwards");
        start
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Params;

    fn dimm() -> Dimm {
        Dimm::new(&Params::published().optane)
    }

    #[test]
    fn sequential_lines_coalesce_without_amplification() {
        let mut d = dimm();
        for line in 0..4096 {
            d.write(0.0, line);
        }
        d.drain();
        let c = d.counters();
        assert_eq!(c.media_bytes_written, 4096 * 64);
        assert_eq!(c.media_bytes_read, 0);
        assert!((c.write_amplification(64) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn scattered_lines_cost_a_read_modify_write_each() {
        let mut d = dimm();
        for i in 0..1000u64 {
            d.write(0.0, i * 4 * 97);
        }
        d.drain();
        let c = d.counters();
        assert_eq!(c.media_bytes_written, 1000 * 256);
        assert_eq!(c.media_bytes_read, 1000 * 256);
        assert!((c.write_amplification(64) - 4.0).abs() < 1e-12);
    }

    #[test]
    fn a_hot_line_is_absorbed_by_the_xbuffer() {
        let mut d = dimm();
        for i in 0..10_000u64 {
            d.write(0.0, 7);
            d.write(0.0, 1000 + i);
        }
        let c = d.counters();
        assert_eq!(c.media_bytes_written, (10_000 / 4 - 63) * 256, "only the stream reaches the media");
    }

    #[test]
    fn a_read_fill_spares_the_later_write_its_read() {
        let mut d = dimm();
        for i in 0..500u64 {
            d.read(0.0, i * 40);
            d.write(0.0, i * 40);
        }
        d.drain();
        let c = d.counters();
        assert_eq!(c.media_bytes_read, 500 * 256);
        assert_eq!(c.media_bytes_written, 500 * 256);
    }
}
