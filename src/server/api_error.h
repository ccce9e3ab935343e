// An error the API returns to the client: HTTP status plus OpenAI's error object,
// {"error": {"message", "type", "param", "code"}}. Thrown by request parsing and handlers; the
// HTTP layer turns it into the response (or into a final SSE event once a stream has begun).
#pragma once

#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace fp4::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string type = "invalid_request_error",
           std::string param = {}, std::string code = {})
      : std::runtime_error(message), status_(status), type_(std::move(type)),
        param_(std::move(param)), code_(std::move(code)) {}

  int status() const { return status_; }
  const std::string& param() const { return param_; }

  nlohmann::json to_json() const {
    nlohmann::json e = {{"message", what()}, {"type", type_}, {"param", nullptr}, {"code", nullptr}};
    if (!param_.empty()) e["param"] = param_;
    if (!code_.empty()) e["code"] = code_;
    return {{"error", e}};
  }

 private:
  int status_;
  std::string type_;
  std::string param_;
  std::string code_;
};

// 400 invalid_request_error naming the field.
inline ApiError bad_request(std::string message, std::string param = {}) {
  return ApiError(400, std::move(message), "invalid_request_error", std::move(param));
}

}  // namespace fp4::server
