// The built-in model: the build copies the trained checkpoint of models/tiny-m3.1-flash-tasks
// into `default-model/` beside the fp4serve executable, so `fp4serve serve` without --model has
// a model to serve on a fresh machine. `fp4serve init-model` writes a random model of the same
// architecture into `random-model/` there. Both are found through the running executable
// (/proc/self/exe), wherever the build directory is.
#pragma once

#include <filesystem>

namespace fp4::cli {

// <directory of the running executable>/default-model, whether or not it exists. Throws
// fp4::Error when the executable's path cannot be read.
std::filesystem::path default_model_location();

// <directory of the running executable>/random-model: where init-model writes by default.
std::filesystem::path random_model_location();

// default_model_location(), checked to hold a model (its config.json). Throws fp4::Error
// saying how to build it otherwise.
std::filesystem::path default_model_dir();

}  // namespace fp4::cli
