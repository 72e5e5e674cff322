use super::*;

fn parse_all(segs: &[&[u8]]) -> (ParseSummary, Vec<Vec<Vec<u8>>>) {
    let mut p = Parsed::new(Limits::default());
    let s = p.parse(segs);
    let cmds = (0..p.len())
        .map(|i| {
            let r = p.request(segs, i);
            // Locations must agree with bytes.
            for j in 0..r.len() {
                let a = r.arg_ref(j);
                if !a.pieces.is_empty() {
                    let mut g = Vec::new();
                    for pc in a.pieces {
                        assert!(pc.len > 0);
                        g.extend_from_slice(&segs[pc.segment as usize][pc.start as usize..(pc.start + pc.len) as usize]);
                    }
                    assert_eq!(g, a.bytes());
                }
            }
            r.args().map(|a| a.to_vec()).collect()
        })
        .collect();
    (s, cmds)
}

fn v(args: &[&str]) -> Vec<Vec<u8>> {
    args.iter().map(|a| a.as_bytes().to_vec()).collect()
}

const PIPELINE: &[u8] = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\nPING\r\n*0\r\n\r\n*2\r\n$4\r\nECHO\r\n$0\r\n\r\nset \"a b\" c\n*1\r\n$4\r\nPING\r\n";

fn expected() -> Vec<Vec<Vec<u8>>> {
    vec![v(&["SET", "k", "hello"]), v(&["PING"]), v(&["ECHO", ""]), v(&["set", "a b", "c"]), v(&["PING"])]
}

#[test]
fn whole_pipeline() {
    let (s, cmds) = parse_all(&[PIPELINE]);
    assert_eq!(s.consumed, PIPELINE.len());
    assert_eq!(s.error, None);
    assert_eq!(cmds, expected());
}

#[test]
fn every_prefix_consumes_whole_requests_only() {
    let ends: Vec<usize> = {
        // Request boundaries.
        let mut e = vec![0];
        let mut p = Parsed::new(Limits::default());
        for n in 0..=PIPELINE.len() {
            let s = p.parse(&[&PIPELINE[..n]]);
            if !e.contains(&s.consumed) {
                e.push(s.consumed);
            }
        }
        e
    };
    let mut p = Parsed::new(Limits::default());
    for n in 0..=PIPELINE.len() {
        let s = p.parse(&[&PIPELINE[..n]]);
        assert!(s.consumed <= n);
        assert!(ends.contains(&s.consumed));
        // Nothing beyond the consumed point could have completed a request.
        assert_eq!(s.error, None);
    }
    assert_eq!(ends.last().copied(), Some(PIPELINE.len()));
}

#[test]
fn every_split_position_and_pair() {
    let want = expected();
    for i in 0..=PIPELINE.len() {
        let (s, cmds) = parse_all(&[&PIPELINE[..i], &PIPELINE[i..]]);
        assert_eq!(s.consumed, PIPELINE.len(), "split at {i}");
        assert_eq!(cmds, want, "split at {i}");
    }
    for i in 0..=PIPELINE.len() {
        for j in i..=PIPELINE.len() {
            let (s, cmds) = parse_all(&[&PIPELINE[..i], &PIPELINE[i..j], &PIPELINE[j..]]);
            assert_eq!(s.consumed, PIPELINE.len(), "split at {i},{j}");
            assert_eq!(cmds, want, "split at {i},{j}");
        }
    }
}

#[test]
fn one_byte_segments() {
    let segs: Vec<&[u8]> = PIPELINE.chunks(1).collect();
    let (s, cmds) = parse_all(&segs);
    assert_eq!(s.consumed, PIPELINE.len());
    assert_eq!(cmds, expected());
}

#[test]
fn contiguous_args_are_borrowed_and_located() {
    let buf = b"*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n";
    let segs: [&[u8]; 1] = [buf];
    let mut p = Parsed::new(Limits::default());
    p.parse(&segs);
    let r = p.request(&segs, 0);
    let a = r.arg_ref(1);
    assert_eq!(a.bytes().as_ptr(), buf[17..].as_ptr());
    assert_eq!(a.pieces, &[Piece { segment: 0, start: 17, len: 3 }]);
}

#[test]
fn split_value_has_two_pieces() {
    let buf = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$6\r\nabcdef\r\n";
    let (a, b) = buf.split_at(28);
    let segs: [&[u8]; 2] = [a, b];
    let mut p = Parsed::new(Limits::default());
    let s = p.parse(&segs);
    assert_eq!(s.commands, 1);
    let r = p.request(&segs, 0);
    let v = r.arg_ref(2);
    assert_eq!(v.bytes(), b"abcdef");
    assert_eq!(v.pieces, &[Piece { segment: 0, start: 24, len: 4 }, Piece { segment: 1, start: 0, len: 2 }]);
}

#[test]
fn incomplete_bulk_reports_wanted() {
    let buf = b"*2\r\n$4\r\nECHO\r\n$10\r\nabc";
    let mut p = Parsed::new(Limits::default());
    let s = p.parse(&[buf]);
    assert_eq!(s.consumed, 0);
    assert_eq!(s.commands, 0);
    assert_eq!(s.wanted, Some(buf.len() - 3 + 10 + 2));
}

fn err_of(input: &[u8]) -> (usize, Option<ProtocolError>) {
    let mut p = Parsed::new(Limits { max_args: 100, max_bulk_bytes: 1000, max_commands: 1024 });
    let s = p.parse(&[input]);
    (s.commands, s.error)
}

#[test]
fn protocol_errors() {
    use ProtocolError::*;
    assert_eq!(err_of(b"*x\r\n"), (0, Some(InvalidMultibulkLength)));
    assert_eq!(err_of(b"*\r\n"), (0, Some(InvalidMultibulkLength)));
    assert_eq!(err_of(b"*101\r\n"), (0, Some(InvalidMultibulkLength)));
    assert_eq!(err_of(b"*3000000000\r\n"), (0, Some(InvalidMultibulkLength)));
    assert_eq!(err_of(b"*1\r\nx\r\n"), (0, Some(ExpectedDollar(b'x'))));
    assert_eq!(err_of(b"*1\r\n$x\r\n"), (0, Some(InvalidBulkLength)));
    assert_eq!(err_of(b"*1\r\n$-1\r\n"), (0, Some(InvalidBulkLength)));
    assert_eq!(err_of(b"*1\r\n$1001\r\n"), (0, Some(InvalidBulkLength)));
    assert_eq!(err_of(b"PING\r\n*1\r\n$1001\r\n"), (1, Some(InvalidBulkLength)));
    assert_eq!(err_of(b"echo \"a\r\n"), (0, Some(UnbalancedQuotes)));
    assert_eq!(err_of(&[b'a'; 70_000]), (0, Some(TooBigInline)));
    let mut big = b"*".to_vec();
    big.extend(std::iter::repeat_n(b'1', 70_000));
    assert_eq!(err_of(&big), (0, Some(TooBigMultibulkCount)));
    let mut big = b"*1\r\n$".to_vec();
    big.extend(std::iter::repeat_n(b'1', 70_000));
    assert_eq!(err_of(&big), (0, Some(TooBigBulkCount)));
    // Negative and zero counts are empty requests.
    assert_eq!(err_of(b"*-1\r\n*0\r\nPING\r\n"), (1, None));
    assert_eq!(ExpectedDollar(b'x').reply(), b"-ERR Protocol error: expected '$', got 'x'\r\n");
    assert_eq!(InvalidMultibulkLength.reply(), b"-ERR Protocol error: invalid multibulk length\r\n");
}

#[test]
fn bytes_after_payload_are_skipped_like_redis() {
    let (s, cmds) = parse_all(&[b"*1\r\n$4\r\nPINGxx*1\r\n$4\r\nPING\r\n"]);
    assert_eq!(s.commands, 2);
    assert_eq!(cmds[0], v(&["PING"]));
}

#[test]
fn batch_is_bounded_by_max_commands() {
    let input = b"PING\r\nPING\r\nPING\r\n";
    let mut p = Parsed::new(Limits { max_commands: 2, ..Limits::default() });
    let s = p.parse(&[input]);
    assert_eq!((s.commands, s.consumed, s.limited), (2, 12, true));
    let s = p.parse(&[&input[12..]]);
    assert_eq!((s.commands, s.consumed, s.limited), (1, 6, false));
}

/// A long value split over many segments is located, not copied, by the
/// parse; its bytes are gathered only when asked for.
#[test]
fn a_long_split_value_is_gathered_only_on_demand() {
    let value: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
    let mut req = format!("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n${}\r\n", value.len()).into_bytes();
    let at = req.len();
    req.extend_from_slice(&value);
    req.extend_from_slice(b"\r\n*1\r\n$4\r\nPING\r\n");
    let segs: Vec<&[u8]> = req.chunks(2048).collect();
    let mut p = Parsed::new(Limits::default());
    let s = p.parse(&segs);
    assert_eq!((s.commands, s.consumed, s.error), (2, req.len(), None));
    assert!(p.gathered.is_empty() && p.lazy.iter().all(|c| c.get().is_none()), "nothing copied by the parse");
    let r = p.request(&segs, 0);
    let v = r.arg_ref(2);
    assert_eq!(v.len(), value.len());
    assert_eq!(v.pieces.len(), (at + value.len() - 1) / 2048 - at / 2048 + 1);
    assert_eq!(v.pieces.iter().map(|p| p.len as usize).sum::<usize>(), value.len());
    assert!(p.lazy[0].get().is_none(), "len and pieces copy nothing");
    assert_eq!(v.bytes(), &value[..]);
    assert_eq!(r.arg(2).as_ptr(), v.bytes().as_ptr(), "gathered once");
    assert_eq!(p.request(&segs, 1).arg(0), b"PING");
}

/// An incomplete request reports a lower bound on its size and where its
/// arguments stand; a `Skip` built from it discards exactly that request,
/// however its bytes arrive, and the next request parses.
#[test]
fn a_refused_request_is_skipped_whole() {
    let big = vec![b'x'; 5000];
    let mut req = b"*4\r\n$4\r\nMSET\r\n$1\r\na\r\n".to_vec();
    let head = req.len();
    req.extend_from_slice(format!("${}\r\n", big.len()).as_bytes());
    let data = req.len();
    req.extend_from_slice(&big);
    req.extend_from_slice(b"\r\n$2\r\nzz\r\n");
    let whole = req.len();
    req.extend_from_slice(b"*1\r\n$4\r\nPING\r\n");
    let limits = Limits::default();
    let mut p = Parsed::new(limits);
    // Inside the big argument: through its CRLF, one argument after it.
    let s = p.parse(&[&req[..data + 10]]);
    assert_eq!((s.consumed, s.commands), (0, 0));
    let pending = s.pending.unwrap();
    assert_eq!(pending, Pending { through: (data + big.len() + 2) as u64, args_after: 1 });
    assert_eq!(s.wanted, Some(data + big.len() + 2 + 6));
    assert!(s.wanted.unwrap() <= whole);
    // Before the big argument's header: it and the one after are to come.
    let s = p.parse(&[&req[..head + 2]]);
    assert_eq!(s.pending, Some(Pending { through: head as u64, args_after: 2 }));
    // Skip from the first state, the rest arriving in 3-byte pieces.
    let mut skip = Skip::new(pending, limits);
    let mut at = 0;
    let mut end = data + 10;
    loop {
        let step = skip.advance(&[&req[at..end]]);
        assert_eq!(step.error, None);
        at += step.consumed;
        if step.done {
            break;
        }
        assert!(end < req.len(), "skipped past the request");
        end = (end + 3).min(req.len());
    }
    assert_eq!(at, whole, "exactly the refused request");
    let s = p.parse(&[&req[at..]]);
    assert_eq!((s.commands, s.consumed), (1, req.len() - whole));
    // A malformed header after the refused argument is a protocol error.
    let mut skip = Skip::new(Pending { through: 3, args_after: 1 }, limits);
    assert_eq!(skip.advance(&[b"abc+2\r\nzz\r\n"]).error, Some(ProtocolError::ExpectedDollar(b'+')));
    let mut skip = Skip::new(Pending { through: 0, args_after: 1 }, limits);
    assert_eq!(skip.advance(&[b"$536870913\r\n"]).error, Some(ProtocolError::InvalidBulkLength));
}

/// A command set from a buffer of arguments reads as the same command
/// parsed from RESP, replaces what a parse left, and is held to the limits.
#[test]
fn set_command_reads_as_a_parsed_command() {
    let mut p = Parsed::new(Limits { max_args: 3, max_bulk_bytes: 4, max_commands: 8 });
    let segs: [&[u8]; 1] = [b"*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nPING\r\n"];
    assert_eq!(p.parse(&segs).commands, 2);
    let bytes = b"SETkeyv";
    assert!(p.set_command(&[3, 6, 6, 7][..3]));
    assert_eq!(p.len(), 1);
    let one: [&[u8]; 1] = [&bytes[..6]];
    let r = p.request(&one, 0);
    assert_eq!(r.args().collect::<Vec<_>>(), [&b"SET"[..], b"key", b""]);
    assert!(r.arg_ref(1).pieces.is_empty());
    assert_eq!(p.command_end(0), 6);
    // Past max_args, or an argument past max_bulk_bytes: no command.
    assert!(!p.set_command(&[1, 2, 3, 4]));
    assert!(p.is_empty());
    assert!(!p.set_command(&[1, 6]));
    assert!(p.is_empty());
    assert!(!p.set_command(&[]));
    assert!(p.set_command(&[4]));
    let seg: [&[u8]; 1] = [b"ABCD"];
    assert_eq!(p.request(&seg, 0).arg(0), b"ABCD");
}
