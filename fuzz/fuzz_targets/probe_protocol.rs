//! Feeds arbitrary bytes through the probe protocol's line reader and
//! parser, as if a probe had sent them: the reader must hand out numbered
//! lines no longer than the limit (or a typed problem), the parser must
//! return a message or a `ProtocolError`, never panic; whatever it accepts
//! must be drawable (fragmentation of the segments, views of the stats).
#![no_main]

use std::io::BufReader;

use libfuzzer_sys::fuzz_target;
use vramtop::alloc::fragmentation;
use vramtop::app::state::AllocatorView;
use vramtop::probe::protocol::{LineReader, MAX_LINE_BYTES, Message, parse_line};

fuzz_target!(|data: &[u8]| {
    // The first byte picks the read size, so lines are cut across reads at
    // every offset.
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let capacity = usize::from(first).max(1);
    let mut reader = LineReader::new(BufReader::with_capacity(capacity, rest));
    let mut expected_line = 1;
    while let Ok(Some(item)) = reader.next_line() {
        match item {
            Ok((line, bytes)) => {
                assert_eq!(line, expected_line, "lines are numbered in order");
                assert!(bytes.len() < MAX_LINE_BYTES, "a line within the limit");
                match parse_line(&bytes) {
                    Ok(Message::Stats(s)) => {
                        let view = AllocatorView::new(String::new(), None, s.stats, Vec::new());
                        let _ = (view.allocated(), view.reserved());
                    }
                    Ok(Message::Segments(s)) => {
                        let f = fragmentation(&s.segments);
                        assert!(f.largest_free_block <= f.external_free);
                        assert!(f.non_releasable <= f.external_free);
                    }
                    Ok(_) | Err(_) => {}
                }
            }
            Err(e) => {
                assert_eq!(e.line, expected_line, "problems carry their line");
                let _ = e.to_string();
            }
        }
        expected_line += 1;
    }
});
