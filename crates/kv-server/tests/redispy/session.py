"""A scripted redis-py session against a running server, over every family it serves.

Run by crates/kv-server/tests/it/redispy.rs with the redis-py that scripts/setup
installs from PyPI into its own venv:

    python session.py --port PORT --protocol 2|3 [--password P]

Every step asserts what a Redis 7.0 server answers through redis-py's own parsing
(RESP2 or RESP3 decoded into Python values), so a reply of the wrong type or value
fails here the way it would fail an application. Prints "redis-py session: N checks
passed" and exits 0, or raises (exit 1) naming the step.
"""

import argparse
import sys
import threading
import time

import redis


class Session:
    def __init__(self, client):
        self.r = client
        self.checks = 0

    def eq(self, got, want, what):
        if got != want:
            raise AssertionError(f"{what}: got {got!r}, want {want!r}")
        self.checks += 1

    def raises(self, fn, fragment, what):
        try:
            fn()
        except redis.ResponseError as e:
            if fragment not in str(e):
                raise AssertionError(f"{what}: error {e!r} lacks {fragment!r}")
            self.checks += 1
            return
        raise AssertionError(f"{what}: no error")


def connection(s, protocol):
    r = s.r
    s.eq(r.ping(), True, "PING")
    s.eq(r.echo("hi"), b"hi", "ECHO")
    s.eq(r.execute_command("SELECT", 0), True, "SELECT 0")
    s.eq(r.dbsize(), 0, "DBSIZE on a fresh pool")
    s.eq(r.acl_whoami() in ("default", b"default"), True, "ACL WHOAMI (redis-py decodes it in RESP2 only)")
    info = r.info()
    s.eq(isinstance(info, dict) and len(info) > 0, True, "INFO parses as a section dict")
    s.eq(r.command_count() > 0, True, "COMMAND COUNT")


def strings(s):
    r = s.r
    s.eq(r.set("s:a", "1"), True, "SET")
    s.eq(r.get("s:a"), b"1", "GET")
    s.eq(r.set("s:a", "2", nx=True), None, "SET NX on an existing key")
    s.eq(r.setnx("s:b", "x"), True, "SETNX")
    s.eq(r.incr("s:a"), 2, "INCR")
    s.eq(r.incrby("s:a", 40), 42, "INCRBY")
    s.eq(r.decr("s:a"), 41, "DECR")
    s.eq(r.decrby("s:a", 1), 40, "DECRBY")
    s.eq(r.append("s:b", "yz"), 3, "APPEND")
    s.eq(r.strlen("s:b"), 3, "STRLEN")
    s.eq(r.getrange("s:b", 1, -1), b"yz", "GETRANGE")
    s.eq(r.setrange("s:b", 1, "Q"), 3, "SETRANGE")
    s.eq(r.getset("s:b", "new"), b"xQz", "GETSET")
    s.eq(r.getdel("s:b"), b"new", "GETDEL")
    s.eq(r.get("s:b"), None, "GET after GETDEL")
    s.eq(r.mset({"s:m1": "a", "s:m2": "b"}), True, "MSET")
    s.eq(r.mget("s:m1", "s:m2", "s:none"), [b"a", b"b", None], "MGET")
    s.eq(r.msetnx({"s:m1": "z", "s:m3": "c"}), False, "MSETNX with one existing key")
    big = b"\x00\xff" * 30_000
    s.eq(r.set("s:big", big), True, "SET of 60 KB of binary")
    s.eq(r.get("s:big"), big, "GET of 60 KB of binary")
    s.raises(lambda: r.incr("s:big"), "not an integer", "INCR of a non-number")


def keys(s):
    r = s.r
    r.set("k:1", "v")
    s.eq(r.exists("k:1", "k:none"), 1, "EXISTS")
    s.eq(r.type("k:1"), b"string", "TYPE")
    s.eq(r.rename("k:1", "k:2"), True, "RENAME")
    s.eq(r.renamenx("k:2", "s:a"), False, "RENAMENX onto an existing key")
    s.eq(r.copy("k:2", "k:3"), True, "COPY")
    s.eq(r.touch("k:2", "k:3", "k:none"), 2, "TOUCH")
    s.eq(sorted(r.keys("k:*")), [b"k:2", b"k:3"], "KEYS")
    seen = set()
    for key in r.scan_iter(match="k:*", count=2):
        seen.add(key)
    s.eq(seen, {b"k:2", b"k:3"}, "SCAN over every page")
    s.eq(r.unlink("k:2"), 1, "UNLINK")
    s.eq(r.delete("k:3", "k:none"), 1, "DEL")
    s.eq(r.object("encoding", "s:a") in (b"int", b"raw", b"embstr", "int", "raw", "embstr"), True, "OBJECT ENCODING")


def hashes(s):
    r = s.r
    s.eq(r.hset("h", mapping={"f1": "v1", "f2": "v2"}), 2, "HSET")
    s.eq(r.hget("h", "f1"), b"v1", "HGET")
    s.eq(r.hmget("h", ["f1", "nope"]), [b"v1", None], "HMGET")
    s.eq(r.hexists("h", "f2"), True, "HEXISTS")
    s.eq(r.hlen("h"), 2, "HLEN")
    s.eq(r.hgetall("h"), {b"f1": b"v1", b"f2": b"v2"}, "HGETALL")
    s.eq(r.hdel("h", "f1", "nope"), 1, "HDEL")
    s.eq(r.type("h"), b"hash", "TYPE of a hash")
    s.raises(lambda: r.get("h"), "WRONGTYPE", "GET of a hash")
    s.eq(r.hsetnx("h", "f2", "x"), False, "HSETNX on an existing field")
    s.eq(r.hsetnx("h", "f3", "v3"), True, "HSETNX")
    s.eq(r.hkeys("h"), [b"f2", b"f3"], "HKEYS")
    s.eq(r.hvals("h"), [b"v2", b"v3"], "HVALS")
    s.eq(r.hstrlen("h", "f2"), 2, "HSTRLEN")
    s.eq(r.hincrby("h", "n", 5), 5, "HINCRBY")
    s.eq(r.hincrby("h", "n", -7), -2, "HINCRBY down")
    s.eq(r.hincrbyfloat("h", "x", 1.5), 1.5, "HINCRBYFLOAT")
    s.eq(r.hincrbyfloat("h", "x", "0.1"), 1.6, "HINCRBYFLOAT as long double")
    s.eq(r.hget("h", "x"), b"1.6", "HINCRBYFLOAT stores %.17Lf trimmed")
    s.raises(lambda: r.hincrby("h", "f2", 1), "hash value is not an integer", "HINCRBY of a non-integer")
    s.raises(lambda: r.hincrbyfloat("h", "f2", 1), "hash value is not a float", "HINCRBYFLOAT of a non-float")
    s.raises(lambda: r.hincrby("h", "n", "x"), "not an integer", "HINCRBY by a non-integer")
    fields = {b"f2", b"f3", b"n", b"x"}
    s.eq(r.hrandfield("h") in fields, True, "HRANDFIELD")
    two = r.hrandfield("h", 2)
    s.eq(len(two) == 2 and len(set(two)) == 2 and set(two) <= fields, True, "HRANDFIELD with a count")
    pairs = flat_or_nested(r.hrandfield("h", -5, withvalues=True))
    whole = r.hgetall("h")
    s.eq(len(pairs) == 5 and all(whole[f] == v for f, v in pairs), True, "HRANDFIELD WITHVALUES")
    s.eq(r.hrandfield("h:none"), None, "HRANDFIELD of a missing key")
    s.eq(dict(r.hscan_iter("h", count=1)), whole, "HSCAN over every page")
    cursor, page = r.hscan("h", 0, match="f*", count=100)
    s.eq((cursor, page), (0, {b"f2": b"v2", b"f3": b"v3"}), "HSCAN MATCH")


def zsets(s):
    r = s.r
    s.eq(r.zadd("z", {"one": 1, "two": 2, "three": 3}), 3, "ZADD")
    s.eq(r.zscore("z", "two"), 2.0, "ZSCORE")
    s.eq(r.zcard("z"), 3, "ZCARD")
    s.eq(r.zrange("z", 0, -1), [b"one", b"two", b"three"], "ZRANGE")
    s.eq([tuple(p) for p in r.zrange("z", 0, 0, withscores=True)], [(b"one", 1.0)], "ZRANGE WITHSCORES")
    s.eq(r.zrangebyscore("z", 2, "+inf"), [b"two", b"three"], "ZRANGEBYSCORE")
    s.eq(r.zrem("z", "one"), 1, "ZREM")
    s.eq(r.zincrby("z", 2.5, "two"), 4.5, "ZINCRBY")
    s.raises(lambda: r.zincrby("z", "x", "two"), "value is not a valid float", "ZINCRBY by a non-float")
    r.zadd("z", {"one": 1, "inf": float("inf")})
    s.eq(r.zrank("z", "two"), 2, "ZRANK")
    s.eq(r.zrevrank("z", "two"), 1, "ZREVRANK")
    s.eq(r.zrank("z", "none"), None, "ZRANK of a missing member")
    s.eq(r.zrevrange("z", 0, 1), [b"inf", b"two"], "ZREVRANGE")
    s.eq(pairs_of(r.zrevrange("z", 0, 0, withscores=True)), [(b"inf", float("inf"))], "ZREVRANGE WITHSCORES")
    s.eq(r.zrevrangebyscore("z", "+inf", "(3"), [b"inf", b"two"], "ZREVRANGEBYSCORE")
    s.eq(r.zrange("z", "(1", 10, byscore=True, offset=0, num=1), [b"three"], "ZRANGE BYSCORE LIMIT")
    s.eq(r.zrange("z", 10, "(1", byscore=True, desc=True), [b"two", b"three"], "ZRANGE BYSCORE REV")
    s.eq(r.zcount("z", "(1", "+inf"), 3, "ZCOUNT")
    s.raises(lambda: r.zcount("z", "x", 1), "min or max is not a float", "ZCOUNT with a non-float bound")
    s.eq(r.zmscore("z", ["one", "none"]), [1.0, None], "ZMSCORE")
    r.zadd("lex", {"a": 0, "b": 0, "c": 0, "d": 0})
    s.eq(r.zrangebylex("lex", "[b", "+"), [b"b", b"c", b"d"], "ZRANGEBYLEX")
    s.eq(r.zrevrangebylex("lex", "(d", "-", start=1, num=1), [b"b"], "ZREVRANGEBYLEX LIMIT")
    s.eq(r.zlexcount("lex", "-", "(c"), 2, "ZLEXCOUNT")
    s.raises(lambda: r.zlexcount("lex", "a", "b"), "not valid string range item", "ZLEXCOUNT with a bad bound")
    s.eq(r.zremrangebylex("lex", "-", "[a"), 1, "ZREMRANGEBYLEX")
    s.eq(r.zremrangebyrank("lex", 0, 0), 1, "ZREMRANGEBYRANK")
    s.eq(r.zremrangebyscore("lex", "-inf", 0), 2, "ZREMRANGEBYSCORE")
    s.eq(r.exists("lex"), 0, "an emptied sorted set is gone")
    s.eq(pairs_of(r.zpopmin("z")), [(b"one", 1.0)], "ZPOPMIN")
    s.eq(pairs_of(r.zpopmax("z", 2)), [(b"inf", float("inf")), (b"two", 4.5)], "ZPOPMAX with a count")
    r.zadd("z", {"one": 1, "two": 2})
    s.eq(r.zrandmember("z") in (b"one", b"two", b"three"), True, "ZRANDMEMBER")
    drawn = pairs_of(r.zrandmember("z", -4, withscores=True))
    s.eq(len(drawn) == 4 and all(r.zscore("z", m) == v for m, v in drawn), True, "ZRANDMEMBER WITHSCORES")
    r.zadd("z2", {"two": 20, "four": 4})
    r.sadd("zs", "one", "four")
    s.eq(r.zunionstore("u", {"z": 2, "z2": 1}, aggregate="MAX"), 4, "ZUNIONSTORE WEIGHTS AGGREGATE")
    s.eq(pairs_of(r.zrange("u", 0, -1, withscores=True)), [(b"one", 2.0), (b"four", 4.0), (b"three", 6.0), (b"two", 20.0)],
         "ZRANGE of the union")
    s.eq(r.zinterstore("i", ["z", "z2"]), 1, "ZINTERSTORE")
    s.eq(r.zscore("i", "two"), 22.0, "ZINTERSTORE sums")
    s.eq(r.zdiffstore("df", ["z", "z2", "zs"]), 1, "ZDIFFSTORE with a set")
    s.eq(pairs_of(r.zunion(["z", "zs"], withscores=True)), [(b"four", 1.0), (b"one", 2.0), (b"two", 2.0), (b"three", 3.0)],
         "ZUNION WITHSCORES with a set")
    s.eq(r.zinter(["z", "z2"]), [b"two"], "ZINTER")
    s.eq(r.zdiff(["z", "z2"]), [b"one", b"three"], "ZDIFF")
    s.eq(r.zintercard(2, ["z", "zs"]), 1, "ZINTERCARD")
    s.eq(r.zrangestore("rs", "z", 0, 1), 2, "ZRANGESTORE")
    s.eq(r.zrange("rs", 0, -1), [b"one", b"two"], "ZRANGE of ZRANGESTORE's result")
    s.eq(sorted(r.zscan_iter("z", count=1)), [(b"one", 1.0), (b"three", 3.0), (b"two", 2.0)], "ZSCAN over every page")
    s.raises(lambda: r.zadd("z", {"bad": float("nan")}), "not a valid float", "ZADD of NaN")


def flat_or_nested(reply):
    """Pairs WITHVALUES / WITHSCORES as redis-py answers them: flat (RESP2, and
    RESP3's ZPOPMIN without a count) or nested (RESP3, or parsed by redis-py)."""
    if reply and isinstance(reply[0], (list, tuple)):
        return [tuple(p) for p in reply]
    return list(zip(reply[0::2], reply[1::2]))


def pairs_of(reply):
    """(member, score) pairs whatever the protocol, scores as floats."""
    return [(m, float(v)) for m, v in flat_or_nested(reply)]


def lists(s):
    r = s.r
    s.eq(r.rpush("l", "a", "b", "c"), 3, "RPUSH")
    s.eq(r.lpush("l", "z"), 4, "LPUSH")
    s.eq(r.lrange("l", 0, -1), [b"z", b"a", b"b", b"c"], "LRANGE")
    s.eq(r.llen("l"), 4, "LLEN")
    s.eq(r.lindex("l", -1), b"c", "LINDEX")
    s.eq(r.lset("l", 0, "y"), True, "LSET")
    s.eq(r.linsert("l", "before", "b", "ab"), 5, "LINSERT")
    s.eq(r.lpos("l", "b"), 3, "LPOS")
    s.eq(r.lrem("l", 0, "ab"), 1, "LREM")
    s.eq(r.ltrim("l", 1, -1), True, "LTRIM")
    s.eq(r.lpop("l"), b"a", "LPOP")
    s.eq(r.rpop("l", 2), [b"c", b"b"], "RPOP with a count")
    s.eq(r.exists("l"), 0, "an emptied list is gone")
    r.rpush("l1", "x", "y")
    s.eq(r.lmove("l1", "l2", "LEFT", "RIGHT"), b"x", "LMOVE")
    s.eq(r.rpoplpush("l1", "l2"), b"y", "RPOPLPUSH")
    s.eq(r.lrange("l2", 0, -1), [b"y", b"x"], "LRANGE after the moves")
    s.eq(r.rpushx("nolist", "a"), 0, "RPUSHX on a missing key")
    blocking(s)


def blocking(s):
    r = s.r
    r.rpush("b1", "x", "y")
    s.eq(tuple(r.blpop(["nolist", "b1"], timeout=1)), (b"b1", b"x"), "BLPOP on a list with elements")
    s.eq(tuple(r.brpop("b1", timeout=1)), (b"b1", b"y"), "BRPOP on a list with elements")
    s.eq(r.blpop("b1", timeout=0.05), None, "BLPOP times out (RESP3: _, RESP2: *-1)")
    s.eq(r.brpoplpush("b1", "b2", timeout=0.05), None, "BRPOPLPUSH times out")
    s.raises(lambda: r.blpop("b1", timeout=-1), "timeout is negative", "BLPOP with a negative timeout")
    r.set("b:str", "1")
    s.raises(lambda: r.blpop("b:str", timeout=1), "WRONGTYPE", "BLPOP on a string")
    # Served by another connection's push: the waiter runs on its own connection.
    got = {}
    waiter = threading.Thread(target=lambda: got.update(v=r.blmove("bq", "bd", 10, "LEFT", "RIGHT")))
    waiter.start()
    deadline = time.monotonic() + 10
    while r.info("clients")["blocked_clients"] != 1:
        if time.monotonic() > deadline:
            raise AssertionError("BLMOVE never blocked")
        time.sleep(0.002)
    s.eq(r.rpush("bq", "m"), 1, "RPUSH to a key a client waits on")
    waiter.join(10)
    s.eq(got.get("v"), b"m", "BLMOVE served by another client's push")
    s.eq(r.lrange("bd", 0, -1), [b"m"], "BLMOVE's destination")
    s.eq(r.exists("bq"), 0, "BLMOVE's source emptied")


def sets(s):
    r = s.r
    s.eq(r.sadd("set1", "a", "b", "c"), 3, "SADD")
    s.eq(r.sadd("set2", "b", "c", "d"), 3, "SADD")
    s.eq(r.sismember("set1", "a"), True, "SISMEMBER")
    s.eq(r.smismember("set1", ["a", "d"]), [1, 0], "SMISMEMBER")
    s.eq(r.scard("set1"), 3, "SCARD")
    s.eq(r.smembers("set1"), {b"a", b"b", b"c"}, "SMEMBERS")
    s.eq(r.sinter("set1", "set2"), {b"b", b"c"}, "SINTER")
    s.eq(r.sunion("set1", "set2"), {b"a", b"b", b"c", b"d"}, "SUNION")
    s.eq(r.sdiff("set1", "set2"), {b"a"}, "SDIFF")
    s.eq(r.sinterstore("set3", ["set1", "set2"]), 2, "SINTERSTORE")
    s.eq(r.sintercard(2, ["set1", "set2"]), 2, "SINTERCARD")
    s.eq(r.smove("set1", "set2", "a"), True, "SMOVE")
    member = r.spop("set3")
    s.eq(member in (b"b", b"c"), True, "SPOP answers a member")
    s.eq(r.srandmember("set2") in (b"a", b"b", b"c", b"d"), True, "SRANDMEMBER")
    s.eq(set(r.sscan_iter("set2")), {b"a", b"b", b"c", b"d"}, "SSCAN over every page")
    s.eq(r.srem("set2", "a", "zz"), 1, "SREM")


def expiry(s):
    r = s.r
    s.eq(r.set("e:a", "v", ex=1000), True, "SET EX")
    s.eq(0 < r.ttl("e:a") <= 1000, True, "TTL after SET EX")
    s.eq(r.set("e:b", "v", px=900_000, nx=True), True, "SET PX NX")
    s.eq(0 < r.pttl("e:b") <= 900_000, True, "PTTL")
    s.eq(r.expire("e:b", 5000, gt=True), True, "EXPIRE GT")
    s.eq(r.expireat("e:c", 4_102_444_800), False, "EXPIREAT on a missing key")
    r.set("e:c", "v")
    s.eq(r.ttl("e:c"), -1, "TTL of a key without a deadline")
    s.eq(r.pexpireat("e:c", 4_102_444_800_000), True, "PEXPIREAT")
    s.eq(r.expiretime("e:c"), 4_102_444_800, "EXPIRETIME")
    s.eq(r.persist("e:c"), True, "PERSIST")
    s.eq(r.ttl("e:c"), -1, "TTL after PERSIST")
    s.eq(r.setex("e:d", 100, "x"), True, "SETEX")
    s.eq(r.psetex("e:d2", 100_000, "x"), True, "PSETEX")
    s.eq(r.getex("e:d", persist=True), b"x", "GETEX PERSIST")
    s.eq(r.ttl("e:d"), -1, "TTL after GETEX PERSIST")
    s.eq(r.set("e:d", "y", keepttl=True, get=True), b"x", "SET KEEPTTL GET")
    s.eq(r.pexpire("e:gone", 1), False, "PEXPIRE on a missing key")
    r.set("e:past", "v")
    s.eq(r.expireat("e:past", 1), True, "EXPIREAT in the past")
    s.eq(r.get("e:past"), None, "a key past its deadline is never served")
    s.eq(r.exists("e:past"), 0, "nor counted by EXISTS")
    s.eq(r.randomkey() is not None, True, "RANDOMKEY")
    s.eq(r.incrbyfloat("e:f", 1.5), 1.5, "INCRBYFLOAT")
    s.raises(lambda: r.set("e:a", "v", ex=0), "invalid expire time", "SET EX 0")


def transactions(s):
    r = s.r
    pipe = r.pipeline(transaction=True)
    pipe.set("t:a", "1").incr("t:a").rpush("t:l", "x").get("t:a")
    s.eq(pipe.execute(), [True, 2, 1, b"2"], "MULTI ... EXEC through a transactional pipeline")
    other = redis.Redis(connection_pool=r.connection_pool)
    with r.pipeline() as p:
        p.watch("t:a")
        other.set("t:a", "changed")
        p.multi()
        p.set("t:a", "mine")
        try:
            p.execute()
            raise AssertionError("EXEC after a watched key changed must fail")
        except redis.WatchError:
            s.checks += 1
    s.eq(r.get("t:a"), b"changed", "the watched transaction did not run")
    with r.pipeline() as p:
        p.watch("t:a")
        p.multi()
        p.set("t:a", "mine")
        s.eq(p.execute(), [True], "WATCH, then EXEC with the key unchanged")
    s.eq(r.get("t:a"), b"mine", "the transaction ran")


def config(s):
    r = s.r
    s.eq(isinstance(r.config_get("maxmemory-policy"), dict), True, "CONFIG GET parses")


def run(port, protocol, password):
    client = redis.Redis(host="127.0.0.1", port=port, protocol=protocol, password=password, socket_timeout=10)
    s = Session(client)
    client.flushdb()
    for step in (lambda s: connection(s, protocol), strings, keys, hashes, zsets, lists, sets, expiry, transactions, config):
        step(s)
    client.flushdb()
    s.eq(client.dbsize(), 0, "FLUSHDB")
    client.close()
    return s.checks


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--protocol", type=int, choices=(2, 3), required=True)
    parser.add_argument("--password")
    args = parser.parse_args()
    checks = run(args.port, args.protocol, args.password)
    print(f"redis-py {redis.__version__} RESP{args.protocol} session: {checks} checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
