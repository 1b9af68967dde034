//! Shape rules' cost (`graph::rules::output_metas`), which the recorder pays once per recorded
//! operator against a budget of about a microsecond: a broadcast binary operator, one with a
//! Python scalar, a reduction, a matmul and a reshape, on host tensors. `cargo bench --bench
//! graph_rules`.

use std::hint::black_box;

use boxfall::graph::rules::output_metas;
use boxfall::{IValue, Tensor};
use criterion::{criterion_group, criterion_main, Criterion};

fn t(shape: &[usize]) -> IValue {
    IValue::Tensor(Tensor::from_array(ndarray::ArrayD::<f32>::zeros(
        shape.to_vec(),
    )))
}

fn bench_rules(c: &mut Criterion) {
    let cases: Vec<(&str, &str, Vec<IValue>)> = vec![
        (
            "add_broadcast",
            "array_api::add",
            vec![t(&[64, 1]), t(&[32])],
        ),
        (
            "multiply_scalar",
            "array_api::multiply.Tensor_Scalar",
            vec![t(&[64, 32]), IValue::Double(0.5)],
        ),
        (
            "sum_axis",
            "array_api::sum",
            vec![
                t(&[64, 32]),
                IValue::IntList(vec![-1]),
                IValue::None,
                IValue::Bool(false),
            ],
        ),
        (
            "matmul",
            "array_api::matmul",
            vec![t(&[64, 32]), t(&[32, 8])],
        ),
        (
            "reshape",
            "array_api::reshape",
            vec![t(&[64, 32]), IValue::IntList(vec![-1, 8]), IValue::None],
        ),
    ];
    let mut group = c.benchmark_group("graph_rules");
    for (label, name, stack) in &cases {
        assert!(output_metas(name, stack).is_some(), "{label} has a rule");
        group.bench_function(*label, |b| {
            b.iter(|| output_metas(black_box(name), black_box(stack)))
        });
    }
    group.finish();
}

criterion_group!(benches, bench_rules);
criterion_main!(benches);
