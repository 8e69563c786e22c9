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

/// One sample: label pairs (name, value) and a value. Label values are
/// escaped by the writer.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub labels: Vec<(&'static str, String)>,
    pub value: f64,
}

/// Escapes a label value: backslash, double quote and line feed.
pub fn escape_label_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// Escapes a `# HELP` text: backslash and line feed.
pub fn escape_help(text: &str) -> String {
    text.replace('\\', "\\\\").replace('\n', "\\n")
}

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
    pub fn family(&mut self, family: &Family, samples: &[Sample]) {
        if samples.is_empty() {
            return;
        }
        let out = &mut self.out;
        let _ = writeln!(out, "# HELP {} {}", family.name, escape_help(family.help));
        let _ = writeln!(out, "# TYPE {} {}", family.name, family.kind.as_str());
        for s in samples {
            out.push_str(family.name);
            if !s.labels.is_empty() {
                out.push('{');
                for (i, (name, value)) in s.labels.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(name);
                    out.push_str("=\"");
                    out.push_str(&escape_label_value(value));
                    out.push('"');
                }
                out.push('}');
            }
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

    fn sample(labels: &[(&'static str, &str)], value: f64) -> Sample {
        Sample {
            labels: labels.iter().map(|(k, v)| (*k, v.to_string())).collect(),
            value,
        }
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
        let mut w = TextWriter::new();
        w.family(&GAUGE, &[sample(&[("name", "say \"hi\"\\\nbye")], 1.0)]);
        let text = w.finish();
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
        let mut w = TextWriter::new();
        w.family(
            &GAUGE,
            &[
                sample(&[("gpu", "0")], 85_899_345_920.0),
                sample(&[("gpu", "1")], 0.25),
            ],
        );
        assert_eq!(
            w.finish(),
            "# HELP test_bytes A test gauge (bytes).\n\
             # TYPE test_bytes gauge\n\
             test_bytes{gpu=\"0\"} 85899345920\n\
             test_bytes{gpu=\"1\"} 0.25\n"
        );
    }

    #[test]
    fn family_without_samples_is_omitted_entirely() {
        let mut w = TextWriter::new();
        w.family(&GAUGE, &[]);
        assert_eq!(w.finish(), "");
    }

    #[test]
    fn counter_type_and_unlabelled_sample() {
        let mut w = TextWriter::new();
        let f = Family {
            name: "test_errors_total",
            help: "Errors.",
            kind: MetricType::Counter,
        };
        w.family(&f, &[sample(&[], 3.0)]);
        let text = w.finish();
        assert!(
            text.contains("# TYPE test_errors_total counter\n"),
            "{text}"
        );
        assert!(text.ends_with("\ntest_errors_total 3\n"), "{text}");
    }

    #[test]
    fn special_values_use_the_format_spelling() {
        let mut w = TextWriter::new();
        w.family(
            &GAUGE,
            &[
                sample(&[("v", "nan")], f64::NAN),
                sample(&[("v", "inf")], f64::INFINITY),
                sample(&[("v", "-inf")], f64::NEG_INFINITY),
                sample(&[("v", "big")], 1e21),
            ],
        );
        let text = w.finish();
        assert!(text.contains("{v=\"nan\"} NaN\n"), "{text}");
        assert!(text.contains("{v=\"inf\"} +Inf\n"), "{text}");
        assert!(text.contains("{v=\"-inf\"} -Inf\n"), "{text}");
        assert!(
            text.contains("{v=\"big\"} 1000000000000000000000\n"),
            "{text}"
        );
    }
}
