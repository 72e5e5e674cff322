//! Command and error statistics: INFO `commandstats` and `errorstats`,
//! `total_error_replies`, and CONFIG RESETSTAT, counted as Redis 7.0's
//! `call()`, `rejectCommand` and `afterErrorReply` count them.
//!
//! Invariants and costs:
//! - One [`CommandStat`] per row of the command table, indexed by the
//!   row's position ([`super::commands::index`]): counting a call is an
//!   array update, never a lookup by name.
//! - `total_error_replies` counts every error reply that updates the
//!   statistics, and each such error is also counted under its code (the
//!   text's first word, or `ERR` when it has none within 31 bytes, as
//!   Redis's `afterErrorReply` reads it), in at most [`MAX_ERROR_KINDS`]
//!   kinds (Redis 7.2's cap: past it, the table is replaced by the one
//!   kind `ERRORSTATS_DISABLED` until CONFIG RESETSTAT; 7.0 had no cap).
//! - `mark` is Redis's `prev_err_count`: the error total when the last
//!   call (at any depth: a script's `redis.call` is a call too) began or
//!   ended. A call whose end finds the total past the mark failed. So a
//!   script's error raised from a failed `redis.call` is counted once, on
//!   the command that failed, and the script counts as failed through
//!   [`Stats::failed_uncounted`] (Redis's `ERR_REPLY_FLAG_NO_STATS_UPDATE`).
//!
//! The counters live in DRAM and are per executor, as Redis's are per
//! server: a restart or CONFIG RESETSTAT starts them from zero. A
//! replicated machine runs each entry on an executor of its own: it keeps
//! one [`Stats`] across them ([`super::Server::swap_stats`]), which the
//! member adds to its own ([`super::Server::absorb_stats`]), so a member's
//! INFO counts every command it applies, as a Redis replica counts what
//! its primary sends (an entry run again, after the batch it joined was
//! found full, is counted again). The per-command table is allocated at the first
//! count: an executor made for one entry costs no table.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::commands::{self, CommandInfo};
use pmwire_resp::reply::{Out, ReplySink};

/// Most error codes counted separately (Redis 7.2's `ERROR_STATS_NUMBER`).
pub const MAX_ERROR_KINDS: usize = 128;

/// The kind that stands for all once more than [`MAX_ERROR_KINDS`] appeared.
const DISABLED: &[u8] = b"ERRORSTATS_DISABLED";

/// One command's counters (Redis's `redisCommand` fields of those names).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CommandStat {
    /// Times it ran.
    pub calls: u64,
    /// Microseconds it ran, in all.
    pub usec: u64,
    /// Times it was refused before running (unknown arity, NOAUTH, OOM...).
    pub rejected_calls: u64,
    /// Times it ran and answered an error.
    pub failed_calls: u64,
}

/// The statistics of one executor (module docs).
#[derive(Debug)]
pub struct Stats {
    per_command: Box<[CommandStat]>,
    errors: BTreeMap<Vec<u8>, u64>,
    errors_disabled: bool,
    total_error_replies: u64,
    mark: u64,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            per_command: Box::default(),
            errors: BTreeMap::new(),
            errors_disabled: false,
            total_error_replies: 0,
            mark: 0,
        }
    }
}

/// The code an error reply is counted under: its first word, if a space
/// ends it within the first 31 bytes (Redis looks at 32 bytes of `-CODE`),
/// else `ERR`.
pub(crate) fn error_code(text: &[u8]) -> &[u8] {
    let head = &text[..text.len().min(31)];
    match head.iter().position(|&c| c == b' ') {
        Some(end) => &text[..end],
        None => b"ERR",
    }
}

impl Stats {
    /// `info`'s row, the table allocated at the first count.
    fn row(&mut self, info: &CommandInfo) -> &mut CommandStat {
        if self.per_command.is_empty() {
            self.per_command = vec![CommandStat::default(); commands::table_len()].into_boxed_slice();
        }
        &mut self.per_command[commands::index(info)]
    }

    /// An error reply that updates the statistics (Redis's `afterErrorReply`).
    pub fn error(&mut self, text: &[u8]) {
        self.total_error_replies += 1;
        self.count_error(error_code(text), 1);
    }

    /// `n` more errors of `code` (within [`MAX_ERROR_KINDS`] kinds).
    fn count_error(&mut self, code: &[u8], n: u64) {
        if self.errors_disabled {
            return;
        }
        if let Some(count) = self.errors.get_mut(code) {
            *count += n;
            return;
        }
        if self.errors.len() >= MAX_ERROR_KINDS {
            self.errors.clear();
            self.errors.insert(DISABLED.to_vec(), n);
            self.errors_disabled = true;
            return;
        }
        self.errors.insert(code.to_vec(), n);
    }

    /// Whether nothing was counted since it was made or reset.
    pub fn is_empty(&self) -> bool {
        self.per_command.is_empty() && self.total_error_replies == 0
    }

    /// Adds `other`'s counters to these and resets `other`.
    pub fn absorb(&mut self, other: &mut Stats) {
        let other = std::mem::take(other);
        self.total_error_replies += other.total_error_replies;
        if other.errors_disabled {
            // As one executor past the cap: the one kind that stands for all.
            self.errors.clear();
            self.errors.insert(DISABLED.to_vec(), other.errors.values().sum());
            self.errors_disabled = true;
        } else {
            for (code, n) in &other.errors {
                self.count_error(code, *n);
            }
        }
        if other.per_command.is_empty() {
            return;
        }
        for (info, theirs) in commands::table().iter().zip(other.per_command.iter()) {
            if *theirs == CommandStat::default() {
                continue;
            }
            let ours = self.row(info);
            ours.calls += theirs.calls;
            ours.usec = ours.usec.saturating_add(theirs.usec);
            ours.rejected_calls += theirs.rejected_calls;
            ours.failed_calls += theirs.failed_calls;
        }
    }

    /// Writes the error reply `text` (its code included) and counts it.
    pub fn error_reply<V, S: ReplySink<V> + ?Sized>(&mut self, out: &mut Out<'_, V, S>, text: &[u8]) {
        self.error(text);
        out.error(text);
    }

    /// Errors replied so far (INFO's `total_error_replies`).
    pub fn total_error_replies(&self) -> u64 {
        self.total_error_replies
    }

    /// A call begins (Redis's `incrCommandStatsOnError(NULL, 0)`).
    pub fn begin_call(&mut self) {
        self.mark = self.total_error_replies;
    }

    /// A call of `info` ended after `usec` µs: counted, and failed if an
    /// error was replied since the mark; the mark moves to now.
    pub fn end_call(&mut self, info: &CommandInfo, usec: u64) {
        let failed = self.total_error_replies > self.mark;
        let stat = self.row(info);
        stat.calls += 1;
        stat.usec = stat.usec.saturating_add(usec);
        if failed {
            stat.failed_calls += 1;
        }
        self.mark = self.total_error_replies;
    }

    /// `info` was refused before running (Redis's `rejectCommand`); the
    /// refusal's error is counted by the caller.
    pub fn rejected(&mut self, info: &CommandInfo) {
        self.row(info).rejected_calls += 1;
    }

    /// A call of `info` refused inside a script (Redis's `scriptCall` error
    /// path: the error is counted, then `incrCommandStatsOnError(cmd,
    /// REJECTED)`).
    pub fn rejected_in_script(&mut self, info: Option<&CommandInfo>, text: &[u8]) {
        self.error(text);
        if let Some(info) = info {
            self.rejected(info);
        }
        self.mark = self.total_error_replies;
    }

    /// `info` answered an error already counted (a script raising the error
    /// of a failed `redis.call`): failed, not counted again.
    pub fn failed_uncounted(&mut self, info: &CommandInfo) {
        self.row(info).failed_calls += 1;
    }

    /// CONFIG RESETSTAT: every counter from zero.
    pub fn reset(&mut self) {
        *self = Stats::default();
    }

    /// `info`'s counters.
    #[cfg(test)]
    pub fn of(&self, info: &CommandInfo) -> CommandStat {
        self.per_command.get(commands::index(info)).copied().unwrap_or_default()
    }

    /// INFO `commandstats`' lines: each command (and subcommand, as
    /// `container|sub`) that was called, refused or failed, in the table's order.
    pub fn write_commandstats(&self, out: &mut String) {
        for (info, s) in commands::table().iter().zip(self.per_command.iter()) {
            if s.calls == 0 && s.failed_calls == 0 && s.rejected_calls == 0 {
                continue;
            }
            // Redis: `(float)microseconds/calls`, printed with `%.2f`.
            let per_call = if s.calls == 0 { 0.0 } else { f64::from(s.usec as f32 / s.calls as f32) };
            let _ = write!(
                out,
                "cmdstat_{}:calls={},usec={},usec_per_call={per_call:.2},rejected_calls={},failed_calls={}\r\n",
                info.name, s.calls, s.usec, s.rejected_calls, s.failed_calls
            );
        }
    }

    /// INFO `errorstats`' lines, by code in byte order (Redis's rax order).
    pub fn write_errorstats(&self, out: &mut String) {
        for (code, count) in &self.errors {
            let _ = write!(out, "errorstat_{}:count={count}\r\n", info_safe(code));
        }
    }
}

impl super::Server {
    /// Exchanges this executor's statistics with `other` (a replicated
    /// machine keeps one [`Stats`] across the executors of its entries).
    pub fn swap_stats(&mut self, other: &mut Stats) {
        std::mem::swap(&mut self.stats, other);
    }

    /// Exchanges the statistics of two executors (a member lends its own
    /// to the executor that serves its reads, for one read).
    pub fn swap_stats_with(&mut self, other: &mut super::Server) {
        std::mem::swap(&mut self.stats, &mut other.stats);
    }

    /// Adds `other`'s counters to this executor's and resets `other` (a
    /// member taking in what its machine applied).
    pub fn absorb_stats(&mut self, other: &mut Stats) {
        self.stats.absorb(other);
    }
}

/// A code as INFO shows it: Redis's `getSafeInfoString` makes `:`, `\r`
/// and `\n` (and here anything not printable) `_`.
fn info_safe(code: &[u8]) -> String {
    code.iter().map(|&c| if c == b':' || c == b'\r' || c == b'\n' || !(0x20..0x7f).contains(&c) { '_' } else { c as char }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_code_is_the_first_word_within_31_bytes() {
        assert_eq!(error_code(b"WRONGTYPE Operation"), b"WRONGTYPE");
        assert_eq!(error_code(b"ERR x"), b"ERR");
        assert_eq!(error_code(b"nospace"), b"ERR");
        assert_eq!(error_code(&[b'A'; 40]), b"ERR");
        let mut long = vec![b'B'; 30];
        long.extend_from_slice(b" tail");
        assert_eq!(error_code(&long), &long[..30]);
    }

    #[test]
    fn errors_past_the_cap_disable_the_table_until_reset() {
        let mut s = Stats::default();
        for i in 0..MAX_ERROR_KINDS {
            s.error(format!("E{i} x").as_bytes());
        }
        s.error(b"E0 again");
        assert_eq!(s.errors.len(), MAX_ERROR_KINDS);
        assert_eq!(s.errors[&b"E0".to_vec()], 2);
        s.error(b"NEW kind");
        assert_eq!(s.errors.len(), 1);
        assert_eq!(s.errors[&DISABLED.to_vec()], 1);
        s.error(b"OTHER kind");
        assert_eq!(s.errors.len(), 1, "disabled: no kind is added");
        assert_eq!(s.total_error_replies(), MAX_ERROR_KINDS as u64 + 3);
        s.reset();
        s.error(b"OTHER kind");
        assert_eq!(s.errors[&b"OTHER".to_vec()], 1);
        assert_eq!(s.total_error_replies(), 1);
    }

    #[test]
    fn absorbing_adds_every_counter_and_empties_the_other() {
        let set = commands::lookup(b"set").expect("set");
        let get = commands::lookup(b"get").expect("get");
        let mut ours = Stats::default();
        assert!(ours.is_empty() && ours.per_command.is_empty(), "no table until a count");
        ours.begin_call();
        ours.end_call(set, 5);
        ours.error(b"WRONGTYPE x");
        let mut theirs = Stats::default();
        theirs.begin_call();
        theirs.error(b"WRONGTYPE y");
        theirs.end_call(set, 7);
        theirs.rejected(get);
        theirs.error(b"ERR z");
        ours.absorb(&mut theirs);
        assert!(theirs.is_empty());
        assert_eq!(ours.of(set), CommandStat { calls: 2, usec: 12, rejected_calls: 0, failed_calls: 1 });
        assert_eq!(ours.of(get), CommandStat { calls: 0, usec: 0, rejected_calls: 1, failed_calls: 0 });
        assert_eq!(ours.total_error_replies(), 3);
        assert_eq!((ours.errors[&b"WRONGTYPE".to_vec()], ours.errors[&b"ERR".to_vec()]), (2, 1));
        // Past the cap in the other: this one is disabled too.
        for i in 0..=MAX_ERROR_KINDS {
            theirs.error(format!("E{i} x").as_bytes());
        }
        ours.absorb(&mut theirs);
        assert!(ours.errors_disabled);
        assert_eq!(ours.errors.keys().collect::<Vec<_>>(), vec![&DISABLED.to_vec()]);
        assert_eq!(ours.total_error_replies(), 3 + MAX_ERROR_KINDS as u64 + 1);
        // Past the cap by adding kinds: disabled as one executor would be.
        let mut many = Stats::default();
        for i in 0..MAX_ERROR_KINDS {
            many.error(format!("K{i} x").as_bytes());
        }
        let mut one = Stats::default();
        one.error(b"NEW kind");
        many.absorb(&mut one);
        assert!(many.errors_disabled);
    }

    #[test]
    fn a_call_fails_only_on_errors_since_the_mark() {
        let set = commands::lookup(b"set").expect("set");
        let eval = commands::lookup(b"eval").expect("eval");
        let mut s = Stats::default();
        s.begin_call(); // EVAL
        s.begin_call(); // redis.call('set', ...) inside it
        s.error(b"WRONGTYPE x");
        s.end_call(set, 3);
        s.end_call(eval, 5);
        assert_eq!(s.of(set), CommandStat { calls: 1, usec: 3, rejected_calls: 0, failed_calls: 1 });
        assert_eq!(s.of(eval).failed_calls, 0, "the nested call took the error");
        s.failed_uncounted(eval);
        assert_eq!(s.of(eval).failed_calls, 1);
        assert_eq!(s.total_error_replies(), 1);
        let mut text = String::new();
        s.write_commandstats(&mut text);
        assert_eq!(
            text,
            "cmdstat_eval:calls=1,usec=5,usec_per_call=5.00,rejected_calls=0,failed_calls=1\r\ncmdstat_set:calls=1,usec=3,usec_per_call=3.00,rejected_calls=0,failed_calls=1\r\n"
        );
    }
}
