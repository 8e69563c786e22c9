//! The snapshot viewer's zoomed timeline: a y-range fitted to a trace's
//! own bytes, so a run that moves within a narrow band (500…534 MiB of
//! 582 MiB reserved) fills the chart instead of one or two rows of a
//! 0-based one. Pure: the viewer's key asks whether a zoom would show
//! anything a 0-based axis does not, and the timeline draws the same range.

use crate::alloc::sizing::unit_exp;

/// Steps the zoomed range is cut into, at least: its ends are whole steps,
/// so the labels read as round numbers ("490 MiB", "600 MiB").
const STEPS: f64 = 10.0;

/// The margin kept below the lowest and above the highest value, as a
/// fraction of their span: the lines do not run along the chart's edges.
const MARGIN: f64 = 0.05;

/// A zoomed y-range in the unit 1024^`exp` (2: MiB), `bottom` above 0.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ZoomRange {
    pub exp: usize,
    pub bottom: f64,
    pub top: f64,
}

/// Why a trace's timeline has no zoomed range: a 0-based axis already
/// shows all there is to see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoZoom {
    /// Every value is the same: no band to spread out.
    Flat,
    /// The lowest value is so near 0 B (within the margin and a step of
    /// the span) that the range would start at 0 B anyway.
    ReachesZero,
}

impl NoZoom {
    /// In a few words, for the help and the key's answer.
    pub fn why(self) -> &'static str {
        match self {
            NoZoom::Flat => "the timeline is flat: nothing to zoom into",
            NoZoom::ReachesZero => "the timeline reaches down to 0 B already",
        }
    }
}

/// The smallest 1, 2 or 5 × a power of ten ≥ `v` (> 0): a step of
/// round numbers.
fn nice_step(v: f64) -> f64 {
    let magnitude = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|s| s * magnitude)
        .find(|&s| s >= v * (1.0 - 1e-9))
        .unwrap_or(10.0 * magnitude)
}

/// The y-range of a timeline whose values lie within `lowest`…`highest`
/// bytes: their span with a margin either side, its ends rounded out to
/// whole steps of a tenth of it or more (1, 2 or 5 × a power of ten, in
/// the unit of `highest`), so every value drawn lies inside.
pub fn zoom_range(lowest: u64, highest: u64) -> Result<ZoomRange, NoZoom> {
    let exp = unit_exp(highest);
    let unit = 1024f64.powi(i32::try_from(exp).unwrap_or(0));
    let (lo, hi) = (lowest as f64 / unit, highest as f64 / unit);
    let span = hi - lo;
    // (A span lost to f64's precision, beyond 2^53 bytes, is flat too.)
    if !(span > 0.0 && span.is_finite()) {
        return Err(NoZoom::Flat);
    }
    let step = nice_step(span / STEPS);
    let margin = span * MARGIN;
    let bottom = ((lo - margin) / step).floor() * step;
    let top = ((hi + margin) / step).ceil() * step;
    if bottom > 0.0 && bottom < lo && top > hi {
        Ok(ZoomRange { exp, bottom, top })
    } else {
        Err(NoZoom::ReachesZero)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    #[test]
    fn a_narrow_band_is_fitted_with_round_ends_and_a_margin() {
        // silmont_fwd_fp32_128: allocated 500…534 MiB, reserved 582 MiB.
        let z = zoom_range(500 * MIB, 582 * MIB).expect("a band well above 0");
        assert_eq!(z.exp, 2);
        assert_eq!((z.bottom, z.top), (490.0, 590.0));
    }

    #[test]
    fn the_range_keeps_the_unit_of_its_highest_value() {
        let z = zoom_range(GIB + 100 * MIB, 2 * GIB).expect("a band well above 0");
        assert_eq!(z.exp, 3);
        assert!(z.bottom > 0.0 && z.bottom < 1.1 && z.top >= 2.0, "{z:?}");
    }

    #[test]
    fn a_flat_timeline_or_one_that_reaches_zero_has_no_zoom() {
        assert_eq!(zoom_range(500 * MIB, 500 * MIB), Err(NoZoom::Flat));
        assert_eq!(zoom_range(0, 0), Err(NoZoom::Flat));
        assert_eq!(zoom_range(0, 582 * MIB), Err(NoZoom::ReachesZero));
        // 10 MiB under 1 GiB: the margin and a step reach below 0 B.
        assert_eq!(zoom_range(10 * MIB, GIB), Err(NoZoom::ReachesZero));
    }

    #[test]
    fn every_value_lies_inside_the_range_at_any_scale() {
        for (lo, hi) in [
            (1, 2),
            (512, 513),
            (1000, 1024),
            (3 * GIB, 3 * GIB + 512),
            (u64::MAX - 1 - (1 << 60), u64::MAX),
        ] {
            if let Ok(z) = zoom_range(lo, hi) {
                let unit = 1024f64.powi(z.exp as i32);
                assert!(
                    z.bottom * unit <= lo as f64 && z.top * unit >= hi as f64,
                    "{lo}…{hi}: {z:?}"
                );
            }
        }
    }
}
