//! Geohash arithmetic, ported from Redis 7.0's `geohash.c`,
//! `geohash_helper.c` and the helpers of `geo.c`, operation for operation,
//! so that scores, coordinates, distances and search areas come out bit for
//! bit as Redis's. No I/O: the GEO commands ([`crate::exec`]'s `geo`) read
//! and write sorted sets and call these.
//!
//! A position is a 52-bit score: 26 bits of latitude over
//! [`LAT_MIN`]..[`LAT_MAX`] and 26 of longitude over [`LONG_MIN`]..[`LONG_MAX`],
//! interleaved (longitude in the odd bits). [`HashBits::bits`] holds
//! `2 * step` bits; a cell's neighbours are found by carrying within the
//! longitude or latitude bits alone.

use std::f64::consts::PI;

/// The precision of a stored position: 26 steps, 52 bits.
pub const STEP_MAX: u8 = 26;
/// The southmost latitude a position may have (EPSG:900913's limit).
pub const LAT_MIN: f64 = -85.05112878;
/// The northmost latitude a position may have.
pub const LAT_MAX: f64 = 85.05112878;
/// The westmost longitude.
pub const LONG_MIN: f64 = -180.0;
/// The eastmost longitude.
pub const LONG_MAX: f64 = 180.0;

const D_R: f64 = PI / 180.0;
/// Earth's quadratic mean radius for WGS-84, as Redis has it.
pub const EARTH_RADIUS_IN_METERS: f64 = 6372797.560856;
const MERCATOR_MAX: f64 = 20037726.37;

/// A cell: `2 * step` interleaved bits (Redis's `GeoHashBits`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HashBits {
    /// The interleaved bits, latitude in the even positions.
    pub bits: u64,
    /// Bits per coordinate, 1..=32.
    pub step: u8,
}

impl HashBits {
    /// Redis's `HASHISZERO`: the cell a search skips.
    pub fn is_zero(&self) -> bool {
        self.bits == 0 && self.step == 0
    }

    /// Redis's `geohashAlign52Bits`: the bits moved to a 52-bit score.
    pub fn align52(&self) -> u64 {
        assert!(self.step <= STEP_MAX, "a 52-bit score holds at most 26 steps");
        self.bits << (52 - u32::from(self.step) * 2)
    }
}

/// A closed interval of one coordinate.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Range {
    /// Lower end.
    pub min: f64,
    /// Upper end.
    pub max: f64,
}

/// A cell with the coordinates it spans (Redis's `GeoHashArea`).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Area {
    /// The cell.
    pub hash: HashBits,
    /// Its longitudes.
    pub longitude: Range,
    /// Its latitudes.
    pub latitude: Range,
}

/// The range positions are encoded over: longitudes and latitudes.
pub const WGS84: (Range, Range) = (Range { min: LONG_MIN, max: LONG_MAX }, Range { min: LAT_MIN, max: LAT_MAX });

/// The range of the standard geohash string (GEOHASH): latitudes over -90..90.
pub const STANDARD: (Range, Range) = (Range { min: -180.0, max: 180.0 }, Range { min: -90.0, max: 90.0 });

fn interleave64(xlo: u32, ylo: u32) -> u64 {
    const B: [u64; 5] = [0x5555555555555555, 0x3333333333333333, 0x0F0F0F0F0F0F0F0F, 0x00FF00FF00FF00FF, 0x0000FFFF0000FFFF];
    const S: [u32; 5] = [1, 2, 4, 8, 16];
    let (mut x, mut y) = (u64::from(xlo), u64::from(ylo));
    for i in (0..5).rev() {
        x = (x | (x << S[i])) & B[i];
        y = (y | (y << S[i])) & B[i];
    }
    x | (y << 1)
}

fn deinterleave64(interleaved: u64) -> u64 {
    const B: [u64; 6] =
        [0x5555555555555555, 0x3333333333333333, 0x0F0F0F0F0F0F0F0F, 0x00FF00FF00FF00FF, 0x0000FFFF0000FFFF, 0x00000000FFFFFFFF];
    const S: [u32; 6] = [0, 1, 2, 4, 8, 16];
    let (mut x, mut y) = (interleaved, interleaved >> 1);
    for i in 0..6 {
        x = (x | (x >> S[i])) & B[i];
        y = (y | (y >> S[i])) & B[i];
    }
    x | (y << 32)
}

/// Redis's `geohashEncode`: the cell of `step` bits holding the point, or
/// `None` for a point outside the WGS-84 limits or `ranges`, or a step
/// outside 1..=32.
pub fn encode(ranges: (Range, Range), longitude: f64, latitude: f64, step: u8) -> Option<HashBits> {
    let (long_range, lat_range) = ranges;
    if step > 32 || step == 0 {
        return None;
    }
    if !(LONG_MIN..=LONG_MAX).contains(&longitude) || !(LAT_MIN..=LAT_MAX).contains(&latitude) {
        return None;
    }
    if latitude < lat_range.min || latitude > lat_range.max || longitude < long_range.min || longitude > long_range.max {
        return None;
    }
    let scale = (1u64 << step) as f64;
    let lat_offset = (latitude - lat_range.min) / (lat_range.max - lat_range.min) * scale;
    let long_offset = (longitude - long_range.min) / (long_range.max - long_range.min) * scale;
    // C converts these to uint32_t: both are in 0..=2^step, truncated.
    Some(HashBits { bits: interleave64(lat_offset as u32, long_offset as u32), step })
}

/// Redis's `geohashDecode`: the area of a cell (`None` for the zero cell).
pub fn decode(ranges: (Range, Range), hash: HashBits) -> Option<Area> {
    if hash.is_zero() {
        return None;
    }
    let (long_range, lat_range) = ranges;
    let hash_sep = deinterleave64(hash.bits);
    let lat_scale = lat_range.max - lat_range.min;
    let long_scale = long_range.max - long_range.min;
    let ilato = hash_sep as u32;
    let ilono = (hash_sep >> 32) as u32;
    let div = (1u64 << hash.step) as f64;
    // `ilato + 1` is a uint32_t sum in C: it wraps at 2^32.
    Some(Area {
        hash,
        latitude: Range {
            min: lat_range.min + (f64::from(ilato) / div) * lat_scale,
            max: lat_range.min + (f64::from(ilato.wrapping_add(1)) / div) * lat_scale,
        },
        longitude: Range {
            min: long_range.min + (f64::from(ilono) / div) * long_scale,
            max: long_range.min + (f64::from(ilono.wrapping_add(1)) / div) * long_scale,
        },
    })
}

/// Redis's `geohashDecodeAreaToLongLat`: the centre of an area, clamped to
/// the WGS-84 limits, as `[longitude, latitude]`.
pub fn area_center(area: &Area) -> [f64; 2] {
    let lon = ((area.longitude.min + area.longitude.max) / 2.0).clamp(LONG_MIN, LONG_MAX);
    let lat = ((area.latitude.min + area.latitude.max) / 2.0).clamp(LAT_MIN, LAT_MAX);
    [lon, lat]
}

/// C's `(uint64_t)` conversion of a double as x86-64 code does it (what
/// Redis's `decodeGeohash` does to any score, a geo score or not): below
/// 2^63 a signed truncation (the "integer indefinite" 2^63 when it does not
/// fit), from 2^63 on the truncation of `d - 2^63` with the top bit flipped.
pub fn c_double_to_u64(d: f64) -> u64 {
    const TWO63: f64 = 9223372036854775808.0;
    let signed = |x: f64| if (-TWO63..TWO63).contains(&x) { x as i64 as u64 } else { 1u64 << 63 };
    if d < TWO63 || d.is_nan() {
        signed(d)
    } else {
        signed(d - TWO63) ^ (1u64 << 63)
    }
}

/// Redis's `decodeGeohash`: the `[longitude, latitude]` a sorted-set score
/// stands for.
pub fn decode_score(score: f64) -> [f64; 2] {
    let hash = HashBits { bits: c_double_to_u64(score), step: STEP_MAX };
    area_center(&decode(WGS84, hash).expect("a 26-step cell is never the zero cell"))
}

/// The 52-bit score of a position inside the WGS-84 limits (GEOADD).
pub fn encode_score(longitude: f64, latitude: f64) -> Option<u64> {
    encode(WGS84, longitude, latitude, STEP_MAX).map(|h| h.align52())
}

/// Odd bits of an interleaved hash: longitude's; even bits: latitude's.
const X_BITS: u64 = 0xaaaaaaaaaaaaaaaa;
const Y_BITS: u64 = 0x5555555555555555;

/// Moves `hash` one cell east (`d` > 0) or west (`d` < 0): Redis's
/// `geohash_move_x`.
fn move_x(hash: &mut HashBits, d: i8) {
    move_lane(hash, d, X_BITS, Y_BITS);
}

/// Moves `hash` one cell north or south: Redis's `geohash_move_y`.
fn move_y(hash: &mut HashBits, d: i8) {
    move_lane(hash, d, Y_BITS, X_BITS);
}

/// Adds or subtracts one in the interleaved lane `lane` of `hash` (the
/// other lane's bits filled in so that the carry passes over them).
fn move_lane(hash: &mut HashBits, d: i8, lane: u64, other: u64) {
    if d == 0 {
        return;
    }
    let shift = 64 - u32::from(hash.step) * 2;
    let mut moved = hash.bits & lane;
    let kept = hash.bits & other;
    let zz = other >> shift;
    if d > 0 {
        moved = moved.wrapping_add(zz + 1);
    } else {
        moved |= zz;
        moved = moved.wrapping_sub(zz + 1);
    }
    moved &= lane >> shift;
    hash.bits = moved | kept;
}

/// A cell's eight neighbours (Redis's `GeoHashNeighbors`).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Neighbors {
    /// North.
    pub north: HashBits,
    /// East.
    pub east: HashBits,
    /// West.
    pub west: HashBits,
    /// South.
    pub south: HashBits,
    /// North-east.
    pub north_east: HashBits,
    /// South-east.
    pub south_east: HashBits,
    /// North-west.
    pub north_west: HashBits,
    /// South-west.
    pub south_west: HashBits,
}

/// Redis's `geohashNeighbors`; the cells wrap around at the edges.
pub fn neighbors(hash: &HashBits) -> Neighbors {
    assert!(hash.step >= 1, "a cell has at least one step");
    assert!(hash.step <= 32);
    let moved = |dx: i8, dy: i8| {
        let mut h = *hash;
        move_x(&mut h, dx);
        move_y(&mut h, dy);
        h
    };
    Neighbors {
        north: moved(0, 1),
        east: moved(1, 0),
        west: moved(-1, 0),
        south: moved(0, -1),
        north_east: moved(1, 1),
        south_east: moved(1, -1),
        north_west: moved(-1, 1),
        south_west: moved(-1, -1),
    }
}

fn deg_rad(ang: f64) -> f64 {
    ang * D_R
}

fn rad_deg(ang: f64) -> f64 {
    ang / D_R
}

/// Redis's `geohashEstimateStepsByRadius`.
pub fn estimate_steps_by_radius(range_meters: f64, lat: f64) -> u8 {
    if range_meters == 0.0 {
        return 26;
    }
    let mut range_meters = range_meters;
    let mut step: i32 = 1;
    while range_meters < MERCATOR_MAX {
        range_meters *= 2.0;
        step += 1;
    }
    step -= 2;
    if !(-66.0..=66.0).contains(&lat) {
        step -= 1;
        if !(-80.0..=80.0).contains(&lat) {
            step -= 1;
        }
    }
    step.clamp(1, 26) as u8
}

/// What a search covers (Redis's `GeoShape`): a circle or an axis-aligned
/// box around a centre; lengths in the unit that `conversion` turns into
/// metres.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shape {
    /// `[longitude, latitude]` of the centre.
    pub xy: [f64; 2],
    /// Metres per unit.
    pub conversion: f64,
    /// The radius or the box.
    pub kind: ShapeKind,
}

/// A [`Shape`]'s form.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ShapeKind {
    /// BYRADIUS / GEORADIUS.
    Radius(f64),
    /// BYBOX width height.
    Box {
        /// East-west extent.
        width: f64,
        /// North-south extent.
        height: f64,
    },
}

/// Redis's `geohashBoundingBox`: `[min_lon, min_lat, max_lon, max_lat]`.
pub fn bounding_box(shape: &Shape) -> [f64; 4] {
    let [longitude, latitude] = shape.xy;
    let (height, width) = match shape.kind {
        ShapeKind::Radius(r) => (shape.conversion * r, shape.conversion * r),
        ShapeKind::Box { width, height } => (shape.conversion * (height / 2.0), shape.conversion * (width / 2.0)),
    };
    let lat_delta = rad_deg(height / EARTH_RADIUS_IN_METERS);
    let long_delta_top = rad_deg(width / EARTH_RADIUS_IN_METERS / deg_rad(latitude + lat_delta).cos());
    let long_delta_bottom = rad_deg(width / EARTH_RADIUS_IN_METERS / deg_rad(latitude - lat_delta).cos());
    let southern = latitude < 0.0;
    let delta = if southern { long_delta_bottom } else { long_delta_top };
    [longitude - delta, latitude - lat_delta, longitude + delta, latitude + lat_delta]
}

/// The nine cells a search reads (Redis's `GeoHashRadius`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SearchAreas {
    /// The centre's cell.
    pub hash: HashBits,
    /// Its neighbours; a zero cell is skipped.
    pub neighbors: Neighbors,
    /// The centre cell's area.
    pub area: Area,
}

/// Redis's `geohashCalculateAreasByShapeWGS84`.
pub fn areas_by_shape(shape: &Shape) -> SearchAreas {
    let [min_lon, min_lat, max_lon, max_lat] = bounding_box(shape);
    let [longitude, latitude] = shape.xy;
    let radius_meters = match shape.kind {
        ShapeKind::Radius(r) => r,
        ShapeKind::Box { width, height } => ((width / 2.0) * (width / 2.0) + (height / 2.0) * (height / 2.0)).sqrt(),
    } * shape.conversion;
    let mut steps = estimate_steps_by_radius(radius_meters, latitude);
    // The centre is inside the WGS-84 limits (the commands check), so it encodes.
    let cells = |steps: u8| {
        let hash = encode(WGS84, longitude, latitude, steps).expect("the centre is inside the limits");
        let area = decode(WGS84, hash).expect("a cell of a step is not zero");
        (hash, neighbors(&hash), area)
    };
    let (mut hash, mut nb, mut area) = cells(steps);
    let area_of = |h: HashBits| decode(WGS84, h).unwrap_or_default();
    let decrease_step = area_of(nb.north).latitude.max < max_lat
        || area_of(nb.south).latitude.min > min_lat
        || area_of(nb.east).longitude.max < max_lon
        || area_of(nb.west).longitude.min > min_lon;
    if steps > 1 && decrease_step {
        steps -= 1;
        (hash, nb, area) = cells(steps);
    }
    if steps >= 2 {
        let zero = HashBits::default();
        if area.latitude.min < min_lat {
            (nb.south, nb.south_west, nb.south_east) = (zero, zero, zero);
        }
        if area.latitude.max > max_lat {
            (nb.north, nb.north_east, nb.north_west) = (zero, zero, zero);
        }
        if area.longitude.min < min_lon {
            (nb.west, nb.south_west, nb.north_west) = (zero, zero, zero);
        }
        if area.longitude.max > max_lon {
            (nb.east, nb.south_east, nb.north_east) = (zero, zero, zero);
        }
    }
    SearchAreas { hash, neighbors: nb, area }
}

/// Redis's `geohashGetLatDistance`: metres between two latitudes.
pub fn lat_distance(lat1d: f64, lat2d: f64) -> f64 {
    EARTH_RADIUS_IN_METERS * (deg_rad(lat2d) - deg_rad(lat1d)).abs()
}

/// Redis's `geohashGetDistance`: the haversine distance in metres.
pub fn distance(lon1d: f64, lat1d: f64, lon2d: f64, lat2d: f64) -> f64 {
    let lon1r = deg_rad(lon1d);
    let lon2r = deg_rad(lon2d);
    let v = ((lon2r - lon1r) / 2.0).sin();
    if v == 0.0 {
        return lat_distance(lat1d, lat2d);
    }
    let lat1r = deg_rad(lat1d);
    let lat2r = deg_rad(lat2d);
    let u = ((lat2r - lat1r) / 2.0).sin();
    let a = u * u + lat1r.cos() * lat2r.cos() * v * v;
    2.0 * EARTH_RADIUS_IN_METERS * a.sqrt().asin()
}

/// Redis's `geoWithinShape`: the point of `score` and its distance in
/// metres from the centre, if it is inside the shape.
pub fn within_shape(shape: &Shape, score: f64) -> Option<([f64; 2], f64)> {
    let xy = decode_score(score);
    let [cx, cy] = shape.xy;
    let dist = match shape.kind {
        ShapeKind::Radius(r) => {
            let d = distance(cx, cy, xy[0], xy[1]);
            if d > r * shape.conversion {
                return None;
            }
            d
        }
        ShapeKind::Box { width, height } => {
            let (width_m, height_m) = (width * shape.conversion, height * shape.conversion);
            if lat_distance(xy[1], cy) > height_m / 2.0 {
                return None;
            }
            if distance(xy[0], xy[1], cx, xy[1]) > width_m / 2.0 {
                return None;
            }
            distance(cx, cy, xy[0], xy[1])
        }
    };
    Some((xy, dist))
}

/// Redis's `scoresOfGeoHashBox`: the scores `min <= s < max` of a cell.
pub fn cell_scores(hash: HashBits) -> (u64, u64) {
    let min = hash.align52();
    let max = HashBits { bits: hash.bits + 1, step: hash.step }.align52();
    (min, max)
}

/// The 11-character geohash string of a score (GEOHASH): decoded, then
/// encoded again over the standard -90..90 latitudes, the eleventh
/// character always `0` as Redis's.
pub fn geohash_string(score: f64) -> [u8; 11] {
    const ALPHABET: &[u8; 32] = b"0123456789bcdefghjkmnpqrstuvwxyz";
    let [lon, lat] = decode_score(score);
    // A decoded point is inside the limits, so inside the standard ranges.
    let hash = encode(STANDARD, lon, lat, 26).expect("a decoded point encodes");
    let mut out = [b'0'; 11];
    for (i, c) in out.iter_mut().enumerate().take(10) {
        let idx = (hash.bits >> (52 - (i + 1) * 5)) & 0x1f;
        *c = ALPHABET[idx as usize];
    }
    out
}

/// A distance as Redis's `addReplyDoubleDistance` writes it
/// (`fixedpoint_d2string` with 4 digits: `llrint` of `d * 10000`).
pub fn format_distance(d: f64) -> String {
    if d == 0.0 {
        return "0.0000".into();
    }
    let scaled = (d * 10000.0).round_ties_even();
    // llrint of a value out of range is LLONG_MIN on x86-64; distances
    // are at most half the Earth's circumference over 0.3048.
    let v = if (-9.2e18..9.2e18).contains(&scaled) { scaled as i64 } else { i64::MIN };
    let sign = if v < 0 { "-" } else { "" };
    let u = v.unsigned_abs();
    format!("{sign}{}.{:04}", u / 10000, u % 10000)
}

/// A coordinate as Redis's `addReplyHumanLongDouble` writes it (`%.17Lf`,
/// trailing zeros and a bare dot removed, `-0` as `0`).
pub fn format_human(d: f64) -> String {
    if d.is_infinite() {
        return if d > 0.0 { "inf".into() } else { "-inf".into() };
    }
    let mut s = format!("{d:.17}");
    if s.contains('.') {
        let trimmed = s.trim_end_matches('0').trim_end_matches('.').len();
        s.truncate(trimmed);
    }
    if s == "-0" {
        s = "0".into();
    }
    s
}

/// glibc's `qsort` as Redis's build on glibc 2.36 runs it (`msort.c`: a
/// top-down merge sort, the left run taken on a tie), comparison for
/// comparison, so even a comparator that is not a total order (a NaN
/// distance compares below everything both ways) orders as Redis's does,
/// where the standard library's sort may panic on one.
pub fn msort<T: Clone>(a: &mut [T], cmp: &impl Fn(&T, &T) -> i32) {
    let n = a.len();
    if n <= 1 {
        return;
    }
    let n1 = n / 2;
    msort(&mut a[..n1], cmp);
    msort(&mut a[n1..], cmp);
    let mut merged = Vec::with_capacity(n);
    let (mut i, mut j) = (0, n1);
    while i < n1 && j < n {
        if cmp(&a[i], &a[j]) <= 0 {
            merged.push(a[i].clone());
            i += 1;
        } else {
            merged.push(a[j].clone());
            j += 1;
        }
    }
    merged.extend_from_slice(&a[i..n1]);
    let done = merged.len();
    a[..done].clone_from_slice(&merged);
}

/// Redis's `pqsort` (Bentley-McIlroy quicksort that sorts only what
/// `lrange..=rrange` needs): the first `rrange + 1` of `a` in order,
/// and ties placed exactly where Redis places them.
pub fn pqsort<T>(a: &mut [T], cmp: &impl Fn(&T, &T) -> i32, lrange: usize, rrange: usize) {
    pqsort_at(a, 0, a.len(), cmp, lrange, rrange);
}

fn med3<T>(a: &[T], i: usize, j: usize, k: usize, cmp: &impl Fn(&T, &T) -> i32) -> usize {
    if cmp(&a[i], &a[j]) < 0 {
        if cmp(&a[j], &a[k]) < 0 {
            j
        } else if cmp(&a[i], &a[k]) < 0 {
            k
        } else {
            i
        }
    } else if cmp(&a[j], &a[k]) > 0 {
        j
    } else if cmp(&a[i], &a[k]) < 0 {
        i
    } else {
        k
    }
}

fn vecswap<T>(a: &mut [T], i: usize, j: usize, n: usize) {
    for k in 0..n {
        a.swap(i + k, j + k);
    }
}

/// `_pqsort` over `a[lo..lo + n]`, in element positions where C has byte
/// pointers; `lrange..=rrange` are absolute positions.
fn pqsort_at<T>(a: &mut [T], mut lo: usize, mut n: usize, cmp: &impl Fn(&T, &T) -> i32, lrange: usize, rrange: usize) {
    // Whether [l, l + len) lies wholly before or wholly after the wanted range.
    let outside = |l: usize, len: usize| (lrange < l && rrange < l) || (lrange >= l + len && rrange >= l + len);
    loop {
        if n < 7 {
            for pm in lo + 1..lo + n {
                let mut pl = pm;
                while pl > lo && cmp(&a[pl - 1], &a[pl]) > 0 {
                    a.swap(pl, pl - 1);
                    pl -= 1;
                }
            }
            return;
        }
        let pm = pivot(a, lo, n, cmp);
        a.swap(lo, pm);
        let (less, greater) = partition(a, lo, n, cmp);
        if less > 1 && !outside(lo, less) {
            pqsort_at(a, lo, less, cmp, lrange, rrange);
        }
        if greater <= 1 {
            return;
        }
        lo += n - greater;
        n = greater;
        if outside(lo, n) {
            return;
        }
    }
}

/// The pivot's position: the median of three, or of three medians past 40.
fn pivot<T>(a: &[T], lo: usize, n: usize, cmp: &impl Fn(&T, &T) -> i32) -> usize {
    let mut pm = lo + n / 2;
    if n > 7 {
        let mut pl = lo;
        let mut pn = lo + n - 1;
        if n > 40 {
            let d = n / 8;
            pl = med3(a, pl, pl + d, pl + 2 * d, cmp);
            pm = med3(a, pm - d, pm, pm + d, cmp);
            pn = med3(a, pn - 2 * d, pn - d, pn, cmp);
        }
        pm = med3(a, pl, pm, pn, cmp);
    }
    pm
}

/// Bentley-McIlroy's three-way partition of `a[lo..lo + n]` around the
/// pivot at `lo`: the elements below it end at the front, those above it
/// at the back, equal ones between; returns how many are below and above.
fn partition<T>(a: &mut [T], lo: usize, n: usize, cmp: &impl Fn(&T, &T) -> i32) -> (usize, usize) {
    let (mut pa, mut pb) = (lo + 1, lo + 1);
    // C's pc can step to lo (one before pb): positions stay >= lo, so usize.
    let (mut pc, mut pd) = (lo + n - 1, lo + n - 1);
    loop {
        while pb <= pc {
            let r = cmp(&a[pb], &a[lo]);
            if r > 0 {
                break;
            }
            if r == 0 {
                a.swap(pa, pb);
                pa += 1;
            }
            pb += 1;
        }
        while pb <= pc {
            let r = cmp(&a[pc], &a[lo]);
            if r < 0 {
                break;
            }
            if r == 0 {
                a.swap(pc, pd);
                pd -= 1;
            }
            pc -= 1;
        }
        if pb > pc {
            break;
        }
        a.swap(pb, pc);
        pb += 1;
        pc -= 1;
    }
    let pn = lo + n;
    let r = (pa - lo).min(pb - pa);
    vecswap(a, lo, pb - r, r);
    let r = (pd - pc).min(pn - pd - 1);
    vecswap(a, pb, pn - r, r);
    (pb - pa, pd - pc)
}

#[cfg(test)]
mod tests;
