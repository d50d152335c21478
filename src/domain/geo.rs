//! Coordinates: validation, distance, the map grid and bounding boxes.
//!
//! The map grid splits the world into 0.1-degree cells (about 11 km of
//! latitude), numbered row by row from the south-west corner. Moments and
//! locations store their cell; a box becomes a few ranges of cell numbers
//! (one per row it crosses, merged where they touch), so the map query walks
//! the index entries of the box and nothing else.

use crate::error::{AppError, AppResult};

/// Cells per degree.
const CELLS_PER_DEGREE: f64 = 10.0;
/// Cells in one row (360 degrees of longitude).
const COLUMNS: i64 = 3600;
/// Rows (180 degrees of latitude).
const ROWS: i64 = 1800;
/// Beyond this many ranges a box is walked as one band of rows instead.
const MAX_RANGES: usize = 200;
/// Mean Earth radius in metres.
const EARTH_RADIUS_M: f64 = 6_371_008.8;

/// Checks a latitude and longitude: finite, -90..90 and -180..180.
pub fn validate_point(latitude: f64, longitude: f64) -> AppResult<()> {
    if !latitude.is_finite() || !(-90.0..=90.0).contains(&latitude) {
        return Err(AppError::bad_input("latitude must be between -90 and 90"));
    }
    if !longitude.is_finite() || !(-180.0..=180.0).contains(&longitude) {
        return Err(AppError::bad_input(
            "longitude must be between -180 and 180",
        ));
    }
    Ok(())
}

fn row(latitude: f64) -> i64 {
    // Truncation is intended: the floor of a value already in range.
    let r = ((latitude + 90.0) * CELLS_PER_DEGREE).floor() as i64;
    r.clamp(0, ROWS - 1)
}

fn column(longitude: f64) -> i64 {
    let c = ((longitude + 180.0) * CELLS_PER_DEGREE).floor() as i64;
    c.clamp(0, COLUMNS - 1)
}

/// The grid cell of a (valid) point.
pub fn map_cell(latitude: f64, longitude: f64) -> i64 {
    row(latitude) * COLUMNS + column(longitude)
}

/// Great-circle distance in metres (haversine).
pub fn distance_m(lat1: f64, lon1: f64, lat2: f64, lon2: f64) -> f64 {
    let (p1, p2) = (lat1.to_radians(), lat2.to_radians());
    let dp = (lat2 - lat1).to_radians();
    let dl = (lon2 - lon1).to_radians();
    let a = (dp / 2.0).sin().powi(2) + p1.cos() * p2.cos() * (dl / 2.0).sin().powi(2);
    2.0 * EARTH_RADIUS_M * a.sqrt().min(1.0).asin()
}

/// Degrees of latitude spanning `metres` (an upper bound for a search band).
pub fn latitude_span(metres: f64) -> f64 {
    (metres / EARTH_RADIUS_M).to_degrees()
}

/// A map box. `west > east` means it crosses the antimeridian.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BoundingBox {
    pub south: f64,
    pub west: f64,
    pub north: f64,
    pub east: f64,
}

impl BoundingBox {
    /// Checks the box: corners valid, south not above north.
    pub fn validate(&self) -> AppResult<()> {
        validate_point(self.south, self.west)
            .and_then(|()| validate_point(self.north, self.east))
            .map_err(|e| AppError::bad_input(format!("invalid bbox: {}", e.message())))?;
        if self.south > self.north {
            return Err(AppError::bad_input(
                "invalid bbox: south must not be above north",
            ));
        }
        Ok(())
    }

    /// Whether the box crosses the antimeridian.
    pub fn crosses_antimeridian(&self) -> bool {
        self.west > self.east
    }

    /// Inclusive ranges of grid cells that cover the box, merged where they
    /// touch; a box that would need more than [`MAX_RANGES`] becomes one band
    /// of whole rows.
    pub fn cell_ranges(&self) -> Vec<(i64, i64)> {
        let (r0, r1) = (row(self.south), row(self.north));
        let (w, e) = (column(self.west), column(self.east));
        let segments: Vec<(i64, i64)> = if self.crosses_antimeridian() {
            vec![(0, e), (w, COLUMNS - 1)]
        } else {
            vec![(w, e)]
        };
        let rows = usize::try_from(r1 - r0 + 1).unwrap_or(usize::MAX);
        if rows.saturating_mul(segments.len()) > MAX_RANGES {
            return vec![(r0 * COLUMNS, r1 * COLUMNS + COLUMNS - 1)];
        }
        let mut out: Vec<(i64, i64)> = Vec::new();
        for r in r0..=r1 {
            for &(c0, c1) in &segments {
                let (lo, hi) = (r * COLUMNS + c0, r * COLUMNS + c1);
                match out.last_mut() {
                    Some(last) if last.1 + 1 >= lo => last.1 = last.1.max(hi),
                    _ => out.push((lo, hi)),
                }
            }
        }
        out
    }

    /// Every grid cell of the box, when it has at most `max` of them.
    pub fn cells(&self, max: usize) -> Option<Vec<i64>> {
        let ranges = self.cell_ranges();
        let count: i64 = ranges.iter().map(|(lo, hi)| hi - lo + 1).sum();
        if usize::try_from(count).map_or(true, |n| n > max) {
            return None;
        }
        Some(ranges.into_iter().flat_map(|(lo, hi)| lo..=hi).collect())
    }

    /// Whether a point lies in the box (edges included).
    pub fn contains(&self, latitude: f64, longitude: f64) -> bool {
        let lat_ok = (self.south..=self.north).contains(&latitude);
        let lon_ok = if self.crosses_antimeridian() {
            longitude >= self.west || longitude <= self.east
        } else {
            (self.west..=self.east).contains(&longitude)
        };
        lat_ok && lon_ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_are_checked() {
        assert!(validate_point(90.0, -180.0).is_ok());
        assert!(validate_point(-90.0, 180.0).is_ok());
        assert!(validate_point(90.01, 0.0).is_err());
        assert!(validate_point(0.0, -180.01).is_err());
        assert!(validate_point(f64::NAN, 0.0).is_err());
        assert!(validate_point(0.0, f64::INFINITY).is_err());
    }

    #[test]
    fn cells_cover_the_world() {
        assert_eq!(map_cell(-90.0, -180.0), 0);
        assert_eq!(map_cell(90.0, 180.0), ROWS * COLUMNS - 1);
        assert_eq!(map_cell(0.05, 0.05), 900 * COLUMNS + 1800);
    }

    #[test]
    fn a_small_box_lists_its_cells() {
        let paris = BoundingBox {
            south: 48.6,
            west: 2.1,
            north: 49.1,
            east: 2.6,
        };
        let cells = paris.cells(64).unwrap();
        assert_eq!(cells.len(), 36);
        assert!(cells.contains(&map_cell(48.85, 2.35)));
        assert!(paris.cells(35).is_none());
        let wrapping = BoundingBox {
            south: 0.01,
            west: 179.95,
            north: 0.02,
            east: -179.95,
        };
        assert_eq!(
            wrapping.cells(64).unwrap(),
            vec![900 * COLUMNS, 900 * COLUMNS + 3599]
        );
    }

    #[test]
    fn distances() {
        // One degree of latitude is about 111.2 km.
        let d = distance_m(0.0, 0.0, 1.0, 0.0);
        assert!((d - 111_195.0).abs() < 10.0, "{d}");
        // Across the antimeridian.
        let d = distance_m(0.0, 179.9999, 0.0, -179.9999);
        assert!(d < 30.0, "{d}");
        assert!(latitude_span(50.0) > 0.00044 && latitude_span(50.0) < 0.00046);
    }

    #[test]
    fn boxes_become_cell_ranges() {
        let city = BoundingBox {
            south: 48.80,
            west: 2.25,
            north: 48.90,
            east: 2.42,
        };
        let ranges = city.cell_ranges();
        assert_eq!(ranges.len(), 2);
        for &(lo, hi) in &ranges {
            assert!(lo <= hi);
        }
        assert!(ranges.iter().any(|&(lo, hi)| {
            let c = map_cell(48.85, 2.35);
            (lo..=hi).contains(&c)
        }));
        // Crossing the antimeridian: the two segments of a row touch the next row's.
        let fiji = BoundingBox {
            south: -18.0,
            west: 177.0,
            north: -17.0,
            east: -179.0,
        };
        assert!(fiji.contains(-17.5, 178.0) && fiji.contains(-17.5, -179.5));
        assert!(!fiji.contains(-17.5, 0.0));
        let c = map_cell(-17.5, -179.5);
        assert!(
            fiji.cell_ranges()
                .iter()
                .any(|&(lo, hi)| (lo..=hi).contains(&c))
        );
        // The whole world: one range.
        let world = BoundingBox {
            south: -90.0,
            west: -180.0,
            north: 90.0,
            east: 180.0,
        };
        assert_eq!(world.cell_ranges(), vec![(0, ROWS * COLUMNS - 1)]);
        assert!(world.validate().is_ok());
        let upside_down = BoundingBox {
            south: 10.0,
            west: 0.0,
            north: 0.0,
            east: 1.0,
        };
        assert!(upside_down.validate().is_err());
    }
}
