//! The executor's ACL users, SHUTDOWN, CLUSTER, `min-replicas-to-write`
//! and CLIENT LIST's buffer fields, as a client sees them.

use super::fixture::{run_line, Fixture};
use super::*;

fn line(f: &mut Fixture, session: &mut Session, text: &str) -> String {
    run_line(&mut f.server, session, &mut f.ks, text).0
}

#[test]
fn a_user_runs_what_its_rules_allow() {
    let mut f = Fixture::new();
    assert_eq!(f.run("ACL SETUSER bob on >123 +@scripting +set ~x*"), "+OK\r\n");
    let mut bob = f.server.open_session();
    assert_eq!(line(&mut f, &mut bob, "AUTH bob 12"), "-WRONGPASS invalid username-password pair or user is disabled.\r\n");
    assert_eq!(line(&mut f, &mut bob, "AUTH bob 123"), "+OK\r\n");
    assert_eq!(line(&mut f, &mut bob, "ACL WHOAMI"), "-NOPERM this user has no permissions to run the 'acl|whoami' command\r\n");
    assert_eq!(line(&mut f, &mut bob, "SET xx 1"), "+OK\r\n");
    assert_eq!(line(&mut f, &mut bob, "SET yy 1"), "-NOPERM this user has no permissions to access one of the keys used as arguments\r\n");
    assert_eq!(line(&mut f, &mut bob, "GET xx"), "-NOPERM this user has no permissions to run the 'get' command\r\n");
    assert_eq!(line(&mut f, &mut bob, "CONFIG GET x"), "-NOPERM this user has no permissions to run the 'config|get' command\r\n");
    assert_eq!(f.run("EXISTS yy"), ":0\r\n", "a refused command changed nothing");
    // redis.call checks the caller's user; acl_check_cmd answers without running.
    let check = |f: &mut Fixture, bob: &mut Session, body: &str| {
        let args = ["EVAL", body, "0"];
        String::from_utf8(fixture::execute_args(&mut f.server, bob, &mut f.ks, &args).0).unwrap()
    };
    assert_eq!(check(&mut f, &mut bob, "return redis.acl_check_cmd('set','xx',1)"), ":1\r\n");
    assert_eq!(check(&mut f, &mut bob, "return redis.acl_check_cmd('hset','xx','f',1)"), "$-1\r\n");
    assert_eq!(check(&mut f, &mut bob, "return redis.acl_check_cmd('set','yy',1)"), "$-1\r\n");
    assert!(check(&mut f, &mut bob, "return redis.acl_check_cmd('nosuch')").starts_with("-ERR Invalid command passed to redis.acl_check_cmd()"));
    assert!(check(&mut f, &mut bob, "return redis.call('get','xx')").starts_with("-ERR The user executing the script can't run this command or subcommand script:"));
    assert!(check(&mut f, &mut bob, "return redis.call('set','yy','1')").starts_with("-ERR The user executing the script can't access at least one of the keys mentioned in the command arguments script:"));
    // Refusals are logged; a password never is.
    let log = f.run("ACL LOG");
    assert!(log.contains("lua") && log.contains("toplevel") && log.contains("auth"), "{log}");
    assert!(!log.contains("123"), "no password in the log");
    assert_eq!(f.run("ACL LOG RESET"), "+OK\r\n");
    assert_eq!(f.run("ACL LOG"), "*0\r\n");
    // CLIENT LIST names the user; deleting it closes its connections.
    assert!(f.run("CLIENT LIST").contains("user=bob"));
    assert_eq!(f.run("ACL DELUSER bob nobody"), ":1\r\n");
    assert_eq!(f.server.take_kills(), vec![bob.id()]);
}

#[test]
fn rules_changed_after_queueing_are_checked_at_exec() {
    let mut f = Fixture::new();
    f.run("ACL SETUSER u on nopass +@all ~*");
    let mut u = f.server.open_session();
    assert_eq!(line(&mut f, &mut u, "AUTH u x"), "+OK\r\n");
    assert_eq!(line(&mut f, &mut u, "MULTI"), "+OK\r\n");
    assert_eq!(line(&mut f, &mut u, "SET k v"), "+QUEUED\r\n");
    assert_eq!(line(&mut f, &mut u, "PING"), "+QUEUED\r\n");
    f.run("ACL SETUSER u -set");
    assert_eq!(
        line(&mut f, &mut u, "EXEC"),
        "*2\r\n-NOPERM ACLs rules changed between the moment the transaction was accumulated and the EXEC call. This command is no longer allowed for the following reason: no permission to execute the command or subcommand\r\n+PONG\r\n"
    );
    assert_eq!(f.run("EXISTS k"), ":0\r\n");
    // Refused while queueing: EXEC aborts.
    assert_eq!(line(&mut f, &mut u, "MULTI"), "+OK\r\n");
    assert!(line(&mut f, &mut u, "SET k v").starts_with("-NOPERM"));
    assert!(line(&mut f, &mut u, "EXEC").starts_with("-EXECABORT"));
}

#[test]
fn the_default_user_follows_requirepass() {
    let mut f = Fixture::new();
    assert_eq!(f.run("ACL LIST"), "*1\r\n$34\r\nuser default on nopass ~* &* +@all\r\n");
    assert_eq!(f.run("CONFIG SET requirepass pw"), "+OK\r\n");
    let list = f.run("ACL LIST");
    assert!(list.contains("user default on #30c952fab122c3f9759f02a6d95c3758b246b4fee239957b2d4fee46e26170c4 ~* &* +@all"), "{list}");
    let mut s = f.server.open_session();
    assert_eq!(line(&mut f, &mut s, "GET k"), "-NOAUTH Authentication required.\r\n");
    assert_eq!(line(&mut f, &mut s, "AUTH default pw"), "+OK\r\n");
    // ACL SETUSER default changes the password too.
    f.run("ACL SETUSER default resetpass >other");
    let mut t = f.server.open_session();
    assert!(line(&mut f, &mut t, "AUTH pw").starts_with("-WRONGPASS"));
    assert_eq!(line(&mut f, &mut t, "AUTH other"), "+OK\r\n");
    assert_eq!(f.run("ACL DELUSER default"), "-ERR The 'default' user cannot be removed\r\n");
}

#[test]
fn shutdown_stops_without_a_reply_and_is_refused_in_multi() {
    let mut f = Fixture::new();
    assert_eq!(f.run("SHUTDOWN ABORT"), "-ERR No shutdown in progress.\r\n");
    assert_eq!(f.run("SHUTDOWN SAVE NOSAVE"), "-ERR syntax error\r\n");
    assert_eq!(f.run("SHUTDOWN NOW ABORT"), "-ERR syntax error\r\n");
    assert_eq!(f.run("SHUTDOWN LATER"), "-ERR syntax error\r\n");
    f.run("MULTI");
    assert_eq!(f.run("SHUTDOWN"), "-ERR Command not allowed inside a transaction\r\n");
    f.run("DISCARD");
    assert!(!f.server.shutdown_requested());
    let mut s = f.server.open_session();
    let (reply, flow) = run_line(&mut f.server, &mut s, &mut f.ks, "SHUTDOWN NOSAVE NOW");
    assert_eq!((reply.as_str(), flow), ("", Flow::Close));
    assert!(f.server.shutdown_requested());
}

#[test]
fn cluster_is_disabled_and_reset_is_refused_to_scripts() {
    let mut f = Fixture::new();
    assert_eq!(f.run("CLUSTER INFO"), "-ERR This instance has cluster support disabled\r\n");
    assert_eq!(f.run("CLUSTER KEYSLOT k"), "-ERR This instance has cluster support disabled\r\n");
    let args = ["EVAL", "return redis.call('cluster','reset','hard')", "0"];
    let reply = String::from_utf8(fixture::execute_args(&mut f.server, &mut f.session, &mut f.ks, &args).0).unwrap();
    assert!(reply.starts_with("-ERR This Redis command is not allowed from script script:"), "{reply}");
}

#[test]
fn min_replicas_refuses_writes_on_a_node_without_replicas() {
    let mut f = Fixture::new();
    f.run("SET x v");
    assert_eq!(f.run("CONFIG SET min-replicas-to-write 1"), "+OK\r\n");
    assert_eq!(f.run("CONFIG GET min-slaves-to-write"), "*2\r\n$19\r\nmin-slaves-to-write\r\n$1\r\n1\r\n");
    assert_eq!(f.run("SET x w"), "-NOREPLICAS Not enough good replicas to write.\r\n");
    assert_eq!(f.run("GET x"), "$1\r\nv\r\n");
    let eval = |f: &mut Fixture, body: &str| {
        let args = ["EVAL", body, "1", "x"];
        String::from_utf8(fixture::execute_args(&mut f.server, &mut f.session, &mut f.ks, &args).0).unwrap()
    };
    assert_eq!(eval(&mut f, "#!lua flags=no-writes\nreturn redis.call('get','x')"), "$1\r\nv\r\n");
    assert_eq!(eval(&mut f, "return redis.call('get','x')"), "$1\r\nv\r\n");
    assert_eq!(eval(&mut f, "#!lua\nreturn redis.call('get','x')"), "-NOREPLICAS Not enough good replicas to write.\r\n");
    assert!(eval(&mut f, "return redis.call('set','x','1')").starts_with("-NOREPLICAS Not enough good replicas to write."));
    // As Redis's processCommand: refused when queued, so EXEC aborts.
    f.run("MULTI");
    assert_eq!(f.run("SET x 1"), "-NOREPLICAS Not enough good replicas to write.\r\n");
    assert_eq!(f.run("EXEC"), "-EXECABORT Transaction discarded because of previous errors.\r\n");
    // A lag of 0 turns the check off, as in Redis.
    assert_eq!(f.run("CONFIG SET min-replicas-max-lag 0"), "+OK\r\n");
    assert_eq!(f.run("SET x w"), "+OK\r\n");
    assert_eq!(f.run("CONFIG SET min-replicas-to-write -1").starts_with("-ERR CONFIG SET failed"), true);
}

#[test]
fn client_list_shows_the_running_request() {
    let mut f = Fixture::new();
    let list = String::from_utf8(f.raw(&["CLIENT", "LIST"])).unwrap();
    // `*2\r\n$6\r\nCLIENT\r\n$4\r\nLIST\r\n`: 26 bytes, 10 of arguments.
    assert!(list.contains(" qbuf=26 qbuf-free=0 argv-mem=10 multi-mem=0 rbs=26 rbp=26 obl=0 oll=0 omem=0 tot-mem=36 "), "{list}");
    let mut other = f.server.open_session();
    line(&mut f, &mut other, "PING");
    let list = f.run("CLIENT LIST");
    let other_line = list.lines().find(|l| l.contains(&format!("id={} ", other.id()))).expect("the other client");
    assert!(other_line.contains(" qbuf=0 qbuf-free=0 argv-mem=0 "), "an idle client holds nothing: {other_line}");
}

#[test]
fn restricting_the_default_user_takes_effect_at_once() {
    let mut f = Fixture::new();
    assert_eq!(f.run("ACL SETUSER default -get"), "+OK\r\n");
    assert_eq!(f.run("GET k"), "-NOPERM this user has no permissions to run the 'get' command\r\n");
    assert_eq!(f.run("ACL LIST"), "*1\r\n$39\r\nuser default on nopass ~* &* +@all -get\r\n");
    assert_eq!(f.run("ACL SETUSER default +get"), "+OK\r\n");
    assert_eq!(f.run("GET k"), "$-1\r\n");
}
