//! The peaks of a trace: the cursor where allocated bytes were highest,
//! where reserved bytes were highest, and the biggest single allocation.
//! Pure: computed from a [`DeviceScrub`]'s timeline.

use serde::Serialize;

use super::scrub::DeviceScrub;
use crate::alloc::TraceAction;

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
    let mut allocated = Moment {
        cursor: 0,
        bytes: 0,
        time_us: None,
    };
    let mut reserved = allocated;
    for (cursor, p) in device.points.iter().enumerate() {
        if cursor == 0 || p.allocated > allocated.bytes {
            allocated = Moment {
                cursor,
                bytes: p.allocated,
                time_us: device.time_at(cursor),
            };
        }
        if cursor == 0 || p.reserved > reserved.bytes {
            reserved = Moment {
                cursor,
                bytes: p.reserved,
                time_us: device.time_at(cursor),
            };
        }
    }
    let mut biggest: Option<Moment> = None;
    for (i, e) in device.events().iter().enumerate() {
        if e.action == TraceAction::Alloc && biggest.is_none_or(|b| e.size > b.bytes) {
            biggest = Some(Moment {
                cursor: i.saturating_add(1),
                bytes: e.size,
                time_us: e.time_us,
            });
        }
    }
    Peaks {
        allocated,
        reserved,
        biggest_allocation: biggest,
    }
}
