//! Redis 7.0's functions: `FUNCTION LOAD|DELETE|FLUSH|LIST|STATS|KILL|
//! DUMP|RESTORE|HELP` and `FCALL`/`FCALL_RO`, with Redis's replies and
//! errors (`functions.c`, `function_lua.c`). The interpreter side (the
//! loading run's API, `redis.register_function`) is
//! [`crate::script::Vm::load_library`].
//!
//! **Where libraries live.** The keyspace is the truth: each library's
//! code is the internal entry `05 ‖ name` (`docs/FORMAT.md`, "Internal
//! keys"), and the entry `05` alone holds a SHA-1 digest of every library
//! (none: no library). A change (LOAD, DELETE, FLUSH, RESTORE) stages its
//! entries and the new digest in the command's batch, so a library is
//! durable when FUNCTION LOAD answers, replicated with the command on a
//! cluster member, and carried by snapshots; a flush keeps them (FLUSHALL
//! does not remove functions in Redis 7.0, [`super::Ctx::clear_keyspace`]).
//!
//! **What memory holds.** [`Functions`] is a cache of the stored
//! libraries: their own interpreter (Redis keeps functions in a Lua state
//! apart from EVAL's), each library's registered functions and an index
//! by function name, and the digest it was built from. Every command here
//! first compares that digest with the stored one and, if they differ (a
//! server started on a pool, a snapshot installed, a keyspace swapped in
//! a test), loads every stored library again in a fresh interpreter. So
//! memory never answers for a state the keyspace does not hold. A keyspace
//! without internal entries keeps the libraries in the cache alone.
//!
//! Deviation: a library name is at most [`MAX_LIBRARY_NAME`] bytes (the
//! engine's key limit); Redis has none.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use super::commands::CommandInfo;
use super::{Ctx, Fail, Flow, Res, Server, Session};
use crate::script::{self, Limit, Registered, Vm, FUNCTION_FLAGS};
use crate::store::Keyspace;
use pmwire_resp::reply::{Out, ReplySink};
use pmwire_resp::request::Request;

/// The tag of the functions' internal keys: `05 ‖ library name` holds a
/// library, `05` alone the digest of them all.
pub const LIBRARY_TAG: u8 = 0x05;

/// Longest library name stored (an internal key is at most 254 bytes).
pub const MAX_LIBRARY_NAME: usize = 253;

/// Redis's `LOAD_TIMEOUT_MS`: a library's loading run is stopped after it.
pub const LOAD_TIMEOUT_MS: u64 = 500;

/// A library record's header: code length u32 LE, SHA-1 of the code.
const RECORD_HEADER: usize = 4 + 20;

/// FUNCTION DUMP's payload: magic, version u16 LE, 0 u16, count u32 LE,
/// then per library its code length u32 LE and code, then the SHA-1 of
/// everything before it.
const DUMP_MAGIC: &[u8; 4] = b"PMFN";
const DUMP_VERSION: u16 = 1;
const DUMP_HEADER: usize = 12;
const DUMP_TRAILER: usize = 20;

use super::scripting::NO_WRITES;

const LIBRARY_NAME_TEXT: &str = "Library names can only contain letters, numbers, or underscores(_) and must be at least one character long";

/// The libraries, as loaded in memory (module docs).
#[derive(Debug, Default)]
pub struct Functions {
    /// The stored digest this cache was built from (empty: no library);
    /// `None`: not built, or a change failed part-way.
    synced: Option<Vec<u8>>,
    vm: Option<Vm>,
    /// Every stored library's code, by name.
    codes: BTreeMap<String, Vec<u8>>,
    /// The functions each library registered, by library name.
    loaded: BTreeMap<String, Vec<Registered>>,
    /// Function name, lower-cased → its library (Redis's function names
    /// are case-insensitive across libraries, case-sensitive within one).
    index: HashMap<String, String>,
}

fn library_key(name: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + name.len());
    k.push(LIBRARY_TAG);
    k.extend_from_slice(name.as_bytes());
    k
}

/// A library's internal entry: code length u32 LE, SHA-1 of the code, code.
fn encode_record(code: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(RECORD_HEADER + code.len());
    out.extend_from_slice(&(code.len() as u32).to_le_bytes());
    out.extend_from_slice(&sha1_smol::Sha1::from(code).digest().bytes());
    out.extend_from_slice(code);
    out
}

fn decode_record(name: &str, record: &[u8]) -> Result<Vec<u8>, Fail> {
    let corrupt = |why: &str| Fail::Text(format!("ERR stored value is corrupt: function library '{name}': {why}"));
    if record.len() < RECORD_HEADER {
        return Err(corrupt("shorter than its header"));
    }
    let len = u32::from_le_bytes(record[..4].try_into().expect("4 bytes")) as usize;
    let code = &record[RECORD_HEADER..];
    if code.len() != len {
        return Err(corrupt("length does not match"));
    }
    if sha1_smol::Sha1::from(code).digest().bytes()[..] != record[4..RECORD_HEADER] {
        return Err(corrupt("checksum does not match"));
    }
    Ok(code.to_vec())
}

/// The digest of a set of libraries (empty for none): SHA-1 over, in name
/// order, name length u32 LE, name, code length u32 LE, code.
fn digest_of(codes: &BTreeMap<String, Vec<u8>>) -> Vec<u8> {
    if codes.is_empty() {
        return Vec::new();
    }
    let mut h = sha1_smol::Sha1::new();
    for (name, code) in codes {
        h.update(&(name.len() as u32).to_le_bytes());
        h.update(name.as_bytes());
        h.update(&(code.len() as u32).to_le_bytes());
        h.update(code);
    }
    h.digest().bytes().to_vec()
}

/// The internal keys of the stored libraries (and the digest), in order.
fn library_keys<K: Keyspace>(ks: &mut K) -> Vec<Vec<u8>> {
    super::scripting::tagged_keys(ks, LIBRARY_TAG)
}

/// Redis's `sdssplitargs` on a shebang line, enough for `#!lua name=x`:
/// words split at spaces, double and single quotes honoured; `None` for
/// unbalanced quotes.
pub(super) fn split_args(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        while i < line.len() && line[i].is_ascii_whitespace() {
            i += 1;
        }
        if i == line.len() {
            return Some(out);
        }
        let mut word = Vec::new();
        let mut quote: Option<u8> = None;
        loop {
            if i == line.len() {
                if quote.is_some() {
                    return None;
                }
                break;
            }
            let c = line[i];
            match quote {
                Some(q) if c == b'\\' && q == b'"' && i + 1 < line.len() => {
                    word.push(line[i + 1]);
                    i += 1;
                }
                Some(q) if c == q => {
                    // A closing quote must be followed by a space or the end.
                    if i + 1 < line.len() && !line[i + 1].is_ascii_whitespace() {
                        return None;
                    }
                    i += 1;
                    break;
                }
                Some(_) => word.push(c),
                None if c.is_ascii_whitespace() => break,
                None if c == b'"' || c == b'\'' => quote = Some(c),
                None => word.push(c),
            }
            i += 1;
        }
        out.push(word);
    }
}

/// A library's metadata (Redis's `functionExtractLibMetaData`): its
/// engine, its name, and its code from the shebang line's newline on.
struct Metadata<'a> {
    engine: Vec<u8>,
    name: Vec<u8>,
    code: &'a [u8],
}

fn metadata(payload: &[u8]) -> Result<Metadata<'_>, Fail> {
    if !payload.starts_with(b"#!") {
        return Err(Fail::err("Missing library metadata"));
    }
    // Redis reads the payload as a C string (strchr).
    let text = script::c_str(payload);
    let Some(end) = text.iter().position(|&c| c == b'\n') else {
        return Err(Fail::err("Invalid library metadata"));
    };
    let parts = match split_args(&text[..end]) {
        Some(p) if !p.is_empty() => p,
        _ => return Err(Fail::err("Invalid library metadata")),
    };
    let engine = parts[0].get(2..).unwrap_or_default().to_vec();
    let mut name = None;
    for part in &parts[1..] {
        if part.len() >= 5 && part[..5].eq_ignore_ascii_case(b"name=") {
            if name.is_some() {
                return Err(Fail::err("Invalid metadata value, name argument was given multiple times"));
            }
            name = Some(part[5..].to_vec());
            continue;
        }
        return Err(Fail::Text(format!("ERR Invalid metadata value given: {}", String::from_utf8_lossy(script::c_str(part)))));
    }
    let Some(name) = name else { return Err(Fail::err("Library name was not given")) };
    Ok(Metadata { engine, name, code: &payload[end..] })
}

/// A library's name, checked as FUNCTION LOAD checks it.
fn checked_name(md: &Metadata<'_>) -> Result<String, Fail> {
    let name = &md.name;
    if name.is_empty() || !name.iter().all(|&c| c.is_ascii_alphanumeric() || c == b'_') {
        return Err(Fail::err(LIBRARY_NAME_TEXT));
    }
    if !md.engine.eq_ignore_ascii_case(b"lua") {
        return Err(Fail::Text(format!("ERR Engine '{}' not found", String::from_utf8_lossy(&md.engine))));
    }
    if name.len() > MAX_LIBRARY_NAME {
        return Err(Fail::Text(format!("ERR Library names longer than {MAX_LIBRARY_NAME} bytes are not stored by this server")));
    }
    Ok(String::from_utf8(name.clone()).expect("checked ASCII"))
}

impl Functions {
    fn vm(&mut self) -> Result<&mut Vm, Fail> {
        if self.vm.is_none() {
            self.vm = Some(Vm::new().map_err(|e| Fail::err(&format!("the Lua interpreter did not start: {e}")))?);
        }
        Ok(self.vm.as_mut().expect("made above"))
    }

    fn reindex(&mut self) {
        self.index = self.loaded.iter().flat_map(|(lib, fs)| fs.iter().map(move |f| (f.name.to_ascii_lowercase(), lib.clone()))).collect();
    }

    /// Brings the cache to the stored libraries (module docs).
    fn sync<K: Keyspace>(&mut self, ks: &mut K, limit: impl Fn() -> Limit) -> Res {
        if !ks.has_internal() {
            if self.synced.is_none() {
                self.synced = Some(digest_of(&self.codes));
            }
            return Ok(());
        }
        let mut digest = Vec::new();
        ks.internal_read(&[LIBRARY_TAG], &mut digest);
        if self.synced.as_ref() == Some(&digest) {
            return Ok(());
        }
        let mut codes = BTreeMap::new();
        for key in library_keys(ks) {
            if key.len() < 2 {
                continue;
            }
            let name = String::from_utf8_lossy(&key[1..]).into_owned();
            let mut record = Vec::new();
            if ks.internal_read(&key, &mut record) {
                codes.insert(name.clone(), decode_record(&name, &record)?);
            }
        }
        // A stored library that no longer loads (its loading run past the
        // limit on a slower machine) stays stored, listed with no function.
        let (vm, loaded) = build(&codes, &limit, false)?;
        self.vm = Some(vm);
        self.codes = codes;
        self.loaded = loaded;
        self.reindex();
        self.synced = Some(digest);
        Ok(())
    }

    /// Stores the libraries `puts` (their code is in `self.codes`) and
    /// deletes `deletes`, with the new digest; the cache is then in sync.
    fn persist<K: Keyspace>(&mut self, ks: &mut K, puts: &[String], deletes: &[String]) -> Res {
        let digest = digest_of(&self.codes);
        self.synced = None;
        if ks.has_internal() {
            for name in deletes {
                ks.internal_delete(&library_key(name))?;
            }
            for name in puts {
                ks.internal_put(&library_key(name), &encode_record(&self.codes[name]))?;
            }
            if digest.is_empty() {
                ks.internal_delete(&[LIBRARY_TAG])?;
            } else {
                ks.internal_put(&[LIBRARY_TAG], &digest)?;
            }
        }
        self.synced = Some(digest);
        Ok(())
    }

    /// The function `name`: its callback and flags.
    fn find(&self, name: &[u8]) -> Option<(mlua::Function, u8)> {
        let name = std::str::from_utf8(name).ok()?.to_ascii_lowercase();
        let lib = self.index.get(&name)?;
        self.loaded[lib].iter().find(|f| f.name.eq_ignore_ascii_case(&name)).map(|f| (f.function.clone(), f.flags))
    }

    /// Libraries and functions (FUNCTION STATS).
    fn counts(&self) -> (usize, usize) {
        (self.codes.len(), self.index.len())
    }
}

/// Loads every library of `codes` into a fresh interpreter. `strict`:
/// the first library that fails, or a function name two libraries
/// register, is the error; otherwise such a library is left without
/// functions.
fn build(codes: &BTreeMap<String, Vec<u8>>, limit: &dyn Fn() -> Limit, strict: bool) -> Result<(Vm, BTreeMap<String, Vec<Registered>>), Fail> {
    let mut vm = Vm::new().map_err(|e| Fail::err(&format!("the Lua interpreter did not start: {e}")))?;
    let mut loaded: BTreeMap<String, Vec<Registered>> = BTreeMap::new();
    let mut names: HashMap<String, ()> = HashMap::new();
    for (lib, code) in codes {
        let result = metadata(code).and_then(|md| {
            let registered = vm.load_library(md.code, limit()).map_err(|e| Fail::Text(format!("ERR {e}")))?;
            if registered.is_empty() {
                return Err(Fail::err("No functions registered"));
            }
            if let Some(f) = registered.iter().find(|f| names.contains_key(&f.name.to_ascii_lowercase())) {
                return Err(Fail::Text(format!("ERR Function {} already exists", f.name)));
            }
            Ok(registered)
        });
        match result {
            Ok(registered) => {
                names.extend(registered.iter().map(|f| (f.name.to_ascii_lowercase(), ())));
                loaded.insert(lib.clone(), registered);
            }
            Err(e) if strict => return Err(e),
            Err(_) => {
                loaded.insert(lib.clone(), Vec::new());
            }
        }
    }
    Ok((vm, loaded))
}

impl Server {
    /// A library's loading run's limit: [`LOAD_TIMEOUT_MS`], or on a
    /// replicated executor its step budget (the same point on every member).
    fn load_limit(&self) -> impl Fn() -> Limit {
        let budget = self.config.script_budget;
        move || match budget {
            Some(steps) => Limit::Steps(steps),
            None => Instant::now().checked_add(Duration::from_millis(LOAD_TIMEOUT_MS)).map_or(Limit::None, Limit::Deadline),
        }
    }

    /// Whether FCALL of function `name` is `denyoom` (Redis's
    /// fcallGetCommandFlags: a function that declares neither `no-writes`
    /// nor `allow-oom`); not for a function not found (its own error answers).
    pub(super) fn function_flags_deny<K: Keyspace>(&mut self, ks: &mut K, name: &[u8], mask: u8) -> bool {
        let limit = self.load_limit();
        if self.scripts.functions.sync(ks, limit).is_err() {
            return false;
        }
        self.scripts.functions.find(name).is_some_and(|(_, flags)| flags & mask == 0)
    }

    /// The stored libraries and their functions (INFO); none if they
    /// cannot be read.
    pub(super) fn function_counts<K: Keyspace>(&mut self, ks: &mut K) -> (usize, usize) {
        let limit = self.load_limit();
        match self.scripts.functions.sync(ks, limit) {
            Ok(()) => self.scripts.functions.counts(),
            Err(_) => (0, 0),
        }
    }

    /// FCALL and FCALL_RO.
    pub(crate) fn fcall<K, S>(&mut self, spec: &CommandInfo, session: &mut Session, ks: &mut K, req: &Request<'_>, sink: &mut S) -> Flow
    where
        K: Keyspace,
        S: ReplySink<K::Value> + ?Sized,
    {
        let mut out = Out::<K::Value, S>::new(sink, session.protocol);
        let ro = spec.name == "fcall_ro";
        let limit = self.load_limit();
        if let Err(fail) = self.scripts.functions.sync(ks, limit) {
            self.stats.error_reply(&mut out, fail.text().as_bytes());
            return Flow::Continue;
        }
        let Some((function, flags)) = self.scripts.functions.find(req.arg(1)) else {
            self.stats.error_reply(&mut out, b"ERR Function not found");
            return Flow::Continue;
        };
        let Some(numkeys) = pmwire_resp::numbers::parse_i64(req.arg(2)) else {
            self.stats.error_reply(&mut out, b"ERR Bad number of keys provided");
            return Flow::Continue;
        };
        if numkeys > (req.len() - 3) as i64 {
            self.stats.error_reply(&mut out, b"ERR Number of keys can't be greater than number of args");
            return Flow::Continue;
        }
        if numkeys < 0 {
            self.stats.error_reply(&mut out, b"ERR Number of keys can't be negative");
            return Flow::Continue;
        }
        if ro && flags & NO_WRITES == 0 {
            self.stats.error_reply(&mut out, b"ERR Can not execute a script with write flag using *_ro command.");
            return Flow::Continue;
        }
        if let Err(text) = self.prepare_run(flags) {
            self.stats.error_reply(&mut out, text);
            return Flow::Continue;
        }
        let numkeys = numkeys as usize;
        let keys: Vec<&[u8]> = (3..3 + numkeys).map(|i| req.arg(i)).collect();
        let args: Vec<&[u8]> = (3 + numkeys..req.len()).map(|i| req.arg(i)).collect();
        let name = String::from_utf8_lossy(req.arg(1)).into_owned();
        let mut vm = self.scripts.functions.vm.take().expect("a synced cache with a function has its interpreter");
        let read_only = ro || flags & NO_WRITES != 0;
        let (outcome, script_resp) = self.run_script(&mut vm, &function, true, &keys, &args, read_only, session, ks);
        self.scripts.functions.vm = Some(vm);
        self.reply_outcome(spec, outcome, script_resp, &name, session, ks, sink);
        Flow::Continue
    }
}

/// FUNCTION LOAD [REPLACE] code.
pub(super) fn function_load<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let mut replace = false;
    let mut at = 2;
    while at < c.argc() - 1 {
        let arg = c.arg(at);
        at += 1;
        if arg.eq_ignore_ascii_case(b"replace") {
            replace = true;
            continue;
        }
        return Err(Fail::Text(format!("ERR Unknown option given: {}", String::from_utf8_lossy(script::c_str(arg)))));
    }
    if at >= c.argc() {
        return Err(Fail::err("Function code is missing"));
    }
    let code = c.arg(at).to_vec();
    let limit = c.server.load_limit();
    let functions = &mut c.server.scripts.functions;
    functions.sync(c.ks, &limit)?;
    let md = metadata(&code)?;
    let name = checked_name(&md)?;
    if functions.codes.contains_key(&name) && !replace {
        return Err(Fail::Text(format!("ERR Library '{name}' already exists")));
    }
    let registered = functions.vm()?.load_library(md.code, limit()).map_err(|e| Fail::Text(format!("ERR {e}")))?;
    if registered.is_empty() {
        return Err(Fail::err("No functions registered"));
    }
    if let Some(f) = registered.iter().find(|f| functions.index.get(&f.name.to_ascii_lowercase()).is_some_and(|lib| *lib != name)) {
        return Err(Fail::Text(format!("ERR Function {} already exists", f.name)));
    }
    functions.codes.insert(name.clone(), code);
    functions.loaded.insert(name.clone(), registered);
    functions.reindex();
    functions.persist(c.ks, std::slice::from_ref(&name), &[])?;
    c.out.bulk(name.as_bytes());
    Ok(())
}

/// FUNCTION DELETE library.
pub(super) fn function_delete<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let name = String::from_utf8_lossy(c.arg(2)).into_owned();
    let limit = c.server.load_limit();
    let functions = &mut c.server.scripts.functions;
    functions.sync(c.ks, limit)?;
    if functions.codes.remove(&name).is_none() {
        return Err(Fail::err("Library not found"));
    }
    functions.loaded.remove(&name);
    functions.reindex();
    functions.persist(c.ks, &[], &[name])?;
    c.out.ok();
    Ok(())
}

/// FUNCTION FLUSH [ASYNC|SYNC]: deletes every library.
pub(super) fn function_flush<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    if c.argc() > 3 {
        return Err(subcommand_syntax(c));
    }
    if c.argc() == 3 && !c.arg(2).eq_ignore_ascii_case(b"sync") && !c.arg(2).eq_ignore_ascii_case(b"async") {
        return Err(Fail::err("FUNCTION FLUSH only supports SYNC|ASYNC option"));
    }
    let limit = c.server.load_limit();
    let functions = &mut c.server.scripts.functions;
    functions.sync(c.ks, limit)?;
    let names: Vec<String> = functions.codes.keys().cloned().collect();
    *functions = Functions::default();
    functions.persist(c.ks, &[], &names)?;
    c.out.ok();
    Ok(())
}

fn subcommand_syntax<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &Ctx<'_, '_, K, S>) -> Fail {
    Fail::Text(format!(
        "ERR unknown subcommand or wrong number of arguments for '{}'. Try FUNCTION HELP.",
        String::from_utf8_lossy(c.arg(1))
    ))
}

/// FUNCTION LIST [LIBRARYNAME pattern] [WITHCODE].
pub(super) fn function_list<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let (mut with_code, mut pattern) = (false, None::<Vec<u8>>);
    let mut i = 2;
    while i < c.argc() {
        let arg = c.arg(i);
        if !with_code && arg.eq_ignore_ascii_case(b"withcode") {
            with_code = true;
        } else if pattern.is_none() && arg.eq_ignore_ascii_case(b"libraryname") {
            if i >= c.argc() - 1 {
                return Err(Fail::err("library name argument was not given"));
            }
            i += 1;
            pattern = Some(c.arg(i).to_ascii_lowercase());
        } else {
            return Err(Fail::Text(format!("ERR Unknown argument {}", String::from_utf8_lossy(script::c_str(arg)))));
        }
        i += 1;
    }
    let limit = c.server.load_limit();
    c.server.scripts.functions.sync(c.ks, limit)?;
    let functions = &c.server.scripts.functions;
    let shown: Vec<&String> = functions
        .codes
        .keys()
        .filter(|name| pattern.as_ref().is_none_or(|p| crate::glob::matches(p, name.to_ascii_lowercase().as_bytes())))
        .collect();
    c.out.array(shown.len());
    for name in shown {
        c.out.map(if with_code { 4 } else { 3 });
        c.out.bulk(b"library_name");
        c.out.bulk(name.as_bytes());
        c.out.bulk(b"engine");
        c.out.bulk(b"LUA");
        c.out.bulk(b"functions");
        let fs = &functions.loaded[name];
        c.out.array(fs.len());
        for f in fs {
            c.out.map(3);
            c.out.bulk(b"name");
            c.out.bulk(f.name.as_bytes());
            c.out.bulk(b"description");
            match &f.description {
                Some(d) => c.out.bulk(d),
                None => c.out.null(),
            }
            c.out.bulk(b"flags");
            let set: Vec<&str> = FUNCTION_FLAGS.iter().enumerate().filter(|(bit, _)| f.flags & (1 << bit) != 0).map(|(_, n)| *n).collect();
            c.out.set(set.len());
            set.iter().for_each(|flag| c.out.simple(flag.as_bytes()));
        }
        if with_code {
            c.out.bulk(b"library_code");
            c.out.bulk(&functions.codes[name]);
        }
    }
    Ok(())
}

/// FUNCTION STATS: no function is ever running when a command is read
/// (one thread serves every client), and the one engine's counts.
pub(super) fn function_stats<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let limit = c.server.load_limit();
    c.server.scripts.functions.sync(c.ks, limit)?;
    let (libraries, functions) = c.server.scripts.functions.counts();
    c.out.map(2);
    c.out.bulk(b"running_script");
    c.out.null();
    c.out.bulk(b"engines");
    c.out.map(1);
    c.out.bulk(b"LUA");
    c.out.map(2);
    c.out.bulk(b"libraries_count");
    c.out.integer(libraries as i64);
    c.out.bulk(b"functions_count");
    c.out.integer(functions as i64);
    Ok(())
}

/// FUNCTION KILL: as SCRIPT KILL, no function is running when it is read.
pub(super) fn function_kill<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(_c: &mut Ctx<'_, '_, K, S>) -> Res {
    Err(Fail::Text("NOTBUSY No scripts in execution right now.".into()))
}

/// FUNCTION DUMP: every library in this server's payload format
/// (`docs/FORMAT.md`, "FUNCTION DUMP payload").
pub(super) fn function_dump<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let limit = c.server.load_limit();
    c.server.scripts.functions.sync(c.ks, limit)?;
    let payload = dump(&c.server.scripts.functions.codes);
    c.out.bulk(&payload);
    Ok(())
}

fn dump(codes: &BTreeMap<String, Vec<u8>>) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(DUMP_MAGIC);
    out.extend_from_slice(&DUMP_VERSION.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&(codes.len() as u32).to_le_bytes());
    for code in codes.values() {
        out.extend_from_slice(&(code.len() as u32).to_le_bytes());
        out.extend_from_slice(code);
    }
    let sum = sha1_smol::Sha1::from(&out).digest().bytes();
    out.extend_from_slice(&sum);
    out
}

/// The libraries' codes of a payload: `Err(true)` if its version or
/// checksum are wrong (or it is not this format), `Err(false)` if it is
/// well sealed but malformed inside.
fn undump(payload: &[u8]) -> Result<Vec<&[u8]>, bool> {
    if payload.len() < DUMP_HEADER + DUMP_TRAILER {
        return Err(true);
    }
    let (body, sum) = payload.split_at(payload.len() - DUMP_TRAILER);
    if sha1_smol::Sha1::from(body).digest().bytes()[..] != *sum || &body[..4] != DUMP_MAGIC {
        return Err(true);
    }
    if u16::from_le_bytes([body[4], body[5]]) != DUMP_VERSION || body[6..8] != [0, 0] {
        return Err(true);
    }
    let count = u32::from_le_bytes(body[8..12].try_into().expect("4 bytes")) as usize;
    let mut rest = &body[DUMP_HEADER..];
    let mut out = Vec::new();
    for _ in 0..count {
        if rest.len() < 4 {
            return Err(false);
        }
        let len = u32::from_le_bytes(rest[..4].try_into().expect("4 bytes")) as usize;
        rest = &rest[4..];
        if rest.len() < len {
            return Err(false);
        }
        out.push(&rest[..len]);
        rest = &rest[len..];
    }
    if !rest.is_empty() {
        return Err(false);
    }
    Ok(out)
}

/// FUNCTION RESTORE payload [FLUSH|APPEND|REPLACE].
pub(super) fn function_restore<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    if c.argc() > 4 {
        return Err(subcommand_syntax(c));
    }
    #[derive(PartialEq)]
    enum Policy {
        Flush,
        Append,
        Replace,
    }
    let policy = match c.argc() {
        4 if c.arg(3).eq_ignore_ascii_case(b"append") => Policy::Append,
        4 if c.arg(3).eq_ignore_ascii_case(b"replace") => Policy::Replace,
        4 if c.arg(3).eq_ignore_ascii_case(b"flush") => Policy::Flush,
        4 => return Err(Fail::err("Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.")),
        _ => Policy::Append,
    };
    let payload = c.arg(2).to_vec();
    let libraries = match undump(&payload) {
        Ok(l) => l,
        Err(true) => return Err(Fail::err("DUMP payload version or checksum are wrong")),
        Err(false) => return Err(Fail::err("failed loading the given functions payload")),
    };
    let limit = c.server.load_limit();
    let functions = &mut c.server.scripts.functions;
    functions.sync(c.ks, &limit)?;
    let mut restored: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for code in libraries {
        let md = metadata(code)?;
        let name = checked_name(&md)?;
        if restored.contains_key(&name) {
            return Err(Fail::Text(format!("ERR Library '{name}' already exists")));
        }
        restored.insert(name, code.to_vec());
    }
    let mut codes = if policy == Policy::Flush { BTreeMap::new() } else { functions.codes.clone() };
    if policy == Policy::Append {
        if let Some(name) = restored.keys().find(|n| codes.contains_key(*n)) {
            return Err(Fail::Text(format!("ERR Library {name} already exists")));
        }
    }
    let puts: Vec<String> = restored.keys().cloned().collect();
    codes.extend(restored);
    let (vm, loaded) = build(&codes, &limit, true)?;
    let deletes: Vec<String> = functions.codes.keys().filter(|n| !codes.contains_key(*n)).cloned().collect();
    functions.vm = Some(vm);
    functions.codes = codes;
    functions.loaded = loaded;
    functions.reindex();
    functions.persist(c.ks, &puts, &deletes)?;
    c.out.ok();
    Ok(())
}

const HELP: &[&str] = &[
    "LOAD [REPLACE] <FUNCTION CODE>",
    "    Create a new library with the given library name and code.",
    "DELETE <LIBRARY NAME>",
    "    Delete the given library.",
    "LIST [LIBRARYNAME PATTERN] [WITHCODE]",
    "    Return general information on all the libraries:",
    "    * Library name",
    "    * The engine used to run the Library",
    "    * Library description",
    "    * Functions list",
    "    * Library code (if WITHCODE is given)",
    "    It also possible to get only function that matches a pattern using LIBRARYNAME argument.",
    "STATS",
    "    Return information about the current function running:",
    "    * Function name",
    "    * Command used to run the function",
    "    * Duration in MS that the function is running",
    "    If no function is running, return nil",
    "    In addition, returns a list of available engines.",
    "KILL",
    "    Kill the current running function.",
    "FLUSH [ASYNC|SYNC]",
    "    Delete all the libraries.",
    "    When called without the optional mode argument, the behavior is determined by the",
    "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
    "    * ASYNC: Asynchronously flush the libraries.",
    "    * SYNC: Synchronously flush the libraries.",
    "DUMP",
    "    Return a serialized payload representing the current libraries, can be restored using FUNCTION RESTORE command",
    "RESTORE <PAYLOAD> [FLUSH|APPEND|REPLACE]",
    "    Restore the libraries represented by the given payload, it is possible to give a restore policy to",
    "    control how to handle existing libraries (default APPEND):",
    "    * FLUSH: delete all existing libraries.",
    "    * APPEND: appends the restored libraries to the existing libraries. On collision, abort.",
    "    * REPLACE: appends the restored libraries to the existing libraries, On collision, replace the old",
    "      libraries with the new libraries (notice that even on this option there is a chance of failure",
    "      in case of functions name collision with another library).",
];

/// FUNCTION HELP (Redis's `addReplyHelp`).
pub(super) fn function_help<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    c.out.array(HELP.len() + 3);
    c.out.simple(b"FUNCTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:");
    for line in HELP {
        c.out.simple(line.as_bytes());
    }
    c.out.simple(b"HELP");
    c.out.simple(b"    Prints this help.");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dump_round_trips_and_a_damaged_or_foreign_one_is_refused() {
        let mut codes = BTreeMap::new();
        codes.insert("a".to_string(), b"#!lua name=a\nredis.register_function('f', function() return 1 end)".to_vec());
        codes.insert("b".to_string(), b"#!lua name=b\n".to_vec());
        let payload = dump(&codes);
        assert_eq!(undump(&payload).unwrap(), codes.values().map(Vec::as_slice).collect::<Vec<_>>());
        for i in 0..payload.len() {
            let mut bad = payload.clone();
            bad[i] ^= 0x40;
            assert_eq!(undump(&bad), Err(true), "byte {i} flipped");
        }
        assert_eq!(undump(&payload[..payload.len() - 1]), Err(true));
        // A payload of Redis 7.0 (RDB_OPCODE_FUNCTION2, version 10, CRC64).
        let redis = b"\xf5\xc3@X@b\x1f#!lua name=x\nredis.register_function('f', function() return 1 end)\n\x0a\x00\x8e\x9d\x1b\xad\x17\x5b\x97\x1f";
        assert_eq!(undump(redis), Err(true));
        assert_eq!(undump(&dump(&BTreeMap::new())).unwrap(), Vec::<&[u8]>::new());
    }

    #[test]
    fn a_record_is_checked_before_it_is_read() {
        let record = encode_record(b"#!lua name=a\n");
        assert_eq!(decode_record("a", &record).unwrap(), b"#!lua name=a\n");
        let mut bad = record.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert!(decode_record("a", &bad).is_err());
        assert!(decode_record("a", &record[..10]).is_err());
        assert!(decode_record("a", &record[..record.len() - 1]).is_err());
    }

    #[test]
    fn metadata_is_read_as_redis_reads_it() {
        let md = metadata(b"#!lua name=mylib\nreturn 1").unwrap();
        assert_eq!((md.engine.as_slice(), md.name.as_slice(), md.code), (&b"lua"[..], &b"mylib"[..], &b"\nreturn 1"[..]));
        assert_eq!(metadata(b"return 1").err().unwrap().text(), "ERR Missing library metadata");
        assert_eq!(metadata(b"#!lua name=x").err().unwrap().text(), "ERR Invalid library metadata");
        assert_eq!(metadata(b"#!lua\n").err().unwrap().text(), "ERR Library name was not given");
        assert_eq!(metadata(b"#!lua name=a name=b\n").err().unwrap().text(), "ERR Invalid metadata value, name argument was given multiple times");
        assert_eq!(metadata(b"#!lua foo=bar name=a\n").err().unwrap().text(), "ERR Invalid metadata value given: foo=bar");
        let md = metadata(b"#!bad_engine name=x\n").unwrap();
        assert_eq!(checked_name(&md).err().unwrap().text(), "ERR Engine 'bad_engine' not found");
        let md = metadata(b"#!lua name=a-b\n").unwrap();
        assert_eq!(checked_name(&md).err().unwrap().text(), format!("ERR {LIBRARY_NAME_TEXT}"));
        assert_eq!(checked_name(&metadata(b"#!LUA name=\"x y\"\n").unwrap()).err().unwrap().text(), format!("ERR {LIBRARY_NAME_TEXT}"));
    }
}
