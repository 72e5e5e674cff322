//! `pmwire-model`: a model of the hardware pmwire cannot measure on this
//! machine — Optane DIMMs, the LLC with DDIO and DCA, the memory
//! controller's write-pending queue, PCIe, the RDMA NIC and the DMA engine —
//! good enough to reproduce the seeds' published numbers and to replay
//! pmwire's own pmem traces on a modelled Optane platform.
//!
//! Structure (one module per component, lower ones know nothing of higher):
//! - [`params`]: the one parameter set, every default cited;
//! - [`dimm`]: an Optane DIMM (XBuffer, XPLine media, ipmctl-like counters);
//! - [`memory`]: the memory controller (per-channel WPQ, 4 KB interleaving);
//! - [`llc`]: the LLC's I/O ways (DDIO/DCA, near-LRU);
//! - [`cpu`]: a core replaying a pmem trace (clwb invalidation, fences);
//! - [`bulk`]: I/O streams (bulk RDMA, DMA copies, small writes);
//! - [`mirror`]: synchronous mirroring of transactions (seed 002);
//! - [`workload`]: synthetic programs and recorded pmwire-log traces;
//! - [`experiments`]: `pmwire model <experiment>`.
//!
//! `docs/MODEL.md` lists every parameter with its source (and which
//! published number calibrates it) and the fidelity table.
//!
//! ```
//! use pmwire_model::{cpu::{Cpu, Domain}, workload::{self, Counter}, Params};
//!
//! let p = Params::published();
//! let run = |c| Cpu::new(&p, &p.kalia.cpu, 6, Domain::Adr)
//!     .replay(workload::counter_updates(c, 10_000)).unwrap().marks_per_s();
//! // Seed 000 §6: the rotating counter beats one 8 B location several times over.
//! assert!(run(Counter::PAPER) > 5.0 * run(Counter::Naive));
//! ```
#![deny(missing_docs)]

pub mod bulk;
pub mod cpu;
pub mod dimm;
pub mod error;
pub mod experiments;
pub mod llc;
pub mod memory;
pub mod mirror;
pub mod params;
pub mod rng;
pub mod workload;

pub use error::ModelError;
pub use experiments::Finding;
pub use params::Params;
