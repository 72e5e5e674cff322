//! PMDK (libpmem, libpmemlog, libpmemobj) as an optional peer, loaded at
//! run time.
//!
//! This is the only place in pmwire that touches PMDK. The libraries are
//! opened with `dlopen` rather than linked, so the crate builds and the
//! suite runs where PMDK is missing: every PMDK row is then skipped with
//! "libpmem not found". `build.rs` asks `pkg-config` where the libraries
//! are; the bare sonames are tried after that.
//!
//! **`PMEM_IS_PMEM_FORCE=1`.** On tmpfs `pmem_is_pmem()` says 0, and
//! libpmemlog then persists with `msync` instead of flush + fence, which
//! would make it an unfair peer. The variable is set in this process before
//! libpmem is loaded. From PMDK's source (`src/libpmem/pmem.c`, 1.x):
//! `pmem_is_pmem()` reads `PMEM_IS_PMEM_FORCE` once, on its *first call*
//! (`pmem_is_pmem_init`), not in the library constructor; the variables
//! that choose flush and copy routines (`PMEM_NO_CLWB`, `PMEM_NO_MOVNT`,
//! `PMEM_AVX512F`, `PMEM_MOVDIR64B`, `PMEM_MOVNT_THRESHOLD`, ...) are read by
//! the constructor (`pmem_init` → `pmem2_arch_init`). Setting the variable
//! before `dlopen` therefore covers both. libpmemlog imports
//! `pmem_is_pmem` and `pmem_msync` from the same libpmem (see `nm -D`), so
//! the flag is process-wide. The suite does not take this on trust: before
//! a PMDK peer runs, [`Libpmem::is_pmem`] must answer 1 on the region, and
//! a test checks that it answers 0 in a child process without the flag.
//! The memcpy peer does not depend on the flag at all:
//! `pmem_memcpy_persist` always flushes and fences.
//!
//! Setting an environment variable is only safe while no other thread
//! reads the environment through libc; the suite loads PMDK from its main
//! thread before it starts any other.

use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The variable that makes `pmem_is_pmem` answer 1.
pub const FORCE_VAR: &str = "PMEM_IS_PMEM_FORCE";
/// Set to 1 to run the suite as if PMDK were missing.
pub const DISABLE_VAR: &str = "PMWIRE_BENCH_NO_PMDK";
/// libpmemlog's smallest pool.
pub const PMEMLOG_MIN_POOL: u64 = 2 << 20;

type MemcpyPersistFn = unsafe extern "C" fn(*mut c_void, *const c_void, usize) -> *mut c_void;
type IsPmemFn = unsafe extern "C" fn(*const c_void, usize) -> c_int;
type ErrorMsgFn = unsafe extern "C" fn() -> *const c_char;
type LogCreateFn = unsafe extern "C" fn(*const c_char, usize, libc::mode_t) -> *mut c_void;
type LogAppendFn = unsafe extern "C" fn(*mut c_void, *const c_void, usize) -> c_int;
type LogPoolFn = unsafe extern "C" fn(*mut c_void);
type LogNbyteFn = unsafe extern "C" fn(*mut c_void) -> usize;
type ObjCreateFn = unsafe extern "C" fn(*const c_char, *const c_char, usize, libc::mode_t) -> *mut c_void;
type ObjCloseFn = unsafe extern "C" fn(*mut c_void);
type ObjRootFn = unsafe extern "C" fn(*mut c_void, usize) -> PmemOid;
type ObjDirectFn = unsafe extern "C" fn(PmemOid) -> *mut c_void;
type TxBeginFn = unsafe extern "C" fn(*mut c_void, *mut c_void, ...) -> c_int;
type TxAddRangeDirectFn = unsafe extern "C" fn(*const c_void, usize) -> c_int;
type TxVoidFn = unsafe extern "C" fn();
type TxEndFn = unsafe extern "C" fn() -> c_int;
type TxAbortFn = unsafe extern "C" fn(c_int);
type TxStageFn = unsafe extern "C" fn() -> c_int;

/// libpmemobj's smallest pool (`PMEMOBJ_MIN_POOL`).
pub const PMEMOBJ_MIN_POOL: u64 = 8 << 20;
/// `TX_PARAM_NONE`: ends `pmemobj_tx_begin`'s parameter list.
const TX_PARAM_NONE: c_int = 0;
/// `TX_STAGE_WORK`.
const TX_STAGE_WORK: c_int = 1;

/// libpmemobj's `PMEMoid` (base.h): a pool's UUID and an offset.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct PmemOid {
    pool_uuid_lo: u64,
    off: u64,
}

/// A `dlopen` handle. Never closed: PMDK keeps process-global state.
struct Library {
    handle: *mut c_void,
    path: String,
}

// SAFETY: a dlopen handle may be used from any thread.
unsafe impl Send for Library {}
// SAFETY: dlsym is thread-safe; the handle is never mutated.
unsafe impl Sync for Library {}

impl Library {
    fn open(name: &str, candidates: &[String]) -> Result<Library, String> {
        let mut errors = Vec::new();
        for candidate in candidates {
            let c_path = CString::new(candidate.as_str()).map_err(|e| e.to_string())?;
            // SAFETY: a valid C string; the flags are standard.
            let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
            if !handle.is_null() {
                return Ok(Library { handle, path: resolve(candidate) });
            }
            errors.push(dlerror());
        }
        Err(format!("{name} not found (tried {}: {})", candidates.join(", "), errors.join("; ")))
    }

    /// Looks up `name` as a function of type `T`.
    ///
    /// # Safety
    /// `T` must be the C signature of the symbol.
    unsafe fn function<T: Copy>(&self, name: &CStr) -> Result<T, String> {
        assert_eq!(std::mem::size_of::<T>(), std::mem::size_of::<*mut c_void>());
        // SAFETY: the handle is open; name is a C string.
        let symbol = unsafe { libc::dlsym(self.handle, name.as_ptr()) };
        if symbol.is_null() {
            return Err(format!("{}: symbol {} missing", self.path, name.to_string_lossy()));
        }
        // SAFETY: the caller guarantees T is the symbol's function type.
        Ok(unsafe { std::mem::transmute_copy::<*mut c_void, T>(&symbol) })
    }
}

fn dlerror() -> String {
    // SAFETY: dlerror returns a thread-local message or null.
    let message = unsafe { libc::dlerror() };
    if message.is_null() {
        "unknown error".to_string()
    } else {
        // SAFETY: non-null dlerror results are C strings.
        unsafe { CStr::from_ptr(message) }.to_string_lossy().into_owned()
    }
}

fn resolve(candidate: &str) -> String {
    let path = Path::new(candidate);
    if path.is_absolute() {
        if let Ok(real) = std::fs::canonicalize(path) {
            return real.display().to_string();
        }
    }
    candidate.to_string()
}

fn candidates(dir: Option<&str>, soname: &str, devname: &str, override_var: &str) -> Vec<String> {
    let mut list = Vec::new();
    if let Ok(path) = std::env::var(override_var) {
        list.push(path);
    }
    if let Some(dir) = dir {
        list.push(format!("{dir}/{soname}"));
    }
    list.push(soname.to_string());
    list.push(devname.to_string());
    list
}

/// libpmem's entry points used by the suite.
pub struct Libpmem {
    library: Library,
    memcpy_persist: MemcpyPersistFn,
    is_pmem: IsPmemFn,
    errormsg: ErrorMsgFn,
}

impl Libpmem {
    fn open() -> Result<Libpmem, String> {
        let list = candidates(option_env!("PMWIRE_LIBPMEM_DIR"), "libpmem.so.1", "libpmem.so", "PMWIRE_LIBPMEM");
        let library = Library::open("libpmem", &list)?;
        // SAFETY: the signatures are libpmem.h's.
        unsafe {
            Ok(Libpmem {
                memcpy_persist: library.function(c"pmem_memcpy_persist")?,
                is_pmem: library.function(c"pmem_is_pmem")?,
                errormsg: library.function(c"pmem_errormsg")?,
                library,
            })
        }
    }

    /// `pmem_memcpy_persist(dst, src, len)`.
    ///
    /// # Safety
    /// `dst` and `src` are valid for `len` bytes and do not overlap.
    #[inline]
    pub unsafe fn memcpy_persist(&self, dst: *mut u8, src: *const u8, len: usize) {
        // SAFETY: forwarded from the caller.
        unsafe { (self.memcpy_persist)(dst as *mut c_void, src as *const c_void, len) };
    }

    /// `pmem_is_pmem(ptr, len)`.
    pub fn is_pmem(&self, ptr: *const u8, len: usize) -> bool {
        // SAFETY: pmem_is_pmem only inspects the address range.
        unsafe { (self.is_pmem)(ptr as *const c_void, len) == 1 }
    }

    /// The last libpmem error message.
    pub fn errormsg(&self) -> String {
        // SAFETY: returns a thread-local C string.
        unsafe { CStr::from_ptr((self.errormsg)()) }.to_string_lossy().into_owned()
    }

    /// Where the library was loaded from.
    pub fn path(&self) -> &str {
        &self.library.path
    }

    /// The version `pkg-config` reported when pmwire was built.
    pub fn version(&self) -> &'static str {
        option_env!("PMWIRE_LIBPMEM_VERSION").unwrap_or("unknown")
    }
}

/// libpmemlog's entry points used by the suite.
pub struct Libpmemlog {
    library: Library,
    create: LogCreateFn,
    append: LogAppendFn,
    rewind: LogPoolFn,
    close: LogPoolFn,
    nbyte: LogNbyteFn,
    errormsg: ErrorMsgFn,
}

impl Libpmemlog {
    fn open() -> Result<Libpmemlog, String> {
        let list =
            candidates(option_env!("PMWIRE_LIBPMEMLOG_DIR"), "libpmemlog.so.1", "libpmemlog.so", "PMWIRE_LIBPMEMLOG");
        let library = Library::open("libpmemlog", &list)?;
        // SAFETY: the signatures are libpmemlog.h's.
        unsafe {
            Ok(Libpmemlog {
                create: library.function(c"pmemlog_create")?,
                append: library.function(c"pmemlog_append")?,
                rewind: library.function(c"pmemlog_rewind")?,
                close: library.function(c"pmemlog_close")?,
                nbyte: library.function(c"pmemlog_nbyte")?,
                errormsg: library.function(c"pmemlog_errormsg")?,
                library,
            })
        }
    }

    /// Where the library was loaded from.
    pub fn path(&self) -> &str {
        &self.library.path
    }

    /// The version `pkg-config` reported when pmwire was built.
    pub fn version(&self) -> &'static str {
        option_env!("PMWIRE_LIBPMEMLOG_VERSION").unwrap_or("unknown")
    }

    fn errormsg(&self) -> String {
        // SAFETY: returns a thread-local C string.
        unsafe { CStr::from_ptr((self.errormsg)()) }.to_string_lossy().into_owned()
    }

    /// Creates a fresh pool of `size` bytes at `path` (removing a stale file).
    pub fn create(&self, path: &Path, size: u64) -> Result<LogPool<'_>, String> {
        assert!(size >= PMEMLOG_MIN_POOL, "pmemlog pools hold at least {PMEMLOG_MIN_POOL} bytes");
        let _ = std::fs::remove_file(path);
        let c_path = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
        // SAFETY: a valid path; PMDK creates the file.
        let pool = unsafe { (self.create)(c_path.as_ptr(), size as usize, 0o600) };
        if pool.is_null() {
            return Err(format!("pmemlog_create({}): {}", path.display(), self.errormsg()));
        }
        Ok(LogPool { library: self, pool, path: path.to_path_buf() })
    }
}

/// An open libpmemlog pool; closed and its file removed on drop.
pub struct LogPool<'a> {
    library: &'a Libpmemlog,
    pool: *mut c_void,
    path: PathBuf,
}

impl LogPool<'_> {
    /// `pmemlog_append`; false when the log is full.
    #[inline]
    pub fn append(&mut self, payload: &[u8]) -> bool {
        // SAFETY: the pool is open; payload is a valid slice.
        let rc = unsafe { (self.library.append)(self.pool, payload.as_ptr() as *const c_void, payload.len()) };
        if rc == 0 {
            return true;
        }
        let errno = std::io::Error::last_os_error();
        assert_eq!(errno.raw_os_error(), Some(libc::ENOSPC), "pmemlog_append: {}", self.library.errormsg());
        false
    }

    /// `pmemlog_rewind`: empties the log.
    pub fn rewind(&mut self) {
        // SAFETY: the pool is open.
        unsafe { (self.library.rewind)(self.pool) };
    }

    /// `pmemlog_nbyte`: usable bytes.
    pub fn nbyte(&self) -> u64 {
        // SAFETY: the pool is open.
        unsafe { (self.library.nbyte)(self.pool) as u64 }
    }
}

impl Drop for LogPool<'_> {
    fn drop(&mut self) {
        // SAFETY: the pool is open and closed once.
        unsafe { (self.library.close)(self.pool) };
        let _ = std::fs::remove_file(&self.path);
    }
}

/// libpmemobj's entry points used by the suite: a pool with a root
/// object, and undo-logged transactions on it.
pub struct Libpmemobj {
    library: Library,
    create: ObjCreateFn,
    close: ObjCloseFn,
    root: ObjRootFn,
    direct: ObjDirectFn,
    tx_begin: TxBeginFn,
    tx_add_range_direct: TxAddRangeDirectFn,
    tx_commit: TxVoidFn,
    tx_end: TxEndFn,
    tx_abort: TxAbortFn,
    tx_stage: TxStageFn,
    errormsg: ErrorMsgFn,
}

impl Libpmemobj {
    fn open() -> Result<Libpmemobj, String> {
        let list =
            candidates(option_env!("PMWIRE_LIBPMEMOBJ_DIR"), "libpmemobj.so.1", "libpmemobj.so", "PMWIRE_LIBPMEMOBJ");
        let library = Library::open("libpmemobj", &list)?;
        // SAFETY: the signatures are libpmemobj's headers' (base.h, pool_base.h, tx_base.h).
        unsafe {
            Ok(Libpmemobj {
                create: library.function(c"pmemobj_create")?,
                close: library.function(c"pmemobj_close")?,
                root: library.function(c"pmemobj_root")?,
                direct: library.function(c"pmemobj_direct")?,
                tx_begin: library.function(c"pmemobj_tx_begin")?,
                tx_add_range_direct: library.function(c"pmemobj_tx_add_range_direct")?,
                tx_commit: library.function(c"pmemobj_tx_commit")?,
                tx_end: library.function(c"pmemobj_tx_end")?,
                tx_abort: library.function(c"pmemobj_tx_abort")?,
                tx_stage: library.function(c"pmemobj_tx_stage")?,
                errormsg: library.function(c"pmemobj_errormsg")?,
                library,
            })
        }
    }

    /// Where the library was loaded from.
    pub fn path(&self) -> &str {
        &self.library.path
    }

    /// The version `pkg-config` reported when pmwire was built.
    pub fn version(&self) -> &'static str {
        option_env!("PMWIRE_LIBPMEMOBJ_VERSION").unwrap_or("unknown")
    }

    fn errormsg(&self) -> String {
        // SAFETY: returns a thread-local C string.
        unsafe { CStr::from_ptr((self.errormsg)()) }.to_string_lossy().into_owned()
    }

    /// Creates a fresh pool of `size` bytes at `path` (removing a stale
    /// file) with a zeroed root object of `root_bytes`.
    pub fn create(&self, path: &Path, size: u64, root_bytes: u64) -> Result<ObjPool<'_>, String> {
        assert!(size >= PMEMOBJ_MIN_POOL, "pmemobj pools hold at least {PMEMOBJ_MIN_POOL} bytes");
        assert!(root_bytes > 0 && root_bytes < size, "a root object of {root_bytes} B in a pool of {size} B");
        let _ = std::fs::remove_file(path);
        let c_path = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
        // SAFETY: valid C strings; PMDK creates the file.
        let pool = unsafe { (self.create)(c_path.as_ptr(), c"pmwire-bench".as_ptr(), size as usize, 0o600) };
        if pool.is_null() {
            return Err(format!("pmemobj_create({}): {}", path.display(), self.errormsg()));
        }
        let mut pool =
            ObjPool { library: self, pool, root: std::ptr::null_mut(), root_bytes, path: path.to_path_buf() };
        // SAFETY: the pool is open.
        let oid = unsafe { (self.root)(pool.pool, root_bytes as usize) };
        if oid.off == 0 {
            return Err(format!("pmemobj_root({root_bytes} B): {}", self.errormsg()));
        }
        // SAFETY: a valid object of this pool.
        pool.root = unsafe { (self.direct)(oid) } as *mut u8;
        assert!(!pool.root.is_null(), "pmemobj_direct of the root");
        Ok(pool)
    }
}

/// An open libpmemobj pool and its root object; closed and its file
/// removed on drop.
pub struct ObjPool<'a> {
    library: &'a Libpmemobj,
    pool: *mut c_void,
    root: *mut u8,
    root_bytes: u64,
    path: PathBuf,
}

impl<'a> ObjPool<'a> {
    /// The library the pool was created with.
    pub fn library(&self) -> &'a Libpmemobj {
        self.library
    }

    /// The root object's address (for `pmem_is_pmem`).
    pub fn root(&self) -> *const u8 {
        self.root
    }

    /// One libpmemobj transaction: for each `(offset, bytes)` of `writes`,
    /// in order, `pmemobj_tx_add_range_direct` of the root object's range
    /// (its undo log) then the store; then `pmemobj_tx_commit` (the ranges
    /// flushed, the log invalidated) and `pmemobj_tx_end`.
    pub fn transaction<'w>(&mut self, writes: impl IntoIterator<Item = (u64, &'w [u8])>) -> Result<(), String> {
        let mut tx = self.begin()?;
        for (offset, bytes) in writes {
            tx.write(offset, bytes)?;
        }
        tx.commit()
    }

    /// `pmemobj_tx_begin`: a transaction on this pool, aborted if dropped.
    pub fn begin(&mut self) -> Result<ObjTx<'_, 'a>, String> {
        let lib = self.library;
        // SAFETY: the pool is open; no jmp_buf (errors are returned), no parameters.
        let rc = unsafe { (lib.tx_begin)(self.pool, std::ptr::null_mut(), TX_PARAM_NONE) };
        if rc != 0 {
            // SAFETY: tx_end must follow every tx_begin.
            unsafe { (lib.tx_end)() };
            return Err(format!("pmemobj_tx_begin: {}", lib.errormsg()));
        }
        Ok(ObjTx { pool: self, open: true })
    }

    /// Reads root-object bytes (for tests).
    pub fn read(&self, offset: u64, dst: &mut [u8]) {
        assert!(offset + dst.len() as u64 <= self.root_bytes, "a read inside the root object");
        // SAFETY: inside the root object.
        unsafe { std::ptr::copy_nonoverlapping(self.root.add(offset as usize), dst.as_mut_ptr(), dst.len()) };
    }
}

/// An open libpmemobj transaction of this thread.
pub struct ObjTx<'p, 'a> {
    pool: &'p mut ObjPool<'a>,
    /// Begun and neither ended nor failed.
    open: bool,
}

impl ObjTx<'_, '_> {
    /// `pmemobj_tx_add_range_direct` of the root object's range, then the
    /// store. On `Err` the transaction was aborted and ended.
    pub fn write(&mut self, offset: u64, bytes: &[u8]) -> Result<(), String> {
        assert!(self.open, "a write in an open transaction");
        assert!(offset + bytes.len() as u64 <= self.pool.root_bytes, "a write inside the root object");
        let lib = self.pool.library;
        // SAFETY: inside the root object.
        let at = unsafe { self.pool.root.add(offset as usize) };
        // SAFETY: in a transaction of this thread, on a range of its pool.
        let rc = unsafe { (lib.tx_add_range_direct)(at as *const c_void, bytes.len()) };
        // SAFETY: reads the thread's transaction stage.
        if rc != 0 || unsafe { (lib.tx_stage)() } != TX_STAGE_WORK {
            let message = lib.errormsg();
            self.open = false;
            // SAFETY: ends the transaction libpmemobj aborted.
            unsafe { (lib.tx_end)() };
            return Err(format!("pmemobj_tx_add_range_direct: {message}"));
        }
        // SAFETY: the range was snapshotted; src and dst do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), at, bytes.len()) };
        Ok(())
    }

    /// Reads root-object bytes as this transaction sees them (in place).
    pub fn read(&self, offset: u64, dst: &mut [u8]) {
        self.pool.read(offset, dst)
    }

    /// The root object's size.
    pub fn root_bytes(&self) -> u64 {
        self.pool.root_bytes
    }

    /// `pmemobj_tx_commit` and `pmemobj_tx_end`.
    pub fn commit(mut self) -> Result<(), String> {
        assert!(self.open, "commit of an open transaction");
        self.open = false;
        let lib = self.pool.library;
        // SAFETY: in TX_STAGE_WORK.
        unsafe { (lib.tx_commit)() };
        // SAFETY: after commit.
        match unsafe { (lib.tx_end)() } {
            0 => Ok(()),
            e => Err(format!("pmemobj_tx_end: error {e}: {}", lib.errormsg())),
        }
    }
}

impl Drop for ObjTx<'_, '_> {
    fn drop(&mut self) {
        if self.open {
            let lib = self.pool.library;
            // SAFETY: an open transaction of this thread, in TX_STAGE_WORK.
            unsafe { (lib.tx_abort)(libc::ECANCELED) };
            // SAFETY: tx_end follows every tx_begin.
            unsafe { (lib.tx_end)() };
        }
    }
}

impl Drop for ObjPool<'_> {
    fn drop(&mut self) {
        // SAFETY: the pool is open and closed once.
        unsafe { (self.library.close)(self.pool) };
        let _ = std::fs::remove_file(&self.path);
    }
}

static LIBPMEMOBJ: OnceLock<Result<Libpmemobj, String>> = OnceLock::new();

/// libpmemobj (after libpmem, so the flag is set first); `Err` says why not.
pub fn libpmemobj() -> Result<&'static Libpmemobj, String> {
    LIBPMEMOBJ
        .get_or_init(|| {
            libpmem()?;
            Libpmemobj::open()
        })
        .as_ref()
        .map_err(Clone::clone)
}

static LIBPMEM: OnceLock<Result<Libpmem, String>> = OnceLock::new();
static LIBPMEMLOG: OnceLock<Result<Libpmemlog, String>> = OnceLock::new();
static FORCE_BEFORE: OnceLock<Option<String>> = OnceLock::new();

fn disabled() -> Option<String> {
    match std::env::var(DISABLE_VAR) {
        Ok(v) if v == "1" => Some(format!("libpmem not found (disabled by {DISABLE_VAR}=1)")),
        _ => None,
    }
}

/// Sets `PMEM_IS_PMEM_FORCE=1` (once) and remembers what was there.
fn force_is_pmem() {
    FORCE_BEFORE.get_or_init(|| {
        let before = std::env::var(FORCE_VAR).ok();
        std::env::set_var(FORCE_VAR, "1");
        before
    });
}

/// libpmem, loaded once with `PMEM_IS_PMEM_FORCE=1`; `Err` says why not.
pub fn libpmem() -> Result<&'static Libpmem, String> {
    LIBPMEM
        .get_or_init(|| {
            if let Some(reason) = disabled() {
                return Err(reason);
            }
            force_is_pmem();
            Libpmem::open()
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// libpmemlog (after libpmem, so the flag is set first); `Err` says why not.
pub fn libpmemlog() -> Result<&'static Libpmemlog, String> {
    LIBPMEMLOG
        .get_or_init(|| {
            libpmem()?;
            Libpmemlog::open()
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Loads libpmem without touching the environment (for the test that
/// shows the flag is what makes `pmem_is_pmem` answer 1 on tmpfs).
#[doc(hidden)]
pub fn libpmem_unforced() -> Result<Libpmem, String> {
    Libpmem::open()
}

/// What the suite records about PMDK: where it came from, the forced flag,
/// and every `PMEM_*` variable in effect.
pub fn describe() -> serde_json::Value {
    let env: BTreeMap<String, String> = std::env::vars().filter(|(k, _)| k.starts_with("PMEM_")).collect();
    let libpmem = match libpmem() {
        Ok(lib) => serde_json::json!({"status": "loaded", "path": lib.path(), "version": lib.version()}),
        Err(reason) => serde_json::json!({"status": format!("not run: {reason}")}),
    };
    let libpmemlog = match libpmemlog() {
        Ok(lib) => serde_json::json!({"status": "loaded", "path": lib.path(), "version": lib.version()}),
        Err(reason) => serde_json::json!({"status": format!("not run: {reason}")}),
    };
    let libpmemobj = match libpmemobj() {
        Ok(lib) => serde_json::json!({"status": "loaded", "path": lib.path(), "version": lib.version()}),
        Err(reason) => serde_json::json!({"status": format!("not run: {reason}")}),
    };
    serde_json::json!({
        "libpmem": libpmem,
        "libpmemlog": libpmemlog,
        "libpmemobj": libpmemobj,
        "is_pmem_force_before": FORCE_BEFORE.get().cloned().flatten(),
        "env": env,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmem::Region;

    const CHILD_VAR: &str = "PMWIRE_BENCH_PMDK_CHILD";

    #[test]
    fn forced_flag_makes_tmpfs_pmem() {
        let Ok(lib) = libpmem() else { return };
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let region = Region::create(dir.path().join("pool"), 1 << 20).unwrap();
        assert!(lib.is_pmem(region.as_ptr(), 1 << 20), "{}", lib.errormsg());
        let src = [7u8; 4096];
        // SAFETY: the region holds 1 MiB; src is separate.
        unsafe { lib.memcpy_persist(region.as_ptr().add(64), src.as_ptr(), src.len()) };
        // SAFETY: inside the mapping.
        assert_eq!(unsafe { *region.as_ptr().add(64 + 4095) }, 7);
    }

    /// Run in a child process without the flag: tmpfs is not pmem to PMDK.
    #[test]
    fn unforced_child_probe() {
        if std::env::var(CHILD_VAR).is_err() {
            return;
        }
        let lib = libpmem_unforced().unwrap();
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let region = Region::create(dir.path().join("pool"), 1 << 20).unwrap();
        assert!(!lib.is_pmem(region.as_ptr(), 1 << 20), "tmpfs should not be pmem without the flag");
    }

    #[test]
    fn without_the_flag_tmpfs_is_not_pmem() {
        if libpmem_unforced().is_err() {
            return;
        }
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["pmdk::tests::unforced_child_probe", "--exact", "--quiet"])
            .env(CHILD_VAR, "1")
            .env_remove(FORCE_VAR)
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
    }

    #[test]
    fn pmemlog_appends_and_rewinds() {
        let Ok(lib) = libpmemlog() else { return };
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let mut pool = lib.create(&dir.path().join("log"), PMEMLOG_MIN_POOL).unwrap();
        let capacity = pool.nbyte();
        assert!(capacity > 0);
        let entry = [1u8; 4096];
        let mut appended = 0u64;
        while pool.append(&entry) {
            appended += 1;
        }
        assert_eq!(appended, capacity / 4096);
        pool.rewind();
        assert!(pool.append(&entry));
    }

    /// The FFI smoke test: transactions land in the root object, on a pool
    /// PMDK takes for pmem; a range outside the pool's objects is refused
    /// with an error, not a crash, and leaves the committed data.
    #[test]
    fn pmemobj_transactions_land_in_the_root_object() {
        let lib = match libpmemobj() {
            Ok(lib) => lib,
            Err(reason) => {
                eprintln!("libpmemobj not run: {reason}");
                return;
            }
        };
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let mut pool = lib.create(&dir.path().join("obj"), PMEMOBJ_MIN_POOL * 2, 1 << 20).unwrap();
        let pmem = libpmem().unwrap();
        assert!(pmem.is_pmem(pool.root(), 1 << 20), "{}", pmem.errormsg());
        pool.transaction([(0u64, &[1u8; 64][..]), (4096, &[2u8; 64][..]), (0, &[3u8; 8][..])]).unwrap();
        let mut got = [0u8; 64];
        pool.read(0, &mut got);
        assert_eq!(&got[..8], &[3u8; 8]);
        assert_eq!(&got[8..], &[1u8; 56]);
        pool.read(4096, &mut got);
        assert_eq!(got, [2u8; 64]);
        let mut many = Vec::new();
        for i in 0..2048u64 {
            many.push((i * 64, [i as u8; 64]));
        }
        pool.transaction(many.iter().map(|(o, b)| (*o, &b[..]))).unwrap();
        pool.read(2047 * 64, &mut got);
        assert_eq!(got, [255u8; 64], "a transaction of 2048 ranges (Transact's largest)");
        let mut tx = pool.begin().unwrap();
        tx.write(0, &[9u8; 64]).unwrap();
        let mut seen = [0u8; 64];
        tx.read(0, &mut seen);
        assert_eq!(seen, [9u8; 64], "a transaction reads its own store");
        drop(tx);
        pool.read(0, &mut got);
        assert_eq!(got, [0u8; 64], "a dropped transaction is rolled back to the 2048-range one's store");
    }
}
