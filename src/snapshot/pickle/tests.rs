//! Unit tests of the parser and the freeze.

use super::parser::decode_raw_unicode_escape;
use super::*;

fn parse_default(bytes: &[u8]) -> Result<Value, PickleError> {
    parse(bytes, &Limits::default())
}

#[test]
fn protocol_zero_text_opcodes_parse() {
    // [1, True, -7, 2.5, 'h\xe9\u20ac', 12345678901234567890L] in protocol 0.
    let pickle = b"(lp0\nI1\naI01\naI-7\naF2.5\naVh\xe9\\u20ac\np1\naL12345678901234567890L\na.";
    let value = parse_default(pickle).unwrap();
    let items = value.as_list().unwrap();
    assert_eq!(items[0], Value::Int(1));
    assert_eq!(items[1], Value::Bool(true));
    assert_eq!(items[2], Value::Int(-7));
    assert_eq!(items[3], Value::Float(2.5));
    assert_eq!(items[4].as_str(), Some("hé€"));
    assert_eq!(items[5], Value::Int(12345678901234567890));
}

#[test]
fn memo_get_shares_one_allocation() {
    // d = {'a': 1}; {'x': d, 'y': d} in protocol 4 (hand-assembled).
    let pickle = b"\x80\x04}\x94(\x8c\x01x\x94}\x94\x8c\x01a\x94K\x01s\x8c\x01y\x94h\x02u.";
    let value = parse_default(pickle).unwrap();
    let x = value.get("x").unwrap();
    let y = value.get("y").unwrap();
    assert_eq!(x.identity(), y.identity());
    assert_eq!(x.get("a"), Some(&Value::Int(1)));
}

#[test]
fn sparse_memo_index_does_not_allocate_a_huge_vector() {
    // LONG_BINPUT 0xfffffff0 then LONG_BINGET of it.
    let pickle = b"K\x05r\xf0\xff\xff\xff0j\xf0\xff\xff\xff.";
    assert_eq!(parse_default(pickle).unwrap(), Value::Int(5));
}

#[test]
fn repeated_dict_key_reads_as_the_last_value() {
    let pickle = b"}(\x8c\x01kK\x01\x8c\x01kK\x02u.";
    assert_eq!(
        parse_default(pickle).unwrap().get("k"),
        Some(&Value::Int(2))
    );
}

#[test]
fn pop_on_an_empty_frame_discards_the_mark_like_cpython() {
    assert_eq!(parse_default(b"K\x07(0.").unwrap(), Value::Int(7));
}

#[test]
fn operations_cannot_reach_below_the_innermost_mark() {
    let err = parse_default(b"](a.").unwrap_err();
    assert!(
        matches!(
            err,
            PickleError::Malformed {
                opcode: "APPEND",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn list_as_dict_key_is_refused_as_unhashable() {
    let err = parse_default(b"}]K\x01s.").unwrap_err();
    assert!(err.to_string().contains("unhashable"), "{err}");
}

#[test]
fn raw_unicode_escape_decodes_latin1_and_escapes() {
    assert_eq!(
        decode_raw_unicode_escape(b"a\xff\\u0041\\U0001F600\\x").as_deref(),
        Some("a\u{ff}A\u{1F600}\\x")
    );
    assert_eq!(decode_raw_unicode_escape(b"\\u12"), None);
}

#[test]
fn long1_sign_extends() {
    assert_eq!(parse_default(b"\x8a\x01\xff.").unwrap(), Value::Int(-1));
    assert_eq!(
        parse_default(b"\x8a\x02\xff\x00.").unwrap(),
        Value::Int(255)
    );
    assert_eq!(parse_default(b"\x8a\x00.").unwrap(), Value::Int(0));
}

#[test]
fn ints_of_every_width_read_back_exactly() {
    // [2**40, -2**40, 2**63 - 1, 2**64, 2**40 (memo fetch)]: i64 ints sit
    // in their own table, wider ones among the values.
    let pickle = b"\x80\x04](\x8a\x06\x00\x00\x00\x00\x00\x01\x94\x8a\x06\x00\x00\x00\x00\x00\xff\x8a\x08\xff\xff\xff\xff\xff\xff\xff\x7f\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01h\x00e.";
    let value = parse_default(pickle).unwrap();
    assert_eq!(
        value.as_list().unwrap(),
        &[
            Value::Int(1 << 40),
            Value::Int(-(1 << 40)),
            Value::Int(i64::MAX.into()),
            Value::Int(1 << 64),
            Value::Int(1 << 40),
        ][..]
    );
}

#[test]
fn value_accessors_check_types_and_ranges() {
    assert_eq!(Value::Int(-1).as_u64(), None);
    assert_eq!(Value::Int(1 << 64).as_u64(), None);
    assert_eq!(Value::Int(1 << 63).as_i64(), None);
    assert_eq!(Value::Int(3).as_f64(), Some(3.0));
    assert_eq!(Value::Bool(true).as_int(), None);
    assert_eq!(Value::Str("s".into()).type_name(), "str");
    assert!(Value::Int(1).identity().is_none());
}

#[test]
fn mutation_after_sharing_is_seen_by_every_reference() {
    // l = []; t = (l, l); l.append(1) -- via memo, then return t.
    let pickle = b"]\x94h\x00h\x00\x86\x94h\x00K\x01a0h\x01.";
    let value = parse_default(pickle).unwrap();
    let pair = value.as_list().unwrap();
    assert_eq!(pair[0].as_list().unwrap(), &[Value::Int(1)]);
    assert_eq!(pair[0].identity(), pair[1].identity());
}

/// {'a': [1], 'b': [1]}, then (when `mutate`) `a.append(2)` through
/// the memo after both lists were completed.
fn two_equal_lists(mutate: bool) -> Vec<u8> {
    let mut pickle = b"\x80\x04}\x94(\x8c\x01a\x94]\x94K\x01a\x8c\x01b\x94]\x94K\x01au".to_vec();
    if mutate {
        pickle.extend_from_slice(b"h\x02K\x02a0");
    }
    pickle.push(b'.');
    pickle
}

#[test]
fn completed_lists_with_equal_items_share_one_allocation() {
    let value = parse_default(&two_equal_lists(false)).unwrap();
    let (a, b) = (value.get("a").unwrap(), value.get("b").unwrap());
    assert_eq!(a.as_list(), Some(&[Value::Int(1)][..]));
    assert_eq!(a.identity(), b.identity());
}

#[test]
fn mutating_a_completed_list_is_exact_through_the_retry() {
    let value = parse_default(&two_equal_lists(true)).unwrap();
    let (a, b) = (value.get("a").unwrap(), value.get("b").unwrap());
    assert_eq!(a.as_list(), Some(&[Value::Int(1), Value::Int(2)][..]));
    assert_eq!(b.as_list(), Some(&[Value::Int(1)][..]));
    assert_ne!(a.identity(), b.identity());
}

#[test]
fn progress_is_published_every_step_and_ends_at_the_length() {
    // A list of 100,000 ints (BININT1: 2 bytes each) in 1000-item batches.
    let mut pickle = b"\x80\x04]\x94".to_vec();
    for _ in 0..100 {
        pickle.push(b'(');
        for _ in 0..1000 {
            pickle.extend_from_slice(b"K\x07");
        }
        pickle.push(b'e');
    }
    pickle.push(b'.');
    let progress = AtomicU64::new(0);
    let value = parse_with_progress(&pickle, &Limits::default(), &progress).unwrap();
    assert_eq!(value.as_list().map(<[Value]>::len), Some(100_000));
    assert_eq!(progress.load(Ordering::Relaxed), pickle.len() as u64);
    assert!(pickle.len() > 3 * PROGRESS_STEP);
}

#[test]
fn growth_after_nesting_is_caught_by_the_freeze_depth_check() {
    // inner = []; outer = [inner]; then inner gets [[[]]] appended, so
    // outer's depth becomes 5 but parsing still records 2 for it: only
    // the freeze sees the final depth.
    let pickle = b"]\x94]\x94h\x00a0h\x00]]]aaa0h\x01.";
    let limits = Limits {
        max_depth: 4,
        ..Limits::default()
    };
    let err = parse(pickle, &limits).unwrap_err();
    assert!(matches!(err, PickleError::LimitExceeded { .. }), "{err}");
}

/// `{'f': [f0, f1], 'a': [f0, f1], 'b': [f0, f1], 'c': [f1, f0]}` with
/// `f0`, `f1` two empty dicts, as CPython's pickler writes it: the lists
/// 'a', 'b' and 'c' are `MARK BINGET BINGET APPENDS`, as a traceback is.
const LISTS_OF_MEMO_FETCHES: &[u8] = b"\x80\x04}\x94(\x8c\x01f\x94]\x94(}\x94}\x94e\
\x8c\x01a\x94]\x94(h\x03h\x04e\x8c\x01b\x94]\x94(h\x03h\x04e\x8c\x01c\x94]\x94(h\x04h\x03eu.";

#[test]
fn lists_of_memo_fetches_with_equal_items_share_one_allocation() {
    let value = parse_default(LISTS_OF_MEMO_FETCHES).unwrap();
    let list = |key| value.get(key).unwrap();
    assert_eq!(list("a").as_list().map(<[Value]>::len), Some(2));
    assert_eq!(list("a").identity(), list("f").identity());
    assert_eq!(list("b").identity(), list("f").identity());
    assert_ne!(list("c").identity(), list("f").identity());
    let (a, c) = (list("a").as_list().unwrap(), list("c").as_list().unwrap());
    assert_eq!(c[0].identity(), a[1].identity());
    assert_eq!(c[1].identity(), a[0].identity());
}

#[test]
fn a_traceback_equal_to_an_earlier_one_takes_no_arena_node() {
    // The root dict, 'f', its two frame dicts, 'a' and 'c' are nodes; 'b'
    // (the bytes of 'a' again, `EMPTY_LIST MEMOIZE MARK … APPENDS`: a
    // trace entry's traceback in a long recording) is the node of 'a'
    // itself, not an alias of it. ('f' is interned only when the root
    // dict is filled, after 'a'.)
    let limits = Limits::default();
    let mut parser = super::parser::Parser::new(LISTS_OF_MEMO_FETCHES, &limits);
    parser.intern = true;
    let root = parser.run().unwrap();
    assert_eq!(parser.arena.len(), 6);
    let value = Document::new(parser.arena, parser.scalars, root, limits.max_depth)
        .freeze_root()
        .unwrap();
    assert_eq!(
        value,
        parse_without_interning(LISTS_OF_MEMO_FETCHES).unwrap()
    );
}

/// `pickle` parsed with interning, checked against the plain parse, and
/// the number of arena nodes it took.
fn interned_nodes_and_check(pickle: &[u8]) -> usize {
    let limits = Limits::default();
    let mut parser = super::parser::Parser::new(pickle, &limits);
    parser.intern = true;
    let root = parser.run().unwrap();
    let nodes = parser.arena.len();
    let value = Document::new(parser.arena, parser.scalars, root, limits.max_depth)
        .freeze_root()
        .unwrap();
    assert_eq!(value, parse_without_interning(pickle).unwrap());
    nodes
}

#[test]
fn a_reclaimed_traceback_reads_back_through_its_memo_entry() {
    // (f0, f1, l, m, {}, memo 3) with l = [f0, f1] and m the same bytes
    // again, in memo 3: the dict made after m takes m's reclaimed node,
    // and memo 3 still reads as the list.
    let pickle = b"\x80\x04(}\x94}\x94]\x94(h\x00h\x01e]\x94(h\x00h\x01e}h\x03t.";
    assert_eq!(interned_nodes_and_check(pickle), 5);
}

#[test]
fn a_fresh_list_memoised_twice_keeps_its_node() {
    // The same with m put in memo 3 and 4 (BINPUT twice, no MEMOIZE): two
    // memo entries refer to it, so it stays an alias node.
    let pickle = b"\x80\x04(}\x94}\x94]\x94(h\x00h\x01e]q\x03q\x04(h\x00h\x01e}h\x03h\x04t.";
    assert_eq!(interned_nodes_and_check(pickle), 6);
}

#[test]
fn a_dict_with_the_last_records_keys_counts_against_the_depth_limit() {
    // ({'a': 1}, {'a': (((),),)}): the second dict has the first one's keys
    // (set by SETITEMS, the key fetched from the memo) and height 4.
    let pickle = b"\x80\x04(}(\x8c\x01a\x94K\x01u}(h\x00)\x85\x85ut.";
    let value = parse_default(pickle).unwrap();
    assert_eq!(value, parse_without_interning(pickle).unwrap());
    let second = value.as_list().map(|items| items[1].clone());
    let inner = second.as_ref().and_then(|d| d.get("a")).cloned();
    assert!(matches!(inner, Some(Value::Tuple(_))), "{value:?}");
    let limits = Limits {
        max_depth: 3,
        ..Limits::default()
    };
    let err = parse(pickle, &limits).unwrap_err();
    assert!(matches!(err, PickleError::LimitExceeded { .. }), "{err}");
}

#[test]
fn appending_again_to_a_list_of_memo_fetches_is_exact_through_the_retry() {
    // l0 = [f0, f1]; l1 = [f0, f1] by memo fetches; l1.extend([f0]); (l0, l1)
    let pickle = b"\x80\x04]\x94(}\x94}\x94e]\x94(h\x01h\x02e(h\x01e\x86.";
    let value = parse_default(pickle).unwrap();
    let pair = value.as_list().unwrap();
    assert_eq!(pair[0].as_list().map(<[Value]>::len), Some(2));
    let l1 = pair[1].as_list().unwrap();
    assert_eq!(l1.len(), 3);
    assert_eq!(l1[2].identity(), l1[0].identity());
    assert_ne!(pair[0].identity(), pair[1].identity());
}

#[test]
fn a_missing_memo_entry_in_a_list_of_fetches_is_reported_at_its_opcode() {
    let err = parse_default(b"\x80\x04]\x94(}\x94h\x07e.").unwrap_err();
    assert_eq!(
        err.to_string(),
        parse_default(b"\x80\x04]\x94(}\x94h\x07a.")
            .unwrap_err()
            .to_string()
    );
    assert!(err.to_string().contains("memo index 7"), "{err}");
    assert!(
        matches!(err, PickleError::Malformed { offset: 7, .. }),
        "{err}"
    );
}

#[test]
fn a_list_of_fetches_containing_itself_is_refused_like_append() {
    let by_run = parse_default(b"\x80\x04]\x94(h\x00e.").unwrap_err();
    let by_append = parse_default(b"\x80\x04]\x94h\x00a.").unwrap_err();
    assert_eq!(by_run.to_string(), by_append.to_string());
}

#[test]
fn a_list_of_fetches_counts_against_the_item_and_depth_limits() {
    // t = ([],); l = [t, t, t]: depth 3, seven values pushed.
    let pickle = b"\x80\x04]\x85\x94](h\x00h\x00h\x00e.";
    let value = parse_default(pickle).unwrap();
    assert_eq!(value.as_list().map(<[Value]>::len), Some(3));
    for limits in [
        Limits {
            max_depth: 2,
            ..Limits::default()
        },
        Limits {
            max_items: 4,
            ..Limits::default()
        },
    ] {
        let err = parse(pickle, &limits).unwrap_err();
        assert!(matches!(err, PickleError::LimitExceeded { .. }), "{err}");
    }
}

/// One opcode of [`ops_to_pickle`]'s small language: enough to build lists,
/// dicts and tuples of memoised values, and to append to them again.
#[derive(Debug, Clone)]
enum SmallOp {
    EmptyList,
    EmptyDict,
    Memoize,
    Mark,
    BinGet(u8),
    LongBinGet(u32),
    Appends,
    Append,
    SetItems,
    Tuple,
    SmallInt(u8),
    Pop,
    /// BINPUT: replaces a memo entry (CPython's pickler never does).
    BinPut(u8),
    /// Containers built whole, and the other stack opcodes.
    TupleOf(u8),
    List,
    Dict,
    Dup,
    SetItem,
    PopMark,
}

fn small_op() -> impl proptest::strategy::Strategy<Value = SmallOp> {
    use proptest::prelude::*;
    prop_oneof![
        3 => Just(SmallOp::EmptyList),
        1 => Just(SmallOp::EmptyDict),
        3 => Just(SmallOp::Memoize),
        3 => Just(SmallOp::Mark),
        6 => (0u8..10).prop_map(SmallOp::BinGet),
        1 => (0u32..10).prop_map(SmallOp::LongBinGet),
        3 => Just(SmallOp::Appends),
        1 => Just(SmallOp::Append),
        1 => Just(SmallOp::SetItems),
        1 => Just(SmallOp::Tuple),
        2 => (0u8..4).prop_map(SmallOp::SmallInt),
        1 => Just(SmallOp::Pop),
        1 => (0u8..8).prop_map(SmallOp::BinPut),
    ]
}

/// A few opcodes: a memoised value, a list filled by memo fetches (as
/// CPython writes a traceback), or any one opcode.
fn small_chunk() -> impl proptest::strategy::Strategy<Value = Vec<SmallOp>> {
    use proptest::prelude::*;
    let value = prop_oneof![
        (0u8..4).prop_map(|n| vec![SmallOp::SmallInt(n)]),
        Just(vec![SmallOp::EmptyDict]),
        Just(vec![SmallOp::EmptyList]),
    ];
    let fetch = prop_oneof![
        4 => (0u8..8).prop_map(SmallOp::BinGet),
        1 => (0u32..8).prop_map(SmallOp::LongBinGet),
    ];
    prop_oneof![
        2 => value.prop_map(|mut ops| {
            ops.push(SmallOp::Memoize);
            ops
        }),
        3 => (any::<bool>(), proptest::collection::vec(fetch, 0..6)).prop_map(|(fresh, gets)| {
            let mut ops = if fresh {
                vec![SmallOp::EmptyList, SmallOp::Memoize]
            } else {
                Vec::new()
            };
            ops.push(SmallOp::Mark);
            ops.extend(gets);
            ops.push(SmallOp::Appends);
            ops
        }),
        1 => small_op().prop_map(|op| vec![op]),
    ]
}

/// Four memoised values (so that most fetches find an entry), then the
/// `chunks`; and how many MARKs they have.
fn after_memoised_values(chunks: &[Vec<SmallOp>]) -> (Vec<SmallOp>, usize) {
    let mut ops = vec![
        SmallOp::SmallInt(0),
        SmallOp::Memoize,
        SmallOp::SmallInt(1),
        SmallOp::Memoize,
        SmallOp::EmptyDict,
        SmallOp::Memoize,
        SmallOp::EmptyList,
        SmallOp::Memoize,
    ];
    ops.extend(chunks.concat());
    let marks = ops.iter().filter(|op| matches!(op, SmallOp::Mark)).count();
    (ops, marks)
}

/// The pickle of `ops`; with `text_gets`, every memo fetch is written as the
/// protocol-0 `GET n\n`, which means the same but no fast path reads.
/// It starts with a MARK and ends with `closing_tuples` TUPLEs, so that the
/// result can hold what the opcodes left on the stack, not only its top.
fn ops_to_pickle(ops: &[SmallOp], text_gets: bool, closing_tuples: usize) -> Vec<u8> {
    let mut out = b"\x80\x04(".to_vec();
    for op in ops {
        match (op, text_gets) {
            (SmallOp::EmptyList, _) => out.push(b']'),
            (SmallOp::EmptyDict, _) => out.push(b'}'),
            (SmallOp::Memoize, _) => out.push(0x94),
            (SmallOp::Mark, _) => out.push(b'('),
            (SmallOp::BinGet(n), false) => out.extend([b'h', *n]),
            (SmallOp::LongBinGet(n), false) => {
                out.push(b'j');
                out.extend(n.to_le_bytes());
            }
            (SmallOp::BinGet(n), true) => out.extend(format!("g{n}\n").bytes()),
            (SmallOp::LongBinGet(n), true) => out.extend(format!("g{n}\n").bytes()),
            (SmallOp::Appends, _) => out.push(b'e'),
            (SmallOp::Append, _) => out.push(b'a'),
            (SmallOp::SetItems, _) => out.push(b'u'),
            (SmallOp::Tuple, _) => out.push(b't'),
            (SmallOp::SmallInt(n), _) => out.extend([b'K', *n]),
            (SmallOp::Pop, _) => out.push(b'0'),
            (SmallOp::BinPut(n), _) => out.extend([b'q', *n]),
            (SmallOp::TupleOf(n), _) => out.push([0x85, 0x86, 0x87][usize::from(*n % 3)]),
            (SmallOp::List, _) => out.push(b'l'),
            (SmallOp::Dict, _) => out.push(b'd'),
            (SmallOp::Dup, _) => out.push(b'2'),
            (SmallOp::SetItem, _) => out.push(b's'),
            (SmallOp::PopMark, _) => out.push(b'1'),
        }
    }
    out.extend(std::iter::repeat_n(b't', closing_tuples));
    out.push(b'.');
    out
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3000))]

    /// The one-go read of `MARK (BINGET|LONG_BINGET)* APPENDS`, the early
    /// interning behind it and the cache of spans seen before (memo entries
    /// replaced in between included) give what the opcodes one by one give.
    #[test]
    fn runs_of_memo_fetches_read_like_the_opcodes_one_by_one(
        chunks in proptest::collection::vec(small_chunk(), 1..16)
    ) {
        let (ops, marks) = after_memoised_values(&chunks);
        for closing in 0..=marks + 1 {
            let fast = parse_default(&ops_to_pickle(&ops, false, closing));
            let generic = parse_default(&ops_to_pickle(&ops, true, closing));
            match (fast, generic) {
                (Ok(fast), Ok(generic)) => proptest::prop_assert_eq!(fast, generic),
                (Err(_), Err(_)) => {}
                (fast, generic) => proptest::prop_assert!(
                    false,
                    "one-go {fast:?} against one by one {generic:?}"
                ),
            }
        }
    }
}

/// `bytes` parsed as a file in pieces of about `piece_bytes`: `None` when
/// the whole-file parse must answer.
fn parse_in_pieces(bytes: &[u8], piece_bytes: usize) -> Option<Result<Value, PickleError>> {
    let mut file = std::io::Cursor::new(bytes);
    super::parse_file_in_pieces_of(
        &mut file,
        bytes.len() as u64,
        &Limits::default(),
        None,
        piece_bytes,
    )
    .expect("a cursor reads without I/O errors")
    .map(|mut document| document.freeze_root())
}

/// A framed protocol-4 pickle of a small generated snapshot, as PyTorch
/// writes one (one frames list per trace entry).
fn framed_snapshot_pickle() -> Vec<u8> {
    let snapshot =
        crate::snapshot::synth::large(&crate::snapshot::synth::LargeShape::about_bytes(600 << 10));
    let mut out = Vec::new();
    crate::snapshot::write_snapshot_with(
        &snapshot,
        &mut out,
        &crate::snapshot::WriteOptions {
            fresh_frame_lists: true,
        },
    )
    .expect("writing to memory succeeds");
    out
}

#[test]
fn a_framed_pickle_parses_in_pieces_as_a_whole() {
    let bytes = framed_snapshot_pickle();
    let whole = parse_default(&bytes).unwrap();
    // One frame a piece, a few frames, one piece.
    for piece_bytes in [1, 100_000, 300_000, bytes.len()] {
        let pieces = parse_in_pieces(&bytes, piece_bytes);
        assert_eq!(pieces, Some(Ok(whole.clone())), "pieces of {piece_bytes}");
    }
}

#[test]
fn every_shared_snapshot_parses_in_pieces_as_a_whole() {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/snapshots");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        eprintln!("skipping: {} not found", dir.display());
        return;
    };
    let mut checked = 0;
    for entry in entries.flatten() {
        let path = entry.path();
        if !matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("pickle" | "pkl")
        ) {
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        let whole = parse_default(&bytes);
        let pieces = parse_in_pieces(&bytes, 200_000);
        match (&whole, &pieces) {
            (Ok(whole), Some(Ok(pieces))) => assert_eq!(whole, pieces, "{}", path.display()),
            _ => panic!("{}: whole {whole:?}, in pieces {pieces:?}", path.display()),
        }
        checked += 1;
    }
    assert!(checked > 0, "no snapshot in {}", dir.display());
}

#[test]
fn an_unframed_pickle_is_left_to_the_whole_file_parse() {
    // Protocol 2: no frames.
    assert!(parse_in_pieces(b"\x80\x02K\x05.", 1).is_none());
    assert!(parse_in_pieces(b"K\x05.", 1).is_none());
}

/// A file that reads `good` bytes and then fails, as a disk error would.
struct FailingAfter {
    bytes: std::io::Cursor<Vec<u8>>,
    good: u64,
}

impl std::io::Read for FailingAfter {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.good.saturating_sub(self.bytes.position());
        if left == 0 {
            return Err(std::io::Error::other("the disk went away"));
        }
        let room = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        self.bytes.read(&mut buf[..room])
    }
}

impl std::io::Seek for FailingAfter {
    fn seek(&mut self, to: std::io::SeekFrom) -> std::io::Result<u64> {
        self.bytes.seek(to)
    }
}

#[test]
fn a_read_error_partway_through_a_file_in_pieces_is_returned_not_waited_for() {
    let bytes = framed_snapshot_pickle();
    let len = bytes.len() as u64;
    let mut file = FailingAfter {
        bytes: std::io::Cursor::new(bytes),
        good: len / 2,
    };
    let read = super::parse_file_in_pieces_of(&mut file, len, &Limits::default(), None, 4096);
    let error = read
        .err()
        .expect("the reading thread's error reaches the caller");
    assert_eq!(error.to_string(), "the disk went away");
}

#[test]
fn an_opcode_across_a_frame_end_is_left_to_the_whole_file_parse() {
    // BININT1 in the first frame, its argument in the second.
    let pickle =
        b"\x80\x04\x95\x01\x00\x00\x00\x00\x00\x00\x00K\x95\x02\x00\x00\x00\x00\x00\x00\x00\x05.";
    assert!(parse_in_pieces(pickle, 1).is_none());
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// A damaged framed pickle (cut short, or one byte changed) parsed in
    /// pieces gives what the whole-file parse gives, or leaves it to it
    /// (always when the parse itself fails).
    #[test]
    fn a_damaged_framed_pickle_in_pieces_reads_like_the_whole(
        cut in proptest::prelude::any::<proptest::sample::Index>(),
        changed in proptest::prelude::any::<proptest::sample::Index>(),
        byte in proptest::prelude::any::<u8>(),
        truncate in proptest::prelude::any::<bool>(),
        piece_bytes in 1usize..200_000,
    ) {
        use std::sync::OnceLock;
        static PICKLE: OnceLock<Vec<u8>> = OnceLock::new();
        let mut bytes = PICKLE.get_or_init(framed_snapshot_pickle).clone();
        if truncate {
            bytes.truncate(cut.index(bytes.len()));
        } else {
            let at = changed.index(bytes.len());
            bytes[at] = byte;
        }
        let whole = parse_default(&bytes);
        match (whole, parse_in_pieces(&bytes, piece_bytes)) {
            (Ok(_), None) | (Err(_), None) => {}
            (Ok(whole), Some(Ok(pieces))) => proptest::prop_assert_eq!(whole, pieces),
            // Parsed alike, and the values then found wrong alike (a memo
            // rewrite that makes a container hold itself is a cycle only
            // once the values are built, after either parse).
            (Err(whole), Some(Err(pieces))) if whole == pieces => {}
            (whole, Some(pieces)) => {
                proptest::prop_assert!(false, "whole {whole:?}, in pieces {pieces:?}");
            }
        }
    }
}

/// A list of dicts over the keys 'a'…'h' (memoised, fetched again as CPython
/// does), each written as `EMPTY_DICT MARK … SETITEMS` or as `MARK … DICT`,
/// then given `extra` more pairs by SETITEM.
/// (key index, value) pairs of one dict.
type SmallPairs = Vec<(u8, u8)>;

fn dicts_pickle(dicts: &[(SmallPairs, SmallPairs)], with_setitems: bool) -> Vec<u8> {
    let mut out = b"\x80\x04](".to_vec();
    let mut memo: [Option<u8>; 8] = [None; 8];
    let mut next_memo = 0u8;
    let mut key = |out: &mut Vec<u8>, k: u8| match memo[usize::from(k)] {
        Some(index) => out.extend([b'h', index]),
        None => {
            out.extend([0x8c, 1, b'a' + k, 0x94]);
            memo[usize::from(k)] = Some(next_memo);
            next_memo += 1;
        }
    };
    for (pairs, extra) in dicts {
        out.extend(if with_setitems { &b"}("[..] } else { &b"("[..] });
        for &(k, v) in pairs {
            key(&mut out, k);
            out.extend([b'K', v]);
        }
        out.push(if with_setitems { b'u' } else { b'd' });
        for &(k, v) in extra {
            key(&mut out, k);
            out.extend([b'K', v, b's']);
        }
    }
    out.extend(b"e.");
    out
}

#[test]
fn dicts_sharing_their_keys_read_back_exactly() {
    let dicts = vec![
        (vec![(0, 1), (1, 2)], vec![]),
        (vec![(0, 3), (1, 4)], vec![]),
        (vec![(1, 5), (0, 6)], vec![]),
        (vec![(0, 7), (0, 8)], vec![(2, 9)]),
    ];
    let value = parse_default(&dicts_pickle(&dicts, true)).unwrap();
    assert_eq!(value, parse_default(&dicts_pickle(&dicts, false)).unwrap());
    let list = value.as_list().unwrap();
    assert_eq!(list[1].get("b"), Some(&Value::Int(4)));
    assert_eq!(list[2].get("a"), Some(&Value::Int(6)));
    // A repeated key reads as its last value; a later SETITEM is kept.
    assert_eq!(list[3].get("a"), Some(&Value::Int(8)));
    assert_eq!(list[3].get("c"), Some(&Value::Int(9)));
}

#[test]
fn dicts_with_ever_new_keys_stay_exact_past_the_key_set_limit() {
    // 5000 dicts, each with its own key string (not memoised).
    let mut pickle = b"\x80\x04](".to_vec();
    for i in 0..5000u32 {
        let name = format!("k{i}");
        pickle.extend(b"}(");
        pickle.extend([0x8c, name.len() as u8]);
        pickle.extend(name.bytes());
        pickle.extend(b"J");
        pickle.extend(i.to_le_bytes());
        pickle.push(b'u');
    }
    pickle.extend(b"e.");
    let value = parse_default(&pickle).unwrap();
    let list = value.as_list().unwrap();
    assert_eq!(list.len(), 5000);
    assert_eq!(list[4999].get("k4999"), Some(&Value::Int(4999)));
    assert_eq!(list[17].get("k17"), Some(&Value::Int(17)));
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(500))]

    /// Dicts filled by SETITEMS (stored with shared keys) read exactly as
    /// the same dicts built by DICT (stored as pairs), SETITEMs after.
    #[test]
    fn dicts_set_by_setitems_read_like_dicts_built_whole(
        dicts in proptest::collection::vec(
            (
                proptest::collection::vec((0u8..8, 0u8..200), 0..6),
                proptest::collection::vec((0u8..8, 0u8..200), 0..3),
            ),
            0..30,
        )
    ) {
        proptest::prop_assert_eq!(
            parse_default(&dicts_pickle(&dicts, true)).unwrap(),
            parse_default(&dicts_pickle(&dicts, false)).unwrap()
        );
    }
}

#[test]
fn a_node_is_its_kind_alone() {
    // Millions of nodes in a large snapshot: the height and flags live in
    // the parser's side table.
    assert!(std::mem::size_of::<super::parser::Node>() <= 32);
}

#[test]
fn heights_past_the_side_table_stay_exact() {
    // `depth` lists, each appended into the one below.
    fn nested(depth: usize) -> Vec<u8> {
        let mut pickle = vec![b']'; depth];
        pickle.extend(std::iter::repeat_n(b'a', depth - 1));
        pickle.push(b'.');
        pickle
    }
    let limits = Limits {
        max_depth: 16_390,
        ..Limits::default()
    };
    // Dropping a deep value recurses once per level: a thread with room.
    let outcome = std::thread::Builder::new()
        .stack_size(512 << 20)
        .spawn(move || {
            [16_380, 16_390, 16_391, 16_400]
                .map(|depth| (depth, parse(&nested(depth), &limits).is_ok()))
        })
        .unwrap()
        .join()
        .unwrap();
    assert_eq!(
        outcome,
        [
            (16_380, true),
            (16_390, true),
            (16_391, false),
            (16_400, false)
        ]
    );
}

#[test]
fn a_traceback_span_read_again_after_its_memo_entry_changed_reads_the_new_entry() {
    // (1, 2, [m0, m1], 9, [m0, m1]) with memo 0 rewritten to 9 between the
    // two lists: the second list's bytes equal the first's.
    let pickle = b"\x80\x04(K\x01\x94K\x02\x94]\x94(h\x00h\x01eK\x09q\x00]\x94(h\x00h\x01et.";
    let value = parse_default(pickle).unwrap();
    let items = match &value {
        Value::Tuple(items) => items.clone(),
        other => panic!("{other:?}"),
    };
    let ints = |v: &Value| -> Vec<Value> { v.as_list().unwrap().to_vec() };
    assert_eq!(ints(&items[2]), vec![Value::Int(1), Value::Int(2)]);
    assert_eq!(ints(&items[4]), vec![Value::Int(9), Value::Int(2)]);
    // The same span again without the rewrite is the same list.
    let again = b"\x80\x04(K\x01\x94K\x02\x94]\x94(h\x00h\x01e]\x94(h\x00h\x01et.";
    let value = parse_default(again).unwrap();
    let Value::Tuple(items) = &value else {
        panic!("{value:?}")
    };
    assert_eq!(items[2].identity(), items[3].identity());
}

/// A pickle of a tuple of lists of memoised ints: first `memo_len` ints
/// memoised (LONG_BINPUT), then per step either a memo entry rewritten or
/// a fresh list filled by `MARK (BINGET|LONG_BINGET)* APPENDS`, as
/// CPython writes tracebacks; and the tuple it stands for.
fn memo_lists_pickle(memo_len: u16, steps: &[MemoStep]) -> (Vec<u8>, Value) {
    let mut memo: Vec<i128> = (0..i128::from(memo_len)).map(|i| 1000 + i).collect();
    let mut pickle = b"\x80\x04(".to_vec();
    for (index, value) in memo.iter().enumerate() {
        pickle.push(b'M');
        pickle.extend((*value as u16).to_le_bytes());
        pickle.push(b'r');
        pickle.extend((index as u32).to_le_bytes());
        pickle.push(b'0');
    }
    let mut lists = Vec::new();
    for step in steps {
        match step {
            MemoStep::Rewrite(index, value) => {
                let index = usize::from(*index) % memo.len();
                memo[index] = i128::from(*value);
                pickle.push(b'M');
                pickle.extend(value.to_le_bytes());
                pickle.push(b'r');
                pickle.extend((index as u32).to_le_bytes());
                pickle.push(b'0');
            }
            MemoStep::List(fetches) => {
                pickle.extend(b"](");
                let mut items = Vec::new();
                for &(index, long) in fetches {
                    let index = usize::from(index) % memo.len();
                    if long || index > 255 {
                        pickle.push(b'j');
                        pickle.extend((index as u32).to_le_bytes());
                    } else {
                        pickle.extend([b'h', index as u8]);
                    }
                    items.push(Value::Int(memo[index]));
                }
                pickle.push(b'e');
                lists.push(Value::List(items.into()));
            }
        }
    }
    pickle.extend(b"t.");
    (pickle, Value::Tuple(lists.into()))
}

#[derive(Debug, Clone)]
enum MemoStep {
    Rewrite(u16, u16),
    List(Vec<(u16, bool)>),
}

/// Steps that repeat a few tracebacks whole, with their ends changed (the
/// same first fetches, then others) and with memo rewrites between them.
fn memo_steps() -> impl proptest::strategy::Strategy<Value = Vec<MemoStep>> {
    use proptest::prelude::*;
    let fetch = (0u16..400, any::<bool>());
    let templates =
        proptest::collection::vec(proptest::collection::vec(fetch.clone(), 0..24), 1..5);
    let step = (
        0u8..10,
        any::<usize>(),
        proptest::option::of((0usize..24, fetch)),
        any::<(u16, u16)>(),
    );
    (templates, proptest::collection::vec(step, 0..40)).prop_map(|(templates, steps)| {
        steps
            .into_iter()
            .map(|(kind, which, change, rewrite)| {
                if kind == 0 {
                    return MemoStep::Rewrite(rewrite.0, rewrite.1);
                }
                let mut fetches = templates[which % templates.len()].clone();
                if let Some((at, fetch)) = change
                    && kind < 4
                {
                    fetches.truncate(at);
                    fetches.push(fetch);
                }
                MemoStep::List(fetches)
            })
            .collect()
    })
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]

    /// Lists of memo fetches read as the memo says at the time, however
    /// often their bytes (or their first bytes) repeat and whatever the
    /// memo rewrites between them.
    #[test]
    fn repeated_traceback_spans_read_as_the_memo_says(
        memo_len in 1u16..300,
        steps in memo_steps(),
    ) {
        let (pickle, expected) = memo_lists_pickle(memo_len, &steps);
        proptest::prop_assert_eq!(parse_default(&pickle).unwrap(), expected);
    }
}

#[test]
fn tracebacks_that_begin_alike_read_as_their_own_fetches() {
    // Two 10-fetch lists with the same first 8 fetches (the 16 bytes that
    // find a span kept before), taking turns.
    let first: Vec<(u16, bool)> = (0..10).map(|i| (i, false)).collect();
    let mut second = first.clone();
    second[8] = (40, false);
    second[9] = (41, true);
    let steps: Vec<MemoStep> = (0..6)
        .map(|i| {
            MemoStep::List(if i % 2 == 0 {
                first.clone()
            } else {
                second.clone()
            })
        })
        .collect();
    let (pickle, expected) = memo_lists_pickle(50, &steps);
    let value = parse_default(&pickle).unwrap();
    assert_eq!(value, expected);
    let Value::Tuple(lists) = &value else {
        panic!("{value:?}")
    };
    // The same bytes again are the same list.
    assert_eq!(lists[0].identity(), lists[2].identity());
    assert_eq!(lists[1].identity(), lists[5].identity());
    assert_ne!(lists[0].identity(), lists[1].identity());
}

proptest::proptest! {
    /// LONG1 of any 0 to 16 bytes is their little-endian two's complement.
    #[test]
    fn long1_of_any_bytes_reads_as_their_twos_complement(
        bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..=16)
    ) {
        let negative = bytes.last().is_some_and(|b| b & 0x80 != 0);
        let mut buf = [if negative { 0xff } else { 0 }; 16];
        buf[..bytes.len()].copy_from_slice(&bytes);
        let expected = Value::Int(i128::from_le_bytes(buf));
        // At the input's end, and followed by 8 more opcodes (NONE).
        let mut pickle = vec![0x8a, bytes.len() as u8];
        pickle.extend(&bytes);
        pickle.push(b'.');
        proptest::prop_assert_eq!(parse_default(&pickle).unwrap(), expected.clone());
        let mut pickle = vec![b'(', 0x8a, bytes.len() as u8];
        pickle.extend(&bytes);
        pickle.extend(b"NNNNNNNNt.");
        let value = parse_default(&pickle).unwrap();
        let Value::Tuple(items) = &value else {
            panic!("{value:?}")
        };
        proptest::prop_assert_eq!(&items[0], &expected);
        proptest::prop_assert_eq!(items.len(), 9);
    }
}

#[test]
fn a_list_in_a_tuple_reads_back_after_an_equal_list_is_moved_elsewhere() {
    // m3 = [] goes into a tuple while still open, then (fetched from the
    // memo) into another list, where it is interned as an alias of the
    // earlier equal list m4: the tuple must still read it.
    // (0, 1, {}, m3 := [], m4 := [], 0, 0) = m7; then [m3]; then [0, m7].
    let pickle = b"\x80\x04(K\x00\x94K\x01\x94}\x94]\x94]\x94(eK\x00\x94K\x00\x94t\x94]\x94(g3\ne]\x94(g0\ne(g7\ne.";
    let empty = || Value::List(Vec::new().into());
    let tuple = Value::Tuple(
        vec![
            Value::Int(0),
            Value::Int(1),
            Value::Dict(Vec::new().into()),
            empty(),
            empty(),
            Value::Int(0),
            Value::Int(0),
        ]
        .into(),
    );
    assert_eq!(
        parse_default(pickle).unwrap(),
        Value::List(vec![Value::Int(0), tuple].into())
    );
}

/// Any opcode of [`small_op`], the containers built whole and the other
/// stack opcodes, in chunks like [`small_chunk`]'s.
fn wide_chunk() -> impl proptest::strategy::Strategy<Value = Vec<SmallOp>> {
    use proptest::prelude::*;
    let other = prop_oneof![
        (0u8..3).prop_map(SmallOp::TupleOf),
        Just(SmallOp::List),
        Just(SmallOp::Dict),
        Just(SmallOp::Dup),
        Just(SmallOp::SetItem),
        Just(SmallOp::PopMark),
    ];
    prop_oneof![
        3 => small_chunk(),
        1 => other.prop_map(|op| vec![op]),
    ]
}

/// What `bytes` reads as with no list interned at all: the plain
/// semantics that interning (and every fast path behind it) must keep.
fn parse_without_interning(bytes: &[u8]) -> Result<Value, PickleError> {
    let limits = Limits::default();
    let mut parser = super::parser::Parser::new(bytes, &limits);
    parser.intern = false;
    let root = parser.run()?;
    Document::new(parser.arena, parser.scalars, root, limits.max_depth).freeze_root()
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(10000))]

    /// Interning lists, the memo-run fast path and the span cache read
    /// every sequence of these opcodes (containers built whole, DUP,
    /// SETITEM, memo rewrites) as the parse without interning does.
    #[test]
    fn interning_never_changes_what_a_pickle_reads(
        chunks in proptest::collection::vec(wide_chunk(), 1..20),
        text_gets in proptest::prelude::any::<bool>(),
    ) {
        let (ops, marks) = after_memoised_values(&chunks);
        for closing in 0..=marks + 1 {
            let pickle = ops_to_pickle(&ops, text_gets, closing);
            match (parse_default(&pickle), parse_without_interning(&pickle)) {
                (Ok(interned), Ok(plain)) => proptest::prop_assert_eq!(interned, plain),
                (Err(_), Err(_)) => {}
                (interned, plain) => proptest::prop_assert!(
                    false,
                    "interned {interned:?} against plain {plain:?}"
                ),
            }
        }
    }
}
