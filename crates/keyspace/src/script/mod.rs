//! The Lua 5.1 interpreter scripts run in (`EVAL`, `EVALSHA`, `SCRIPT`),
//! set up as Redis 7.0 sets up its own: the same libraries, the same
//! `redis` table, the same sandbox, the same conversions between replies
//! and Lua values. The commands themselves are `exec::scripting`.
//!
//! The interpreter is `mlua` with Lua 5.1 built from source (Redis embeds
//! 5.1). One [`Vm`] serves every script of an executor, compiled functions
//! cached by SHA-1; scripts cannot leave state behind in it:
//!
//! - **Sandbox.** Loaded: base (without `dofile`, `loadfile`, `print`),
//!   `table`, `string`, `math`, `cjson`, `cmsgpack`, `bit`, `struct` ([`cjson`], [`cmsgpack`], [`bit`], [`structlib`]); not
//!   `os`, `io`, `package`, `debug`. A script runs in an environment that
//!   refuses to create or change a global ("Attempt to modify a readonly
//!   table") and to read an unset one ("Script attempted to access
//!   nonexistent global variable"), as Redis 7.0's read-only globals do;
//!   the library tables are read-only views; `rawset`, `setmetatable`,
//!   `setfenv` and `getfenv` refuse or hide the protected tables, and
//!   `loadstring`/`load` compile into the same environment. Redis patches
//!   its Lua to mark tables read-only; this VM reaches the same effect
//!   with proxies (`pairs` over a library table sees nothing).
//! - **Errors** follow Redis: `redis.call` raises a command's error as a
//!   table `{err = "CODE text"}`; a script's uncaught error is answered
//!   `-<err> script: <sha>, on @user_script:<line>.`; `pcall` hands back
//!   the text of such a table.
//! - **`redis.call` / `redis.pcall`** are C functions over Lua's C API
//!   ([`bridge`]): arguments read off the stack into a reused buffer,
//!   the reply pushed from RESP without a protected call per value; a run
//!   is one protected call ([`Vm::run`]: KEYS and ARGV built with the C
//!   API). The rule that keeps Lua's `longjmp` off Rust frames that own
//!   something is at the top of [`bridge`].
//! - **Randomness.** `math.random` is Redis's (`lrand48`'s generator), seeded
//!   for each run from a value the executor draws, so a script's draws are
//!   a function of the executor's generator, as every other draw is.
//! - **Limits.** The interpreter may allocate at most [`MEMORY_LIMIT`];
//!   a run past its deadline is stopped from an instruction-count hook
//!   (every [`HOOK_EVERY`] instructions, which `pcall` cannot outlast).
//!
//! - **Functions** (FUNCTION LOAD, FCALL: `exec::functions`) run in a
//!   [`Vm`] of their own, as Redis keeps them in a Lua state apart from
//!   EVAL's: [`Vm::load_library`] runs a library's code with only
//!   `redis.register_function`, `redis.log` and the version visible (the
//!   environment's lookup is switched for the run), and
//!   [`Vm::run_function`] passes KEYS and ARGV as arguments.
//!
//! Not provided yet: the Lua debugger.

pub mod bit;
mod bridge;
pub mod cjson;
pub mod cmsgpack;
pub mod structlib;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use mlua::{Function, HookTriggers, Lua, LuaOptions, MultiValue, StdLib, Table, Value, VmState};

/// Most bytes the interpreter may hold; an allocation beyond fails the
/// script with Lua's "not enough memory".
pub const MEMORY_LIMIT: usize = 1 << 30;
/// Instructions between two looks at a run's deadline.
pub const HOOK_EVERY: u32 = 10_000;
/// Deepest reply nesting converted either way (Redis stops at Lua's stack limit).
pub const MAX_DEPTH: usize = 200;

/// The hex SHA-1 of `body`, as `SCRIPT LOAD` answers it.
pub fn sha1_hex(body: &[u8]) -> String {
    sha1_smol::Sha1::from(body).digest().to_string()
}

/// Redis's `redisLrand48`: the 48-bit linear congruential generator of
/// `lrand48`, so a seeded script draws the same numbers on every machine.
#[derive(Debug, Clone, Copy)]
struct Lrand48(u64);

impl Lrand48 {
    const MAX: u64 = i32::MAX as u64;

    fn seeded(seed: u32) -> Lrand48 {
        Lrand48((u64::from(seed) << 16) | 0x330E)
    }

    fn next(&mut self) -> u64 {
        self.0 = (self.0.wrapping_mul(0x5_DEEC_E66D).wrapping_add(0xB)) & ((1 << 48) - 1);
        self.0 >> 17
    }
}

/// What one run shares with the callbacks that outlive it (atomics: the
/// executor may move between threads, so its interpreter is `Send`).
#[derive(Debug)]
struct RunState {
    limit: Mutex<Limit>,
    /// Hook steps taken in this run.
    steps: AtomicU64,
    /// The run passed its deadline: every hook from now on raises.
    killed: AtomicBool,
    /// The [`Lrand48`] state.
    rng: AtomicU64,
    /// The protocol `redis.call` replies arrive in (`redis.setresp`).
    resp: AtomicU8,
}

impl RunState {
    fn limit(&self) -> Limit {
        *self.limit.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set_limit(&self, limit: Limit) {
        *self.limit.lock().unwrap_or_else(|e| e.into_inner()) = limit;
        self.steps.store(0, Relaxed);
    }

    /// One hook step: whether the run is past its limit.
    fn step(&self) -> bool {
        let steps = self.steps.fetch_add(1, Relaxed) + 1;
        match self.limit() {
            Limit::None => false,
            Limit::Deadline(d) => Instant::now() >= d,
            Limit::Steps(n) => steps > n,
        }
    }

    fn seed(&self, seed: u32) {
        self.rng.store(Lrand48::seeded(seed).0, Relaxed);
    }
}

pub use bridge::{Args, Call};

/// The protocol argument of a [`Call`] that only checks the caller's ACL
/// permission (`redis.acl_check_cmd`): it runs nothing and answers an
/// integer reply, 1 if the script's user may run the command, 0 if not.
pub const ACL_CHECK: u8 = 0;

/// When a run is stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// Never.
    None,
    /// At this instant (checked every [`HOOK_EVERY`] instructions).
    Deadline(Instant),
    /// After this many steps of [`HOOK_EVERY`] instructions: the same
    /// point on every machine.
    Steps(u64),
}

/// How a run ended.
#[derive(Debug)]
pub enum Outcome {
    /// The script returned this value.
    Returned(Value),
    /// The script raised this error: its text (without `-`), where in
    /// the script (`@user_script:<line>`) if known, and whether it is a
    /// command's error already counted in the error statistics (Redis's
    /// `ignore_error_stats_update`).
    Failed(Vec<u8>, Option<String>, bool),
    /// The run passed its deadline and was stopped.
    Killed,
}

/// The interpreter of one executor (module docs).
pub struct Vm {
    lua: Lua,
    /// Where `redis.call` and `redis.pcall` find the run's command
    /// callback (after `lua`: it outlives the functions that name it).
    bridge: bridge::BridgeHandle,
    /// `run(f)`: `xpcall(f, handler)`, returning `ok, value`.
    run: Function,
    /// The real globals (KEYS and ARGV are set here, raw).
    globals: Table,
    /// What scripts see as their globals.
    env: Table,
    compiled: HashMap<String, Function>,
    state: Arc<RunState>,
    /// Runs so far (the collector steps every 50).
    runs: u64,
    /// `run_fn(f, keys, args)`: a function's run (FCALL), as `run`.
    run_fn: Function,
    /// `load_lib(chunk)`: a library's loading run (FUNCTION LOAD),
    /// returning `true, registrations` or `false, error`.
    load_lib: Function,
    /// `cjson`'s settings, reset before every run.
    cjson: Arc<cjson::Settings>,
}

/// A function a library registered (`redis.register_function`).
#[derive(Debug, Clone)]
pub struct Registered {
    /// Its name (letters, digits, `_`).
    pub name: String,
    /// The callback.
    pub function: Function,
    /// Its description, if given.
    pub description: Option<Vec<u8>>,
    /// Its flags, a bit per [`FUNCTION_FLAGS`] entry.
    pub flags: u8,
}

/// The flags a function may declare, in Redis's order (`scripts_flags_def`);
/// flag `i` is bit `1 << i`.
pub const FUNCTION_FLAGS: [&str; 5] = ["no-writes", "allow-oom", "allow-stale", "no-cluster", "allow-cross-slot-keys"];

impl std::fmt::Debug for Vm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vm").field("compiled", &self.compiled.len()).finish()
    }
}

/// Run once in a fresh interpreter, with `debug` still loaded: builds the
/// sandbox and returns the helpers `Vm` keeps. Nothing it defines is
/// reachable from a script but through the read-only views.
const SETUP: &str = r#"
local dbg, G = debug, _G
local rawset_, rawget_, setmt, getmt, rawpcall, type_, tostring_, error_, select_ =
    rawset, rawget, setmetatable, getmetatable, pcall, type, tostring, error, select
local next_, ipairs_, find_, lower_ = next, ipairs, string.find, string.lower
local setfenv_, getfenv_, loadstring_, load_ = setfenv, getfenv, loadstring, load
local readonly = setmt({}, {__mode = 'k'})
local function refuse() error_('Attempt to modify a readonly table', 2) end
local function view(t)
  local v = setmt({}, {__index = t, __newindex = refuse, __metatable = false})
  readonly[v] = true
  return v
end
local function refuse0() error_('Attempt to modify a readonly table', 0) end
local redis = {}
local killed = bridge_api.killed
bridge_api.killed = nil
local acl_check = bridge_api.acl_check
bridge_api.acl_check = nil
for k, v in pairs(bridge_api) do redis[k] = v end
local acl_args = bridge_api.acl_check_cmd
redis.acl_check_cmd = function(...) acl_args(...) return acl_check(...) end
-- A stopped run's error must not be caught: whatever catches errors
-- raises again once the run is stopped (the hook raises only every
-- so many instructions).
local function unless_killed(...)
  if killed() then error_('Script killed', 0) end
  return ...
end
local xpcall_, resume_ = xpcall, coroutine.resume
G.xpcall = function(f, h) return unless_killed(xpcall_(f, h)) end
coroutine.resume = function(...) return unless_killed(resume_(...)) end
G.redis = view(redis)
for _, lib in ipairs({'string', 'table', 'math', 'cjson', 'cmsgpack', 'bit', 'coroutine'}) do
  if G[lib] then G[lib] = view(G[lib]) end
end
local string_mt = getmt('')
string_mt.__index = G.string
string_mt.__metatable = view(string_mt)
local env
G.rawset = function(t, k, v)
  if readonly[t] or t == G then refuse0() end
  return rawset_(t, k, v)
end
G.setmetatable = function(t, mt)
  if readonly[t] or t == G then refuse0() end
  return setmt(t, mt)
end
G.setfenv = function(f, t)
  if f == 0 or readonly[f] then refuse0() end
  return setfenv_(f, t)
end
G.getfenv = function(f)
  local e = getfenv_(f == nil and 2 or (type_(f) == 'number' and f > 0 and f + 1) or f)
  if e == G then return env end
  return e
end
G.loadstring = function(s, name)
  -- Redis's Lua refuses precompiled chunks (they can break the VM).
  if type_(s) == 'string' and find_(s, '^\27') then return nil, 'binary chunks are not allowed' end
  local f, e = loadstring_(s, name)
  if f then setfenv_(f, env) end
  return f, e
end
G.load = function(fn, name)
  local f, e = load_(fn, name)
  if f then setfenv_(f, env) end
  return f, e
end
local function fix(ok, ...)
  if not ok then
    local e = ...
    if type_(e) == 'table' and type_(rawget_(e, 'err')) == 'string' then return false, e.err end
    return false, ...
  end
  return true, ...
end
G.pcall = function(f, ...) return unless_killed(fix(rawpcall(f, ...))) end
G.dofile, G.loadfile, G.print, G.debug, G.bridge_api = nil, nil, nil, nil, nil
G.module, G.require, G.package, G.newproxy = nil, nil, nil, nil
-- What a script's globals read: the real globals, or while a library
-- loads (FUNCTION LOAD) its restricted API. A read is a table lookup
-- (the environment's __index is that table, as Redis's globals are a plain
-- table), and the table's own __index raises for a name that is not
-- there, as Redis's luaSetErrorMetatable does (level 2: the script's line).
local function missing(_, n)
  error_("Script attempted to access nonexistent global variable '" .. tostring_(n) .. "'", 2)
end
local env_mt = {__index = G, __newindex = refuse, __metatable = false}
env = setmt({}, env_mt)
readonly[env] = true
readonly[G] = true
local G_mt = {__newindex = refuse, __index = missing}
G_mt.__metatable = view(G_mt)
setmt(G, G_mt)
local function handler(err)
  local source, line
  for level = 2, 64 do
    local i = dbg.getinfo(level, 'Sl')
    if not i then break end
    if i.source == '@user_script' or i.source == '@user_function' then source, line = i.source, i.currentline break end
  end
  if type_(err) ~= 'table' then err = {err = 'ERR ' .. tostring_(err)} end
  if source and rawget_(err, 'source') == nil then rawset_(err, 'source', source) rawset_(err, 'line', line) end
  return err
end
local function run(f) return xpcall_(f, handler) end
-- A function (FCALL) gets KEYS and ARGV as its arguments.
local function run_fn(f, keys, args) return xpcall_(function() return f(keys, args) end, handler) end
-- FUNCTION LOAD: Redis's function_lua.c. While a library's code runs it
-- sees only `redis` with register_function, log and the version; what
-- it registers is collected in `registering`.
local registering
local function reg_fail(msg) error_({err = 'ERR ' .. msg}, 0) end
local function is_str(v) local t = type_(v) return t == 'string' or t == 'number' end
local FLAGS = {'no-writes', 'allow-oom', 'allow-stale', 'no-cluster', 'allow-cross-slot-keys'}
local function read_flags(t)
  local seen, j = {}, 1
  while true do
    local v = t[j]
    j = j + 1
    if v == nil then break end
    if not is_str(v) then return nil end
    local found
    for bit, name in ipairs_(FLAGS) do
      if lower_(tostring_(v)) == name then found = bit break end
    end
    if not found then return nil end
    seen[found] = true
  end
  local bits, value = 0, 1
  for bit = 1, #FLAGS do
    if seen[bit] then bits = bits + value end
    value = value * 2
  end
  return bits
end
local function named_args(t)
  local name, desc, callback, flags = nil, nil, nil, 0
  if type_(t) ~= 'table' then
    reg_fail('calling redis.register_function with a single argument is only applicable to Lua table (representing named arguments).')
  end
  for k, v in next_, t do
    if not is_str(k) then reg_fail('named argument key given to redis.register_function is not a string') end
    local key = lower_(tostring_(k))
    if key == 'function_name' then
      if not is_str(v) then reg_fail('function_name argument given to redis.register_function must be a string') end
      name = tostring_(v)
    elseif key == 'description' then
      if not is_str(v) then reg_fail('description argument given to redis.register_function must be a string') end
      desc = tostring_(v)
    elseif key == 'callback' then
      if type_(v) ~= 'function' then reg_fail('callback argument given to redis.register_function must be a function') end
      callback = v
    elseif key == 'flags' then
      if type_(v) ~= 'table' then reg_fail('flags argument to redis.register_function must be a table representing function flags') end
      flags = read_flags(v)
      if not flags then reg_fail('unknown flag given') end
    else
      reg_fail('unknown argument given to redis.register_function')
    end
  end
  if not name then reg_fail('redis.register_function must get a function name argument') end
  if not callback then reg_fail('redis.register_function must get a callback argument') end
  return name, desc, callback, flags
end
local function register_function(...)
  if not registering then reg_fail('redis.register_function can only be called on FUNCTION LOAD command') end
  local argc = select_('#', ...)
  if argc < 1 or argc > 2 then reg_fail('wrong number of arguments to redis.register_function') end
  local name, desc, callback, flags
  if argc == 1 then
    name, desc, callback, flags = named_args(...)
  else
    local n, f = ...
    if not is_str(n) then reg_fail('first argument to redis.register_function must be a string') end
    if type_(f) ~= 'function' then reg_fail('second argument to redis.register_function must be a function') end
    name, callback, flags = tostring_(n), f, 0
  end
  if #name == 0 or find_(name, '[^a-zA-Z0-9_]') then
    reg_fail('Library names can only contain letters, numbers, or underscores(_) and must be at least one character long')
  end
  if registering.names[name] then reg_fail('Function already exists in the library') end
  registering.names[name] = true
  local list = registering.list
  list[#list + 1] = {name = name, callback = callback, desc = desc, flags = flags}
end
local lib_redis = {register_function = register_function}
for _, k in ipairs_({'log', 'LOG_DEBUG', 'LOG_VERBOSE', 'LOG_NOTICE', 'LOG_WARNING', 'REDIS_VERSION', 'REDIS_VERSION_NUM'}) do
  lib_redis[k] = redis[k]
end
local function strict(t)
  local v = setmt({}, {
    __index = function(_, n)
      local x = rawget_(t, n)
      if x == nil then
        error_("Script attempted to access nonexistent global variable '" .. tostring_(n) .. "'", 2)
      end
      return x
    end,
    __newindex = refuse,
    __metatable = false,
  })
  readonly[v] = true
  return v
end
local library_api = setmt({redis = strict(lib_redis)}, {__index = missing})
local function load_lib(chunk)
  registering = {list = {}, names = {}}
  env_mt.__index = library_api
  local ok, err = rawpcall(chunk)
  env_mt.__index = G
  local list = registering.list
  registering = nil
  if not ok then return false, err end
  return true, list
end
return run, env, redis, run_fn, load_lib
"#;

impl Vm {
    /// A fresh interpreter with Redis's libraries and sandbox.
    pub fn new() -> mlua::Result<Vm> {
        // SAFETY: `debug` is loaded only for SETUP, whose error handler keeps
        // `debug.getinfo` in an upvalue; SETUP removes `debug` from the
        // globals before any script runs, so no script can reach it.
        let lua = unsafe { Lua::unsafe_new_with(StdLib::TABLE | StdLib::STRING | StdLib::MATH | StdLib::DEBUG, LuaOptions::default()) };
        lua.set_memory_limit(MEMORY_LIMIT)?;
        let state = Arc::new(RunState {
            limit: Mutex::new(Limit::None),
            steps: AtomicU64::new(0),
            killed: AtomicBool::new(false),
            rng: AtomicU64::new(Lrand48::seeded(0).0),
            resp: AtomicU8::new(2),
        });
        let globals = lua.globals();
        let (cjson_table, cjson) = cjson::library(&lua)?;
        globals.raw_set("cjson", cjson_table)?;
        globals.raw_set("cmsgpack", cmsgpack::library(&lua)?)?;
        globals.raw_set("bit", bit::library(&lua)?)?;
        globals.raw_set("struct", structlib::library(&lua)?)?;
        let math: Table = globals.raw_get("math")?;
        let st = state.clone();
        math.raw_set("random", raising(&lua, move |lua, args| math_random(lua, &st, &args))?)?;
        let st = state.clone();
        math.raw_set("randomseed", raising(&lua, move |lua, args| {
            // luaL_checkint: a number, or a string that converts to one.
            let number = |s: &mlua::LuaString| std::str::from_utf8(&s.as_bytes()).ok().and_then(|t| t.trim().parse::<f64>().ok());
            match args.front() {
                Some(Value::Integer(i)) => st.seed(*i as i32 as u32),
                Some(Value::Number(n)) => st.seed(*n as i32 as u32),
                Some(Value::String(s)) if number(s).is_some() => st.seed(number(s).expect("checked") as i32 as u32),
                _ => return Ok(Err(Value::String(lua.create_string("bad argument #1 to 'randomseed' (number expected)")?))),
            }
            Ok(Ok(Value::Nil))
        })?)?;
        let api = redis_api(&lua, &state)?;
        let bridge = bridge::BridgeHandle::new(state.clone());
        let upvalue = bridge.as_upvalue();
        for (name, mode) in [("call", bridge::Mode::Call), ("pcall", bridge::Mode::Pcall), ("acl_check", bridge::Mode::AclCheck)] {
            // SAFETY: pushes one C closure; the bridge is kept in the Vm,
            // after the interpreter.
            let f = unsafe { lua.exec_raw::<Function>((), |s| bridge::push_call_function(s, upvalue, mode))? };
            api.raw_set(name, f)?;
        }
        globals.raw_set("bridge_api", api)?;
        let (run, env, _redis, run_fn, load_lib): (Function, Table, Table, Function, Function) = lua.load(SETUP).set_name("=setup").call(())?;
        let st = state.clone();
        lua.set_hook(HookTriggers::new().every_nth_instruction(HOOK_EVERY), move |_, _| {
            let late = st.step();
            if late || st.killed.load(Relaxed) {
                st.killed.store(true, Relaxed);
                return Err(mlua::Error::RuntimeError("Script killed: it ran past lua-time-limit".into()));
            }
            Ok(VmState::Continue)
        })?;
        Ok(Vm { lua, bridge, run, globals, env, compiled: HashMap::new(), state, runs: 0, run_fn, load_lib, cjson })
    }

    /// The compiled function of the script `sha` (its body `body`),
    /// compiling it if need be; Redis's error text if it does not compile.
    pub fn function(&mut self, sha: &str, body: &[u8]) -> Result<Function, String> {
        if let Some(f) = self.compiled.get(sha) {
            return Ok(f.clone());
        }
        let f = self
            .lua
            .load(body)
            .set_name("@user_script")
            .set_environment(self.env.clone())
            .into_function()
            .map_err(|e| match e {
                mlua::Error::SyntaxError { message, .. } => format!("ERR Error compiling script (new function): {message}"),
                other => format!("ERR Error compiling script (new function): {other}"),
            })?;
        self.compiled.insert(sha.to_string(), f.clone());
        Ok(f)
    }

    /// Loads a library's code (FUNCTION LOAD, after its shebang line):
    /// compiles it and runs it with the loading API, stopped at `limit`;
    /// the functions it registered, or Redis's error text without `ERR `.
    pub fn load_library(&mut self, code: &[u8], limit: Limit) -> Result<Vec<Registered>, String> {
        let chunk = self
            .lua
            .load(code)
            .set_name("@user_function")
            .set_environment(self.env.clone())
            .into_function()
            .map_err(|e| match e {
                mlua::Error::SyntaxError { message, .. } => format!("Error compiling function: {message}"),
                other => format!("Error compiling function: {other}"),
            })?;
        self.state.set_limit(limit);
        self.state.killed.store(false, Relaxed);
        self.cjson.reset();
        let result = self.load_lib.call::<(bool, Value)>(chunk);
        self.state.set_limit(Limit::None);
        let killed = self.state.killed.swap(false, Relaxed);
        let fail = |msg: &[u8]| format!("Error registering functions: {}", String::from_utf8_lossy(c_str(msg)));
        let (ok, value) = match result {
            _ if killed => return Err(fail(b"ERR FUNCTION LOAD timeout")),
            Ok(r) => r,
            Err(e) => return Err(fail(format!("ERR {e}").as_bytes())),
        };
        if !ok {
            return Err(match &value {
                Value::Table(t) => match t.raw_get::<Value>("err") {
                    Ok(Value::String(e)) => fail(&e.as_bytes()),
                    _ => fail(b"ERR unknown error"),
                },
                Value::String(e) => fail(&[&b"ERR "[..], &e.as_bytes()].concat()),
                other => fail(format!("ERR {other:?}").as_bytes()),
            });
        }
        let Value::Table(list) = value else { return Err(fail(b"ERR no registrations")) };
        let mut out = Vec::new();
        for entry in list.sequence_values::<Table>() {
            let entry = entry.map_err(|e| fail(format!("ERR {e}").as_bytes()))?;
            let name: mlua::LuaString = entry.raw_get("name").map_err(|e| fail(format!("ERR {e}").as_bytes()))?;
            let function: Function = entry.raw_get("callback").map_err(|e| fail(format!("ERR {e}").as_bytes()))?;
            let description = match entry.raw_get::<Value>("desc") {
                Ok(Value::String(d)) => Some(d.as_bytes().to_vec()),
                _ => None,
            };
            let flags = match entry.raw_get::<Value>("flags") {
                Ok(Value::Integer(f)) => f as u8,
                Ok(Value::Number(f)) => f as u8,
                _ => 0,
            };
            out.push(Registered { name: String::from_utf8_lossy(&name.as_bytes()).into_owned(), function, description, flags });
        }
        Ok(out)
    }

    /// Whether `sha` is compiled here.
    pub fn is_compiled(&self, sha: &str) -> bool {
        self.compiled.contains_key(sha)
    }

    /// Runs `f` with `KEYS` and `ARGV`, each `redis.call` served by `call`
    /// (the command's arguments → its reply, or an error text for a
    /// command that could not run), stopped at `limit`; `seed` seeds
    /// `math.random`.
    pub fn run(
        &mut self,
        f: &Function,
        keys: &[&[u8]],
        args: &[&[u8]],
        seed: u32,
        limit: Limit,
        call: &mut Call<'_>,
    ) -> Outcome {
        self.run_as(f, false, keys, args, seed, limit, call)
    }

    /// Runs the library function `f` (FCALL): as [`Vm::run`], but `KEYS`
    /// and `ARGV` are its two arguments, not globals.
    pub fn run_function(&mut self, f: &Function, keys: &[&[u8]], args: &[&[u8]], seed: u32, limit: Limit, call: &mut Call<'_>) -> Outcome {
        self.run_as(f, true, keys, args, seed, limit, call)
    }

    #[allow(clippy::too_many_arguments)]
    fn run_as(&mut self, f: &Function, as_function: bool, keys: &[&[u8]], args: &[&[u8]], seed: u32, limit: Limit, call: &mut Call<'_>) -> Outcome {
        self.state.set_limit(limit);
        self.state.killed.store(false, Relaxed);
        self.state.seed(seed);
        self.state.resp.store(2, Relaxed);
        self.cjson.reset();
        let outcome = self.run_inner(f, as_function, keys, args, call);
        self.state.set_limit(Limit::None);
        let killed = self.state.killed.swap(false, Relaxed);
        // As Redis: a step of the collector every 50 runs (a step per run
        // cost a tenth of a small script's CPU), besides Lua's own.
        self.runs += 1;
        if self.runs.is_multiple_of(50) {
            let _ = self.lua.gc_step();
        }
        match outcome {
            _ if killed => Outcome::Killed,
            Ok(o) => o,
            Err(e) => Outcome::Failed(format!("ERR Error running script: {e}").into_bytes(), None, false),
        }
    }

    fn run_inner(&mut self, f: &Function, as_function: bool, keys: &[&[u8]], args: &[&[u8]], call: &mut Call<'_>) -> mlua::Result<Outcome> {
        let runner = if as_function { &self.run_fn } else { &self.run };
        // SAFETY: `leave` follows on every path, before `call`'s borrow ends.
        unsafe { self.bridge.get().enter(call) };
        // SAFETY: `start_run` works on the stack exec_raw hands it, which
        // holds the runner and `f`; it captures only borrows.
        let result = unsafe { self.lua.exec_raw::<(bool, Value)>((runner, f), |state| start_run(state, as_function, keys, args)) };
        let bridge = self.bridge.get();
        bridge.leave();
        if let Some(payload) = bridge.panic.take() {
            std::panic::resume_unwind(payload);
        }
        let (ok, value) = match result {
            Ok(r) => r,
            Err(e) => {
                // Raised past the runner (out of memory): KEYS and ARGV may be set.
                self.globals.raw_set("KEYS", Value::Nil)?;
                self.globals.raw_set("ARGV", Value::Nil)?;
                return Err(e);
            }
        };
        if ok {
            return Ok(Outcome::Returned(value));
        }
        Ok(failure(&value))
    }

    /// The protocol the last run's script asked for (`redis.setresp`).
    pub fn script_resp(&self) -> u8 {
        self.state.resp.load(Relaxed)
    }
}

/// A script's uncaught error (the handler's table): its text and where
/// it was raised (`@user_script:<line>`), if known.
fn failure(value: &Value) -> Outcome {
    let Value::Table(t) = value else {
        return Outcome::Failed(b"ERR Error running script: execution failure".to_vec(), None, false);
    };
    let field = |name: &str| match t.raw_get::<Value>(name) {
        Ok(Value::String(s)) => Some(s.as_bytes().to_vec()),
        Ok(Value::Integer(i)) => Some(i.to_string().into_bytes()),
        Ok(Value::Number(n)) => Some(lua_number_text(n).into_bytes()),
        _ => None,
    };
    let msg = field("err").unwrap_or_else(|| b"ERR unknown error".to_vec());
    let at = match (field("source"), field("line")) {
        (Some(source), Some(line)) => Some(format!("{}:{}", String::from_utf8_lossy(&source), String::from_utf8_lossy(&line))),
        _ => None,
    };
    let counted = matches!(t.raw_get::<Value>("ignore_error_stats_update"), Ok(Value::Boolean(true)));
    Outcome::Failed(c_str(&msg).to_vec(), at, counted)
}

/// Calls the runner on the stack's bottom: `run(f)` with `KEYS` and
/// `ARGV` set as globals for the call, or `run_fn(f, KEYS, ARGV)` for a
/// library function; leaves `ok, value`. One protected call for the whole
/// run (exec_raw's), the arrays built with the C API.
///
/// # Safety
/// `state` holds the runner and `f`, and runs exec_raw's protected C
/// function (a raise here is caught there; this frame owns nothing).
unsafe fn start_run(state: *mut mlua::ffi::lua_State, as_function: bool, keys: &[&[u8]], args: &[&[u8]]) {
    use mlua::ffi;
    // SAFETY: as the contract; each push is consumed by the set or call
    // after it.
    unsafe {
        ffi::luaL_checkstack(state, 6, c"too many arguments".as_ptr());
        push_array(state, keys);
        push_array(state, args);
        if as_function {
            ffi::lua_call(state, 3, 2);
            return;
        }
        set_global(state, c"ARGV");
        set_global(state, c"KEYS");
        ffi::lua_call(state, 1, 2);
        ffi::lua_pushnil(state);
        set_global(state, c"KEYS");
        ffi::lua_pushnil(state);
        set_global(state, c"ARGV");
    }
}

/// Pushes `items` as a Lua array of strings.
///
/// # Safety
/// `state` has room for two values; may raise (out of memory).
unsafe fn push_array(state: *mut mlua::ffi::lua_State, items: &[&[u8]]) {
    use mlua::ffi;
    let n = std::ffi::c_int::try_from(items.len()).expect("a request's arguments are counted in 32 bits");
    // SAFETY: as the contract; Lua copies each string.
    unsafe {
        ffi::lua_createtable(state, n, 0);
        for (i, item) in (1..=n).zip(items) {
            ffi::lua_pushlstring(state, item.as_ptr().cast(), item.len());
            ffi::lua_rawseti_(state, -2, i);
        }
    }
}

/// Pops the value on the top into the real globals as `name`, raw (the
/// globals refuse a plain set).
///
/// # Safety
/// `state` has a value on its top and room for two more; may raise.
unsafe fn set_global(state: *mut mlua::ffi::lua_State, name: &std::ffi::CStr) {
    use mlua::ffi;
    // SAFETY: as the contract.
    unsafe {
        ffi::lua_pushstring(state, name.as_ptr());
        ffi::lua_insert(state, -2);
        ffi::lua_rawset(state, ffi::LUA_GLOBALSINDEX);
    }
}

/// Redis's error table `{err = text}` (its `luaPushError`: a text that
/// begins with `-` has it removed; one without a code gets `ERR`).
fn error_table(lua: &Lua, text: &str) -> mlua::Result<Value> {
    error_table_bytes(lua, text.as_bytes(), false)
}

fn error_table_bytes(lua: &Lua, text: &[u8], from_command: bool) -> mlua::Result<Value> {
    let t = lua.create_table()?;
    let err = match bridge::error_parts(text) {
        (Some(code), msg) => lua.create_string([code, b" ", msg].concat())?,
        (None, text) => lua.create_string(text)?,
    };
    t.raw_set("err", err)?;
    if from_command {
        t.raw_set("ignore_error_stats_update", true)?;
    }
    Ok(Value::Table(t))
}

/// The bytes up to the first NUL, as C reads a string.
pub(crate) fn c_str(b: &[u8]) -> &[u8] {
    b.iter().position(|&c| c == 0).map_or(b, |n| &b[..n])
}

/// A text as Redis writes it into a status or error reply: cut at its
/// first NUL (a C string), `\r` and `\n` made spaces.
pub fn reply_line(text: &[u8]) -> Vec<u8> {
    c_str(text).iter().map(|&c| if c == b'\r' || c == b'\n' { b' ' } else { c }).collect()
}

/// A script's result as a reply (Redis's `luaReplyToRedisReply`).
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// A bulk string.
    Bulk(Vec<u8>),
    /// An integer.
    Integer(i64),
    /// The null reply.
    Null,
    /// A boolean (RESP3 `#`; `:1` / null in RESP2).
    Boolean(bool),
    /// A status reply (`\r` and `\n` already made spaces).
    Status(Vec<u8>),
    /// An error reply's text, without `-`.
    Error(Vec<u8>),
    /// A command's error (a table with Redis's `ignore_error_stats_update`),
    /// replied as [`Answer::Error`] but already counted in the statistics.
    CommandError(Vec<u8>),
    /// A double.
    Double(f64),
    /// A big number (RESP3 `(`; a bulk string in RESP2).
    BigNumber(Vec<u8>),
    /// A verbatim string.
    Verbatim([u8; 3], Vec<u8>),
    /// An array.
    Array(Vec<Answer>),
    /// A map.
    Map(Vec<(Answer, Answer)>),
    /// A set.
    Set(Vec<Answer>),
}

/// Converts what a script returned (`script_resp`: the protocol it set
/// with `redis.setresp`, which decides how a boolean answers).
pub fn answer_of(value: &Value, script_resp: u8, depth: usize) -> Answer {
    if depth > MAX_DEPTH {
        return Answer::Error(b"ERR reached lua stack limit".to_vec());
    }
    match value {
        Value::String(s) => Answer::Bulk(s.as_bytes().to_vec()),
        Value::Boolean(b) if script_resp == 2 => {
            if *b {
                Answer::Integer(1)
            } else {
                Answer::Null
            }
        }
        Value::Boolean(b) => Answer::Boolean(*b),
        Value::Integer(i) => Answer::Integer(*i),
        Value::Number(n) => Answer::Integer(c_long_long(*n)),
        Value::Table(t) => table_answer(t, script_resp, depth),
        _ => Answer::Null,
    }
}

/// C's `(long long)` of a double on x86-64 (`cvttsd2si`), as Redis
/// converts a script's number: truncated; NaN and values out of range
/// give the "integer indefinite" `i64::MIN` (Rust's `as` saturates).
fn c_long_long(n: f64) -> i64 {
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if n.is_nan() || !(-TWO_63..TWO_63).contains(&n) {
        i64::MIN
    } else {
        n as i64
    }
}

fn table_answer(t: &Table, script_resp: u8, depth: usize) -> Answer {
    let get = |k: &str| t.raw_get::<Value>(k).unwrap_or(Value::Nil);
    if let Value::String(e) = get("err") {
        // Redis's addReplyErrorFormat: the text trimmed of CR and LF at its end, then
        // any left made spaces.
        let e = e.as_bytes();
        let e = c_str(&e);
        let end = e.iter().rposition(|&c| c != b'\r' && c != b'\n').map_or(0, |i| i + 1);
        if matches!(get("ignore_error_stats_update"), Value::Boolean(true)) {
            return Answer::CommandError(reply_line(&e[..end]));
        }
        return Answer::Error(reply_line(&e[..end]));
    }
    if let Value::String(s) = get("ok") {
        return Answer::Status(reply_line(&s.as_bytes()));
    }
    match get("double") {
        Value::Number(d) => return Answer::Double(d),
        Value::Integer(i) => return Answer::Double(i as f64),
        _ => {}
    }
    if let Value::String(s) = get("big_number") {
        let s: Vec<u8> = s.as_bytes().iter().map(|&c| if c == b'\r' || c == b'\n' { b' ' } else { c }).collect();
        return Answer::BigNumber(s);
    }
    if let Value::Table(v) = get("verbatim_string") {
        if let (Ok(Value::String(f)), Ok(Value::String(s))) = (v.raw_get::<Value>("format"), v.raw_get::<Value>("string")) {
            let f = f.as_bytes();
            if f.len() == 3 {
                return Answer::Verbatim([f[0], f[1], f[2]], s.as_bytes().to_vec());
            }
        }
    }
    if let Value::Table(m) = get("map") {
        let pairs = m.pairs::<Value, Value>().filter_map(Result::ok).map(|(k, v)| (answer_of(&k, script_resp, depth + 1), answer_of(&v, script_resp, depth + 1))).collect();
        return Answer::Map(pairs);
    }
    if let Value::Table(s) = get("set") {
        let members = s.pairs::<Value, Value>().filter_map(Result::ok).map(|(k, _)| answer_of(&k, script_resp, depth + 1)).collect();
        return Answer::Set(members);
    }
    let mut items = Vec::new();
    for i in 1.. {
        match t.raw_get::<Value>(i) {
            Ok(Value::Nil) | Err(_) => break,
            Ok(v) => items.push(answer_of(&v, script_resp, depth + 1)),
        }
    }
    Answer::Array(items)
}

/// `math.random` as Lua 5.1's, over [`Lrand48`].
fn math_random(lua: &Lua, state: &RunState, args: &MultiValue) -> mlua::Result<Result<Value, Value>> {
    match math_draw(state, args) {
        Ok(n) => Ok(Ok(Value::Number(n))),
        Err(text) => Ok(Err(Value::String(lua.create_string(text)?))),
    }
}

fn math_draw(state: &RunState, args: &MultiValue) -> Result<f64, &'static str> {
    let mut rng = Lrand48(state.rng.load(Relaxed));
    let r = (rng.next() % Lrand48::MAX) as f64 / Lrand48::MAX as f64;
    state.rng.store(rng.0, Relaxed);
    let int = |v: &Value| -> Result<i64, &'static str> {
        match v {
            Value::Integer(i) => Ok(*i),
            Value::Number(n) => Ok(*n as i64),
            Value::String(s) => std::str::from_utf8(&s.as_bytes()).ok().and_then(|t| t.trim().parse::<f64>().ok()).map(|n| n as i64).ok_or("bad argument to 'random' (number expected)"),
            _ => Err("bad argument to 'random' (number expected)"),
        }
    };
    match args.len() {
        0 => Ok(r),
        1 => {
            let u = int(&args[0])?;
            if u < 1 {
                return Err("bad argument #1 to 'random' (interval is empty)");
            }
            Ok((r * u as f64).floor() + 1.0)
        }
        2 => {
            let (l, u) = (int(&args[0])?, int(&args[1])?);
            if l > u {
                return Err("bad argument #2 to 'random' (interval is empty)");
            }
            Ok((r * (u - l + 1) as f64).floor() + l as f64)
        }
        _ => Err("wrong number of arguments"),
    }
}

/// The `redis` table's functions besides `call` and `pcall` (SETUP and
/// [`Vm::new`] add those around the bridge).
fn redis_api(lua: &Lua, state: &Arc<RunState>) -> mlua::Result<Table> {
    let api = lua.create_table()?;
    api.raw_set("sha1hex", raising(lua, |lua, args| {
        if args.len() != 1 {
            return fail(lua, "wrong number of arguments");
        }
        let bytes = match &args[0] {
            Value::String(s) => s.as_bytes().to_vec(),
            Value::Integer(i) => i.to_string().into_bytes(),
            Value::Number(n) => lua_number_text(*n).into_bytes(),
            _ => Vec::new(),
        };
        Ok(Ok(Value::String(lua.create_string(sha1_hex(&bytes))?)))
    })?)?;
    api.raw_set("error_reply", lua.create_function(|lua, args: MultiValue| {
        match (args.len(), args.front()) {
            (1, Some(Value::String(s))) => {
                let text = c_str(&s.as_bytes()).to_vec();
                let text = if text.starts_with(b"-") { text } else { [&b"-"[..], &text].concat() };
                error_table_bytes(lua, &text, false)
            }
            _ => error_table(lua, "ERR wrong number or type of arguments"),
        }
    })?)?;
    api.raw_set("status_reply", lua.create_function(|lua, args: MultiValue| {
        match (args.len(), args.front()) {
            (1, Some(Value::String(s))) => {
                let t = lua.create_table()?;
                t.raw_set("ok", s.clone())?;
                Ok(Value::Table(t))
            }
            _ => error_table(lua, "ERR wrong number or type of arguments"),
        }
    })?)?;
    api.raw_set("log", raising(lua, |lua, args| {
        if args.len() < 2 {
            return fail(lua, "redis.log() requires two arguments or more.");
        }
        let level = match &args[0] {
            Value::Integer(i) => *i,
            Value::Number(n) => *n as i64,
            _ => return fail(lua, "First argument must be a number (log level)."),
        };
        if !(0..=3).contains(&level) {
            return fail(lua, "Invalid debug level.");
        }
        Ok(Ok(Value::Nil))
    })?)?;
    for (name, level) in [("LOG_DEBUG", 0), ("LOG_VERBOSE", 1), ("LOG_NOTICE", 2), ("LOG_WARNING", 3)] {
        api.raw_set(name, level)?;
    }
    let st = state.clone();
    api.raw_set("setresp", raising(lua, move |lua, args| {
        if args.len() != 1 {
            return fail(lua, "redis.setresp() requires one argument.");
        }
        match &args[0] {
            Value::Integer(v @ (2 | 3)) => st.resp.store(*v as u8, Relaxed),
            _ => return fail(lua, "RESP version must be 2 or 3."),
        }
        Ok(Ok(Value::Nil))
    })?)?;
    api.raw_set("set_repl", raising(lua, |lua, args| {
        if args.len() != 1 {
            return fail(lua, "redis.set_repl() requires two arguments.");
        }
        match &args[0] {
            Value::Integer(0..=3) => Ok(Ok(Value::Nil)),
            _ => fail(lua, "Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE."),
        }
    })?)?;
    for (name, v) in [("REPL_NONE", 0), ("REPL_AOF", 1), ("REPL_SLAVE", 2), ("REPL_REPLICA", 2), ("REPL_ALL", 3)] {
        api.raw_set(name, v)?;
    }
    api.raw_set("replicate_commands", lua.create_function(|_, ()| Ok(true))?)?;
    api.raw_set("breakpoint", lua.create_function(|_, ()| Ok(false))?)?;
    api.raw_set("debug", lua.create_function(|_, _: MultiValue| Ok(()))?)?;
    api.raw_set("acl_check_cmd", raising(lua, |lua, args| {
        let name = match args.front() {
            Some(Value::String(s)) => s.as_bytes().to_vec(),
            _ => return fail(lua, "Please specify at least one argument for this redis lib call"),
        };
        // Redis's lookupCommand: a container's subcommand when one is given.
        let sub = match args.get(1) {
            Some(Value::String(s)) => Some(s.as_bytes().to_vec()),
            _ => None,
        };
        let found = crate::exec::commands::lookup(&name).filter(|c| !c.is_subcommand()).and_then(|c| match sub {
            Some(sub) if c.is_container() => crate::exec::commands::subcommand(c, &sub),
            _ => Some(c),
        });
        match found {
            Some(_) => Ok(Ok(Value::Boolean(true))),
            None => fail(lua, "Invalid command passed to redis.acl_check_cmd()"),
        }
    })?)?;
    let st = state.clone();
    api.raw_set("killed", lua.create_function(move |_, ()| Ok(st.killed.load(Relaxed)))?)?;
    api.raw_set("REDIS_VERSION", "7.0.15")?;
    api.raw_set("REDIS_VERSION_NUM", 0x00_07_00_0f)?;
    Ok(api)
}

/// `Err({err = "ERR text"})`: what a [`raising`] function returns to raise
/// Redis's error table.
fn fail(lua: &Lua, text: &str) -> mlua::Result<Result<Value, Value>> {
    Ok(Err(error_table(lua, &format!("ERR {text}"))?))
}

/// A Lua function that runs `f` and raises the value it fails with, from
/// a C frame as Redis's own functions raise (mlua cannot raise a Lua value
/// from Rust, and a Lua wrapper would lose the script's frame to a tail
/// call: `return redis.log()` must still name the script's line). A
/// string error gets the caller's position, as `luaL_error` adds it.
pub(crate) fn raising<F>(lua: &Lua, f: F) -> mlua::Result<Function>
where
    F: Fn(&Lua, MultiValue) -> mlua::Result<Result<Value, Value>> + Send + 'static,
{
    let inner = lua.create_function(move |lua, args: MultiValue| {
        Ok(match f(lua, args)? {
            Ok(v) => (v, Value::Nil),
            Err(e) => (Value::Nil, e),
        })
    })?;
    // SAFETY: pushes one C closure over the value exec_raw pushed.
    unsafe { lua.exec_raw::<Function>(inner, |state| mlua::ffi::lua_pushcclosure(state, raise_second, 1)) }
}

/// The field of an error table a [`raising`] function returns to raise
/// `luaL_argerror(L, t[ARG_ERROR], t.msg)` from its C closure, which names
/// the function as Lua called it (`struct`'s errors).
pub(crate) const ARG_ERROR: &str = "pmwire_argerror";

/// Raises the error value on the top of the stack, from a C closure: a
/// string with `luaL_where` before it, an [`ARG_ERROR`] table as
/// `luaL_argerror`, anything else as it is.
///
/// # Safety
/// `state` runs a C function and has the error value on its top.
unsafe fn raise_top(state: *mut mlua::ffi::lua_State) -> std::ffi::c_int {
    use mlua::ffi;
    // SAFETY: as `raise_second`; the message stays on the stack while
    // luaL_argerror formats it.
    unsafe {
        if ffi::lua_type(state, -1) == ffi::LUA_TSTRING {
            ffi::luaL_where(state, 1);
            ffi::lua_insert(state, -2);
            ffi::lua_concat(state, 2);
        } else if ffi::lua_type(state, -1) == ffi::LUA_TTABLE {
            ffi::lua_getfield(state, -1, c"pmwire_argerror".as_ptr());
            if ffi::lua_type(state, -1) == ffi::LUA_TNUMBER {
                let arg = ffi::lua_tointeger(state, -1) as std::ffi::c_int;
                ffi::lua_getfield(state, -2, c"msg".as_ptr());
                let msg = ffi::lua_tostring(state, -1);
                return ffi::luaL_argerror(state, arg, msg);
            }
            ffi::lua_settop(state, -2);
        }
        ffi::lua_error(state)
    }
}

/// [`raising`] for a function of several results: `f`'s values are
/// returned, or its error raised from a C frame.
pub(crate) fn raising_many<F>(lua: &Lua, f: F) -> mlua::Result<Function>
where
    F: Fn(&Lua, MultiValue) -> mlua::Result<Result<MultiValue, Value>> + Send + 'static,
{
    let inner = lua.create_function(move |lua, args: MultiValue| {
        Ok(match f(lua, args)? {
            Ok(mut values) => {
                values.push_front(Value::Nil);
                values
            }
            Err(e) => MultiValue::from_vec(vec![e]),
        })
    })?;
    // SAFETY: pushes one C closure over the value exec_raw pushed.
    unsafe { lua.exec_raw::<Function>(inner, |state| mlua::ffi::lua_pushcclosure(state, raise_first, 1)) }
}

/// The C closure of [`raising_many`]: calls its upvalue with every
/// argument; raises the first result if it is not nil, else returns the rest.
unsafe extern "C-unwind" fn raise_first(state: *mut mlua::ffi::lua_State) -> std::ffi::c_int {
    use mlua::ffi;
    // SAFETY: as `raise_second`.
    unsafe {
        let n = ffi::lua_gettop(state);
        ffi::lua_pushvalue(state, ffi::lua_upvalueindex(1));
        ffi::lua_insert(state, 1);
        ffi::lua_call(state, n, ffi::LUA_MULTRET);
        if ffi::lua_type(state, 1) != ffi::LUA_TNIL {
            ffi::lua_settop(state, 1);
            return raise_top(state);
        }
        ffi::lua_remove(state, 1);
        ffi::lua_gettop(state)
    }
}

/// The C closure of [`raising`]: calls its upvalue with every argument;
/// raises the second result if it is not nil, else returns the first.
unsafe extern "C-unwind" fn raise_second(state: *mut mlua::ffi::lua_State) -> std::ffi::c_int {
    use mlua::ffi;
    // SAFETY (whole body): a C function on the stack Lua gave it; `lua_call`
    // and `lua_error` may unwind through this frame, which holds nothing to drop.
    unsafe {
        let n = ffi::lua_gettop(state);
        ffi::lua_pushvalue(state, ffi::lua_upvalueindex(1));
        ffi::lua_insert(state, 1);
        ffi::lua_call(state, n, 2);
        if ffi::lua_type(state, -1) != ffi::LUA_TNIL {
            return raise_top(state);
        }
        ffi::lua_settop(state, -2);
        1
    }
}

/// A Lua number as `tostring` writes it (`%.14g`).
pub fn lua_number_text(n: f64) -> String {
    cjson::format_g(n, 14)
}

#[cfg(test)]
mod bridge_tests;
