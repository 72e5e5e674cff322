//! A mapped region of persistent memory that says honestly what it is.
//!
//! | kind       | how it is mapped                          | persist               | survives          |
//! |------------|-------------------------------------------|-----------------------|-------------------|
//! | `FsDax`    | `MAP_SHARED_VALIDATE \| MAP_SYNC` on DAX  | flush + `sfence`      | power loss        |
//! | `DevDax`   | `MAP_SHARED` on `/dev/daxX.Y`             | flush + `sfence`      | power loss        |
//! | `File`     | `MAP_SHARED` on an ordinary file          | `msync(MS_SYNC)`      | power loss        |
//! | `Emulated` | `MAP_SHARED` on a tmpfs file              | flush + `sfence`      | process crash only|
//!
//! The persistence domain of DAX media is read from sysfs
//! (`/sys/bus/nd/devices/region*/persistence_domain`): `cpu_cache` is eADR,
//! where flushing is unnecessary and only the fence remains;
//! `memory_controller` is ADR. The user may override kind and domain; a
//! region then reports that it was overridden. The persist strategy is
//! chosen once, here, at map time.

use crate::copy::{CopyIsa, NtCopier};
use crate::flush::{drain_none, FlushInstruction, Persister};
use crate::layout::LINE;
use crate::media::{check_range, check_word, Media, NT_THRESHOLD};
use std::fmt;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// What backs a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RegionKind {
    /// A file on a DAX file system, mapped with `MAP_SYNC`.
    FsDax,
    /// A device-DAX character device.
    DevDax,
    /// An ordinary file; persisted with `msync`.
    File,
    /// A file on tmpfs: DRAM standing in for persistent memory.
    Emulated,
}

impl RegionKind {
    /// Parses `fsdax`, `devdax`, `file` or `emulated`.
    pub fn parse(name: &str) -> Option<RegionKind> {
        match name {
            "fsdax" => Some(RegionKind::FsDax),
            "devdax" => Some(RegionKind::DevDax),
            "file" => Some(RegionKind::File),
            "emulated" => Some(RegionKind::Emulated),
            _ => None,
        }
    }
}

impl fmt::Display for RegionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RegionKind::FsDax => "fsdax",
            RegionKind::DevDax => "devdax",
            RegionKind::File => "file",
            RegionKind::Emulated => "emulated",
        })
    }
}

/// Where a store must reach to survive power loss, and what the region
/// can promise.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PersistenceDomain {
    /// eADR: the CPU caches are flushed on power loss. Stores are durable
    /// once globally visible; a fence orders them.
    CpuCache,
    /// ADR: the memory controller's queues are flushed on power loss.
    /// Stores are durable once flushed from the caches and fenced.
    MemoryController,
    /// An ordinary file: durable once `msync` returns.
    PageCache,
    /// Emulated: survives a process crash, not a power loss or reboot.
    ProcessOnly,
}

impl PersistenceDomain {
    /// Parses `cpu_cache`, `memory_controller`, `page_cache` or `process_only`.
    pub fn parse(name: &str) -> Option<PersistenceDomain> {
        match name {
            "cpu_cache" | "eadr" => Some(PersistenceDomain::CpuCache),
            "memory_controller" | "adr" => Some(PersistenceDomain::MemoryController),
            "page_cache" => Some(PersistenceDomain::PageCache),
            "process_only" | "none" => Some(PersistenceDomain::ProcessOnly),
            _ => None,
        }
    }

    /// Whether data persisted here survives a power loss.
    pub fn survives_power_loss(self) -> bool {
        !matches!(self, PersistenceDomain::ProcessOnly)
    }
}

impl fmt::Display for PersistenceDomain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PersistenceDomain::CpuCache => "cpu_cache",
            PersistenceDomain::MemoryController => "memory_controller",
            PersistenceDomain::PageCache => "page_cache",
            PersistenceDomain::ProcessOnly => "process_only",
        })
    }
}

/// Errors from opening or mapping a region.
#[derive(Debug, thiserror::Error)]
pub enum RegionError {
    /// The path could not be opened or created.
    #[error("cannot open {path}: {source}")]
    Open {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The file could not be sized.
    #[error("cannot size {path} to {size} bytes: {source}")]
    Size {
        /// The path.
        path: PathBuf,
        /// The requested size.
        size: u64,
        /// The cause.
        source: std::io::Error,
    },
    /// `mmap` failed.
    #[error("cannot map {path} ({size} bytes): {source}")]
    Map {
        /// The path.
        path: PathBuf,
        /// The size.
        size: u64,
        /// The cause.
        source: std::io::Error,
    },
    /// The region would be empty, or its size is not a multiple of 64 B.
    #[error("region size {0} must be a non-zero multiple of 64 bytes")]
    BadSize(u64),
    /// An existing file is smaller than asked for and `create` was not set.
    #[error("{path} holds {actual} bytes, {wanted} were asked for")]
    TooSmall {
        /// The path.
        path: PathBuf,
        /// Its size.
        actual: u64,
        /// The size asked for.
        wanted: u64,
    },
    /// A requested instruction is not available on this CPU.
    #[error("{0} is not supported by this CPU")]
    Unsupported(String),
}

/// How to open a region. `None` fields are detected.
#[derive(Clone, Debug, Default)]
pub struct RegionOptions {
    /// Size in bytes; `None` uses the file's size.
    pub size: Option<u64>,
    /// Create the file (and grow it to `size`) if needed.
    pub create: bool,
    /// Override the detected kind.
    pub kind: Option<RegionKind>,
    /// Override the detected persistence domain.
    pub domain: Option<PersistenceDomain>,
    /// Override the detected flush instruction.
    pub flush: Option<FlushInstruction>,
    /// Override the detected copy instruction set.
    pub isa: Option<CopyIsa>,
    /// Copies at or above this size use non-temporal stores (default
    /// [`NT_THRESHOLD`], PMDK's 256 B).
    pub nt_threshold: Option<usize>,
}

/// A mapped region of (possibly emulated) persistent memory.
pub struct Region {
    base: *mut u8,
    size: u64,
    path: PathBuf,
    kind: RegionKind,
    domain: PersistenceDomain,
    overridden: bool,
    persister: Persister,
    copier: NtCopier,
    nt_threshold: usize,
    /// Set when persisting is `msync`: non-temporal stores do not bypass the
    /// page cache's need for writeback, so they are flushed like any store.
    nt_needs_flush: bool,
    _file: File,
}

// SAFETY: the mapping is owned by the Region and freed only on drop; it is
// not tied to the thread that made it.
unsafe impl Send for Region {}

const TMPFS_MAGIC: i64 = 0x0102_1994;
const RAMFS_MAGIC: i64 = 0x8584_58f6;

impl Region {
    /// Creates (or reuses) a file of `size` bytes at `path` and maps it.
    pub fn create(path: impl AsRef<Path>, size: u64) -> Result<Region, RegionError> {
        Region::open(path, RegionOptions { size: Some(size), create: true, ..Default::default() })
    }

    /// Opens and maps `path` as `options` say.
    pub fn open(path: impl AsRef<Path>, options: RegionOptions) -> Result<Region, RegionError> {
        let path = path.as_ref().to_path_buf();
        let file = open_file(&path, options.create)?;
        let meta = file.metadata().map_err(|source| RegionError::Open { path: path.clone(), source })?;
        let is_devdax = meta.file_type().is_char_device();
        let size = resolve_size(&path, &file, &meta, is_devdax, &options)?;
        let detected_kind = if is_devdax { RegionKind::DevDax } else { detect_file_kind(&file) };
        let (base, kind) = map(&path, &file, size, detected_kind)?;
        let domain = match kind {
            RegionKind::FsDax | RegionKind::DevDax => sysfs_domain(),
            RegionKind::File => PersistenceDomain::PageCache,
            RegionKind::Emulated => PersistenceDomain::ProcessOnly,
        };
        let overridden = options.kind.is_some_and(|k| k != kind) || options.domain.is_some_and(|d| d != domain);
        let kind = options.kind.unwrap_or(kind);
        let domain = options.domain.unwrap_or(domain);
        let persister = choose_persister(kind, domain, options.flush)?;
        let isa = options.isa.unwrap_or_else(CopyIsa::detect);
        if !isa.supported() {
            // SAFETY: base/size came from a successful mmap.
            unsafe { libc::munmap(base as *mut libc::c_void, size as usize) };
            return Err(RegionError::Unsupported(isa.to_string()));
        }
        let copier = isa.copier();
        let nt_threshold = options.nt_threshold.unwrap_or(NT_THRESHOLD);
        let nt_needs_flush = persists_with_msync(kind, domain);
        Ok(Region {
            base,
            size,
            path,
            kind,
            domain,
            overridden,
            persister,
            copier,
            nt_threshold,
            nt_needs_flush,
            _file: file,
        })
    }

    /// The file or device mapped.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What backs the region.
    pub fn kind(&self) -> RegionKind {
        self.kind
    }

    /// What a persisted store survives.
    pub fn domain(&self) -> PersistenceDomain {
        self.domain
    }

    /// Whether the user overrode the detected kind or domain.
    pub fn overridden(&self) -> bool {
        self.overridden
    }

    /// The flush and drain chosen at map time.
    pub fn persister(&self) -> Persister {
        self.persister
    }

    /// The non-temporal copy routines chosen at map time.
    pub fn copier(&self) -> NtCopier {
        self.copier
    }

    /// The start of the mapping.
    pub fn as_ptr(&self) -> *mut u8 {
        self.base
    }

    /// Maps every page of the region writable now (`MADV_POPULATE_WRITE`,
    /// Linux 5.14), without changing a byte, so that a server does not take
    /// a page fault the first time the kernel or a store touches each page
    /// (on tmpfs: allocating and zeroing it). Returns whether the kernel did it.
    pub fn populate(&mut self) -> bool {
        const MADV_POPULATE_WRITE: libc::c_int = 23;
        // SAFETY: `base .. base + size` is this region's live mapping; the advice
        // only faults pages in, it never changes their contents.
        unsafe { libc::madvise(self.base.cast(), self.size as usize, MADV_POPULATE_WRITE) == 0 }
    }

    /// One line describing the region, for reports.
    pub fn describe(&self) -> String {
        let note = if self.overridden { " (overridden by user)" } else { "" };
        let survives = if self.domain.survives_power_loss() { "power loss" } else { "process crash only" };
        format!(
            "{}: {} bytes, kind {}, persistence domain {}{}, flush {}, copy {} (non-temporal from {} B), survives {}",
            self.path.display(),
            self.size,
            self.kind,
            self.domain,
            note,
            self.persister.instruction,
            self.copier.isa,
            self.nt_threshold,
            survives
        )
    }

    #[inline]
    fn at(&self, offset: u64) -> *mut u8 {
        // SAFETY: callers have checked offset against size.
        unsafe { self.base.add(offset as usize) }
    }
}

impl fmt::Debug for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: base/size came from a successful mmap and are unmapped once.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.size as usize) };
    }
}

impl Media for Region {
    #[inline]
    fn len(&self) -> u64 {
        self.size
    }

    #[inline]
    fn nt_threshold(&self) -> usize {
        self.nt_threshold
    }

    #[inline]
    fn read(&self, offset: u64, dst: &mut [u8]) {
        check_range(self.size, offset, dst.len() as u64);
        // SAFETY: the range is inside the mapping (checked above).
        unsafe { std::ptr::copy_nonoverlapping(self.at(offset), dst.as_mut_ptr(), dst.len()) };
    }

    fn bytes_at(&self, offset: u64, len: u64) -> Option<&[u8]> {
        check_range(self.size, offset, len);
        // SAFETY: the range is inside the mapping (checked above), which
        // lives as long as `self`; this process writes it only through
        // `&mut self` (the pool file is locked by its owner), so nothing
        // changes the bytes while the borrow lasts.
        Some(unsafe { std::slice::from_raw_parts(self.at(offset), len as usize) })
    }

    #[inline]
    fn read_u64(&self, offset: u64) -> u64 {
        check_word(self.size, offset);
        // SAFETY: aligned and inside the mapping.
        u64::from_le(unsafe { std::ptr::read_volatile(self.at(offset) as *const u64) })
    }

    #[inline]
    fn write(&mut self, offset: u64, src: &[u8]) {
        check_range(self.size, offset, src.len() as u64);
        // SAFETY: the range is inside the mapping.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.at(offset), src.len()) };
    }

    #[inline]
    fn write_u64(&mut self, offset: u64, value: u64) {
        check_word(self.size, offset);
        // SAFETY: aligned and inside the mapping; a single aligned 8 B store.
        unsafe { std::ptr::write_volatile(self.at(offset) as *mut u64, value.to_le()) };
    }

    #[inline]
    fn write_nt(&mut self, offset: u64, src: &[u8]) {
        check_range(self.size, offset, src.len() as u64);
        // SAFETY: the range is inside the mapping; src is a separate slice.
        unsafe { self.copier.copy_nodrain(self.at(offset), src.as_ptr(), src.len(), self.persister.flush) };
        if self.nt_needs_flush {
            self.flush(offset, src.len() as u64);
        }
    }

    #[inline]
    fn memset_nodrain(&mut self, offset: u64, byte: u8, len: u64) {
        check_range(self.size, offset, len);
        if (len as usize) < self.nt_threshold {
            // SAFETY: the range is inside the mapping.
            unsafe { std::ptr::write_bytes(self.at(offset), byte, len as usize) };
            self.flush(offset, len);
        } else {
            // SAFETY: the range is inside the mapping.
            unsafe { self.copier.fill_nodrain(self.at(offset), byte, len as usize, self.persister.flush) };
            if self.nt_needs_flush {
                self.flush(offset, len);
            }
        }
    }

    #[inline]
    fn prefetch_write(&self, offset: u64, len: u64) {
        let Some(end) = offset.checked_add(len).filter(|&end| end <= self.size) else { return };
        let mut line = offset & !(LINE as u64 - 1);
        while line < end {
            // SAFETY: `line` lies inside the mapping; a prefetch reads nothing
            // and writes nothing.
            unsafe { prefetch_line_for_write(self.at(line)) };
            line += LINE as u64;
        }
    }

    #[inline]
    fn flush(&mut self, offset: u64, len: u64) {
        check_range(self.size, offset, len);
        // SAFETY: the range is inside the mapping.
        unsafe { (self.persister.flush)(self.at(offset), len as usize) };
    }

    #[inline]
    fn drain(&mut self) {
        (self.persister.drain)();
    }
}

fn open_file(path: &Path, create: bool) -> Result<File, RegionError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .mode(0o600)
        .open(path)
        .map_err(|source| RegionError::Open { path: path.to_path_buf(), source })
}

fn resolve_size(
    path: &Path,
    file: &File,
    meta: &std::fs::Metadata,
    is_devdax: bool,
    options: &RegionOptions,
) -> Result<u64, RegionError> {
    let actual = if is_devdax { devdax_size(meta.rdev()).unwrap_or(0) } else { meta.len() };
    let size = options.size.unwrap_or(actual);
    if size == 0 || !size.is_multiple_of(LINE as u64) {
        return Err(RegionError::BadSize(size));
    }
    if actual < size {
        if is_devdax || !options.create {
            return Err(RegionError::TooSmall { path: path.to_path_buf(), actual, wanted: size });
        }
        file.set_len(size).map_err(|source| RegionError::Size { path: path.to_path_buf(), size, source })?;
    }
    Ok(size)
}

fn devdax_size(rdev: u64) -> Option<u64> {
    let (major, minor) = (libc::major(rdev), libc::minor(rdev));
    let text = std::fs::read_to_string(format!("/sys/dev/char/{major}:{minor}/size")).ok()?;
    text.trim().parse().ok()
}

fn detect_file_kind(file: &File) -> RegionKind {
    // SAFETY: statfs writes into a zeroed struct we own.
    let mut stat: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: the fd is open for the life of `file`.
    let rc = unsafe { libc::fstatfs(file.as_raw_fd(), &mut stat) };
    let fs_type = stat.f_type as i64;
    if rc == 0 && (fs_type == TMPFS_MAGIC || fs_type == RAMFS_MAGIC) {
        RegionKind::Emulated
    } else {
        // Refined to FsDax in `map` when MAP_SYNC succeeds.
        RegionKind::File
    }
}

fn map(path: &Path, file: &File, size: u64, kind: RegionKind) -> Result<(*mut u8, RegionKind), RegionError> {
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    let fd = file.as_raw_fd();
    if kind == RegionKind::File {
        // Try MAP_SYNC first: it succeeds only on a DAX file system.
        // SAFETY: fresh mapping of an open fd; the result is checked.
        let base = unsafe {
            libc::mmap(std::ptr::null_mut(), size as usize, prot, libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC, fd, 0)
        };
        if base != libc::MAP_FAILED {
            return Ok((base as *mut u8, RegionKind::FsDax));
        }
    }
    // SAFETY: as above.
    let base = unsafe { libc::mmap(std::ptr::null_mut(), size as usize, prot, libc::MAP_SHARED, fd, 0) };
    if base == libc::MAP_FAILED {
        let source = std::io::Error::last_os_error();
        return Err(RegionError::Map { path: path.to_path_buf(), size, source });
    }
    Ok((base as *mut u8, kind))
}

/// The persistence domain the nd regions in sysfs report: `cpu_cache` only
/// if every region says so; ADR otherwise (and when nothing is found).
pub fn sysfs_domain() -> PersistenceDomain {
    let Ok(entries) = std::fs::read_dir("/sys/bus/nd/devices") else {
        return PersistenceDomain::MemoryController;
    };
    let mut seen = Vec::new();
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with("region") {
            continue;
        }
        if let Ok(text) = std::fs::read_to_string(entry.path().join("persistence_domain")) {
            seen.push(text.trim().to_string());
        }
    }
    if !seen.is_empty() && seen.iter().all(|d| d == "cpu_cache") {
        PersistenceDomain::CpuCache
    } else {
        PersistenceDomain::MemoryController
    }
}

fn choose_persister(
    kind: RegionKind,
    domain: PersistenceDomain,
    flush: Option<FlushInstruction>,
) -> Result<Persister, RegionError> {
    if let Some(instruction) = flush {
        if !instruction.supported() {
            return Err(RegionError::Unsupported(instruction.to_string()));
        }
    }
    if persists_with_msync(kind, domain) {
        return Ok(Persister { instruction: FlushInstruction::None, flush: msync_range, drain: drain_none });
    }
    let instruction = match domain {
        PersistenceDomain::CpuCache => FlushInstruction::None,
        _ => flush.unwrap_or_else(FlushInstruction::detect),
    };
    Ok(Persister::with_instruction(instruction))
}

/// Whether a region of this kind and domain persists with `msync`.
fn persists_with_msync(kind: RegionKind, domain: PersistenceDomain) -> bool {
    kind == RegionKind::File && domain == PersistenceDomain::PageCache
}

/// Persists `[ptr, ptr + len)` of a file mapping with `msync(MS_SYNC)`.
///
/// # Safety
/// The range must be inside a shared file mapping.
unsafe fn msync_range(ptr: *const u8, len: usize) {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    let start = (ptr as usize) & !(page - 1);
    let end = ptr as usize + len;
    // SAFETY: the caller guarantees the pages are mapped.
    let rc = unsafe { libc::msync(start as *mut libc::c_void, end - start, libc::MS_SYNC) };
    // An unrecoverable persistence failure: crash loudly.
    assert!(rc == 0, "msync failed: {}", std::io::Error::last_os_error());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tmpfs_file_is_emulated_and_round_trips() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let path = dir.path().join("pool");
        let mut region = Region::create(&path, 1 << 20).unwrap();
        assert_eq!(region.kind(), RegionKind::Emulated);
        assert_eq!(region.domain(), PersistenceDomain::ProcessOnly);
        assert!(!region.domain().survives_power_loss());
        let data: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        region.memcpy_persist(17, &data);
        region.persist_u64(8, 42);
        region.memset_persist(20_000, 0x5A, 9_000);
        region.memset_persist(40_000, 0x6B, 100);
        drop(region);
        let region = Region::open(&path, RegionOptions::default()).unwrap();
        let mut back = vec![0u8; data.len()];
        region.read(17, &mut back);
        assert_eq!(back, data);
        assert_eq!(region.read_u64(8), 42);
        let mut filled = vec![0u8; 9_002];
        region.read(19_999, &mut filled);
        assert_eq!(filled[0], 0);
        assert!(filled[1..9_001].iter().all(|&b| b == 0x5A));
        assert_eq!(filled[9_001], 0);
        let mut small = [0u8; 100];
        region.read(40_000, &mut small);
        assert!(small.iter().all(|&b| b == 0x6B));
    }

    #[test]
    fn prefetch_changes_nothing_and_ignores_ranges_past_the_end() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let mut region = Region::create(dir.path().join("pool"), 64 << 10).unwrap();
        region.memset_persist(0, 0x3C, 64 << 10);
        region.prefetch_write(100, 1000);
        region.prefetch_write((64 << 10) - 8, 64);
        region.prefetch_write(u64::MAX - 4, 100);
        region.prefetch_write(0, 0);
        let mut back = vec![0u8; 64 << 10];
        region.read(0, &mut back);
        assert!(back.iter().all(|&b| b == 0x3C));
    }

    #[test]
    fn bytes_in_place_are_what_a_read_copies_and_stay_inside() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let mut region = Region::create(dir.path().join("pool"), 64 << 10).unwrap();
        let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
        region.memcpy_persist(1000, &pattern);
        assert_eq!(region.bytes_at(1000, 4096), Some(&pattern[..]));
        assert_eq!(region.bytes_at(64 << 10, 0), Some(&[][..]));
        let past = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| region.bytes_at((64 << 10) - 8, 16).map(<[u8]>::len)));
        assert!(past.is_err(), "a range past the end panics");
    }

    #[test]
    fn ordinary_file_persists_with_msync() {
        let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let path = dir.path().join("pool");
        let mut region = Region::create(&path, 64 << 10).unwrap();
        // /tmp may itself be tmpfs on some machines; only check when not.
        if region.kind() == RegionKind::File {
            assert_eq!(region.domain(), PersistenceDomain::PageCache);
            assert_eq!(region.persister().instruction, FlushInstruction::None);
        }
        region.memcpy_persist(4000, b"durable");
        let mut back = [0u8; 7];
        region.read(4000, &mut back);
        assert_eq!(&back, b"durable");
    }

    #[test]
    fn overrides_are_reported() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let options = RegionOptions {
            size: Some(4096),
            create: true,
            domain: Some(PersistenceDomain::CpuCache),
            ..Default::default()
        };
        let region = Region::open(dir.path().join("pool"), options).unwrap();
        assert!(region.overridden());
        assert_eq!(region.persister().instruction, FlushInstruction::None);
        assert!(region.describe().contains("overridden"));
    }

    #[test]
    fn bad_sizes_are_refused() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        assert!(matches!(Region::create(dir.path().join("a"), 0), Err(RegionError::BadSize(0))));
        assert!(matches!(Region::create(dir.path().join("b"), 100), Err(RegionError::BadSize(100))));
        let missing = Region::open(dir.path().join("c"), RegionOptions::default());
        assert!(matches!(missing, Err(RegionError::Open { .. })));
        Region::create(dir.path().join("d"), 4096).unwrap();
        let options = RegionOptions { size: Some(8192), ..Default::default() };
        assert!(matches!(Region::open(dir.path().join("d"), options), Err(RegionError::TooSmall { .. })));
    }

    #[test]
    #[should_panic(expected = "outside media")]
    fn region_refuses_writes_past_its_end() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let mut region = Region::create(dir.path().join("pool"), 4096).unwrap();
        region.write(4090, &[1; 8]);
    }
}

/// `prefetchw` (the `_MM_HINT_ET0` hint: fetch the line in the exclusive
/// state); other targets do nothing.
#[inline(always)]
unsafe fn prefetch_line_for_write(ptr: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it never faults, even on a bad address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_ET0 }>(ptr as *const i8)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = ptr;
}
