//! Properties of the protocol v2 lines vramtop reads and writes: whatever a
//! probe puts in a snapshot answer or an oom's snapshot keys comes back
//! as sent (or is a typed error, never a panic), and every request line
//! vramtop makes is one JSON line that the probe's rules accept.

use proptest::prelude::*;
use vramtop::probe::protocol::{Message, parse_line, snapshot_request_line, valid_request_id};

/// Any JSON value of modest depth (what a probe could put in a key).
fn any_json() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::Bool),
        any::<i64>().prop_map(|n| serde_json::json!(n)),
        any::<u64>().prop_map(|n| serde_json::json!(n)),
        any::<f64>().prop_map(|f| serde_json::json!(f)),
        ".{0,40}".prop_map(serde_json::Value::String),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
            prop::collection::btree_map(".{0,8}", inner, 0..4)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #[test]
    fn a_snapshot_done_comes_back_as_sent(
        id in "[A-Za-z0-9_.-]{1,64}",
        path in "/[^\u{0}]{0,80}",
        bytes in any::<u64>(),
        has_trace in any::<bool>(),
        entries in any::<u64>(),
        segments in any::<u64>(),
    ) {
        let line = serde_json::json!({
            "v": 2, "type": "snapshot_done", "id": id, "time": 1.5, "path": path,
            "bytes": bytes, "has_trace": has_trace, "trace_entries": entries,
            "segments": segments,
        })
        .to_string();
        let Ok(Message::SnapshotDone(d)) = parse_line(line.as_bytes()) else {
            return Err(TestCaseError::fail(format!("not a snapshot_done: {line}")));
        };
        prop_assert_eq!(d.id, id);
        prop_assert_eq!(d.path, std::path::PathBuf::from(path));
        prop_assert_eq!(
            (d.bytes, d.has_trace, d.trace_entries, d.segments),
            (Some(bytes), has_trace, Some(entries), Some(segments))
        );
    }

    #[test]
    fn any_value_in_the_v2_keys_parses_or_is_a_typed_error(
        kind in prop_oneof![
            Just("snapshot_started"), Just("snapshot_done"), Just("snapshot_failed"),
            Just("oom"), Just("hello"),
        ],
        key in prop_oneof![
            Just("id"), Just("path"), Just("reason"), Just("snapshot"), Just("snapshot_error"),
            Just("rank"), Just("local_rank"), Just("world_size"), Just("record_history"),
            Just("capabilities"), Just("has_trace"), Just("bytes"),
        ],
        value in any_json(),
    ) {
        let mut line = serde_json::json!({
            "v": 2, "type": kind, "id": "a", "path": "/p", "device": 0, "pid": 1,
        });
        line[key] = value;
        let text = line.to_string();
        match parse_line(text.as_bytes()) {
            Ok(Message::Unknown(k)) => prop_assert!(false, "{k} is a known type"),
            Ok(_) => {}
            Err(e) => prop_assert!(e.to_string().len() < 400, "{e}"),
        }
    }

    #[test]
    fn every_request_line_is_one_json_line_with_the_id(id in "\\PC{0,80}") {
        match snapshot_request_line(&id) {
            Some(line) => {
                prop_assert!(valid_request_id(&id));
                prop_assert!(line.len() <= 4096, "the probe's limit");
                prop_assert_eq!(line.matches('\n').count(), 1);
                let v: serde_json::Value = serde_json::from_str(line.trim_end())
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(v["id"].as_str(), Some(id.as_str()));
                prop_assert_eq!(v["type"].as_str(), Some("snapshot_request"));
            }
            None => prop_assert!(!valid_request_id(&id)),
        }
    }
}
