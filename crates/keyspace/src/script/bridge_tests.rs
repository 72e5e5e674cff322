//! Tests of [`super::bridge`]: every reply type converted as Redis 7.0
//! converts it, and a raise in the middle of a reply (the interpreter out
//! of memory) leaking nothing and leaving the stack as the script expects.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use super::{Answer, Args, Limit, Outcome, Vm};

/// The system allocator, counting the bytes each thread holds, so a test
/// sees what its own thread leaks (tests run in parallel threads).
struct Counting;

thread_local! {
    static LIVE_BYTES: Cell<i64> = const { Cell::new(0) };
}

fn add_live(delta: i64) {
    // `try_with`: a thread being torn down has no counter; nothing to count.
    let _ = LIVE_BYTES.try_with(|c| c.set(c.get() + delta));
}

// SAFETY: every call is passed to `System` unchanged; the counter is a
// const-initialized thread-local `Cell`, which allocates nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        add_live(layout.size() as i64);
        // SAFETY: as System's contract, which ours is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        add_live(-(layout.size() as i64));
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        add_live(new_size as i64 - layout.size() as i64);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

fn live_bytes() -> i64 {
    LIVE_BYTES.with(Cell::get)
}

/// Runs `body` with `redis.call(name)` answered by `replies` (RESP by
/// command name; a name not there is refused with its name as the error).
fn run(vm: &mut Vm, body: &str, replies: &[(&str, &[u8])]) -> Outcome {
    let sha = super::sha1_hex(body.as_bytes());
    let f = vm.function(&sha, body.as_bytes()).expect("compiles");
    let mut call = |args: &Args<'_>, _resp: u8, out: &mut Vec<u8>| -> Result<(), String> {
        let name = args.get(0);
        match replies.iter().find(|(n, _)| n.as_bytes() == name) {
            Some((_, reply)) => {
                out.extend_from_slice(reply);
                Ok(())
            }
            None => Err(format!("ERR no {}", String::from_utf8_lossy(name))),
        }
    };
    vm.run(&f, &[], &[], 1, Limit::None, &mut call)
}

fn answer(outcome: Outcome) -> Answer {
    match outcome {
        Outcome::Returned(v) => super::answer_of(&v, 2, 0),
        other => panic!("the script failed: {other:?}"),
    }
}

fn bulk(s: &str) -> Answer {
    Answer::Bulk(s.as_bytes().to_vec())
}

/// A Lua serializer the tests' scripts use: a value as text, tables with
/// their keys sorted.
const SHOW: &str = r#"
local function show(v)
  if type(v) ~= 'table' then return type(v) .. ':' .. tostring(v) end
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  local parts = {}
  for _, k in ipairs(keys) do parts[#parts + 1] = show(k) .. '=' .. show(v[k]) end
  return '{' .. table.concat(parts, ',') .. '}'
end
"#;

/// Every RESP2 and RESP3 reply type becomes the value Redis 7.0's
/// `redisProtocolToLuaType` makes of it.
#[test]
fn every_reply_type_converts_as_redis_converts_it() {
    let mut vm = Vm::new().expect("starts");
    let cases: &[(&str, &[u8], &str)] = &[
        ("int", b":-42\r\n", "number:-42"),
        ("bulk", b"$3\r\na\0b\r\n", "string:a\0b"),
        ("nilbulk", b"$-1\r\n", "boolean:false"),
        ("nilarray", b"*-1\r\n", "boolean:false"),
        ("null", b"_\r\n", "nil:nil"),
        ("status", b"+PONG\r\n", "{string:ok=string:PONG}"),
        ("array", b"*3\r\n:1\r\n*1\r\n$1\r\nx\r\n$-1\r\n", "{number:1=number:1,number:2={number:1=string:x},number:3=boolean:false}"),
        ("map", b"%2\r\n$1\r\na\r\n:1\r\n$1\r\nb\r\n#t\r\n", "{string:map={string:a=number:1,string:b=boolean:true}}"),
        ("set", b"~2\r\n$1\r\na\r\n$1\r\nb\r\n", "{string:set={string:a=boolean:true,string:b=boolean:true}}"),
        ("double", b",1.5\r\n", "{string:double=number:1.5}"),
        ("big", b"(12345678901234567890\r\n", "{string:big_number=string:12345678901234567890}"),
        ("verbatim", b"=7\r\ntxt:abc\r\n", "{string:verbatim_string={string:format=string:txt,string:string=string:abc}}"),
        ("attribute", b"|1\r\n$1\r\nk\r\n$1\r\nv\r\n:7\r\n", "number:7"),
        ("push", b">2\r\n:1\r\n:2\r\n", "{number:1=number:1,number:2=number:2}"),
        ("nested_error", b"*1\r\n-WRONGTYPE bad\r\n", "{number:1={string:err=string:WRONGTYPE bad,string:ignore_error_stats_update=boolean:true}}"),
        ("blob_error", b"!9\r\nSYNTAX no\r\n", "{string:err=string:SYNTAX no,string:ignore_error_stats_update=boolean:true}"),
        ("bare_error", b"-NOSPACE\r\n", "{string:err=string:ERR NOSPACE,string:ignore_error_stats_update=boolean:true}"),
    ];
    let replies: Vec<(&str, &[u8])> = cases.iter().map(|(n, r, _)| (*n, *r)).collect();
    for (name, _, want) in cases {
        let body = format!("{SHOW} return show(redis.pcall('{name}'))");
        assert_eq!(answer(run(&mut vm, &body, &replies)), bulk(want), "{name}");
    }
    // A malformed reply is Redis's error, not a value.
    let body = format!("{SHOW} return show(redis.pcall('torn'))");
    let got = answer(run(&mut vm, &body, &[("torn", b"*2\r\n:1\r\n")]));
    assert_eq!(got, bulk("{string:err=string:ERR a command's reply did not parse back}"));
}

/// `redis.call` raises a command's error (the run fails with it),
/// `redis.pcall` returns it; the bridge's own refusals read as Redis's.
#[test]
fn call_raises_and_pcall_returns_errors() {
    let mut vm = Vm::new().expect("starts");
    match run(&mut vm, "return redis.call('missing')", &[]) {
        Outcome::Failed(text, at, counted) => {
            assert_eq!(String::from_utf8_lossy(&text), "ERR no missing");
            assert_eq!(at.as_deref(), Some("@user_script:1"));
            assert!(counted, "a command's error is counted where it happened");
        }
        other => panic!("{other:?}"),
    }
    match run(&mut vm, "return redis.call('bad')", &[("bad", b"-ERR inner\r\n")]) {
        Outcome::Failed(text, _, true) => assert_eq!(text, b"ERR inner"),
        other => panic!("{other:?}"),
    }
    let body = format!("{SHOW} return show({{redis.pcall({{}}), redis.pcall(), redis.pcall('n', 1.5, 7)}})");
    let got = answer(run(&mut vm, &body, &[("n", b":1\r\n")]));
    let want = "{number:1={string:err=string:ERR Lua redis lib command arguments must be strings or integers},\
number:2={string:err=string:ERR Please specify at least one argument for this redis lib call},number:3=number:1}";
    assert_eq!(got, bulk(want));
    // Numbers are sent as `%.17g`.
    let mut seen = Vec::new();
    let f = vm.function("n17", b"return redis.call('echo', 0.1, 3, 'x')").expect("compiles");
    let mut call = |args: &Args<'_>, _: u8, out: &mut Vec<u8>| -> Result<(), String> {
        seen = args.iter().map(<[u8]>::to_vec).collect();
        out.extend_from_slice(b"+OK\r\n");
        Ok(())
    };
    let _ = vm.run(&f, &[], &[], 1, Limit::None, &mut call);
    assert_eq!(seen, [&b"echo"[..], b"0.10000000000000001", b"3", b"x"]);
}

/// The interpreter runs out of memory half-way through pushing a reply
/// (a table of 20,000 strings, nested in another), 300 times: `pcall`
/// hands the script exactly `false, "not enough memory"` each time, the
/// next call works, and this thread holds no more Rust memory after the
/// runs than before them (a raise skips no frame that owns any).
#[test]
fn a_raise_while_a_reply_is_half_built_leaks_nothing() {
    let mut vm = Vm::new().expect("starts");
    let mut big = b"*2\r\n:1\r\n*20000\r\n".to_vec();
    for i in 0..20_000 {
        let item = format!("value-{i:058}");
        big.extend_from_slice(format!("${}\r\n{item}\r\n", item.len()).as_bytes());
    }
    let replies: &[(&str, &[u8])] = &[("big", &big), ("small", b"+OK\r\n")];
    let body = "local n = select('#', pcall(redis.call, 'big')) \
                collectgarbage('collect') \
                local ok, err = pcall(redis.call, 'big') \
                collectgarbage('collect') \
                return {tostring(n), tostring(ok), err, redis.call('small').ok}";
    let want = Answer::Array(vec![bulk("2"), bulk("false"), bulk("not enough memory"), bulk("OK")]);
    vm.lua.gc_collect().expect("collects");
    vm.lua.set_memory_limit(vm.lua.used_memory() + 256 * 1024).expect("limits");
    // The first runs size the bridge's buffers and the interpreter's caches.
    for _ in 0..3 {
        assert_eq!(answer(run(&mut vm, body, replies)), want);
    }
    let before = live_bytes();
    for _ in 0..300 {
        assert_eq!(answer(run(&mut vm, body, replies)), want);
    }
    let grown = live_bytes() - before;
    assert!(grown < 1024, "{grown} B more held after 300 failed replies");
    vm.lua.gc_collect().expect("collects");
    vm.lua.set_memory_limit(super::MEMORY_LIMIT).expect("limits");
    // With room again, the same reply arrives whole.
    let got = answer(run(&mut vm, "return #redis.call('big')[2]", replies));
    assert_eq!(got, Answer::Integer(20_000));
}
