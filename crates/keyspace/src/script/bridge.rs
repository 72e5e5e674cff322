//! `redis.call` and `redis.pcall` as C functions over Lua's C API, as
//! Redis's `luaRedisGenericCommand` is: a script's command arguments are
//! read off the Lua stack into one reused buffer, the executor runs the
//! command ([`Call`]), and its reply (RESP, in another reused buffer) is
//! pushed as Lua values with `lua_pushlstring`, `lua_createtable`,
//! `lua_rawseti` and `lua_setfield`, with no protected call per push and
//! no Rust value per argument or per reply element.
//!
//! # The longjmp rule
//!
//! Lua 5.1 raises its errors with `longjmp`: `lua_error`, and any API
//! function that allocates (a string, a table, a field set) when the
//! interpreter is out of memory. A `longjmp` skips the frames between the
//! raise and the protected call that catches it, so it must never cross a
//! Rust frame that owns something to drop. In this file:
//!
//! - the C functions ([`redis_call`]) and the pushers below them
//!   ([`push_reply`], [`push_error_table`]) hold only borrows, integers and
//!   raw pointers: nothing a skipped frame would have dropped;
//! - everything that owns memory (the executor's run of the command, an
//!   error's text, a panic's payload) happens in [`serve`], an ordinary Rust
//!   function that returns before the first Lua call that may raise, and
//!   leaves what it made in the [`Bridge`]'s buffers, which the `Vm` owns;
//! - a panic inside the executor is caught in [`serve`] and carried out of
//!   the run in [`Bridge::panic`] (a Rust unwind must not cross Lua's C
//!   frames either), then resumed by the `Vm` once the run is over.
//!
//! Anything raised here leaves no Rust memory behind and the stack as Lua
//! leaves it after any error: a half-built reply is garbage on the
//! unwound stack, for the collector.

use std::any::Any;
use std::ffi::{c_int, c_void};
use std::ptr::NonNull;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use mlua::ffi;

use super::RunState;

/// A `redis.call`'s arguments: one buffer, argument `i` ending at
/// `ends[i]`.
#[derive(Debug, Clone, Copy)]
pub struct Args<'a> {
    bytes: &'a [u8],
    ends: &'a [usize],
}

impl<'a> Args<'a> {
    /// Arguments `bytes` split at `ends` (each end within `bytes`, in order).
    pub fn new(bytes: &'a [u8], ends: &'a [usize]) -> Args<'a> {
        assert!(ends.last().is_none_or(|&e| e <= bytes.len()));
        Args { bytes, ends }
    }

    /// How many there are (the command name counts).
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Argument `i`.
    pub fn get(&self, i: usize) -> &'a [u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.bytes[start..self.ends[i]]
    }

    /// Every argument, in order.
    pub fn iter(&self) -> impl Iterator<Item = &'a [u8]> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }

    /// The buffer and the ends, as [`pmwire_resp::request::Parsed::set_command`] takes them.
    pub fn parts(&self) -> (&'a [u8], &'a [usize]) {
        (self.bytes, self.ends)
    }
}

/// What serves a run's `redis.call`: the command's arguments and the
/// script's protocol (2 or 3) → its reply appended to the buffer as RESP
/// (the buffer comes cleared), or the error text of a command that could
/// not run.
pub type Call<'a> = dyn FnMut(&Args<'_>, u8, &mut Vec<u8>) -> Result<(), String> + 'a;

/// What `redis.call` works in; owned (boxed, so its address holds) by the
/// `Vm`, named by a light userdata upvalue of the C functions.
pub(super) struct Bridge {
    /// The run's command callback: set only while a run is under way
    /// ([`Bridge::enter`]), taken while a command runs (no re-entry).
    call: Option<NonNull<Call<'static>>>,
    state: Arc<RunState>,
    /// The arguments of the call being served, back to back.
    args: Vec<u8>,
    /// Where each argument ends in `args`.
    ends: Vec<usize>,
    /// The reply (RESP) or the error text of the call being served.
    out: Vec<u8>,
    /// A panic of the executor, to resume once the run is over.
    pub(super) panic: Option<Box<dyn Any + Send>>,
}

// SAFETY: `call` is set only for the length of a run, on the thread that
// runs it (`Bridge::enter` to `Bridge::leave`, both inside `Vm::run_as`,
// which holds the `Vm` by `&mut`); between runs the bridge holds only
// owned buffers and an `Arc`.
unsafe impl Send for Bridge {}

/// How [`serve`] answered, its bytes in [`Bridge::out`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Served {
    /// A reply, as RESP.
    Reply,
    /// An error's text, made an error table (`counted`: a command's own
    /// error, with `ignore_error_stats_update`).
    Error { counted: bool },
}

/// The `Vm`'s [`Bridge`]: allocated once, reached through one raw
/// pointer both from here and from the C functions' upvalue (no `Box`
/// whose uniqueness a C function's access would contradict), freed on drop.
/// The `Vm` declares it after its interpreter, so it outlives the
/// functions that point at it.
pub(super) struct BridgeHandle(NonNull<Bridge>);

// SAFETY: as `Bridge`'s.
unsafe impl Send for BridgeHandle {}

impl BridgeHandle {
    pub(super) fn new(state: Arc<RunState>) -> BridgeHandle {
        let bridge = Box::new(Bridge { call: None, state, args: Vec::new(), ends: Vec::new(), out: Vec::new(), panic: None });
        BridgeHandle(NonNull::from(Box::leak(bridge)))
    }

    /// The bridge, while nothing else uses it: the `Vm` calls this only
    /// outside Lua (between runs, or around one), never while a C
    /// function runs.
    /// The light userdata the C functions are made with.
    pub(super) fn as_upvalue(&self) -> *mut c_void {
        self.0.as_ptr().cast()
    }

    pub(super) fn get(&mut self) -> &mut Bridge {
        // SAFETY: allocated in `new`, freed only in `drop`; `&mut self`
        // and the caller's contract make this the one use.
        unsafe { self.0.as_mut() }
    }
}

impl Drop for BridgeHandle {
    fn drop(&mut self) {
        // SAFETY: from `Box::leak` in `new`, dropped once.
        drop(unsafe { Box::from_raw(self.0.as_ptr()) });
    }
}

impl Bridge {

    /// Serves `redis.call` from `call` until [`Bridge::leave`].
    ///
    /// # Safety
    /// `leave` must be called before `call`'s borrow ends, on every path
    /// (the `Vm` calls both around one run, with nothing between them that
    /// can leave the function early).
    pub(super) unsafe fn enter(&mut self, call: &mut Call<'_>) {
        let ptr: NonNull<Call<'_>> = NonNull::from(call);
        // SAFETY: only the lifetime is erased; the caller clears the
        // pointer before the borrow ends.
        self.call = Some(unsafe { std::mem::transmute::<NonNull<Call<'_>>, NonNull<Call<'static>>>(ptr) });
    }

    /// Stops serving `redis.call` (it answers "can only be called inside
    /// a script invocation" until the next run).
    pub(super) fn leave(&mut self) {
        self.call = None;
    }

}

/// What a function made by [`push_call_function`] does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// `redis.pcall`: a command's error is returned.
    Pcall = 0,
    /// `redis.call`: a command's error is raised.
    Call = 1,
    /// `redis.acl_check_cmd` (after its arguments were checked): whether
    /// the script's user may run the command, a boolean; runs nothing.
    AclCheck = 2,
}

/// Makes the function `mode` says over `bridge`, on the top of `state`'s
/// stack (`bridge`: [`BridgeHandle::as_upvalue`]).
///
/// # Safety
/// `state` is a Lua state with room for two values; the bridge outlives
/// every call of the function made (the `Vm` owns both, and drops the
/// bridge after the interpreter).
pub(super) unsafe fn push_call_function(state: *mut ffi::lua_State, bridge: *mut c_void, mode: Mode) {
    // SAFETY: as the function's contract; the closure takes its two
    // upvalues off the stack.
    unsafe {
        ffi::lua_pushlightuserdata(state, bridge);
        ffi::lua_pushinteger(state, mode as ffi::lua_Integer);
        ffi::lua_pushcclosure(state, redis_call, 2);
    }
}

/// `redis.call` / `redis.pcall` (Redis's `luaRedisGenericCommand`), and
/// `redis.acl_check_cmd`'s check ([`Mode`]).
unsafe extern "C-unwind" fn redis_call(state: *mut ffi::lua_State) -> c_int {
    // SAFETY (whole body): a C function Lua called, upvalue 1 the bridge
    // (`push_call_function`), alive and not otherwise borrowed while the
    // run is in Lua. This frame holds only the reference and integers, so
    // the raises below (lua_error, an allocation failing) skip nothing.
    unsafe {
        let bridge = &mut *ffi::lua_touserdata(state, ffi::lua_upvalueindex(1)).cast::<Bridge>();
        let mode = ffi::lua_tointeger(state, ffi::lua_upvalueindex(2));
        let (raise, acl) = (mode != Mode::Pcall as ffi::lua_Integer, mode == Mode::AclCheck as ffi::lua_Integer);
        let served = if bridge.state.killed.load(Relaxed) {
            fail(bridge, b"ERR Script killed: it ran past lua-time-limit")
        } else if read_args(state, bridge) {
            serve(bridge, acl)
        } else {
            fail(bridge, b"ERR Lua redis lib command arguments must be strings or integers")
        };
        ffi::lua_settop(state, 0);
        match served {
            Served::Reply if acl => ffi::lua_pushboolean(state, c_int::from(bridge.out.as_slice() == b":1\r\n")),
            Served::Reply => {
                if !push_reply(state, &bridge.out) {
                    ffi::lua_settop(state, 0);
                    push_error_table(state, b"ERR a command's reply did not parse back", false);
                } else if raise && is_error_table(state) {
                    ffi::lua_error(state);
                }
            }
            Served::Error { counted } => {
                push_error_table(state, &bridge.out, counted);
                if raise {
                    ffi::lua_error(state);
                }
            }
        }
        1
    }
}

/// Reads the call's arguments into the bridge: strings as they are,
/// numbers as `%.17g` (Redis: "Lua uses a format specifier that loses
/// precision"); `false` if one is anything else. Raises nothing: a
/// string's bytes are read in place, a number is formatted here.
///
/// # Safety
/// `state` runs [`redis_call`].
unsafe fn read_args(state: *mut ffi::lua_State, bridge: &mut Bridge) -> bool {
    bridge.args.clear();
    bridge.ends.clear();
    // SAFETY: indexes 1..=top are the call's arguments; a string's
    // pointer is valid for `len` bytes while the value is on the stack.
    unsafe {
        let n = ffi::lua_gettop(state);
        for i in 1..=n {
            match ffi::lua_type(state, i) {
                ffi::LUA_TSTRING => {
                    let mut len = 0usize;
                    let p = ffi::lua_tolstring(state, i, &mut len);
                    bridge.args.extend_from_slice(std::slice::from_raw_parts(p.cast::<u8>(), len));
                }
                ffi::LUA_TNUMBER => pmwire_resp::numbers::format_double(ffi::lua_tonumber(state, i), &mut bridge.args),
                _ => return false,
            }
            bridge.ends.push(bridge.args.len());
        }
    }
    true
}

/// Puts an error text in the bridge's output (an error of the bridge's
/// own, not a command's).
fn fail(bridge: &mut Bridge, text: &[u8]) -> Served {
    bridge.out.clear();
    bridge.out.extend_from_slice(text);
    Served::Error { counted: false }
}

/// Runs the call whose arguments [`read_args`] read: what owns memory
/// happens here, before any Lua call that may raise (module docs).
fn serve(bridge: &mut Bridge, acl: bool) -> Served {
    if bridge.ends.is_empty() {
        return fail(bridge, b"ERR Please specify at least one argument for this redis lib call");
    }
    let Some(mut call) = bridge.call.take() else {
        return fail(bridge, b"ERR redis.call/pcall can only be called inside a script invocation");
    };
    let resp = if acl { super::ACL_CHECK } else { bridge.state.resp.load(Relaxed) };
    let args = Args::new(&bridge.args, &bridge.ends);
    bridge.out.clear();
    let out = &mut bridge.out;
    // SAFETY: `call` was set by `Bridge::enter` for this run and is taken
    // out while it runs, so this is its only use.
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe { (call.as_mut())(&args, resp, out) }));
    bridge.call = Some(call);
    match result {
        Ok(Ok(())) => Served::Reply,
        Ok(Err(text)) => {
            bridge.out.clear();
            bridge.out.extend_from_slice(text.as_bytes());
            Served::Error { counted: true }
        }
        Err(payload) => {
            bridge.panic = Some(payload);
            // The run is stopped as a killed one is: no script may catch
            // this (`unless_killed`), and the Vm resumes the panic.
            bridge.state.killed.store(true, Relaxed);
            fail(bridge, b"ERR Script killed: the server panicked")
        }
    }
}

/// Whether the value on the top of the stack is a table with `err`.
///
/// # Safety
/// `state` has a value on its top and room for one more.
unsafe fn is_error_table(state: *mut ffi::lua_State) -> bool {
    // SAFETY: as the contract; the pushed field is popped.
    unsafe {
        if ffi::lua_type(state, -1) != ffi::LUA_TTABLE {
            return false;
        }
        ffi::lua_pushlstring(state, b"err".as_ptr().cast(), 3);
        ffi::lua_rawget(state, -2);
        let found = ffi::lua_type(state, -1) != ffi::LUA_TNIL;
        ffi::lua_settop(state, -2);
        found
    }
}

/// Pushes Redis's error table `{err = text}` (its `luaPushError`: see
/// [`error_parts`]), with `ignore_error_stats_update = true` if `counted`.
///
/// # Safety
/// `state` has room for three values; may raise (out of memory).
pub(super) unsafe fn push_error_table(state: *mut ffi::lua_State, text: &[u8], counted: bool) {
    // SAFETY: as the contract; each push is consumed by the set after it.
    unsafe {
        ffi::lua_createtable(state, 0, 2);
        match error_parts(text) {
            (Some(code), msg) => {
                push_bytes(state, code);
                push_bytes(state, b" ");
                push_bytes(state, msg);
                ffi::lua_concat(state, 3);
            }
            (None, text) => push_bytes(state, text),
        }
        ffi::lua_setfield(state, -2, c"err".as_ptr());
        if counted {
            ffi::lua_pushboolean(state, 1);
            ffi::lua_setfield(state, -2, c"ignore_error_stats_update".as_ptr());
        }
    }
}

/// Redis's `luaPushErrorBuff` text, cut at its first NUL: a text that
/// begins with `-` is split at its first space into code and message (no
/// space: the code is `ERR`), the message trimmed of `\r` and `\n` at both
/// ends; any other text is kept whole (`(None, text)`).
pub(super) fn error_parts(text: &[u8]) -> (Option<&[u8]>, &[u8]) {
    let text = super::c_str(text);
    let Some(rest) = text.strip_prefix(b"-") else { return (None, text) };
    let (code, msg) = split_error(rest);
    (Some(code), msg)
}

/// An error text after its `-`: its code (`ERR` if it has no space) and
/// its message, trimmed of `\r` and `\n` at both ends.
fn split_error(rest: &[u8]) -> (&[u8], &[u8]) {
    let (code, msg): (&[u8], &[u8]) = match rest.iter().position(|&c| c == b' ') {
        Some(sp) => (&rest[..sp], &rest[sp + 1..]),
        None => (b"ERR", rest),
    };
    let start = msg.iter().position(|&c| c != b'\r' && c != b'\n').unwrap_or(msg.len());
    let end = msg.iter().rposition(|&c| c != b'\r' && c != b'\n').map_or(start, |e| e + 1);
    (code, &msg[start..end])
}

/// # Safety
/// `state` has room for one value; may raise (out of memory).
unsafe fn push_bytes(state: *mut ffi::lua_State, bytes: &[u8]) {
    // SAFETY: Lua copies the bytes.
    unsafe {
        ffi::lua_pushlstring(state, bytes.as_ptr().cast(), bytes.len());
    }
}

/// Deepest nesting of a reply converted (the RESP reader's bound,
/// [`pmwire_resp::client::MAX_DEPTH`]).
const REPLY_DEPTH: usize = pmwire_resp::client::MAX_DEPTH;

/// Pushes the one reply `buf` holds as the Lua value Redis 7.0 gives a
/// script (`redisProtocolToLuaType`); `false` (with values left above the
/// stack's old top, for the caller to drop) if `buf` is not exactly one
/// well-formed reply.
///
/// # Safety
/// `state` runs a C function; may raise (out of memory).
unsafe fn push_reply(state: *mut ffi::lua_State, buf: &[u8]) -> bool {
    // SAFETY: as the contract.
    unsafe { matches!(push_value(state, buf, 0, 0), Some(end) if end == buf.len()) }
}

/// The line at `at` (up to CR LF) and where the next one starts.
fn line(buf: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let rest = buf.get(at..)?;
    let cr = rest.windows(2).position(|w| w == b"\r\n")?;
    Some((&rest[..cr], at + cr + 2))
}

fn number(s: &[u8]) -> Option<i64> {
    std::str::from_utf8(s).ok()?.parse().ok()
}

fn double(s: &[u8]) -> Option<f64> {
    match s {
        b"inf" => Some(f64::INFINITY),
        b"-inf" => Some(f64::NEG_INFINITY),
        b"nan" => Some(f64::NAN),
        _ => std::str::from_utf8(s).ok()?.parse().ok(),
    }
}

/// A bulk body of `len` bytes at `at`: the body and where the next reply
/// starts.
fn body(buf: &[u8], at: usize, len: i64) -> Option<(&[u8], usize)> {
    let end = at.checked_add(usize::try_from(len).ok()?)?;
    (buf.get(end..end.checked_add(2)?)? == b"\r\n").then(|| (&buf[at..end], end + 2))
}

/// Pushes the reply at `at` (nested `depth` deep): where the next starts,
/// or `None` if it is malformed or nested past [`REPLY_DEPTH`].
///
/// # Safety
/// As [`push_reply`].
unsafe fn push_value(state: *mut ffi::lua_State, buf: &[u8], at: usize, depth: usize) -> Option<usize> {
    if depth > REPLY_DEPTH {
        return None;
    }
    let tag = *buf.get(at)?;
    let (head, next) = line(buf, at + 1)?;
    // SAFETY: each arm pushes exactly one value; `lua_checkstack` makes
    // room for the levels of an aggregate.
    unsafe {
        match tag {
            b':' => ffi::lua_pushnumber(state, number(head)? as f64),
            b'+' => push_single(state, c"ok", |s| push_bytes(s, head)),
            b'-' => push_dashed_error(state, head),
            b'_' => ffi::lua_pushnil(state),
            b'#' => match head {
                b"t" => ffi::lua_pushboolean(state, 1),
                b"f" => ffi::lua_pushboolean(state, 0),
                _ => return None,
            },
            b',' => {
                let d = double(head)?;
                push_single(state, c"double", |s| ffi::lua_pushnumber(s, d));
            }
            b'(' => push_single(state, c"big_number", |s| push_bytes(s, head)),
            b'$' | b'!' | b'=' => return push_blob(state, buf, tag, number(head)?, next),
            b'*' | b'>' | b'~' | b'%' | b'|' => return push_aggregate(state, buf, tag, number(head)?, next, depth),
            _ => return None,
        }
    }
    Some(next)
}

/// `$`, `!` and `=`: a string, an error table, a verbatim string table.
///
/// # Safety
/// As [`push_reply`].
unsafe fn push_blob(state: *mut ffi::lua_State, buf: &[u8], tag: u8, len: i64, next: usize) -> Option<usize> {
    // SAFETY: each arm pushes one value.
    unsafe {
        if len == -1 && tag == b'$' {
            ffi::lua_pushboolean(state, 0);
            return Some(next);
        }
        let (b, end) = body(buf, next, len)?;
        match tag {
            b'$' => push_bytes(state, b),
            b'!' => push_dashed_error(state, b),
            _ => {
                if b.len() < 4 || b[3] != b':' {
                    return None;
                }
                let (format, text) = (&b[..3], &b[4..]);
                push_single(state, c"verbatim_string", |s| {
                    ffi::lua_createtable(s, 0, 2);
                    push_bytes(s, format);
                    ffi::lua_setfield(s, -2, c"format".as_ptr());
                    push_bytes(s, text);
                    ffi::lua_setfield(s, -2, c"string".as_ptr());
                });
            }
        }
        Some(end)
    }
}

/// `*`, `>`, `~`, `%` and `|`: an array, a `{set = ...}`, a `{map = ...}`;
/// an attribute is skipped and the reply after it pushed.
///
/// # Safety
/// As [`push_reply`].
unsafe fn push_aggregate(state: *mut ffi::lua_State, buf: &[u8], tag: u8, n: i64, next: usize, depth: usize) -> Option<usize> {
    // SAFETY: the aggregate's table is at -1 whenever an element is set
    // into it; each element's push is consumed by its set.
    unsafe {
        if n == -1 && tag == b'*' {
            ffi::lua_pushboolean(state, 0);
            return Some(next);
        }
        let n = usize::try_from(n).ok()?;
        if tag == b'|' {
            let mut p = next;
            for _ in 0..n.checked_mul(2)? {
                p = pmwire_resp::client::reply_len(buf.get(p..)?).ok()??.0.checked_add(p)?;
            }
            return push_value(state, buf, p, depth + 1);
        }
        ffi::luaL_checkstack(state, 4, c"reply nested too deeply for Lua".as_ptr());
        // Each element takes at least 3 bytes: never size a table past the input.
        let hint = c_int::try_from(n.min(buf.len().saturating_sub(next) / 3)).ok()?;
        let mut p = next;
        match tag {
            b'*' | b'>' => {
                ffi::lua_createtable(state, hint, 0);
                for i in 0..n {
                    p = push_value(state, buf, p, depth + 1)?;
                    ffi::lua_rawseti_(state, -2, c_int::try_from(i + 1).ok()?);
                }
            }
            b'~' => {
                ffi::lua_createtable(state, 0, hint);
                for _ in 0..n {
                    p = push_value(state, buf, p, depth + 1)?;
                    ffi::lua_pushboolean(state, 1);
                    ffi::lua_rawset(state, -3);
                }
                wrap(state, c"set");
            }
            _ => {
                ffi::lua_createtable(state, 0, hint);
                for _ in 0..n {
                    p = push_value(state, buf, p, depth + 1)?;
                    p = push_value(state, buf, p, depth + 1)?;
                    ffi::lua_rawset(state, -3);
                }
                wrap(state, c"map");
            }
        }
        Some(p)
    }
}

/// A command's error inside a reply (`-` or `!`), as Redis makes it
/// from `-<text>`: `{err = ..., ignore_error_stats_update = true}`.
///
/// # Safety
/// As [`push_reply`].
unsafe fn push_dashed_error(state: *mut ffi::lua_State, text: &[u8]) {
    // A NUL in the text ends it, as C reads the dashed copy.
    let (code, msg) = split_error(super::c_str(text));
    // SAFETY: as push_error_table.
    unsafe {
        ffi::lua_createtable(state, 0, 2);
        push_bytes(state, code);
        push_bytes(state, b" ");
        push_bytes(state, msg);
        ffi::lua_concat(state, 3);
        ffi::lua_setfield(state, -2, c"err".as_ptr());
        ffi::lua_pushboolean(state, 1);
        ffi::lua_setfield(state, -2, c"ignore_error_stats_update".as_ptr());
    }
}

/// Pushes `{key = v}`, `v` pushed by `push`.
///
/// # Safety
/// `state` has room for two values; `push` pushes exactly one.
unsafe fn push_single(state: *mut ffi::lua_State, key: &std::ffi::CStr, push: impl FnOnce(*mut ffi::lua_State)) {
    // SAFETY: as the contract.
    unsafe {
        ffi::lua_createtable(state, 0, 1);
        push(state);
        ffi::lua_setfield(state, -2, key.as_ptr());
    }
}

/// Replaces the value on the top with `{key = value}`.
///
/// # Safety
/// `state` has a value on its top and room for two more.
unsafe fn wrap(state: *mut ffi::lua_State, key: &std::ffi::CStr) {
    // SAFETY: as the contract.
    unsafe {
        ffi::lua_createtable(state, 0, 1);
        ffi::lua_insert(state, -2);
        ffi::lua_setfield(state, -2, key.as_ptr());
    }
}
