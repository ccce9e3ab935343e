#include "tools/fp4serve/default_model.h"

#include "core/check.h"

namespace fp4::cli {

namespace {

std::filesystem::path executable_dir() {
  std::error_code ec;
  // The link names the executable itself even when it was started through a symlink or a
  // relative path, so the model is found beside the binary the build wrote it next to.
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  FP4_CHECK(!ec, "cannot find the fp4serve executable (reading /proc/self/exe: {}), so not its "
            "built-in model either; give --model DIR", ec.message());
  return exe.parent_path();
}

}  // namespace

std::filesystem::path default_model_location() { return executable_dir() / "default-model"; }

std::filesystem::path random_model_location() { return executable_dir() / "random-model"; }

std::filesystem::path default_model_dir() {
  const std::filesystem::path dir = default_model_location();
  std::error_code ec;
  FP4_CHECK(std::filesystem::is_regular_file(dir / "config.json", ec),
            "the built-in model is missing: {} has no config.json. The build copies it there "
            "from models/tiny-m3.1-flash-tasks (bash scripts/build fp4serve_default_model), or "
            "give --model DIR", dir.string());
  return dir;
}

}  // namespace fp4::cli
