//! The `cjson` library scripts get, as Redis bundles lua-cjson 2.1 with its
//! default settings: `cjson.encode`, `cjson.decode`, `cjson.null`.
//!
//! Encoding: a table whose keys are all positive integers is an array
//! (holes are `null`; an array longer than 10 with fewer than half its
//! slots set is refused as "excessively sparse"), an empty table `{}`,
//! any other table an object (number keys written as strings); numbers
//! as `%.14g`, NaN and infinities refused; strings escaped as lua-cjson
//! escapes them (`/` too); nesting past 1000 refused. Decoding: `null`
//! is `cjson.null` (a light userdata `NULL`), numbers Lua numbers.
//! `cjson.encode_max_depth(n)` and `cjson.decode_max_depth(n)` lower the
//! nesting limit for the rest of the run ([`Settings`]; lua-cjson keeps
//! them in the interpreter, which would let one script change another's
//! encoding: here every run starts from the defaults); the other settings
//! functions are accepted and change nothing.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use mlua::{LightUserData, Lua, MultiValue, Table, Value};

/// Deepest nesting either way (lua-cjson's default).
pub const MAX_DEPTH: usize = 1000;

/// `d` as C's `printf("%.<precision>g", d)`.
pub fn format_g(d: f64, precision: usize) -> String {
    if d.is_nan() {
        return if d.is_sign_negative() { "-nan".into() } else { "nan".into() };
    }
    if d.is_infinite() {
        return if d < 0.0 { "-inf".into() } else { "inf".into() };
    }
    if d == 0.0 {
        return if d.is_sign_negative() { "-0".into() } else { "0".into() };
    }
    let p = precision.max(1);
    let sci = format!("{:.*e}", p - 1, d);
    let (mantissa, exp) = sci.split_once('e').expect("exponent form");
    let exp: i32 = exp.parse().expect("exponent");
    let strip = |s: &str| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s.to_string()
        }
    };
    if exp < -4 || exp >= p as i32 {
        format!("{}e{}{:02}", strip(mantissa), if exp < 0 { '-' } else { '+' }, exp.unsigned_abs())
    } else {
        let decimals = (p as i32 - 1 - exp).max(0) as usize;
        strip(&format!("{d:.decimals$}"))
    }
}

/// The settings a run may change (module docs).
#[derive(Debug)]
pub struct Settings {
    encode_max_depth: AtomicUsize,
    decode_max_depth: AtomicUsize,
    /// `encode_invalid_numbers`: 0 refuse NaN and infinities, 1 write them
    /// `nan`/`inf`/`-inf`, 2 write `null` (lua-cjson's off/on/null).
    encode_invalid: AtomicU8,
}

impl Settings {
    fn new() -> Settings {
        Settings { encode_max_depth: AtomicUsize::new(MAX_DEPTH), decode_max_depth: AtomicUsize::new(MAX_DEPTH), encode_invalid: AtomicU8::new(0) }
    }

    /// Back to lua-cjson's defaults (a run begins).
    pub fn reset(&self) {
        self.encode_max_depth.store(MAX_DEPTH, Relaxed);
        self.decode_max_depth.store(MAX_DEPTH, Relaxed);
        self.encode_invalid.store(0, Relaxed);
    }
}

/// lua-cjson's `json_integer_option`: with an argument, checks it is an
/// integer in 1..=2^31-1 and sets it; answers the value in force.
fn depth_option(lua: &Lua, name: &str, setting: &AtomicUsize, args: &MultiValue) -> mlua::Result<Result<Value, Value>> {
    if let Some(arg) = args.front() {
        let n = match arg {
            Value::Integer(i) => Some(*i as f64),
            Value::Number(n) => Some(*n),
            Value::String(s) => std::str::from_utf8(&s.as_bytes()).ok().and_then(|t| t.trim().parse::<f64>().ok()),
            _ => None,
        };
        match n {
            Some(n) if (1.0..=2_147_483_647.0).contains(&n.trunc()) => setting.store(n.trunc() as usize, Relaxed),
            Some(_) => return Ok(Err(Value::String(lua.create_string(format!("bad argument #1 to '{name}' (expected integer between 1 and 2147483647)"))?))),
            None => return Ok(Err(Value::String(lua.create_string(format!("bad argument #1 to '{name}' (number expected)"))?))),
        }
    }
    Ok(Ok(Value::Integer(setting.load(Relaxed) as i64)))
}

/// lua-cjson's `json_enum_option` for `encode_invalid_numbers`: true/"on",
/// false/"off" or "null" sets it; answers the value in force.
fn invalid_option(lua: &Lua, setting: &AtomicU8, args: &MultiValue) -> mlua::Result<Result<Value, Value>> {
    let value = match args.front() {
        None | Some(Value::Nil) => None,
        Some(Value::Boolean(b)) => Some(u8::from(*b)),
        Some(Value::String(s)) => match &s.as_bytes()[..] {
            b"off" => Some(0),
            b"on" => Some(1),
            b"null" => Some(2),
            _ => return Ok(Err(Value::String(lua.create_string("bad argument #1 to 'encode_invalid_numbers' (invalid option)")?))),
        },
        Some(_) => return Ok(Err(Value::String(lua.create_string("bad argument #1 to 'encode_invalid_numbers' (invalid option)")?))),
    };
    if let Some(v) = value {
        setting.store(v, Relaxed);
    }
    Ok(Ok(match setting.load(Relaxed) {
        0 => Value::Boolean(false),
        1 => Value::Boolean(true),
        _ => Value::String(lua.create_string("null")?),
    }))
}

fn null() -> Value {
    Value::LightUserData(LightUserData(std::ptr::null_mut()))
}

/// The library table, and its settings (which the interpreter resets
/// before each run).
pub fn library(lua: &Lua) -> mlua::Result<(Table, Arc<Settings>)> {
    let settings = Arc::new(Settings::new());
    let t = lua.create_table()?;
    t.raw_set("null", null())?;
    let st = settings.clone();
    t.raw_set("encode", super::raising(lua, move |lua, args| {
        if args.len() != 1 {
            return Ok(Err(Value::String(lua.create_string("bad argument #1 to 'encode' (expected 1 argument)")?)));
        }
        let mut out = Vec::new();
        let how = Encoding { max_depth: st.encode_max_depth.load(Relaxed), invalid: st.encode_invalid.load(Relaxed) };
        Ok(match encode(&args[0], 0, &how, &mut out) {
            Ok(()) => Ok(Value::String(lua.create_string(&out)?)),
            Err(text) => Err(Value::String(lua.create_string(text)?)),
        })
    })?)?;
    let st = settings.clone();
    t.raw_set("decode", super::raising(lua, move |lua, args| {
        let Some(Value::String(s)) = args.front() else {
            return Ok(Err(Value::String(lua.create_string("bad argument #1 to 'decode' (string expected)")?)));
        };
        let bytes = s.as_bytes().to_vec();
        match serde_json::from_slice::<serde_json::Value>(&bytes) {
            Ok(parsed) => Ok(match decode(lua, &parsed, 0, st.decode_max_depth.load(Relaxed)) {
                Ok(v) => Ok(v),
                Err(e) => Err(Value::String(lua.create_string(e.to_string())?)),
            }),
            Err(e) => Ok(Err(Value::String(lua.create_string(format!("Expected value but found invalid token at character {}", e.column().max(1)))?))),
        }
    })?)?;
    let st = settings.clone();
    t.raw_set("encode_max_depth", super::raising(lua, move |lua, args| depth_option(lua, "encode_max_depth", &st.encode_max_depth, &args))?)?;
    let st = settings.clone();
    t.raw_set("decode_max_depth", super::raising(lua, move |lua, args| depth_option(lua, "decode_max_depth", &st.decode_max_depth, &args))?)?;
    let st = settings.clone();
    t.raw_set("encode_invalid_numbers", super::raising(lua, move |lua, args| invalid_option(lua, &st.encode_invalid, &args))?)?;
    // Settings functions lua-cjson has; the defaults are kept.
    for name in ["encode_sparse_array", "encode_number_precision", "encode_keep_buffer", "decode_invalid_numbers"] {
        t.raw_set(name, lua.create_function(|_, _: MultiValue| Ok(()))?)?;
    }
    Ok((t, settings))
}

fn escape(s: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    for &c in s {
        match c {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'/' => out.extend_from_slice(b"\\/"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            c if c < 0x20 || c == 0x7f => out.extend_from_slice(format!("\\u{c:04x}").as_bytes()),
            c => out.push(c),
        }
    }
    out.push(b'"');
}

/// How a run encodes ([`Settings`]).
struct Encoding {
    max_depth: usize,
    invalid: u8,
}

fn number(n: f64, how: &Encoding, out: &mut Vec<u8>) -> Result<(), String> {
    if !n.is_finite() {
        match how.invalid {
            0 => return Err("Cannot serialise number: must not be NaN or Inf".into()),
            // Redis's lua-cjson: "nan" whatever its sign, infinities by %.14g.
            1 if n.is_nan() => out.extend_from_slice(b"nan"),
            1 => out.extend_from_slice(format_g(n, 14).as_bytes()),
            _ => out.extend_from_slice(b"null"),
        }
        return Ok(());
    }
    out.extend_from_slice(format_g(n, 14).as_bytes());
    Ok(())
}

/// The array length lua-cjson would use, or `None` for an object.
fn array_len(t: &Table) -> Result<Option<usize>, String> {
    let (mut max, mut items) = (0usize, 0usize);
    for pair in t.clone().pairs::<Value, Value>() {
        let (k, _) = pair.map_err(|e| e.to_string())?;
        let n = match k {
            Value::Integer(i) if i >= 1 => i as f64,
            Value::Number(n) if n >= 1.0 && n.fract() == 0.0 => n,
            _ => return Ok(None),
        };
        max = max.max(n as usize);
        items += 1;
    }
    if max > 10 && max > items * 2 {
        return Err("Cannot serialise table: excessively sparse array".into());
    }
    Ok(if max == 0 { None } else { Some(max) })
}

fn encode(v: &Value, depth: usize, how: &Encoding, out: &mut Vec<u8>) -> Result<(), String> {
    match v {
        Value::Nil => out.extend_from_slice(b"null"),
        Value::LightUserData(p) if p.0.is_null() => out.extend_from_slice(b"null"),
        Value::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Integer(i) => number(*i as f64, how, out)?,
        Value::Number(n) => number(*n, how, out)?,
        Value::String(s) => escape(&s.as_bytes(), out),
        Value::Table(t) => {
            if depth + 1 > how.max_depth {
                return Err(format!("Cannot serialise, excessive nesting ({})", depth + 1));
            }
            match array_len(t)? {
                Some(len) => {
                    out.push(b'[');
                    for i in 1..=len {
                        if i > 1 {
                            out.push(b',');
                        }
                        let item: Value = t.raw_get(i).map_err(|e| e.to_string())?;
                        encode(&item, depth + 1, how, out)?;
                    }
                    out.push(b']');
                }
                None => {
                    out.push(b'{');
                    let mut first = true;
                    for pair in t.clone().pairs::<Value, Value>() {
                        let (k, val) = pair.map_err(|e| e.to_string())?;
                        if !first {
                            out.push(b',');
                        }
                        first = false;
                        match &k {
                            Value::String(s) => escape(&s.as_bytes(), out),
                            Value::Integer(i) => escape(format_g(*i as f64, 14).as_bytes(), out),
                            Value::Number(n) => escape(format_g(*n, 14).as_bytes(), out),
                            _ => return Err("Cannot serialise table: table key must be a number or string".into()),
                        }
                        out.push(b':');
                        encode(&val, depth + 1, how, out)?;
                    }
                    out.push(b'}');
                }
            }
        }
        other => return Err(format!("Cannot serialise {}: type not supported", other.type_name())),
    }
    Ok(())
}

/// `depth`: the arrays and objects around `v`; one more than `max` is refused.
fn decode(lua: &Lua, v: &serde_json::Value, depth: usize, max: usize) -> mlua::Result<Value> {
    if matches!(v, serde_json::Value::Array(_) | serde_json::Value::Object(_)) && depth + 1 > max {
        return Err(mlua::Error::RuntimeError(format!("Found too many nested data structures ({})", depth + 1)));
    }
    Ok(match v {
        serde_json::Value::Null => null(),
        serde_json::Value::Bool(b) => Value::Boolean(*b),
        serde_json::Value::Number(n) => Value::Number(n.as_f64().unwrap_or(f64::NAN)),
        serde_json::Value::String(s) => Value::String(lua.create_string(s)?),
        serde_json::Value::Array(items) => {
            let t = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.iter().enumerate() {
                t.raw_set(i + 1, decode(lua, item, depth + 1, max)?)?;
            }
            Value::Table(t)
        }
        serde_json::Value::Object(map) => {
            let t = lua.create_table_with_capacity(0, map.len())?;
            for (k, item) in map {
                t.raw_set(lua.create_string(k)?, decode(lua, item, depth + 1, max)?)?;
            }
            Value::Table(t)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_g_matches_printf() {
        assert_eq!(format_g(1.0, 14), "1");
        assert_eq!(format_g(0.1, 14), "0.1");
        assert_eq!(format_g(1e15, 14), "1e+15");
        assert_eq!(format_g(123456789012345.0, 14), "1.2345678901234e+14");
        assert_eq!(format_g(0.0001, 14), "0.0001");
        assert_eq!(format_g(0.00001, 14), "1e-05");
        assert_eq!(format_g(-2.5, 14), "-2.5");
        assert_eq!(format_g(0.1, 17), "0.10000000000000001");
    }

    #[test]
    fn strings_escape_as_lua_cjson() {
        let mut out = Vec::new();
        escape(b"a/b\"c\n\x01", &mut out);
        assert_eq!(out, b"\"a\\/b\\\"c\\n\\u0001\"");
    }
}
