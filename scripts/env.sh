# Sourced by the scripts: picks the cmake that setup chose and the build folder, and puts the
# CUDA toolkit's bin/ on PATH (NVIDIA's packages do not), so that CMake finds nvcc.
if [ -d /usr/local/cuda/bin ] && ! command -v nvcc >/dev/null 2>&1; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
FP4_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ -x "$FP4_ROOT/.venv/bin/cmake" ]; then CMAKE="$FP4_ROOT/.venv/bin/cmake"; CTEST="$FP4_ROOT/.venv/bin/ctest"
else CMAKE=cmake; CTEST=ctest; fi
BUILD_DIR="${FP4_BUILD_DIR:-$FP4_ROOT/build}"
JOBS="${FP4_JOBS:-2}"
