//! Allocator settings parsed from the `PYTORCH_CUDA_ALLOC_CONF` /
//! `PYTORCH_ALLOC_CONF` string syntax, with PyTorch's validation (spec §1.5).

use serde::Serialize;
use thiserror::Error;

use super::sizing::LARGE_BUFFER;

const MIB: u64 = 1 << 20;
/// Slots of the `roundup_power2_divisions` table: slot k covers
/// [2^k MiB, 2^(k+1) MiB), slot 0 everything below 2 MiB, slot 15 ≥ 32 GiB.
pub const ROUNDUP_SLOTS: usize = 16;

/// A setting string that PyTorch would refuse.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ConfigError {
    /// An option PyTorch does not know, with the known one it is most
    /// likely a misspelling of, if any: that one named, else all of them.
    #[error("unrecognized allocator option '{key}' ({})", unknown_key_hint(*near))]
    UnknownKey {
        key: String,
        near: Option<&'static str>,
    },
    #[error("allocator option '{key}' expects {expected}, found '{found}'")]
    BadValue {
        key: String,
        expected: &'static str,
        found: String,
    },
    #[error("max_split_size_mb too small: {0} MiB, it must be at least 20 MiB")]
    MaxSplitTooSmall(u64),
    #[error("max_non_split_rounding_mb too small: {0} MiB, it must be at least 20 MiB")]
    MaxNonSplitRoundingTooSmall(u64),
    #[error("garbage_collection_threshold must be strictly between 0.0 and 1.0, found {0}")]
    GcThresholdOutOfRange(f64),
    #[error("roundup_power2_divisions: {0}")]
    Roundup(String),
    #[error("per_process_memory_fraction must be within [0.0, 1.0], found {0}")]
    FractionOutOfRange(f64),
    #[error("allocator settings syntax error: {0}")]
    Syntax(String),
    /// Valid for PyTorch, but not something the model can run
    /// ([`AllocatorConfig::parse_modelled`]).
    #[error("{0}")]
    NotModelled(&'static str),
}

/// What an unknown option's error adds in parentheses: the option it is
/// near ("did you mean 'expandable_segments'?", as the config file says of
/// a key), else the list of known ones.
fn unknown_key_hint(near: Option<&str>) -> String {
    match near {
        Some(known) => format!("did you mean '{known}'?"),
        None => format!("known: {}", KNOWN_KEYS.join(", ")),
    }
}

const KNOWN_KEYS: &[&str] = &[
    "max_split_size_mb",
    "max_non_split_rounding_mb",
    "garbage_collection_threshold",
    "roundup_power2_divisions",
    "expandable_segments",
    "release_lock_on_cudamalloc",
    "per_process_memory_fraction",
    "backend",
    "pinned_use_cuda_host_register",
    "pinned_num_register_threads",
    "pinned_use_background_threads",
    "graph_capture_record_stream_reuse",
];

/// The allocator's tunables. `Default` is PyTorch's default configuration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AllocatorConfig {
    /// Blocks of this size or more are "oversize": never split, only reused
    /// within `max_non_split_rounding_size`. `None` = unlimited (PyTorch's
    /// SIZE_MAX, reported as -1).
    pub max_split_size: Option<u64>,
    /// Slack allowed when an oversize block serves a request (bytes).
    pub max_non_split_rounding_size: u64,
    /// Divisions per power-of-two interval; 0 or 1 = plain 512-byte rounding.
    pub roundup_power2_divisions: [u64; ROUNDUP_SLOTS],
    /// Fraction of the allowed memory above which cached blocks are
    /// garbage-collected; 0 = off. Only active with a memory fraction.
    pub garbage_collection_threshold: f64,
    pub expandable_segments: bool,
    pub release_lock_on_cudamalloc: bool,
    /// Like `torch.cuda.set_per_process_memory_fraction` at start-up.
    pub per_process_memory_fraction: Option<f64>,
    /// The last settings string applied, as PyTorch exports it in snapshots.
    pub last_settings: String,
    /// `backend:cudaMallocAsync`: PyTorch then hands every allocation to
    /// CUDA's stream-ordered pool and there is no caching allocator (see
    /// [`AllocatorConfig::not_modelled`]).
    pub cuda_malloc_async: bool,
}

impl Default for AllocatorConfig {
    fn default() -> Self {
        AllocatorConfig {
            max_split_size: None,
            max_non_split_rounding_size: LARGE_BUFFER,
            roundup_power2_divisions: [0; ROUNDUP_SLOTS],
            garbage_collection_threshold: 0.0,
            expandable_segments: false,
            release_lock_on_cudamalloc: false,
            per_process_memory_fraction: None,
            last_settings: String::new(),
            cuda_malloc_async: false,
        }
    }
}

impl AllocatorConfig {
    /// Why the model cannot stand for these settings, when it cannot: the
    /// model is PyTorch's native caching allocator, and with
    /// `backend:cudaMallocAsync` PyTorch does not use one.
    pub fn not_modelled(&self) -> Option<&'static str> {
        self.cuda_malloc_async.then_some(
            "backend:cudaMallocAsync hands allocations to CUDA's own stream-ordered pool, \
             which vramtop does not model (it models the native caching allocator)",
        )
    }

    /// [`AllocatorConfig::parse`] for settings the model is to run: those
    /// it cannot stand for are refused as [`ConfigError::NotModelled`].
    pub fn parse_modelled(settings: &str) -> Result<Self, ConfigError> {
        let config = Self::parse(settings)?;
        match config.not_modelled() {
            Some(why) => Err(ConfigError::NotModelled(why)),
            None => Ok(config),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Word(String),
    Colon,
    Comma,
    Open,
    Close,
}

fn tokenize(s: &str) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut word = String::new();
    let flush = |word: &mut String, tokens: &mut Vec<Token>| {
        if !word.is_empty() {
            tokens.push(Token::Word(std::mem::take(word)));
        }
    };
    for ch in s.chars() {
        let punct = match ch {
            ':' => Some(Token::Colon),
            ',' => Some(Token::Comma),
            '[' => Some(Token::Open),
            ']' => Some(Token::Close),
            c if c.is_whitespace() => {
                continue;
            }
            _ => None,
        };
        match punct {
            Some(p) => {
                flush(&mut word, &mut tokens);
                tokens.push(p);
            }
            None => word.push(ch),
        }
    }
    flush(&mut word, &mut tokens);
    tokens
}

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
}

impl Parser {
    fn next(&mut self) -> Option<Token> {
        let t = self.tokens.get(self.pos).cloned();
        self.pos += 1;
        t
    }
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }
    fn expect_colon(&mut self, key: &str) -> Result<(), ConfigError> {
        match self.next() {
            Some(Token::Colon) => Ok(()),
            _ => Err(ConfigError::Syntax(format!("expected ':' after '{key}'"))),
        }
    }
    fn word(&mut self, key: &str) -> Result<String, ConfigError> {
        match self.next() {
            Some(Token::Word(w)) => Ok(w),
            _ => Err(ConfigError::Syntax(format!("expected a value for '{key}'"))),
        }
    }
}

fn parse_u64(key: &str, w: &str) -> Result<u64, ConfigError> {
    w.parse::<u64>().map_err(|_| ConfigError::BadValue {
        key: key.to_string(),
        // Digits past a u64 are a non-negative integer, too large: the
        // range says so.
        expected: if !w.is_empty() && w.bytes().all(|b| b.is_ascii_digit()) {
            "an integer in 0..=18446744073709551615"
        } else {
            "a non-negative integer"
        },
        found: w.to_string(),
    })
}

fn parse_f64(key: &str, w: &str) -> Result<f64, ConfigError> {
    match w.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        _ => Err(ConfigError::BadValue {
            key: key.to_string(),
            expected: "a number",
            found: w.to_string(),
        }),
    }
}

fn parse_bool(key: &str, w: &str) -> Result<bool, ConfigError> {
    match w {
        "True" => Ok(true),
        "False" => Ok(false),
        _ => Err(ConfigError::BadValue {
            key: key.to_string(),
            expected: "True or False",
            found: w.to_string(),
        }),
    }
}

fn slot_of_mib(key_mib: u64) -> usize {
    (key_mib.trailing_zeros() as usize).min(ROUNDUP_SLOTS - 1)
}

impl AllocatorConfig {
    /// Parses a settings string into a fresh configuration.
    pub fn parse(settings: &str) -> Result<Self, ConfigError> {
        let mut config = AllocatorConfig::default();
        config.apply(settings)?;
        Ok(config)
    }

    /// Applies a settings string as `_set_allocator_settings` does: options
    /// not mentioned fall back to their defaults (max_split_size, the roundup
    /// table and the GC threshold), except `expandable_segments`, which keeps
    /// its value. On error nothing changes.
    pub fn apply(&mut self, settings: &str) -> Result<(), ConfigError> {
        let mut next = AllocatorConfig {
            expandable_segments: self.expandable_segments,
            release_lock_on_cudamalloc: self.release_lock_on_cudamalloc,
            per_process_memory_fraction: self.per_process_memory_fraction,
            ..AllocatorConfig::default()
        };
        let mut p = Parser {
            tokens: tokenize(settings),
            pos: 0,
        };
        while let Some(tok) = p.next() {
            let key = match tok {
                Token::Word(w) => w,
                Token::Comma => continue,
                other => {
                    return Err(ConfigError::Syntax(format!(
                        "unexpected {other:?} where an option name belongs"
                    )));
                }
            };
            p.expect_colon(&key)?;
            match key.as_str() {
                "max_split_size_mb" => {
                    let mb = parse_u64(&key, &p.word(&key)?)?;
                    if mb < LARGE_BUFFER / MIB {
                        return Err(ConfigError::MaxSplitTooSmall(mb));
                    }
                    next.max_split_size = Some(mb.min(u64::MAX / MIB) * MIB);
                }
                "max_non_split_rounding_mb" => {
                    let mb = parse_u64(&key, &p.word(&key)?)?;
                    if mb < LARGE_BUFFER / MIB {
                        return Err(ConfigError::MaxNonSplitRoundingTooSmall(mb));
                    }
                    next.max_non_split_rounding_size = mb.min(u64::MAX / MIB) * MIB;
                }
                "garbage_collection_threshold" => {
                    let f = parse_f64(&key, &p.word(&key)?)?;
                    if f <= 0.0 || f >= 1.0 {
                        return Err(ConfigError::GcThresholdOutOfRange(f));
                    }
                    next.garbage_collection_threshold = f;
                }
                "roundup_power2_divisions" => {
                    next.roundup_power2_divisions = parse_roundup(&mut p)?;
                }
                "expandable_segments" => {
                    next.expandable_segments = parse_bool(&key, &p.word(&key)?)?;
                }
                "release_lock_on_cudamalloc" => {
                    next.release_lock_on_cudamalloc = parse_bool(&key, &p.word(&key)?)?;
                }
                "per_process_memory_fraction" => {
                    let f = parse_f64(&key, &p.word(&key)?)?;
                    if !(0.0..=1.0).contains(&f) {
                        return Err(ConfigError::FractionOutOfRange(f));
                    }
                    next.per_process_memory_fraction = Some(f);
                }
                "backend" => {
                    let w = p.word(&key)?;
                    if w != "native" && w != "cudaMallocAsync" {
                        return Err(ConfigError::BadValue {
                            key,
                            expected: "native or cudaMallocAsync",
                            found: w,
                        });
                    }
                    next.cuda_malloc_async = w == "cudaMallocAsync";
                }
                "pinned_use_cuda_host_register"
                | "pinned_use_background_threads"
                | "graph_capture_record_stream_reuse" => {
                    parse_bool(&key, &p.word(&key)?)?;
                }
                "pinned_num_register_threads" => {
                    let n = parse_u64(&key, &p.word(&key)?)?;
                    if !n.is_power_of_two() || n > 128 {
                        return Err(ConfigError::BadValue {
                            key,
                            expected: "a power of two up to 128",
                            found: n.to_string(),
                        });
                    }
                }
                _ => {
                    let near = super::spelling::nearest(&key, KNOWN_KEYS.iter().copied());
                    return Err(ConfigError::UnknownKey { key, near });
                }
            }
            match p.peek() {
                None | Some(Token::Comma) => {}
                Some(other) => {
                    return Err(ConfigError::Syntax(format!(
                        "unexpected {other:?} after the value of '{key}'"
                    )));
                }
            }
        }
        next.last_settings = settings.to_string();
        *self = next;
        Ok(())
    }

    /// Divisions that apply to a request of `size` bytes (lookup by the
    /// unrounded size).
    pub fn roundup_power2_divisions_for(&self, size: u64) -> u64 {
        let log2 = 63 - size.max(1).leading_zeros() as i64;
        let slot = (log2 - 20).clamp(0, ROUNDUP_SLOTS as i64 - 1) as usize;
        self.roundup_power2_divisions[slot]
    }

    /// `memory_stats()["max_split_size"]`: -1 when unlimited.
    pub fn max_split_size_stat(&self) -> i64 {
        self.max_split_size
            .map_or(-1, |v| i64::try_from(v).unwrap_or(i64::MAX))
    }

    /// The effective oversize threshold (u64::MAX when unlimited).
    pub fn max_split_size_bytes(&self) -> u64 {
        self.max_split_size.unwrap_or(u64::MAX)
    }
}

fn parse_roundup(p: &mut Parser) -> Result<[u64; ROUNDUP_SLOTS], ConfigError> {
    let mut table = [0u64; ROUNDUP_SLOTS];
    let check_div = |v: u64| {
        if v == 0 || v.is_power_of_two() {
            Ok(v)
        } else {
            Err(ConfigError::Roundup(format!(
                "divisions must be 0 or a power of two, found {v}"
            )))
        }
    };
    match p.next() {
        Some(Token::Word(w)) => {
            let v = check_div(parse_u64("roundup_power2_divisions", &w)?)?;
            table = [v; ROUNDUP_SLOTS];
        }
        Some(Token::Open) => {
            let mut last_slot: Option<usize> = None;
            let mut first = true;
            loop {
                match p.next() {
                    Some(Token::Close) => break,
                    Some(Token::Comma) => continue,
                    Some(Token::Word(k)) => {
                        p.expect_colon(&k)?;
                        let v = check_div(parse_u64("roundup_power2_divisions", &p.word(&k)?)?)?;
                        if k == ">" {
                            let from = last_slot.map_or(0, |s| s + 1);
                            for slot in table.iter_mut().skip(from) {
                                *slot = v;
                            }
                        } else {
                            let key_mib = parse_u64("roundup_power2_divisions", &k)?;
                            if !key_mib.is_power_of_two() {
                                return Err(ConfigError::Roundup(format!(
                                    "interval sizes must be powers of two (MiB), found {key_mib}"
                                )));
                            }
                            let slot = slot_of_mib(key_mib);
                            if first {
                                for s in table.iter_mut().take(slot + 1) {
                                    *s = v;
                                }
                            } else {
                                table[slot] = v;
                            }
                            last_slot = Some(slot);
                        }
                        first = false;
                    }
                    _ => {
                        return Err(ConfigError::Roundup(
                            "unterminated list: expected ']'".to_string(),
                        ));
                    }
                }
            }
        }
        _ => {
            return Err(ConfigError::Roundup(
                "expected a number or a [size:divisions,...] list".to_string(),
            ));
        }
    }
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_option_names_the_known_one_a_typo_away_else_all_of_them() {
        let err = AllocatorConfig::parse("expandable_segment:True")
            .expect_err("unknown")
            .to_string();
        assert_eq!(
            err,
            "unrecognized allocator option 'expandable_segment' \
             (did you mean 'expandable_segments'?)"
        );
        let err = AllocatorConfig::parse("Max_Split_Size_MB:128")
            .expect_err("case matters to PyTorch")
            .to_string();
        assert!(err.contains("did you mean 'max_split_size_mb'?"), "{err}");
        let err = AllocatorConfig::parse("garbage:1")
            .expect_err("unknown")
            .to_string();
        assert!(!err.contains("did you mean"), "{err}");
        assert!(err.contains("(known: max_split_size_mb, "), "{err}");
    }

    #[test]
    fn an_integer_setting_past_u64_is_said_with_its_range() {
        let err = AllocatorConfig::parse("max_split_size_mb:99999999999999999999999")
            .expect_err("past u64")
            .to_string();
        assert!(
            err.contains("expects an integer in 0..=18446744073709551615"),
            "{err}"
        );
        assert!(!err.contains("non-negative integer"), "{err}");
        let err = AllocatorConfig::parse("max_split_size_mb:x")
            .expect_err("not a number")
            .to_string();
        assert!(err.contains("expects a non-negative integer"), "{err}");
    }

    #[test]
    fn cuda_malloc_async_parses_but_is_said_not_modelled() {
        let native = AllocatorConfig::parse("backend:native").expect("valid");
        assert_eq!(native.not_modelled(), None);
        let pool = AllocatorConfig::parse("backend:cudaMallocAsync").expect("PyTorch takes it");
        let why = pool.not_modelled().expect("not modelled");
        assert!(why.contains("does not model"), "{why}");
        assert_eq!(
            AllocatorConfig::parse_modelled("backend:cudaMallocAsync"),
            Err(ConfigError::NotModelled(why))
        );
        assert!(AllocatorConfig::parse_modelled("backend:native").is_ok());
        // Not sticky: the next settings string says its own backend.
        let mut config = pool;
        config.apply("max_split_size_mb:20").expect("valid");
        assert_eq!(config.not_modelled(), None);
    }
    use crate::alloc::sizing::round_size;

    #[test]
    fn empty_settings_are_pytorch_defaults() {
        let c = AllocatorConfig::parse("").expect("valid");
        assert_eq!(c, AllocatorConfig::default());
        assert_eq!(c.max_split_size_stat(), -1);
    }

    #[test]
    fn max_split_size_below_20_mib_is_refused_and_says_so() {
        let err = AllocatorConfig::parse("max_split_size_mb:2").expect_err("too small");
        assert_eq!(err, ConfigError::MaxSplitTooSmall(2));
        assert!(err.to_string().contains("at least 20"));
        let ok = AllocatorConfig::parse("max_split_size_mb:20").expect("20 is allowed");
        assert_eq!(ok.max_split_size, Some(20 * MIB));
    }

    #[test]
    fn invalid_settings_from_pytorch_tests_are_refused() {
        for bad in [
            "foo:1",
            "garbage_collection_threshold:1.2",
            "garbage_collection_threshold:0",
            "max_split_size_mb:2",
            "roundup_power2_divisions:3",
            "roundup_power2_divisions:[100:2]",
            "expandable_segments:true",
            "per_process_memory_fraction:1.5",
            "max_split_size_mb:abc",
        ] {
            assert!(
                AllocatorConfig::parse(bad).is_err(),
                "{bad} should be refused"
            );
        }
    }

    #[test]
    fn roundup_list_form_fills_first_and_greater_slots() {
        let c =
            AllocatorConfig::parse("roundup_power2_divisions:[64:8,128:2,256:2,512:2,1024:1,>:1]")
                .expect("valid");
        assert_eq!(round_size(84 * MIB, &c), 88 * MIB);
        assert_eq!(round_size(400 * MIB, &c), 512 * MIB);
        // The first key fills every lower slot.
        assert_eq!(c.roundup_power2_divisions[0], 8);
        assert_eq!(c.roundup_power2_divisions[15], 1);
    }

    #[test]
    fn every_settings_call_resets_roundup_but_keeps_expandable() {
        let mut c = AllocatorConfig::parse("roundup_power2_divisions:4,expandable_segments:True")
            .expect("valid");
        assert_eq!(round_size(84 * MIB, &c), 96 * MIB);
        c.apply("garbage_collection_threshold:0.5,max_split_size_mb:40")
            .expect("valid");
        assert_eq!(round_size(84 * MIB, &c), 84 * MIB);
        assert!(c.expandable_segments);
        assert_eq!(c.max_split_size, Some(40 * MIB));
    }

    #[test]
    fn spaces_are_ignored_and_failed_apply_changes_nothing() {
        let mut c =
            AllocatorConfig::parse(" expandable_segments : True , max_split_size_mb : 128 ")
                .expect("valid");
        assert!(c.expandable_segments);
        let before = c.clone();
        assert!(c.apply("max_split_size_mb:1").is_err());
        assert_eq!(c, before);
    }
}
