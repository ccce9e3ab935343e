// The built-in model: the build runs `fp4serve init-model` to write it into `default-model/`
// beside the fp4serve executable, so `fp4serve serve` without --model has a model to serve on
// a fresh machine. Found through the running executable (/proc/self/exe), wherever the build
// directory is.
#pragma once

#include <filesystem>

namespace fp4::cli {

// <directory of the running executable>/default-model, whether or not it exists. Throws
// fp4::Error when the executable's path cannot be read.
std::filesystem::path default_model_location();

// default_model_location(), checked to hold a model (its config.json). Throws fp4::Error
// saying how to build it otherwise.
std::filesystem::path default_model_dir();

}  // namespace fp4::cli
