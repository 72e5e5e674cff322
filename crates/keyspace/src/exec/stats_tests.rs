//! INFO commandstats / errorstats, CONFIG RESETSTAT, maxmemory and the
//! CONFIG corners, through the executor as a client sees them.

use super::*;
use pmwire_resp::request::Parsed;

use super::fixture::Fixture;

impl Fixture {
    /// The value of `field` in INFO `section`'s lines, if listed.
    fn info(&mut self, section: &str, field: &str) -> Option<String> {
        let text = self.run(&format!("INFO {section}"));
        text.split("\r\n").find_map(|l| l.strip_prefix(&format!("{field}:")).map(str::to_string))
    }

    /// A command's `cmdstat_` line without its timings.
    fn cmdstat(&mut self, name: &str) -> Option<String> {
        let line = self.info("commandstats", &format!("cmdstat_{name}"))?;
        let calls = line.split(',').next().expect("calls").to_string();
        let rest: Vec<&str> = line.split(',').filter(|f| f.starts_with("rejected_calls") || f.starts_with("failed_calls")).collect();
        Some(format!("{calls},{}", rest.join(",")))
    }
}

#[test]
fn commands_are_counted_with_their_failures_and_refusals() {
    let mut f = Fixture::new();
    f.run("SET k v");
    f.run("SET k v");
    f.run("LPUSH k x");
    f.run("SET k");
    f.run("CONFIG GET maxmemory");
    f.run("NOSUCH x");
    assert_eq!(f.cmdstat("set").as_deref(), Some("calls=2,rejected_calls=1,failed_calls=0"));
    assert_eq!(f.cmdstat("lpush").as_deref(), Some("calls=1,rejected_calls=0,failed_calls=1"));
    assert_eq!(f.cmdstat("config|get").as_deref(), Some("calls=1,rejected_calls=0,failed_calls=0"));
    assert_eq!(f.info("errorstats", "errorstat_WRONGTYPE").as_deref(), Some("count=1"));
    assert_eq!(f.info("errorstats", "errorstat_ERR").as_deref(), Some("count=2"));
    assert_eq!(f.info("stats", "total_error_replies").as_deref(), Some("3"));
    assert!(f.run("INFO").contains("# Errorstats\r\n"), "errorstats is a default section");
    assert!(!f.run("INFO").contains("# Commandstats\r\n"), "commandstats is not");
    let line = f.info("commandstats", "cmdstat_set").expect("set");
    assert!(line.contains(",usec=") && line.contains(",usec_per_call="), "{line}");
    assert_eq!(f.run("CONFIG RESETSTAT"), "+OK\r\n");
    assert_eq!(f.cmdstat("set"), None);
    assert_eq!(f.info("errorstats", "errorstat_ERR"), None);
    assert_eq!(f.info("stats", "total_error_replies").as_deref(), Some("0"));
    assert_eq!(f.info("stats", "total_commands_processed").as_deref(), Some("4"), "the four INFOs since RESETSTAT");
}

#[test]
fn exec_counts_its_queued_commands_and_a_refused_one() {
    let mut f = Fixture::new();
    f.run("SET s v");
    f.run("CONFIG RESETSTAT");
    f.run("MULTI");
    f.run("INCR s");
    f.run("GET s");
    f.run("EXEC");
    assert_eq!(f.cmdstat("incr").as_deref(), Some("calls=1,rejected_calls=0,failed_calls=1"));
    assert_eq!(f.cmdstat("get").as_deref(), Some("calls=1,rejected_calls=0,failed_calls=0"));
    assert_eq!(f.cmdstat("exec").as_deref(), Some("calls=1,rejected_calls=0,failed_calls=0"));
    f.run("MULTI");
    f.run("GET");
    assert!(f.run("EXEC").starts_with("-EXECABORT"));
    assert_eq!(f.cmdstat("get").as_deref(), Some("calls=1,rejected_calls=1,failed_calls=0"));
    assert_eq!(f.cmdstat("exec").as_deref(), Some("calls=2,rejected_calls=0,failed_calls=1"));
    assert_eq!(f.info("errorstats", "errorstat_EXECABORT").as_deref(), Some("count=1"));
}

#[test]
fn a_scripts_errors_are_counted_once_as_redis_counts_them() {
    let mut f = Fixture::new();
    // A failed redis.call raised by the script: the command failed, the script too, one error.
    assert!(f.run("EVAL \"return redis.call('select',99)\" 0").starts_with("-ERR DB index is out of range"));
    assert_eq!(f.info("stats", "total_error_replies").as_deref(), Some("1"));
    assert_eq!(f.cmdstat("select").as_deref(), Some("calls=1,rejected_calls=0,failed_calls=1"));
    assert_eq!(f.cmdstat("eval").as_deref(), Some("calls=1,rejected_calls=0,failed_calls=1"));
    // Caught by pcall: only the command failed.
    f.run("CONFIG RESETSTAT");
    assert_eq!(f.run("EVAL \"local t = redis.pcall('select',99) return 1\" 0"), ":1\r\n");
    assert_eq!(f.info("stats", "total_error_replies").as_deref(), Some("1"));
    assert_eq!(f.cmdstat("eval").as_deref(), Some("calls=1,rejected_calls=0,failed_calls=0"));
    // redis.error_reply: the script's own error, counted under its code.
    f.run("CONFIG RESETSTAT");
    assert_eq!(f.run("EVAL \"return redis.error_reply('MY err')\" 0"), "-MY err\r\n");
    assert_eq!(f.info("errorstats", "errorstat_MY").as_deref(), Some("count=1"));
    assert_eq!(f.cmdstat("eval").as_deref(), Some("calls=1,rejected_calls=0,failed_calls=1"));
    // A write refused inside EVAL_RO: rejected, counted once.
    f.run("CONFIG RESETSTAT");
    assert!(f.run("EVAL_RO \"return redis.call('set','x','y')\" 1 x").starts_with("-ERR Write commands are not allowed from read-only scripts"));
    assert_eq!(f.info("stats", "total_error_replies").as_deref(), Some("1"));
    assert_eq!(f.cmdstat("set").as_deref(), Some("calls=0,rejected_calls=1,failed_calls=0"));
    assert_eq!(f.cmdstat("eval_ro").as_deref(), Some("calls=1,rejected_calls=0,failed_calls=1"));
}

const OOM: &str = "-OOM command not allowed when used memory > 'maxmemory'.\r\n";

#[test]
fn above_maxmemory_denyoom_commands_are_refused_and_others_run() {
    let mut f = Fixture::new();
    f.run("SET big 0123456789012345678901234567890123456789");
    assert_eq!(f.info("memory", "used_memory").as_deref(), Some("43"));
    assert_eq!(f.run("CONFIG SET maxmemory 10"), "+OK\r\n");
    assert_eq!(f.run("CONFIG GET maxmemory"), "*2\r\n$9\r\nmaxmemory\r\n$2\r\n10\r\n");
    assert_eq!(f.run("SET k v"), OOM);
    assert_eq!(f.run("APPEND big x"), OOM);
    assert_eq!(f.run("GET k"), "$-1\r\n", "nothing was written");
    assert_eq!(f.run("DEL big"), ":1\r\n", "a delete frees memory");
    assert_eq!(f.run("SET k v"), "+OK\r\n");
    assert_eq!(f.cmdstat("set").as_deref(), Some("calls=2,rejected_calls=1,failed_calls=0"));
    assert_eq!(f.info("errorstats", "errorstat_OOM").as_deref(), Some("count=2"));
    assert_eq!(f.run("CONFIG SET maxmemory 1kb"), "+OK\r\n");
    assert_eq!(f.run("CONFIG GET maxmemory"), "*2\r\n$9\r\nmaxmemory\r\n$4\r\n1024\r\n");
    assert_eq!(
        f.run("CONFIG SET maxmemory lots"),
        "-ERR CONFIG SET failed (possibly related to argument 'maxmemory') - argument must be a memory value\r\n"
    );
}

#[test]
fn above_maxmemory_multi_and_scripts_are_refused_as_redis_refuses_them() {
    let mut f = Fixture::new();
    f.run("SET filler 0123456789");
    f.run("CONFIG SET maxmemory 1");
    // Inside MULTI anything but EXEC, DISCARD, QUIT and RESET is refused.
    f.run("MULTI");
    assert_eq!(f.run("GET filler"), OOM);
    assert!(f.run("EXEC").starts_with("-EXECABORT"));
    // A script without a shebang: its first write is refused, reads run.
    assert!(f.run("EVAL \"return redis.call('set','x','y')\" 1 x").starts_with("-OOM command not allowed"));
    assert_eq!(f.run("EVAL \"return redis.call('get','filler')\" 0"), "$10\r\n0123456789\r\n");
    // With a shebang that may write: refused before it runs; allow-oom or no-writes run.
    assert_eq!(f.call(&["EVAL", "#!lua\nreturn 1", "0"]), OOM);
    assert_eq!(f.call(&["EVAL", "#!lua flags=no-writes\nreturn 1", "0"]), ":1\r\n");
    assert_eq!(f.call(&["EVAL", "#!lua flags=allow-oom\nreturn redis.call('set','x','y')", "0"]), "+OK\r\n");
    // A function: as its flags say.
    f.run("CONFIG SET maxmemory 0");
    let lib = "#!lua name=lib\nredis.register_function('w', function() return 1 end)\nredis.register_function{function_name='r', callback=function() return 2 end, flags={'no-writes'}}";
    assert_eq!(f.call(&["FUNCTION", "LOAD", lib]), "$3\r\nlib\r\n");
    f.run("CONFIG SET maxmemory 1");
    assert_eq!(f.run("FCALL w 0"), OOM);
    assert_eq!(f.run("FCALL r 0"), ":2\r\n");
    f.run("CONFIG SET maxmemory 0");
    assert_eq!(f.call(&["EVAL", "#!lua\nreturn 1", "0"]), ":1\r\n");
}

#[test]
fn config_corners_answer_as_redis() {
    let mut f = Fixture::new();
    assert_eq!(
        f.run("CONFIG SET daemonize yes"),
        "-ERR CONFIG SET failed (possibly related to argument 'daemonize') - can't set immutable config\r\n"
    );
    assert_eq!(
        f.run("CONFIG SET maxmemory 10000001 maxmemory 10000002"),
        "-ERR CONFIG SET failed (possibly related to argument 'maxmemory') - duplicate parameter\r\n"
    );
    assert_eq!(
        f.run("CONFIG SET maxmemory 10000001 maxmemory-clients 200% client-query-buffer-limit invalid"),
        "-ERR CONFIG SET failed (possibly related to argument 'maxmemory-clients') - percentage argument must be less or equal to 100\r\n"
    );
    assert_eq!(f.run("CONFIG GET maxmemory"), "*2\r\n$9\r\nmaxmemory\r\n$1\r\n0\r\n", "nothing was set");
    assert_eq!(f.run("CONFIG SET maxmemory-clients 10% repl-backlog-size 2mb"), "+OK\r\n");
    assert_eq!(f.run("CONFIG GET maxmemory-clients"), "*2\r\n$17\r\nmaxmemory-clients\r\n$3\r\n10%\r\n");
    assert_eq!(f.run("CONFIG GET repl-backlog-size"), "*2\r\n$17\r\nrepl-backlog-size\r\n$7\r\n2097152\r\n");
    // Hidden: only by its exact name.
    assert!(!f.run("CONFIG GET *").contains("key-load-delay"));
    assert_eq!(f.run("CONFIG GET key-load-delay"), "*2\r\n$14\r\nkey-load-delay\r\n$1\r\n0\r\n");
    let of = f.run("CONFIG GET *of");
    assert!(of.contains("$7\r\nslaveof\r\n") && of.contains("$9\r\nreplicaof\r\n"), "{of}");
    assert!(f.run("CONFIG SET port 1").starts_with("-ERR CONFIG SET failed (possibly related to argument 'port') - Unable to listen on this port"));
    assert_eq!(f.run("CONFIG SET port 0"), "+OK\r\n", "its own value");
    assert!(f.run("CONFIG SET nosuch 1").starts_with("-ERR Unknown option or number of arguments for CONFIG SET - 'nosuch'"));
}

/// Redis's `CONFIG sanity` test: every parameter CONFIG GET * lists takes
/// back the value it shows (those the test skips aside).
#[test]
fn every_listed_parameter_takes_its_own_value() {
    const SKIPPED: [&str; 4] = ["databases", "replicaof", "slaveof", "requirepass"];
    let mut f = Fixture::new();
    for (name, value, hidden) in super::admin::config_values_for_tests(&f.server) {
        if hidden || SKIPPED.contains(&name) {
            continue;
        }
        let value = String::from_utf8(value).expect("text");
        assert_eq!(f.run(&format!("CONFIG SET {name} \"{value}\"")), "+OK\r\n", "{name} {value}");
    }
}

#[test]
fn a_blocked_xreadgroup_whose_group_goes_fails_once() {
    let mut f = Fixture::new();
    f.run("XGROUP CREATE s g $ MKSTREAM");
    let mut waiter = f.server.open_session();
    let line = "XREADGROUP GROUP g alice BLOCK 0 STREAMS s >\r\n";
    let segs: [&[u8]; 1] = [line.as_bytes()];
    let mut p = Parsed::new(Limits::default());
    assert_eq!(p.parse(&segs).commands, 1);
    let mut out: Vec<u8> = Vec::new();
    assert_eq!(f.server.execute(&mut waiter, &mut f.ks, &p.request(&segs, 0), &mut out), Flow::Block);
    f.run("CONFIG RESETSTAT");
    assert_eq!(f.run("XGROUP DESTROY s g"), ":1\r\n");
    let (key, _) = f.server.next_ready(&mut f.ks).expect("the stream is ready");
    f.server.serve_blocked(&mut waiter, &mut f.ks, &key, &mut out);
    f.server.unblock(&mut waiter);
    assert!(String::from_utf8_lossy(&out).starts_with("-NOGROUP"), "{}", String::from_utf8_lossy(&out));
    assert_eq!(f.info("errorstats", "errorstat_NOGROUP").as_deref(), Some("count=1"));
    assert_eq!(f.cmdstat("xreadgroup").as_deref(), Some("calls=0,rejected_calls=0,failed_calls=1"));
    assert_eq!(f.info("stats", "total_error_replies").as_deref(), Some("1"));
}
