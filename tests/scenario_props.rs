//! Scenario files are input: arbitrary text, and scenarios assembled from
//! pieces both valid and not (huge `times` and `count`, nested repeats,
//! unknown variants, bad sizes and settings), are parsed and, when they
//! parse, run through the model. Nothing may panic, every refusal is one
//! line of bounded length, and a run never exceeds the documented bounds.

mod common;

use proptest::prelude::*;
use vramtop::scenario::format::{MAX_ALLOCATIONS, MAX_STEPS, MAX_VARIANTS};
use vramtop::scenario::{Action, parse, run};

/// The longest refusal a scenario may get: names and sizes are quoted cut
/// short, the TOML parser's message is cut too.
const MAX_ERROR_BYTES: usize = 1_000;

fn assert_one_line(error: &str) -> Result<(), TestCaseError> {
    common::assert_one_line("scenario", error, MAX_ERROR_BYTES)
}

fn size() -> impl Strategy<Value = String> {
    prop_oneof![
        10 => Just("512B".to_string()),
        10 => Just("2MiB".to_string()),
        10 => Just("30MiB".to_string()),
        4 => Just("1.5GiB".to_string()),
        10 => "[1-9][0-9]{0,3}(KiB|MiB)",
        1 => Just("0".to_string()),
        // No unit: refused, as on the command line.
        1 => Just("512".to_string()),
        1 => Just("-1".to_string()),
        1 => Just("99999999999999999999999TiB".to_string()),
        1 => Just("twelve".to_string()),
    ]
}

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => Just("w".to_string()),
        4 => Just("act{i}".to_string()),
        4 => Just("g{n}".to_string()),
        2 => "[a-c]{1,2}",
    ]
}

fn times() -> impl Strategy<Value = u64> {
    prop_oneof![
        40 => 1..4u64,
        1 => Just(0u64),
        1 => Just(10_000u64),
        1 => Just(4_000_000_000u64),
        // Not an i64: TOML refuses it.
        1 => Just(u64::MAX),
    ]
}

fn count() -> impl Strategy<Value = Option<u64>> {
    prop_oneof![
        20 => Just(None),
        20 => (1..5u64).prop_map(Some),
        1 => Just(Some(0)),
        1 => Just(Some(MAX_ALLOCATIONS as u64)),
        1 => Just(Some(4_000_000_000)),
    ]
}

fn only() -> impl Strategy<Value = Option<Vec<String>>> {
    proptest::option::weighted(
        0.05,
        proptest::collection::vec(
            prop_oneof![
                4 => Just("v0".to_string()),
                4 => Just("v1".to_string()),
                1 => Just("nope".to_string())
            ],
            1..3,
        ),
    )
}

/// What a free names: mostly prefixes of what the steps allocate.
fn free_pattern() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => Just("w*".to_string()),
        6 => Just("act*".to_string()),
        6 => Just("g*".to_string()),
        2 => Just("act{i}".to_string()),
        1 => Just("w".to_string()),
        1 => Just("never_held".to_string()),
    ]
}

/// One step's `key = value` fields, `depth` levels of `repeat` allowed.
fn step(depth: u32) -> BoxedStrategy<Vec<String>> {
    let leaf = prop_oneof![
        14 => (name(), size(), count()).prop_map(|(n, s, c)| {
            let count = c.map(|c| format!(", count = {c}")).unwrap_or_default();
            format!("alloc = {{ name = \"{n}\", size = \"{s}\"{count} }}")
        }),
        10 => free_pattern().prop_map(|n| format!("free = \"{n}\"")),
        3 => proptest::collection::vec(free_pattern(), 1..3).prop_map(|ns| {
            let list: Vec<String> = ns.iter().map(|n| format!("\"{n}\"")).collect();
            format!("free = [{}]", list.join(", "))
        }),
        5 => Just("empty_cache = true".to_string()),
        1 => prop_oneof![
            Just("free = 7"),
            Just("repeat = { times = 2, steps = [] }"),
            Just("free = []"),
            Just("free = \"\""),
            Just("empty_cache = false"),
            Just("alloc = { name = \"\", size = \"1B\" }"),
            Just("alloc = { name = \"w*\", size = \"1B\" }"),
        ]
        .prop_map(str::to_string),
    ];
    let body = if depth == 0 {
        leaf.boxed()
    } else {
        prop_oneof![
            3 => leaf,
            1 => (times(), proptest::collection::vec(step(depth - 1), 1..3)).prop_map(
                |(t, inner)| {
                    let inner: Vec<String> =
                        inner.iter().map(|s| format!("{{ {} }}", s.join(", "))).collect();
                    format!("repeat = {{ times = {t}, steps = [{}] }}", inner.join(", "))
                }
            ),
        ]
        .boxed()
    };
    (body, only(), proptest::option::of(name()))
        .prop_map(|(body, only, label)| {
            let mut fields = vec![body];
            if let Some(only) = only {
                let list: Vec<String> = only.iter().map(|n| format!("\"{n}\"")).collect();
                fields.push(format!("only = [{}]", list.join(", ")));
            }
            if let Some(label) = label {
                fields.push(format!("label = \"{label}\""));
            }
            fields
        })
        .boxed()
}

fn alloc_conf() -> impl Strategy<Value = Option<String>> {
    proptest::option::weighted(
        0.5,
        prop_oneof![
            4 => Just(String::new()),
            4 => Just("expandable_segments:True".to_string()),
            4 => Just("max_split_size_mb:64".to_string()),
            4 => Just("garbage_collection_threshold:0.8".to_string()),
            4 => Just("roundup_power2_divisions:4".to_string()),
            1 => Just("max_split_size_mb:banana".to_string()),
            4 => Just("max_split_size_mb:64,expandable_segments:True".to_string()),
            1 => Just("no_such_setting:1".to_string()),
        ],
    )
}

fn scenario_text() -> impl Strategy<Value = String> {
    (
        prop_oneof![
            20 => Just("8GiB"),
            20 => Just("80GiB"),
            2 => Just("100MiB"),
            1 => Just("lots"),
        ],
        proptest::option::weighted(
            0.3,
            prop_oneof![20 => Just("500MiB"), 1 => Just("100GiB"), 1 => Just("x")],
        ),
        alloc_conf(),
        prop_oneof![
            20 => proptest::collection::vec((0..20usize, alloc_conf(), 0..3u32), 0..4),
            1 => proptest::collection::vec((0..20usize, alloc_conf(), 0..3u32), MAX_VARIANTS + 1),
        ],
        proptest::collection::vec(step(2), 1..6),
    )
        .prop_map(|(memory, context, conf, variants, steps)| {
            let mut text = format!(
                "name = \"p\"\ntitle = \"t\"\nexplanation = \"e\"\ndevice_memory = \"{memory}\"\n"
            );
            if let Some(c) = context {
                text += &format!("context = \"{c}\"\n");
            }
            if let Some(c) = conf {
                text += &format!("alloc_conf = \"{c}\"\n");
            }
            for (i, (name, conf, workers)) in variants.iter().enumerate() {
                // Now and then two variants share a name, which is refused.
                let name = if *name == 0 { 0 } else { i };
                text += &format!("[[variant]]\nname = \"v{name}\"\n");
                if let Some(c) = conf {
                    text += &format!("alloc_conf = \"{c}\"\n");
                }
                text += &format!("worker_contexts = {workers}\n");
            }
            for s in steps {
                text += &format!("[[step]]\n{}\n", s.join("\n"));
            }
            text
        })
}

/// A value of any TOML type, for a key that expects another, and what a
/// refusal calls it when it is a date or a time (TOML hands serde those as
/// a table of one private key).
fn any_value() -> impl Strategy<Value = (&'static str, Option<&'static str>)> {
    prop_oneof![
        Just(("\"1GiB\"", None)),
        Just(("\"\"", None)),
        Just(("\"8589934592\"", None)),
        Just(("3", None)),
        Just(("8589934592", None)),
        Just(("-1", None)),
        Just(("1.5", None)),
        Just(("true", None)),
        Just(("[]", None)),
        Just(("[1, 2]", None)),
        Just(("[{ x = 1 }]", None)),
        Just(("{}", None)),
        Just(("{ x = 1 }", None)),
        Just(("1979-05-27", Some("a date"))),
        Just(("1979-05-27T07:32:00Z", Some("a date and time"))),
        Just(("1979-05-27 07:32:00", Some("a date and time"))),
        Just(("07:32:00", Some("a time of day"))),
    ]
}

/// A scenario with `value` at one of the format's keys, at every level
/// (top, a `[[variant]]`, a step, an alloc, a repeat, a repeat's steps):
/// the text, the same scenario with the integer `3` there instead, and
/// what a refusal calls the value when it is a date or a time.
fn misplaced_value() -> impl Strategy<Value = (String, String, Option<&'static str>)> {
    let places = prop_oneof![
        Just("name = {v}\ntitle = \"t\"\nexplanation = \"e\"\ndevice_memory = \"1GiB\"\n"),
        Just("{top}device_memory = {v}\n"),
        Just("{top}device_memory = \"1GiB\"\ncontext = {v}\n"),
        Just("{top}device_memory = \"1GiB\"\nalloc_conf = {v}\n"),
        Just("{top}device_memory = \"1GiB\"\nstep = {v}\n"),
        Just("{top}device_memory = \"1GiB\"\nvariant = {v}\n"),
        Just("{top}device_memory = \"1GiB\"\nvariant = [{v}]\n"),
        Just("{head}[[variant]]\nname = {v}\n"),
        Just("{head}[[variant]]\nname = \"v\"\nworker_contexts = {v}\n"),
        Just("{head}[[variant]]\nname = \"v\"\nalloc_conf = {v}\n"),
        Just("{head}[[step]]\nalloc = {v}\n"),
        Just("{head}[[step]]\nrepeat = {v}\n"),
        Just("{head}[[step]]\nfree = {v}\n"),
        Just("{head}[[step]]\nempty_cache = {v}\n"),
        Just("{head}[[step]]\nempty_cache = true\nonly = {v}\n"),
        Just("{head}[[step]]\nempty_cache = true\nlabel = {v}\n"),
        Just("{head}[[step]]\nalloc = {{ name = {v}, size = \"1MiB\" }}\n"),
        Just("{head}[[step]]\nalloc = {{ name = \"a\", size = {v} }}\n"),
        Just("{head}[[step]]\nalloc = {{ name = \"a\", size = \"1MiB\", count = {v} }}\n"),
        Just("{head}[[step]]\nrepeat = {{ times = {v}, steps = [] }}\n"),
        Just("{head}[[step]]\nrepeat = {{ times = 2, steps = {v} }}\n"),
        Just("{head}[[step]]\nrepeat = {{ times = 2, steps = [{v}] }}\n"),
        Just("{head}[[step]]\nrepeat = {{ times = 2, steps = [{{ empty_cache = true }}, {v}] }}\n"),
    ];
    (places, any_value()).prop_map(|(place, (v, datetime))| {
        let top = "name = \"p\"\ntitle = \"t\"\nexplanation = \"e\"\n";
        let head = format!("{top}device_memory = \"1GiB\"\n");
        let at = |v: &str| {
            place
                .replace("{head}", &head)
                .replace("{top}", top)
                .replace("{{", "{")
                .replace("}}", "}")
                .replace("{v}", v)
        };
        (at(v), at("3"), datetime)
    })
}

/// The bytes a refusal suggests a bare number of a size counts, read
/// back: in "write 8589934592B (8GiB)", 8589934592 and 8 GiB.
fn suggested_bytes(error: &str) -> Vec<(u64, u64)> {
    let mut found = Vec::new();
    for (k, _) in error.match_indices("B (") {
        let number = error[..k]
            .rsplit(|c: char| !c.is_ascii_digit() && c != '.')
            .next()
            .unwrap_or_default();
        let reading = error[k + 3..].split(')').next().unwrap_or_default();
        if let (Ok(bytes), Some(size)) =
            (number.parse::<u64>(), vramtop::alloc::parse_size(reading))
        {
            found.push((bytes, size));
        }
    }
    found
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn a_value_of_the_wrong_type_is_refused_in_the_files_words_not_rusts(
        (text, with_integer, datetime) in misplaced_value(),
    ) {
        if let Err(e) = parse(&text) {
            let e = e.to_string();
            assert_one_line(&e)?;
            for rust in [
                "struct ", "Raw", "enum ", "unknown variant", "expected variant", "sequence",
                "option", "$__toml",
            ] {
                prop_assert!(!e.contains(rust), "{rust:?} in {e:?} of\n{text}");
            }
            // A bare number of bytes is never told a unit that makes it
            // more than any GPU's memory (8589934592GiB), and the size
            // its bytes make is said right.
            prop_assert!(!e.contains("8589934592GiB") && !e.contains("8589934592MiB"), "{e}");
            for (bytes, size) in suggested_bytes(&e) {
                prop_assert_eq!(bytes, size, "{}", e);
            }
            // A date or a time is called so, never the table TOML hands
            // serde; where an integer is refused as "KEY expects WHAT
            // (found integer `3`)", it is refused in the same words.
            if let Some(kind) = datetime {
                prop_assert!(!e.contains("found a table"), "{e} of\n{text}");
                prop_assert!(
                    e.contains(&format!("found {kind}")) || e.contains("= 1979-05-27") || e.contains("= 07:32"),
                    "{kind} not said in {e:?} of\n{text}"
                );
                if let Err(integer) = parse(&with_integer) {
                    let integer = integer.to_string();
                    if integer.contains("(found integer `3`)") {
                        prop_assert_eq!(
                            e,
                            integer.replace("(found integer `3`)", &format!("(found {kind})"))
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn any_text_is_a_scenario_or_a_one_line_refusal(text in "\\PC{0,300}") {
        if let Err(e) = parse(&text) {
            assert_one_line(&e.to_string())?;
        }
    }

    #[test]
    fn assembled_scenarios_parse_and_run_within_the_bounds_or_are_refused_in_one_line(
        text in scenario_text(),
    ) {
        let scenario = match parse(&text) {
            Ok(s) => s,
            Err(e) => return assert_one_line(&e.to_string()),
        };
        prop_assert!(scenario.steps.len() <= MAX_STEPS);
        prop_assert!(scenario.variants.len() <= MAX_VARIANTS.max(1));
        let allocations: usize = scenario
            .steps
            .iter()
            .map(|s| match &s.action {
                Action::Alloc { names, .. } => names.len(),
                _ => 0,
            })
            .sum();
        prop_assert!(allocations <= MAX_ALLOCATIONS);
        match run(&scenario) {
            Ok(result) => {
                prop_assert_eq!(result.variants.len(), scenario.variants.len());
                for v in &result.variants {
                    prop_assert!(v.steps.len() <= scenario.steps.len());
                    prop_assert_eq!(v.summary.oom, v.summary.oom_step.is_some());
                }
            }
            Err(e) => assert_one_line(&e.to_string())?,
        }
    }
}
