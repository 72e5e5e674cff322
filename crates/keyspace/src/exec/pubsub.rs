//! Pub/sub: `SUBSCRIBE PSUBSCRIBE SSUBSCRIBE UNSUBSCRIBE PUNSUBSCRIBE
//! SUNSUBSCRIBE PUBLISH SPUBLISH PUBSUB`, as Redis 7.0's `pubsub.c` serves
//! them. Nothing of it is durable or in the keyspace: subscriptions live
//! with the connection and end with it, and a message reaches the clients
//! subscribed when it is published, or no one (as in Redis).
//!
//! Who is subscribed to what is the server's ([`PubSub`], by client id),
//! not the session's: a command run again (a batch that filled, an EXEC
//! replayed) finds the subscriptions it made and changes nothing twice.
//!
//! Delivery: the executor writes only to the connection whose command it
//! runs. PUBLISH queues each message, encoded in its subscriber's protocol
//! (an array in RESP2, a push in RESP3), in an outbox by client id
//! ([`super::Server::take_pushes`]); the embedding server takes them after
//! each command and writes them to the subscribers' connections. A command
//! undone and run again first takes its messages back
//! ([`super::Server::pushes_mark`], [`super::Server::truncate_pushes`]).
//!
//! A RESP2 connection with a subscription is in Redis's pub/sub context:
//! only the subscribe commands, PING (answered `[pong, arg]`), QUIT and
//! RESET run ([`refusal_in_context`]).
//!
//! Invariants: a client is in `channels[ch]` exactly when `ch` is in its
//! [`Subscriber::channels`] (the same for patterns and shard channels), at
//! most once; an entry of `channels`, `patterns` or `shard` has at least
//! one client; `clients` holds exactly the clients with a subscription.

use std::collections::{BTreeMap, HashMap, HashSet};

use pmwire_resp::client::encode_request;
use pmwire_resp::reply::{Protocol, ReplySink};

use super::{Ctx, Fail, Res};
use crate::glob;
use crate::store::Keyspace;

/// One client's subscriptions, each kind in the order made.
#[derive(Debug)]
struct Subscriber {
    protocol: Protocol,
    channels: Ordered,
    patterns: Ordered,
    shard: Ordered,
}

/// Names in insertion order, with O(1) membership.
#[derive(Debug, Default)]
struct Ordered {
    order: Vec<Vec<u8>>,
    set: HashSet<Vec<u8>>,
}

impl Ordered {
    fn insert(&mut self, name: &[u8]) -> bool {
        if self.set.contains(name) {
            return false;
        }
        self.set.insert(name.to_vec());
        self.order.push(name.to_vec());
        true
    }

    fn remove(&mut self, name: &[u8]) -> bool {
        if !self.set.remove(name) {
            return false;
        }
        let at = self.order.iter().position(|n| n == name).expect("a member is in the order");
        self.order.remove(at);
        true
    }

    fn len(&self) -> usize {
        self.order.len()
    }
}

/// The three kinds of subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Channel,
    Pattern,
    Shard,
}

impl Kind {
    fn subscribe_word(self) -> &'static [u8] {
        match self {
            Kind::Channel => b"subscribe",
            Kind::Pattern => b"psubscribe",
            Kind::Shard => b"ssubscribe",
        }
    }

    fn unsubscribe_word(self) -> &'static [u8] {
        match self {
            Kind::Channel => b"unsubscribe",
            Kind::Pattern => b"punsubscribe",
            Kind::Shard => b"sunsubscribe",
        }
    }
}

/// Every subscription of the server, and the messages waiting to be sent.
#[derive(Debug, Default)]
pub(crate) struct PubSub {
    /// Channel: its subscribers in the order they subscribed.
    channels: BTreeMap<Vec<u8>, Vec<u64>>,
    patterns: BTreeMap<Vec<u8>, Vec<u64>>,
    shard: BTreeMap<Vec<u8>, Vec<u64>>,
    clients: HashMap<u64, Subscriber>,
    /// Messages for other connections: the client and the encoded push.
    outbox: Vec<(u64, Vec<u8>)>,
    /// Set on a replicated machine's executor ([`super::Server::record_publishes`]):
    /// PUBLISH delivers nothing here and answers 0; its messages are kept,
    /// and every member delivers them to its own subscribers.
    pub(super) recorded: Option<Vec<Published>>,
}

/// A message PUBLISH or SPUBLISH sent, as a replicated machine records it
/// for each member to deliver ([`super::Server::take_published`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// The channel it was published on.
    pub channel: Vec<u8>,
    /// The message.
    pub message: Vec<u8>,
    /// SPUBLISH: shard channels' subscribers only, no patterns.
    pub shard: bool,
}

impl PubSub {
    /// Whether `client` has a subscription of any kind (Redis's `CLIENT_PUBSUB`).
    pub fn subscribed(&self, client: u64) -> bool {
        !self.clients.is_empty() && self.clients.contains_key(&client)
    }

    /// `client`'s channels, patterns and shard channels (CLIENT LIST's
    /// `sub`, `psub`, `ssub`).
    pub fn client_counts(&self, client: u64) -> (usize, usize, usize) {
        self.clients.get(&client).map_or((0, 0, 0), |s| (s.channels.len(), s.patterns.len(), s.shard.len()))
    }

    /// `client`'s channels and patterns (what SUBSCRIBE and PSUBSCRIBE count),
    /// and its shard channels.
    fn counts(&self, client: u64) -> (usize, usize) {
        self.clients.get(&client).map_or((0, 0), |s| (s.channels.len() + s.patterns.len(), s.shard.len()))
    }

    fn count_for(&self, client: u64, kind: Kind) -> usize {
        let (normal, shard) = self.counts(client);
        if kind == Kind::Shard { shard } else { normal }
    }

    fn table(&mut self, kind: Kind) -> &mut BTreeMap<Vec<u8>, Vec<u64>> {
        match kind {
            Kind::Channel => &mut self.channels,
            Kind::Pattern => &mut self.patterns,
            Kind::Shard => &mut self.shard,
        }
    }

    fn subscribe(&mut self, client: u64, protocol: Protocol, kind: Kind, name: &[u8]) {
        let sub = self.clients.entry(client).or_insert_with(|| Subscriber { protocol, channels: Ordered::default(), patterns: Ordered::default(), shard: Ordered::default() });
        sub.protocol = protocol;
        let added = match kind {
            Kind::Channel => sub.channels.insert(name),
            Kind::Pattern => sub.patterns.insert(name),
            Kind::Shard => sub.shard.insert(name),
        };
        if added {
            self.table(kind).entry(name.to_vec()).or_default().push(client);
        }
    }

    /// Takes `client` off `name`; whether it was on.
    fn unsubscribe(&mut self, client: u64, kind: Kind, name: &[u8]) -> bool {
        let Some(sub) = self.clients.get_mut(&client) else { return false };
        let removed = match kind {
            Kind::Channel => sub.channels.remove(name),
            Kind::Pattern => sub.patterns.remove(name),
            Kind::Shard => sub.shard.remove(name),
        };
        if !removed {
            return false;
        }
        if sub.channels.len() + sub.patterns.len() + sub.shard.len() == 0 {
            self.clients.remove(&client);
        }
        let table = self.table(kind);
        let list = table.get_mut(name).expect("a subscribed name is in the server's table");
        let at = list.iter().position(|&c| c == client).expect("a subscriber is in its name's list");
        list.remove(at);
        if list.is_empty() {
            table.remove(name);
        }
        true
    }

    /// `client`'s names of `kind`, in the order it subscribed.
    fn names(&self, client: u64, kind: Kind) -> Vec<Vec<u8>> {
        self.clients.get(&client).map_or_else(Vec::new, |s| match kind {
            Kind::Channel => s.channels.order.clone(),
            Kind::Pattern => s.patterns.order.clone(),
            Kind::Shard => s.shard.order.clone(),
        })
    }

    /// A connection closed: its subscriptions end.
    pub fn forget(&mut self, client: u64) {
        for kind in [Kind::Channel, Kind::Pattern, Kind::Shard] {
            for name in self.names(client, kind) {
                self.unsubscribe(client, kind, &name);
            }
        }
        debug_assert!(!self.clients.contains_key(&client));
    }

    /// A subscribed client switched protocol (HELLO): its messages follow.
    pub fn set_protocol(&mut self, client: u64, protocol: Protocol) {
        if let Some(s) = self.clients.get_mut(&client) {
            s.protocol = protocol;
        }
    }

    /// Queues `message` on `channel` for its subscribers (and, unless
    /// `shard`, for the clients of every matching pattern); how many.
    fn publish(&mut self, channel: &[u8], message: &[u8], shard: bool) -> usize {
        if let Some(recorded) = &mut self.recorded {
            recorded.push(Published { channel: channel.to_vec(), message: message.to_vec(), shard });
            return 0;
        }
        self.deliver(channel, message, shard)
    }

    /// Queues `message` for this server's subscribers of `channel` (and,
    /// unless `shard`, of every matching pattern); how many.
    pub(super) fn deliver(&mut self, channel: &[u8], message: &[u8], shard: bool) -> usize {
        let mut receivers = 0;
        let table = if shard { &self.shard } else { &self.channels };
        let word: &[u8] = if shard { b"smessage" } else { b"message" };
        if let Some(list) = table.get(channel) {
            for &client in list {
                let protocol = self.clients[&client].protocol;
                self.outbox.push((client, encode(protocol, &[word, channel, message])));
                receivers += 1;
            }
        }
        if !shard {
            for (pattern, list) in &self.patterns {
                if !glob::matches(pattern, channel) {
                    continue;
                }
                for &client in list {
                    let protocol = self.clients[&client].protocol;
                    self.outbox.push((client, encode(protocol, &[b"pmessage", pattern, channel, message])));
                    receivers += 1;
                }
            }
        }
        receivers
    }

    /// Queues `message` on `channel` (not a shard channel) for its
    /// subscribers and the matching patterns' (keyspace notifications).
    pub(crate) fn publish_message(&mut self, channel: &[u8], message: &[u8]) {
        if self.recorded.is_some() || !self.clients.is_empty() {
            self.publish(channel, message, false);
        }
    }

    /// Queues `bytes` for `client` (a MONITOR line).
    pub(crate) fn send(&mut self, client: u64, bytes: Vec<u8>) {
        self.outbox.push((client, bytes));
    }

    /// How many of this server's clients a message on `channel` reaches
    /// (its subscribers, and unless `shard` the clients of every matching
    /// pattern, once per subscription, as [`PubSub::publish`] counts).
    pub fn receivers(&self, channel: &[u8], shard: bool) -> usize {
        let table = if shard { &self.shard } else { &self.channels };
        let direct = table.get(channel).map_or(0, Vec::len);
        let patterns = if shard { 0 } else { self.patterns.iter().filter(|(p, _)| glob::matches(p, channel)).map(|(_, l)| l.len()).sum() };
        direct + patterns
    }

    pub fn take_outbox(&mut self) -> Vec<(u64, Vec<u8>)> {
        std::mem::take(&mut self.outbox)
    }

    pub fn outbox_len(&self) -> usize {
        self.outbox.len()
    }

    pub fn truncate_outbox(&mut self, len: usize) {
        self.outbox.truncate(len);
    }

    /// Channels with a subscriber (INFO's `pubsub_channels`), patterns
    /// (`pubsub_patterns`), shard channels (`pubsubshard_channels`).
    pub fn sizes(&self) -> (usize, usize, usize) {
        (self.channels.len(), self.patterns.len(), self.shard.len())
    }
}

/// An array (RESP2) or push (RESP3) of bulk strings: a request's encoding
/// with the push's type byte in RESP3.
fn encode(protocol: Protocol, parts: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + parts.iter().map(|p| p.len() + 16).sum::<usize>());
    encode_request(parts, &mut out);
    if protocol == Protocol::Resp3 {
        out[0] = b'>';
    }
    out
}

/// The commands a RESP2 connection in the pub/sub context may run.
const ALLOWED_IN_CONTEXT: &[&str] = &["ping", "psubscribe", "punsubscribe", "quit", "reset", "ssubscribe", "subscribe", "sunsubscribe", "unsubscribe"];

/// Redis's refusal of command `name` (its row's name) on a RESP2
/// connection that holds a subscription, if it is refused.
pub(crate) fn refusal_in_context(pubsub: &PubSub, client: u64, protocol: Protocol, name: &str) -> Option<Fail> {
    if protocol != Protocol::Resp2 || !pubsub.subscribed(client) || ALLOWED_IN_CONTEXT.contains(&name) {
        return None;
    }
    Some(Fail::err(&format!("Can't execute '{name}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context")))
}

type C<'a, 'b, 'r, K, S> = &'a mut Ctx<'b, 'r, K, S>;

/// `[word, name or null, count]`, an array in RESP2 and a push in RESP3.
fn confirm<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>, word: &[u8], name: Option<&[u8]>, count: usize) {
    c.out.push(3);
    c.out.bulk(word);
    match name {
        Some(n) => c.out.bulk(n),
        None => c.out.null(),
    }
    c.out.integer(count as i64);
}

/// SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE: one confirmation per name.
pub(super) fn subscribe<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>, kind: Kind) -> Res {
    // Redis refuses a client that expects one reply per command (a script
    // is refused earlier, by `noscript`); EXEC lets SUBSCRIBE and PSUBSCRIBE
    // through for backward compatibility, not SSUBSCRIBE.
    if kind == Kind::Shard && c.server.deny_blocking {
        return Err(Fail::err("SSUBSCRIBE isn't allowed for a DENY BLOCKING client"));
    }
    let (client, protocol) = (c.session.id, c.session.protocol);
    for j in 1..c.argc() {
        let name = c.arg(j);
        c.server.pubsub.subscribe(client, protocol, kind, name);
        let count = c.server.pubsub.count_for(client, kind);
        confirm(c, kind.subscribe_word(), Some(name), count);
    }
    Ok(())
}

/// UNSUBSCRIBE, PUNSUBSCRIBE, SUNSUBSCRIBE: the names given, or every one
/// of that kind (one confirmation with a null name if there was none).
pub(super) fn unsubscribe<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>, kind: Kind) -> Res {
    let client = c.session.id;
    let names: Vec<Vec<u8>> = if c.argc() == 1 { c.server.pubsub.names(client, kind) } else { (1..c.argc()).map(|j| c.arg(j).to_vec()).collect() };
    if names.is_empty() {
        let count = c.server.pubsub.count_for(client, kind);
        confirm(c, kind.unsubscribe_word(), None, count);
    }
    for name in names {
        c.server.pubsub.unsubscribe(client, kind, &name);
        let count = c.server.pubsub.count_for(client, kind);
        confirm(c, kind.unsubscribe_word(), Some(&name), count);
    }
    Ok(())
}

/// PUBLISH / SPUBLISH channel message: how many clients it was queued for.
pub(super) fn publish<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>, shard: bool) -> Res {
    let n = c.server.pubsub.publish(c.arg(1), c.arg(2), shard);
    c.out.integer(n as i64);
    Ok(())
}

/// PUBSUB CHANNELS / SHARDCHANNELS [pattern]: the names with a subscriber.
pub(super) fn channels<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>, shard: bool) -> Res {
    if c.argc() > 3 {
        return Err(subcommand_syntax(c.arg(1)));
    }
    let pattern = (c.argc() == 3).then(|| c.arg(2));
    let table = if shard { &c.server.pubsub.shard } else { &c.server.pubsub.channels };
    let names: Vec<Vec<u8>> = table.keys().filter(|n| pattern.is_none_or(|p| glob::matches(p, n))).cloned().collect();
    c.out.array(names.len());
    names.iter().for_each(|n| c.out.bulk(n));
    Ok(())
}

/// PUBSUB NUMSUB / SHARDNUMSUB [channel...]: each channel and its
/// subscribers (patterns not counted).
pub(super) fn numsub<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>, shard: bool) -> Res {
    c.out.array(2 * (c.argc() - 2));
    for j in 2..c.argc() {
        let table = if shard { &c.server.pubsub.shard } else { &c.server.pubsub.channels };
        let n = table.get(c.arg(j)).map_or(0, Vec::len);
        c.out.bulk(c.arg(j));
        c.out.integer(n as i64);
    }
    Ok(())
}

/// PUBSUB NUMPAT: patterns with a subscriber.
pub(super) fn numpat<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    c.out.integer(c.server.pubsub.patterns.len() as i64);
    Ok(())
}

/// Redis's `addReplySubcommandSyntaxError`.
fn subcommand_syntax(sub: &[u8]) -> Fail {
    Fail::err(&format!("unknown subcommand or wrong number of arguments for '{}'. Try PUBSUB HELP.", String::from_utf8_lossy(sub)))
}

/// RESET's part: every subscription of the session ends, silently.
pub(super) fn reset(server: &mut super::Server, client: u64) {
    server.pubsub.forget(client);
}
