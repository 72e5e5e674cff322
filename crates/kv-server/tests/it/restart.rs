//! Restarting on the same pool keeps everything; the pool refuses what it is not.

use pmwire_kv_server::client::{HttpClient, RespClient};
use pmwire_kv_server::{KvServer, Mode, StoreError};

use crate::common::*;

#[test]
fn restart_keeps_keys_values_and_log_across_modes() {
    let pool = Pool::new();
    let mut lsns = Vec::new();
    let server = start(&pool.path, Mode::ZeroCopy);
    {
        let mut r = RespClient::connect(server.resp).unwrap();
        let mut h = HttpClient::connect(server.http).unwrap();
        for i in 0..300u64 {
            let len = [1, 100, 2000, 5000, 64 << 10][i as usize % 5];
            r.call(&[b"SET".to_vec(), format!("r{i}").into_bytes(), value(i, len)]).unwrap();
            assert_eq!(h.request("POST", &format!("/kv/h{i}"), &value(i + 1000, len)).unwrap().status, 204);
        }
        r.call(&["HSET", "hash", "f", "v"]).unwrap();
        r.call(&["DEL", "r0"]).unwrap();
        for i in 0..10u64 {
            let body = h.request("POST", "/log", &value(i + 5000, 300)).unwrap().body;
            lsns.push(String::from_utf8(body).unwrap().trim().to_string());
        }
    }
    let first = server.stop();
    assert!(first.recovered().created);
    drop(first);
    for mode in [Mode::Copy, Mode::ZeroCopy] {
        let server = KvServer::open(&options(&pool.path, mode)).unwrap();
        let recovered = server.recovered().clone();
        assert!(!recovered.created);
        assert_eq!(recovered.keys, 600);
        assert_eq!(recovered.log_entries, 10);
        let server = start_with(server);
        let mut r = RespClient::connect(server.resp).unwrap();
        let mut h = HttpClient::connect(server.http).unwrap();
        assert_eq!(r.get(b"r0").unwrap(), None);
        for i in 1..300u64 {
            let len = [1, 100, 2000, 5000, 64 << 10][i as usize % 5];
            assert!(r.get(format!("r{i}").as_bytes()).unwrap().unwrap() == value(i, len), "r{i} after restart");
            let got = h.request("GET", &format!("/kv/h{i}"), b"").unwrap();
            assert!(got.status == 200 && got.body == value(i + 1000, len), "h{i} after restart");
        }
        assert_eq!(r.call(&["HGET", "hash", "f"]).unwrap(), pmwire_resp::client::Value::Bulk(b"v".to_vec()));
        for (i, lsn) in lsns.iter().enumerate() {
            let got = h.request("GET", &format!("/log/{lsn}"), b"").unwrap();
            assert!(got.status == 200 && got.body == value(i as u64 + 5000, 300), "log entry {lsn}");
        }
        drop((r, h));
        server.stop();
    }
}

#[test]
fn a_file_that_is_not_a_kv_pool_is_refused_untouched() {
    let pool = Pool::new();
    let junk: Vec<u8> = (0..(1 << 20)).map(|i| (i % 251) as u8 + 1).collect();
    std::fs::write(&pool.path, &junk).unwrap();
    let err = KvServer::open(&options(&pool.path, Mode::ZeroCopy)).unwrap_err();
    assert!(matches!(err, pmwire_kv_server::ServeError::Store(StoreError::NotKvPool { .. })), "{err}");
    assert!(std::fs::read(&pool.path).unwrap() == junk, "nothing written");
}

#[test]
fn a_too_small_size_is_refused_before_creating_anything() {
    let pool = Pool::new();
    let mut opts = options(&pool.path, Mode::ZeroCopy);
    opts.size = 1 << 20;
    let err = KvServer::open(&opts).unwrap_err();
    assert!(matches!(err, pmwire_kv_server::ServeError::Store(StoreError::TooSmall { .. })), "{err}");
    assert!(!pool.path.exists());
}

/// The bit commands on the persistent engine: a bitmap built by SETBIT
/// (growing across pool buffers) and a BITOP result are there after a
/// restart, bit for bit, with BITCOUNT agreeing.
#[test]
fn bitmaps_survive_a_restart() {
    use pmwire_resp::client::Value;
    let pool = Pool::new();
    let server = start(&pool.path, Mode::ZeroCopy);
    let set: Vec<u64> = (0..200u64).map(|i| i * i * 7 % 40_000).collect();
    {
        let mut r = RespClient::connect(server.resp).unwrap();
        for &bit in &set {
            r.call(&["SETBIT".to_string(), "bm".to_string(), bit.to_string(), "1".to_string()]).unwrap();
        }
        assert_eq!(r.call(&["SETBIT", "bm", "7", "0"]).unwrap(), Value::Integer(1), "bit 7 was set (7 * 1 * 1)");
        r.call(&["SETBIT", "other", "3", "1"]).unwrap();
        let bytes = set.iter().max().unwrap() / 8 + 1;
        assert_eq!(r.call(&["BITOP", "OR", "both", "bm", "other"]).unwrap(), Value::Integer(bytes as i64), "the longer string's length");
    }
    let distinct: std::collections::BTreeSet<u64> = set.iter().copied().filter(|&b| b != 7).collect();
    drop(server.stop());
    let server = start_with(KvServer::open(&options(&pool.path, Mode::ZeroCopy)).unwrap());
    let mut r = RespClient::connect(server.resp).unwrap();
    assert_eq!(r.call(&["BITCOUNT", "bm"]).unwrap(), Value::Integer(distinct.len() as i64));
    assert_eq!(r.call(&["BITCOUNT", "both"]).unwrap(), Value::Integer(distinct.len() as i64 + 1));
    for bit in [0u64, 3, 7, 28, 63, 39_999] {
        let want = i64::from(distinct.contains(&bit));
        assert_eq!(r.call(&["GETBIT".to_string(), "bm".to_string(), bit.to_string()]).unwrap(), Value::Integer(want), "bit {bit}");
    }
    assert_eq!(r.call(&["GETBIT", "both", "3"]).unwrap(), Value::Integer(1));
    drop(r);
    server.stop();
}

/// Scripts on the persistent engine: a script's writes are durable with
/// its reply; a loaded script is kept (an internal entry), so EVALSHA
/// answers after a restart; a script stopped past `lua-time-limit` leaves
/// nothing of its writes, in memory or after the restart.
#[test]
fn scripts_and_their_writes_survive_a_restart() {
    use pmwire_resp::client::Value;
    let pool = Pool::new();
    let server = start(&pool.path, Mode::ZeroCopy);
    let body = "redis.call('hset', KEYS[1], 'n', ARGV[1]) return redis.call('incrby', KEYS[2], ARGV[1])";
    let sha = {
        let mut r = RespClient::connect(server.resp).unwrap();
        let Value::Bulk(sha) = r.call(&["SCRIPT", "LOAD", body]).unwrap() else { panic!("SCRIPT LOAD") };
        let sha = String::from_utf8(sha).unwrap();
        for i in 1..=10 {
            let n = i.to_string();
            assert_eq!(r.call(&["EVALSHA", &sha, "2", "h", "c", &n]).unwrap(), Value::Integer((1..=i).sum()));
        }
        assert_eq!(r.call(&["CONFIG", "SET", "lua-time-limit", "50"]).unwrap(), Value::Simple(b"OK".to_vec()));
        let Value::Error(e) = r.call(&["EVAL", "redis.call('set', 'c', 'gone') redis.call('del', 'h') while true do end", "0"]).unwrap() else {
            panic!("a script past its limit is refused")
        };
        assert!(String::from_utf8_lossy(&e).contains("ran past lua-time-limit (50 ms)"), "{}", String::from_utf8_lossy(&e));
        assert_eq!(r.call(&["GET", "c"]).unwrap(), Value::Bulk(b"55".to_vec()));
        sha
    };
    drop(server.stop());
    let server = start_with(KvServer::open(&options(&pool.path, Mode::ZeroCopy)).unwrap());
    let mut r = RespClient::connect(server.resp).unwrap();
    assert_eq!(r.call(&["GET", "c"]).unwrap(), Value::Bulk(b"55".to_vec()));
    assert_eq!(r.call(&["HGET", "h", "n"]).unwrap(), Value::Bulk(b"10".to_vec()));
    assert_eq!(r.call(&["SCRIPT", "EXISTS", &sha]).unwrap(), Value::Array(vec![Value::Integer(1)]));
    assert_eq!(r.call(&["EVALSHA", &sha, "2", "h", "c", "1"]).unwrap(), Value::Integer(56));
    assert_eq!(r.call(&["SCRIPT", "FLUSH"]).unwrap(), Value::Simple(b"OK".to_vec()));
    let Value::Error(e) = r.call(&["EVALSHA", &sha, "2", "h", "c", "1"]).unwrap() else { panic!("flushed") };
    assert!(e.starts_with(b"NOSCRIPT"));
    drop(r);
    server.stop();
}

/// Function libraries on the persistent engine: a library loaded by
/// FUNCTION LOAD is in the pool when the command answers (an internal
/// entry), kept by FLUSHALL, and served by FCALL after a restart on the
/// same pool; a deleted one stays deleted.
#[test]
fn function_libraries_survive_a_restart() {
    use pmwire_resp::client::Value;
    let pool = Pool::new();
    let server = start(&pool.path, Mode::ZeroCopy);
    let lib = "#!lua name=counters\n\
               redis.register_function('bump', function(keys, args) return redis.call('incrby', keys[1], args[1]) end)\n\
               redis.register_function{function_name='peek', callback=function(keys) return redis.call('get', keys[1]) end, flags={'no-writes'}}";
    let gone = "#!lua name=gone\nredis.register_function('gone', function() return 1 end)";
    {
        let mut r = RespClient::connect(server.resp).unwrap();
        assert_eq!(r.call(&["FUNCTION", "LOAD", lib]).unwrap(), Value::Bulk(b"counters".to_vec()));
        assert_eq!(r.call(&["FUNCTION", "LOAD", gone]).unwrap(), Value::Bulk(b"gone".to_vec()));
        assert_eq!(r.call(&["FCALL", "bump", "1", "c", "5"]).unwrap(), Value::Integer(5));
        assert_eq!(r.call(&["FLUSHALL"]).unwrap(), Value::Simple(b"OK".to_vec()));
        assert_eq!(r.call(&["DBSIZE"]).unwrap(), Value::Integer(0), "the libraries are not keys");
        assert_eq!(r.call(&["FCALL", "bump", "1", "c", "2"]).unwrap(), Value::Integer(2));
        assert_eq!(r.call(&["FUNCTION", "DELETE", "gone"]).unwrap(), Value::Simple(b"OK".to_vec()));
    }
    drop(server.stop());
    let server = start_with(KvServer::open(&options(&pool.path, Mode::ZeroCopy)).unwrap());
    let mut r = RespClient::connect(server.resp).unwrap();
    assert_eq!(r.call(&["FCALL", "bump", "1", "c", "3"]).unwrap(), Value::Integer(5));
    assert_eq!(r.call(&["FCALL_RO", "peek", "1", "c"]).unwrap(), Value::Bulk(b"5".to_vec()));
    assert_eq!(r.call(&["FCALL", "gone", "0"]).unwrap(), Value::Error(b"ERR Function not found".to_vec()));
    let Value::Array(libs) = r.call(&["FUNCTION", "LIST", "WITHCODE"]).unwrap() else { panic!("FUNCTION LIST") };
    assert_eq!(libs.len(), 1);
    let Value::Array(fields) = &libs[0] else { panic!("a library") };
    assert_eq!(fields[1], Value::Bulk(b"counters".to_vec()));
    assert_eq!(fields[7], Value::Bulk(lib.as_bytes().to_vec()), "the code, byte for byte");
    drop(r);
    server.stop();
}
