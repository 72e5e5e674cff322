//! The geohash arithmetic against values Redis 7.0.15 gives (GEOADD's
//! scores, GEOPOS, GEOHASH, GEODIST as redis-server answered them), round
//! trips, neighbours and the edges of the coordinate ranges.

use super::*;

#[test]
fn scores_match_redis() {
    // GEOADD Sicily 13.361389 38.115556 Palermo 15.087269 37.502669 Catania; ZSCORE.
    assert_eq!(encode_score(13.361389, 38.115556), Some(3479099956230698));
    assert_eq!(encode_score(15.087269, 37.502669), Some(3479447370796909));
    // The corners: the west/south edge is cell 0, the east/north edge is
    // offset 2^26 (one past the last cell), as Redis's uint32_t conversion has it.
    assert_eq!(encode_score(-180.0, LAT_MIN), Some(0));
    assert_eq!(encode_score(180.0, LAT_MAX), Some(3 << 52));
    assert_eq!(encode_score(180.000001, 0.0), None);
    assert_eq!(encode_score(0.0, 85.06), None);
    assert_eq!(encode_score(0.0, -85.06), None);
}

#[test]
fn decoded_positions_and_strings_match_redis() {
    // GEOPOS Sicily Palermo / GEOHASH Sicily Palermo Catania.
    let [lon, lat] = decode_score(3479099956230698.0);
    assert_eq!(format_human(lon), "13.36138933897018433");
    assert_eq!(format_human(lat), "38.11555639549629859");
    assert_eq!(&geohash_string(3479099956230698.0), b"sqc8b49rny0");
    assert_eq!(&geohash_string(3479447370796909.0), b"sqdtr74hyu0");
    // GEODIST Sicily Palermo Catania [km].
    let [lon2, lat2] = decode_score(3479447370796909.0);
    let d = distance(lon, lat, lon2, lat2);
    assert_eq!(format_distance(d), "166274.1516");
    assert_eq!(format_distance(d / 1000.0), "166.2742");
    assert_eq!(format_distance(0.0), "0.0000");
}

#[test]
fn encode_decode_round_trips_within_a_cell() {
    let mut seed = 0x9e3779b97f4a7c15u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed >> 11) as f64 / (1u64 << 53) as f64
    };
    for _ in 0..10_000 {
        let lon = LONG_MIN + next() * 360.0;
        let lat = LAT_MIN + next() * (LAT_MAX - LAT_MIN);
        let score = encode_score(lon, lat).expect("inside the limits");
        assert!(score < 1 << 52, "52 bits inside the limits (the edge is 2^52)");
        let [dlon, dlat] = decode_score(score as f64);
        // A 26-step cell is 360/2^26 degrees wide; the centre is within half of it.
        assert!((dlon - lon).abs() <= 360.0 / (1u64 << 27) as f64, "{lon} -> {dlon}");
        assert!((dlat - lat).abs() <= (LAT_MAX - LAT_MIN) / (1u64 << 27) as f64, "{lat} -> {dlat}");
        // The decoded centre encodes to the same cell.
        assert_eq!(encode_score(dlon, dlat), Some(score));
    }
}

#[test]
fn interleaving_inverts() {
    for (x, y) in [(0u32, 0u32), (1, 0), (0, 1), (u32::MAX, 0), (0x1234_5678, 0x9abc_def0), (u32::MAX, u32::MAX)] {
        let sep = deinterleave64(interleave64(x, y));
        assert_eq!((sep as u32, (sep >> 32) as u32), (x, y));
    }
}

#[test]
fn neighbours_are_the_adjacent_cells() {
    let hash = encode(WGS84, 13.361389, 38.115556, 10).expect("inside");
    let area = decode(WGS84, hash).expect("not zero");
    let n = neighbors(&hash);
    let a = |h: HashBits| decode(WGS84, h).expect("not zero");
    let eq = |x: f64, y: f64| (x - y).abs() < 1e-9;
    assert!(eq(a(n.north).latitude.min, area.latitude.max));
    assert!(eq(a(n.south).latitude.max, area.latitude.min));
    assert!(eq(a(n.east).longitude.min, area.longitude.max));
    assert!(eq(a(n.west).longitude.max, area.longitude.min));
    assert_eq!(a(n.north).longitude, area.longitude);
    assert_eq!(a(n.east).latitude, area.latitude);
    assert!(eq(a(n.north_east).latitude.min, area.latitude.max) && eq(a(n.north_east).longitude.min, area.longitude.max));
    assert!(eq(a(n.south_west).latitude.max, area.latitude.min) && eq(a(n.south_west).longitude.max, area.longitude.min));
    // Moving east then west comes back.
    assert_eq!(neighbors(&n.east).west, hash);
    assert_eq!(neighbors(&n.north).south, hash);
}

#[test]
fn neighbours_wrap_at_the_edges() {
    // The westmost cell's west neighbour is the eastmost one (the bits wrap).
    let west_edge = encode(WGS84, -180.0, 0.0, 4).expect("inside");
    let w = decode(WGS84, neighbors(&west_edge).west).expect("not zero");
    assert_eq!(w.longitude.max, 180.0);
    let north_edge = encode(WGS84, 0.0, LAT_MAX - 1.0, 4).expect("inside");
    let nn = decode(WGS84, neighbors(&north_edge).north).expect("not zero");
    assert_eq!(nn.latitude.min, LAT_MIN);
}

#[test]
fn decoding_any_score_is_clamped_as_redis_casts_it() {
    // Scores that are not positions (ZADD wrote them) still decode, with C's
    // conversion to uint64_t: negative scores wrap, huge ones give 0.
    assert_eq!(c_double_to_u64(-1.5), u64::MAX);
    assert_eq!(c_double_to_u64(f64::NEG_INFINITY), 1 << 63);
    assert_eq!(c_double_to_u64(f64::INFINITY), 0);
    assert_eq!(c_double_to_u64(1e30), 0);
    assert_eq!(c_double_to_u64(9223372036854775808.0), 1 << 63);
    assert_eq!(c_double_to_u64(1e19), 10_000_000_000_000_000_000);
    for s in [-1.5, 1e30, f64::INFINITY, 4503599627370496.0, 1.0e17] {
        let [lon, lat] = decode_score(s);
        assert!((LONG_MIN..=LONG_MAX).contains(&lon) && (LAT_MIN..=LAT_MAX).contains(&lat), "{s}");
    }
}

#[test]
fn steps_shrink_with_the_radius_and_near_the_poles() {
    assert_eq!(estimate_steps_by_radius(0.0, 0.0), 26);
    assert_eq!(estimate_steps_by_radius(1.0, 0.0), 24);
    assert_eq!(estimate_steps_by_radius(1000.0, 0.0), 14);
    assert_eq!(estimate_steps_by_radius(1000.0, 70.0), 13);
    assert_eq!(estimate_steps_by_radius(1000.0, -81.0), 12);
    assert_eq!(estimate_steps_by_radius(1e9, 0.0), 1);
}

#[test]
fn search_areas_cover_the_shape() {
    let shape = Shape { xy: [15.0, 37.0], conversion: 1000.0, kind: ShapeKind::Radius(200.0) };
    let areas = areas_by_shape(&shape);
    let [min_lon, min_lat, max_lon, max_lat] = bounding_box(&shape);
    assert!(min_lon < 15.0 && max_lon > 15.0 && min_lat < 37.0 && max_lat > 37.0);
    // Every point of the bounding box is in the centre cell or a non-zero neighbour.
    let n = areas.neighbors;
    let cells = [areas.hash, n.north, n.south, n.east, n.west, n.north_east, n.north_west, n.south_east, n.south_west];
    for lon in [min_lon, 15.0, max_lon] {
        for lat in [min_lat, 37.0, max_lat] {
            let p = encode(WGS84, lon, lat, areas.hash.step).expect("inside");
            assert!(cells.iter().any(|c| !c.is_zero() && *c == p), "({lon}, {lat}) is covered");
        }
    }
    let (min, max) = cell_scores(areas.hash);
    assert!(min < max && max <= 1 << 52);
}

#[test]
fn box_and_radius_tests_are_redis_s() {
    let score = encode_score(13.361389, 38.115556).expect("inside") as f64;
    let circle = Shape { xy: [15.0, 37.0], conversion: 1000.0, kind: ShapeKind::Radius(200.0) };
    let (_, d) = within_shape(&circle, score).expect("Palermo is 190 km from (15, 37)");
    assert_eq!(format_distance(d / 1000.0), "190.4424");
    assert!(within_shape(&Shape { kind: ShapeKind::Radius(100.0), ..circle }, score).is_none());
    let boxed = Shape { xy: [15.0, 37.0], conversion: 1000.0, kind: ShapeKind::Box { width: 400.0, height: 400.0 } };
    assert!(within_shape(&boxed, score).is_some());
    let narrow = Shape { kind: ShapeKind::Box { width: 400.0, height: 200.0 }, ..boxed };
    assert!(within_shape(&narrow, score).is_none(), "Palermo is 124 km north of the centre");
}

#[test]
fn pqsort_orders_the_wanted_prefix() {
    let mut seed = 7u64;
    for n in [1usize, 2, 6, 7, 8, 40, 41, 100, 500] {
        for want in [1usize, 2, n / 2 + 1, n] {
            let want = want.min(n);
            let mut v: Vec<u32> = (0..n)
                .map(|_| {
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    (seed >> 33) as u32 % 50
                })
                .collect();
            let mut sorted = v.clone();
            sorted.sort_unstable();
            let cmp = |a: &u32, b: &u32| a.cmp(b) as i32;
            pqsort(&mut v, &cmp, 0, want - 1);
            assert_eq!(&v[..want], &sorted[..want], "n {n} want {want}");
        }
    }
}

#[test]
fn human_doubles_are_redis_s() {
    assert_eq!(format_human(0.0), "0");
    assert_eq!(format_human(-0.0), "0");
    assert_eq!(format_human(180.0), "180");
    assert_eq!(format_human(-85.05112878), "-85.0511287799999991");
    assert_eq!(format_human(0.5), "0.5");
}

#[test]
fn msort_is_a_stable_merge_sort_and_takes_any_comparator() {
    let mut v: Vec<(u32, usize)> = [3u32, 1, 3, 0, 1, 2, 3, 0, 2, 1].iter().copied().zip(0..).collect();
    let mut want = v.clone();
    want.sort_by_key(|e| e.0);
    let cmp = |a: &(u32, usize), b: &(u32, usize)| a.0.cmp(&b.0) as i32;
    msort(&mut v, &cmp);
    assert_eq!(v, want, "stable: ties keep their order");
    // A NaN compares below everything both ways (Redis's sort_gp_asc): no
    // panic, and the order glibc's msort gives: the halves [NaN, 2] and
    // [NaN, 1] stay as they are, then NaN (left, NaN < NaN) and 2 (2 < NaN)
    // are taken from the left run before the right run is looked at again.
    let asc = |a: &f64, b: &f64| if a > b { 1 } else if a == b { 0 } else { -1 };
    let mut d = vec![f64::NAN, 2.0, f64::NAN, 1.0];
    msort(&mut d, &asc);
    let shown: Vec<String> = d.iter().map(|x| x.to_string()).collect();
    assert_eq!(shown, ["NaN", "2", "NaN", "1"]);
}
