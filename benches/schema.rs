//! Parse speed: the whole of torch_schemas.txt, reported per schema. `cargo bench --bench schema`.
//!
//! `BOXFALL_BENCH_LOOP=parse:100` parses (and drops) the whole file so many times and nothing
//! else, for a profiler or an instruction count (`valgrind --tool=callgrind`, with a run of 0
//! passes to subtract the setup; divide by the passes times the schemas).

use std::hint::black_box;

use boxfall::FunctionSchema;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

const SCHEMAS_TXT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/python/boxfall/data/torch_schemas.txt"
);

fn schema_lines() -> Vec<String> {
    std::fs::read_to_string(SCHEMAS_TXT)
        .unwrap_or_else(|e| panic!("cannot read {SCHEMAS_TXT}: {e}"))
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(str::to_owned)
        .collect()
}

fn bench_parse(c: &mut Criterion) {
    let lines = schema_lines();
    let schemas: Vec<FunctionSchema> = lines
        .iter()
        .map(|l| FunctionSchema::parse(l).expect("the data parses"))
        .collect();

    if let Some((which, passes)) = loop_request() {
        match which.as_str() {
            "parse" => {
                for _ in 0..passes {
                    for line in &lines {
                        black_box(FunctionSchema::parse(black_box(line)).ok());
                    }
                }
            }
            other => panic!("BOXFALL_BENCH_LOOP: no loop {other:?} (parse)"),
        }
        return;
    }

    let mut group = c.benchmark_group("schema");
    group.throughput(Throughput::Elements(lines.len() as u64));
    // Parsing alone: the parsed schemas are dropped outside the timed region.
    group.bench_function("parse_torch_schemas", |b| {
        b.iter_with_large_drop(|| {
            lines
                .iter()
                .map(|line| FunctionSchema::parse(black_box(line)))
                .collect::<Vec<_>>()
        })
    });
    // Parse and drop, as a definition that is thrown away again would cost.
    group.bench_function("parse_and_drop_torch_schemas", |b| {
        b.iter(|| {
            for line in &lines {
                black_box(FunctionSchema::parse(black_box(line)).ok());
            }
        })
    });
    group.bench_function("print_torch_schemas", |b| {
        b.iter(|| {
            for schema in &schemas {
                black_box(black_box(schema).to_string());
            }
        })
    });
    group.bench_function("info_torch_schemas", |b| {
        b.iter(|| {
            for schema in &schemas {
                black_box(black_box(schema).info());
            }
        })
    });
    group.finish();
}

/// `BOXFALL_BENCH_LOOP=<loop>:<passes>`, if set.
fn loop_request() -> Option<(String, u64)> {
    let v = std::env::var("BOXFALL_BENCH_LOOP").ok()?;
    let (which, passes) = v.split_once(':')?;
    Some((which.to_owned(), passes.parse().ok()?))
}

criterion_group!(benches, bench_parse);
criterion_main!(benches);
