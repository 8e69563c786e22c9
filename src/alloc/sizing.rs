//! Constants and size arithmetic of PyTorch's caching allocator (spec §1).

use thiserror::Error;

use super::config::AllocatorConfig;

/// Every block is a multiple of this many bytes (`kMinBlockSize`).
pub const MIN_BLOCK_SIZE: u64 = 512;
/// Rounded requests of at most this many bytes use the small pool (`kSmallSize`, 1 MiB).
pub const SMALL_SIZE: u64 = 1 << 20;
/// Segment size of the small pool and page size of small expandable segments (`kSmallBuffer`, 2 MiB).
pub const SMALL_BUFFER: u64 = 2 << 20;
/// Large requests strictly below this get a whole [`LARGE_BUFFER`] segment (`kMinLargeAlloc`, 10 MiB).
pub const MIN_LARGE_ALLOC: u64 = 10 << 20;
/// Segment size for 1–10 MiB requests and page size of large expandable segments (`kLargeBuffer`, 20 MiB).
pub const LARGE_BUFFER: u64 = 20 << 20;
/// Large segments of 10 MiB and more are rounded up to a multiple of this (`kRoundLarge`, 2 MiB).
pub const ROUND_LARGE: u64 = 2 << 20;
/// Requests of this size or more fail before anything else ("more than 1EB").
pub const ONE_EXABYTE: u64 = 1 << 60;
/// More bytes than any device holds (256 TiB: the largest GPUs hold a few
/// hundred GiB, and a 48-bit virtual address space spans no more): a
/// recorded segment, block or event size beyond this is bad input, not
/// something to model.
pub const MAX_DEVICE_BYTES: u64 = 1 << 48;

const MIB: u64 = 1 << 20;

/// Rounds a request up to a power-of-two division (`roundup_power2_next_division`).
///
/// `divisions` must be a power of two of at least 2.
pub fn roundup_power2_next_division(size: u64, divisions: u64) -> u64 {
    if size.is_power_of_two() {
        return size;
    }
    let floor = 1u64 << (63 - size.leading_zeros());
    let step = floor >> divisions.trailing_zeros();
    if step == 0 {
        return floor << 1;
    }
    let rounded_down = size & !(step - 1);
    if rounded_down == size {
        size
    } else {
        // Saturates only for sizes no device holds (callers bound them).
        rounded_down.saturating_add(step)
    }
}

/// The block size actually carved for a request of `size` bytes (`round_size`, §1.2).
pub fn round_size(size: u64, config: &AllocatorConfig) -> u64 {
    if size < MIN_BLOCK_SIZE {
        return MIN_BLOCK_SIZE;
    }
    let divisions = config.roundup_power2_divisions_for(size);
    if divisions > 1 && size > MIN_BLOCK_SIZE * divisions {
        roundup_power2_next_division(size, divisions)
    } else {
        size.div_ceil(MIN_BLOCK_SIZE).saturating_mul(MIN_BLOCK_SIZE)
    }
}

/// The cudaMalloc (segment) size for an already rounded request (`get_allocation_size`, §1.4).
pub fn allocation_size(rounded: u64) -> u64 {
    if rounded <= SMALL_SIZE {
        SMALL_BUFFER
    } else if rounded < MIN_LARGE_ALLOC {
        LARGE_BUFFER
    } else {
        rounded.div_ceil(ROUND_LARGE).saturating_mul(ROUND_LARGE)
    }
}

/// PyTorch's `format_size`: bytes up to 1024, then KiB up to 1 MiB, MiB up to
/// 1 GiB, GiB beyond, each with two decimals.
pub fn format_size(size: u64) -> String {
    if size <= 1024 {
        format!("{size} bytes")
    } else if size <= MIB {
        format!("{:.2} KiB", size as f64 / 1024.0)
    } else if size <= 1024 * MIB {
        format!("{:.2} MiB", size as f64 / MIB as f64)
    } else {
        format!("{:.2} GiB", size as f64 / (1024 * MIB) as f64)
    }
}

/// `size` bytes in the unit 1024^`exp` with `decimals` decimals, rounded
/// to the nearest figure (a tie to the even one): 500.95 MiB with none is
/// "501". Exact: integer arithmetic, no float.
pub fn size_figure(size: u64, exp: usize, decimals: u32) -> String {
    figure_text(nearest_figure(size, exp, decimals), decimals)
}

/// `size` counted in steps of 1024^`exp` / 10^`decimals` (`decimals` up
/// to 6), rounded to the nearest step, a tie to the even one (as float
/// formatting did). Monotonic in `size`.
pub fn nearest_figure(size: u64, exp: usize, decimals: u32) -> u128 {
    let scale = 10u128.pow(decimals.min(6));
    let unit = 1u128 << (10 * exp.min(6));
    // < 2^64 · 10^6: no overflow.
    let scaled = u128::from(size) * scale;
    let (cut, rest) = (scaled / unit, scaled % unit);
    let nearer_up = rest * 2 > unit || (rest * 2 == unit && cut % 2 == 1);
    if nearer_up { cut + 1 } else { cut }
}

/// A figure of [`nearest_figure`] written with its `decimals` decimals:
/// 1234 with 2 is "12.34".
pub fn figure_text(figure: u128, decimals: u32) -> String {
    let scale = 10u128.pow(decimals.min(6));
    let (whole, fraction) = (figure / scale, figure % scale);
    if decimals == 0 {
        whole.to_string()
    } else {
        let width = decimals.min(6) as usize;
        format!("{whole}.{fraction:0width$}")
    }
}

/// `size` bytes in the unit 1024^`exp` with three significant digits (two
/// decimals below 10, one below 100, none above), so columns of sizes keep
/// a steady width; rounded to the nearest, the decimals counted after the
/// rounding: 9.996 MiB is "10.0", not "10.00".
pub fn three_significant_digits(size: u64, exp: usize) -> String {
    let decimals = three_digit_decimals(size, exp);
    figure_text(nearest_figure(size, exp, decimals), decimals)
}

/// The decimals that give `size` three significant digits in the unit
/// 1024^`exp` once rounded: two below 10, one below 100, none above
/// (9.996 rounds to 10.0, so one).
pub fn three_digit_decimals(size: u64, exp: usize) -> u32 {
    let shift = 10 * u32::try_from(exp).unwrap_or(u32::MAX).min(6);
    let mut decimals = match size >> shift {
        0..10 => 2,
        10..100 => 1,
        _ => 0,
    };
    // A figure rounded up to the next power of ten has a digit too many
    // at these decimals (10.00, 100.0): one decimal fewer.
    while decimals > 0 && nearest_figure(size, exp, decimals) >= 1000 {
        decimals -= 1;
    }
    decimals
}

/// The power of 1024 a size is written in with `decimals` decimals
/// (`decimals(size, exp)`): the largest unit that keeps an integer part,
/// picked after rounding, so that 1023.6 MiB, which rounds to 1024 MiB,
/// is written in GiB ("1.00 GiB").
fn rounded_unit(size: u64, decimals: impl Fn(u64, usize) -> u32) -> usize {
    let (exp, _) = largest_unit(size, BYTE_UNITS.len());
    if exp == 0 || exp + 1 >= BYTE_UNITS.len() {
        return exp;
    }
    let d = decimals(size, exp);
    if nearest_figure(size, exp, d) >= 1024 * 10u128.pow(d) {
        exp + 1
    } else {
        exp
    }
}

/// The exponent of the largest of `units` binary units (1024^exp bytes)
/// that keeps an integer part of `size`, and that integer part.
fn largest_unit(size: u64, units: usize) -> (usize, u64) {
    let mut exp = 0usize;
    let mut whole = size;
    while whole >= 1024 && exp + 1 < units {
        whole /= 1024;
        exp += 1;
    }
    (exp, whole)
}

/// The power of 1024 a screen writes `size` in (2 for 500 MiB): the
/// largest unit that keeps an integer part once rounded to three
/// significant digits, as [`display_bytes`] picks it (3 for 1023.6 MiB,
/// "1.00 GiB").
pub fn unit_exp(size: u64) -> usize {
    rounded_unit(size, three_digit_decimals)
}

/// Bytes as every screen shows them (the dashboard, the viewer, the
/// stress panel's messages): the largest binary unit that keeps an
/// integer part, three significant digits, rounded to the nearest
/// ([`size_figure`]): "512 B", "1.50 GiB", "12.3 MiB", "501 MiB" for
/// 500.95 MiB, "1.00 GiB" for 1023.6 MiB (the unit is picked after the
/// rounding). Lives here, the lowest layer, so that the application's
/// messages and the panes agree; `ui::format::bytes` is this function.
pub fn display_bytes(size: u64) -> String {
    let exp = unit_exp(size);
    if exp == 0 {
        return format!("{size} B");
    }
    format!(
        "{} {}",
        three_significant_digits(size, exp),
        BYTE_UNITS[exp]
    )
}

/// The binary units both byte formatters write, up to EiB (a `u64` holds
/// 16 EiB − 1 B): one table, so the screens and the text reports write a
/// size in the same unit, only with their own precision.
const BYTE_UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];

/// Human-friendly binary size for our own output (not PyTorch's format):
/// "512 B", "1.50 MiB", "20 MiB": a whole number only when the size is
/// exactly that many units, else two decimals rounded to the nearest
/// ([`size_figure`]: "2.00 MiB" for 2 MiB − 512 B, "1.00 GiB" for
/// 1023.999 MiB: the unit is picked after the rounding). The text
/// reports' formatter (`diff`, `replay`, `open --summary`): with two
/// decimals where the screens keep three significant digits.
pub fn human_bytes(size: u64) -> String {
    let exp = rounded_unit(size, |_, _| 2);
    if exp == 0 {
        format!("{size} B")
    } else if size.trailing_zeros() as usize >= 10 * exp {
        format!("{} {}", size >> (10 * exp), BYTE_UNITS[exp])
    } else {
        format!("{} {}", size_figure(size, exp, 2), BYTE_UNITS[exp])
    }
}

/// Why a size or duration text was refused: the one parser's verdict,
/// so every message about such a text (a flag, the config file, a
/// scenario, the stress panel) tells the same cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum QuantityError {
    /// Not a non-negative decimal number (digits and a point, no sign)
    /// followed by a unit the parser knows.
    #[error("not a number with a known unit")]
    Malformed,
    /// A well-formed number and unit, at or past the largest value taken.
    #[error("past the largest value")]
    TooLarge,
}

/// Splits "1.5 GiB" into (1.5, "1.5", "GiB"): a non-negative decimal number
/// (ASCII digits and a point: no sign, exponent or name such as "inf"), as
/// written, and the trimmed unit after it.
fn number_and_unit(text: &str) -> Result<(f64, &str, &str), QuantityError> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let value = number.parse().map_err(|_| QuantityError::Malformed)?;
    Ok((value, number, unit.trim()))
}

/// The largest size [`parse_size`] takes (bytes): the largest a `u64`
/// holds, 16 EiB − 1 B. A size past it is [`QuantityError::TooLarge`].
pub const MAX_PARSED_SIZE: u64 = u64::MAX;

/// [`MAX_PARSED_SIZE`] as a message says it: exactly, and in a unit.
pub const MAX_PARSED_SIZE_TEXT: &str = "16 EiB - 1 B (18446744073709551615 B)";

/// Durations [`parse_duration_ms`] takes are below this (milliseconds).
pub const MAX_PARSED_DURATION_MS: u64 = 1_000_000_000_000_000;

/// What a size written as zero is told, `quoted` being the text as the
/// message shows it: the command line, the config file and the stress
/// panel's size field say it in these words.
pub fn zero_size_message(quoted: &str) -> String {
    format!("'{quoted}' is zero: a size is at least 1B")
}

/// Why a typed size is refused ([`typed_size`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeRefusal {
    /// Written with a minus sign.
    Negative,
    /// A size of zero bytes.
    Zero,
    /// Not a number and a unit [`size_bytes`] takes.
    NotASize,
    /// Past the largest size the reader takes.
    TooLarge,
    /// A fraction written in bytes (`0.5B`, a bare `1.5` where bytes are
    /// meant), or less than a byte in any unit (`0.0001KiB`): no size is.
    NotWholeBytes,
}

impl SizeRefusal {
    /// The refusal in the words every reader of typed sizes shares (the
    /// command line, the config file, the stress panel's size field):
    /// `quoted` is the text as the message shows it, `largest` the
    /// largest size the reader takes, in words.
    pub fn message(self, quoted: &str, largest: &str) -> String {
        match self {
            SizeRefusal::Negative => format!("'{quoted}' is negative: a size is at least 1B"),
            SizeRefusal::Zero => zero_size_message(quoted),
            SizeRefusal::NotASize => format!(
                "'{quoted}' is not a size: write e.g. 512B, 37MiB, 1.5GiB, 80G (binary) or 80GB \
                 (decimal)"
            ),
            SizeRefusal::TooLarge => {
                format!("'{quoted}' is more than the largest size, {largest}")
            }
            SizeRefusal::NotWholeBytes => {
                format!("'{quoted}' is not a whole number of bytes")
            }
        }
    }
}

/// A size as people type it, read by [`size_bytes`], from 1 B to
/// `largest` bytes: the one reader of the command line's sizes and the
/// stress panel's size field, so that both refuse a text for the same
/// reason ([`SizeRefusal::message`] words it). A number too long for
/// any integer is too large, not "not a size"; a fraction of a byte is
/// refused, not rounded (`0.5B` is not 1 B, `0.3B` not zero), while a
/// fraction of a larger unit that is whole bytes (`1.5KiB`) is exact.
pub fn typed_size(text: &str, largest: u64) -> Result<u64, SizeRefusal> {
    if text.trim_start().starts_with('-') {
        return Err(SizeRefusal::Negative);
    }
    match size_exactly(text) {
        // Past the largest is said first: the fraction does not matter.
        Ok(Bytes::NotWhole { below, .. }) if below >= largest => Err(SizeRefusal::TooLarge),
        // A fraction of a larger unit is the whole bytes in it: `1.1GiB`
        // is written for about a gibibyte, and its 0.4 B past 1181116006 B
        // is no size anyone means. Written in bytes, a fraction is a typo.
        Ok(Bytes::NotWhole { below, unit_bytes }) if unit_bytes > 1 && below > 0 => Ok(below),
        Ok(Bytes::NotWhole { .. }) => Err(SizeRefusal::NotWholeBytes),
        Ok(Bytes::Whole(0)) => Err(SizeRefusal::Zero),
        Ok(Bytes::Whole(n)) if n > largest => Err(SizeRefusal::TooLarge),
        Ok(Bytes::Whole(n)) => Ok(n),
        Err(QuantityError::TooLarge) => Err(SizeRefusal::TooLarge),
        Err(QuantityError::Malformed) => Err(SizeRefusal::NotASize),
    }
}

/// Whether `text` is a number without a unit ("24", "1.5"): a size or
/// duration a person writes so is refused wherever one is read (the
/// command line, the config file, a scenario file), since `24` could be
/// bytes or GiB.
pub fn is_bare_number(text: &str) -> bool {
    let t = text.trim();
    !t.is_empty()
        && t.chars().all(|c| c.is_ascii_digit() || c == '.')
        && t.chars().any(|c| c.is_ascii_digit())
}

/// What a bare number (`quoted`, as the message shows it) is told, in the
/// words every reader of sizes and durations shares: `taken` are the
/// number written with each unit the reader would take ("24GiB", "24MiB",
/// "24B"). `None` when it takes none of them: then the reader says why
/// the number itself is refused (its limit), not a unit that would not
/// help.
pub fn no_unit_message(quoted: &str, taken: &[String]) -> Option<String> {
    match taken.split_last()? {
        (last, []) => Some(format!(
            "'{quoted}' has no unit: {quoted} what? write e.g. {last}"
        )),
        (last, rest) => Some(format!(
            "'{quoted}' has no unit: {quoted} what? write e.g. {} or {last}",
            rest.join(", ")
        )),
    }
}

/// The units a bare number of bytes is suggested, largest first.
pub const SIZE_UNITS_SUGGESTED: [&str; 3] = ["GiB", "MiB", "B"];

/// The largest size a bare number is suggested to mean (bytes), 1 TiB:
/// more than any GPU's memory, so `8589934592` is not told
/// `8589934592GiB` (8 EiB), nor `2048` `2048GiB`.
pub const MOST_SUGGESTED_SIZE: u64 = 1 << 40;

/// A bare number of a size written with one of [`SIZE_UNITS_SUGGESTED`]
/// ([`bare_size_suggestions`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SizeSuggestion {
    /// The number with the unit, as typed: "8589934592B".
    pub text: String,
    /// The unit: "B".
    pub unit: &'static str,
    /// The size in the largest unit that keeps it whole, where that is not
    /// `unit` ("8GiB" for 8589934592B), else two decimals ("about
    /// 953.67MiB" for 1000000000B); `None` below 1024 of `unit`.
    pub reading: Option<String>,
}

impl SizeSuggestion {
    /// The suggestion as a message shows it: `quote` of its text, then its
    /// reading in brackets ("8589934592B (8GiB)").
    pub fn shown(&self, quote: impl Fn(&str) -> String) -> String {
        match &self.reading {
            Some(reading) => format!("{} ({reading})", quote(&self.text)),
            None => quote(&self.text),
        }
    }
}

/// What a bare number of a size (`number`, "24", "8589934592") could be
/// written as: the number with each of [`SIZE_UNITS_SUGGESTED`] that the
/// reader `takes` (its own check, so a suggestion is never refused in
/// turn) and that makes at most [`MOST_SUGGESTED_SIZE`], largest unit
/// first (the smallest unit it takes where every one makes more); each
/// told what it is in a larger unit where the number is 1024 or more
/// ("2048MiB (2GiB)"), so that the bytes a large number most likely
/// counts read as a size.
pub fn bare_size_suggestions(number: &str, takes: impl Fn(&str) -> bool) -> Vec<SizeSuggestion> {
    let t = number.trim();
    let taken: Vec<(&'static str, String, u64)> = SIZE_UNITS_SUGGESTED
        .into_iter()
        .filter_map(|unit| {
            let text = format!("{t}{unit}");
            let bytes = typed_size(&text, MAX_PARSED_SIZE).ok()?;
            takes(&text).then_some((unit, text, bytes))
        })
        .collect();
    let plausible = taken
        .iter()
        .filter(|(_, _, bytes)| *bytes <= MOST_SUGGESTED_SIZE)
        .count();
    let skip = if plausible == 0 {
        taken.len().saturating_sub(1)
    } else {
        0
    };
    taken
        .into_iter()
        .skip(skip)
        .filter(|(_, _, bytes)| plausible == 0 || *bytes <= MOST_SUGGESTED_SIZE)
        .filter_map(|(unit, text, bytes)| {
            let unit_bytes = unit_bytes(unit).ok()?;
            let reading = (bytes / unit_bytes >= 1024).then(|| {
                let (exp, whole) = largest_unit(bytes, BYTE_UNITS.len());
                if bytes.trailing_zeros() as usize >= 10 * exp {
                    format!("{whole}{}", BYTE_UNITS[exp])
                } else {
                    format!("about {}{}", size_figure(bytes, exp, 2), BYTE_UNITS[exp])
                }
            });
            Some(SizeSuggestion {
                text,
                unit,
                reading,
            })
        })
        .collect()
}

/// What a bare number of a size (`quoted`, as the message shows it) is
/// told, on the command line, in the config file and in a scenario file
/// alike: "'24' has no unit: 24 what? write e.g. 24GiB, 24MiB or 24B";
/// where only bytes are suggested (a number too large to count MiB),
/// "'8589934592' has no unit: as bytes, write 8589934592B (8GiB)".
/// `None` without `suggestions`: then the reader says why the number
/// itself is refused (its limit), not a unit that would not help.
pub fn bare_size_message(
    quoted: &str,
    suggestions: &[SizeSuggestion],
    quote: impl Fn(&str) -> String,
) -> Option<String> {
    match suggestions {
        [only] if only.unit == "B" => Some(format!(
            "'{quoted}' has no unit: as bytes, write {}",
            only.shown(quote)
        )),
        _ => {
            let shown: Vec<String> = suggestions.iter().map(|s| s.shown(&quote)).collect();
            no_unit_message(quoted, &shown)
        }
    }
}

/// A size text's bytes, as [`size_exactly`] finds them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bytes {
    /// Exactly this many bytes.
    Whole(u64),
    /// A number of bytes with a fraction (`0.5B`, `0.3KiB`): more than
    /// `below` whole bytes, fewer than one more; written in a unit of
    /// `unit_bytes`.
    NotWhole { below: u64, unit_bytes: u64 },
}

/// The bytes of `digits`, a decimal fraction's digits after the point
/// (`"5"` for 0.5), times `multiplier` (a unit's bytes): the whole bytes
/// below it and whether it is exactly that. Exact, on the digits (no
/// float), for any number of them.
fn fraction_bytes(digits: &str, multiplier: u64) -> (u64, bool) {
    // F · multiplier / 10^k for F the k digits as an integer: long
    // multiplication from the lowest digit, whose k lowest digits of the
    // product are the fraction of a byte left (all 0: none) and whose
    // carry past them the whole bytes. The carry stays below the unit
    // (< 10 · multiplier / 10 at each digit), so it fits in a u64.
    let mut carry = 0u128;
    let mut exact = true;
    for &d in digits.as_bytes().iter().rev() {
        // Only ASCII digits come here (`number_and_unit`).
        carry += u128::from(d.saturating_sub(b'0')) * u128::from(multiplier);
        exact &= carry.is_multiple_of(10);
        carry /= 10;
    }
    (u64::try_from(carry).unwrap_or(u64::MAX), exact)
}

/// Parses a byte size as people write it: `512`, `512B`, `37MiB`, `1.5GiB`,
/// `80G` (binary), `80GB` (decimal, as GPU vendors print it), up to EiB/EB. Case-insensitive
/// units, optional space. Returns `None` for anything else.
pub fn parse_size(text: &str) -> Option<u64> {
    size_bytes(text).ok()
}

/// [`parse_size`], saying why a text is refused. A fraction of a byte is
/// rounded to the nearest; [`typed_size`], the reader of every size a
/// person writes (a scenario's too), refuses it.
pub fn size_bytes(text: &str) -> Result<u64, QuantityError> {
    match size_exactly(text)? {
        Bytes::Whole(n) => Ok(n),
        Bytes::NotWhole { .. } => {
            let (value, _, unit) = number_and_unit(text)?;
            let bytes = value * unit_bytes(unit)? as f64;
            // 2^64, the first size past the largest, is exact in f64.
            if (0.0..18_446_744_073_709_551_616.0).contains(&bytes) {
                Ok(bytes.round() as u64)
            } else {
                Err(QuantityError::TooLarge)
            }
        }
    }
}

/// The bytes of one `unit` of a size text (`""` and `B` are bytes).
fn unit_bytes(unit: &str) -> Result<u64, QuantityError> {
    const KIB: u64 = 1024;
    Ok(match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => KIB,
        "m" | "mib" => KIB.pow(2),
        "g" | "gib" => KIB.pow(3),
        "t" | "tib" => KIB.pow(4),
        // PiB and EiB: the largest size a message names (16 EiB - 1 B)
        // is written in a unit the parser takes.
        "p" | "pib" => KIB.pow(5),
        "e" | "eib" => KIB.pow(6),
        "kb" => 10u64.pow(3),
        "mb" => 10u64.pow(6),
        "gb" => 10u64.pow(9),
        "tb" => 10u64.pow(12),
        "pb" => 10u64.pow(15),
        "eb" => 10u64.pow(18),
        _ => return Err(QuantityError::Malformed),
    })
}

/// A size text's bytes, counted exactly: every size up to the largest
/// `u64` is taken, none past it, and a fraction of a larger unit is
/// whole bytes or said not to be (never rounded).
fn size_exactly(text: &str) -> Result<Bytes, QuantityError> {
    // The float only checks the number's form ("1.2.3", "." are not).
    let (_, number, unit) = number_and_unit(text)?;
    let multiplier = unit_bytes(unit)?;
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    // "" before the point (".5KiB") is none of the unit.
    let whole = if whole.is_empty() {
        Some(0)
    } else {
        whole.parse::<u64>().ok()
    };
    let whole = whole
        .and_then(|n| n.checked_mul(multiplier))
        .ok_or(QuantityError::TooLarge)?;
    let (part, exact) = fraction_bytes(fraction, multiplier);
    let below = whole.checked_add(part).ok_or(QuantityError::TooLarge)?;
    if exact {
        Ok(Bytes::Whole(below))
    } else {
        // Past the largest even when its whole bytes below are not.
        below.checked_add(1).ok_or(QuantityError::TooLarge)?;
        Ok(Bytes::NotWhole {
            below,
            unit_bytes: multiplier,
        })
    }
}

/// Parses a duration as people write it: `500ms`, `1s`, `1.5s`, `10m`, `2h`;
/// a bare number is seconds. Returns milliseconds, or `None`.
pub fn parse_duration_ms(text: &str) -> Option<u64> {
    duration_ms_exact(text).ok().map(|ms| ms.round() as u64)
}

/// [`parse_duration_ms`] before its rounding to whole milliseconds (so a
/// least value can be checked on what was written), saying why a text is
/// refused. Always finite, at least 0 and below [`MAX_PARSED_DURATION_MS`].
pub fn duration_ms_exact(text: &str) -> Result<f64, QuantityError> {
    let (value, _, unit) = number_and_unit(text)?;
    let ms_per_unit = match unit {
        "ms" => 1.0,
        "" | "s" => 1_000.0,
        "m" | "min" => 60_000.0,
        "h" => 3_600_000.0,
        _ => return Err(QuantityError::Malformed),
    };
    let ms = value * ms_per_unit;
    if (0.0..MAX_PARSED_DURATION_MS as f64).contains(&ms) {
        Ok(ms)
    } else {
        Err(QuantityError::TooLarge)
    }
}

/// A duration written as one term or more, each a number and its unit as
/// [`duration_ms_exact`] reads one (`2m30s`, `1h30m`, `1.5h`, `1h 30m`,
/// `90s`): their sum in milliseconds, rounded. A term without its unit
/// (`1h30`), anything else between terms, or none at all is
/// [`QuantityError::Malformed`]; a term or a sum at or past
/// [`MAX_PARSED_DURATION_MS`] is [`QuantityError::TooLarge`].
pub fn compound_duration_ms(text: &str) -> Result<u64, QuantityError> {
    // One term as every duration reads it ("90 s" included).
    if let Ok(ms) = duration_ms_exact(text) {
        return Ok(ms.round() as u64);
    }
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(QuantityError::Malformed);
    }
    let mut total = 0.0f64;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let unit_end = rest[number_end..]
            .find(|c: char| !c.is_ascii_alphabetic())
            .map_or(rest.len(), |at| number_end + at);
        if number_end == 0 || unit_end == number_end {
            return Err(QuantityError::Malformed);
        }
        total += duration_ms_exact(&rest[..unit_end])?;
        if total >= MAX_PARSED_DURATION_MS as f64 {
            return Err(QuantityError::TooLarge);
        }
        rest = rest[unit_end..].trim_start();
    }
    Ok(total.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: u64 = 1 << 10;

    #[test]
    fn compound_durations_sum_their_terms_and_junk_or_overflow_is_refused() {
        assert_eq!(compound_duration_ms("1h30m"), Ok(5_400_000));
        assert_eq!(compound_duration_ms("2m30s"), Ok(150_000));
        assert_eq!(compound_duration_ms("1.5h"), Ok(5_400_000));
        assert_eq!(compound_duration_ms("1h 30m 500ms"), Ok(5_400_500));
        assert_eq!(compound_duration_ms("90 s"), Ok(90_000));
        assert_eq!(compound_duration_ms("1min30s"), Ok(90_000));
        for junk in [
            "", " ", "1h30", "h", "1hx", "1h-30m", "1..5h", "1h,30m", "1µs", "+1h", "1h30m!",
        ] {
            assert_eq!(
                compound_duration_ms(junk),
                Err(QuantityError::Malformed),
                "{junk:?}"
            );
        }
        // Each term within the limit, the sum past it.
        let half = MAX_PARSED_DURATION_MS / 2 / 3_600_000 + 1;
        assert_eq!(
            compound_duration_ms(&format!("{half}h{half}h")),
            Err(QuantityError::TooLarge)
        );
        assert_eq!(
            compound_duration_ms("1h99999999999999999999999h"),
            Err(QuantityError::TooLarge)
        );
    }

    fn with_divisions(d: u64) -> AllocatorConfig {
        AllocatorConfig::parse(&format!("roundup_power2_divisions:{d}")).expect("valid")
    }

    #[test]
    fn round_size_default_rounds_to_512() {
        let c = AllocatorConfig::default();
        assert_eq!(round_size(0, &c), 512);
        assert_eq!(round_size(1, &c), 512);
        assert_eq!(round_size(511, &c), 512);
        assert_eq!(round_size(512, &c), 512);
        assert_eq!(round_size(513, &c), 1024);
        assert_eq!(round_size(1000, &c), 1024);
        assert_eq!(round_size(84 * MIB, &c), 84 * MIB);
    }

    #[test]
    fn round_size_power2_division_vectors_from_spec() {
        assert_eq!(round_size(1200, &with_divisions(4)), 1536);
        assert_eq!(round_size(1200, &with_divisions(2)), 1536);
        assert_eq!(round_size(5000, &with_divisions(4)), 5120);
        assert_eq!(
            round_size(2 * MIB + 1, &with_divisions(4)),
            2 * MIB + MIB / 2
        );
        assert_eq!(round_size(3 * MIB, &with_divisions(4)), 3 * MIB);
        assert_eq!(round_size(84 * MIB, &with_divisions(4)), 96 * MIB);
        assert_eq!(round_size(84 * MIB, &with_divisions(8)), 88 * MIB);
        assert_eq!(round_size(400 * MIB, &with_divisions(2)), 512 * MIB);
        assert_eq!(round_size(96 * MIB, &with_divisions(4)), 96 * MIB);
    }

    #[test]
    fn allocation_size_follows_segment_rules() {
        assert_eq!(allocation_size(512), SMALL_BUFFER);
        assert_eq!(allocation_size(MIB), SMALL_BUFFER);
        assert_eq!(allocation_size(MIB + 512), LARGE_BUFFER);
        assert_eq!(allocation_size(10 * MIB - 512), LARGE_BUFFER);
        assert_eq!(allocation_size(10 * MIB), 10 * MIB);
        assert_eq!(allocation_size(11 * MIB), 12 * MIB);
        assert_eq!(allocation_size(12 * MIB + 512), 14 * MIB);
    }

    #[test]
    fn format_size_matches_pytorch_vectors() {
        assert_eq!(format_size(1024), "1024 bytes");
        assert_eq!(format_size(1025), "1.00 KiB");
        assert_eq!(format_size(1 << 20), "1024.00 KiB");
        assert_eq!(format_size(1 << 30), "1024.00 MiB");
        assert_eq!(format_size(2 << 20), "2.00 MiB");
        assert_eq!(format_size(800_000_000u64 << 30), "800000000.00 GiB");
    }

    #[test]
    fn parse_size_reads_binary_and_decimal_units() {
        assert_eq!(parse_size("512"), Some(512));
        assert_eq!(parse_size("512B"), Some(512));
        assert_eq!(parse_size("37MiB"), Some(37 * MIB));
        assert_eq!(parse_size("37 mib"), Some(37 * MIB));
        assert_eq!(parse_size("1.5GiB"), Some(3 * MIB * 512));
        assert_eq!(parse_size("80G"), Some(80 << 30));
        assert_eq!(parse_size("80GB"), Some(80_000_000_000));
        assert_eq!(parse_size("2k"), Some(2048));
        assert_eq!(parse_size("1PiB"), Some(1 << 50));
        assert_eq!(parse_size("2EiB"), Some(2 << 60));
        assert_eq!(parse_size("1PB"), Some(1_000_000_000_000_000));
        // Past the largest size (16 EiB - 1 B): none.
        assert_eq!(parse_size("16EiB"), None);
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size("MiB"), None);
        assert_eq!(parse_size("12 parsecs"), None);
        assert_eq!(parse_size("-1"), None);
    }

    #[test]
    fn parse_duration_reads_the_usual_units() {
        assert_eq!(parse_duration_ms("500ms"), Some(500));
        assert_eq!(parse_duration_ms("1s"), Some(1000));
        assert_eq!(parse_duration_ms("1.5s"), Some(1500));
        assert_eq!(parse_duration_ms("2"), Some(2000));
        assert_eq!(parse_duration_ms("10m"), Some(600_000));
        assert_eq!(parse_duration_ms("1h"), Some(3_600_000));
        assert_eq!(parse_duration_ms("soon"), None);
        assert_eq!(parse_duration_ms("5 fortnights"), None);
    }

    #[test]
    fn every_size_up_to_the_largest_u64_is_taken_and_none_past_it() {
        assert_eq!(size_bytes("18446744073709551615B"), Ok(u64::MAX));
        assert_eq!(size_bytes("18446744073709551615"), Ok(MAX_PARSED_SIZE));
        assert_eq!(
            size_bytes("18446744073709551616 B"),
            Err(QuantityError::TooLarge)
        );
        assert_eq!(size_bytes("16EiB"), Err(QuantityError::TooLarge));
        assert_eq!(
            size_bytes("15.99EiB"),
            Ok((15.99 * (1u64 << 60) as f64) as u64)
        );
        assert_eq!(size_bytes("16.0EiB"), Err(QuantityError::TooLarge));
        assert_eq!(
            size_bytes("18446744073709551615KiB"),
            Err(QuantityError::TooLarge)
        );
        assert_eq!(
            size_bytes("99999999999999999999999"),
            Err(QuantityError::TooLarge)
        );
        // The text a message gives for the limit says it exactly.
        assert!(MAX_PARSED_SIZE_TEXT.contains(&format!("({MAX_PARSED_SIZE} B)")));
        assert_eq!(16u128 << 60, u128::from(MAX_PARSED_SIZE) + 1);
    }

    #[test]
    fn a_sign_makes_a_size_or_duration_malformed_not_too_large() {
        for text in ["+24GiB", "+500", "-1", "+1e3B", "inf", "+inf"] {
            assert_eq!(size_bytes(text), Err(QuantityError::Malformed), "{text}");
        }
        for text in ["+500ms", "-1s", "+1h", "NaNs"] {
            assert_eq!(
                duration_ms_exact(text),
                Err(QuantityError::Malformed),
                "{text}"
            );
        }
        assert_eq!(size_bytes("16EiB"), Err(QuantityError::TooLarge));
        assert_eq!(
            duration_ms_exact("99999999999h"),
            Err(QuantityError::TooLarge)
        );
        assert_eq!(duration_ms_exact("9.5ms"), Ok(9.5));
    }

    #[test]
    fn a_typed_fraction_of_a_byte_is_refused_not_rounded() {
        let refusal = SizeRefusal::NotWholeBytes;
        let not_whole = Err(refusal);
        // Neither rounded up to 1 B nor down to "zero".
        assert_eq!(typed_size("0.5B", MAX_PARSED_SIZE), not_whole);
        assert_eq!(typed_size("0.3B", MAX_PARSED_SIZE), not_whole);
        assert_eq!(typed_size("1.5", MAX_PARSED_SIZE), not_whole);
        assert_eq!(typed_size("0.0001KiB", MAX_PARSED_SIZE), not_whole);
        // 1.1 GiB is 1181116006.4 B: the whole bytes in it.
        assert_eq!(typed_size("1.1GiB", MAX_PARSED_SIZE), Ok(1_181_116_006));
        assert_eq!(
            refusal.message("0.5B", "x"),
            "'0.5B' is not a whole number of bytes"
        );
        // Past the largest is said before the fraction.
        assert_eq!(typed_size("1.1TiB", 1 << 40), Err(SizeRefusal::TooLarge));
        assert_eq!(
            typed_size("15.9999999999999999999EiB", MAX_PARSED_SIZE),
            Err(SizeRefusal::TooLarge)
        );
    }

    #[test]
    fn a_typed_fraction_of_a_larger_unit_that_is_whole_bytes_is_exact() {
        for (text, bytes) in [
            ("1.5KiB", 1536),
            (".5KiB", 512),
            ("0.0625KiB", 64),
            ("1.0B", 1),
            ("2.", 2),
            ("2.000B", 2),
            ("1.5GiB", 3 << 29),
            ("15.5EiB", 31 << 59),
            // Past a float's 53 bits, still exact.
            ("1.1EB", 1_100_000_000_000_000_000),
            ("0.000000001GB", 1),
            // 1 B is 2^-60 EiB, 60 decimals.
            (
                "0.000000000000000000867361737988403547205962240695953369140625EiB",
                1,
            ),
        ] {
            assert_eq!(typed_size(text, MAX_PARSED_SIZE), Ok(bytes), "{text}");
        }
    }

    fn suggested(number: &str, takes: impl Fn(&str) -> bool) -> Vec<String> {
        bare_size_suggestions(number, takes)
            .iter()
            .map(|s| s.shown(str::to_string))
            .collect()
    }

    #[test]
    fn a_bare_number_is_suggested_only_units_that_make_at_most_1_tib() {
        let any = |_: &str| true;
        assert_eq!(suggested("24", any), ["24GiB", "24MiB", "24B"]);
        assert_eq!(
            suggested("1024", any),
            ["1024GiB (1TiB)", "1024MiB (1GiB)", "1024B (1KiB)"]
        );
        assert_eq!(suggested("2048", any), ["2048MiB (2GiB)", "2048B (2KiB)"]);
        assert_eq!(suggested("8589934592", any), ["8589934592B (8GiB)"]);
        assert_eq!(
            suggested("1000000000", any),
            ["1000000000B (about 953.67MiB)"]
        );
        // Past 1 TiB in every unit: still told as bytes, what it is.
        assert_eq!(
            suggested("5000000000000", any),
            ["5000000000000B (about 4.55TiB)"]
        );
        // Only what the reader takes; none past the largest size.
        assert_eq!(suggested("1.5", any), ["1.5GiB", "1.5MiB"]);
        assert_eq!(suggested("2", |s: &str| s.ends_with("GiB")), ["2GiB"]);
        assert!(suggested("99999999999999999999", any).is_empty());
        assert!(suggested("0", any).is_empty());
    }

    #[test]
    fn a_bare_number_of_bytes_is_told_it_is_bytes_and_what_size() {
        let message = |number: &str| {
            bare_size_message(
                number,
                &bare_size_suggestions(number, |_| true),
                str::to_string,
            )
        };
        assert_eq!(
            message("8589934592").as_deref(),
            Some("'8589934592' has no unit: as bytes, write 8589934592B (8GiB)")
        );
        assert_eq!(
            message("24").as_deref(),
            Some("'24' has no unit: 24 what? write e.g. 24GiB, 24MiB or 24B")
        );
        assert_eq!(message("99999999999999999999"), None);
    }

    #[test]
    fn human_bytes_is_compact() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(20 << 20), "20 MiB");
        assert_eq!(human_bytes(1536), "1.50 KiB");
    }

    #[test]
    fn a_size_rounds_to_the_nearest_figure() {
        const GIB: u64 = 1 << 30;
        // silmont_fwd_fp32_128's allocated (500.95 MiB) and its peak
        // (534.95 MiB): the nearest whole MiB, not the figure below.
        assert_eq!(display_bytes(525_286_400), "501 MiB");
        assert_eq!(display_bytes(560_938_188), "535 MiB");
        assert_eq!(human_bytes(525_286_400), "500.95 MiB");
        // A size rounds down as it rounds up.
        assert_eq!(display_bytes(500 * MIB + 400 * KIB), "500 MiB");
        assert_eq!(display_bytes(500 * MIB + 600 * KIB), "501 MiB");
        // A tie goes to the even figure: 500.5 to 500, 501.5 to 502.
        assert_eq!(display_bytes(500 * MIB + 512 * KIB), "500 MiB");
        assert_eq!(display_bytes(501 * MIB + 512 * KIB), "502 MiB");
        // Just under a boundary is the boundary to three digits.
        let under = 2 * MIB - 512;
        assert_eq!(display_bytes(under), "2.00 MiB");
        assert_eq!(human_bytes(under), "2.00 MiB");
        assert_eq!(human_bytes(2 * MIB), "2 MiB", "whole only when exact");
        assert_eq!(human_bytes(2 * MIB + 512), "2.00 MiB");
        assert_eq!(display_bytes(3 * GIB / 2 - 512), "1.50 GiB");
        let near_3_03_gib = 3_253_000_000;
        assert_eq!(display_bytes(near_3_03_gib), "3.03 GiB", "3.0296…: nearest");
        assert_eq!(human_bytes(near_3_03_gib), "3.03 GiB");
    }

    #[test]
    fn the_digits_and_the_unit_are_picked_after_rounding() {
        // A figure that rounds up to the next power of ten keeps three
        // significant digits: "10.0 MiB", not "10.00 MiB".
        assert_eq!(display_bytes(10 * MIB - 512), "10.0 MiB");
        assert_eq!(display_bytes(100 * MIB - 512), "100 MiB");
        assert_eq!(display_bytes(10 * KIB - 1), "10.0 KiB");
        assert_eq!(display_bytes(9 * MIB + 994 * KIB), "9.97 MiB");
        // 999.5 MiB rounds to 1000 MiB, still in MiB (up to four integer
        // digits, as 1000 B to 1023 B); 1023.6 MiB rounds to 1024 MiB:
        // the next unit, "1.00 GiB", never "1024 MiB".
        assert_eq!(display_bytes(999 * MIB + 512 * KIB), "1000 MiB");
        assert_eq!(display_bytes(1023 * MIB + 400 * KIB), "1023 MiB");
        let mib_1023_6 = 1023 * MIB + 614 * KIB;
        assert_eq!(display_bytes(mib_1023_6), "1.00 GiB");
        assert_eq!(unit_exp(mib_1023_6), 3);
        assert_eq!(display_bytes(1024 * MIB - 512), "1.00 GiB");
        assert_eq!(human_bytes(1024 * MIB - 512), "1.00 GiB");
        assert_eq!(human_bytes(1023 * MIB + 1013 * KIB), "1023.99 MiB");
        assert_eq!(human_bytes(1024 * MIB - 1), "1.00 GiB", "not 1024.00 MiB");
        // Bytes have no decimals to round: 1023 B stays in bytes.
        assert_eq!(display_bytes(1023), "1023 B");
        assert_eq!(display_bytes(1024), "1.00 KiB");
        // The largest unit has no next one: 16 EiB − 1 B reads 16.0 EiB.
        assert_eq!(display_bytes(u64::MAX), "16.0 EiB");
        assert_eq!(human_bytes(u64::MAX), "16.00 EiB");
    }

    #[test]
    fn the_screens_and_the_reports_write_a_size_in_the_same_unit() {
        // The viewer's A/B comparison and `diff --at` give the same bytes:
        // three significant digits beside two decimals, never two units.
        let unit = |text: String| text.rsplit(' ').next().map(str::to_string);
        for size in [
            0,
            1023,
            1024,
            20 * MIB,
            1024 * MIB - 512,
            1 << 50,
            (1 << 60) - 1,
            1 << 60,
            u64::MAX,
        ] {
            assert_eq!(
                unit(display_bytes(size)),
                unit(human_bytes(size)),
                "{size}: {} / {}",
                display_bytes(size),
                human_bytes(size)
            );
        }
        assert_eq!(human_bytes(u64::MAX), "16.00 EiB", "not 16384.00 PiB");
        assert_eq!(human_bytes(1 << 60), "1 EiB");
    }
}
