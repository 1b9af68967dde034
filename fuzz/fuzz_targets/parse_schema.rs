//! Any UTF-8 text: the parser must not panic, and a schema it accepts must print to text that
//! parses back to an equal schema and prints the same again.
#![no_main]

use boxfall::FunctionSchema;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(schema) = FunctionSchema::parse(text) else {
        return;
    };
    let printed = schema.to_string();
    let reparsed = match FunctionSchema::parse(&printed) {
        Ok(s) => s,
        Err(e) => panic!("{text:?} parsed, but its printed form does not: {e}"),
    };
    assert_eq!(reparsed, schema, "{text:?} printed as {printed:?}");
    assert_eq!(reparsed.to_string(), printed);
    let _ = schema.info();
});
