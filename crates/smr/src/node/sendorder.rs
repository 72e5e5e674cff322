//! The order a batch of Raft messages goes out in, and the acknowledgements
//! a later one in the same batch supersedes.
//!
//! Why: a connection's window holds a bounded number of sends
//! (`transport::Limits::window`, 32 for io_uring TCP) until the loop reaps
//! their completions, which it does between turns. A follower that steps
//! a turn's worth of appends (up to 256 messages) answers each one, and
//! the answers past the window were refused (`unsent`): the newest
//! acknowledgements and the heartbeat responses behind them were lost,
//! the leader learnt the follower's progress late and its ReadIndex
//! confirmations never came, so under load linearizable reads waited past
//! their bound and were answered `-CLUSTERDOWN ... no majority confirmed
//! the request in time` (YCSB A's error replies). A leader's heartbeats
//! queued behind its appends the same way.
//!
//! The rules, within one batch (messages whose persistence status is the
//! same: the Ready's early messages, or those after the append):
//! - an append acknowledgement (`MsgAppendResponse`, not a rejection) is
//!   dropped when a later one in the batch, to the same peer in the same
//!   term, acknowledges an index at least as high: acknowledgements are
//!   cumulative, and Raft takes a lost message in its stride;
//! - heartbeats, heartbeat responses, votes and `MsgTimeoutNow` go first,
//!   then the rest in their order (appends to one peer keep theirs). A
//!   heartbeat's commit index is what the follower acknowledged, so it
//!   never runs ahead of the follower's log whatever it overtakes.
//!
//! Nothing is added or changed: only dropped (a superseded acknowledgement)
//! or moved ahead (a control message).

use raft::eraftpb::{Message, MessageType};

/// Whether `m` is a small control message that goes first.
fn urgent(m: &Message) -> bool {
    use MessageType::*;
    matches!(
        m.get_msg_type(),
        MsgHeartbeat | MsgHeartbeatResponse | MsgRequestVote | MsgRequestVoteResponse | MsgRequestPreVote | MsgRequestPreVoteResponse | MsgTimeoutNow
    )
}

fn is_ack(m: &Message) -> bool {
    m.get_msg_type() == MessageType::MsgAppendResponse && !m.reject
}

/// The batch in sending order, superseded acknowledgements dropped
/// (module docs); the number dropped.
pub(super) fn order(msgs: Vec<Message>) -> (Vec<Message>, usize) {
    if msgs.len() < 2 {
        return (msgs, 0);
    }
    // The last acknowledgement to each (peer, term): its position and index.
    let mut last: Vec<(u64, u64, usize, u64)> = Vec::new();
    for (i, m) in msgs.iter().enumerate().filter(|(_, m)| is_ack(m)) {
        match last.iter_mut().find(|l| (l.0, l.1) == (m.to, m.term)) {
            Some(l) => (l.2, l.3) = (i, m.index),
            None => last.push((m.to, m.term, i, m.index)),
        }
    }
    let superseded = |i: usize, m: &Message| is_ack(m) && last.iter().any(|l| (l.0, l.1) == (m.to, m.term) && l.2 > i && l.3 >= m.index);
    let mut first = Vec::new();
    let mut rest = Vec::with_capacity(msgs.len());
    let mut dropped = 0;
    for (i, m) in msgs.into_iter().enumerate() {
        if superseded(i, &m) {
            dropped += 1;
        } else if urgent(&m) {
            first.push(m);
        } else {
            rest.push(m);
        }
    }
    first.append(&mut rest);
    (first, dropped)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(t: MessageType, to: u64, term: u64, index: u64, reject: bool) -> Message {
        let mut m = Message::default();
        m.set_msg_type(t);
        (m.to, m.term, m.index, m.reject) = (to, term, index, reject);
        m
    }

    fn kinds(msgs: &[Message]) -> Vec<(MessageType, u64, u64)> {
        msgs.iter().map(|m| (m.get_msg_type(), m.to, m.index)).collect()
    }

    #[test]
    fn only_the_newest_acknowledgement_per_peer_and_term_goes() {
        use MessageType::*;
        let batch = vec![
            msg(MsgAppendResponse, 1, 5, 10, false),
            msg(MsgAppendResponse, 1, 5, 12, false),
            msg(MsgAppendResponse, 2, 5, 11, false),
            msg(MsgAppendResponse, 1, 5, 11, true), // a rejection always goes
            msg(MsgAppendResponse, 1, 6, 9, false), // another term: its own
            msg(MsgAppendResponse, 1, 5, 14, false),
        ];
        let (out, dropped) = order(batch);
        assert_eq!(dropped, 2);
        assert_eq!(kinds(&out), vec![(MsgAppendResponse, 2, 11), (MsgAppendResponse, 1, 11), (MsgAppendResponse, 1, 9), (MsgAppendResponse, 1, 14)]);
    }

    #[test]
    fn an_acknowledgement_is_kept_when_a_later_one_is_lower() {
        use MessageType::*;
        let (out, dropped) = order(vec![msg(MsgAppendResponse, 1, 5, 12, false), msg(MsgAppendResponse, 1, 5, 10, false)]);
        assert_eq!(dropped, 0, "a lower later index does not supersede");
        assert_eq!(out.len(), 2);
    }

    #[test]
    fn control_messages_go_first_and_appends_keep_their_order() {
        use MessageType::*;
        let batch = vec![msg(MsgAppend, 2, 5, 1, false), msg(MsgAppend, 2, 5, 2, false), msg(MsgHeartbeat, 2, 5, 0, false), msg(MsgAppend, 3, 5, 1, false), msg(MsgHeartbeatResponse, 1, 5, 0, false)];
        let (out, dropped) = order(batch);
        assert_eq!(dropped, 0);
        assert_eq!(kinds(&out), vec![(MsgHeartbeat, 2, 0), (MsgHeartbeatResponse, 1, 0), (MsgAppend, 2, 1), (MsgAppend, 2, 2), (MsgAppend, 3, 1)]);
    }
}
