//! The `bit` library scripts get (LuaBitOp 1.0, as Redis bundles it):
//! `tobit tohex bnot band bor bxor lshift rshift arshift rol ror bswap`,
//! on 32-bit integers, results as signed numbers.

use mlua::{Lua, MultiValue, Table, Value};

/// LuaBitOp's argument conversion: the number rounded to an integer
/// (ties to even, as adding 2^52 + 2^51 does) and taken modulo 2^32.
pub fn tobit(n: f64) -> i32 {
    let r = n + 6_755_399_441_055_744.0;
    r.to_bits() as u32 as i32
}

fn arg(v: Option<&Value>, i: usize, name: &str) -> Result<i32, String> {
    match v {
        Some(Value::Integer(n)) => Ok(tobit(*n as f64)),
        Some(Value::Number(n)) => Ok(tobit(*n)),
        Some(Value::String(s)) => std::str::from_utf8(&s.as_bytes())
            .ok()
            .and_then(|t| t.trim().parse::<f64>().ok())
            .map(tobit)
            .ok_or_else(|| bad(i, name, "string")),
        Some(other) => Err(bad(i, name, other.type_name())),
        None => Err(bad(i, name, "no value")),
    }
}

/// `luaL_checknumber`'s error.
fn bad(i: usize, name: &str, got: &str) -> String {
    format!("bad argument #{i} to '{name}' (number expected, got {got})")
}

/// A library function over 32-bit arguments, raising its argument errors.
fn function(lua: &Lua, f: impl Fn(&MultiValue) -> Result<f64, String> + Send + 'static) -> mlua::Result<mlua::Function> {
    super::raising(lua, move |lua, args| {
        Ok(match f(&args) {
            Ok(n) => Ok(Value::Number(n)),
            Err(text) => Err(Value::String(lua.create_string(text)?)),
        })
    })
}

/// `tohex(x [, n])`: the low `n` hex digits (8 by default; negative `n`:
/// upper case).
pub fn tohex(x: i32, n: i32) -> String {
    let upper = n < 0;
    let n = n.unsigned_abs().min(8) as usize;
    let s = if upper { format!("{:08X}", x as u32) } else { format!("{:08x}", x as u32) };
    s[8 - n..].to_string()
}

/// The library table.
pub fn library(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.raw_set("tobit", function(lua, |a| Ok(arg(a.front(), 1, "tobit")? as f64))?)?;
    t.raw_set("bnot", function(lua, |a| Ok(!arg(a.front(), 1, "bnot")? as f64))?)?;
    t.raw_set("bswap", function(lua, |a| Ok(arg(a.front(), 1, "bswap")?.swap_bytes() as f64))?)?;
    t.raw_set("tohex", super::raising(lua, |lua, a| {
        let hex = arg(a.front(), 1, "tohex").and_then(|x| Ok(tohex(x, if a.len() > 1 { arg(a.get(1), 2, "tohex")? } else { 8 })));
        Ok(match hex {
            Ok(h) => Ok(Value::String(lua.create_string(h)?)),
            Err(text) => Err(Value::String(lua.create_string(text)?)),
        })
    })?)?;
    for (name, op) in [("band", 0u8), ("bor", 1), ("bxor", 2)] {
        t.raw_set(name, function(lua, move |a| {
            let mut acc = arg(a.front(), 1, name)?;
            for i in 1..a.len() {
                let v = arg(a.get(i), i + 1, name)?;
                acc = match op {
                    0 => acc & v,
                    1 => acc | v,
                    _ => acc ^ v,
                };
            }
            Ok(acc as f64)
        })?)?;
    }
    for (name, op) in [("lshift", 0u8), ("rshift", 1), ("arshift", 2), ("rol", 3), ("ror", 4)] {
        t.raw_set(name, function(lua, move |a| {
            let x = arg(a.front(), 1, name)?;
            let n = (arg(a.get(1), 2, name)? & 31) as u32;
            let r = match op {
                0 => ((x as u32) << n) as i32,
                1 => ((x as u32) >> n) as i32,
                2 => x >> n,
                3 => (x as u32).rotate_left(n) as i32,
                _ => (x as u32).rotate_right(n) as i32,
            };
            Ok(r as f64)
        })?)?;
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tobit_wraps_and_rounds_as_luabitop() {
        assert_eq!(tobit(0xffff_ffffu32 as f64), -1);
        assert_eq!(tobit(4294967296.0 + 5.0), 5);
        assert_eq!(tobit(-1.0), -1);
        assert_eq!(tobit(2.5), 2);
        assert_eq!(tobit(3.5), 4);
    }

    #[test]
    fn tohex_takes_the_low_digits() {
        assert_eq!(tohex(1, 8), "00000001");
        assert_eq!(tohex(-1, 4), "ffff");
        assert_eq!(tohex(255, -2), "FF");
    }
}
