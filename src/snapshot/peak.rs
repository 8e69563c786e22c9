//! The peaks of a trace: the cursor where allocated bytes were highest,
//! where reserved bytes were highest, and the biggest single allocation.
//! Pure: computed from a [`DeviceScrub`]'s timeline (its table of maxima:
//! a trace of millions of events is not walked again).

use serde::Serialize;

use super::scrub::{DeviceScrub, Point};

/// A moment of the trace and a figure there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Moment {
    /// Events applied (0…=N); the first cursor the figure is reached.
    pub cursor: usize,
    /// Bytes.
    pub bytes: u64,
    /// Microseconds as recorded at that cursor; `None` without time.
    pub time_us: Option<i64>,
}

/// One device's peaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Peaks {
    pub allocated: Moment,
    pub reserved: Moment,
    /// The largest `alloc` event (its requested bytes; the cursor just
    /// after it); `None` when the trace has no allocation.
    pub biggest_allocation: Option<Moment>,
}

/// The peaks of `device`'s timeline. The first cursor wins a tie.
pub fn peaks(device: &DeviceScrub) -> Peaks {
    let (most_reserved, most_allocated) = device.peaks();
    // The first cursor at the highest value (cursor 0 when all are 0, or
    // without points).
    let moment = |pick: fn(&Point) -> u64, bytes: u64| {
        let cursor = device.first_reaching(pick, bytes).unwrap_or(0);
        Moment {
            cursor,
            bytes,
            time_us: device.time_at(cursor),
        }
    };
    let biggest = device.biggest_allocation().and_then(|i| {
        let e = device.events().get(i)?;
        Some(Moment {
            cursor: i.saturating_add(1),
            bytes: e.size,
            time_us: e.time_us(),
        })
    });
    Peaks {
        allocated: moment(|p| p.allocated, most_allocated),
        reserved: moment(|p| p.reserved, most_reserved),
        biggest_allocation: biggest,
    }
}
