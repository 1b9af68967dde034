#!/usr/bin/env bash
# boxfall.jax's checks and figures on a machine with a TPU (or any JAX device), in a few
# processes run one after another (one process at a time can hold a TPU). From the repository
# root, with a wheel built elsewhere when this machine has no Rust toolchain:
#
#   maturin build --release -o target/wheels          # on a machine with cargo
#   bash benches/jax_tpu.sh [target/wheels/boxfall-*.whl] [--quick]
#
# It needs JAX for the device (installed), numpy, scipy and pytest; scikit-learn is installed
# from the machine's own package index when one is configured (BOXFALL_PIP_INDEX), else from
# PyPI, into a folder at the end of PYTHONPATH, so that the machine's own JAX and NumPy stay first.
set -uo pipefail
cd "$(dirname "$0")/.."
wheel="${1:-$(ls target/wheels/boxfall-*.whl 2>/dev/null | head -1)}"
quick="${2:-}"
site="${TMPDIR:-/tmp}/boxfall-site"
python3 -c 'import platform; print("glibc", platform.libc_ver()[1])'
if [[ -n "$wheel" ]]; then
  rm -rf "$site" && mkdir -p "$site"
  # Unpacked rather than pip-installed: pip refuses a wheel whose manylinux tag names a newer
  # glibc than the machine's, where the extension may well load.
  python3 -m zipfile -e "$wheel" "$site"
  export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$site"
fi
sk="${TMPDIR:-/tmp}/boxfall-sklearn"
if ! python3 -c "import sklearn" 2>/dev/null; then
  PIP_CONFIG_FILE=/dev/null python3 -m pip install -q --isolated --only-binary=:all: --no-deps \
    ${BOXFALL_PIP_INDEX:+--index-url "$BOXFALL_PIP_INDEX"} --target "$sk" \
    scikit-learn joblib threadpoolctl narwhals && export PYTHONPATH="$PYTHONPATH:$sk"
fi
export SCIPY_ARRAY_API=1 PYTHONUNBUFFERED=1
status=0
run() { echo; echo "==> $*"; "$@" || status=1; }
for x64 in 0 1; do
  run env JAX_ENABLE_X64=$x64 python3 tests/python/test_jax_backend.py
  run env JAX_ENABLE_X64=$x64 python3 -m pytest -q -p no:cacheprovider --no-header -rfs \
    tests/python/test_jax_sklearn.py
done
run python3 benches/jax_device.py $quick
exit $status
