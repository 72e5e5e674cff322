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
use pmwire_resp::client::{encode_request, parse_reply};
use pmwire_resp::reply::{Out, Protocol, ReplySink};
use pmwire_resp::request::{Limits, Parsed, Request};

/// The tag of a script body's internal key (`03` + 40 hex digits).
pub const SCRIPT_TAG: u8 = 0x03;

/// The default `lua-time-limit` (Redis's `busy-reply-threshold`), ms.
pub const DEFAULT_TIME_LIMIT_MS: u64 = 5000;

/// The commands a script may not call: Redis 7.0's `noscript` flag (the
/// ones this executor has).
const NOSCRIPT: &[&str] = &[
    "auth", "bgsave", "blmove", "blpop", "brpop", "brpoplpush", "client|getname", "client|id", "client|info", "client|list", "client|setname", "client|unblock",
    "config|get", "config|set", "discard", "eval", "eval_ro", "evalsha", "evalsha_ro", "exec", "function|flush", "hello", "multi", "psubscribe",
    "punsubscribe", "quit", "reset", "ssubscribe", "subscribe", "sunsubscribe", "unsubscribe", "role", "save", "script|exists", "script|flush", "script|kill", "script|load", "shutdown", "unwatch", "wait",
    "watch", "acl|whoami",
];

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
            ks.internal_get(&body_key(sha)).is_some()
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

    fn vm(&mut self) -> Result<&mut Vm, Fail> {
        if self.vm.is_none() {
            self.vm = Some(Vm::new().map_err(|e| Fail::err(&format!("the Lua interpreter did not start: {e}")))?);
        }
        Ok(self.vm.as_mut().expect("made above"))
    }

    /// Compiles `body` (Redis's error text if it does not compile).
    fn compile(&mut self, sha: &str, body: &[u8]) -> Result<mlua::Function, Fail> {
        self.vm()?.function(sha, body).map_err(Fail::Text)
    }
}

/// Whether `name` is one of the EVAL family, which [`Server::execute`]
/// runs itself ([`Server::eval`]).
pub(crate) fn is_eval(name: &str) -> bool {
    matches!(name, "eval" | "evalsha" | "eval_ro" | "evalsha_ro")
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
        let mut out = Out::<K::Value, S>::new(sink, session.protocol);
        let by_sha = spec.name.starts_with("evalsha");
        let read_only = spec.name.ends_with("_ro");
        let Some(numkeys) = pmwire_resp::numbers::parse_i64(req.arg(2)) else {
            out.error(b"ERR value is not an integer or out of range");
            return Flow::Continue;
        };
        let extra = (req.len() - 3) as i64;
        if numkeys > extra {
            out.error(b"ERR Number of keys can't be greater than number of args");
            return Flow::Continue;
        }
        if numkeys < 0 {
            out.error(b"ERR Number of keys can't be negative");
            return Flow::Continue;
        }
        let (sha, body) = if by_sha {
            let sha = String::from_utf8_lossy(req.arg(1)).to_ascii_lowercase();
            // A compiled script needs only to be still stored (a flush or
            // SCRIPT FLUSH elsewhere, EVAL_RO compiling without storing).
            let compiled = self.scripts.vm.as_ref().is_some_and(|vm| vm.is_compiled(&sha));
            let body = if sha.len() != 40 {
                None
            } else if compiled {
                self.scripts.exists(ks, &sha).then(Vec::new)
            } else {
                self.scripts.body(ks, &sha)
            };
            let Some(body) = body else {
                out.error(b"NOSCRIPT No matching script. Please use EVAL.");
                return Flow::Continue;
            };
            (sha, body)
        } else {
            let body = req.arg(1).to_vec();
            (script::sha1_hex(&body), body)
        };
        let function = match self.scripts.compile(&sha, &body) {
            Ok(f) => f,
            Err(fail) => {
                out.error(fail.text().as_bytes());
                return Flow::Continue;
            }
        };
        if !by_sha && !read_only {
            if let Err(fail) = self.scripts.store(ks, &sha, &body) {
                out.error(fail.text().as_bytes());
                return Flow::Continue;
            }
        }
        let numkeys = numkeys as usize;
        let keys: Vec<&[u8]> = (3..3 + numkeys).map(|i| req.arg(i)).collect();
        let args: Vec<&[u8]> = (3 + numkeys..req.len()).map(|i| req.arg(i)).collect();
        let seed = self.random_below(1 << 32) as u32;
        let limit = match self.config.script_budget {
            Some(steps) => script::Limit::Steps(steps),
            None if self.config.lua_time_limit_ms == 0 => script::Limit::None,
            None => Instant::now().checked_add(Duration::from_millis(self.config.lua_time_limit_ms)).map_or(script::Limit::None, script::Limit::Deadline),
        };
        let mut vm = self.scripts.vm.take().expect("compiled above");
        ks.begin_script();
        let deny_blocking = std::mem::replace(&mut self.deny_blocking, true);
        let in_script = std::mem::replace(&mut self.in_script, true);
        let outcome = vm.run(&function, &keys, &args, seed, limit, &mut |argv, resp| self.script_call(session, ks, argv, resp, read_only));
        self.deny_blocking = deny_blocking;
        self.in_script = in_script;
        let script_resp = vm.script_resp();
        self.scripts.vm = Some(vm);
        let mut out = Out::<K::Value, S>::new(sink, session.protocol);
        match outcome {
            Outcome::Returned(value) => write_answer(&mut out, &script::answer_of(&value, script_resp, 0)),
            Outcome::Failed(mut text, at) => {
                if let Some(at) = at {
                    text.extend_from_slice(format!(" script: {sha}, on {at}.").as_bytes());
                }
                out.error(&script::reply_line(&text));
            }
            Outcome::Killed => {
                ks.abort_script();
                let text = match self.config.script_budget {
                    Some(steps) => format!("ERR Script killed: it ran past its budget of {steps} steps of {} instructions; every write it made was undone script: {sha}", script::HOOK_EVERY),
                    None => format!("ERR Script killed: it ran past lua-time-limit ({} ms); every write it made was undone script: {sha}", self.config.lua_time_limit_ms),
                };
                out.error(text.as_bytes());
            }
        }
        Flow::Continue
    }

    /// One `redis.call` of a running script: its reply, in the script's
    /// protocol `resp`, or Redis's error for a call that could not run.
    fn script_call<K: Keyspace>(&mut self, session: &mut Session, ks: &mut K, argv: &[Vec<u8>], resp: u8, read_only: bool) -> Result<pmwire_resp::client::Value, String> {
        let spec = find_command(argv.len(), |i| &argv[i]).map_err(|e| {
            if e.starts_with("ERR wrong number of arguments") {
                "ERR Wrong number of args calling Redis command from script".to_string()
            } else if e.starts_with("ERR unknown command") {
                "ERR Unknown Redis command called from script".to_string()
            } else {
                e
            }
        })?;
        if NOSCRIPT.contains(&spec.name) {
            return Err("ERR This Redis command is not allowed from script".into());
        }
        if read_only && spec.flags.contains(super::commands::Flags::WRITE) {
            return Err("ERR Write commands are not allowed from read-only scripts.".into());
        }
        let mut encoded = Vec::new();
        encode_request(argv, &mut encoded);
        let limits = Limits { max_commands: u32::MAX, ..self.config.limits };
        let mut parsed = Parsed::new(limits);
        let segments: [&[u8]; 1] = [&encoded];
        let summary = parsed.parse(&segments);
        if summary.commands != 1 || summary.consumed != encoded.len() {
            return Err("ERR the command's arguments exceed this server's request limits".into());
        }
        parsed.forget_pieces();
        let req = parsed.request(&segments, 0);
        let saved = session.protocol;
        session.protocol = if resp == 3 { Protocol::Resp3 } else { Protocol::Resp2 };
        let mut capture = Capture::new();
        self.commands_processed += 1;
        self.run_one(spec, session, ks, &req, &mut capture);
        if !spec.flags.contains(super::commands::Flags::ADMIN) {
            self.feed_monitors(session, ks, &req, true);
        }
        session.protocol = saved;
        let bytes = capture.finish(ks);
        match parse_reply(&bytes) {
            Ok(Some((reply, used))) if used == bytes.len() => Ok(reply),
            _ => Err("ERR a command's reply did not parse back".into()),
        }
    }
}

/// Writes a script's answer.
fn write_answer<V, S: ReplySink<V> + ?Sized>(out: &mut Out<'_, V, S>, answer: &Answer) {
    let resp3 = out.protocol == Protocol::Resp3;
    match answer {
        Answer::Bulk(b) => out.bulk(b),
        Answer::Integer(n) => out.integer(*n),
        Answer::Null => out.null(),
        Answer::Boolean(b) if resp3 => out.raw(if *b { b"#t\r\n" } else { b"#f\r\n" }),
        Answer::Boolean(b) => out.integer(i64::from(*b)),
        Answer::Status(s) => out.simple(s),
        Answer::Error(e) => out.error(e),
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
            items.iter().for_each(|i| write_answer(out, i));
        }
        Answer::Map(pairs) => {
            out.map(pairs.len());
            for (k, v) in pairs {
                write_answer(out, k);
                write_answer(out, v);
            }
        }
        Answer::Set(items) => {
            out.set(items.len());
            items.iter().for_each(|i| write_answer(out, i));
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
    let mut keys: Vec<Vec<u8>> = Vec::new();
    if !ks.has_internal() {
        return keys;
    }
    let mut from = vec![SCRIPT_TAG];
    loop {
        let mut batch: Vec<Vec<u8>> = Vec::new();
        ks.internal_scan(&from, 1024, &mut |k| batch.push(k.to_vec()));
        let full = batch.len() == 1024;
        let past = batch.iter().any(|k| k.first() != Some(&SCRIPT_TAG));
        batch.retain(|k| k.first() == Some(&SCRIPT_TAG));
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

/// The stored scripts' internal entries (key, body), to keep across a flush.
pub(super) fn stored_scripts<K: Keyspace>(ks: &mut K) -> Vec<(Vec<u8>, Vec<u8>)> {
    script_keys(ks)
        .into_iter()
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
    c.server.scripts.vm = None;
    c.out.ok();
    Ok(())
}

/// FUNCTION FLUSH [ASYNC|SYNC]: Redis 7.0's function libraries are not
/// served (FUNCTION LOAD is unknown), so there is never one to delete; the
/// command answers as Redis's does with none loaded, with its errors.
/// Redis's own test suite sends it before every unit in external mode.
pub(super) fn function_flush<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    if c.argc() > 3 {
        return Err(Fail::Text(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try FUNCTION HELP.",
            String::from_utf8_lossy(c.arg(1))
        )));
    }
    if c.argc() == 3 && !c.arg(2).eq_ignore_ascii_case(b"sync") && !c.arg(2).eq_ignore_ascii_case(b"async") {
        return Err(Fail::err("FUNCTION FLUSH only supports SYNC|ASYNC option"));
    }
    c.out.ok();
    Ok(())
}

/// SCRIPT KILL: one thread serves every client, so no script is ever
/// running when this is read (a script past `lua-time-limit` stops itself).
pub(super) fn script_kill<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(_c: &mut Ctx<'_, '_, K, S>) -> Res {
    Err(Fail::Text("NOTBUSY No scripts in execution right now.".into()))
}
