"""bf.parse_schema: the fields of FunctionSchema, Argument and AliasInfo, errors, round trips."""

from __future__ import annotations

import json
from pathlib import Path

import boxfall as bf
import pytest

DATA = Path(__file__).resolve().parents[1] / "data"
TXT = Path(__file__).resolve().parents[2] / "python" / "boxfall" / "data" / "torch_schemas.txt"
JSONL = DATA / "torch_schemas.jsonl"

ADD = "demo::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"
ADD_ = "demo::add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)"


def schema_lines(path: Path) -> list[str]:
    """The schema lines of torch_schemas.txt (comments and blank lines dropped)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [line for line in lines if line.strip() and not line.startswith("#")]


def test_schema_name_and_overload_are_split_as_pytorch_does():
    s = bf.parse_schema(ADD)
    assert s.name == "demo::add"
    assert s.overload_name == "Tensor"


def test_default_overload_name_is_empty():
    s = bf.parse_schema("demo::relu(Tensor self) -> Tensor")
    assert s.name == "demo::relu"
    assert s.overload_name == ""


def test_is_mutable_follows_written_arguments():
    assert bf.parse_schema(ADD).is_mutable is False
    assert bf.parse_schema(ADD_).is_mutable is True


def test_is_vararg():
    assert bf.parse_schema("aten::format(str self, ...) -> str").is_vararg is True
    assert bf.parse_schema(ADD).is_vararg is False


def test_str_round_trips():
    assert str(bf.parse_schema(ADD)) == ADD
    assert str(bf.parse_schema(ADD_)) == ADD_


def test_arguments_name_type_default_kwarg_only():
    args = bf.parse_schema(ADD).arguments
    assert [a.name for a in args] == ["self", "other", "alpha"]
    assert [a.type for a in args] == ["Tensor", "Tensor", "Scalar"]
    assert [a.kwarg_only for a in args] == [False, False, True]
    assert args[0].default is None
    assert args[2].default == "1"
    assert all(a.alias is None for a in args)


@pytest.mark.parametrize(
    ("text", "index", "type_", "default"),
    [
        (
            'aten::gelu(Tensor self, *, str approximate="none") -> Tensor',
            1,
            "str",
            '"none"',
        ),
        (
            (
                "aten::layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight=None, "
                "Tensor? bias=None, float eps=1e-05, bool cudnn_enable=True) -> Tensor"
            ),
            4,
            "float",
            "1e-05",
        ),
        (
            (
                "aten::layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight=None, "
                "Tensor? bias=None, float eps=1e-05, bool cudnn_enable=True) -> Tensor"
            ),
            2,
            "Tensor?",
            "None",
        ),
        (
            "aten::amax(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor",
            1,
            "int[1]",
            "[]",
        ),
        (
            (
                "aten::var.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, "
                "bool keepdim=False) -> Tensor"
            ),
            1,
            "int[1]?",
            "None",
        ),
        (
            (
                "aten::thnn_conv2d(Tensor self, Tensor weight, SymInt[2] kernel_size, "
                "Tensor? bias=None, SymInt[2] stride=[1, 1], SymInt[2] padding=[0, 0]) -> Tensor"
            ),
            4,
            "SymInt[2]",
            "[1, 1]",
        ),
    ],
)
def test_type_and_default_are_kept_as_written(text, index, type_, default):
    a = bf.parse_schema(text).arguments[index]
    assert a.type == type_
    assert a.default == default


def test_write_alias():
    s = bf.parse_schema(ADD_)
    alias = s.arguments[0].alias
    assert isinstance(alias, bf.AliasInfo)
    assert alias.before == ["a"]
    assert alias.after == ["a"]
    assert alias.is_write is True
    assert s.arguments[0].type == "Tensor"
    assert s.arguments[1].alias is None


def test_out_argument_is_kwarg_only_and_written():
    s = bf.parse_schema("aten::mul.out(Tensor self, Tensor other, *, Tensor(a!) out) -> Tensor(a!)")
    out = s.arguments[2]
    assert (out.name, out.type, out.kwarg_only) == ("out", "Tensor", True)
    assert out.alias.is_write is True
    assert out.alias.before == ["a"]
    assert s.overload_name == "out"


def test_read_alias_of_a_view():
    s = bf.parse_schema("aten::expand_as(Tensor(a) self, Tensor other) -> Tensor(a)")
    alias = s.arguments[0].alias
    assert alias.before == ["a"]
    assert alias.after == ["a"]
    assert alias.is_write is False
    assert s.is_mutable is False


def test_alias_with_after_set():
    s = bf.parse_schema("aten::chunk(Tensor(a -> *) self, int chunks, int dim=0) -> Tensor(a)[]")
    alias = s.arguments[0].alias
    assert alias.before == ["a"]
    assert alias.after == ["*"]
    assert alias.is_write is False
    assert s.arguments[0].type == "Tensor"


def test_alias_inside_a_list_reads_as_pytorch():
    s = bf.parse_schema("aten::_foreach_acos_(Tensor(a!)[] self) -> ()")
    a = s.arguments[0]
    assert a.type == "Tensor[]"
    assert a.alias.is_write is True
    assert a.alias.before == []
    assert s.is_mutable is True


def test_alias_after_list_brackets():
    s = bf.parse_schema("aten::add_.t(t[](a!) self, t[] b) -> t[]")
    a = s.arguments[0]
    assert a.type == "t[]"
    assert a.alias.before == ["a"]
    assert a.alias.is_write is True


def test_type_variables_are_lowercase_names():
    s = bf.parse_schema("demo::pick(tVal x, t y) -> tVal")
    assert [a.type for a in s.arguments] == ["tVal", "t"]


def test_schema_error_is_a_value_error_and_boxfall_error():
    assert issubclass(bf.SchemaError, ValueError)
    assert issubclass(bf.SchemaError, bf.BoxfallError)


def test_schema_error_points_at_the_column_with_a_caret():
    text = "demo::f(Tensr x) -> Tensor"
    with pytest.raises(bf.SchemaError) as info:
        bf.parse_schema(text)
    message = str(info.value)
    column = text.index("Tensr") + 1
    assert "Tensr" in message
    assert f"column {column}" in message
    lines = message.splitlines()
    text_line = next(line for line in lines if text in line)
    caret_line = next(line for line in lines if line.strip() == "^")
    assert caret_line.index("^") - text_line.index(text) == column - 1


@pytest.mark.parametrize(
    "text",
    [
        "add(Tensor self) -> Tensor",  # no namespace
        "demo::add(Tensor self)",  # no ->
        "demo::f(Tensor x, Tensor x) -> Tensor",  # duplicate argument names
        "demo::f(Tensor x, ) -> Tensor",  # empty argument
        "demo::f(Tensor x -> Tensor",  # unbalanced parenthesis
        "demo::f(Foo x) -> Tensor",  # unknown capitalised type
    ],
)
def test_bad_schemas_raise_schema_error(text):
    with pytest.raises(bf.SchemaError):
        bf.parse_schema(text)


@pytest.mark.parametrize(
    "text",
    [
        "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
        (
            "aten::max.dim(Tensor self, int dim, bool keepdim=False) -> "
            "(Tensor values, Tensor indices)"
        ),
        (
            "aten::_amp_foreach_non_finite_check_and_unscale_(Tensor(a!)[] self, "
            "Tensor(b!) found_inf, Tensor inv_scale) -> ()"
        ),
        (
            "aten::to.prim_Device(Tensor(a) self, Device? device, int? dtype=None, "
            "bool non_blocking=False, bool copy=False) -> Tensor(b|a)"
        ),
        (
            "aten::triplet_margin_loss(Tensor anchor, Tensor positive, Tensor negative, "
            "float margin=1., float p=2., float eps=9.9999999999999995e-07, bool swap=False, "
            "int reduction=1) -> Tensor"
        ),
        "aten::_set_item.int(Dict(int, t)(a!) l, int(b -> *) idx, t(c -> *) v) -> ()",
        "prim::BroadcastMKLDNNTensors(...) -> ...",
        (
            "_quantized::linear_prepack(Tensor W, Tensor? B=None) -> "
            "__torch__.torch.classes.quantized.LinearPackedParamsBase W_prepack"
        ),
    ],
)
def test_known_pytorch_schemas_round_trip(text):
    assert str(bf.parse_schema(text)) == text


@pytest.mark.skipif(not TXT.exists(), reason="python/boxfall/data/torch_schemas.txt is missing")
def test_every_line_of_torch_schemas_txt_round_trips():
    failures = []
    for line in schema_lines(TXT):
        try:
            printed = str(bf.parse_schema(line))
        except bf.SchemaError as e:
            failures.append(f"{line}\n    -> SchemaError: {e}")
            continue
        if printed != line:
            failures.append(f"{line}\n    -> {printed}")
    assert not failures, f"{len(failures)} lines differ, e.g.:\n" + "\n".join(failures[:5])


def _argument_fields(arg) -> dict:
    """One Argument in the form of torch_schemas.jsonl."""
    alias = arg.alias
    return {
        "name": arg.name,
        "kwarg_only": arg.kwarg_only,
        "has_default": arg.default is not None,
        "alias_before": list(alias.before) if alias else [],
        "alias_after": list(alias.after) if alias else [],
        "is_write": bool(alias.is_write) if alias else False,
    }


@pytest.mark.skipif(not JSONL.exists(), reason="tests/data/torch_schemas.jsonl is missing")
def test_fields_agree_with_torch_schemas_jsonl():
    failures = []
    for line in JSONL.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        try:
            s = bf.parse_schema(row["schema"])
        except bf.SchemaError as e:
            failures.append(f"{row['schema']}\n    -> SchemaError: {e}")
            continue
        got = {
            "name": s.name,
            "overload_name": s.overload_name,
            "is_vararg": s.is_vararg,
            "is_mutable": s.is_mutable,
            "arguments": [_argument_fields(a) for a in s.arguments],
        }
        want = {k: row[k] for k in got}
        if got != want:
            failures.append(f"{row['schema']}\n    got  {got}\n    want {want}")
    assert not failures, f"{len(failures)} schemas differ, e.g.:\n" + "\n".join(failures[:3])


def test_dispatch_facts_are_exposed():
    out = bf.parse_schema(
        "aten::max.dim_max(Tensor self, int dim, bool keepdim=False, *, "
        "Tensor(a!) max, Tensor(b!) max_values) -> (Tensor(a!) values, Tensor(b!) indices)"
    )
    assert out.tensor_arguments == [0, 3, 4]
    assert out.written_arguments == [3, 4]
    assert out.return_aliases == [3, 4]
    assert not out.has_view_returns
    view = bf.parse_schema("aten::t(Tensor(a) self) -> Tensor(a)")
    assert view.has_view_returns and view.return_aliases == [0] and view.written_arguments == []
    lists = bf.parse_schema("demo::f(Tensor?[] xs, int n, Tensor(a!)[] out) -> ()")
    assert lists.tensor_arguments == [0, 2] and lists.written_arguments == [2]


NATIVE = DATA / "native_functions.jsonl"


def test_native_functions_schemas_print_as_torch_prints_them():
    rows = [json.loads(line) for line in NATIVE.read_text(encoding="utf-8").splitlines() if line]
    assert len(rows) == 1352
    failures = []
    for row in rows:
        try:
            printed = str(bf.parse_schema(row["text"]))
        except bf.SchemaError as e:
            failures.append(f"{row['text']}\n    -> SchemaError: {e}")
            continue
        if printed != row["torch_str"]:
            failures.append(f"{row['text']}\n    -> {printed}\n    torch {row['torch_str']}")
    assert not failures, f"{len(failures)} schemas differ, e.g.:\n" + "\n".join(failures[:5])


@pytest.mark.parametrize(
    ("written", "printed"),
    [
        ("int reduction=Mean", "int reduction=1"),
        ("ScalarType? dtype=long", "ScalarType? dtype=4"),
        ("ScalarType dtype=float32", "ScalarType dtype=6"),
        ("MemoryFormat memory_format=contiguous_format", "MemoryFormat memory_format=0"),
        ("Layout layout=strided", "Layout layout=0"),
        ("DeviceIndex index", "int index"),
        ("SymInt[2] stride=1", "SymInt[2] stride=[1, 1]"),
        ("int[2] stride=1", "int[2] stride=1"),
        ("int[1] stride=1", "int[1] stride=[1]"),
        ("float eps=1e-05", "float eps=1.0000000000000001e-05"),
        ("float p=2", "float p=2."),
        ("float? p=2", "float? p=2"),
        ("str mode='none'", 'str mode="none"'),
    ],
)
def test_defaults_as_native_functions_yaml_writes_them_print_as_torch(written, printed):
    assert str(bf.parse_schema(f"demo::f({written}) -> ()")) == f"demo::f({printed}) -> ()"


def test_a_dtype_name_is_a_default_only_for_a_scalar_type():
    with pytest.raises(bf.SchemaError, match="float32"):
        bf.parse_schema("demo::f(int x=float32) -> ()")


def test_parsed_schema_is_left_out_of_garbage_collection_and_stays_usable():
    """parse_schema untracks its result (it holds only its text, a str, so it can be in no cycle);
    collections must leave it intact, and it must free cleanly."""
    import gc
    import weakref

    s = bf.parse_schema(ADD_)
    assert not gc.is_tracked(s)
    assert all(o is not s for o in gc.get_objects())
    gc.collect()
    assert s.name == "demo::add_"
    assert s.arguments[0].is_write
    assert str(s) == ADD_
    with pytest.raises(TypeError):
        weakref.ref(s)  # no weak references either: nothing can observe it but its owners
    del s
    gc.collect()


def test_parsed_schema_builds_its_fields_lazily_and_consistently():
    """The names come from the parsed text; every other field from the schema built on first
    use, equal to the one an operator's own schema gives."""
    s = bf.parse_schema(ADD)
    assert (s.name, s.overload_name, s.operator_name) == ("demo::add", "Tensor", "demo::add.Tensor")
    assert (s.is_vararg, s.is_varret) == (False, False)
    first = s.arguments
    assert [a.name for a in first] == ["self", "other", "alpha"]
    assert [a.name for a in s.arguments] == ["self", "other", "alpha"]
    assert s == bf.parse_schema(ADD)
    assert hash(s) == hash(bf.parse_schema(ADD))
    v = bf.parse_schema("demo::f(...) -> ...")
    assert (v.is_vararg, v.is_varret) == (True, True)
