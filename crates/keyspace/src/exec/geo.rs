//! The GEO commands, as Redis 7.0's `geo.c`: GEOADD GEOPOS GEODIST GEOHASH,
//! GEOSEARCH GEOSEARCHSTORE and the GEORADIUS forms (GEORADIUS
//! GEORADIUSBYMEMBER and their `_RO` variants). A geo set is a sorted set
//! whose scores are 52-bit positions ([`crate::geohash`]): GEOADD is ZADD
//! with encoded scores, and every other sorted-set command works on a geo
//! set. A search reads the nine cells around its centre (each a score
//! range), keeps what is inside the circle or box, and sorts by distance
//! as Redis does (glibc's stable `qsort` when every result is returned,
//! Redis's `pqsort` when COUNT cuts them), so ties come out in Redis's order.
//!
//! Distances are bulk strings with 4 decimals in both protocols;
//! coordinates are Redis's "human" long doubles: bulk strings in RESP2,
//! doubles (`,`) in RESP3.

use super::shared::ZaddFlags;
use super::{zsets, Ctx, Fail, Res};
use crate::blob::{decode_zset, encode_zset, zcmp};
use crate::geohash::{self, Shape, ShapeKind};
use crate::store::{Expiry, Keyspace, Kind};
use pmwire_resp::numbers::{parse_i64, parse_score};
use pmwire_resp::reply::{Protocol, ReplySink};

/// GEORADIUS, GEORADIUS_RO: a circle around coordinates.
pub(super) const RADIUS_COORDS: u8 = 1 << 0;
/// GEORADIUSBYMEMBER, GEORADIUSBYMEMBER_RO: a circle around a member.
pub(super) const RADIUS_MEMBER: u8 = 1 << 1;
/// The `_RO` forms: no STORE or STOREDIST.
pub(super) const RADIUS_NOSTORE: u8 = 1 << 2;
/// GEOSEARCH's arguments (FROMMEMBER FROMLONLAT BYRADIUS BYBOX).
pub(super) const GEOSEARCH: u8 = 1 << 3;
/// GEOSEARCHSTORE: a destination key first, STOREDIST a flag.
pub(super) const GEOSEARCHSTORE: u8 = 1 << 4;

/// The sorted set at `key` (empty if there is none), its entries ordered
/// by score then member; `WRONGTYPE` for another kind.
fn load_zset<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>, key: &[u8]) -> Result<Option<Vec<u8>>, Fail> {
    c.load(key, Kind::ZSet)
}

fn entries_of(blob: &Option<Vec<u8>>) -> Result<Vec<(f64, &[u8])>, Fail> {
    let mut entries = Vec::new();
    if let Some(b) = blob {
        decode_zset(b, &mut entries)?;
    }
    Ok(entries)
}

fn score_of(entries: &[(f64, &[u8])], member: &[u8]) -> Option<f64> {
    entries.iter().find(|e| e.1 == member).map(|e| e.0)
}

/// Redis's `extractLongLatOrReply`: arguments `i` and `i + 1` as a
/// longitude and a latitude inside the WGS-84 limits.
fn lon_lat<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &Ctx<'_, '_, K, S>, i: usize) -> Result<[f64; 2], Fail> {
    let lon = parse_score(c.arg(i)).ok_or(Fail::NotFloat)?;
    let lat = parse_score(c.arg(i + 1)).ok_or(Fail::NotFloat)?;
    if !(geohash::LONG_MIN..=geohash::LONG_MAX).contains(&lon) || !(geohash::LAT_MIN..=geohash::LAT_MAX).contains(&lat) {
        return Err(Fail::Text(format!("ERR invalid longitude,latitude pair {lon:.6},{lat:.6}")));
    }
    Ok([lon, lat])
}

/// Redis's `extractUnitOrReply`: metres per unit.
fn unit(word: &[u8]) -> Result<f64, Fail> {
    let is = |w: &[u8]| word.eq_ignore_ascii_case(w);
    if is(b"m") {
        Ok(1.0)
    } else if is(b"km") {
        Ok(1000.0)
    } else if is(b"ft") {
        Ok(0.3048)
    } else if is(b"mi") {
        Ok(1609.34)
    } else {
        Err(Fail::err("unsupported unit provided. please use M, KM, FT, MI"))
    }
}

/// A double argument, or `ERR {msg}` (Redis's `getDoubleFromObjectOrReply`
/// with a message).
fn double_arg(arg: &[u8], msg: &str) -> Result<f64, Fail> {
    parse_score(arg).ok_or_else(|| Fail::err(msg))
}

/// Redis's `extractDistanceOrReply`: `radius unit` at `i`, as (radius, metres per unit).
fn distance_arg<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &Ctx<'_, '_, K, S>, i: usize) -> Result<(f64, f64), Fail> {
    let radius = double_arg(c.arg(i), "need numeric radius")?;
    if radius < 0.0 {
        return Err(Fail::err("radius cannot be negative"));
    }
    Ok((radius, unit(c.arg(i + 1))?))
}

/// Redis's `extractBoxOrReply`: `width height unit` at `i`.
fn box_arg<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &Ctx<'_, '_, K, S>, i: usize) -> Result<(f64, f64, f64), Fail> {
    let width = double_arg(c.arg(i), "need numeric width")?;
    let height = double_arg(c.arg(i + 1), "need numeric height")?;
    if height < 0.0 || width < 0.0 {
        return Err(Fail::err("height or width cannot be negative"));
    }
    Ok((width, height, unit(c.arg(i + 2))?))
}

/// A coordinate as `addReplyHumanLongDouble`: a bulk string in RESP2, a double in RESP3.
fn reply_human<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>, d: f64) {
    let text = geohash::format_human(d);
    match c.out.protocol {
        Protocol::Resp2 => c.out.bulk(text.as_bytes()),
        Protocol::Resp3 => {
            c.out.raw(b",");
            c.out.raw(text.as_bytes());
            c.out.raw(b"\r\n");
        }
    }
}

/// GEOADD key [NX|XX] [CH] longitude latitude member [...]: ZADD of the
/// encoded positions (its reply, its `zadd` event).
pub(super) fn geoadd<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let mut f = ZaddFlags::default();
    let mut idx = 2;
    while idx < c.argc() {
        let o = c.arg(idx);
        if o.eq_ignore_ascii_case(b"nx") {
            f.nx = true;
        } else if o.eq_ignore_ascii_case(b"xx") {
            f.xx = true;
        } else if !o.eq_ignore_ascii_case(b"ch") {
            break;
        } else {
            f.ch = true;
        }
        idx += 1;
    }
    if (c.argc() - idx) % 3 != 0 || (f.xx && f.nx) {
        return Err(Fail::Syntax);
    }
    let elements = (c.argc() - idx) / 3;
    let mut pairs = Vec::with_capacity(elements);
    for i in 0..elements {
        let [lon, lat] = lon_lat(c, idx + 3 * i)?;
        let bits = geohash::encode_score(lon, lat).expect("a checked pair encodes");
        // Redis passes the score to ZADD as the integer's text, which strtod
        // rounds to the nearest double: above 2^53 (the east and north edges
        // reach 2^54) `as f64` rounds the same way.
        assert!(bits < 1u64 << 54, "two 27-bit offsets at most");
        pairs.push((bits as f64, c.arg(idx + 3 * i + 2)));
    }
    zsets::zadd_pairs(c, &f, &pairs)
}

/// GEOPOS key [member ...]: each member's `[longitude, latitude]`, or a null array.
pub(super) fn geopos<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let blob = load_zset(c, c.arg(1))?;
    let entries = entries_of(&blob)?;
    c.out.array(c.argc() - 2);
    for j in 2..c.argc() {
        match score_of(&entries, c.arg(j)) {
            None => c.out.null_array(),
            Some(score) => {
                let [lon, lat] = geohash::decode_score(score);
                c.out.array(2);
                reply_human(c, lon);
                reply_human(c, lat);
            }
        }
    }
    Ok(())
}

/// GEOHASH key [member ...]: each member's 11-character geohash, or null.
pub(super) fn geohash<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let blob = load_zset(c, c.arg(1))?;
    let entries = entries_of(&blob)?;
    c.out.array(c.argc() - 2);
    for j in 2..c.argc() {
        match score_of(&entries, c.arg(j)) {
            None => c.out.null(),
            Some(score) => c.out.bulk(&geohash::geohash_string(score)),
        }
    }
    Ok(())
}

/// GEODIST key member1 member2 [M|KM|FT|MI]: null if either is missing.
pub(super) fn geodist<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let to_meter = match c.argc() {
        5 => unit(c.arg(4))?,
        n if n > 5 => return Err(Fail::Syntax),
        _ => 1.0,
    };
    let blob = load_zset(c, c.arg(1))?;
    let entries = entries_of(&blob)?;
    match (score_of(&entries, c.arg(2)), score_of(&entries, c.arg(3))) {
        (Some(s1), Some(s2)) => {
            let [lon1, lat1] = geohash::decode_score(s1);
            let [lon2, lat2] = geohash::decode_score(s2);
            let d = geohash::distance(lon1, lat1, lon2, lat2) / to_meter;
            c.out.bulk(geohash::format_distance(d).as_bytes());
        }
        _ => c.out.null(),
    }
    Ok(())
}

/// A point a search found (Redis's `geoPoint`).
#[derive(Clone)]
struct Point<'a> {
    xy: [f64; 2],
    dist: f64,
    score: f64,
    member: &'a [u8],
}

/// What a search's options asked for.
#[derive(Default)]
struct Options<'r> {
    withdist: bool,
    withhash: bool,
    withcoords: bool,
    any: bool,
    /// 0: none; 1: ascending; 2: descending (Redis's SORT_*).
    sort: u8,
    count: i64,
    storekey: Option<&'r [u8]>,
    storedist: bool,
    frommember: bool,
    fromloc: bool,
    byradius: bool,
    bybox: bool,
}

/// The search commands, Redis's `georadiusGeneric` step by step: the source
/// key's type, the centre and radius of the GEORADIUS forms, the options
/// (each checked as it is read), their conflicts, then the search.
pub(super) fn search<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>, flags: u8) -> Res {
    let src = if flags & GEOSEARCHSTORE != 0 { 2 } else { 1 };
    let blob = load_zset(c, c.arg(src))?;
    let entries = entries_of(&blob)?;
    let exists = blob.is_some();
    let mut shape = Shape { xy: [0.0; 2], conversion: 0.0, kind: ShapeKind::Radius(0.0) };
    let mut o = Options::default();
    let base_args = if flags & RADIUS_COORDS != 0 {
        shape.xy = lon_lat(c, 2)?;
        let (radius, conversion) = distance_arg(c, 4)?;
        (shape.kind, shape.conversion) = (ShapeKind::Radius(radius), conversion);
        6
    } else if flags & RADIUS_MEMBER != 0 && !exists {
        5
    } else if flags & RADIUS_MEMBER != 0 {
        shape.xy = member_xy(&entries, c.arg(2))?;
        let (radius, conversion) = distance_arg(c, 3)?;
        (shape.kind, shape.conversion) = (ShapeKind::Radius(radius), conversion);
        5
    } else {
        assert!(flags & GEOSEARCH != 0, "a search command has a search type");
        if flags & GEOSEARCHSTORE != 0 {
            o.storekey = Some(c.arg(1));
            3
        } else {
            2
        }
    };
    parse_options(c, flags, base_args, exists, &entries, &mut shape, &mut o)?;
    check_options(c, flags, &o)?;
    if !exists {
        if let Some(key) = o.storekey {
            c.store_collection(key, Kind::ZSet, &[] as &[(f64, &[u8])], encode_zset, Expiry::Clear)?;
            c.out.integer(0);
        } else {
            c.out.array(0);
        }
        return Ok(());
    }
    if o.count != 0 && o.sort == 0 && !o.any {
        o.sort = 1;
    }
    let limit = if o.any { o.count as usize } else { 0 };
    let mut points = members_of_all_neighbors(&entries, &shape, limit);
    if points.is_empty() && o.storekey.is_none() {
        c.out.array(0);
        return Ok(());
    }
    let returned = if o.count == 0 || (points.len() as i64) < o.count { points.len() } else { o.count as usize };
    sort_points(&mut points, o.sort, returned);
    points.truncate(returned);
    for p in points.iter_mut() {
        p.dist /= shape.conversion;
    }
    match o.storekey {
        None => reply_points(c, &o, &points),
        Some(key) => {
            let mut stored: Vec<(f64, &[u8])> =
                points.iter().map(|p| (if o.storedist { p.dist } else { p.score }, p.member)).collect();
            stored.sort_by(|a, b| zcmp(*a, *b));
            c.store_collection(key, Kind::ZSet, &stored, encode_zset, Expiry::Clear)?;
            c.out.integer(returned as i64);
        }
    }
    Ok(())
}

/// Redis's `longLatFromMember`, with GEORADIUSBYMEMBER's error.
fn member_xy(entries: &[(f64, &[u8])], member: &[u8]) -> Result<[f64; 2], Fail> {
    let score = score_of(entries, member).ok_or_else(|| Fail::err("could not decode requested zset member"))?;
    Ok(geohash::decode_score(score))
}

/// The option loop of `georadiusGeneric`.
fn parse_options<'r, K: Keyspace, S: ReplySink<K::Value> + ?Sized>(
    c: &Ctx<'_, 'r, K, S>,
    flags: u8,
    base_args: usize,
    exists: bool,
    entries: &[(f64, &[u8])],
    shape: &mut Shape,
    o: &mut Options<'r>,
) -> Res {
    let remaining = c.argc().saturating_sub(base_args);
    let search = flags & GEOSEARCH != 0;
    let storing = flags & RADIUS_NOSTORE == 0 && !search;
    let mut i = 0;
    while i < remaining {
        let at = base_args + i;
        let arg = c.arg(at);
        let is = |w: &[u8]| arg.eq_ignore_ascii_case(w);
        if is(b"withdist") {
            o.withdist = true;
        } else if is(b"withhash") {
            o.withhash = true;
        } else if is(b"withcoord") {
            o.withcoords = true;
        } else if is(b"any") {
            o.any = true;
        } else if is(b"asc") {
            o.sort = 1;
        } else if is(b"desc") {
            o.sort = 2;
        } else if is(b"count") && i + 1 < remaining {
            o.count = parse_i64(c.arg(at + 1)).ok_or(Fail::NotInteger)?;
            if o.count <= 0 {
                return Err(Fail::err("COUNT must be > 0"));
            }
            i += 1;
        } else if (is(b"store") || is(b"storedist")) && i + 1 < remaining && storing {
            o.storekey = Some(c.arg(at + 1));
            o.storedist = is(b"storedist");
            i += 1;
        } else if is(b"storedist") && search && flags & GEOSEARCHSTORE != 0 {
            o.storedist = true;
        } else if is(b"frommember") && i + 1 < remaining && search && !o.fromloc {
            if exists {
                shape.xy = member_xy(entries, c.arg(at + 1))?;
            }
            o.frommember = true;
            i += 1;
        } else if is(b"fromlonlat") && i + 2 < remaining && search && !o.frommember {
            shape.xy = lon_lat(c, at + 1)?;
            o.fromloc = true;
            i += 2;
        } else if is(b"byradius") && i + 2 < remaining && search && !o.bybox {
            let (radius, conversion) = distance_arg(c, at + 1)?;
            (shape.kind, shape.conversion) = (ShapeKind::Radius(radius), conversion);
            o.byradius = true;
            i += 2;
        } else if is(b"bybox") && i + 3 < remaining && search && !o.byradius {
            let (width, height, conversion) = box_arg(c, at + 1)?;
            (shape.kind, shape.conversion) = (ShapeKind::Box { width, height }, conversion);
            o.bybox = true;
            i += 3;
        } else {
            return Err(Fail::Syntax);
        }
        i += 1;
    }
    Ok(())
}

/// The conflicts `georadiusGeneric` checks after its options.
fn check_options<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &Ctx<'_, '_, K, S>, flags: u8, o: &Options<'_>) -> Res {
    if o.storekey.is_some() && (o.withdist || o.withhash || o.withcoords) {
        let what = if flags & GEOSEARCHSTORE != 0 { "GEOSEARCHSTORE" } else { "STORE option in GEORADIUS" };
        return Err(Fail::err(&format!("{what} is not compatible with WITHDIST, WITHHASH and WITHCOORD options")));
    }
    // `%s` of the command's name as sent, cut at a NUL as C's would be.
    let name = c.arg(0).split(|&b| b == 0).next().unwrap_or_default();
    let name = String::from_utf8_lossy(name);
    if flags & GEOSEARCH != 0 && !(o.frommember || o.fromloc) {
        return Err(Fail::err(&format!("exactly one of FROMMEMBER or FROMLONLAT can be specified for {name}")));
    }
    if flags & GEOSEARCH != 0 && !(o.byradius || o.bybox) {
        return Err(Fail::err(&format!("exactly one of BYRADIUS and BYBOX can be specified for {name}")));
    }
    if o.any && o.count == 0 {
        return Err(Fail::err("the ANY argument requires COUNT argument"));
    }
    Ok(())
}

/// Redis's `membersOfAllNeighbors`: the centre cell then its neighbours,
/// skipping zero cells and a cell equal to the one read last, each read
/// as a score range; with `limit` (ANY), stops once that many are found.
fn members_of_all_neighbors<'a>(entries: &[(f64, &'a [u8])], shape: &Shape, limit: usize) -> Vec<Point<'a>> {
    let areas = geohash::areas_by_shape(shape);
    let n = areas.neighbors;
    let cells = [areas.hash, n.north, n.south, n.east, n.west, n.north_east, n.north_west, n.south_east, n.south_west];
    let mut points = Vec::new();
    let mut last_processed = 0;
    for (i, cell) in cells.iter().enumerate() {
        if cell.is_zero() {
            continue;
        }
        if last_processed != 0 && *cell == cells[last_processed] {
            continue;
        }
        if !points.is_empty() && limit != 0 && points.len() >= limit {
            break;
        }
        let (min, max) = geohash::cell_scores(*cell);
        points_in_range(entries, min as f64, max as f64, shape, limit, &mut points);
        last_processed = i;
    }
    points
}

/// Redis's `geoGetPointsInRange`: the members with `min <= score < max`
/// inside the shape, in the set's order.
fn points_in_range<'a>(entries: &[(f64, &'a [u8])], min: f64, max: f64, shape: &Shape, limit: usize, out: &mut Vec<Point<'a>>) {
    let start = entries.partition_point(|e| e.0 < min);
    for &(score, member) in entries[start..].iter().take_while(|e| e.0 < max) {
        if let Some((xy, dist)) = geohash::within_shape(shape, score) {
            out.push(Point { xy, dist, score, member });
        }
        if !out.is_empty() && limit != 0 && out.len() >= limit {
            break;
        }
    }
}

/// Sorts as Redis: glibc's `qsort` (a merge sort, [`geohash::msort`]) when every point
/// is returned, `pqsort` of the first `returned` otherwise.
fn sort_points(points: &mut [Point<'_>], sort: u8, returned: usize) {
    if sort == 0 {
        return;
    }
    let asc = |a: &Point<'_>, b: &Point<'_>| -> i32 {
        if a.dist > b.dist {
            1
        } else if a.dist == b.dist {
            0
        } else {
            -1
        }
    };
    let cmp = |a: &Point<'_>, b: &Point<'_>| if sort == 1 { asc(a, b) } else { -asc(a, b) };
    if returned == points.len() {
        geohash::msort(points, &cmp);
    } else {
        assert!(returned >= 1, "COUNT is positive");
        geohash::pqsort(points, &cmp, 0, returned - 1);
    }
}

/// The reply of a search without STORE: members, or with WITHDIST
/// WITHHASH WITHCOORD each an array of the member and those.
fn reply_points<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>, o: &Options<'_>, points: &[Point<'_>]) {
    let option_length = usize::from(o.withdist) + usize::from(o.withcoords) + usize::from(o.withhash);
    c.out.array(points.len());
    for p in points {
        if option_length > 0 {
            c.out.array(option_length + 1);
        }
        c.out.bulk(p.member);
        if o.withdist {
            c.out.bulk(geohash::format_distance(p.dist).as_bytes());
        }
        if o.withhash {
            // C's conversion to long long; a score found in a cell is below 2^53.
            c.out.integer(p.score as i64);
        }
        if o.withcoords {
            c.out.array(2);
            reply_human(c, p.xy[0]);
            reply_human(c, p.xy[1]);
        }
    }
}
