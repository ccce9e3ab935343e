// The HTTP/1.1 client of `fp4serve bench serve` (Boost.Beast over Asio). Each call opens its own
// connection and runs its own io_context on the calling thread, so calls from many threads never
// share state; a deadline covers connecting, sending and every read.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "tools/fp4serve/bench_serve_stream.h"

namespace fp4::bench_serve {

struct BaseUrl {
  std::string host;
  uint16_t port = 80;
  std::string path_prefix;  // without a trailing '/', possibly empty
};

// "http://HOST[:PORT][/PREFIX]". https is refused with a message that says so.
BaseUrl parse_base_url(std::string_view url);

struct HttpResponse {
  int status = 0;      // 0 when no response header arrived
  std::string reason;  // the status line's reason phrase
  std::string body;    // for stream(): only when the status is not 200 (the first 64 KiB)
  std::string error;   // a connection error or a timeout; empty when the exchange completed
};

class HttpClient {
 public:
  // Resolves the host once, so that requests do not pay for name resolution; throws fp4::Error
  // when it cannot be resolved.
  HttpClient(BaseUrl url, std::string api_key);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // GET prefix+path, reading the whole body.
  HttpResponse get(std::string_view path, double timeout_s) const;

  // POST `json_body` to prefix+path and, when the status is 200, hand every piece of the body to
  // `on_body` as soon as it is read (chunked transfer encoding removed). `on_body` returns false
  // to stop reading early. `on_sending` is called just before the connection is opened, so the
  // caller can take its start time there.
  HttpResponse stream(std::string_view path, const std::string& json_body, Clock::time_point deadline,
                      const std::function<void()>& on_sending,
                      const std::function<bool(std::string_view)>& on_body) const;

  const BaseUrl& url() const { return url_; }

 private:
  struct Endpoints;
  BaseUrl url_;
  std::string api_key_;
  std::unique_ptr<Endpoints> endpoints_;
};

}  // namespace fp4::bench_serve
