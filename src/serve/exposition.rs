//! A writer of the Prometheus text exposition format, version 0.0.4.
//!
//! Pure: it builds a `String` and never does I/O. Each family is written as
//! one block (`# HELP`, `# TYPE`, then every sample of it), because the
//! format requires a family's samples to be contiguous. A family without a
//! sample is left out entirely: a value the GPU does not report is absent,
//! never a fake 0.

use std::fmt::Write as _;

/// The `Content-Type` of a body written by [`TextWriter`].
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The metric types vramtop emits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricType {
    /// A value that goes up and down.
    Gauge,
    /// A value that only goes up (and resets when its source restarts); its
    /// name ends in `_total`.
    Counter,
}

impl MetricType {
    pub fn as_str(self) -> &'static str {
        match self {
            MetricType::Gauge => "gauge",
            MetricType::Counter => "counter",
        }
    }
}

/// A metric family: its name, its help text and its type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Family {
    pub name: &'static str,
    pub help: &'static str,
    pub kind: MetricType,
}

/// A label set, escaped and rendered once (`{gpu="0",name="H100"}`; empty
/// without labels), so that the many families of one GPU or one process
/// share it instead of re-escaping it for each.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Labels(String);

impl Labels {
    /// Label names must be valid Prometheus label names (they come from
    /// vramtop's code); values are escaped.
    pub fn new(pairs: &[(&str, &str)]) -> Labels {
        if pairs.is_empty() {
            return Labels::default();
        }
        let mut out = String::from("{");
        for (i, (name, value)) in pairs.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(name);
            out.push_str("=\"");
            push_escaped_label_value(&mut out, value);
            out.push('"');
        }
        out.push('}');
        Labels(out)
    }

    /// The rendered form, as it follows the metric name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// One sample: a label set and a value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample<'l> {
    pub labels: &'l Labels,
    pub value: f64,
}

fn push_escaped_label_value(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Escapes a label value: backslash, double quote and line feed.
pub fn escape_label_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    push_escaped_label_value(&mut out, value);
    out
}

/// Escapes a `# HELP` text: backslash and line feed.
pub fn escape_help(text: &str) -> String {
    text.replace('\\', "\\\\").replace('\n', "\\n")
}

/// 2^53: every integer below it is exact in an `f64`.
const MAX_EXACT_INTEGER: f64 = 9_007_199_254_740_992.0;

/// Writes a value as the format wants it: `NaN`, `+Inf`, `-Inf`, or a plain
/// decimal (Rust's `Display` for `f64` never uses an exponent, and whole
/// numbers come out without a fraction, so byte counts read as integers).
fn write_value(out: &mut String, value: f64) {
    if value.is_nan() {
        out.push_str("NaN");
    } else if value == f64::INFINITY {
        out.push_str("+Inf");
    } else if value == f64::NEG_INFINITY {
        out.push_str("-Inf");
    } else if value.fract() == 0.0 && value.abs() < MAX_EXACT_INTEGER {
        // Byte counts and counters: integer formatting is cheaper than the
        // shortest-float algorithm and gives the same digits.
        let _ = write!(out, "{}", value as i64);
    } else {
        let _ = write!(out, "{value}");
    }
}

/// Builds an exposition body family by family.
#[derive(Debug, Default)]
pub struct TextWriter {
    out: String,
}

impl TextWriter {
    pub fn new() -> Self {
        TextWriter::default()
    }

    /// Writes `family` with `samples`; nothing at all when there are none.
    pub fn family<'l>(&mut self, family: &Family, samples: impl IntoIterator<Item = Sample<'l>>) {
        let mut samples = samples.into_iter().peekable();
        if samples.peek().is_none() {
            return;
        }
        let out = &mut self.out;
        let _ = writeln!(out, "# HELP {} {}", family.name, escape_help(family.help));
        let _ = writeln!(out, "# TYPE {} {}", family.name, family.kind.as_str());
        for s in samples {
            out.push_str(family.name);
            out.push_str(s.labels.as_str());
            out.push(' ');
            write_value(out, s.value);
            out.push('\n');
        }
    }

    pub fn finish(self) -> String {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GAUGE: Family = Family {
        name: "test_bytes",
        help: "A test gauge (bytes).",
        kind: MetricType::Gauge,
    };

    fn write(family: &Family, samples: &[(&[(&str, &str)], f64)]) -> String {
        let labels: Vec<Labels> = samples.iter().map(|(l, _)| Labels::new(l)).collect();
        let mut w = TextWriter::new();
        w.family(
            family,
            labels
                .iter()
                .zip(samples)
                .map(|(labels, (_, value))| Sample {
                    labels,
                    value: *value,
                }),
        );
        w.finish()
    }

    #[test]
    fn label_values_escape_backslash_quote_and_newline() {
        assert_eq!(
            escape_label_value("a\\b\"c\nd"),
            "a\\\\b\\\"c\\nd",
            "each of \\ \" and line feed gets a backslash"
        );
        assert_eq!(escape_label_value("plain H100 80GB"), "plain H100 80GB");
    }

    #[test]
    fn escaped_label_values_appear_in_the_sample_line() {
        let text = write(&GAUGE, &[(&[("name", "say \"hi\"\\\nbye")], 1.0)]);
        assert!(
            text.contains("test_bytes{name=\"say \\\"hi\\\"\\\\\\nbye\"} 1\n"),
            "{text}"
        );
        // Every sample stays on one line: a raw line feed would split it.
        assert_eq!(text.lines().count(), 3, "{text}");
    }

    #[test]
    fn help_escapes_backslash_and_newline_but_not_quotes() {
        assert_eq!(escape_help("a\\b\n\"c\""), "a\\\\b\\n\"c\"");
    }

    #[test]
    fn family_writes_help_and_type_before_its_samples() {
        assert_eq!(
            write(
                &GAUGE,
                &[(&[("gpu", "0")], 85_899_345_920.0), (&[("gpu", "1")], 0.25)]
            ),
            "# HELP test_bytes A test gauge (bytes).\n\
             # TYPE test_bytes gauge\n\
             test_bytes{gpu=\"0\"} 85899345920\n\
             test_bytes{gpu=\"1\"} 0.25\n"
        );
    }

    #[test]
    fn labels_render_in_order_and_empty_set_renders_nothing() {
        assert_eq!(
            Labels::new(&[("gpu", "0"), ("name", "A\\B")]).as_str(),
            "{gpu=\"0\",name=\"A\\\\B\"}"
        );
        assert_eq!(Labels::new(&[]).as_str(), "");
    }

    #[test]
    fn family_without_samples_is_omitted_entirely() {
        assert_eq!(write(&GAUGE, &[]), "");
    }

    #[test]
    fn counter_type_and_unlabelled_sample() {
        let f = Family {
            name: "test_errors_total",
            help: "Errors.",
            kind: MetricType::Counter,
        };
        let text = write(&f, &[(&[], 3.0)]);
        assert!(
            text.contains("# TYPE test_errors_total counter\n"),
            "{text}"
        );
        assert!(text.ends_with("\ntest_errors_total 3\n"), "{text}");
    }

    #[test]
    fn special_values_use_the_format_spelling() {
        let text = write(
            &GAUGE,
            &[
                (&[("v", "nan")], f64::NAN),
                (&[("v", "inf")], f64::INFINITY),
                (&[("v", "-inf")], f64::NEG_INFINITY),
                (&[("v", "big")], 1e21),
                (&[("v", "neg")], -3.0),
                (&[("v", "above_2_53")], 9_007_199_254_740_994.0),
                (&[("v", "frac")], 0.125),
            ],
        );
        assert!(text.contains("{v=\"neg\"} -3\n"), "{text}");
        assert!(
            text.contains("{v=\"above_2_53\"} 9007199254740994\n"),
            "{text}"
        );
        assert!(text.contains("{v=\"frac\"} 0.125\n"), "{text}");
        assert!(text.contains("{v=\"nan\"} NaN\n"), "{text}");
        assert!(text.contains("{v=\"inf\"} +Inf\n"), "{text}");
        assert!(text.contains("{v=\"-inf\"} -Inf\n"), "{text}");
        assert!(
            text.contains("{v=\"big\"} 1000000000000000000000\n"),
            "{text}"
        );
    }
}
