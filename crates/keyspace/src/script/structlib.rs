//! The `struct` library scripts get (Roberto Ierusalimschy's struct.c 1.7,
//! as Redis embeds it in `deps/lua/src/lua_struct.c`): `struct.pack`,
//! `struct.unpack`, `struct.size`, byte for byte and error for error as
//! Redis 7.0 on x86-64 (`long` and `size_t` of 8 bytes, `int` of 4,
//! native order little-endian, largest alignment 8).
//!
//! Formats: `>` `<` byte order, `![n]` alignment (a power of 2; 8 without
//! `n`), `x` a pad byte, `b B` `h H` `l L` `T` `i[n] I[n]` signed and
//! unsigned integers of 1, 2, 8, 8 and `n` (4 by default, at most 32)
//! bytes, `f d` floats of 4 and 8 bytes, `s` a zero-terminated string,
//! `c[n]` `n` bytes (`c0`: the whole string when packing, the length read
//! just before when unpacking), `' '` ignored. Integers travel as Lua
//! numbers (doubles) and are converted as C converts them on x86-64
//! ([`to_uint`]).

use mlua::{Lua, MultiValue, Table, Value};

/// The largest integer size (`MAXINTSIZE`).
const MAX_INT_SIZE: usize = 32;
/// `!` without a number: the platform's largest alignment (`MAXALIGN`).
const MAX_ALIGN: usize = 8;
/// Lua 5.1's `LUAI_MAXCSTACK`: the most values a C function's frame holds.
const MAX_C_STACK: usize = 8000;

/// The byte order and alignment in force (`Header`).
#[derive(Clone, Copy)]
struct Header {
    big: bool,
    align: usize,
}

impl Default for Header {
    fn default() -> Self {
        Header { big: false, align: 1 }
    }
}

/// A format being read, option by option.
struct Format<'a> {
    fmt: &'a [u8],
    at: usize,
}

impl Format<'_> {
    fn next(&mut self) -> Option<u8> {
        // A C string: the format ends at its first NUL.
        let c = *self.fmt.get(self.at)?;
        if c == 0 {
            return None;
        }
        self.at += 1;
        Some(c)
    }

    /// `getnum`: the digits that follow, or `default` if none.
    fn number(&mut self, default: usize) -> Result<usize, String> {
        if !self.fmt.get(self.at).is_some_and(u8::is_ascii_digit) {
            return Ok(default);
        }
        let mut a: i32 = 0;
        while let Some(&d) = self.fmt.get(self.at).filter(|d| d.is_ascii_digit()) {
            let d = i32::from(d - b'0');
            if a > i32::MAX / 10 || a * 10 > i32::MAX - d {
                return Err("integral size overflow".into());
            }
            a = a * 10 + d;
            self.at += 1;
        }
        Ok(a as usize)
    }

    /// `optsize`: the size of option `opt`, reading its number.
    fn size(&mut self, opt: u8) -> Result<usize, String> {
        Ok(match opt {
            b'B' | b'b' | b'x' => 1,
            b'H' | b'h' => 2,
            b'L' | b'l' | b'T' | b'd' => 8,
            b'f' => 4,
            b'c' => self.number(1)?,
            b'i' | b'I' => {
                let size = self.number(4)?;
                if size > MAX_INT_SIZE {
                    return Err(format!("integral size {size} is larger than limit of {MAX_INT_SIZE}"));
                }
                size
            }
            _ => 0,
        })
    }

    /// `controloptions`: a byte order, an alignment, a space, or the error
    /// of an unknown option (the `luaL_argerror` text, as `Err(Some)` for
    /// argument 1, or a plain error).
    fn control(&mut self, opt: u8, h: &mut Header, name: &str) -> Result<(), Error> {
        match opt {
            b' ' => {}
            b'>' => h.big = true,
            b'<' => h.big = false,
            b'!' => {
                let a = self.number(MAX_ALIGN)?;
                if a == 0 || a & (a - 1) != 0 {
                    return Err(format!("alignment {a} is not a power of 2").into());
                }
                h.align = a;
            }
            _ => return Err(arg_error(1, name, &format!("invalid format option '{}'", opt as char))),
        }
        Ok(())
    }
}

/// `gettoalign`: pad bytes before an item of `size` at `len`.
fn to_align(len: usize, h: &Header, opt: u8, size: usize) -> usize {
    if size == 0 || opt == b'c' {
        return 0;
    }
    let size = size.min(h.align);
    (size.wrapping_sub(len & (size - 1))) & (size - 1)
}

/// An error: `luaL_error`'s text, or `luaL_argerror`'s argument and
/// message (the closure raising it names the function as Lua called it:
/// `unpack` for `struct.unpack(...)`, `?` through `pcall`).
#[derive(Debug, PartialEq)]
enum Error {
    Plain(String),
    Arg(usize, String),
}

impl From<String> for Error {
    fn from(text: String) -> Self {
        Error::Plain(text)
    }
}

impl From<&str> for Error {
    fn from(text: &str) -> Self {
        Error::Plain(text.to_string())
    }
}

/// `luaL_argerror(L, i, msg)`.
fn arg_error(i: usize, _name: &str, msg: &str) -> Error {
    Error::Arg(i, msg.to_string())
}

/// `luaL_typename`. `struct.pack` pushes a nil right after its
/// arguments (its mark before the string buffer), so the first argument
/// past them is `nil` to it (`marked`).
fn type_name(v: Option<&Value>, marked: bool) -> &'static str {
    match v {
        None if marked => "nil",
        None => "no value",
        Some(Value::Nil) => "nil",
        Some(Value::Boolean(_)) => "boolean",
        Some(Value::Integer(_) | Value::Number(_)) => "number",
        Some(Value::String(_)) => "string",
        Some(Value::Table(_)) => "table",
        Some(Value::Function(_)) => "function",
        Some(Value::Thread(_)) => "thread",
        Some(_) => "userdata",
    }
}

/// `luaL_checknumber`: a number, or a string Lua converts to one.
fn check_number(lua: &Lua, args: &MultiValue, i: usize, name: &str) -> Result<f64, Error> {
    let v = args.get(i - 1);
    let n = match v {
        Some(v @ (Value::Integer(_) | Value::Number(_) | Value::String(_))) => lua.coerce_number(v.clone()).ok().flatten(),
        _ => None,
    };
    n.ok_or_else(|| arg_error(i, name, &format!("number expected, got {}", type_name(v, name == "pack" && i >= 2 && i == args.len() + 1))))
}

/// `luaL_checklstring`: a string, or a number as Lua writes it.
fn check_string(lua: &Lua, args: &MultiValue, i: usize, name: &str) -> Result<Vec<u8>, Error> {
    let v = args.get(i - 1);
    let s = match v {
        Some(v @ (Value::Integer(_) | Value::Number(_) | Value::String(_))) => lua.coerce_string(v.clone()).ok().flatten(),
        _ => None,
    };
    s.map(|s| s.as_bytes().to_vec()).ok_or_else(|| arg_error(i, name, &format!("string expected, got {}", type_name(v, name == "pack" && i >= 2 && i == args.len() + 1))))
}

/// x86-64's `cvttsd2si` to 64 bits: truncation, and `i64::MIN` for NaN
/// and values out of range.
fn cvttsd2si(n: f64) -> i64 {
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if n.is_nan() || !(-TWO_63..TWO_63).contains(&n) {
        i64::MIN
    } else {
        n as i64
    }
}

/// `putinteger`'s conversion: a negative number through `long`, any other
/// as C converts a double to `unsigned long` on x86-64 (below 2^63 by
/// `cvttsd2si`, else by it on `n - 2^63` with the top bit flipped).
fn to_uint(n: f64) -> u64 {
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if n < 0.0 {
        cvttsd2si(n) as u64
    } else if n < TWO_63 {
        n as u64
    } else {
        (cvttsd2si(n - TWO_63) as u64) ^ (1 << 63)
    }
}

/// `getinteger`: `size` bytes as an integer, sign-extended if `signed`
/// (shift counts taken modulo 64, as x86-64 takes them).
fn get_integer(bytes: &[u8], big: bool, signed: bool) -> f64 {
    let mut l: u64 = 0;
    let mut take = |b: u8| l = (l << 8) | u64::from(b);
    if big {
        bytes.iter().for_each(|&b| take(b));
    } else {
        bytes.iter().rev().for_each(|&b| take(b));
    }
    if !signed {
        return l as f64;
    }
    let mask = u64::MAX << ((bytes.len() * 8).wrapping_sub(1) & 63);
    if l & mask != 0 {
        l |= mask;
    }
    l as i64 as f64
}

/// `struct.pack(fmt, ...)`.
fn pack(lua: &Lua, args: &MultiValue) -> Result<Vec<u8>, Error> {
    let fmt = check_string(lua, args, 1, "pack")?;
    let mut f = Format { fmt: &fmt, at: 0 };
    let mut h = Header::default();
    let mut arg = 2;
    let mut out: Vec<u8> = Vec::new();
    while let Some(opt) = f.next() {
        let mut size = f.size(opt)?;
        let pad = to_align(out.len(), &h, opt, size);
        out.resize(out.len() + pad, 0);
        match opt {
            b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I' => {
                let mut value = to_uint(check_number(lua, args, arg, "pack")?);
                arg += 1;
                let mut buf = [0u8; MAX_INT_SIZE];
                for b in buf[..size].iter_mut() {
                    *b = value as u8;
                    value >>= 8;
                }
                if h.big {
                    buf[..size].reverse();
                }
                out.extend_from_slice(&buf[..size]);
            }
            b'x' => out.push(0),
            b'f' => {
                let x = check_number(lua, args, arg, "pack")? as f32;
                arg += 1;
                out.extend_from_slice(&if h.big { x.to_be_bytes() } else { x.to_le_bytes() });
            }
            b'd' => {
                let x = check_number(lua, args, arg, "pack")?;
                arg += 1;
                out.extend_from_slice(&if h.big { x.to_be_bytes() } else { x.to_le_bytes() });
            }
            b'c' | b's' => {
                let s = check_string(lua, args, arg, "pack")?;
                arg += 1;
                if size == 0 {
                    size = s.len();
                }
                if s.len() < size {
                    // luaL_argcheck after `arg++`: Redis names the next argument.
                    return Err(arg_error(arg, "pack", "string too short"));
                }
                out.extend_from_slice(&s[..size]);
                if opt == b's' {
                    out.push(0);
                }
            }
            _ => f.control(opt, &mut h, "pack")?,
        }
    }
    Ok(out)
}

/// `struct.unpack(fmt, data [, pos])`: the values, then the position
/// after them.
fn unpack(lua: &Lua, args: &MultiValue) -> Result<MultiValue, Error> {
    let fmt = check_string(lua, args, 1, "unpack")?;
    let data = check_string(lua, args, 2, "unpack")?;
    let ld = data.len();
    // luaL_optinteger into a size_t.
    let pos = match args.get(2) {
        None | Some(Value::Nil) => 1usize,
        Some(_) => cvttsd2si(check_number(lua, args, 3, "unpack")?) as usize,
    };
    if pos == 0 {
        return Err(arg_error(3, "unpack", "offset must be 1 or greater"));
    }
    let mut pos = pos - 1;
    let mut f = Format { fmt: &fmt, at: 0 };
    let mut h = Header::default();
    let mut results: Vec<Value> = Vec::new();
    let short = || arg_error(2, "unpack", "data string too short");
    while let Some(opt) = f.next() {
        let mut size = f.size(opt)?;
        pos = pos.wrapping_add(to_align(pos, &h, opt, size));
        if size > ld || pos > ld - size {
            return Err(short());
        }
        // luaL_checkstack(L, 2, ...): the arguments and results so far, and two more.
        if args.len() + results.len() + 2 > MAX_C_STACK {
            return Err("stack overflow (too many results)".into());
        }
        match opt {
            b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I' => {
                results.push(Value::Number(get_integer(&data[pos..pos + size], h.big, opt.is_ascii_lowercase())));
            }
            b'x' => {}
            b'f' => {
                let bytes: [u8; 4] = data[pos..pos + 4].try_into().expect("4 bytes");
                let x = if h.big { f32::from_be_bytes(bytes) } else { f32::from_le_bytes(bytes) };
                results.push(Value::Number(f64::from(x)));
            }
            b'd' => {
                let bytes: [u8; 8] = data[pos..pos + 8].try_into().expect("8 bytes");
                results.push(Value::Number(if h.big { f64::from_be_bytes(bytes) } else { f64::from_le_bytes(bytes) }));
            }
            b'c' => {
                if size == 0 {
                    let previous = results.last().and_then(|v| match v {
                        Value::Number(n) => Some(*n),
                        Value::Integer(n) => Some(*n as f64),
                        Value::String(s) => lua.coerce_number(Value::String(s.clone())).ok().flatten(),
                        _ => None,
                    });
                    let Some(n) = previous else {
                        return Err("format 'c0' needs a previous size".into());
                    };
                    size = to_uint(n) as usize;
                    results.pop();
                    if size > ld || pos > ld - size {
                        return Err(short());
                    }
                }
                results.push(Value::String(lua.create_string(&data[pos..pos + size]).map_err(|e| Error::Plain(e.to_string()))?));
            }
            b's' => {
                let Some(end) = data[pos..].iter().position(|&b| b == 0) else {
                    return Err("unfinished string in data".into());
                };
                size = end + 1;
                results.push(Value::String(lua.create_string(&data[pos..pos + end]).map_err(|e| Error::Plain(e.to_string()))?));
            }
            _ => f.control(opt, &mut h, "unpack")?,
        }
        pos = pos.wrapping_add(size);
    }
    results.push(Value::Number(pos.wrapping_add(1) as i64 as f64));
    Ok(MultiValue::from_vec(results))
}

/// `struct.size(fmt)`: the bytes `fmt` packs to, if fixed.
fn size(lua: &Lua, args: &MultiValue) -> Result<f64, Error> {
    let fmt = check_string(lua, args, 1, "size")?;
    let mut f = Format { fmt: &fmt, at: 0 };
    let mut h = Header::default();
    let mut pos: usize = 0;
    while let Some(opt) = f.next() {
        let size = f.size(opt)?;
        pos = pos.wrapping_add(to_align(pos, &h, opt, size));
        if opt == b's' {
            return Err(arg_error(1, "size", "option 's' has no fixed size"));
        } else if opt == b'c' && size == 0 {
            return Err(arg_error(1, "size", "option 'c0' has no fixed size"));
        }
        if !opt.is_ascii_alphanumeric() {
            f.control(opt, &mut h, "size")?;
        }
        pos = pos.wrapping_add(size);
    }
    Ok(pos as i64 as f64)
}

/// The value [`super::raising`] raises for `error`: a string, or the
/// table its C closure turns into `luaL_argerror`'s.
fn raised(lua: &Lua, error: Error) -> mlua::Result<Value> {
    Ok(match error {
        Error::Plain(text) => Value::String(lua.create_string(text)?),
        Error::Arg(i, msg) => {
            let t = lua.create_table()?;
            t.raw_set(super::ARG_ERROR, i)?;
            t.raw_set("msg", lua.create_string(msg)?)?;
            Value::Table(t)
        }
    })
}

/// The library table.
pub fn library(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.raw_set("pack", super::raising(lua, move |lua, args| match pack(lua, &args) {
        Ok(bytes) => Ok(Ok(Value::String(lua.create_string(bytes)?))),
        Err(e) => Ok(Err(raised(lua, e)?)),
    })?)?;
    t.raw_set("size", super::raising(lua, move |lua, args| match size(lua, &args) {
        Ok(n) => Ok(Ok(Value::Number(n))),
        Err(e) => Ok(Err(raised(lua, e)?)),
    })?)?;
    t.raw_set("unpack", super::raising_many(lua, move |lua, args| match unpack(lua, &args) {
        Ok(values) => Ok(Ok(values)),
        Err(e) => Ok(Err(raised(lua, e)?)),
    })?)?;
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_follow_x86_64() {
        assert_eq!(to_uint(-1.0), u64::MAX);
        assert_eq!(to_uint(1.9), 1);
        assert_eq!(to_uint(9_223_372_036_854_775_808.0), 1 << 63);
        assert_eq!(to_uint(f64::NAN), 0);
        assert_eq!(get_integer(&[0xff, 0xff], false, true), -1.0);
        assert_eq!(get_integer(&[0xff, 0xff], false, false), 65535.0);
        assert_eq!(get_integer(&[0x01, 0x02], true, false), 258.0);
    }

    #[test]
    fn alignment_pads_to_the_smaller_of_size_and_align() {
        let h = Header { big: false, align: 8 };
        assert_eq!(to_align(1, &h, b'i', 4), 3);
        assert_eq!(to_align(1, &h, b'd', 8), 7);
        assert_eq!(to_align(1, &h, b'c', 8), 0);
        assert_eq!(to_align(3, &Header::default(), b'd', 8), 0);
    }
}
