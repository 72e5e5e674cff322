//! Thin safe wrappers over the UCP objects: [`Context`], [`Worker`],
//! [`Listener`], [`Endpoint`], [`MemRegion`], [`Rkey`] and in-flight
//! [`Request`]s. [`crate::UcxTransport`] is built from them; the latency
//! probe uses them directly so that it measures UCX plus as little of ours
//! as possible.
//!
//! Ownership mirrors UCX's own hierarchy, held with `Rc` so that a child can
//! never outlive its parent: a `Worker` keeps its `Context`, an `Endpoint`
//! and a `Listener` keep their `Worker`, a `MemRegion` keeps its `Context`,
//! an `Rkey` keeps its `Endpoint`. Drop order is therefore always child first.
//!
//! Invariants:
//! - Every type here is `!Send`: workers run in `UCS_THREAD_MODE_SINGLE` and
//!   belong to the thread that made them (one event loop per thread).
//! - No function here blocks without a bound: waits take a timeout, and the
//!   bounded drains in `Drop` give up (and leak, rather than free memory UCX
//!   may still touch) after a fixed number of progress calls.
//! - Operations are tracked by polling their request (`ucp_request_check_status`)
//!   rather than by completion callbacks, so no callback ever aliases Rust
//!   state; the only callbacks are the connection, error and active-message
//!   handlers that the transport installs with a stable heap pointer.

use std::ffi::{c_void, CString};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::RawFd;
use std::ptr;
use std::rc::Rc;
use std::time::Duration;

use ucx_sys as sys;

use crate::error::{RegisterError, SetupError, Status, WaitError};

/// How many `ucp_worker_progress` calls a `Drop` makes while waiting for a
/// close to finish before giving up.
const DROP_PROGRESS_BOUND: usize = 100_000;

/// How a context is configured: `UCX_*` variables applied to this context
/// alone (through `ucp_config_modify`, not the process environment, so that
/// contexts with different transports can live in one process).
#[derive(Clone, Debug, Default)]
pub struct ContextConfig {
    /// `UCX_TLS` for this context, e.g. `"tcp"`, `"sm"`, `"posix,cma,self"`,
    /// `"rc,ud"`. `None` keeps UCX's default (the environment, else `all`).
    pub tls: Option<String>,
    /// Further variables, named without the `UCX_` prefix (`("RNDV_THRESH", "8k")`).
    pub vars: Vec<(String, String)>,
    /// Ask for UCX's RMA and 64-bit atomic features. Without them UCX
    /// installs none of its software RMA handlers (which serve a peer's
    /// put, get and atomic at whatever address it names) and the context
    /// can neither start nor serve one-sided operations.
    pub rma: bool,
}

impl ContextConfig {
    /// A configuration that sets only `UCX_TLS` (RMA off).
    pub fn tls(tls: &str) -> ContextConfig {
        ContextConfig {
            tls: Some(tls.to_string()),
            vars: Vec::new(),
            rma: false,
        }
    }
}

/// A UCP application context with the features pmwire uses: active messages
/// and wake-up (event fd), and RMA with 64-bit atomics if configured
/// ([`ContextConfig::rma`]).
pub struct Context {
    raw: sys::ucp_context_h,
}

impl Context {
    /// Creates a context configured by `config`.
    pub fn new(config: &ContextConfig) -> Result<Rc<Context>, SetupError> {
        let ucx_config = UcxConfig::read()?;
        if let Some(tls) = &config.tls {
            ucx_config.modify("TLS", tls)?;
        }
        for (name, value) in &config.vars {
            ucx_config.modify(name, value)?;
        }
        // SAFETY: all-zero is a valid ucp_params_t (every field is an integer,
        // a nullable pointer or an Option of a function pointer).
        let mut params: sys::ucp_params_t = unsafe { std::mem::zeroed() };
        params.field_mask = sys::UCP_PARAM_FIELD_FEATURES as u64;
        let rma = if config.rma {
            sys::UCP_FEATURE_RMA | sys::UCP_FEATURE_AMO64
        } else {
            0
        };
        params.features = (sys::UCP_FEATURE_AM | sys::UCP_FEATURE_WAKEUP | rma) as u64;
        // UCX's log lines go to stderr, never to a program's stdout.
        static LOG_TO_STDERR: std::sync::Once = std::sync::Once::new();
        // SAFETY: pushes a function pointer onto UCX's handler list, once.
        LOG_TO_STDERR.call_once(|| unsafe { sys::pmwire_ucx_log_to_stderr() });
        let mut raw: sys::ucp_context_h = ptr::null_mut();
        // SAFETY: params is initialised and its mask names the one field set;
        // the config came from ucp_config_read and outlives the call.
        let status = unsafe { sys::ucp_init(&params, ucx_config.raw, &mut raw) };
        Status::check(status).map_err(|status| SetupError::Ucx {
            call: "ucp_init",
            status,
        })?;
        assert!(!raw.is_null());
        Ok(Rc::new(Context { raw }))
    }

    /// The raw handle, for calls this module does not wrap.
    pub fn raw(&self) -> sys::ucp_context_h {
        self.raw
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: every child (worker, memory region) holds an Rc to this
        // context, so none is alive when the last Rc drops.
        unsafe { sys::ucp_cleanup(self.raw) }
    }
}

/// A `ucp_config_t` released on drop.
struct UcxConfig {
    raw: *mut sys::ucp_config_t,
}

impl UcxConfig {
    fn read() -> Result<UcxConfig, SetupError> {
        let mut raw: *mut sys::ucp_config_t = ptr::null_mut();
        // SAFETY: NULL prefix and file mean the defaults plus the environment.
        let status = unsafe { sys::ucp_config_read(ptr::null(), ptr::null(), &mut raw) };
        Status::check(status).map_err(|status| SetupError::Ucx {
            call: "ucp_config_read",
            status,
        })?;
        Ok(UcxConfig { raw })
    }

    fn modify(&self, name: &str, value: &str) -> Result<(), SetupError> {
        let bad = || SetupError::BadConfig {
            name: name.to_string(),
            value: value.to_string(),
        };
        let c_name = CString::new(name).map_err(|_| bad())?;
        let c_value = CString::new(value).map_err(|_| bad())?;
        // SAFETY: both strings are NUL-terminated and outlive the call.
        let status = unsafe { sys::ucp_config_modify(self.raw, c_name.as_ptr(), c_value.as_ptr()) };
        Status::check(status).map_err(|status| SetupError::Ucx {
            call: "ucp_config_modify",
            status,
        })
    }
}

impl Drop for UcxConfig {
    fn drop(&mut self) {
        // SAFETY: raw came from ucp_config_read and is released once.
        unsafe { sys::ucp_config_release(self.raw) }
    }
}

/// Whether `ucp_worker_arm` armed the event fd or found events pending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Armed {
    /// Nothing pending: it is safe to sleep on the event fd.
    Armed,
    /// Events are pending (`UCS_ERR_BUSY`): progress again before sleeping.
    Busy,
}

/// A UCP worker in single-thread mode: the progress engine of one event loop.
pub struct Worker {
    raw: sys::ucp_worker_h,
    efd: RawFd,
    max_am_header: usize,
    _context: Rc<Context>,
}

impl Worker {
    /// Creates a worker on `context`.
    pub fn new(context: &Rc<Context>) -> Result<Rc<Worker>, SetupError> {
        // SAFETY: all-zero is a valid ucp_worker_params_t.
        let mut params: sys::ucp_worker_params_t = unsafe { std::mem::zeroed() };
        params.field_mask = sys::UCP_WORKER_PARAM_FIELD_THREAD_MODE as u64;
        params.thread_mode = sys::UCS_THREAD_MODE_SINGLE;
        let mut raw: sys::ucp_worker_h = ptr::null_mut();
        // SAFETY: the context is alive (we hold an Rc) and params is initialised.
        let status = unsafe { sys::ucp_worker_create(context.raw, &params, &mut raw) };
        Status::check(status).map_err(|status| SetupError::Ucx {
            call: "ucp_worker_create",
            status,
        })?;
        let mut worker = Worker {
            raw,
            efd: -1,
            max_am_header: 0,
            _context: context.clone(),
        };
        let mut efd: libc::c_int = -1;
        // SAFETY: the worker was just created with the WAKEUP feature.
        let status = unsafe { sys::ucp_worker_get_efd(raw, &mut efd) };
        Status::check(status).map_err(|status| SetupError::Ucx {
            call: "ucp_worker_get_efd",
            status,
        })?;
        assert!(efd >= 0);
        worker.efd = efd;
        // SAFETY: all-zero is a valid attribute struct; the mask names one field.
        let mut attr: sys::ucp_worker_attr_t = unsafe { std::mem::zeroed() };
        attr.field_mask = sys::UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER as u64;
        // SAFETY: the worker is alive; attr is writable.
        let status = unsafe { sys::ucp_worker_query(raw, &mut attr) };
        Status::check(status).map_err(|status| SetupError::Ucx {
            call: "ucp_worker_query",
            status,
        })?;
        worker.max_am_header = attr.max_am_header;
        Ok(Rc::new(worker))
    }

    /// The raw handle.
    pub fn raw(&self) -> sys::ucp_worker_h {
        self.raw
    }

    /// The largest active-message header this worker can send.
    pub fn max_am_header(&self) -> usize {
        self.max_am_header
    }

    /// One round of `ucp_worker_progress`; returns how many events it handled.
    /// Never blocks.
    pub fn progress(&self) -> u32 {
        // SAFETY: the worker is alive and used only from this thread (!Send).
        unsafe { sys::ucp_worker_progress(self.raw) }
    }

    /// `ucp_worker_arm`: prepares the event fd for sleeping.
    pub fn arm(&self) -> Result<Armed, WaitError> {
        // SAFETY: the worker is alive.
        let status = unsafe { sys::ucp_worker_arm(self.raw) };
        match status {
            sys::UCS_OK => Ok(Armed::Armed),
            sys::UCS_ERR_BUSY => Ok(Armed::Busy),
            other => Err(WaitError::Ucx {
                call: "ucp_worker_arm",
                status: Status(other),
            }),
        }
    }

    /// The worker's event fd (readable when the armed worker has events).
    pub fn event_fd(&self) -> RawFd {
        self.efd
    }

    /// Sleeps on the event fd for at most `timeout`; returns whether it
    /// became readable. Call only after [`Worker::arm`] returned `Armed`.
    pub fn sleep(&self, timeout: Duration) -> Result<bool, WaitError> {
        poll_fd(self.efd, timeout)
    }

    /// `ucp_worker_fence`: RMA and atomics issued after it on this worker are
    /// performed after those issued before it (ordering, not completion).
    pub fn fence(&self) -> Result<(), Status> {
        // SAFETY: the worker is alive.
        Status::check(unsafe { sys::ucp_worker_fence(self.raw) })
    }

    /// Starts `ucp_worker_flush_nbx`: completes when every RMA and atomic
    /// issued on this worker is complete at its target.
    pub fn flush(&self) -> Result<Option<Request>, Status> {
        let param = RequestParam::new();
        // SAFETY: the worker is alive; param is initialised.
        let ptr = unsafe { sys::ucp_worker_flush_nbx(self.raw, &param.0) };
        Request::maybe(ptr)
    }

    /// Installs an active-message handler for `id`.
    ///
    /// # Safety
    /// `arg` must stay valid, and `cb` safe to call with it, until the handler
    /// is replaced or the worker is destroyed.
    pub unsafe fn set_am_handler(
        &self,
        id: u16,
        cb: sys::ucp_am_recv_callback_t,
        arg: *mut c_void,
    ) -> Result<(), Status> {
        // SAFETY: all-zero is a valid handler param.
        let mut param: sys::ucp_am_handler_param_t = unsafe { std::mem::zeroed() };
        param.field_mask = (sys::UCP_AM_HANDLER_PARAM_FIELD_ID
            | sys::UCP_AM_HANDLER_PARAM_FIELD_CB
            | sys::UCP_AM_HANDLER_PARAM_FIELD_ARG
            | sys::UCP_AM_HANDLER_PARAM_FIELD_FLAGS) as u64;
        param.id = id as libc::c_uint;
        param.cb = cb;
        param.arg = arg;
        param.flags = sys::UCP_AM_FLAG_WHOLE_MSG;
        // SAFETY: the worker is alive; the caller vouches for cb/arg.
        Status::check(unsafe { sys::ucp_worker_set_am_recv_handler(self.raw, &param) })
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // SAFETY: endpoints and listeners hold an Rc to the worker, so none
        // is alive now. The event fd belongs to the worker and closes with it.
        unsafe { sys::ucp_worker_destroy(self.raw) }
    }
}

/// `poll(2)` on one fd for readability, with a bounded timeout.
pub(crate) fn poll_fd(fd: RawFd, timeout: Duration) -> Result<bool, WaitError> {
    let mut pfd = [libc::pollfd { fd, events: libc::POLLIN, revents: 0 }];
    match poll_fds(&mut pfd, timeout) {
        Ok(n) => Ok(n > 0),
        Err(e) => Err(WaitError::Poll(e)),
    }
}

/// Waits until one of `fds` is ready or `timeout` passes, with the
/// timeout's full precision (`ppoll(2)`): `poll(2)` takes whole
/// milliseconds, which turns every wait shorter than 1 ms into a busy
/// loop until its deadline. Returns how many fds are ready (0: timed
/// out). An interrupted wait is restarted with the whole timeout, which
/// only lengthens that one wait.
pub fn poll_fds(fds: &mut [libc::pollfd], timeout: Duration) -> std::io::Result<usize> {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    loop {
        // SAFETY: `fds` is a live array of `fds.len()` pollfds; `ts` is a
        // valid timespec; no signal mask is installed.
        let n = unsafe { libc::ppoll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, &ts, std::ptr::null()) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// A listening socket that hands connection requests to a callback.
pub struct Listener {
    raw: sys::ucp_listener_h,
    addr: SocketAddr,
    _worker: Rc<Worker>,
}

impl Listener {
    /// Listens on `addr` (port 0 picks a free port; [`Listener::local_addr`]
    /// says which).
    ///
    /// # Safety
    /// `arg` must stay valid, and `cb` safe to call with it from this
    /// worker's progress, for as long as the listener lives.
    pub unsafe fn new(
        worker: &Rc<Worker>,
        addr: SocketAddr,
        cb: sys::ucp_listener_conn_callback_t,
        arg: *mut c_void,
    ) -> Result<Listener, SetupError> {
        let (storage, len) = sockaddr_from(addr);
        // SAFETY: all-zero is a valid listener param.
        let mut params: sys::ucp_listener_params_t = unsafe { std::mem::zeroed() };
        params.field_mask = (sys::UCP_LISTENER_PARAM_FIELD_SOCK_ADDR
            | sys::UCP_LISTENER_PARAM_FIELD_CONN_HANDLER) as u64;
        params.sockaddr.addr = &storage as *const libc::sockaddr_storage as *const sys::sockaddr;
        params.sockaddr.addrlen = len;
        params.conn_handler.cb = cb;
        params.conn_handler.arg = arg;
        let mut raw: sys::ucp_listener_h = ptr::null_mut();
        // SAFETY: storage outlives the call; the caller vouches for cb/arg.
        let status = unsafe { sys::ucp_listener_create(worker.raw, &params, &mut raw) };
        Status::check(status).map_err(|status| SetupError::Ucx {
            call: "ucp_listener_create",
            status,
        })?;
        // SAFETY: all-zero is a valid attribute struct.
        let mut attr: sys::ucp_listener_attr_t = unsafe { std::mem::zeroed() };
        attr.field_mask = sys::UCP_LISTENER_ATTR_FIELD_SOCKADDR as u64;
        // SAFETY: the listener is alive.
        let status = unsafe { sys::ucp_listener_query(raw, &mut attr) };
        if let Err(status) = Status::check(status) {
            // SAFETY: created above, destroyed once.
            unsafe { sys::ucp_listener_destroy(raw) };
            return Err(SetupError::Ucx {
                call: "ucp_listener_query",
                status,
            });
        }
        // SAFETY: ucp's sockaddr_storage has the libc layout (bindgen layout tests).
        let bound =
            unsafe { sockaddr_to(&*(&attr.sockaddr as *const _ as *const libc::sockaddr_storage)) }
                .ok_or_else(|| {
                    SetupError::Unsupported("listener bound to a non-IP address".into())
                })?;
        Ok(Listener {
            raw,
            addr: bound,
            _worker: worker.clone(),
        })
    }

    /// The address actually bound (with the port the kernel chose).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Rejects a connection request.
    ///
    /// # Safety
    /// `request` must come from this listener's callback and not have been
    /// accepted or rejected before: it is consumed here.
    pub unsafe fn reject(&self, request: sys::ucp_conn_request_h) {
        // SAFETY: under the caller's contract; a failure leaves nothing to
        // clean up (the client sees its connection fail either way).
        let _ = unsafe { sys::ucp_listener_reject(self.raw, request) };
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        // SAFETY: created in new, destroyed once.
        unsafe { sys::ucp_listener_destroy(self.raw) }
    }
}

/// Where an endpoint comes from.
pub enum Peer {
    /// Client side: connect to a listening socket address.
    Connect(SocketAddr),
    /// Server side: accept a connection request from a listener callback.
    Accept(sys::ucp_conn_request_h),
}

/// A connection to one peer worker.
pub struct Endpoint {
    raw: sys::ucp_ep_h,
    worker: Rc<Worker>,
    /// Made with `UCP_ERR_HANDLING_MODE_PEER`: only then may it be
    /// force-closed.
    peer_errors: bool,
}

impl Endpoint {
    /// Creates an endpoint. Operations may be posted at once; UCX queues them
    /// until the connection is wired up.
    ///
    /// # Safety
    /// `err_arg` must stay valid, and `err_cb` safe to call with it from this
    /// worker's progress, for as long as the endpoint lives.
    ///
    /// `peer_errors` asks for `UCP_ERR_HANDLING_MODE_PEER` (a lost peer is
    /// detected and reported through `err_cb`). UCX 1.13 offers it only on
    /// transports that can detect peer failure (TCP, verbs), not on shared
    /// memory (posix, sysv, cma): there UCX finds no usable lane and the
    /// connection fails with "Destination is unreachable".
    pub unsafe fn new(
        worker: &Rc<Worker>,
        peer: Peer,
        peer_errors: bool,
        err_cb: sys::ucp_err_handler_cb_t,
        err_arg: *mut c_void,
    ) -> Result<Endpoint, Status> {
        // SAFETY: all-zero is a valid ucp_ep_params_t.
        let mut params: sys::ucp_ep_params_t = unsafe { std::mem::zeroed() };
        params.field_mask = (sys::UCP_EP_PARAM_FIELD_ERR_HANDLER
            | sys::UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE) as u64;
        params.err_mode = if peer_errors {
            sys::UCP_ERR_HANDLING_MODE_PEER
        } else {
            sys::UCP_ERR_HANDLING_MODE_NONE
        };
        params.err_handler.cb = err_cb;
        params.err_handler.arg = err_arg;
        let storage;
        match peer {
            Peer::Connect(addr) => {
                let (s, len) = sockaddr_from(addr);
                storage = s;
                params.field_mask |=
                    (sys::UCP_EP_PARAM_FIELD_FLAGS | sys::UCP_EP_PARAM_FIELD_SOCK_ADDR) as u64;
                params.flags = sys::UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
                params.sockaddr.addr =
                    &storage as *const libc::sockaddr_storage as *const sys::sockaddr;
                params.sockaddr.addrlen = len;
            }
            Peer::Accept(request) => {
                params.field_mask |= sys::UCP_EP_PARAM_FIELD_CONN_REQUEST as u64;
                params.conn_request = request;
            }
        }
        let mut raw: sys::ucp_ep_h = ptr::null_mut();
        // SAFETY: params and the sockaddr it points to outlive the call.
        Status::check(unsafe { sys::ucp_ep_create(worker.raw, &params, &mut raw) })?;
        Ok(Endpoint {
            raw,
            worker: worker.clone(),
            peer_errors,
        })
    }

    /// The raw handle.
    pub fn raw(&self) -> sys::ucp_ep_h {
        self.raw
    }

    /// The worker the endpoint belongs to.
    pub fn worker(&self) -> &Rc<Worker> {
        &self.worker
    }

    /// Starts a put of `len` bytes from `src` to `remote_addr`.
    ///
    /// # Safety
    /// `src..src+len` must stay readable and unchanged until the returned
    /// request completes (immediately if `Ok(None)`).
    pub unsafe fn put(
        &self,
        src: *const u8,
        len: usize,
        remote_addr: u64,
        rkey: &Rkey,
    ) -> Result<Option<Request>, Status> {
        let param = RequestParam::new();
        // SAFETY: the caller keeps src valid; ep and rkey are alive.
        let ptr = unsafe {
            sys::ucp_put_nbx(
                self.raw,
                src as *const c_void,
                len,
                remote_addr,
                rkey.raw,
                &param.0,
            )
        };
        Request::maybe(ptr)
    }

    /// Starts a get of `len` bytes from `remote_addr` into `dst`.
    ///
    /// # Safety
    /// `dst..dst+len` must stay writable and otherwise untouched until the
    /// returned request completes.
    pub unsafe fn get(
        &self,
        dst: *mut u8,
        len: usize,
        remote_addr: u64,
        rkey: &Rkey,
    ) -> Result<Option<Request>, Status> {
        let param = RequestParam::new();
        // SAFETY: the caller keeps dst valid; ep and rkey are alive.
        let ptr = unsafe {
            sys::ucp_get_nbx(
                self.raw,
                dst as *mut c_void,
                len,
                remote_addr,
                rkey.raw,
                &param.0,
            )
        };
        Request::maybe(ptr)
    }

    /// Starts a 64-bit atomic: `operand` is UCX's `buffer`, `reply` its
    /// `reply_buffer` (the fetched old value; for CSWAP also the new value in).
    ///
    /// # Safety
    /// `operand` and `reply` (if any) must stay valid until completion.
    pub unsafe fn atomic(
        &self,
        op: sys::ucp_atomic_op_t,
        operand: *const u64,
        reply: Option<*mut u64>,
        remote_addr: u64,
        rkey: &Rkey,
    ) -> Result<Option<Request>, Status> {
        let mut param = RequestParam::new();
        param.0.op_attr_mask |= sys::UCP_OP_ATTR_FIELD_DATATYPE;
        param.0.datatype = sys::ucp_dt_make_contig(8);
        if let Some(reply) = reply {
            param.0.op_attr_mask |= sys::UCP_OP_ATTR_FIELD_REPLY_BUFFER;
            param.0.reply_buffer = reply as *mut c_void;
        }
        // SAFETY: the caller keeps the buffers valid; ep and rkey are alive.
        let ptr = unsafe {
            sys::ucp_atomic_op_nbx(
                self.raw,
                op,
                operand as *const c_void,
                1,
                remote_addr,
                rkey.raw,
                &param.0,
            )
        };
        Request::maybe(ptr)
    }

    /// Starts `ucp_ep_flush_nbx`: completes when every RMA and atomic issued
    /// on this endpoint is complete at the target.
    pub fn flush(&self) -> Result<Option<Request>, Status> {
        let param = RequestParam::new();
        // SAFETY: the endpoint is alive.
        let ptr = unsafe { sys::ucp_ep_flush_nbx(self.raw, &param.0) };
        Request::maybe(ptr)
    }

    /// Starts an active-message send (`ucp_am_send_nbx` with the REPLY flag,
    /// so the receiver learns which endpoint sent it).
    ///
    /// # Safety
    /// `header` and `data` must stay valid and unchanged until completion.
    pub unsafe fn am_send(
        &self,
        id: u16,
        header: &[u8],
        data: &[u8],
    ) -> Result<Option<Request>, Status> {
        let mut param = RequestParam::new();
        param.0.op_attr_mask |= sys::UCP_OP_ATTR_FIELD_FLAGS;
        param.0.flags = sys::UCP_AM_SEND_FLAG_REPLY;
        // SAFETY: the caller keeps both buffers alive until completion.
        let ptr = unsafe {
            sys::ucp_am_send_nbx(
                self.raw,
                id as libc::c_uint,
                header.as_ptr() as *const c_void,
                header.len(),
                data.as_ptr() as *const c_void,
                data.len(),
                &param.0,
            )
        };
        Request::maybe(ptr)
    }

    /// Unpacks a peer's packed remote key for use on this endpoint.
    pub fn unpack_rkey(self: &Rc<Self>, packed: &[u8]) -> Result<Rkey, Status> {
        let mut raw: sys::ucp_rkey_h = ptr::null_mut();
        // SAFETY: packed is a readable buffer; UCX validates its contents.
        Status::check(unsafe {
            sys::ucp_ep_rkey_unpack(self.raw, packed.as_ptr() as *const c_void, &mut raw)
        })?;
        Ok(Rkey {
            raw,
            _ep: self.clone(),
        })
    }

    /// What UCX says about the endpoint (`ucp_ep_print_info`): its lanes and
    /// the transports they use.
    pub fn describe(&self) -> String {
        describe_with(|file| {
            // SAFETY: the endpoint is alive and file is an open stream.
            unsafe { sys::ucp_ep_print_info(self.raw, file as *mut sys::FILE) }
        })
    }

    /// Closes the endpoint: `force` drops it at once (operations in flight
    /// fail); otherwise it flushes first. Returns the close request to poll,
    /// if any. UCX refuses to force-close an endpoint made without peer
    /// error handling (and would then keep it, with its sockets and
    /// shared-memory segments, until the worker goes), so such an endpoint
    /// is always closed by flushing.
    pub fn close(self, force: bool) -> Result<Option<Request>, Status> {
        let param = close_param(force && self.peer_errors);
        // Not dropped: its Drop would close the endpoint a second time.
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: the worker is moved out of `this` once and `this` is never
        // used or dropped again, so its reference is released exactly once
        // (below): the worker, and its context, are destroyed once the last
        // other reference goes.
        let worker = unsafe { ptr::read(&this.worker) };
        // SAFETY: the endpoint is consumed: this is its one close.
        let ptr = unsafe { sys::ucp_ep_close_nbx(this.raw, &param.0) };
        let result = Request::maybe(ptr);
        drop(worker);
        result
    }
}

/// The parameters of `ucp_ep_close_nbx`: forced, or flushing first.
fn close_param(force: bool) -> RequestParam {
    let mut param = RequestParam::new();
    param.0.op_attr_mask |= sys::UCP_OP_ATTR_FIELD_FLAGS;
    param.0.flags = if force {
        sys::UCP_EP_CLOSE_FLAG_FORCE
    } else {
        0
    };
    param
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        // Forced where UCX allows it (see `close`); the drain is bounded.
        let param = close_param(self.peer_errors);
        // SAFETY: the endpoint is alive and closed once here.
        let ptr = unsafe { sys::ucp_ep_close_nbx(self.raw, &param.0) };
        if let Ok(Some(request)) = Request::maybe(ptr) {
            request.drain(&self.worker);
        }
    }
}

/// Registered memory (`ucp_mem_map` of an existing mapping).
pub struct MemRegion {
    memh: sys::ucp_mem_h,
    addr: *mut u8,
    len: usize,
    context: Rc<Context>,
}

impl MemRegion {
    /// Registers `addr..addr+len` for local and remote read and write.
    ///
    /// # Safety
    /// The range must be a live mapping that outlives the `MemRegion` (and
    /// every remote access a peer may still make with its key).
    pub unsafe fn register(
        context: &Rc<Context>,
        addr: *mut u8,
        len: usize,
    ) -> Result<MemRegion, RegisterError> {
        if addr.is_null() || len == 0 {
            return Err(RegisterError::Empty);
        }
        // SAFETY: all-zero is a valid ucp_mem_map_params_t.
        let mut params: sys::ucp_mem_map_params_t = unsafe { std::mem::zeroed() };
        params.field_mask = (sys::UCP_MEM_MAP_PARAM_FIELD_ADDRESS
            | sys::UCP_MEM_MAP_PARAM_FIELD_LENGTH
            | sys::UCP_MEM_MAP_PARAM_FIELD_PROT) as u64;
        params.address = addr as *mut c_void;
        params.length = len;
        params.prot = sys::UCP_MEM_MAP_PROT_LOCAL_READ
            | sys::UCP_MEM_MAP_PROT_LOCAL_WRITE
            | sys::UCP_MEM_MAP_PROT_REMOTE_READ
            | sys::UCP_MEM_MAP_PROT_REMOTE_WRITE;
        let mut memh: sys::ucp_mem_h = ptr::null_mut();
        // SAFETY: the caller vouches for the range; params is initialised.
        let status = unsafe { sys::ucp_mem_map(context.raw, &params, &mut memh) };
        Status::check(status).map_err(|status| RegisterError::Ucx {
            call: "ucp_mem_map",
            status,
        })?;
        Ok(MemRegion {
            memh,
            addr,
            len,
            context: context.clone(),
        })
    }

    /// Lets UCX allocate and register `len` bytes (`UCP_MEM_MAP_ALLOCATE`).
    /// UCX then picks memory its transports can reach directly (over shared
    /// memory: a posix/sysv segment the peer maps, so a put is a store),
    /// which is what `ucx_perftest` measures with. The memory is freed with
    /// the region.
    pub fn allocate(context: &Rc<Context>, len: usize) -> Result<MemRegion, RegisterError> {
        if len == 0 {
            return Err(RegisterError::Empty);
        }
        // SAFETY: all-zero is a valid ucp_mem_map_params_t.
        let mut params: sys::ucp_mem_map_params_t = unsafe { std::mem::zeroed() };
        params.field_mask = (sys::UCP_MEM_MAP_PARAM_FIELD_ADDRESS
            | sys::UCP_MEM_MAP_PARAM_FIELD_LENGTH
            | sys::UCP_MEM_MAP_PARAM_FIELD_FLAGS
            | sys::UCP_MEM_MAP_PARAM_FIELD_PROT) as u64;
        params.address = ptr::null_mut();
        params.length = len;
        params.flags = sys::UCP_MEM_MAP_ALLOCATE;
        params.prot = sys::UCP_MEM_MAP_PROT_LOCAL_READ
            | sys::UCP_MEM_MAP_PROT_LOCAL_WRITE
            | sys::UCP_MEM_MAP_PROT_REMOTE_READ
            | sys::UCP_MEM_MAP_PROT_REMOTE_WRITE;
        let mut memh: sys::ucp_mem_h = ptr::null_mut();
        // SAFETY: params is initialised; UCX allocates the memory.
        let status = unsafe { sys::ucp_mem_map(context.raw, &params, &mut memh) };
        Status::check(status).map_err(|status| RegisterError::Ucx {
            call: "ucp_mem_map",
            status,
        })?;
        // SAFETY: all-zero is a valid attribute struct; the mask names two fields.
        let mut attr: sys::ucp_mem_attr_t = unsafe { std::mem::zeroed() };
        attr.field_mask = (sys::UCP_MEM_ATTR_FIELD_ADDRESS | sys::UCP_MEM_ATTR_FIELD_LENGTH) as u64;
        // SAFETY: memh is alive.
        let status = unsafe { sys::ucp_mem_query(memh, &mut attr) };
        let region = MemRegion {
            memh,
            addr: attr.address as *mut u8,
            len: attr.length,
            context: context.clone(),
        };
        Status::check(status).map_err(|status| RegisterError::Ucx {
            call: "ucp_mem_query",
            status,
        })?;
        assert!(!region.addr.is_null());
        assert!(region.len >= len);
        Ok(region)
    }

    /// The start address.
    pub fn addr(&self) -> *mut u8 {
        self.addr
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true (registration refuses empty ranges); for clippy's sake.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `ucp_rkey_pack`: the bytes a peer needs to access this region.
    pub fn pack_rkey(&self) -> Result<Vec<u8>, RegisterError> {
        let mut buf: *mut c_void = ptr::null_mut();
        let mut size: usize = 0;
        // SAFETY: context and memh are alive.
        let status =
            unsafe { sys::ucp_rkey_pack(self.context.raw, self.memh, &mut buf, &mut size) };
        Status::check(status).map_err(|status| RegisterError::Ucx {
            call: "ucp_rkey_pack",
            status,
        })?;
        // SAFETY: UCX returned `size` readable bytes at `buf`.
        let bytes = unsafe { std::slice::from_raw_parts(buf as *const u8, size) }.to_vec();
        // SAFETY: buf came from ucp_rkey_pack and is released once.
        unsafe { sys::ucp_rkey_buffer_release(buf) };
        Ok(bytes)
    }
}

impl Drop for MemRegion {
    fn drop(&mut self) {
        // SAFETY: memh came from ucp_mem_map on this (still alive) context.
        let _ = unsafe { sys::ucp_mem_unmap(self.context.raw, self.memh) };
    }
}

/// An unpacked remote key, valid on the endpoint that unpacked it.
pub struct Rkey {
    raw: sys::ucp_rkey_h,
    _ep: Rc<Endpoint>,
}

impl Drop for Rkey {
    fn drop(&mut self) {
        // SAFETY: unpacked once on an endpoint that is still alive (we hold it).
        unsafe { sys::ucp_rkey_destroy(self.raw) }
    }
}

/// An operation in flight, polled with [`Request::check`] and freed on drop.
///
/// Dropping an unfinished request lets UCX finish it in the background; the
/// buffers it uses must then stay alive, which is why the transport only
/// drops requests that are complete (or drains them first).
pub struct Request {
    raw: *mut c_void,
}

impl Request {
    /// Interprets a `ucs_status_ptr_t`: `Ok(None)` if it completed at once,
    /// `Ok(Some)` if in flight, `Err` on failure.
    fn maybe(ptr: sys::ucs_status_ptr_t) -> Result<Option<Request>, Status> {
        if ptr.is_null() {
            Ok(None)
        } else if sys::UCS_PTR_IS_ERR(ptr) {
            Err(Status(sys::UCS_PTR_STATUS(ptr) as i8))
        } else {
            assert!(sys::UCS_PTR_IS_PTR(ptr));
            Ok(Some(Request { raw: ptr }))
        }
    }

    /// `None` while in flight; `Some(Ok)` or `Some(Err(status))` when done.
    pub fn check(&self) -> Option<Result<(), Status>> {
        // SAFETY: raw is a live request handle owned by self.
        let status = unsafe { sys::ucp_request_check_status(self.raw) };
        if status == sys::UCS_INPROGRESS {
            None
        } else {
            Some(Status::check(status))
        }
    }

    /// Progresses `worker` until the request completes, at most
    /// 100 000 times. Returns the result, or `None` if the
    /// bound was hit (the request is then left to UCX).
    pub fn drain(self, worker: &Worker) -> Option<Result<(), Status>> {
        for _ in 0..DROP_PROGRESS_BOUND {
            if let Some(done) = self.check() {
                return Some(done);
            }
            worker.progress();
        }
        None
    }

    /// Waits for the request, progressing and sleeping on the event fd, for
    /// at most `timeout`. Returns the result, or `None` on timeout.
    pub fn wait(
        self,
        worker: &Worker,
        timeout: Duration,
    ) -> Result<Option<Result<(), Status>>, WaitError> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            while worker.progress() != 0 {}
            if let Some(done) = self.check() {
                return Ok(Some(done));
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            if worker.arm()? == Armed::Armed {
                worker.sleep(deadline - now)?;
            }
        }
    }
}

impl Drop for Request {
    fn drop(&mut self) {
        // SAFETY: raw is a request handle owned by self, freed once.
        unsafe { sys::ucp_request_free(self.raw) }
    }
}

/// Interprets a `ucs_status_ptr_t` returned by a `*_nbx` call.
pub(crate) fn request_from_ptr(ptr: sys::ucs_status_ptr_t) -> Result<Option<Request>, Status> {
    Request::maybe(ptr)
}

/// Parameters for one `*_nbx` call: no callback (requests are polled),
/// contiguous bytes.
struct RequestParam(sys::ucp_request_param_t);

impl RequestParam {
    fn new() -> RequestParam {
        // SAFETY: all-zero is a valid ucp_request_param_t (op_attr_mask 0
        // means every other field is ignored).
        RequestParam(unsafe { std::mem::zeroed() })
    }
}

/// Runs `print` with a memory stream and returns what it wrote.
fn describe_with(print: impl FnOnce(*mut libc::FILE)) -> String {
    let mut buf: *mut libc::c_char = ptr::null_mut();
    let mut size: libc::size_t = 0;
    // SAFETY: open_memstream allocates; both out-pointers are writable.
    let file = unsafe { libc::open_memstream(&mut buf, &mut size) };
    if file.is_null() {
        return String::from("(open_memstream failed)");
    }
    print(file);
    // SAFETY: file is open; fclose flushes buf/size, then we own buf.
    unsafe { libc::fclose(file) };
    if buf.is_null() {
        return String::new();
    }
    // SAFETY: buf holds `size` bytes written by the stream.
    let text = unsafe { std::slice::from_raw_parts(buf as *const u8, size) };
    let s = String::from_utf8_lossy(text).into_owned();
    // SAFETY: buf was malloc-ed by open_memstream.
    unsafe { libc::free(buf as *mut c_void) };
    s
}

/// A `sockaddr_storage` for `addr`, and its meaningful length.
pub(crate) fn sockaddr_from(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(v4.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { ptr::write(&mut storage as *mut _ as *mut libc::sockaddr_in, sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: as above for sockaddr_in6.
            unsafe { ptr::write(&mut storage as *mut _ as *mut libc::sockaddr_in6, sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

/// The IP socket address in `storage`, if it holds one.
pub(crate) fn sockaddr_to(storage: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match storage.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let sin = unsafe { &*(storage as *const _ as *const libc::sockaddr_in) };
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let sin6 = unsafe { &*(storage as *const _ as *const libc::sockaddr_in6) };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockaddr_round_trips() {
        for addr in ["127.0.0.1:4791", "[::1]:13337", "10.1.2.3:0"] {
            let addr: SocketAddr = addr.parse().unwrap();
            let (storage, _) = sockaddr_from(addr);
            assert_eq!(sockaddr_to(&storage), Some(addr));
        }
    }

    #[test]
    fn context_and_worker_come_up_with_wakeup() {
        let ctx = Context::new(&ContextConfig::tls("tcp")).unwrap();
        let worker = Worker::new(&ctx).unwrap();
        assert!(worker.event_fd() >= 0);
        assert!(worker.max_am_header() >= 64, "{}", worker.max_am_header());
        while worker.progress() != 0 {}
        // Nothing is pending, so arming succeeds and a short sleep times out.
        assert_eq!(worker.arm().unwrap(), Armed::Armed);
        assert!(!worker.sleep(Duration::from_millis(10)).unwrap());
    }

    #[test]
    fn bad_config_is_a_typed_error() {
        let err = Context::new(&ContextConfig {
            tls: None,
            vars: vec![("RNDV_THRESH".into(), "not-a-size".into())],
            rma: false,
        });
        assert!(
            matches!(
                err,
                Err(SetupError::Ucx {
                    call: "ucp_config_modify",
                    ..
                })
            ),
            "{:?}",
            err.err()
        );
    }
}
