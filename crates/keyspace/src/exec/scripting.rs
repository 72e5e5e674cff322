//! Scripts: `EVAL EVALSHA EVAL_RO EVALSHA_RO` and `SCRIPT LOAD|EXISTS|
//! FLUSH|KILL`, with Redis 7.0's replies and errors; the interpreter and
//! its sandbox are [`crate::script`].
//!
//! A script runs inside one command: its `redis.call`s are executed by
//! [`Server::run_one`] in order, each staged in the caller's batch, so the
//! driver commits a script's writes with the rest of the batch, all or
//! nothing, as it commits an EXEC. As in Redis, a script that fails after
//! writing keeps those writes (its error is its reply); unlike Redis, a
//! script that runs past `lua-time-limit` is stopped and every write it
//! made is undone ([`Keyspace::abort_script`]), so no script can hold the
//! server and none is half-applied. Inside a script the commands Redis
//! flags `noscript` are refused, and blocking ones answer at once.
//!
//! The script cache: a script's body is kept by its SHA-1 as the internal
//! entry `03 <sha hex>` of a keyspace that has internal entries (so it is
//! durable and, in a cluster, replicated and in snapshots: every member
//! answers EVALSHA alike), and in the executor's memory otherwise. A
//! flush, which deletes every internal entry, stores them again in the
//! same command ([`Ctx::clear_keyspace`]): scripts outlive FLUSHALL, as
//! in Redis. Compiled
//! functions are cached in the interpreter by SHA-1. EVAL_RO runs its
//! script without adding it to the cache (it writes nothing, so a
//! cluster member can serve it alone; Redis caches it).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::commands::CommandInfo;
use super::{find_command, Ctx, Fail, Flow, Res, Server, Session};
use crate::script::{self, Answer, Outcome, Vm};
use crate::store::Keyspace;
use crate::capture::Capture;
use pmwire_resp::reply::{Out, Protocol, ReplySink};
use pmwire_resp::request::{Parsed, Request};

/// The tag of a script body's internal key (`03` + 40 hex digits).
pub const SCRIPT_TAG: u8 = 0x03;

/// The default `lua-time-limit` (Redis's `busy-reply-threshold`), ms.
pub const DEFAULT_TIME_LIMIT_MS: u64 = 5000;

/// The commands a script may not call: Redis 7.0's `noscript` flag (the
/// ones this executor has).
const NOSCRIPT: &[&str] = &[
    "auth", "bgsave", "blmove", "blpop", "brpop", "brpoplpush", "bzpopmax", "bzpopmin", "client|getname", "client|id", "client|info", "client|list", "client|setname", "client|unblock",
    "cluster|reset", "config|get", "config|resetstat", "config|set", "discard", "eval", "eval_ro", "evalsha", "evalsha_ro", "exec", "function|flush", "hello", "multi", "psubscribe",
    "punsubscribe", "quit", "reset", "ssubscribe", "subscribe", "sunsubscribe", "unsubscribe", "role", "save", "script|exists", "script|flush", "script|kill", "script|load", "shutdown", "unwatch", "wait",
    "watch", "acl|cat", "acl|deluser", "acl|dryrun", "acl|genpass", "acl|getuser", "acl|list", "acl|load", "acl|log", "acl|save",
    "acl|setuser", "acl|users", "acl|whoami", "fcall", "fcall_ro", "function|delete", "function|dump", "function|kill", "function|list", "function|load",
    "function|restore", "function|stats",
];

/// Whether a script may not call `spec` ([`NOSCRIPT`]), by the row's
/// index (the names compared once, not on every `redis.call`).
fn noscript(spec: &CommandInfo) -> bool {
    static ROWS: std::sync::OnceLock<Vec<bool>> = std::sync::OnceLock::new();
    let rows = ROWS.get_or_init(|| super::commands::table().iter().map(|c| NOSCRIPT.contains(&c.name)).collect());
    rows[super::commands::index(spec)]
}

/// A replicated executor's script budget ([`super::ServerConfig::script_budget`]):
/// 10^9 instructions, about 4 s of a tight loop on the machine of
/// `docs/bench.md`.
pub const DEFAULT_SCRIPT_BUDGET: u64 = 100_000;

/// An executor's script state: the interpreter (made when first needed)
/// and, for a keyspace without internal entries, the bodies. A driver
/// that makes an executor per entry keeps one and lends it to each
/// ([`Server::swap_scripts`]): the interpreter holds no state of a run
/// past it, and its compiled functions are named by their bodies' SHA-1.
#[derive(Debug, Default)]
pub struct Scripts {
    vm: Option<Vm>,
    bodies: HashMap<String, Vec<u8>>,
    /// Each compiled script's shebang flags ([`shebang`]).
    flags: HashMap<String, u8>,
    /// The function libraries (FUNCTION, FCALL).
    pub(super) functions: super::functions::Functions,
    /// The request a script's `redis.call` is handed over as (reused).
    parsed: Parsed,
}

fn body_key(sha: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + sha.len());
    k.push(SCRIPT_TAG);
    k.extend_from_slice(sha.as_bytes());
    k
}

impl Scripts {
    fn body<K: Keyspace>(&self, ks: &mut K, sha: &str) -> Option<Vec<u8>> {
        if ks.has_internal() {
            let mut out = Vec::new();
            ks.internal_read(&body_key(sha), &mut out).then_some(out)
        } else {
            self.bodies.get(sha).cloned()
        }
    }

    fn exists<K: Keyspace>(&self, ks: &mut K, sha: &str) -> bool {
        if ks.has_internal() {
            let mut key = [SCRIPT_TAG; 41];
            match sha.as_bytes().try_into() {
                Ok(hex) => {
                    let hex: &[u8; 40] = hex;
                    key[1..].copy_from_slice(hex);
                    ks.internal_exists(&key)
                }
                Err(_) => ks.internal_exists(&body_key(sha)),
            }
        } else {
            self.bodies.contains_key(sha)
        }
    }

    fn store<K: Keyspace>(&mut self, ks: &mut K, sha: &str, body: &[u8]) -> Res {
        if self.exists(ks, sha) {
            return Ok(());
        }
        if ks.has_internal() {
            ks.internal_put(&body_key(sha), body)?;
        } else {
            self.bodies.insert(sha.to_string(), body.to_vec());
        }
        Ok(())
    }

    /// How many scripts are stored (INFO's `number_of_cached_scripts`).
    pub(super) fn count<K: Keyspace>(&self, ks: &mut K) -> usize {
        if ks.has_internal() {
            script_keys(ks).iter().filter(|k| k.len() == 41).count()
        } else {
            self.bodies.len()
        }
    }

    fn vm(&mut self) -> Result<&mut Vm, Fail> {
        if self.vm.is_none() {
            self.vm = Some(Vm::new().map_err(|e| Fail::err(&format!("the Lua interpreter did not start: {e}")))?);
        }
        Ok(self.vm.as_mut().expect("made above"))
    }

    /// Compiles `body` (Redis's error text if its shebang is refused or
    /// it does not compile): the function and its [`shebang`] flags. A
    /// script compiled before needs no body.
    fn compile(&mut self, sha: &str, body: &[u8]) -> Result<(mlua::Function, u8), Fail> {
        let compiled = self.vm.as_ref().is_some_and(|vm| vm.is_compiled(sha));
        if let (true, Some(&flags)) = (compiled, self.flags.get(sha)) {
            return Ok((self.vm()?.function(sha, body).map_err(Fail::Text)?, flags));
        }
        let (flags, skip) = shebang(body)?;
        // As Redis: the shebang line is skipped, its line feed kept (line numbers hold).
        let function = self.vm()?.function(sha, &body[skip..]).map_err(Fail::Text)?;
        self.flags.insert(sha.to_string(), flags);
        Ok((function, flags))
    }
}

/// A script without a shebang line (Redis's `SCRIPT_FLAG_EVAL_COMPAT_MODE`):
/// its flags mean nothing, it runs as before Redis 7.0.
pub(super) const EVAL_COMPAT: u8 = 0x80;
/// The `no-writes` flag ([`script::FUNCTION_FLAGS`] bit 0).
pub(super) const NO_WRITES: u8 = 1;
/// The `allow-oom` flag ([`script::FUNCTION_FLAGS`] bit 1).
pub(super) const ALLOW_OOM: u8 = 2;

/// What the running script did and may do, for `redis.call`'s OOM check
/// (Redis's `SCRIPT_WRITE_DIRTY` and `SCRIPT_ALLOW_OOM`).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct ScriptRun {
    /// It called a write command.
    pub wrote: bool,
    /// Its shebang declares `allow-oom`.
    pub allow_oom: bool,
}

/// Redis 7.0's `evalExtractShebangFlags`: a body beginning `#!lua
/// [flags=a,b]` declares its flags; one without `#!` is [`EVAL_COMPAT`].
/// The flags and the shebang line's length (without its line feed).
fn shebang(body: &[u8]) -> Result<(u8, usize), Fail> {
    if !body.starts_with(b"#!") {
        return Ok((EVAL_COMPAT, 0));
    }
    let text = script::c_str(body);
    let Some(end) = text.iter().position(|&c| c == b'\n') else {
        return Err(Fail::err("Invalid script shebang"));
    };
    let parts = match super::functions::split_args(&text[..end]) {
        Some(p) if !p.is_empty() => p,
        _ => return Err(Fail::err("Invalid engine in script shebang")),
    };
    if parts[0] != b"#!lua" {
        return Err(Fail::Text(format!("ERR Unexpected engine in script shebang: {}", String::from_utf8_lossy(script::c_str(&parts[0])))));
    }
    let mut flags = 0u8;
    for part in &parts[1..] {
        let Some(list) = part.strip_prefix(b"flags=") else {
            return Err(Fail::Text(format!("ERR Unknown lua shebang option: {}", String::from_utf8_lossy(script::c_str(part)))));
        };
        if list.is_empty() {
            continue;
        }
        for flag in list.split(|&c| c == b',') {
            let Some(bit) = script::FUNCTION_FLAGS.iter().position(|f| f.as_bytes() == flag) else {
                return Err(Fail::Text(format!("ERR Unexpected flag in script shebang: {}", String::from_utf8_lossy(script::c_str(flag)))));
            };
            flags |= 1 << bit;
        }
    }
    Ok((flags, end))
}

impl Scripts {
}

/// Whether `name` is one of the EVAL family, which [`Server::execute`]
/// runs itself ([`Server::eval`]).
pub(crate) fn is_eval(name: &str) -> bool {
    matches!(name, "eval" | "evalsha" | "eval_ro" | "evalsha_ro" | "fcall" | "fcall_ro")
}

impl Server {
    /// Exchanges this executor's script state with `other`.
    pub fn swap_scripts(&mut self, other: &mut Scripts) {
        std::mem::swap(&mut self.scripts, other);
    }

    /// EVAL, EVALSHA, EVAL_RO, EVALSHA_RO (module docs).
    pub(crate) fn eval<K, S>(&mut self, spec: &CommandInfo, session: &mut Session, ks: &mut K, req: &Request<'_>, sink: &mut S) -> Flow
    where
        K: Keyspace,
        S: ReplySink<K::Value> + ?Sized,
    {
        if spec.name.starts_with("fcall") {
            return self.fcall(spec, session, ks, req, sink);
        }
        let mut out = Out::<K::Value, S>::new(sink, session.protocol);
        let by_sha = spec.name.starts_with("evalsha");
        let read_only = spec.name.ends_with("_ro");
        let Some(numkeys) = pmwire_resp::numbers::parse_i64(req.arg(2)) else {
            self.stats.error_reply(&mut out, b"ERR value is not an integer or out of range");
            return Flow::Continue;
        };
        let extra = (req.len() - 3) as i64;
        if numkeys > extra {
            self.stats.error_reply(&mut out, b"ERR Number of keys can't be greater than number of args");
            return Flow::Continue;
        }
        if numkeys < 0 {
            self.stats.error_reply(&mut out, b"ERR Number of keys can't be negative");
            return Flow::Continue;
        }
        // An EVALSHA's name is lower-cased on the stack; only EVAL's digest
        // is a new string.
        let mut hex = [0u8; 40];
        let digest;
        let (sha, body) = if by_sha {
            let given = req.arg(1);
            let sha = match std::str::from_utf8(given) {
                Ok(_) if given.len() == 40 => {
                    hex.copy_from_slice(given);
                    hex.make_ascii_lowercase();
                    std::str::from_utf8(&hex).expect("ASCII lower-cased stays UTF-8")
                }
                _ => "",
            };
            // A compiled script needs only to be still stored (a flush or
            // SCRIPT FLUSH elsewhere, EVAL_RO compiling without storing).
            let compiled = self.scripts.vm.as_ref().is_some_and(|vm| vm.is_compiled(sha));
            let body = if sha.len() != 40 {
                None
            } else if compiled {
                self.scripts.exists(ks, sha).then(Vec::new)
            } else {
                self.scripts.body(ks, sha)
            };
            let Some(body) = body else {
                self.stats.error_reply(&mut out, b"NOSCRIPT No matching script. Please use EVAL.");
                return Flow::Continue;
            };
            (sha, body)
        } else {
            let body = req.arg(1).to_vec();
            digest = script::sha1_hex(&body);
            (digest.as_str(), body)
        };
        let (function, flags) = match self.scripts.compile(sha, &body) {
            Ok(f) => f,
            Err(fail) => {
                self.stats.error_reply(&mut out, fail.text().as_bytes());
                return Flow::Continue;
            }
        };
        if !by_sha && !read_only {
            if let Err(fail) = self.scripts.store(ks, sha, &body) {
                self.stats.error_reply(&mut out, fail.text().as_bytes());
                return Flow::Continue;
            }
        }
        // Redis's scriptPrepareForRun: a script with a shebang is held to its flags.
        if flags & EVAL_COMPAT == 0 && flags & NO_WRITES == 0 && read_only {
            self.stats.error_reply(&mut out, b"ERR Can not execute a script with write flag using *_ro command.");
            return Flow::Continue;
        }
        if let Err(text) = self.prepare_run(flags) {
            self.stats.error_reply(&mut out, text);
            return Flow::Continue;
        }
        let read_only = read_only || (flags & EVAL_COMPAT == 0 && flags & NO_WRITES != 0);
        let numkeys = numkeys as usize;
        let keys: Vec<&[u8]> = (3..3 + numkeys).map(|i| req.arg(i)).collect();
        let args: Vec<&[u8]> = (3 + numkeys..req.len()).map(|i| req.arg(i)).collect();
        let mut vm = self.scripts.vm.take().expect("compiled above");
        let (outcome, script_resp) = self.run_script(&mut vm, &function, false, &keys, &args, read_only, session, ks);
        self.scripts.vm = Some(vm);
        self.reply_outcome(spec, outcome, script_resp, sha, session, ks, sink);
        Flow::Continue
    }

    /// Whether the script of an EVAL (`by_sha`: an EVALSHA naming it by
    /// `arg`) is `denyoom`: it has a shebang whose flags declare neither
    /// `no-writes` nor `allow-oom` (Redis's evalGetCommandFlags). A script
    /// not found, or whose shebang does not parse, is not (its own error
    /// answers it).
    pub(super) fn script_flags_deny<K: Keyspace>(&mut self, ks: &mut K, by_sha: bool, arg: &[u8], mask: u8) -> bool {
        let body;
        let text = if by_sha {
            let sha = String::from_utf8_lossy(arg).to_ascii_lowercase();
            if let Some(&flags) = self.scripts.flags.get(&sha) {
                return flags & EVAL_COMPAT == 0 && flags & mask == 0;
            }
            match self.scripts.body(ks, &sha) {
                Some(b) => {
                    body = b;
                    &body[..]
                }
                None => return false,
            }
        } else {
            arg
        };
        matches!(shebang(text), Ok((flags, _)) if flags & EVAL_COMPAT == 0 && flags & mask == 0)
    }

    /// Redis's scriptPrepareForRun, for memory: a script (or function)
    /// with flags that may write and do not allow OOM is refused when the
    /// command was admitted above `maxmemory`; else the run starts with no
    /// write made.
    pub(super) fn prepare_run(&mut self, flags: u8) -> Result<(), &'static [u8]> {
        let declared = flags & EVAL_COMPAT == 0;
        if declared && flags & (NO_WRITES | ALLOW_OOM) == 0 && self.config.maxmemory > 0 && self.oom_at_admission {
            return Err(b"OOM allow-oom flag is not set on the script, can not run it when used memory > 'maxmemory'");
        }
        self.script_run = ScriptRun { wrote: false, allow_oom: declared && flags & ALLOW_OOM != 0 };
        Ok(())
    }

    /// Runs a script (`as_function`: a library function, FCALL) in `vm`:
    /// how it ended and the protocol it asked for. Its writes are undone
    /// if it was stopped.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn run_script<K: Keyspace>(
        &mut self,
        vm: &mut Vm,
        function: &mlua::Function,
        as_function: bool,
        keys: &[&[u8]],
        args: &[&[u8]],
        read_only: bool,
        session: &mut Session,
        ks: &mut K,
    ) -> (Outcome, u8) {
        let seed = self.random_below(1 << 32) as u32;
        let limit = match self.config.script_budget {
            Some(steps) => script::Limit::Steps(steps),
            None if self.config.lua_time_limit_ms == 0 => script::Limit::None,
            None => Instant::now().checked_add(Duration::from_millis(self.config.lua_time_limit_ms)).map_or(script::Limit::None, script::Limit::Deadline),
        };
        ks.begin_script();
        let deny_blocking = std::mem::replace(&mut self.deny_blocking, true);
        let in_script = std::mem::replace(&mut self.in_script, true);
        let mut call = |argv: &script::Args<'_>, resp: u8, out: &mut Vec<u8>| self.script_call(session, ks, argv, resp, read_only, out);
        let outcome = if as_function {
            vm.run_function(function, keys, args, seed, limit, &mut call)
        } else {
            vm.run(function, keys, args, seed, limit, &mut call)
        };
        self.deny_blocking = deny_blocking;
        self.in_script = in_script;
        if matches!(outcome, Outcome::Killed) {
            ks.abort_script();
        }
        (outcome, vm.script_resp())
    }

    /// Answers how the script `name` (a SHA-1, or a function's name), run
    /// by `spec`, ended; its errors counted as Redis counts them ([`super::stats`]).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn reply_outcome<K, S>(&mut self, spec: &CommandInfo, outcome: Outcome, script_resp: u8, name: &str, session: &Session, _ks: &mut K, sink: &mut S)
    where
        K: Keyspace,
        S: ReplySink<K::Value> + ?Sized,
    {
        let mut out = Out::<K::Value, S>::new(sink, session.protocol);
        match outcome {
            Outcome::Returned(value) => write_answer(&mut out, &script::answer_of(&value, script_resp, 0), &mut |counted, text| {
                if counted {
                    self.stats.failed_uncounted(spec);
                } else {
                    self.stats.error(text);
                }
            }),
            Outcome::Failed(mut text, at, counted) => {
                if let Some(at) = at {
                    text.extend_from_slice(format!(" script: {name}, on {at}.").as_bytes());
                }
                let line = script::reply_line(&text);
                if counted {
                    self.stats.failed_uncounted(spec);
                    out.error(&line);
                } else {
                    self.stats.error_reply(&mut out, &line);
                }
            }
            Outcome::Killed => {
                let text = match self.config.script_budget {
                    Some(steps) => format!("ERR Script killed: it ran past its budget of {steps} steps of {} instructions; every write it made was undone script: {name}", script::HOOK_EVERY),
                    None => format!("ERR Script killed: it ran past lua-time-limit ({} ms); every write it made was undone script: {name}", self.config.lua_time_limit_ms),
                };
                self.stats.error_reply(&mut out, text.as_bytes());
            }
        }
    }

    /// One `redis.call` of a running script: its reply, in the script's
    /// protocol `resp`, appended to `out` as RESP, or Redis's error for a
    /// call that could not run (counted as Redis's `scriptCall` counts a
    /// refusal). With [`script::ACL_CHECK`] for `resp`, nothing runs:
    /// `redis.acl_check_cmd`'s answer, `:1` if the caller may run it.
    fn script_call<K: Keyspace>(&mut self, session: &mut Session, ks: &mut K, argv: &script::Args<'_>, resp: u8, read_only: bool, out: &mut Vec<u8>) -> Result<(), String> {
        if resp == script::ACL_CHECK {
            // redis.acl_check_cmd: the caller's permission, nothing run or logged.
            let info = super::row_of(argv.len(), |i| argv.get(i)).ok_or_else(|| "ERR Invalid command passed to redis.acl_check_cmd()".to_string())?;
            let args: Vec<&[u8]> = argv.iter().collect();
            let allowed = self.users.check(session.user(), info.name, info.flags.contains(super::commands::Flags::NO_AUTH), &args).is_ok();
            out.extend_from_slice(if allowed { b":1\r\n" } else { b":0\r\n" });
            return Ok(());
        }
        self.script_call_admitted(session, ks, argv, resp, read_only, out).map_err(|text| {
            self.stats.rejected_in_script(super::row_of(argv.len(), |i| argv.get(i)), text.as_bytes());
            text
        })
    }

    fn script_call_admitted<K: Keyspace>(&mut self, session: &mut Session, ks: &mut K, argv: &script::Args<'_>, resp: u8, read_only: bool, out: &mut Vec<u8>) -> Result<(), String> {
        let spec = find_command(argv.len(), |i| argv.get(i)).map_err(|e| {
            if e.starts_with("ERR wrong number of arguments") {
                "ERR Wrong number of args calling Redis command from script".to_string()
            } else if e.starts_with("ERR unknown command") {
                "ERR Unknown Redis command called from script".to_string()
            } else {
                e
            }
        })?;
        if noscript(spec) {
            return Err("ERR This Redis command is not allowed from script".into());
        }
        // Redis's scriptVerifyACL (nothing to build for a user who may run anything).
        if !self.users.unrestricted(&session.user) {
            let args: Vec<&[u8]> = argv.iter().collect();
            let now = ks.now_ms();
            self.acl_check(session, spec, &args, "lua", now)?;
        }
        if read_only && spec.flags.contains(super::commands::Flags::WRITE) {
            return Err("ERR Write commands are not allowed from read-only scripts.".into());
        }
        // Redis's scriptVerifyOOM: the first write of a script that began
        // above maxmemory is refused; after a write, none is (a script is
        // not stopped half-way).
        let run = self.script_run;
        if self.config.maxmemory > 0 && !run.allow_oom && !run.wrote && self.oom_at_admission && spec.flags.contains(super::commands::Flags::DENYOOM) {
            return Err(super::OOM_ERROR.into());
        }
        // scriptVerifyWriteCommandAllow: the first write needs enough good replicas.
        if spec.flags.contains(super::commands::Flags::WRITE) && !run.wrote && !self.config.enough_replicas() {
            return Err(super::NOREPLICAS_ERROR.into());
        }
        if spec.flags.contains(super::commands::Flags::WRITE) {
            self.script_run.wrote = true;
        }
        // The arguments are handed over where they lie: a request over the
        // call's one buffer, held to the limits a client's request is.
        let limits = self.config.limits;
        let mut parsed = std::mem::take(&mut self.scripts.parsed);
        if parsed.limits() != limits {
            parsed = Parsed::new(limits);
        }
        let (bytes, ends) = argv.parts();
        if !parsed.set_command(ends) {
            self.scripts.parsed = parsed;
            return Err("ERR the command's arguments exceed this server's request limits".into());
        }
        let segments: [&[u8]; 1] = [bytes];
        let req = parsed.request(&segments, 0);
        let saved = session.protocol;
        session.protocol = if resp == 3 { Protocol::Resp3 } else { Protocol::Resp2 };
        let mut capture = Capture::reusing(std::mem::take(out));
        self.commands_processed += 1;
        self.counted(spec, |server| server.run_one(spec, session, ks, &req, &mut capture));
        if !spec.flags.contains(super::commands::Flags::ADMIN) {
            self.feed_monitors(session, ks, &req, true);
        }
        session.protocol = saved;
        self.scripts.parsed = parsed;
        *out = capture.finish(ks);
        Ok(())
    }
}

/// Writes a script's answer.
/// `error(counted, text)` is told of each error written: `counted` if it
/// is a command's, already in the statistics.
fn write_answer<V, S: ReplySink<V> + ?Sized>(out: &mut Out<'_, V, S>, answer: &Answer, error: &mut dyn FnMut(bool, &[u8])) {
    let resp3 = out.protocol == Protocol::Resp3;
    match answer {
        Answer::Bulk(b) => out.bulk(b),
        Answer::Integer(n) => out.integer(*n),
        Answer::Null => out.null(),
        Answer::Boolean(b) if resp3 => out.raw(if *b { b"#t\r\n" } else { b"#f\r\n" }),
        Answer::Boolean(b) => out.integer(i64::from(*b)),
        Answer::Status(s) => out.simple(s),
        Answer::Error(e) => {
            error(false, e);
            out.error(e);
        }
        Answer::CommandError(e) => {
            error(true, e);
            out.error(e);
        }
        Answer::Double(d) => out.double(*d),
        Answer::BigNumber(n) if resp3 => {
            out.raw(b"(");
            out.raw(n);
            out.raw(b"\r\n");
        }
        Answer::BigNumber(n) => out.bulk(n),
        Answer::Verbatim(format, text) => out.verbatim(format, text),
        Answer::Array(items) => {
            out.array(items.len());
            items.iter().for_each(|i| write_answer(out, i, error));
        }
        Answer::Map(pairs) => {
            out.map(pairs.len());
            for (k, v) in pairs {
                write_answer(out, k, error);
                write_answer(out, v, error);
            }
        }
        Answer::Set(items) => {
            out.set(items.len());
            items.iter().for_each(|i| write_answer(out, i, error));
        }
    }
}

/// SCRIPT LOAD: compiles the body and keeps it; answers its SHA-1.
pub(super) fn script_load<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let body = c.arg(2);
    let sha = script::sha1_hex(body);
    c.server.scripts.compile(&sha, body)?;
    c.server.scripts.store(c.ks, &sha, body)?;
    c.out.bulk(sha.as_bytes());
    Ok(())
}

/// SCRIPT EXISTS sha...: 1 or 0 for each.
pub(super) fn script_exists<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let n = c.argc() - 2;
    let found: Vec<bool> = (2..c.argc())
        .map(|i| {
            let sha = String::from_utf8_lossy(c.arg(i)).to_ascii_lowercase();
            sha.len() == 40 && c.server.scripts.exists(c.ks, &sha)
        })
        .collect();
    c.out.array(n);
    found.into_iter().for_each(|f| c.out.integer(i64::from(f)));
    Ok(())
}

/// The internal keys of the stored scripts, in order.
fn script_keys<K: Keyspace>(ks: &mut K) -> Vec<Vec<u8>> {
    // Only `03` and 40 hex digits: another layer's entry that shares the
    // tag (a cluster's streamed pieces did) is not a script.
    let mut keys = tagged_keys(ks, SCRIPT_TAG);
    keys.retain(|k| k.len() == 41 && k[1..].iter().all(u8::is_ascii_hexdigit));
    keys
}

/// The internal keys whose first byte is `tag`, in order.
pub(super) fn tagged_keys<K: Keyspace>(ks: &mut K, tag: u8) -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = Vec::new();
    if !ks.has_internal() {
        return keys;
    }
    let mut from = vec![tag];
    loop {
        let mut batch: Vec<Vec<u8>> = Vec::new();
        ks.internal_scan(&from, 1024, &mut |k| batch.push(k.to_vec()));
        let full = batch.len() == 1024;
        let past = batch.iter().any(|k| k.first() != Some(&tag));
        batch.retain(|k| k.first() == Some(&tag));
        if let Some(last) = batch.last() {
            from = last.clone();
            from.push(0);
        }
        keys.extend(batch);
        if !full || past {
            return keys;
        }
    }
}

/// The stored scripts' and function libraries' internal entries (key,
/// bytes), to keep across a flush.
pub(super) fn stored_scripts<K: Keyspace>(ks: &mut K) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut keys = script_keys(ks);
    keys.extend(tagged_keys(ks, super::functions::LIBRARY_TAG));
    keys.into_iter()
        .filter_map(|k| {
            let mut body = Vec::new();
            ks.internal_read(&k, &mut body).then_some((k, body))
        })
        .collect()
}

/// SCRIPT FLUSH [ASYNC|SYNC]: forgets every script and starts a fresh
/// interpreter.
pub(super) fn script_flush<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    if c.argc() > 3 || (c.argc() == 3 && !c.arg(2).eq_ignore_ascii_case(b"sync") && !c.arg(2).eq_ignore_ascii_case(b"async")) {
        return Err(Fail::err("SCRIPT FLUSH only support SYNC|ASYNC option"));
    }
    for k in script_keys(c.ks) {
        c.ks.internal_delete(&k)?;
    }
    c.server.scripts.bodies.clear();
    c.server.scripts.flags.clear();
    c.server.scripts.vm = None;
    c.out.ok();
    Ok(())
}

/// SCRIPT KILL: one thread serves every client, so no script is ever
/// running when this is read (a script past `lua-time-limit` stops itself).
pub(super) fn script_kill<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(_c: &mut Ctx<'_, '_, K, S>) -> Res {
    Err(Fail::Text("NOTBUSY No scripts in execution right now.".into()))
}
