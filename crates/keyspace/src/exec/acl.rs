//! ACL users, as Redis 7.0's `acl.c` keeps them: each user has flags
//! (on/off, nopass), SHA-256 password hashes, and selectors (the root one
//! and any `(...)` ones) that say which commands, keys and channels it may
//! use. [`Users`] holds them and the ACL log; [`check`] is Redis's
//! `ACLCheckAllUserCommandPerm`, made at admission for a session's command
//! and by `redis.call` for a script's.
//!
//! Commands are numbered by their position in Redis's own command table
//! ([`acl_table::COMMANDS`], generated from Redis 7.0.15's JSON), so rules
//! naming a command this server does not serve are accepted as Redis
//! accepts them, and ACL LIST / GETUSER describe a user as Redis would.
//! Keys are found by the commands' key specs, as Redis's
//! `getKeysFromCommandWithSpecs` finds them (with Redis's own extractors
//! for the commands whose specs are not enough: SET, BITFIELD, SORT, XREAD,
//! XREADGROUP).
//!
//! Invariants: a password is never kept or shown in clear, only its
//! SHA-256 hex; the `default` user always exists. Users are this
//! executor's configuration (not in the keyspace, not replicated, not
//! persisted: a restart has only `default`, bound to `requirepass`).

use super::acl_table::{CATEGORIES, COMMANDS};
use crate::glob::matches;
use std::collections::{BTreeMap, VecDeque};

/// A key spec's flag: the key's value is read (Redis's `ACCESS`).
pub(crate) const READ: u8 = 1;
/// A key spec's flag: the key is written (`INSERT`, `DELETE` or `UPDATE`).
pub(crate) const WRITE: u8 = 2;
/// A key spec's flag: not a key (Redis's `NOT_KEY`).
pub(crate) const NOT_KEY: u8 = 4;
/// A key spec's flag: may not find every key (`INCOMPLETE`).
pub(crate) const INCOMPLETE: u8 = 8;
/// A key spec's flag: the flags depend on the arguments (`VARIABLE_FLAGS`).
pub(crate) const VARIABLE: u8 = 16;

/// Where a key spec's search begins.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Begin {
    Index(i32),
    Keyword(&'static [u8], i32),
    Unknown,
}

/// How a key spec finds its keys from where the search began.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Find {
    Range { last: i32, step: i32, limit: i32 },
    Keynum { index: i32, first: i32, step: i32 },
    Unknown,
}

/// One of a command's key specs (Redis 7.0's `keySpec`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeySpec {
    pub begin: Begin,
    pub find: Find,
    pub flags: u8,
}

/// Words of a command bitmap.
const WORDS: usize = COMMANDS.len().div_ceil(64);

/// Most entries the ACL log keeps (Redis's `acllog-max-len` default).
const LOG_MAX: usize = 128;

/// A command's number: its position in Redis's table, by full name
/// (lower-case, `container|sub`).
pub(crate) fn command_id(name: &str) -> Option<usize> {
    COMMANDS.binary_search_by(|c| c.0.cmp(name)).ok()
}

/// The ACL categories of a command (bits in the order of [`CATEGORIES`]).
pub(crate) fn categories_of(name: &str) -> u32 {
    command_id(name).map_or(0, |i| COMMANDS[i].1)
}

/// The names of a command's categories, as COMMAND INFO shows them.
pub(crate) fn category_names(name: &str) -> impl Iterator<Item = &'static str> {
    let bits = categories_of(name);
    CATEGORIES.iter().enumerate().filter(move |(i, _)| bits & (1 << i) != 0).map(|(_, c)| *c)
}

/// A category's bit, by name in any case.
fn category_bit(name: &[u8]) -> Option<u32> {
    CATEGORIES.iter().position(|c| c.as_bytes().eq_ignore_ascii_case(name)).map(|i| 1 << i)
}

/// The subcommands of command `id` (none for a subcommand or a plain command).
fn subcommands(id: usize) -> std::ops::Range<usize> {
    let name = COMMANDS[id].0;
    let end = COMMANDS[id + 1..].iter().take_while(|c| c.0.strip_prefix(name).is_some_and(|r| r.starts_with('|'))).count();
    id + 1..id + 1 + end
}

/// Redis's `ACLLookupCommand`: `name` or `container|sub`, any case.
fn lookup_command(name: &[u8]) -> Option<usize> {
    let lower = String::from_utf8(name.to_ascii_lowercase()).ok()?;
    let mut parts = lower.split('|');
    let base = command_id(parts.next()?)?;
    match (parts.next(), parts.next()) {
        (None, _) => (!COMMANDS[base].0.contains('|')).then_some(base),
        (Some(_), None) if !subcommands(base).is_empty() => command_id(&lower),
        _ => None,
    }
}

/// Why a rule was refused (Redis's errno values in `ACLSetUser`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RuleError {
    UnknownName,
    Syntax,
    AfterAllKeys,
    AfterAllChannels,
    NoSuchPassword,
    BadHash,
    FirstArgOfSubcommand,
}

impl RuleError {
    /// Redis's `ACLSetUserStringError`.
    fn text(self) -> &'static str {
        match self {
            RuleError::UnknownName => "Unknown command or category name in ACL",
            RuleError::Syntax => "Syntax error",
            RuleError::AfterAllKeys => "Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does not have any effect. Try 'resetkeys' to start with an empty list of patterns",
            RuleError::AfterAllChannels => "Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid and does not have any effect. Try 'resetchannels' to start with an empty list of channels",
            RuleError::NoSuchPassword => "The password you are trying to remove from the user does not exist",
            RuleError::BadHash => "The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters",
            RuleError::FirstArgOfSubcommand => "Allowing first-arg of a subcommand is not supported",
        }
    }
}

/// What a selector allows (Redis's `aclSelector`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Selector {
    allkeys: bool,
    allchannels: bool,
    /// Every command, whatever the bitmap (cleared by any `-`).
    allcommands: bool,
    /// Set by `+@all`, cleared by `-@all` only: Redis's reserved bit,
    /// which says whether a description starts from `+@all`.
    future: bool,
    bits: [u64; WORDS],
    /// Allowed first arguments of commands whose bit is clear (`+select|0`).
    firstargs: BTreeMap<usize, Vec<Vec<u8>>>,
    /// Key patterns with their [`READ`] / [`WRITE`] permissions.
    patterns: Vec<(Vec<u8>, u8)>,
    channels: Vec<Vec<u8>>,
}

impl Selector {
    fn bit(&self, id: usize) -> bool {
        self.bits[id / 64] & (1 << (id % 64)) != 0
    }

    fn set_bit(&mut self, id: usize, on: bool) {
        if on {
            self.bits[id / 64] |= 1 << (id % 64);
        } else {
            self.bits[id / 64] &= !(1 << (id % 64));
            self.allcommands = false;
        }
    }

    /// Redis's `ACLChangeSelectorPerm`: a container's subcommands follow it.
    fn change_perm(&mut self, id: usize, allow: bool) {
        self.set_bit(id, allow);
        self.firstargs.remove(&id);
        for sub in subcommands(id) {
            self.set_bit(sub, allow);
        }
    }

    fn set_category(&mut self, bit: u32, allow: bool) {
        for id in 0..COMMANDS.len() {
            if COMMANDS[id].1 & bit != 0 {
                self.change_perm(id, allow);
            }
        }
    }

    fn set_all(&mut self, allow: bool) {
        self.bits = [if allow { u64::MAX } else { 0 }; WORDS];
        (self.allcommands, self.future) = (allow, allow);
        self.firstargs.clear();
    }

    /// Redis's `ACLSetSelector`: one rule about commands, keys or channels.
    fn apply(&mut self, op: &[u8]) -> Result<(), RuleError> {
        let is = |w: &str| op.eq_ignore_ascii_case(w.as_bytes());
        if is("allkeys") || is("~*") {
            self.allkeys = true;
            self.patterns.clear();
        } else if is("resetkeys") {
            self.allkeys = false;
            self.patterns.clear();
        } else if is("allchannels") || is("&*") {
            self.allchannels = true;
            self.channels.clear();
        } else if is("resetchannels") {
            self.allchannels = false;
            self.channels.clear();
        } else if is("allcommands") || is("+@all") {
            self.set_all(true);
        } else if is("nocommands") || is("-@all") {
            self.set_all(false);
        } else if op[0] == b'~' || op[0] == b'%' {
            self.add_key_pattern(op)?;
        } else if op[0] == b'&' {
            if self.allchannels {
                return Err(RuleError::AfterAllChannels);
            }
            let pattern = &op[1..];
            if has_spaces(pattern) {
                return Err(RuleError::Syntax);
            }
            if !self.channels.iter().any(|c| c == pattern) {
                self.channels.push(pattern.to_vec());
            }
            self.allchannels = false;
        } else if (op[0] == b'+' || op[0] == b'-') && op.get(1) == Some(&b'@') {
            let bit = category_bit(&op[2..]).ok_or(RuleError::UnknownName)?;
            self.set_category(bit, op[0] == b'+');
        } else if op[0] == b'+' {
            self.allow_command(&op[1..])?;
        } else if op[0] == b'-' {
            let id = lookup_command(&op[1..]).ok_or(RuleError::UnknownName)?;
            self.change_perm(id, false);
        } else {
            return Err(RuleError::Syntax);
        }
        Ok(())
    }

    fn add_key_pattern(&mut self, op: &[u8]) -> Result<(), RuleError> {
        if self.allkeys {
            return Err(RuleError::AfterAllKeys);
        }
        let (mut flags, mut offset) = (0u8, 1usize);
        if op[0] == b'%' {
            while offset < op.len() {
                match op[offset].to_ascii_uppercase() {
                    b'R' if flags & READ == 0 => flags |= READ,
                    b'W' if flags & WRITE == 0 => flags |= WRITE,
                    b'~' => {
                        offset += 1;
                        break;
                    }
                    _ => return Err(RuleError::Syntax),
                }
                offset += 1;
            }
        } else {
            flags = READ | WRITE;
        }
        let pattern = &op[offset.min(op.len())..];
        if has_spaces(pattern) {
            return Err(RuleError::Syntax);
        }
        match self.patterns.iter_mut().find(|(p, _)| p == pattern) {
            Some((_, f)) => *f |= flags,
            None => self.patterns.push((pattern.to_vec(), flags)),
        }
        self.allkeys = false;
        Ok(())
    }

    /// `+command`, `+container|sub`, or `+command|firstarg`.
    fn allow_command(&mut self, name: &[u8]) -> Result<(), RuleError> {
        let Some(bar) = name.iter().rposition(|&b| b == b'|') else {
            let id = lookup_command(name).ok_or(RuleError::UnknownName)?;
            self.change_perm(id, true);
            return Ok(());
        };
        let (base, sub) = (&name[..bar], &name[bar + 1..]);
        let id = lookup_command(base).ok_or(RuleError::UnknownName)?;
        if COMMANDS[id].0.contains('|') {
            return Err(RuleError::FirstArgOfSubcommand);
        }
        if sub.is_empty() {
            return Err(RuleError::Syntax);
        }
        if !subcommands(id).is_empty() {
            let id = lookup_command(name).ok_or(RuleError::UnknownName)?;
            self.change_perm(id, true);
        } else {
            let allowed = self.firstargs.entry(id).or_default();
            if !allowed.iter().any(|a| a.eq_ignore_ascii_case(sub)) {
                allowed.push(sub.to_vec());
            }
        }
        Ok(())
    }

    /// Redis's `ACLSelectorCheckCmd`.
    fn check(&self, id: usize, no_auth: bool, argv: &[&[u8]], keys: &[(usize, u8)], channels: &[(usize, bool)]) -> Result<(), Denied> {
        if !self.allcommands && !no_auth && !self.bit(id) {
            let idx = if COMMANDS[id].0.contains('|') { 2 } else { 1 };
            let first = self.firstargs.get(&id).filter(|_| argv.len() >= 2);
            let matched = first.is_some_and(|allowed| argv.get(idx).is_some_and(|a| allowed.iter().any(|x| x.eq_ignore_ascii_case(a))));
            if !matched {
                return Err(Denied::Command);
            }
        }
        if !self.allkeys {
            for &(pos, flags) in keys {
                let ok = self.patterns.iter().any(|(p, f)| f & flags == flags && matches(p, argv[pos]));
                if !ok {
                    return Err(Denied::Key(pos));
                }
            }
        }
        if !self.allchannels {
            for &(pos, pattern) in channels {
                let ok = self.channels.iter().any(|c| if pattern { c == argv[pos] } else { matches(c, argv[pos]) });
                if !ok {
                    return Err(Denied::Channel(pos));
                }
            }
        }
        Ok(())
    }

    /// Redis's `ACLDescribeSelectorCommandRules`: `+@all` or `-@all`, the
    /// categories that fit best, then single commands, so that applying
    /// the rules to a new selector gives this bitmap.
    fn describe_commands(&self) -> String {
        let additive = !self.future;
        let mut rules = String::from(if additive { "-@all " } else { "+@all " });
        let mut fake = Selector::default();
        fake.set_all(!additive);
        let mut temp = Selector { bits: self.bits, ..Selector::default() };
        let mut applied = [false; CATEGORIES.len()];
        loop {
            let mut best = None;
            let (mut mindiff, mut maxsame) = (usize::MAX, 0);
            for (j, done) in applied.iter().enumerate() {
                if *done {
                    continue;
                }
                let (on, off) = temp.count_category(1 << j);
                let (diff, same) = if additive { (off, on) } else { (on, off) };
                if same > diff && (diff < mindiff || (diff == mindiff && same > maxsame)) {
                    (best, mindiff, maxsame) = (Some(j), diff, same);
                }
            }
            let Some(j) = best else { break };
            fake.set_category(1 << j, additive);
            temp.set_category(1 << j, !additive);
            rules.push_str(&format!("{}@{} ", if additive { '+' } else { '-' }, CATEGORIES[j]));
            applied[j] = true;
        }
        for (id, (name, _, _)) in COMMANDS.iter().enumerate() {
            let user = self.bit(id);
            if user != fake.bit(id) {
                rules.push_str(&format!("{}{name} ", if user { '+' } else { '-' }));
                fake.change_perm(id, user);
            }
            if !user {
                for arg in self.firstargs.get(&id).into_iter().flatten() {
                    rules.push_str(&format!("+{name}|{} ", String::from_utf8_lossy(arg)));
                }
            }
        }
        rules.pop();
        assert_eq!(fake.bits, self.bits, "the description gives back the bitmap: {rules}");
        rules
    }

    fn count_category(&self, bit: u32) -> (usize, usize) {
        let ids = (0..COMMANDS.len()).filter(|&id| COMMANDS[id].1 & bit != 0);
        ids.fold((0, 0), |(on, off), id| if self.bit(id) { (on + 1, off) } else { (on, off + 1) })
    }

    /// The key patterns as GETUSER shows them (`~*` for allkeys).
    fn describe_keys(&self) -> String {
        if self.allkeys {
            return "~*".into();
        }
        self.patterns.iter().map(|(p, f)| pattern_text(p, *f)).collect::<Vec<_>>().join(" ")
    }

    fn describe_channels(&self) -> String {
        if self.allchannels {
            return "&*".into();
        }
        self.channels.iter().map(|c| format!("&{}", String::from_utf8_lossy(c))).collect::<Vec<_>>().join(" ")
    }

    /// Redis's `ACLDescribeSelector`.
    fn describe(&self) -> String {
        let mut out = String::new();
        if self.allkeys {
            out.push_str("~* ");
        } else {
            self.patterns.iter().for_each(|(p, f)| out.push_str(&format!("{} ", pattern_text(p, *f))));
        }
        if self.allchannels {
            out.push_str("&* ");
        } else {
            out.push_str("resetchannels ");
            self.channels.iter().for_each(|c| out.push_str(&format!("&{} ", String::from_utf8_lossy(c))));
        }
        out.push_str(&self.describe_commands());
        out
    }
}

fn pattern_text(pattern: &[u8], flags: u8) -> String {
    let prefix = match flags {
        f if f == READ | WRITE => "~",
        READ => "%R~",
        _ => "%W~",
    };
    format!("{prefix}{}", String::from_utf8_lossy(pattern))
}

/// Redis's `ACLStringHasSpaces`: spaces or NULs.
fn has_spaces(s: &[u8]) -> bool {
    s.iter().any(|&b| b.is_ascii_whitespace() || b == 0)
}

/// Why a command was refused, and the argument that was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Denied {
    Command,
    Key(usize),
    Channel(usize),
}

impl Denied {
    /// Redis's ACL_DENIED_* order: a later reason is the one reported.
    fn rank(self) -> (u8, usize) {
        match self {
            Denied::Command => (1, 0),
            Denied::Key(p) => (2, p),
            Denied::Channel(p) => (4, p),
        }
    }

    /// processCommand's refusal.
    pub(crate) fn error(self, command: &str) -> String {
        match self {
            Denied::Command => format!("NOPERM this user has no permissions to run the '{command}' command"),
            Denied::Key(_) => "NOPERM this user has no permissions to access one of the keys used as arguments".into(),
            Denied::Channel(_) => "NOPERM this user has no permissions to access one of the channels used as arguments".into(),
        }
    }

    /// `scriptVerifyACL`'s refusal (Redis's `getAclErrorMessage`).
    pub(crate) fn script_error(self) -> String {
        let why = match self {
            Denied::Command => "can't run this command or subcommand",
            Denied::Key(_) => "can't access at least one of the keys mentioned in the command arguments",
            Denied::Channel(_) => "can't publish to the channel mentioned in the command",
        };
        format!("ERR The user executing the script {why}")
    }

    /// execCommand's reason, when the rules changed after queueing.
    pub(crate) fn exec_reason(self) -> &'static str {
        match self {
            Denied::Command => "no permission to execute the command or subcommand",
            Denied::Key(_) => "no permission to touch the specified keys",
            Denied::Channel(_) => "no permission to access one of the channels used as arguments",
        }
    }

    fn reason(self) -> &'static str {
        match self {
            Denied::Command => "command",
            Denied::Key(_) => "key",
            Denied::Channel(_) => "channel",
        }
    }
}

/// One user (Redis's `user`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct User {
    enabled: bool,
    nopass: bool,
    /// `sanitize-payload` (Some(true)), `skip-sanitize-payload` (Some(false)).
    sanitize: Option<bool>,
    /// SHA-256 of each password, lower-case hex.
    passwords: Vec<String>,
    root: Selector,
    selectors: Vec<Selector>,
}

impl User {
    /// A new user: off, no password, no command, key or channel.
    fn new() -> User {
        User { enabled: false, nopass: false, sanitize: None, passwords: Vec::new(), root: Selector::default(), selectors: Vec::new() }
    }

    /// Whether the user may do anything: the checks can be skipped.
    fn unrestricted(&self) -> bool {
        self.root.allcommands && self.root.allkeys && self.root.allchannels
    }

    /// Redis's `ACLSetUser`: one rule.
    fn apply(&mut self, op: &[u8]) -> Result<(), RuleError> {
        let is = |w: &str| op.eq_ignore_ascii_case(w.as_bytes());
        if op.is_empty() {
            return Ok(());
        }
        if is("on") || is("off") {
            self.enabled = is("on");
        } else if is("skip-sanitize-payload") || is("sanitize-payload") {
            self.sanitize = Some(is("sanitize-payload"));
        } else if is("nopass") {
            self.nopass = true;
            self.passwords.clear();
        } else if is("resetpass") {
            self.nopass = false;
            self.passwords.clear();
        } else if op[0] == b'>' || op[0] == b'#' {
            let hash = if op[0] == b'>' { hash_password(&op[1..]) } else { checked_hash(&op[1..])? };
            if !self.passwords.contains(&hash) {
                self.passwords.push(hash);
            }
            self.nopass = false;
        } else if op[0] == b'<' || op[0] == b'!' {
            let hash = if op[0] == b'<' { hash_password(&op[1..]) } else { checked_hash(&op[1..])? };
            let at = self.passwords.iter().position(|p| *p == hash).ok_or(RuleError::NoSuchPassword)?;
            self.passwords.remove(at);
        } else if op[0] == b'(' && op.ends_with(b")") {
            let mut selector = Selector::default();
            for rule in op[1..op.len() - 1].split(|&b| b == b' ').filter(|r| !r.is_empty()) {
                selector.apply(rule)?;
            }
            self.selectors.push(selector);
        } else if is("clearselectors") {
            self.selectors.clear();
        } else if is("reset") {
            self.nopass = false;
            self.passwords.clear();
            self.root.apply(b"resetkeys")?;
            self.root.apply(b"resetchannels")?;
            self.enabled = false;
            self.sanitize = Some(true);
            self.selectors.clear();
            self.root.set_all(false);
        } else {
            self.root.apply(op)?;
        }
        Ok(())
    }

    /// Whether `password` opens this user (Redis's `ACLCheckUserCredentials`).
    fn opens(&self, password: &[u8]) -> bool {
        if !self.enabled {
            return false;
        }
        if self.nopass {
            return true;
        }
        let hashed = hash_password(password);
        self.passwords.iter().fold(false, |found, p| found | super::same_secret(p.as_bytes(), hashed.as_bytes()))
    }

    /// Redis's `ACLDescribeUser`: the rules that make this user.
    fn describe(&self) -> String {
        let mut out = String::new();
        out.push_str(if self.enabled { "on " } else { "off " });
        if self.nopass {
            out.push_str("nopass ");
        }
        match self.sanitize {
            Some(false) => out.push_str("skip-sanitize-payload "),
            Some(true) => out.push_str("sanitize-payload "),
            None => {}
        }
        self.passwords.iter().for_each(|p| out.push_str(&format!("#{p} ")));
        out.push_str(&self.root.describe());
        self.selectors.iter().for_each(|s| out.push_str(&format!(" ({})", s.describe())));
        out
    }

    /// The flags GETUSER lists.
    fn flag_names(&self) -> Vec<&'static str> {
        let mut flags = vec![if self.enabled { "on" } else { "off" }];
        if self.nopass {
            flags.push("nopass");
        }
        match self.sanitize {
            Some(false) => flags.push("skip-sanitize-payload"),
            Some(true) => flags.push("sanitize-payload"),
            None => {}
        }
        flags
    }
}

/// SHA-256 of a password, lower-case hex (Redis's `ACLHashPassword`).
fn hash_password(password: &[u8]) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(password);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// A `#hash` rule's hash, if it is 64 lower-case hex digits.
fn checked_hash(hash: &[u8]) -> Result<String, RuleError> {
    let ok = hash.len() == 64 && hash.iter().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b));
    ok.then(|| String::from_utf8_lossy(hash).into_owned()).ok_or(RuleError::BadHash)
}

/// One ACL LOG entry (Redis's `ACLLogEntry`).
#[derive(Debug, Clone)]
pub(crate) struct LogEntry {
    pub count: u64,
    pub reason: &'static str,
    pub context: &'static str,
    pub object: Vec<u8>,
    pub username: Vec<u8>,
    pub ctime_ms: u64,
    pub client_info: String,
}

/// Every user, and the ACL log.
#[derive(Debug, Clone)]
pub(crate) struct Users {
    users: BTreeMap<Vec<u8>, User>,
    /// Whether the default user may run anything: checked on every command
    /// of a default session without a map look-up.
    default_unrestricted: bool,
    /// Newest first.
    pub log: VecDeque<LogEntry>,
}

impl Users {
    /// Redis's users at start: `default`, allowed everything, with
    /// `requirepass` as its password (none: nopass).
    pub fn new(requirepass: Option<&[u8]>) -> Users {
        let mut default = User::new();
        for rule in ["+@all", "~*", "&*", "on", "nopass"] {
            default.apply(rule.as_bytes()).expect("the default user's rules");
        }
        let mut users = Users { users: BTreeMap::new(), default_unrestricted: true, log: VecDeque::new() };
        users.users.insert(b"default".to_vec(), default);
        users.set_default_password(requirepass);
        users
    }

    /// Redis's `ACLUpdateDefaultUserPassword` (`requirepass`).
    pub fn set_default_password(&mut self, password: Option<&[u8]>) {
        let default = self.users.get_mut(&b"default"[..]).expect("the default user exists");
        default.apply(b"resetpass").expect("resetpass");
        match password {
            Some(p) => default.passwords.push(hash_password(p)),
            None => default.nopass = true,
        }
    }

    /// Whether a new connection starts authenticated (the default user
    /// is on and needs no password).
    pub fn default_open(&self) -> bool {
        let default = &self.users[&b"default"[..]];
        default.nopass && default.enabled
    }

    /// Whether the default user needs no password (`nopass`).
    pub fn default_nopass(&self) -> bool {
        self.users[&b"default"[..]].nopass
    }

    /// Whether `user` exists and `password` opens it.
    pub fn credentials_ok(&self, user: &[u8], password: &[u8]) -> bool {
        self.users.get(user).is_some_and(|u| u.opens(password))
    }

    /// Whether `user` exists.
    pub fn exists(&self, user: &[u8]) -> bool {
        self.users.contains_key(user)
    }

    /// Whether `user` may run anything (its checks can be skipped).
    pub fn unrestricted(&self, user: &[u8]) -> bool {
        if user == b"default" {
            return self.default_unrestricted;
        }
        self.users.get(user).is_some_and(User::unrestricted)
    }

    /// ACL SETUSER: every rule applied to a copy, which replaces the user
    /// only if all of them were valid; Redis's error text otherwise.
    pub fn set_user(&mut self, name: &[u8], rules: &[&[u8]]) -> Result<(), String> {
        let merged = merge_selectors(rules)?;
        let mut user = self.users.get(name).cloned().unwrap_or_else(User::new);
        for rule in &merged {
            user.apply(rule).map_err(|e| format!("ERR Error in ACL SETUSER modifier '{}': {}", String::from_utf8_lossy(rule), e.text()))?;
        }
        self.users.insert(name.to_vec(), user);
        self.default_unrestricted = self.users[&b"default"[..]].unrestricted();
        Ok(())
    }

    /// ACL DELUSER: how many of `names` existed (never `default`).
    pub fn delete(&mut self, names: &[&[u8]]) -> usize {
        names.iter().filter(|n| **n != b"default" && self.users.remove(**n).is_some()).count()
    }

    /// The user names, sorted (Redis's rax order).
    pub fn names(&self) -> impl Iterator<Item = &[u8]> {
        self.users.keys().map(Vec::as_slice)
    }

    /// ACL LIST's line of user `name`.
    pub fn describe(&self, name: &[u8]) -> Option<String> {
        self.users.get(name).map(|u| format!("user {} {}", String::from_utf8_lossy(name), u.describe()))
    }

    /// ACL GETUSER's fields of user `name`: flags, password hashes, the
    /// root selector's commands, keys and channels, and the other
    /// selectors' (each commands, keys, channels).
    #[allow(clippy::type_complexity)]
    pub fn details(&self, name: &[u8]) -> Option<(Vec<&'static str>, Vec<String>, [String; 3], Vec<[String; 3]>)> {
        let u = self.users.get(name)?;
        let of = |s: &Selector| [s.describe_commands(), s.describe_keys(), s.describe_channels()];
        Some((u.flag_names(), u.passwords.clone(), of(&u.root), u.selectors.iter().map(of).collect()))
    }

    /// Redis's `ACLCheckAllUserCommandPerm`: whether `user` may run the
    /// command `name` (a table row's) with `argv`.
    pub fn check(&self, user: &[u8], name: &str, no_auth: bool, argv: &[&[u8]]) -> Result<(), Denied> {
        let Some(u) = self.users.get(user) else { return Err(Denied::Command) };
        if u.unrestricted() {
            return Ok(());
        }
        let Some(id) = command_id(name) else { return Err(Denied::Command) };
        let keys = keys_of(name, argv);
        let channels = channels_of(name, argv);
        let mut worst = Denied::Command;
        for s in std::iter::once(&u.root).chain(&u.selectors) {
            match s.check(id, no_auth, argv, &keys, &channels) {
                Ok(()) => return Ok(()),
                Err(d) if d.rank() > worst.rank() => worst = d,
                Err(_) => {}
            }
        }
        Err(worst)
    }

    /// Adds a refusal to the log (Redis's `addACLLogEntry`): an entry
    /// like one of the last ten is counted in it and moved to the front.
    pub fn log_denied(&mut self, entry: LogEntry) {
        let same = |e: &LogEntry| e.reason == entry.reason && e.context == entry.context && e.object == entry.object && e.username == entry.username;
        if let Some(at) = self.log.iter().take(10).position(same) {
            let mut old = self.log.remove(at).expect("found");
            old.count += 1;
            (old.client_info, old.ctime_ms) = (entry.client_info, entry.ctime_ms);
            self.log.push_front(old);
            return;
        }
        self.log.push_front(entry);
        self.log.truncate(LOG_MAX);
    }

    /// A log entry of refusal `denied` of `argv` by `user`.
    pub fn entry(denied: Denied, context: &'static str, command: &str, argv: &[&[u8]], user: &[u8], now_ms: u64, client_info: String) -> LogEntry {
        let object = match denied {
            Denied::Command => command.as_bytes().to_vec(),
            Denied::Key(p) | Denied::Channel(p) => argv[p].to_vec(),
        };
        LogEntry { count: 1, reason: denied.reason(), context, object, username: user.to_vec(), ctime_ms: now_ms, client_info }
    }
}

/// Redis's `ACLMergeSelectorArguments`: `(a`, `b)` become one `(a b)`.
fn merge_selectors<'a>(rules: &[&'a [u8]]) -> Result<Vec<std::borrow::Cow<'a, [u8]>>, String> {
    let mut out = Vec::new();
    let mut open: Option<(usize, Vec<u8>)> = None;
    for (j, &rule) in rules.iter().enumerate() {
        if let Some((_, acc)) = open.as_mut() {
            acc.push(b' ');
            acc.extend_from_slice(rule);
            if rule.ends_with(b")") {
                out.push(std::borrow::Cow::Owned(open.take().expect("open").1));
            }
        } else if rule.starts_with(b"(") && !rule.ends_with(b")") {
            open = Some((j, rule.to_vec()));
        } else {
            out.push(std::borrow::Cow::Borrowed(rule));
        }
    }
    match open {
        Some((j, _)) => Err(format!("ERR Unmatched parenthesis in acl selector starting at '{}'.", String::from_utf8_lossy(rules[j]))),
        None => Ok(out),
    }
}

/// The keys of `argv`, a call of command `name`, each with the access the
/// command needs ([`READ`], [`WRITE`]): Redis's `getKeysFromCommandWithSpecs`.
pub(crate) fn keys_of(name: &str, argv: &[&[u8]]) -> Vec<(usize, u8)> {
    match name {
        "set" => return set_keys(argv),
        "bitfield" => return bitfield_keys(argv),
        "sort" => return sort_keys(argv),
        "xread" | "xreadgroup" => return xread_keys(argv),
        _ => {}
    }
    let Some(id) = command_id(name) else { return Vec::new() };
    let mut keys = Vec::new();
    let argc = argv.len() as i64;
    for spec in COMMANDS[id].2 {
        if spec.flags & NOT_KEY != 0 {
            continue;
        }
        let first = match spec.begin {
            Begin::Index(pos) => i64::from(pos),
            Begin::Keyword(word, from) => {
                let from = i64::from(from);
                let (start, end) = if from > 0 { (from, argc - 1) } else { (argc + from, 1) };
                let mut found = 0;
                let mut i = start;
                while i >= 1 && i < argc {
                    if argv[i as usize].eq_ignore_ascii_case(word) {
                        found = i + 1;
                        break;
                    }
                    if i == end {
                        break;
                    }
                    i += if start <= end { 1 } else { -1 };
                }
                if found == 0 {
                    continue;
                }
                found
            }
            // Only SORT's and MIGRATE's specs are unknown; SORT is above.
            Begin::Unknown => return Vec::new(),
        };
        let (last, step) = match spec.find {
            Find::Range { last, step, limit } => {
                let (last, limit) = (i64::from(last), i64::from(limit));
                let end = if last >= 0 { first + last } else if limit == 0 { argc + last } else { first + ((argc - first) / limit + last) };
                (end, i64::from(step))
            }
            Find::Keynum { index, first: offset, step } => {
                let at = first + i64::from(index);
                let Some(n) = argv.get(at as usize).and_then(|a| pmwire_resp::numbers::parse_i64(a)).filter(|&n| n >= 0) else { return Vec::new() };
                let start = first + i64::from(offset);
                let Some(end) = start.checked_add(n).map(|e| e - 1) else { return Vec::new() };
                keys_in(&mut keys, start, end, i64::from(step), argc, spec.flags);
                continue;
            }
            Find::Unknown => return Vec::new(),
        };
        if !keys_in(&mut keys, first, last, step, argc, spec.flags) || spec.flags & INCOMPLETE != 0 {
            return Vec::new();
        }
    }
    keys
}

/// Adds the keys at `first..=last` by `step`; false if out of bounds
/// (Redis's invalid spec: the command's own syntax error follows).
fn keys_in(keys: &mut Vec<(usize, u8)>, first: i64, last: i64, step: i64, argc: i64, flags: u8) -> bool {
    if last >= argc || last < first || first >= argc || step <= 0 {
        return false;
    }
    let mut i = first;
    while i <= last {
        keys.push((i as usize, flags & (READ | WRITE)));
        i += step;
    }
    true
}

/// Redis's `setGetKeys`: SET reads its key only with GET.
fn set_keys(argv: &[&[u8]]) -> Vec<(usize, u8)> {
    if argv.len() < 2 {
        return Vec::new();
    }
    let get = argv.iter().skip(3).any(|a| a.eq_ignore_ascii_case(b"get"));
    vec![(1, if get { READ | WRITE } else { WRITE })]
}

/// Redis's `bitfieldGetKeys`: read-only with GET and OVERFLOW only.
fn bitfield_keys(argv: &[&[u8]]) -> Vec<(usize, u8)> {
    if argv.len() < 2 {
        return Vec::new();
    }
    let mut readonly = true;
    let mut i = 2;
    while i < argv.len() {
        let rest = argv.len() - i - 1;
        let a = argv[i];
        if a.eq_ignore_ascii_case(b"get") && rest >= 2 {
            i += 3;
        } else if a.eq_ignore_ascii_case(b"overflow") && rest >= 1 {
            i += 2;
        } else {
            readonly = false;
            break;
        }
    }
    vec![(1, if readonly { READ } else { READ | WRITE })]
}

/// Redis's `sortGetKeys`: the sorted key, and the last STORE's key.
fn sort_keys(argv: &[&[u8]]) -> Vec<(usize, u8)> {
    if argv.len() < 2 {
        return Vec::new();
    }
    let mut keys = vec![(1, READ)];
    let mut store = None;
    let mut i = 2;
    while i < argv.len() {
        let a = argv[i];
        if a.eq_ignore_ascii_case(b"limit") {
            i += 2;
        } else if a.eq_ignore_ascii_case(b"get") || a.eq_ignore_ascii_case(b"by") {
            i += 1;
        } else if a.eq_ignore_ascii_case(b"store") && i + 1 < argv.len() {
            store = Some(i + 1);
        }
        i += 1;
    }
    keys.extend(store.map(|s| (s, WRITE)));
    keys
}

/// Redis's `xreadGetKeys`: the streams after STREAMS, with no access
/// flags (any pattern that matches the name allows them).
fn xread_keys(argv: &[&[u8]]) -> Vec<(usize, u8)> {
    let mut streams = None;
    let mut i = 1;
    while i < argv.len() {
        let a = argv[i];
        if a.eq_ignore_ascii_case(b"block") || a.eq_ignore_ascii_case(b"count") {
            i += 1;
        } else if a.eq_ignore_ascii_case(b"group") {
            i += 2;
        } else if a.eq_ignore_ascii_case(b"streams") {
            streams = Some(i);
            break;
        } else if !a.eq_ignore_ascii_case(b"noack") {
            break;
        }
        i += 1;
    }
    let Some(at) = streams else { return Vec::new() };
    let n = argv.len() - at - 1;
    if n == 0 || n % 2 != 0 {
        return Vec::new();
    }
    (at + 1..at + 1 + n / 2).map(|p| (p, 0)).collect()
}

/// The channels of a pub/sub command that ACL checks (Redis's
/// `getChannelsFromCommand`, publish and subscribe only), each with
/// whether it is a pattern (PSUBSCRIBE's, matched literally).
fn channels_of(name: &str, argv: &[&[u8]]) -> Vec<(usize, bool)> {
    match name {
        "publish" | "spublish" if argv.len() > 1 => vec![(1, false)],
        "subscribe" | "ssubscribe" => (1..argv.len()).map(|p| (p, false)).collect(),
        "psubscribe" => (1..argv.len()).map(|p| (p, true)).collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(rules: &[&str]) -> Users {
        let mut users = Users::new(None);
        let rules: Vec<&[u8]> = rules.iter().map(|r| r.as_bytes()).collect();
        users.set_user(b"u", &rules).expect("valid rules");
        users
    }

    fn args(line: &str) -> Vec<&[u8]> {
        line.split(' ').map(str::as_bytes).collect()
    }

    #[test]
    fn the_table_is_sorted_and_every_served_command_has_categories() {
        assert!(COMMANDS.windows(2).all(|w| w[0].0 < w[1].0));
        for row in super::super::commands::table() {
            assert!(command_id(row.name).is_some(), "{} is not in Redis's table", row.name);
            assert!(categories_of(row.name) != 0, "{} has no category", row.name);
        }
    }

    /// Needs a git copy of Redis's source, which a clean clone lacks: run
    /// with `--ignored` (or `PMWIRE_REDIS_GIT=DIR`) after editing the
    /// generator. Every run checks the categories against a live
    /// redis-server instead (`command_flags_match_redis`).
    #[test]
    #[ignore = "needs Redis's git repository (PMWIRE_REDIS_GIT, default /work/.mirror/redis+redis/repo)"]
    fn acl_table_matches_redis_json() {
        // The checked-in table is what the generator makes from Redis's JSON.
        let repo = std::env::var("PMWIRE_REDIS_GIT").unwrap_or_else(|_| "/work/.mirror/redis+redis/repo".into());
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/gen-acl-table");
        assert!(std::path::Path::new(&repo).exists(), "no Redis git repository at {repo}: set PMWIRE_REDIS_GIT");
        let out = std::process::Command::new(script).arg(&repo).output().expect("run the generator");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let checked_in = include_str!("acl_table.rs");
        assert!(String::from_utf8_lossy(&out.stdout) == checked_in, "acl_table.rs differs from scripts/gen-acl-table's output");
    }

    #[test]
    fn categories_follow_redis() {
        let names: Vec<&str> = category_names("get").collect();
        assert_eq!(names, ["read", "string", "fast"]);
        let names: Vec<&str> = category_names("config|set").collect();
        assert_eq!(names, ["admin", "slow", "dangerous"]);
    }

    #[test]
    fn command_key_and_channel_rules() {
        let users = user(&["on", ">p", "+@scripting", "+set", "~x*"]);
        assert_eq!(users.check(b"u", "set", false, &args("set xx 1")), Ok(()));
        assert_eq!(users.check(b"u", "set", false, &args("set yy 1")), Err(Denied::Key(1)));
        assert_eq!(users.check(b"u", "hset", false, &args("hset xx f 1")), Err(Denied::Command));
        assert_eq!(users.check(b"u", "auth", true, &args("auth a b")), Ok(()));
        let users = user(&["on", "nopass", "+@all", "%R~r*", "%W~w*", "&news.*"]);
        assert_eq!(users.check(b"u", "get", false, &args("get r1")), Ok(()));
        assert_eq!(users.check(b"u", "get", false, &args("get w1")), Err(Denied::Key(1)));
        assert_eq!(users.check(b"u", "set", false, &args("set w1 v")), Ok(()));
        assert_eq!(users.check(b"u", "set", false, &args("set w1 v get")), Err(Denied::Key(1)));
        assert_eq!(users.check(b"u", "sort", false, &args("sort r1 store w1")), Ok(()));
        assert_eq!(users.check(b"u", "sort", false, &args("sort r1 store r2")), Err(Denied::Key(3)));
        assert_eq!(users.check(b"u", "publish", false, &args("publish news.a m")), Ok(()));
        assert_eq!(users.check(b"u", "publish", false, &args("publish other m")), Err(Denied::Channel(1)));
        assert_eq!(users.check(b"u", "psubscribe", false, &args("psubscribe news.*")), Ok(()));
        assert_eq!(users.check(b"u", "psubscribe", false, &args("psubscribe news.a")), Err(Denied::Channel(1)));
        // EVAL's keys by numkeys; a bad numkeys finds none (EVAL refuses it).
        assert_eq!(users.check(b"u", "eval", false, &args("eval s 2 r1 w1")), Err(Denied::Key(3)));
        assert_eq!(users.check(b"u", "eval", false, &args("eval s 9 r1")), Ok(()));
    }

    #[test]
    fn subcommands_and_first_args() {
        let users = user(&["on", "nopass", "allkeys", "-@all", "+config|get", "+select|0", "+client"]);
        assert_eq!(users.check(b"u", "config|get", false, &args("config get x")), Ok(()));
        assert_eq!(users.check(b"u", "config|set", false, &args("config set x y")), Err(Denied::Command));
        assert_eq!(users.check(b"u", "select", false, &args("select 0")), Ok(()));
        assert_eq!(users.check(b"u", "select", false, &args("select 1")), Err(Denied::Command));
        assert_eq!(users.check(b"u", "client|id", false, &args("client id")), Ok(()));
        let mut users = Users::new(None);
        let err = users.set_user(b"u", &[b"+config|get|x"]).unwrap_err();
        assert_eq!(err, "ERR Error in ACL SETUSER modifier '+config|get|x': Allowing first-arg of a subcommand is not supported");
        let err = users.set_user(b"u", &[b"on", b"+nosuch"]).unwrap_err();
        assert_eq!(err, "ERR Error in ACL SETUSER modifier '+nosuch': Unknown command or category name in ACL");
        assert!(!users.exists(b"u"), "a refused SETUSER changes nothing");
        assert_eq!(users.set_user(b"u", &[b"~*", b"~x"]).unwrap_err(), format!("ERR Error in ACL SETUSER modifier '~x': {}", RuleError::AfterAllKeys.text()));
    }

    #[test]
    fn descriptions_as_redis_gives_them() {
        let users = Users::new(None);
        assert_eq!(users.describe(b"default").unwrap(), "user default on nopass ~* &* +@all");
        let users = user(&["on", ">123", "+@scripting", "+set", "~x*"]);
        let hash = hash_password(b"123");
        assert_eq!(users.describe(b"u").unwrap(), format!("user u on #{hash} ~x* resetchannels -@all +@scripting +set"));
        let users = user(&["+@all", "-@dangerous", "-get", "%R~a", "(+get ~b)"]);
        assert_eq!(users.describe(b"u").unwrap(), "user u off %R~a resetchannels +@all -@dangerous -get (~b resetchannels -@all +get)");
        let mut users = user(&["on", "nopass", "+@all", "~*"]);
        users.set_user(b"u", &[b"reset"]).unwrap();
        assert_eq!(users.describe(b"u").unwrap(), "user u off sanitize-payload resetchannels -@all");
    }

    #[test]
    fn passwords_are_hashed_and_checked() {
        let mut users = user(&["on", ">secret", "#5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8"]);
        assert!(users.credentials_ok(b"u", b"secret"));
        assert!(users.credentials_ok(b"u", b"password"));
        assert!(!users.credentials_ok(b"u", b"other"));
        assert!(!users.describe(b"u").unwrap().contains("secret"));
        users.set_user(b"u", &[b"<secret"]).unwrap();
        assert!(!users.credentials_ok(b"u", b"secret"));
        assert!(users.set_user(b"u", &[b"<secret"]).unwrap_err().ends_with("The password you are trying to remove from the user does not exist"));
        assert!(users.set_user(b"u", &[b"#abc"]).is_err());
        users.set_user(b"u", &[b"off"]).unwrap();
        assert!(!users.credentials_ok(b"u", b"password"), "a disabled user cannot log in");
        users.set_default_password(Some(b"pw"));
        assert!(!users.default_open());
        assert!(users.credentials_ok(b"default", b"pw"));
    }

    #[test]
    fn unmatched_selector_parenthesis() {
        let mut users = Users::new(None);
        assert_eq!(users.set_user(b"u", &[b"(+get", b"~x"]).unwrap_err(), "ERR Unmatched parenthesis in acl selector starting at '(+get'.");
    }
}
