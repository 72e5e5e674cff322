//! FUNCTION and FCALL on the executor: replies and errors as Redis 7.0.15
//! answers them (taken from redis-server), libraries kept in internal
//! entries (through a flush, into a fresh executor on the same keyspace),
//! and the loading run's restricted API.

use super::*;
use crate::store::MemKeyspace;

use super::fixture::Fixture;

impl Fixture {
    /// FUNCTION DUMP's payload.
    fn function_dump(&mut self) -> Vec<u8> {
        let argv: Vec<Vec<u8>> = vec![b"FUNCTION".to_vec(), b"DUMP".to_vec()];
        match self.raw(&argv) {
            r if r.starts_with(b"$") => {
                let at = r.iter().position(|&c| c == b'\r').unwrap();
                r[at + 2..r.len() - 2].to_vec()
            }
            r => panic!("{}", String::from_utf8_lossy(&r)),
        }
    }

    fn call_bytes(&mut self, argv: &[&[u8]]) -> String {
        let argv: Vec<Vec<u8>> = argv.iter().map(|a| a.to_vec()).collect();
        String::from_utf8_lossy(&self.raw(&argv)).into_owned()
    }
}

const LIB: &str = "#!lua name=mylib\nredis.register_function('hello', function(keys, args) return 'hello ' .. (args[1] or '') end)\nredis.register_function{function_name='getk', callback=function(keys) return redis.call('get', keys[1]) end, flags={'no-writes'}, description='reads a key'}";

#[test]
fn load_call_list_delete() {
    let mut f = Fixture::new();
    assert_eq!(f.call(&["FUNCTION", "LOAD", LIB]), "$5\r\nmylib\r\n");
    assert_eq!(f.call(&["FCALL", "hello", "0", "you"]), "$9\r\nhello you\r\n");
    f.call(&["SET", "k", "v"]);
    assert_eq!(f.call(&["FCALL_RO", "getk", "1", "k"]), "$1\r\nv\r\n");
    assert_eq!(f.call(&["FCALL_RO", "hello", "0"]), "-ERR Can not execute a script with write flag using *_ro command.\r\n");
    assert_eq!(f.call(&["FCALL", "nosuch", "0"]), "-ERR Function not found\r\n");
    assert_eq!(f.call(&["FCALL", "HeLLo", "0", "case"]), "$10\r\nhello case\r\n", "names are case-insensitive");
    let upper = "#!lua name=upper\nredis.register_function('HELLO', function() return 1 end)";
    assert_eq!(f.call(&["FUNCTION", "LOAD", upper]), "-ERR Function HELLO already exists\r\n");
    assert_eq!(f.call(&["FCALL", "hello", "x"]), "-ERR Bad number of keys provided\r\n");
    assert_eq!(f.call(&["FCALL", "hello", "2", "a"]), "-ERR Number of keys can't be greater than number of args\r\n");
    assert_eq!(f.call(&["FCALL", "hello", "-1"]), "-ERR Number of keys can't be negative\r\n");
    assert_eq!(f.call(&["FUNCTION", "LOAD", LIB]), "-ERR Library 'mylib' already exists\r\n");
    assert_eq!(f.call(&["FUNCTION", "LOAD", "REPLACE", LIB]), "$5\r\nmylib\r\n");
    assert_eq!(f.call(&["FUNCTION", "LOAD", "FOO", LIB]), "-ERR Unknown option given: FOO\r\n");
    let other = "#!lua name=other\nredis.register_function('hello', function() return 1 end)";
    assert_eq!(f.call(&["FUNCTION", "LOAD", other]), "-ERR Function hello already exists\r\n");
    assert_eq!(
        f.call(&["FUNCTION", "LIST"]),
        "*1\r\n*6\r\n$12\r\nlibrary_name\r\n$5\r\nmylib\r\n$6\r\nengine\r\n$3\r\nLUA\r\n$9\r\nfunctions\r\n*2\r\n\
         *6\r\n$4\r\nname\r\n$5\r\nhello\r\n$11\r\ndescription\r\n$-1\r\n$5\r\nflags\r\n*0\r\n\
         *6\r\n$4\r\nname\r\n$4\r\ngetk\r\n$11\r\ndescription\r\n$11\r\nreads a key\r\n$5\r\nflags\r\n*1\r\n+no-writes\r\n"
    );
    assert_eq!(f.call(&["FUNCTION", "LIST", "LIBRARYNAME", "nomatch*"]), "*0\r\n");
    assert!(f.call(&["FUNCTION", "LIST", "LIBRARYNAME", "MY*", "WITHCODE"]).contains("library_code"));
    assert_eq!(f.call(&["FUNCTION", "LIST", "LIBRARYNAME"]), "-ERR library name argument was not given\r\n");
    assert_eq!(f.call(&["FUNCTION", "LIST", "WITHCODE", "WITHCODE"]), "-ERR Unknown argument WITHCODE\r\n");
    assert_eq!(
        f.call(&["FUNCTION", "STATS"]),
        "*4\r\n$14\r\nrunning_script\r\n$-1\r\n$7\r\nengines\r\n*2\r\n$3\r\nLUA\r\n*4\r\n$15\r\nlibraries_count\r\n:1\r\n$15\r\nfunctions_count\r\n:2\r\n"
    );
    assert_eq!(f.call(&["FUNCTION", "KILL"]), "-NOTBUSY No scripts in execution right now.\r\n");
    assert_eq!(f.call(&["FUNCTION", "DELETE", "nosuch"]), "-ERR Library not found\r\n");
    assert_eq!(f.call(&["FUNCTION", "DELETE", "mylib"]), "+OK\r\n");
    assert_eq!(f.call(&["FCALL", "hello", "0"]), "-ERR Function not found\r\n");
    assert_eq!(f.call(&["FUNCTION", "LIST"]), "*0\r\n");
    assert!(f.call(&["FUNCTION", "HELP"]).starts_with("*40\r\n+FUNCTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:\r\n"));
}

#[test]
fn load_errors_are_redis_s() {
    let mut f = Fixture::new();
    let cases = [
        ("return 1", "-ERR Missing library metadata\r\n"),
        ("#!lua name=x\nreturn 1", "-ERR No functions registered\r\n"),
        ("#!lua name=x\nreturn 1 +", "-ERR Error compiling function: user_function:2: unexpected symbol near '<eof>'\r\n"),
        ("#!lua name=x\nreturn math.abs(1)", "-ERR Error registering functions: ERR user_function:2: Script attempted to access nonexistent global variable 'math'\r\n"),
        ("#!lua name=x\nreturn redis.call('ping')", "-ERR Error registering functions: ERR user_function:2: Script attempted to access nonexistent global variable 'call'\r\n"),
        ("#!lua name=x\nredis.register_function('f')", "-ERR Error registering functions: ERR calling redis.register_function with a single argument is only applicable to Lua table (representing named arguments).\r\n"),
        ("#!lua name=x\nredis.register_function('f', 1)", "-ERR Error registering functions: ERR second argument to redis.register_function must be a function\r\n"),
        ("#!lua name=x\nlocal a = nil + 1", "-ERR Error registering functions: ERR user_function:2: attempt to perform arithmetic on a nil value\r\n"),
        ("#!lua name=x\nredis.register_function()", "-ERR Error registering functions: ERR wrong number of arguments to redis.register_function\r\n"),
        ("#!lua name=x\nredis.register_function('a-b', function() end)", "-ERR Error registering functions: ERR Library names can only contain letters, numbers, or underscores(_) and must be at least one character long\r\n"),
        ("#!lua name=x\nredis.register_function('f', function() end) redis.register_function('f', function() end)", "-ERR Error registering functions: ERR Function already exists in the library\r\n"),
        ("#!lua name=x\nredis.register_function{function_name='f', callback=function() end, flags={'bad'}}", "-ERR Error registering functions: ERR unknown flag given\r\n"),
        ("#!lua name=x\nredis.register_function{function_name='f', callback=function() end, flags='no-writes'}", "-ERR Error registering functions: ERR flags argument to redis.register_function must be a table representing function flags\r\n"),
        ("#!lua name=x\nredis.register_function{function_name='f'}", "-ERR Error registering functions: ERR redis.register_function must get a callback argument\r\n"),
        ("#!lua name=x\nredis.register_function{callback=function() end}", "-ERR Error registering functions: ERR redis.register_function must get a function name argument\r\n"),
        ("#!lua name=x\nredis.register_function{function_name='f', callback=function() end, foo=1}", "-ERR Error registering functions: ERR unknown argument given to redis.register_function\r\n"),
        ("#!lua name=x\nx = 1", "-ERR Error registering functions: ERR user_function:2: Attempt to modify a readonly table\r\n"),
    ];
    for (code, reply) in cases {
        assert_eq!(f.call(&["FUNCTION", "LOAD", code]), reply, "{code}");
    }
    assert_eq!(f.call(&["FUNCTION", "LIST"]), "*0\r\n", "nothing was kept");
    // What a loaded function may do: the whole API, not the loading one.
    let lib = "#!lua name=x\nlocal rf = redis.register_function\nredis.register_function('f', function() return math.abs(-3) end)\nredis.register_function('g', function() return rf('h', function() end) end)\nredis.register_function('r', function() return redis.register_function end)";
    assert_eq!(f.call(&["FUNCTION", "LOAD", lib]), "$1\r\nx\r\n");
    assert_eq!(f.call(&["FCALL", "f", "0"]), ":3\r\n");
    assert!(f.call(&["FCALL", "g", "0"]).starts_with("-ERR redis.register_function can only be called on FUNCTION LOAD command"));
    assert_eq!(f.call(&["FCALL", "r", "0"]), "$-1\r\n");
}

#[test]
fn a_loading_run_past_its_budget_is_stopped() {
    let mut f = Fixture::new();
    f.server.config_mut().script_budget = Some(3);
    let reply = f.call(&["FUNCTION", "LOAD", "#!lua name=x\nlocal a = 1 while true do a = a + 1 end"]);
    assert_eq!(reply, "-ERR Error registering functions: ERR FUNCTION LOAD timeout\r\n");
    assert_eq!(f.call(&["FUNCTION", "LOAD", LIB]), "$5\r\nmylib\r\n", "the interpreter still serves");
    assert_eq!(f.call(&["FCALL", "hello", "0", "x"]), "$7\r\nhello x\r\n");
}

#[test]
fn a_read_only_function_refuses_writes_and_errors_name_the_function() {
    let mut f = Fixture::new();
    let lib = "#!lua name=w\nredis.register_function{function_name='ro', callback=function(keys) return redis.call('set', keys[1], 'x') end, flags={'no-writes'}}\nredis.register_function('fail', function()\n  return nosuch.x\nend)";
    f.call(&["FUNCTION", "LOAD", lib]);
    assert_eq!(f.call(&["FCALL", "ro", "1", "k"]), "-ERR Write commands are not allowed from read-only scripts. script: ro, on @user_function:2.\r\n");
    assert_eq!(f.call(&["EXISTS", "k"]), ":0\r\n");
    let reply = f.call(&["FCALL", "fail", "0"]);
    assert!(reply.contains("nonexistent global variable 'nosuch'") && reply.ends_with("script: fail, on @user_function:4.\r\n"), "{reply}");
    // A function is not reachable from a script, nor FUNCTION LOAD.
    assert_eq!(f.call(&["EVAL", "return redis.call('fcall', 'ro', 0)", "0"]), "-ERR This Redis command is not allowed from script script: 6c5b0d9d5e3f5e9b7f1e0eb1f8b1a3e8a5a6f4c2, on @user_script:1.\r\n".replace("6c5b0d9d5e3f5e9b7f1e0eb1f8b1a3e8a5a6f4c2", &crate::script::sha1_hex(b"return redis.call('fcall', 'ro', 0)")));
}

#[test]
fn libraries_outlive_flushall_and_reach_a_restarted_executor() {
    let mut f = Fixture::new();
    f.call(&["FUNCTION", "LOAD", LIB]);
    f.call(&["SET", "k", "v"]);
    assert_eq!(f.call(&["FLUSHALL"]), "+OK\r\n");
    assert_eq!(f.call(&["DBSIZE"]), ":0\r\n");
    assert_eq!(f.call(&["FCALL", "hello", "0", "again"]), "$11\r\nhello again\r\n");
    assert!(f.ks.internal_get(&[LIBRARY_TAG]).is_some(), "the digest entry");
    assert!(f.ks.internal_get(b"\x05mylib").is_some(), "the library entry");
    let mut f = f.restarted();
    assert_eq!(f.call(&["FCALL", "hello", "0", "back"]), "$10\r\nhello back\r\n");
    assert_eq!(f.call(&["FUNCTION", "FLUSH"]), "+OK\r\n");
    assert_eq!(f.ks.internal_len(), 0, "FUNCTION FLUSH leaves no entry");
    let mut f = f.restarted();
    assert_eq!(f.call(&["FCALL", "hello", "0"]), "-ERR Function not found\r\n");
    assert_eq!(f.call(&["FUNCTION", "FLUSH", "LAZY"]), "-ERR FUNCTION FLUSH only supports SYNC|ASYNC option\r\n");
}

/// The cache follows the keyspace: another keyspace swapped under the
/// same executor (a snapshot installed) is what FCALL serves.
#[test]
fn the_cache_follows_a_swapped_keyspace() {
    let mut f = Fixture::new();
    f.call(&["FUNCTION", "LOAD", LIB]);
    let loaded = std::mem::replace(&mut f.ks, MemKeyspace::new());
    assert_eq!(f.call(&["FCALL", "hello", "0"]), "-ERR Function not found\r\n");
    f.ks = loaded;
    assert_eq!(f.call(&["FCALL", "hello", "0"]), "$6\r\nhello \r\n");
    // A stored library that was damaged is reported, not served.
    let mut record = Vec::new();
    f.ks.internal_read(b"\x05mylib", &mut record);
    *record.last_mut().unwrap() ^= 1;
    f.ks.internal_put(b"\x05mylib", &record).unwrap();
    f.ks.internal_put(&[LIBRARY_TAG], b"another digest").unwrap();
    assert!(f.call(&["FCALL", "hello", "0"]).starts_with("-ERR stored value is corrupt: function library 'mylib'"));
}

#[test]
fn dump_and_restore() {
    let mut f = Fixture::new();
    f.call(&["FUNCTION", "LOAD", LIB]);
    let payload = f.function_dump();
    assert_eq!(f.call_bytes(&[b"FUNCTION", b"RESTORE", &payload]), "-ERR Library mylib already exists\r\n");
    assert_eq!(f.call_bytes(&[b"FUNCTION", b"RESTORE", &payload, b"REPLACE"]), "+OK\r\n");
    assert_eq!(f.call_bytes(&[b"FUNCTION", b"RESTORE", &payload, b"BAD"]), "-ERR Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.\r\n");
    assert_eq!(f.call(&["FUNCTION", "RESTORE", "bad_payload"]), "-ERR DUMP payload version or checksum are wrong\r\n");
    assert_eq!(f.call_bytes(&[b"FUNCTION", b"RESTORE", &payload, b"FLUSH", b"x"]), "-ERR unknown subcommand or wrong number of arguments for 'RESTORE'. Try FUNCTION HELP.\r\n");
    f.call(&["FUNCTION", "FLUSH"]);
    f.call(&["FUNCTION", "LOAD", "#!lua name=other\nredis.register_function('other', function() return 2 end)"]);
    assert_eq!(f.call_bytes(&[b"FUNCTION", b"RESTORE", &payload, b"FLUSH"]), "+OK\r\n");
    assert_eq!(f.call(&["FCALL", "other", "0"]), "-ERR Function not found\r\n");
    assert_eq!(f.call(&["FCALL", "hello", "0", "r"]), "$7\r\nhello r\r\n");
    f.call(&["FUNCTION", "LOAD", "#!lua name=clash\nredis.register_function('clash', function() return 2 end)"]);
    f.call(&["FUNCTION", "DELETE", "mylib"]);
    f.call(&["FUNCTION", "LOAD", "#!lua name=mylib2\nredis.register_function('hello', function() return 3 end)"]);
    assert_eq!(f.call_bytes(&[b"FUNCTION", b"RESTORE", &payload, b"APPEND"]), "-ERR Function hello already exists\r\n");
    assert_eq!(f.call(&["FCALL", "hello", "0"]), ":3\r\n", "a refused restore changes nothing");
}

/// A table that holds itself nests until Redis's stack limit error, for a
/// script and a function alike (Redis's `luaReplyToRedisReply`).
#[test]
fn a_recursive_table_answers_the_stack_limit() {
    let mut f = Fixture::new();
    let body = "local a = {}; local b = {a}; a[1] = b; return a";
    let expected = format!("{}-ERR reached lua stack limit\r\n", "*1\r\n".repeat(crate::script::MAX_DEPTH + 1));
    assert_eq!(f.call(&["EVAL", body, "0"]), expected);
    f.call(&["FUNCTION", "LOAD", &format!("#!lua name=test\nredis.register_function('test', function(KEYS, ARGV)\n {body} \nend)")]);
    assert_eq!(f.call(&["FCALL", "test", "0"]), expected);
}

/// Redis 7.0's EVAL shebang: `#!lua [flags=...]` declares a script's flags
/// (`no-writes` makes it read-only; EVAL_RO refuses a script without it);
/// anything else in the line is refused with Redis's errors.
#[test]
fn an_eval_shebang_declares_flags() {
    let mut f = Fixture::new();
    assert_eq!(f.call(&["EVAL", "#!lua\nreturn 1", "0"]), ":1\r\n");
    assert_eq!(f.call(&["EVAL", "#!not-lua\nreturn 1", "0"]), "-ERR Unexpected engine in script shebang: #!not-lua\r\n");
    assert_eq!(f.call(&["EVAL", "#!lua badger=data\nreturn 1", "0"]), "-ERR Unknown lua shebang option: badger=data\r\n");
    assert_eq!(f.call(&["EVAL", "#!lua flags=allow-oom,what?\nreturn 1", "0"]), "-ERR Unexpected flag in script shebang: what?\r\n");
    assert_eq!(f.call(&["EVAL", "#!lua", "0"]), "-ERR Invalid script shebang\r\n");
    assert_eq!(f.call(&["SCRIPT", "LOAD", "#!lua badger\nreturn 1"]), "-ERR Unknown lua shebang option: badger\r\n");
    let reply = f.call(&["EVAL", "#!lua flags=no-writes\nredis.call('set','x',1)\nreturn 1", "1", "x"]);
    assert_eq!(reply, format!("-ERR Write commands are not allowed from read-only scripts. script: {}, on @user_script:2.\r\n", crate::script::sha1_hex(b"#!lua flags=no-writes\nredis.call('set','x',1)\nreturn 1")));
    assert_eq!(f.call(&["EVAL_RO", "#!lua\nreturn 1", "0"]), "-ERR Can not execute a script with write flag using *_ro command.\r\n");
    assert_eq!(f.call(&["EVAL_RO", "#!lua flags=no-writes\nreturn redis.call('get','x')", "0"]), "$-1\r\n");
    assert_eq!(f.call(&["EVAL", "#!lua flags=\nreturn redis.call('set','x','y')", "0"]), "+OK\r\n");
    let sha = crate::script::sha1_hex(b"#!lua flags=no-writes\nreturn redis.call('incr','x')");
    assert_eq!(f.call(&["SCRIPT", "LOAD", "#!lua flags=no-writes\nreturn redis.call('incr','x')"]), format!("$40\r\n{sha}\r\n"));
    assert!(f.call(&["EVALSHA", &sha, "0"]).starts_with("-ERR Write commands are not allowed from read-only scripts."), "EVALSHA keeps the flags");
}

/// lua-cjson's settings a script may change hold for its own run only.
#[test]
fn cjson_settings_last_one_run() {
    let mut f = Fixture::new();
    let body = "cjson.encode_max_depth(1) local ok1 = pcall(cjson.encode, {{1}}) \
                cjson.decode_max_depth(1) local ok2 = pcall(cjson.decode, '{\"a\": {}}') \
                local ok3 = pcall(cjson.encode, {0/0}) cjson.encode_invalid_numbers(true) \
                return {tostring(ok1), tostring(ok2), tostring(ok3), cjson.encode({0/0, 1/0, -1/0})}";
    let want = "*4\r\n$5\r\nfalse\r\n$5\r\nfalse\r\n$5\r\nfalse\r\n$14\r\n[nan,inf,-inf]\r\n";
    assert_eq!(f.call(&["EVAL", body, "0"]), want);
    assert_eq!(f.call(&["EVAL", "return cjson.encode({{{1}}})", "0"]), "$7\r\n[[[1]]]\r\n", "the next run has the defaults");
    assert!(f.call(&["EVAL", "return cjson.encode({0/0})", "0"]).starts_with("-"));
}
