//! What the parser remembers of names: the argument names seen so far (to refuse a duplicate)
//! and the enum names native_functions.yaml writes as defaults.

use std::collections::HashSet;

use crate::schema::syntax::Item;

/// Up to this many arguments, duplicates are found by a filter and, on its hits, by scanning
/// the ones already parsed.
const SCAN_LIMIT: usize = 64;

/// The enum names that native_functions.yaml writes as defaults, as the integers PyTorch's
/// parser turns them into (`function_schema_parser.cpp`): a few names for any type, and for a
/// `ScalarType` every dtype name of `c10::getStringToDtypeMap`.
pub(super) fn enum_default(word: &str, dtypes: bool) -> Option<i64> {
    let any = match word {
        "float" => Some(6),   // at::kFloat
        "complex" => Some(9), // at::kComplexFloat
        "long" => Some(4),    // at::kLong
        "strided" => Some(0), // at::kStrided
        "Mean" => Some(1),    // at::Reduction::Mean
        "contiguous_format" => Some(0),
        _ => None,
    };
    if any.is_some() || !dtypes {
        return any;
    }
    // c10::ScalarType's numbering.
    Some(match word {
        "uint8" => 0,
        "int8" => 1,
        "int16" | "short" => 2,
        "int32" | "int" => 3,
        "int64" => 4,
        "float16" | "half" => 5,
        "float32" => 6,
        "float64" | "double" => 7,
        "complex32" | "chalf" => 8,
        "complex64" | "cfloat" => 9,
        "complex128" | "cdouble" => 10,
        "bool" => 11,
        "qint8" => 12,
        "quint8" => 13,
        "qint32" => 14,
        "bfloat16" => 15,
        "quint4x2" => 16,
        "quint2x4" => 17,
        "float8_e5m2" => 23,
        "float8_e4m3fn" => 24,
        "float8_e5m2fnuz" => 25,
        "float8_e4m3fnuz" => 26,
        "uint16" => 27,
        "uint32" => 28,
        "uint64" => 29,
        _ => return None,
    })
}

/// The argument names seen so far. Schemas have a handful of arguments: a 64-bit filter over
/// each name's length and end bytes answers "not seen" for almost every new name without
/// comparing it with any other, and only a hit is checked by scanning the ones before it. Past
/// [`SCAN_LIMIT`] a set takes over, so that a hostile schema with thousands of arguments is not
/// checked in quadratic time.
#[derive(Default)]
pub(super) struct SeenNames<'a> {
    filter: u64,
    set: Option<HashSet<&'a [u8]>>,
}

impl<'a> SeenNames<'a> {
    /// Whether `name` is among `previous` (the arguments before it, spans of `src`); remembers
    /// it if not.
    pub(super) fn contains_or_add(
        &mut self,
        name: &'a [u8],
        previous: &[Item],
        src: &'a [u8],
    ) -> bool {
        if let Some(set) = &mut self.set {
            return !set.insert(name);
        }
        let bit = 1u64 << name_hash(name);
        let found = self.filter & bit != 0
            && previous.iter().any(|a| {
                // Comparing lengths first skips most string comparisons.
                a.name.end - a.name.start == name.len() && a.name.bytes(src) == name
            });
        self.filter |= bit;
        if !found && previous.len() >= SCAN_LIMIT {
            let names = previous.iter().map(|a| a.name.bytes(src));
            self.set = Some(names.chain([name]).collect());
        }
        found
    }
}

/// Six bits of a name, from its length and its first and last bytes: enough to tell a schema's
/// few argument names apart.
#[inline]
fn name_hash(name: &[u8]) -> u32 {
    let first = u32::from(name.first().copied().unwrap_or(0));
    let last = u32::from(name.last().copied().unwrap_or(0));
    (first + last * 5 + (name.len() as u32) * 9) & 63
}
