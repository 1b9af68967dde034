//! Every schema PyTorch 2.13 ships parses, prints back unchanged, and reads as PyTorch reads it.

mod schema_support;

use boxfall::schema::{AliasInfo, Argument};
use boxfall::FunctionSchema;
use schema_support::{parse_json, schema_lines, Json, NATIVE_FUNCTIONS_JSONL, SCHEMAS_JSONL};

#[test]
fn every_torch_schema_prints_back_unchanged() {
    let lines = schema_lines();
    assert_eq!(lines.len(), 2187, "the data file changed");
    let mut failures = Vec::new();
    for line in &lines {
        match FunctionSchema::parse(line) {
            Ok(schema) => {
                let printed = schema.to_string();
                if &printed != line {
                    failures.push(format!("  {line}\n  printed as\n  {printed}"));
                }
            }
            Err(e) => failures.push(format!("  {e}")),
        }
    }
    for f in &failures {
        eprintln!("{f}\n");
    }
    assert!(
        failures.is_empty(),
        "{} of {} schemas failed to round-trip (listed above)",
        failures.len(),
        lines.len()
    );
}

/// native_functions.yaml writes what PyTorch's printer never prints (enum names such as
/// `reduction=Mean` and `dtype=long`, the type `DeviceIndex`, `SymInt[2] stride=1`, floats such
/// as `1e-05`, single-quoted strings); each line must parse and print as torch prints it.
#[test]
fn every_native_functions_schema_prints_as_torch_prints_it() {
    let text = std::fs::read_to_string(NATIVE_FUNCTIONS_JSONL)
        .unwrap_or_else(|e| panic!("cannot read {NATIVE_FUNCTIONS_JSONL}: {e}"));
    let mut failures = Vec::new();
    let mut n = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        n += 1;
        let row = parse_json(line);
        let (written, torch) = (row.get("text").str(), row.get("torch_str").str());
        match FunctionSchema::parse(written) {
            Ok(s) if s.to_string() == torch => {}
            Ok(s) => failures.push(format!(
                "  {written}
  printed as
  {s}
  torch: {torch}"
            )),
            Err(e) => failures.push(format!("  {e}")),
        }
    }
    assert_eq!(n, 1352, "the data file changed");
    for f in &failures {
        eprintln!("{f}\n");
    }
    assert!(
        failures.is_empty(),
        "{} of {n} schemas differ from torch (listed above)",
        failures.len()
    );
}

/// c10 keeps alias sets in unordered sets, so the reference lists them sorted; this crate keeps
/// them as written, so they compare as sets.
fn sorted(sets: &[String]) -> Vec<String> {
    let mut sets = sets.to_vec();
    sets.sort();
    sets
}

fn compare_arg(what: &str, ours: &Argument, theirs: &Json, mismatches: &mut Vec<String>) {
    let empty = AliasInfo {
        before: vec![],
        after: vec![],
        is_write: false,
        contained: vec![],
    };
    let alias = ours.alias.as_ref().unwrap_or(&empty);
    let checks: [(&str, String, String); 6] = [
        (
            "name",
            ours.name.clone(),
            theirs.get("name").str().to_owned(),
        ),
        (
            "kwarg_only",
            ours.kwarg_only.to_string(),
            theirs.get("kwarg_only").bool().to_string(),
        ),
        (
            "has_default",
            ours.default.is_some().to_string(),
            theirs.get("has_default").bool().to_string(),
        ),
        (
            "alias_before",
            format!("{:?}", sorted(&alias.before)),
            format!("{:?}", sorted(&theirs.get("alias_before").strings())),
        ),
        (
            "alias_after",
            format!("{:?}", sorted(&alias.after)),
            format!("{:?}", sorted(&theirs.get("alias_after").strings())),
        ),
        (
            "is_write",
            alias.is_write.to_string(),
            theirs.get("is_write").bool().to_string(),
        ),
    ];
    for (field, ours, theirs) in checks {
        if ours != theirs {
            mismatches.push(format!("{what}.{field}: ours {ours}, torch {theirs}"));
        }
    }
}

#[test]
fn every_torch_schema_reads_as_torch_reads_it() {
    let text = std::fs::read_to_string(SCHEMAS_JSONL)
        .unwrap_or_else(|e| panic!("cannot read {SCHEMAS_JSONL}: {e}"));
    let mut failures = Vec::new();
    let mut count = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        count += 1;
        let reference = parse_json(line);
        let schema_text = reference.get("schema").str();
        let schema = match FunctionSchema::parse(schema_text) {
            Ok(s) => s,
            Err(e) => {
                failures.push(format!("{e}"));
                continue;
            }
        };
        let mut mismatches = Vec::new();
        let top: [(&str, String, String); 4] = [
            (
                "name",
                schema.name.clone(),
                reference.get("name").str().to_owned(),
            ),
            (
                "overload_name",
                schema.overload_name.clone(),
                reference.get("overload_name").str().to_owned(),
            ),
            (
                "is_vararg",
                schema.is_vararg.to_string(),
                reference.get("is_vararg").bool().to_string(),
            ),
            (
                "is_mutable",
                schema.is_mutable().to_string(),
                reference.get("is_mutable").bool().to_string(),
            ),
        ];
        for (field, ours, theirs) in top {
            if ours != theirs {
                mismatches.push(format!("{field}: ours {ours}, torch {theirs}"));
            }
        }
        for (what, ours, theirs) in [
            (
                "arguments",
                &schema.arguments,
                reference.get("arguments").array(),
            ),
            ("returns", &schema.returns, reference.get("returns").array()),
        ] {
            if ours.len() != theirs.len() {
                mismatches.push(format!(
                    "{what}: ours has {}, torch {}",
                    ours.len(),
                    theirs.len()
                ));
                continue;
            }
            for (i, (o, t)) in ours.iter().zip(theirs).enumerate() {
                compare_arg(&format!("{what}[{i}]"), o, t, &mut mismatches);
            }
        }
        if !mismatches.is_empty() {
            failures.push(format!("{schema_text}\n    {}", mismatches.join("\n    ")));
        }
    }
    assert_eq!(count, 2187, "the reference file changed");
    for f in &failures {
        eprintln!("{f}\n");
    }
    assert!(
        failures.is_empty(),
        "{} of {count} schemas differ from torch's reading (listed above)",
        failures.len()
    );
}

#[test]
fn json_reader_reads_what_the_data_needs() {
    let j = parse_json(r#" {"a": [1, -2.5e3, true, false, null], "b": "x\"\\\n\u0041", "c": {}} "#);
    assert_eq!(j.get("a").array().len(), 5);
    assert_eq!(j.get("a").array()[1], Json::Number(-2500.0));
    assert_eq!(j.get("b").str(), "x\"\\\nA");
    assert!(matches!(j.get("c"), Json::Object(m) if m.is_empty()));
}
