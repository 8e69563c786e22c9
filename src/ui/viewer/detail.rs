//! The block-detail overlay (Enter): the selected block's sizes, state,
//! stream, segment, site and the stack of its allocation.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use unicode_width::UnicodeWidthStr as _;

use super::elapsed;
use super::popup::{PopupScroll, render_text_popup};
use crate::alloc::BlockState;
use crate::app::keymap::{DetailKey, Keymap, first_key};
use crate::app::viewer::ViewerState;
use crate::snapshot::scrub::LastHeld;
use crate::snapshot::sites::{NoStackReason, frame_counts, listed_frames, shown_file, site_key};
use crate::ui::chrome;
use crate::ui::format;
use crate::ui::theme::Theme;

/// A frame as "file:line name" in `width` cells. A frame without a file
/// or line reads `??:?`, as the sites pane writes it: a C++ frame with an
/// empty file read ":0 at::…" beside "??:0". A row too narrow for it keeps
/// the file's base name whole, which says which file it is ("…UDA.cpp"
/// said none): the middle of the file's folders goes first, then the
/// end of the function's name.
fn frame_line(f: &crate::snapshot::Frame, width: usize) -> String {
    let file = shown_file(&f.filename);
    let tail = format!(":{} {}", f.shown_line(), f.name);
    let whole = format!("{file}{tail}");
    if whole.width() <= width {
        return whole;
    }
    let (folders, base) = file.split_at(file.rfind('/').map_or(0, |at| at + 1));
    // "…/" stands for the folders left out, when there are any.
    let cut_folders = if folders.is_empty() { 0 } else { 2 };
    if let Some(room) = width
        .checked_sub(tail.width())
        .filter(|&room| room >= base.width() + cut_folders)
    {
        return format!("{}{tail}", format::elide_path(file, room));
    }
    let file = if folders.is_empty() {
        base.to_string()
    } else {
        format!("…/{base}")
    };
    let head = format!("{file}:{} ", f.shown_line());
    match width.checked_sub(head.width()).filter(|&room| room >= 2) {
        Some(room) => format!("{head}{}", format::truncate(&f.name, room)),
        // Too narrow for the base name and a letter of the function: the
        // row's end goes, whatever it holds.
        None => format::truncate(&format!("{head}{}", f.name), width),
    }
}

/// Why the selected GPU has no events to place a block's allocation in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NoEvents {
    /// Its trace is still being read.
    Reading,
    /// Its trace could not be read.
    Unreadable,
    /// There is none: a state-only file (or GPU).
    NoTrace,
}

/// Why the selected GPU has no events, `None` when it has some.
fn no_events(v: &ViewerState) -> Option<NoEvents> {
    if v.device().is_none_or(|d| !d.is_empty()) {
        return None;
    }
    Some(match (v.trace_reading, &v.trace_error) {
        (Some(_), _) => NoEvents::Reading,
        (None, Some(_)) => NoEvents::Unreadable,
        (None, None) => NoEvents::NoTrace,
    })
}

/// When the selected block was allocated: "event k/N (t+… ms)", "before
/// the trace began", or n/a for a free block or a GPU without events (no
/// trace has begun there for the block to predate).
fn allocated_at(v: &ViewerState, b: &crate::snapshot::Block) -> String {
    let Some(d) = v.device() else {
        return format::NA.to_string();
    };
    if b.state == BlockState::Inactive {
        return format!("{} (a free block)", format::NA);
    }
    if let Some(why) = no_events(v) {
        let why = match why {
            NoEvents::Reading => "until the trace is read",
            NoEvents::Unreadable => "(the trace could not be read)",
            NoEvents::NoTrace => "(no trace: the file holds its final state only)",
        };
        return format!("{} {why}", format::NA);
    }
    match d.allocated_by(v.cursor(), b.address) {
        Some(i) => {
            let first = d.events().first().and_then(|e| e.time_us());
            let t = d.events().get(i).and_then(|e| e.time_us());
            format!(
                "at event {}/{} ({})",
                i + 1,
                d.len(),
                elapsed(first, t, d.whole_ms())
            )
        }
        // With the site row's reason when it says when too (one story:
        // not "before the trace" here and "while history was off" there).
        None => match v.selected_no_stack_reason() {
            Some(NoStackReason::BeforeRecording) if b.frames.is_empty() => {
                "before the trace began, while history was off".to_string()
            }
            _ => "before the trace began".to_string(),
        },
    }
}

/// The allocation site of a block, in the viewer's grouping.
fn site_of_block(v: &ViewerState, b: &crate::snapshot::Block) -> String {
    if b.state == BlockState::Inactive {
        return format!("{} (a free block)", format::NA);
    }
    match site_key(&b.frames, v.grouping) {
        Some(k) => format!("{} (by {})", k.label(), v.grouping.name()),
        // The group the sites pane lists it in.
        None => v
            .selected_no_stack_reason()
            .unwrap_or(v.no_stack)
            .describe()
            .to_string(),
    }
}

/// "4.00 MiB (4194304 B)"; below a KiB the bytes once ("256 B", not
/// "256 B (256 B)").
fn bytes_exactly(n: u64) -> String {
    let shown = format::bytes(n);
    if n < 1024 {
        shown
    } else {
        format!("{shown} ({n} B)")
    }
}

/// ", private pool (0,1)" for a segment of a private memory pool (a CUDA
/// graph's or a `MemPool`'s), empty for the default pools' `(0, 0)`: its
/// blocks serve only that pool's allocations.
fn private_pool(id: (i64, i64)) -> String {
    if id == (0, 0) {
        String::new()
    } else {
        format!(", private pool {}", format::pool_id(id))
    }
}

/// Cells of the detail's key column.
const KEY_CELLS: usize = 14;

/// A detail row: `k` in the key column, `val` beside it. A value too
/// long for the row wraps under itself, past the key column (the popup
/// would cut it otherwise). Theme-independent; styles come from the
/// caller.
fn kv(k: &str, val: &str, width: u16) -> Vec<Line<'static>> {
    let room = width.saturating_sub(KEY_CELLS as u16).max(20);
    let mut rows = chrome::wrap(val, room);
    if rows.is_empty() {
        rows.push(String::new());
    }
    rows.into_iter()
        .enumerate()
        .map(|(i, row)| {
            let key = if i == 0 { k } else { "" };
            Line::from(vec![
                Span::raw(format!("{key:<KEY_CELLS$}")),
                Span::raw(row),
            ])
        })
        .collect()
}

/// A stack's rows, innermost first, under `title` and the counts of its
/// frames: the Python frames, the C++ ones counted (listed where there
/// is no Python frame), as the sites pane and `--summary --json` count
/// them.
fn stack_lines(frames: &[crate::snapshot::Frame], title: &str, width: u16) -> Vec<Line<'static>> {
    let mut lines = Vec::new();
    // Python frames answer "which line of my program"; the C++ frames
    // of stacks="all" recordings would bury them, so they are counted.
    let counts = frame_counts(frames);
    let shown = listed_frames(frames, counts.python == 0);
    let dropped = super::sites::dropped_note(counts);
    let python = format::count_of(counts.python, "Python frame", "Python frames");
    let cpp = format::count_of(counts.cpp, "C++ frame", "C++ frames");
    let title = if counts.python > 0 && counts.cpp > 0 {
        format!("{title} ({python}; {cpp} hidden{dropped}):")
    } else if counts.python > 0 {
        format!("{title} ({python}{dropped}):")
    } else if counts.cpp > 0 {
        format!("{title} ({cpp}{dropped}):")
    } else {
        format!("{title}:")
    };
    for l in chrome::wrap(&title, width) {
        lines.push(Line::raw(l));
    }
    for f in shown {
        lines.push(Line::raw(format!(
            "  {}",
            frame_line(f, usize::from(width).saturating_sub(2))
        )));
    }
    lines
}

/// The lines of the OOM detail (`Enter` on an OOM event) for `width`
/// columns: what the failed request asked, the segment PyTorch's message
/// names (where it is not the request), the device's free bytes, what the
/// allocator held and the cause that points to, which code asked and its
/// whole stack.
fn oom_lines(v: &ViewerState, width: u16) -> Vec<Line<'static>> {
    let (Some(e), Some(stack), Some(d)) = (v.current_event(), v.oom_stack(), v.device()) else {
        return vec![Line::raw("no OOM event here")];
    };
    let first = d.events().first().and_then(|e| e.time_us());
    let mut rows = vec![
        kv(
            "event",
            &format!(
                "{}/{} ({})",
                v.cursor(),
                d.len(),
                elapsed(first, e.time_us(), d.whole_ms())
            ),
            width,
        ),
        kv("requested", &bytes_exactly(e.size), width),
    ];
    if let Some(segment) =
        crate::snapshot::summary::oom_segment(e.size, v.scrub.snapshot.allocator_settings.as_ref())
    {
        rows.push(kv(
            "segment",
            &format!(
                "{}: the size PyTorch's error message names (\"Tried to allocate …\"), the \
                 request rounded up to a whole segment",
                format::bytes(segment)
            ),
            width,
        ));
    }
    rows.push(kv(
        "device free",
        &format!("{}, the driver's figure at the OOM", bytes_exactly(e.addr)),
        width,
    ));
    // Why it failed, in `open --summary`'s words and figures (one
    // computation, [`crate::snapshot::summary::OomMemory`]).
    if let Some(memory) = &v.oom_memory {
        rows.push(kv("held", &memory.held_text(), width));
        rows.push(kv(
            "cause",
            &memory.cause_text("the sites pane lists them"),
            width,
        ));
    }
    rows.push(kv("stream", &e.stream.to_string(), width));
    rows.push(kv(
        "asked by",
        stack
            .site
            .as_deref()
            .or(stack.no_stack())
            .unwrap_or_default(),
        width,
    ));
    let mut lines: Vec<Line<'static>> = rows.into_iter().flatten().collect();
    if !e.frames.is_empty() {
        lines.push(Line::raw(""));
        lines.extend(stack_lines(
            &e.frames,
            "stack of the failed request, innermost first",
            width,
        ));
    }
    lines
}

/// The lines of the block-detail overlay for `width` columns (of the
/// OOM detail where that is open).
pub fn detail_lines(v: &ViewerState, width: u16) -> Vec<Line<'static>> {
    if v.detail_oom {
        return oom_lines(v, width);
    }
    let Some((seg, b)) = v.selected_block() else {
        return vec![Line::raw("no block selected")];
    };
    let kv = |k: &str, val: String| kv(k, &val, width);
    let state = match b.state {
        BlockState::ActiveAllocated => "allocated",
        BlockState::ActivePendingFree => "pending free (freed, waiting on stream events)",
        BlockState::Inactive => "free (cached in its segment)",
    };
    let seg_index = v
        .segments
        .iter()
        .position(|s| s.address == seg.address)
        .map_or(0, |i| i + 1);
    let mut lines: Vec<Line<'static>> = [
        kv("address", format!("{:#x}", b.address)),
        kv(
            "size",
            format!(
                "{}{}",
                bytes_exactly(b.size),
                if v.selected_size_inferred() {
                    " — inferred from the request (the trace records requests only)"
                } else {
                    ""
                }
            ),
        ),
        kv(
            if b.state == BlockState::Inactive {
                "last request"
            } else {
                "requested"
            },
            if b.state == BlockState::Inactive && b.requested_size == 0 {
                format::NA.to_string()
            } else {
                bytes_exactly(b.requested_size)
            },
        ),
        kv("state", state.to_string()),
        kv("stream", seg.stream.to_string()),
        kv("allocated", allocated_at(v, b)),
        kv("site", site_of_block(v, b)),
        kv(
            "segment",
            format!(
                "{seg_index}/{} at {:#x}, {} {} pool{}{}",
                v.segments.len(),
                seg.address,
                format::bytes(seg.total_size),
                seg.segment_type.as_str(),
                if seg.is_expandable {
                    ", expandable"
                } else {
                    ""
                },
                private_pool(seg.segment_pool_id)
            ),
        ),
    ]
    .into_iter()
    .flatten()
    .collect();
    lines.push(Line::raw(""));
    if b.state == BlockState::Inactive {
        lines.extend(free_block_lines(v, b, width));
    } else if b.frames.is_empty() {
        // With no trace the site row gives the file's reason: no trace
        // began, so none is to blame.
        let why = if no_events(v) == Some(NoEvents::NoTrace) {
            "stack: n/a (none recorded for this block; the site row says why)"
        } else {
            // The site row's reason, with what would record one.
            match v.selected_no_stack_reason().unwrap_or(v.no_stack) {
                NoStackReason::BeforeRecording => {
                    "stack: n/a (allocated while history was off; call \
                     _record_memory_history earlier to record it)"
                }
                NoStackReason::WithoutStacks => {
                    "stack: n/a (recorded without stacks: record with \
                     _record_memory_history(stacks=\"python\") or \"all\")"
                }
                NoStackReason::TraceNotRead => {
                    "stack: n/a (none in the final state; the trace is not read)"
                }
                NoStackReason::BeforeTrace => {
                    "stack: n/a (allocated before the trace began: the file no longer holds \
                     its allocation; a larger max_entries keeps more of the trace)"
                }
            }
        };
        for l in chrome::wrap(why, width) {
            lines.push(Line::raw(l));
        }
    } else {
        lines.extend(stack_lines(
            &b.frames,
            "stack of the allocation, innermost first",
            width,
        ));
    }
    lines
}

/// Event index `i` as the viewer numbers events: the cursor just after it.
fn event_number(i: usize) -> usize {
    i.saturating_add(1)
}

/// The rows under a free block's figures: what last held it and the stack
/// of that allocation, from the trace (searched back from the cursor);
/// the stack the file's final state keeps for it where the trace says
/// nothing; "no allocation recorded" only where neither holds one.
fn free_block_lines(v: &ViewerState, b: &crate::snapshot::Block, width: u16) -> Vec<Line<'static>> {
    let last_stack = "stack of its last allocation, innermost first";
    let wrapped = |text: &str| -> Vec<Line<'static>> {
        chrome::wrap(text, width)
            .into_iter()
            .map(Line::raw)
            .collect()
    };
    let d = v.device();
    match v.selected_last_held() {
        Some(LastHeld::Freed {
            address,
            requested,
            allocated,
            freed,
        }) => {
            let frames = allocated
                .and_then(|i| d?.events().get(i))
                .map(|e| e.frames.clone());
            let who = match &frames {
                None => "a block allocated before the trace began".to_string(),
                Some(f) => match site_key(f, v.grouping) {
                    Some(k) => k.label(),
                    None => "an allocation without a stack".to_string(),
                },
            };
            // Where what held it began elsewhere (a larger block since
            // split, or one of the pieces merged into this one): its
            // request and address.
            let at = if address == b.address {
                String::new()
            } else {
                format!("{} at {address:#x}, ", format::bytes(requested))
            };
            let when = match allocated {
                Some(i) => format!(
                    "allocated at event {}, freed at event {}",
                    event_number(i),
                    event_number(freed)
                ),
                None => format!("freed at event {}", event_number(freed)),
            };
            let mut lines = wrapped(&format!("last held by {who} ({at}{when})"));
            match frames {
                Some(f) if !f.is_empty() => lines.extend(stack_lines(&f, last_stack, width)),
                Some(_) if v.no_stack == NoStackReason::WithoutStacks => lines.extend(wrapped(
                    "stack: n/a (recorded without stacks: record with \
                     _record_memory_history(stacks=\"python\") or \"all\")",
                )),
                Some(_) => lines.extend(wrapped("stack: n/a (none recorded for that allocation)")),
                None => lines.extend(wrapped(
                    "stack: n/a (its allocation came before the trace began)",
                )),
            }
            lines
        }
        Some(LastHeld::NotSinceSegment(i)) => wrapped(&format!(
            "stack: n/a (a free block; nothing was allocated in it since its segment was made \
             at event {})",
            event_number(i)
        )),
        // The file's final state keeps the stack of a free block's last
        // allocation, which the trace does not hold: said at the end only
        // (a block of the same address and size earlier in the trace
        // shows those frames too, of an allocation still to come).
        _ if !b.frames.is_empty() && d.is_none_or(|d| v.cursor() >= d.len()) => {
            stack_lines(&b.frames, last_stack, width)
        }
        Some(LastHeld::NotInTrace) => wrapped(
            "stack: n/a (a free block; no allocation recorded for it: free since before the \
             trace began)",
        ),
        None => wrapped(match no_events(v) {
            Some(NoEvents::Reading) => {
                "stack: n/a (a free block; what last held it is known once the trace is read)"
            }
            Some(NoEvents::Unreadable) => {
                "stack: n/a (a free block; the trace that would say what held it could not be \
                 read)"
            }
            Some(NoEvents::NoTrace) | None => {
                "stack: n/a (a free block; no allocation recorded for it: the file holds its \
                 final state only)"
            }
        }),
    }
}

pub(super) fn render_detail(
    area: Rect,
    buf: &mut Buffer,
    v: &ViewerState,
    keymap: &Keymap,
    theme: &Theme,
) {
    let label = |key| keymap.detail_key_label(key).unwrap_or_default();
    // An OOM's detail has no block to step to.
    let (title, hint) = if v.detail_oom {
        (
            " OOM ",
            format!(" {} closes ", first_key(label(DetailKey::Close))),
        )
    } else {
        (
            " Block ",
            format!(
                " {}/{} block · {} closes ",
                first_key(label(DetailKey::PrevBlock)),
                first_key(label(DetailKey::NextBlock)),
                first_key(label(DetailKey::Close))
            ),
        )
    };
    let hint = theme.key(&hint).into_owned();
    // ↑/↓ move to the next block: the detail scrolls by pages.
    let scroll = PopupScroll {
        offset: v.detail_scroll,
        limit: &v.detail_scroll_limit,
        rows: &v.detail_page_rows,
        keys: (label(DetailKey::ScrollUp), label(DetailKey::ScrollDown)),
    };
    render_text_popup(area, buf, (110, title, &hint), theme, &scroll, |width| {
        detail_lines(v, width)
            .into_iter()
            .map(|l| {
                if l.spans.len() == 2 {
                    Line::from(vec![
                        Span::styled(l.spans[0].content.to_string(), theme.key),
                        Span::styled(l.spans[1].content.to_string(), theme.text),
                    ])
                } else {
                    l.style(theme.text)
                }
            })
            .collect()
    });
}

#[cfg(test)]
mod tests {
    use super::{bytes_exactly, frame_line};
    use crate::snapshot::Frame;
    use unicode_width::UnicodeWidthStr as _;

    fn frame(filename: &str, line: u64, name: &str) -> Frame {
        Frame {
            filename: filename.into(),
            line,
            name: name.into(),
        }
    }

    #[test]
    fn a_frame_too_long_for_its_row_keeps_its_files_base_name_whole() {
        // silmont's C++ frames: a short file, a long signature. The file
        // was cut from the left ("…UDA.cpp:?") to make room for the name.
        let cpp = frame(
            "RegisterCUDA.cpp",
            0,
            "at::(anonymous namespace)::wrapper_CUDA_bmm(at::Tensor const&, at::Tensor const&)",
        );
        for width in [30, 60, 76, 96] {
            let line = frame_line(&cpp, width);
            assert!(line.starts_with("RegisterCUDA.cpp:? at::"), "{line}");
            assert!(line.width() <= width, "{width}: {line}");
        }
        // A Python path loses its folders first, the function stays whole.
        let py = frame(
            "/home/me/project/deep/folders/model/train.py",
            42,
            "forward",
        );
        let line = frame_line(&py, 40);
        assert!(line.ends_with("/train.py:42 forward"), "{line}");
        assert!(line.contains('…') && line.width() <= 40, "{line}");
        assert!(line.starts_with("/home"), "the path's start stays: {line}");
        // Narrower still: folders gone, then the function cut at its end.
        let line = frame_line(&py, 18);
        assert_eq!(line, "…/train.py:42 for…");
        // Whole where it fits.
        assert_eq!(frame_line(&py, 80), format!("{}:42 forward", py.filename));
    }

    #[test]
    fn exact_bytes_are_given_once_below_a_kib_and_in_brackets_above() {
        assert_eq!(bytes_exactly(256), "256 B", "not 256 B (256 B)");
        assert_eq!(bytes_exactly(4 << 20), "4.00 MiB (4194304 B)");
    }
}
