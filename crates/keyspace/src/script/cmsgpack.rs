//! The `cmsgpack` library scripts get, as Redis bundles lua-cmsgpack 0.4.0
//! (`deps/lua/src/lua_cmsgpack.c`): `cmsgpack.pack(v, ...)`,
//! `cmsgpack.unpack(s)`, `cmsgpack.unpack_one(s [, offset])`,
//! `cmsgpack.unpack_limit(s, limit [, offset])`. Job queues such as BullMQ
//! pass their options to their scripts packed this way.
//!
//! Packing, as lua-cmsgpack: a string is a MessagePack str (fixstr, str 8,
//! 16 or 32, by length); a number that is a whole `int64` is the smallest
//! integer form, any other a float 32 if it survives the round trip, else a
//! float 64; a boolean is true or false; a table whose keys are exactly
//! `1..n` is an array (an empty table too), any other a map in `next`'s
//! order; a table nested 16 deep, and anything else (nil, a function...),
//! is nil. Several arguments pack one after the other into one string.
//!
//! Unpacking: every integer, float and str form, nil, booleans, arrays and
//! maps; bin, ext and the reserved byte are "Bad data format in input.",
//! a value cut short "Missing bytes in input.". As lua-cmsgpack, a fixarray
//! is read as an array and an array's nil elements leave holes. Integers
//! become Lua numbers (doubles in Lua 5.1, so past 2^53 they round).
//! `unpack` returns every value; `unpack_one` and `unpack_limit` return
//! first the offset of what is left (-1 when nothing is) and then the
//! values.

use mlua::{Lua, MultiValue, Table, Value};

/// Deepest table nesting packed (lua-cmsgpack's `LUACMSGPACK_MAX_NESTING`).
pub const MAX_NESTING: usize = 16;

/// The library table.
pub fn library(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.raw_set("pack", super::raising(lua, |lua, args| {
        if args.is_empty() {
            return Ok(Err(text(lua, "bad argument #0 to 'pack' (MessagePack pack needs input.)")?));
        }
        let mut out = Vec::new();
        for v in args.iter() {
            pack(v, 0, &mut out)?;
        }
        Ok(Ok(Value::String(lua.create_string(&out)?)))
    })?)?;
    // The unpackers return any number of values: each inner function
    // returns them in a table with its count, which `spread` pushes.
    let unpacker = |name: &'static str, arity: fn(&MultiValue) -> Result<(i64, i64), String>| -> mlua::Result<mlua::Function> {
        let inner = lua.create_function(move |lua, args: MultiValue| {
            let bytes = match args.front() {
                Some(Value::String(s)) => s.as_bytes().to_vec(),
                // luaL_checklstring takes a number as its text (`%.14g`).
                Some(Value::Integer(i)) => i.to_string().into_bytes(),
                Some(Value::Number(n)) => super::cjson::format_g(*n, 14).into_bytes(),
                other => {
                    let got = other.map_or("no value", |v| v.type_name());
                    return Ok((Value::Nil, text(lua, &format!("bad argument #1 to '{name}' (string expected, got {got})"))?));
                }
            };
            let (limit, offset) = match arity(&args) {
                Ok(p) => p,
                Err(e) => return Ok((Value::Nil, text(lua, &e)?)),
            };
            Ok(match unpack(lua, &bytes, limit, offset)? {
                Ok(values) => {
                    let t = lua.create_table()?;
                    let n = values.len();
                    for (i, v) in values.into_iter().enumerate() {
                        t.raw_set(i + 1, v)?;
                    }
                    t.raw_set("n", n)?;
                    (Value::Table(t), Value::Nil)
                }
                // A Lua error of the table built (a nil key) has no position, as the
                // VM raises it from C; lua-cmsgpack's own errors have the caller's.
                Err(Unpacked::Lua(e)) => {
                    let t = lua.create_table()?;
                    t.raw_set(1, e)?;
                    (Value::Nil, Value::Table(t))
                }
                Err(Unpacked::Text(e)) => (Value::Nil, text(lua, &e)?),
            })
        })?;
        // SAFETY: pushes one C closure over the value exec_raw pushed.
        unsafe { lua.exec_raw::<mlua::Function>(inner, |state| mlua::ffi::lua_pushcclosure(state, spread, 1)) }
    };
    t.raw_set("unpack", unpacker("unpack", |_| Ok((0, 0)))?)?;
    t.raw_set("unpack_one", unpacker("unpack_one", |args| Ok((1, opt_integer(args, 1, "unpack_one")?.unwrap_or(0))))?)?;
    t.raw_set(
        "unpack_limit",
        unpacker("unpack_limit", |args| {
            let limit = opt_integer(args, 1, "unpack_limit")?.ok_or("bad argument #2 to 'unpack_limit' (number expected, got no value)")?;
            Ok((limit, opt_integer(args, 2, "unpack_limit")?.unwrap_or(0)))
        })?,
    )?;
    t.raw_set("_NAME", "cmsgpack")?;
    t.raw_set("_VERSION", "lua-cmsgpack 0.4.0")?;
    t.raw_set("_COPYRIGHT", "Copyright (C) 2012, Salvatore Sanfilippo")?;
    t.raw_set("_DESCRIPTION", "MessagePack C implementation for Lua")?;
    Ok(t)
}

fn text(lua: &Lua, s: &str) -> mlua::Result<Value> {
    Ok(Value::String(lua.create_string(s)?))
}

/// Argument `at` (0-based) as `luaL_optinteger` reads it: absent or nil is
/// `None`, a number (or numeric string) truncated, anything else an error.
fn opt_integer(args: &MultiValue, at: usize, name: &str) -> Result<Option<i64>, String> {
    match args.get(at) {
        None | Some(Value::Nil) => Ok(None),
        Some(Value::Integer(i)) => Ok(Some(*i as i64)),
        Some(Value::Number(n)) => Ok(Some(*n as i64)),
        Some(Value::String(s)) => {
            let parsed = s.to_str().ok().and_then(|t| t.trim().parse::<f64>().ok());
            parsed.map(|n| Some(n as i64)).ok_or_else(|| format!("bad argument #{} to '{name}' (number expected, got string)", at + 1))
        }
        Some(other) => Err(format!("bad argument #{} to '{name}' (number expected, got {})", at + 1, other.type_name())),
    }
}

/// A Lua number as lua-cmsgpack packs it.
fn pack_number(n: f64, out: &mut Vec<u8>) {
    // IS_INT64_EQUIVALENT: not infinite and `(int64_t)n == n`; x86 turns
    // an out-of-range or NaN conversion into INT64_MIN, which compares
    // unequal unless n is exactly -2^63.
    let as_int = if n.is_finite() && n >= -9_223_372_036_854_775_808.0 && n < 9_223_372_036_854_775_808.0 { Some(n as i64) } else { None };
    match as_int {
        Some(i) if i as f64 == n => pack_int(i, out),
        _ => {
            let f = n as f32;
            if f64::from(f) == n {
                out.push(0xca);
                out.extend_from_slice(&f.to_be_bytes());
            } else {
                out.push(0xcb);
                out.extend_from_slice(&n.to_be_bytes());
            }
        }
    }
}

fn pack_int(n: i64, out: &mut Vec<u8>) {
    if n >= 0 {
        match n {
            0..=127 => out.push(n as u8),
            128..=0xff => out.extend_from_slice(&[0xcc, n as u8]),
            0x100..=0xffff => {
                out.push(0xcd);
                out.extend_from_slice(&(n as u16).to_be_bytes());
            }
            0x1_0000..=0xffff_ffff => {
                out.push(0xce);
                out.extend_from_slice(&(n as u32).to_be_bytes());
            }
            _ => {
                out.push(0xcf);
                out.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
    } else if n >= -32 {
        out.push(n as i8 as u8);
    } else if n >= -128 {
        out.extend_from_slice(&[0xd0, n as i8 as u8]);
    } else if n >= -32768 {
        out.push(0xd1);
        out.extend_from_slice(&(n as i16).to_be_bytes());
    } else if n >= -2_147_483_648 {
        out.push(0xd2);
        out.extend_from_slice(&(n as i32).to_be_bytes());
    } else {
        out.push(0xd3);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

/// A container or str header: `fix` (with the length in its low bits, up
/// to `fix_max`), else the 8-bit form (str only), 16-bit, then 32-bit.
fn pack_header(len: usize, fix: u8, fix_max: usize, forms: [Option<u8>; 3], out: &mut Vec<u8>) {
    if len <= fix_max {
        out.push(fix | len as u8);
    } else if let (Some(b), true) = (forms[0], len <= 0xff) {
        out.extend_from_slice(&[b, len as u8]);
    } else if len <= 0xffff {
        out.push(forms[1].expect("a 16-bit form"));
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(forms[2].expect("a 32-bit form"));
        // lua-cmsgpack writes the low 32 bits of a longer length.
        out.extend_from_slice(&(len as u32).to_be_bytes());
    }
}

fn pack(v: &Value, level: usize, out: &mut Vec<u8>) -> mlua::Result<()> {
    match v {
        Value::String(s) => {
            let b = s.as_bytes();
            pack_header(b.len(), 0xa0, 31, [Some(0xd9), Some(0xda), Some(0xdb)], out);
            out.extend_from_slice(&b);
        }
        Value::Boolean(b) => out.push(if *b { 0xc3 } else { 0xc2 }),
        Value::Integer(i) => pack_number(*i as f64, out),
        Value::Number(n) => pack_number(*n, out),
        Value::Table(t) if level < MAX_NESTING => {
            if let Some(len) = array_len(t)? {
                pack_header(len, 0x90, 15, [None, Some(0xdc), Some(0xdd)], out);
                for i in 1..=len {
                    pack(&t.raw_get::<Value>(i)?, level + 1, out)?;
                }
            } else {
                // Counted, then encoded, in two walks as lua-cmsgpack does: a
                // pair is dropped before the next is read, so a map of any
                // size holds two Lua references at a time.
                let mut count = 0usize;
                for pair in t.pairs::<Value, Value>() {
                    pair?;
                    count += 1;
                }
                pack_header(count, 0x80, 15, [None, Some(0xde), Some(0xdf)], out);
                for pair in t.pairs::<Value, Value>() {
                    let (k, v) = pair?;
                    pack(&k, level + 1, out)?;
                    pack(&v, level + 1, out)?;
                }
            }
        }
        _ => out.push(0xc0),
    }
    Ok(())
}

/// `Some(n)` if the table's keys are exactly `1..=n` (lua-cmsgpack's
/// `table_is_an_array`: every key a positive whole number that fits an
/// `int`, and as many keys as the largest).
fn array_len(t: &Table) -> mlua::Result<Option<usize>> {
    let (mut count, mut max) = (0usize, 0usize);
    for pair in t.pairs::<Value, Value>() {
        let (k, _) = pair?;
        let n = match k {
            Value::Integer(i) => i as f64,
            Value::Number(n) => n,
            _ => return Ok(None),
        };
        if n <= 0.0 || n > f64::from(i32::MAX) || n.fract() != 0.0 {
            return Ok(None);
        }
        max = max.max(n as usize);
        count += 1;
    }
    Ok((max == count).then_some(count))
}

/// Why a decode stopped.
enum Stop {
    Eof,
    BadFormat,
    /// A Lua error while building a table (a nil or NaN map key).
    Lua(String),
}

struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn need(&self, n: usize) -> Result<(), Stop> {
        if self.b.len() - self.at < n { Err(Stop::Eof) } else { Ok(()) }
    }

    fn take(&mut self, n: usize) -> Result<&[u8], Stop> {
        self.need(n)?;
        let s = &self.b[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }

    fn be(&mut self, n: usize) -> Result<u64, Stop> {
        Ok(self.take(n)?.iter().fold(0u64, |acc, &b| (acc << 8) | u64::from(b)))
    }
}

fn decode(lua: &Lua, c: &mut Cursor<'_>) -> Result<Value, Stop> {
    let lua_err = |e: mlua::Error| Stop::Lua(e.to_string());
    let str_of = |lua: &Lua, b: &[u8]| lua.create_string(b).map(Value::String).map_err(lua_err);
    c.need(1)?;
    let first = c.b[c.at];
    c.at += 1;
    let number = |n: f64| Ok(Value::Number(n));
    match first {
        0xcc => number(c.be(1)? as f64),
        0xcd => number(c.be(2)? as f64),
        0xce => number(c.be(4)? as f64),
        0xcf => number(c.be(8)? as f64),
        0xd0 => number(f64::from(c.be(1)? as u8 as i8)),
        0xd1 => number(f64::from(c.be(2)? as u16 as i16)),
        0xd2 => number(f64::from(c.be(4)? as u32 as i32)),
        0xd3 => number(c.be(8)? as i64 as f64),
        0xc0 => Ok(Value::Nil),
        0xc2 => Ok(Value::Boolean(false)),
        0xc3 => Ok(Value::Boolean(true)),
        0xca => number(f64::from(f32::from_bits(c.be(4)? as u32))),
        0xcb => number(f64::from_bits(c.be(8)?)),
        0xd9 | 0xda | 0xdb => {
            let width = [1, 2, 4][usize::from(first - 0xd9)];
            let len = c.be(width)? as usize;
            let s = c.take(len)?;
            str_of(lua, s)
        }
        0xdc | 0xdd => {
            let len = c.be(if first == 0xdc { 2 } else { 4 })? as usize;
            array(lua, c, len)
        }
        0xde | 0xdf => {
            let len = c.be(if first == 0xde { 2 } else { 4 })? as usize;
            map(lua, c, len)
        }
        b if b & 0x80 == 0 => number(f64::from(b)),
        b if b & 0xe0 == 0xe0 => number(f64::from(b as i8)),
        b if b & 0xe0 == 0xa0 => {
            let s = c.take(usize::from(b & 0x1f))?;
            str_of(lua, s)
        }
        b if b & 0xf0 == 0x90 => array(lua, c, usize::from(b & 0x0f)),
        b if b & 0xf0 == 0x80 => map(lua, c, usize::from(b & 0x0f)),
        _ => Err(Stop::BadFormat),
    }
}

fn array(lua: &Lua, c: &mut Cursor<'_>, len: usize) -> Result<Value, Stop> {
    let lua_err = |e: mlua::Error| Stop::Lua(e.to_string());
    let t = lua.create_table().map_err(lua_err)?;
    for i in 1..=len {
        let v = decode(lua, c)?;
        t.raw_set(i, v).map_err(lua_err)?;
    }
    Ok(Value::Table(t))
}

fn map(lua: &Lua, c: &mut Cursor<'_>, len: usize) -> Result<Value, Stop> {
    let lua_err = |e: mlua::Error| Stop::Lua(e.to_string());
    let t = lua.create_table().map_err(lua_err)?;
    for _ in 0..len {
        let k = decode(lua, c)?;
        let v = decode(lua, c)?;
        match &k {
            Value::Nil => return Err(Stop::Lua("table index is nil".into())),
            Value::Number(n) if n.is_nan() => return Err(Stop::Lua("table index is NaN".into())),
            _ => {}
        }
        t.raw_set(k, v).map_err(lua_err)?;
    }
    Ok(Value::Table(t))
}

/// Why [`unpack`] failed: lua-cmsgpack's own error (raised with the
/// caller's position, as `luaL_error` does) or the VM's (without).
enum Unpacked {
    Text(String),
    Lua(String),
}

/// The C closure of the unpackers: calls its upvalue with every argument,
/// which returns (values table, nil) or (nil, error); pushes the table's
/// `n` values, or raises the error: a string with the caller's position
/// (`luaL_where`), a table's first element as it is.
unsafe extern "C-unwind" fn spread(state: *mut mlua::ffi::lua_State) -> std::ffi::c_int {
    use mlua::ffi;
    // SAFETY (whole body): a C function on the stack Lua gave it; `lua_call`
    // and `lua_error` may unwind through this frame, which holds nothing to drop.
    unsafe {
        let n = ffi::lua_gettop(state);
        ffi::lua_pushvalue(state, ffi::lua_upvalueindex(1));
        ffi::lua_insert(state, 1);
        ffi::lua_call(state, n, 2);
        match ffi::lua_type(state, -1) {
            ffi::LUA_TNIL => {}
            ffi::LUA_TSTRING => {
                ffi::luaL_where(state, 1);
                ffi::lua_insert(state, -2);
                ffi::lua_concat(state, 2);
                ffi::lua_error(state);
            }
            _ => {
                ffi::lua_rawgeti(state, -1, 1);
                ffi::lua_error(state);
            }
        }
        ffi::lua_settop(state, -2);
        // The values table is on top: push t[1..=t.n].
        let t = ffi::lua_gettop(state);
        ffi::lua_getfield(state, t, c"n".as_ptr());
        let count = ffi::lua_tointeger(state, -1) as std::ffi::c_int;
        ffi::lua_settop(state, -2);
        assert!(count >= 0);
        if ffi::lua_checkstack(state, count) == 0 {
            ffi::lua_pushstring(state, c"too many return values at once; use unpack_one or unpack_limit instead.".as_ptr());
            ffi::lua_error(state);
        }
        for i in 1..=count {
            ffi::lua_rawgeti(state, t, i as _);
        }
        count
    }
}

/// lua-cmsgpack's `mp_unpack_full`: the values of `s` from `offset`, at most
/// `limit` (both 0: every value, and no offset returned first).
fn unpack(lua: &Lua, s: &[u8], limit: i64, offset: i64) -> mlua::Result<Result<Vec<Value>, Unpacked>> {
    if offset < 0 || limit < 0 {
        return Ok(Err(Unpacked::Text(format!("Invalid request to unpack with offset of {offset} and limit of {}.", s.len()))));
    }
    if offset as u64 > s.len() as u64 {
        return Ok(Err(Unpacked::Text(format!("Start offset {offset} greater than input length {}.", s.len()))));
    }
    let all = limit == 0 && offset == 0;
    let limit = if all { i64::from(i32::MAX) } else { limit };
    let mut c = Cursor { b: s, at: offset as usize };
    let mut values = Vec::new();
    while c.at < s.len() && (values.len() as i64) < limit {
        match decode(lua, &mut c) {
            Ok(v) => values.push(v),
            Err(Stop::Eof) => return Ok(Err(Unpacked::Text("Missing bytes in input.".into()))),
            Err(Stop::BadFormat) => return Ok(Err(Unpacked::Text("Bad data format in input.".into()))),
            Err(Stop::Lua(e)) => return Ok(Err(Unpacked::Lua(e))),
        }
    }
    if !all {
        let next = if c.at == s.len() { -1 } else { c.at as i64 };
        values.insert(0, Value::Number(next as f64));
    }
    Ok(Ok(values))
}
