//! Chunked collections ([`crate::chunked`], [`super::large`]): the same
//! random commands against a server that chunks past 2 members and one that
//! never chunks must answer alike; buckets split and merge within bounds;
//! a deleted, expired or overwritten collection leaves one tombstone whose
//! chunks the collector removes; RENAME moves the header alone.

use super::*;
use crate::chunked::{collect_garbage, ChunkConfig, Header};
use crate::store::{Clock, Keyspace};
use rand_xoshiro::rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use super::fixture::Fixture as Side;

impl Side {
    fn header(&mut self, key: &str, kind: Kind) -> Option<Header> {
        super::large::header(&mut self.ks, key.as_bytes(), kind).unwrap()
    }
}

fn never() -> ChunkConfig {
    ChunkConfig { max_blob_entries: usize::MAX, max_blob_bytes: usize::MAX, ..ChunkConfig::default() }
}

/// A random command whose reply does not depend on the representation
/// (hash replies that list fields are left out: their order is the
/// representation's).
fn random_command(rng: &mut Xoshiro256PlusPlus) -> Vec<Vec<u8>> {
    let pick = |rng: &mut Xoshiro256PlusPlus, n: u64| rng.next_u64() % n;
    let member = |rng: &mut Xoshiro256PlusPlus| format!("m{}", pick(rng, 40)).into_bytes();
    let keys = ["h", "s", "z", "l", "x"];
    let key = keys[pick(rng, keys.len() as u64) as usize].as_bytes().to_vec();
    let name: &str = match &key[..] {
        b"h" => ["HSET", "HDEL", "HGET", "HLEN", "HEXISTS", "HMGET", "HMSET"][pick(rng, 7) as usize],
        b"s" => ["SADD", "SREM", "SISMEMBER", "SCARD", "SMEMBERS", "SMISMEMBER", "SPOP"][pick(rng, 7) as usize],
        b"z" => ["ZADD", "ZREM", "ZSCORE", "ZCARD", "ZRANGE", "ZADD"][pick(rng, 6) as usize],
        b"l" => ["LPUSH", "RPUSH", "LPOP", "RPOP", "LLEN", "LINDEX", "LRANGE", "LPUSHX", "LSET"][pick(rng, 9) as usize],
        _ => ["RENAME", "COPY", "DEL", "TYPE", "EXISTS"][pick(rng, 5) as usize],
    };
    let mut a = vec![name.as_bytes().to_vec(), key.clone()];
    let n = 1 + pick(rng, 4);
    match name {
        "HSET" | "HMSET" => (0..n).for_each(|_| a.extend([member(rng), format!("v{}", pick(rng, 9)).into_bytes()])),
        "ZADD" => {
            for _ in 0..pick(rng, 3) {
                a.push(["NX", "XX", "GT", "LT", "CH", "INCR", "ch"][pick(rng, 7) as usize].as_bytes().to_vec());
            }
            (0..n).for_each(|_| a.extend([format!("{}", pick(rng, 7) as i64 - 3).into_bytes(), member(rng)]));
        }
        "HDEL" | "HMGET" | "SADD" | "SREM" | "SMISMEMBER" | "ZREM" | "LPUSH" | "RPUSH" | "LPUSHX" => {
            (0..n).for_each(|_| a.push(member(rng)))
        }
        "HGET" | "HEXISTS" | "SISMEMBER" | "ZSCORE" => a.push(member(rng)),
        "LPOP" | "RPOP" if pick(rng, 3) == 0 => a.push(format!("{}", pick(rng, 4)).into_bytes()),
        "LINDEX" => a.push(format!("{}", pick(rng, 30) as i64 - 15).into_bytes()),
        "LSET" => a.extend([format!("{}", pick(rng, 10) as i64 - 5).into_bytes(), member(rng)]),
        "LRANGE" => a.extend([
            format!("{}", pick(rng, 40) as i64 - 20).into_bytes(),
            format!("{}", pick(rng, 40) as i64 - 20).into_bytes(),
        ]),
        "ZRANGE" => a.extend([b"0".to_vec(), b"-1".to_vec()]),
        "SPOP" => a[0] = b"SCARD".to_vec(),
        "RENAME" | "COPY" => {
            a[1] = keys[pick(rng, 4) as usize].as_bytes().to_vec();
            a.push(b"x".to_vec());
            if name == "COPY" {
                a.push(b"REPLACE".to_vec());
            }
        }
        _ => {}
    }
    a
}

#[test]
fn chunked_and_blob_collections_answer_alike() {
    for seed in 0..4u64 {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let (mut chunked, mut blob) = (Side::at(ChunkConfig::tiny(), 1_000_000), Side::at(never(), 1_000_000));
        for i in 0..4000 {
            let args = random_command(&mut rng);
            let (got, want) = (chunked.raw(&args), blob.raw(&args));
            let shown: Vec<String> = args.iter().map(|a| String::from_utf8_lossy(a).into_owned()).collect();
            assert_eq!(
                String::from_utf8_lossy(&got),
                String::from_utf8_lossy(&want),
                "seed {seed}, command {i}: {shown:?}"
            );
            if i % 5 == 0 {
                collect_garbage(&mut chunked.ks, 2).unwrap();
            }
        }
        assert_eq!(blob.ks.internal_len(), 0, "the never-chunking side keeps no internal entries");
        let any = ["h", "s", "z", "l", "x"].iter().any(|k| {
            [Kind::Hash, Kind::Set, Kind::ZSet, Kind::List].iter().any(|&kind| chunked.header(k, kind).is_some())
        });
        assert!(any || seed > 0, "seed {seed}: some collection ended chunked");
    }
}

#[test]
fn buckets_split_as_a_set_grows_and_merge_as_it_shrinks() {
    let mut s = Side::at(ChunkConfig::tiny(), 1_000_000);
    let target = ChunkConfig::tiny().bucket_entries as u64;
    for i in 0..500 {
        assert_eq!(s.cmd(&format!("SADD s m{i}")), ":1\r\n");
        if let Some(h) = s.header("s", Kind::Set) {
            assert!(h.count <= h.buckets() * target, "{h:?}");
            assert!(h.buckets() == 1 || h.count * 4 >= h.buckets() * target, "{h:?}");
        }
    }
    let h = s.header("s", Kind::Set).expect("chunked");
    assert_eq!(h.count, 500);
    assert_eq!(h.buckets(), 250);
    // Chunks: the non-empty buckets, plus the generation counter.
    assert!(s.ks.internal_len() <= 251 && s.ks.internal_len() > 200, "{}", s.ks.internal_len());
    assert_eq!(s.cmd("OBJECT ENCODING s"), "$9\r\nhashtable\r\n");
    for i in 0..497 {
        assert_eq!(s.cmd(&format!("SREM s m{i}")), ":1\r\n");
        let h = s.header("s", Kind::Set).expect("still chunked");
        assert!(h.count <= h.buckets() * target, "{h:?}");
        assert!(h.buckets() == 1 || h.count * 4 >= h.buckets() * target, "{h:?}");
    }
    assert_eq!(s.cmd("SMEMBERS s"), "*3\r\n$4\r\nm497\r\n$4\r\nm498\r\n$4\r\nm499\r\n");
    assert!(s.ks.internal_len() <= 4, "merged back to a few buckets: {}", s.ks.internal_len());
}

#[test]
fn a_list_grows_and_shrinks_chunk_by_chunk() {
    let mut s = Side::at(ChunkConfig::tiny(), 1_000_000);
    for i in 0..30 {
        s.cmd(&format!("RPUSH l r{i}"));
        s.cmd(&format!("LPUSH l l{i}"));
    }
    let h = s.header("l", Kind::List).expect("chunked");
    assert_eq!(h.count, 60);
    assert_eq!(s.cmd("OBJECT ENCODING l"), "$9\r\nquicklist\r\n");
    assert_eq!(s.cmd("LINDEX l 0"), "$3\r\nl29\r\n");
    assert_eq!(s.cmd("LINDEX l -1"), "$3\r\nr29\r\n");
    assert_eq!(s.cmd("LINDEX l 31"), "$2\r\nr1\r\n");
    assert_eq!(s.cmd("LINDEX l 60"), "$-1\r\n");
    for i in (0..30).rev() {
        assert_eq!(
            s.cmd("LPOP l"),
            format!("$3\r\nl{i}\r\n").replace("$3\r\nl", if i < 10 { "$2\r\nl" } else { "$3\r\nl" })
        );
    }
    for i in 0..29 {
        assert_eq!(s.cmd("LPOP l"), format!("${}\r\nr{i}\r\n", if i < 10 { 2 } else { 3 }));
    }
    assert_eq!(s.cmd("RPOP l"), "$3\r\nr29\r\n");
    assert_eq!(s.cmd("EXISTS l"), ":0\r\n");
    // Only the counter and the emptied list's tombstone are left; the collector takes the tombstone.
    while collect_garbage(&mut s.ks, 8).unwrap() > 0 {}
    assert_eq!(s.ks.internal_len(), 1);
}

#[test]
fn deleting_a_chunked_collection_leaves_a_tombstone_the_collector_clears() {
    let mut s = Side::at(ChunkConfig::tiny(), 1_000_000);
    for i in 0..200 {
        s.cmd(&format!("HSET h f{i} v{i}"));
    }
    let chunks = s.ks.internal_len();
    assert!(chunks > 50);
    assert_eq!(s.cmd("DEL h"), ":1\r\n");
    assert_eq!(s.ks.internal_len(), chunks + 1, "the delete wrote one tombstone, deleted no chunk");
    let mut rounds = 0;
    while collect_garbage(&mut s.ks, 10).unwrap() > 0 {
        rounds += 1;
        assert!(rounds < 100);
    }
    assert!(rounds >= chunks / 10, "bounded work per call");
    assert_eq!(s.ks.internal_len(), 1, "only the generation counter is left");
}

#[test]
fn rename_moves_the_header_and_copy_gets_its_own_chunks() {
    let mut s = Side::at(ChunkConfig::tiny(), 1_000_000);
    for i in 0..50 {
        s.cmd(&format!("ZADD z {i} m{i}"));
    }
    let gen = s.header("z", Kind::ZSet).unwrap().gen;
    s.cmd("SADD other a b c d e");
    let other = s.header("other", Kind::Set).unwrap().gen;
    assert_eq!(s.cmd("RENAME z other"), "+OK\r\n");
    assert_eq!(s.header("other", Kind::ZSet).unwrap().gen, gen, "the header moved");
    while collect_garbage(&mut s.ks, 4).unwrap() > 0 {}
    // The overwritten set's chunks are gone, the renamed zset's are all there.
    let mut left = Vec::new();
    s.ks.internal_scan(&[0], usize::MAX, &mut |k| left.push(crate::chunked::key_generation(k)));
    assert!(left.iter().flatten().all(|&(tomb, g)| !tomb && g == gen && g != other), "{left:?}");
    assert_eq!(s.cmd("ZCARD other"), ":50\r\n");
    assert_eq!(s.cmd("ZSCORE other m49"), "$2\r\n49\r\n");
    assert_eq!(s.cmd("COPY other copy"), ":1\r\n");
    let copy = s.header("copy", Kind::ZSet).unwrap().gen;
    assert_ne!(copy, gen);
    assert_eq!(s.cmd("DEL other"), ":1\r\n");
    while collect_garbage(&mut s.ks, 4).unwrap() > 0 {}
    assert_eq!(s.cmd("ZRANGE copy 0 2"), "*3\r\n$2\r\nm0\r\n$2\r\nm1\r\n$2\r\nm2\r\n");
}

#[test]
fn an_expired_chunked_collection_is_collected() {
    let mut s = Side::at(ChunkConfig::tiny(), 1_000_000);
    for i in 0..40 {
        s.cmd(&format!("SADD s m{i}"));
    }
    assert_eq!(s.cmd("PEXPIRE s 10"), ":1\r\n");
    s.ks.set_clock(Clock::Fixed(1_000_020));
    assert_eq!(s.cmd("SCARD s"), ":0\r\n");
    while collect_garbage(&mut s.ks, 8).unwrap() > 0 {}
    assert_eq!(s.ks.internal_len(), 1);
}

#[test]
fn a_header_whose_chunk_is_missing_is_reported_corrupt() {
    let mut s = Side::at(ChunkConfig { fault_header_without_chunk: true, ..ChunkConfig::tiny() }, 1_000_000);
    for i in 0..10 {
        s.cmd(&format!("RPUSH l e{i}"));
    }
    assert!(s.cmd("LRANGE l 0 -1").starts_with("-ERR stored value is corrupt"));
}

/// SORT's `->field` patterns read a chunked hash's field from its bucket.
#[test]
fn sort_reads_fields_of_chunked_hashes() {
    let mut s = Side::at(ChunkConfig::tiny(), 1_000_000);
    s.cmd("HSET h_1 f 9 a 1 b 2 c 3");
    s.cmd("HSET h_2 f 3 x 1 y 2 z 4");
    assert!(s.header("h_1", Kind::Hash).is_some() && s.header("h_2", Kind::Hash).is_some(), "chunked");
    s.cmd("RPUSH ids 1 2 3");
    assert_eq!(s.cmd("SORT ids BY h_*->f GET # GET h_*->f"), "*6\r\n$1\r\n3\r\n$-1\r\n$1\r\n2\r\n$1\r\n3\r\n$1\r\n1\r\n$1\r\n9\r\n");
}
