//! The plain-data values a pickle is made of.

use std::sync::Arc;

/// A plain-data Python value.
///
/// Containers and strings are [`Arc`]-shared: an object the pickle references
/// twice is one allocation, and cloning a `Value` is cheap.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    None,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(Arc<str>),
    Bytes(Arc<[u8]>),
    List(Arc<[Value]>),
    Tuple(Arc<[Value]>),
    /// Key/value pairs in insertion order. Python overwrites a repeated key
    /// in place; this keeps both pairs and [`Value::get`] returns the last.
    Dict(Arc<[(Value, Value)]>),
}

impl Value {
    /// The value under a string key of a dict (the last one if the key is
    /// repeated, as Python would see it); `None` for non-dicts.
    pub fn get(&self, key: &str) -> Option<&Value> {
        let Value::Dict(pairs) = self else {
            return None;
        };
        pairs
            .iter()
            .rev()
            .find(|(k, _)| matches!(k, Value::Str(s) if &**s == key))
            .map(|(_, v)| v)
    }

    /// The integer, if this is an int (bools are not ints here).
    pub fn as_int(&self) -> Option<i128> {
        match self {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// The integer, if this is an int in `0..2^64`.
    pub fn as_u64(&self) -> Option<u64> {
        self.as_int().and_then(|i| u64::try_from(i).ok())
    }

    /// The integer, if this is an int that fits `i64`.
    pub fn as_i64(&self) -> Option<i64> {
        self.as_int().and_then(|i| i64::try_from(i).ok())
    }

    /// The number as `f64`, for floats and ints (Python accepts either
    /// wherever a float is expected).
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Float(f) => Some(*f),
            // Precision loss above 2^53 is what Python's float() does too.
            Value::Int(i) => Some(*i as f64),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The shared string itself, so callers can keep it without copying.
    pub fn as_arc_str(&self) -> Option<&Arc<str>> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Value::Bytes(b) => Some(b),
            _ => None,
        }
    }

    /// The elements of a list or a tuple.
    pub fn as_list(&self) -> Option<&[Value]> {
        match self {
            Value::List(items) | Value::Tuple(items) => Some(items),
            _ => None,
        }
    }

    /// The pairs of a dict.
    pub fn as_dict(&self) -> Option<&[(Value, Value)]> {
        match self {
            Value::Dict(pairs) => Some(pairs),
            _ => None,
        }
    }

    /// Python's name for the type, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::None => "None",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Float(_) => "float",
            Value::Str(_) => "str",
            Value::Bytes(_) => "bytes",
            Value::List(_) => "list",
            Value::Tuple(_) => "tuple",
            Value::Dict(_) => "dict",
        }
    }

    /// A stable identity for the shared allocation behind a str, bytes or
    /// container: two values have the same identity when the pickle
    /// referenced the same object (through the memo), and also for two
    /// completed lists with identical items (the parser shares those, see
    /// `Parser::intern`). Valid while any clone of the value is alive.
    /// `None` for scalars.
    pub fn identity(&self) -> Option<usize> {
        let ptr: *const u8 = match self {
            Value::Str(s) => Arc::as_ptr(s).cast(),
            Value::Bytes(b) => Arc::as_ptr(b).cast(),
            Value::List(items) | Value::Tuple(items) => Arc::as_ptr(items).cast(),
            Value::Dict(pairs) => Arc::as_ptr(pairs).cast(),
            Value::None | Value::Bool(_) | Value::Int(_) | Value::Float(_) => return None,
        };
        Some(ptr as usize)
    }
}
