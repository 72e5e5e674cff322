//! MONITOR, as Redis 7.0's `replicationFeedMonitors`: a monitor receives a
//! line for every command executed after it, by anyone, as a status reply
//! `+<seconds>.<microseconds> [0 <peer address>] "arg" "arg"...` (`[0 lua]`
//! for a script's commands), each argument quoted as `sdscatrepr` quotes.
//!
//! Which commands, and when (Redis's `call`): after it ran, any command
//! but the administrative ones (CONFIG, CLIENT KILL, MONITOR...); EVAL and
//! its kin before the script, so that the script's commands follow it;
//! EXEC after the commands it ran; a command refused before it ran (unknown,
//! arity, NOAUTH) or queued in MULTI never. The lines go out as pub/sub's
//! messages do, by client id through the outbox
//! ([`super::Server::take_pushes`]), and a monitor's connection closing
//! ends it ([`super::Server::close_session`]). Time is the keyspace's clock
//! (one reading per batch on a server), so the microseconds are a multiple
//! of 1000.
//!
//! A replicated machine runs each entry on an executor of its own, which
//! has no monitors; while its member has some, the machine's executor
//! records the lines of the commands it runs instead
//! ([`super::Server::record_monitor_lines`]), shown as sent from
//! `log:<index>` (the entry's; no entry names its client), and the member
//! sends them to its own ([`super::Server::feed_monitor_line`]). A read
//! the member serves outside the log runs on its read executor, and is fed
//! to its monitors by the member ([`super::Server::feed_monitors_for`]).
//! So each member's monitors see every write it applies, and the reads and
//! session commands it serves itself with their client's address.

use pmwire_resp::reply::ReplySink;

use super::{Ctx, Fail, Res, Server, Session};
use crate::store::Keyspace;

/// The client id a replicated machine's executor records its lines for
/// (no session has it: ids count up from 1).
const RECORDED: u64 = u64::MAX;

impl Server {
    /// Makes this executor (a replicated machine's, for one entry) record
    /// a monitor line for each command `session` runs, shown as sent from
    /// `addr`, for [`Server::take_monitor_lines`].
    pub fn record_monitor_lines(&mut self, session: &Session, addr: String) {
        if !self.monitors.contains(&RECORDED) {
            self.monitors.push(RECORDED);
        }
        if let Some(info) = self.clients.get_mut(&session.id) {
            info.addr = addr.into();
        }
    }

    /// The lines recorded since the last call, in order (each with its `+`
    /// and CRLF, as a monitor receives it).
    pub fn take_monitor_lines(&mut self) -> Vec<Vec<u8>> {
        if !self.monitors.contains(&RECORDED) {
            return Vec::new();
        }
        let (lines, rest): (Vec<_>, Vec<_>) = self.pubsub.take_outbox().into_iter().partition(|(id, _)| *id == RECORDED);
        for (id, bytes) in rest {
            self.pubsub.send(id, bytes);
        }
        lines.into_iter().map(|(_, line)| line).collect()
    }

    /// Sends `line` (recorded by a replicated machine's executor) to this
    /// server's monitors.
    pub fn feed_monitor_line(&mut self, line: &[u8]) {
        for &id in &self.monitors {
            self.pubsub.send(id, line.to_vec());
        }
    }

    /// Feeds this server's monitors the line of `req`, which `session` (one
    /// of this server's) ran at `now_ms` on another executor (a cluster
    /// member's reads).
    pub fn feed_monitors_for(&mut self, session: &Session, now_ms: u64, req: &pmwire_resp::request::Request<'_>) {
        self.feed_monitors_at(session, now_ms, req, false);
    }

    /// Sends every monitor the line of `req`, run by `session` (by a
    /// script if `lua`) at `now_ms`.
    pub(super) fn feed_monitors_at(&mut self, session: &Session, now_ms: u64, req: &pmwire_resp::request::Request<'_>, lua: bool) {
        if self.monitors.is_empty() {
            return;
        }
        let addr = if lua { None } else { Some(self.clients.get(&session.id).map_or("?:0", |c| &*c.addr)) };
        let args: Vec<&[u8]> = req.args().collect();
        let line = line(now_ms, addr, redacted(&args).into_iter());
        for &id in &self.monitors {
            self.pubsub.send(id, line.clone());
        }
    }

    /// Whether a session is in MONITOR.
    pub fn has_monitors(&self) -> bool {
        !self.monitors.is_empty()
    }
}

/// MONITOR: this connection receives every command from now on. A second
/// MONITOR answers nothing, as Redis's does.
pub(super) fn monitor<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    if c.server.deny_blocking {
        return Err(Fail::err("MONITOR isn't allowed for DENY BLOCKING client"));
    }
    if c.server.monitors.contains(&c.session.id) {
        return Ok(());
    }
    c.server.monitors.push(c.session.id);
    c.out.ok();
    Ok(())
}

/// The line a monitor receives for `args`, run at `now_ms` by a client at
/// `addr` (`None`: a script).
pub(super) fn line<'a>(now_ms: u64, addr: Option<&str>, args: impl Iterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = format!("+{}.{:06} [0 {}]", now_ms / 1000, (now_ms % 1000) * 1000, addr.unwrap_or("lua")).into_bytes();
    for arg in args {
        out.push(b' ');
        repr(arg, &mut out);
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// `args` as a monitor sees them: AUTH's arguments and HELLO's AUTH
/// credentials replaced by `(redacted)` (Redis's `redactClientCommandArgument`).
pub(super) fn redacted<'a>(args: &[&'a [u8]]) -> Vec<&'a [u8]> {
    const REDACTED: &[u8] = b"(redacted)";
    let mut out = args.to_vec();
    if args[0].eq_ignore_ascii_case(b"auth") {
        out[1..].iter_mut().for_each(|a| *a = REDACTED);
    } else if args[0].eq_ignore_ascii_case(b"hello") {
        let mut j = 2;
        while j < args.len() {
            if args[j].eq_ignore_ascii_case(b"auth") && j + 2 < args.len() {
                out[j + 1] = REDACTED;
                out[j + 2] = REDACTED;
                j += 3;
            } else {
                j += if args[j].eq_ignore_ascii_case(b"setname") { 2 } else { 1 };
            }
        }
    }
    out
}

/// Redis's `sdscatrepr`: the bytes quoted, with C escapes and `\xhh` for
/// what is not printable.
fn repr(bytes: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    for &b in bytes {
        match b {
            b'\\' | b'"' => out.extend_from_slice(&[b'\\', b]),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x07 => out.extend_from_slice(b"\\a"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x20..=0x7e => out.push(b),
            _ => out.extend_from_slice(format!("\\x{b:02x}").as_bytes()),
        }
    }
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_redis_s() {
        let args: [&[u8]; 3] = [b"set", b"k\"\\", b"\x00\n\xff \x07"];
        assert_eq!(
            line(1_700_000_000_123, Some("127.0.0.1:5000"), args.into_iter()),
            b"+1700000000.123000 [0 127.0.0.1:5000] \"set\" \"k\\\"\\\\\" \"\\x00\\n\\xff \\a\"\r\n".to_vec()
        );
        assert_eq!(line(5, None, [&b"get"[..]].into_iter()), b"+0.005000 [0 lua] \"get\"\r\n".to_vec());
        let hello: [&[u8]; 6] = [b"hello", b"3", b"AUTH", b"u", b"p", b"SETNAME"];
        assert_eq!(redacted(&hello), vec![&b"hello"[..], b"3", b"AUTH", b"(redacted)", b"(redacted)", b"SETNAME"]);
        assert_eq!(redacted(&[&b"AUTH"[..], b"u", b"p"]), vec![&b"AUTH"[..], b"(redacted)", b"(redacted)"]);
    }
}
