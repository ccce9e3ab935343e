#include "tools/fp4serve/bench_serve_http.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <charconv>
#include <limits>
#include <vector>

#include "core/check.h"

namespace fp4::bench_serve {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

struct HttpClient::Endpoints {
  std::vector<tcp::endpoint> list;
};

namespace {

constexpr size_t kErrorBodyLimit = 64 * 1024;
constexpr uint64_t kGetBodyLimit = uint64_t{64} << 20;
constexpr auto kDrainGrace = std::chrono::seconds(2);

// Runs one asynchronous operation to completion on this thread's io_context. Async operations
// are used, with this loop making them synchronous again, because only they honour the
// tcp_stream's deadline: that is what gives every request its timeout without a watchdog thread.
template <typename Start>
beast::error_code run_one(net::io_context& ioc, Start&& start) {
  beast::error_code result = net::error::would_block;
  start([&result](beast::error_code ec, auto&&...) { result = ec; });
  ioc.restart();
  ioc.run();
  return result;
}

std::string describe(const beast::error_code& ec, const char* during, double timeout_s) {
  if (ec == beast::error::timeout) return fmt::format("timed out while {} (after {:.2f} s)", during, timeout_s);
  return fmt::format("connection error while {}: {}", during, ec.message());
}

template <typename Body>
void set_common_fields(http::request<Body>& req, const BaseUrl& url, const std::string& api_key) {
  req.set(http::field::host, fmt::format("{}:{}", url.host, url.port));
  req.set(http::field::user_agent, "fp4serve-bench-serve");
  if (!api_key.empty()) req.set(http::field::authorization, "Bearer " + api_key);
}

}  // namespace

BaseUrl parse_base_url(std::string_view url) {
  constexpr std::string_view kHttp = "http://";
  FP4_CHECK(!url.starts_with("https://"),
            "--base-url {}: https is not supported; give the server's plain http address", url);
  FP4_CHECK(url.starts_with(kHttp), "--base-url {}: expected http://HOST[:PORT][/PREFIX]", url);
  std::string_view rest = url.substr(kHttp.size());
  BaseUrl out;
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  if (slash != std::string_view::npos) {
    std::string_view prefix = rest.substr(slash);
    while (!prefix.empty() && prefix.back() == '/') prefix.remove_suffix(1);
    out.path_prefix = prefix;
  }
  // A bracketed IPv6 literal keeps its colons; the port follows the bracket.
  size_t host_end = authority.rfind(':');
  if (!authority.empty() && authority.front() == '[') {
    const size_t close = authority.find(']');
    FP4_CHECK(close != std::string_view::npos, "--base-url {}: unclosed '[' in the host", url);
    out.host = authority.substr(1, close - 1);
    host_end = close + 1 < authority.size() ? close + 1 : std::string_view::npos;
  } else {
    out.host = authority.substr(0, host_end);
  }
  FP4_CHECK(!out.host.empty(), "--base-url {}: no host", url);
  if (host_end != std::string_view::npos) {
    const std::string_view port = authority.substr(host_end + 1);
    unsigned value = 0;
    const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    FP4_CHECK(ec == std::errc() && end == port.data() + port.size() && value >= 1 && value <= 65535,
              "--base-url {}: the port '{}' is not a number in [1, 65535]", url, port);
    out.port = static_cast<uint16_t>(value);
  }
  return out;
}

HttpClient::HttpClient(BaseUrl url, std::string api_key)
    : url_(std::move(url)), api_key_(std::move(api_key)), endpoints_(std::make_unique<Endpoints>()) {
  net::io_context ioc;
  tcp::resolver resolver(ioc);
  beast::error_code ec;
  const auto results = resolver.resolve(url_.host, std::to_string(url_.port), ec);
  FP4_CHECK(!ec, "cannot resolve the server's host {}: {}", url_.host, ec.message());
  for (const auto& entry : results) endpoints_->list.push_back(entry.endpoint());
  FP4_CHECK(!endpoints_->list.empty(), "the server's host {} resolves to no address", url_.host);
}

HttpClient::~HttpClient() = default;

HttpResponse HttpClient::get(std::string_view path, double timeout_s) const {
  HttpResponse out;
  net::io_context ioc;
  beast::tcp_stream stream(ioc);
  stream.expires_after(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s)));
  if (auto ec = run_one(ioc, [&](auto h) { stream.async_connect(endpoints_->list, h); })) {
    out.error = describe(ec, "connecting", timeout_s);
    return out;
  }
  http::request<http::empty_body> req{http::verb::get, url_.path_prefix + std::string(path), 11};
  set_common_fields(req, url_, api_key_);
  if (auto ec = run_one(ioc, [&](auto h) { http::async_write(stream, req, h); })) {
    out.error = describe(ec, "sending", timeout_s);
    return out;
  }
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(kGetBodyLimit);
  if (auto ec = run_one(ioc, [&](auto h) { http::async_read(stream, buffer, parser, h); })) {
    out.error = describe(ec, "reading the response", timeout_s);
    return out;
  }
  out.status = static_cast<int>(parser.get().result_int());
  // Not std::string(view): with Boost 1.83's core::string_view that construction is ambiguous.
  const auto reason = parser.get().reason();
  out.reason.assign(reason.data(), reason.size());
  out.body = std::move(parser.get().body());
  beast::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  return out;
}

HttpResponse HttpClient::stream(std::string_view path, const std::string& json_body,
                                Clock::time_point deadline, const std::function<void()>& on_sending,
                                const std::function<bool(std::string_view)>& on_body) const {
  HttpResponse out;
  net::io_context ioc;
  beast::tcp_stream stream(ioc);
  http::request<http::string_body> req{http::verb::post, url_.path_prefix + std::string(path), 11};
  set_common_fields(req, url_, api_key_);
  req.set(http::field::content_type, "application/json");
  req.body() = json_body;
  req.prepare_payload();
  const double timeout_s = std::chrono::duration<double>(deadline - Clock::now()).count();

  on_sending();
  stream.expires_at(deadline);
  if (auto ec = run_one(ioc, [&](auto h) { stream.async_connect(endpoints_->list, h); })) {
    out.error = describe(ec, "connecting", timeout_s);
    return out;
  }
  if (auto ec = run_one(ioc, [&](auto h) { http::async_write(stream, req, h); })) {
    out.error = describe(ec, "sending", timeout_s);
    return out;
  }
  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  // No limit on a stream's length. Not boost::none: Boost 1.74 compares a Content-Length with
  // the optional limit directly, and an empty optional is less than any number, so every
  // response with a Content-Length (an error body) would fail as over the limit.
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  if (auto ec = run_one(ioc, [&](auto h) { http::async_read_header(stream, buffer, parser, h); })) {
    out.error = describe(ec, "waiting for the response header", timeout_s);
    return out;
  }
  out.status = static_cast<int>(parser.get().result_int());
  // Not std::string(view): with Boost 1.83's core::string_view that construction is ambiguous.
  const auto reason = parser.get().reason();
  out.reason.assign(reason.data(), reason.size());

  // read_some (not read) returns as soon as any body bytes are parsed, so each SSE event is
  // handed on when it arrives rather than when a buffer fills.
  std::array<char, 16 * 1024> chunk;
  bool draining = false;
  while (!parser.is_done()) {
    parser.get().body().data = chunk.data();
    parser.get().body().size = chunk.size();
    beast::error_code ec = run_one(ioc, [&](auto h) { http::async_read_some(stream, buffer, parser, h); });
    if (ec == http::error::need_buffer) ec = {};  // the chunk buffer filled up: not an error
    if (draining) {
      if (ec) break;  // the caller has all it needs: how the rest ends does not matter
      continue;
    }
    const size_t n = chunk.size() - parser.get().body().size;
    if (n > 0) {
      const std::string_view piece(chunk.data(), n);
      if (out.status == 200) {
        if (!on_body(piece)) {
          // Read the rest (the end of the chunked body) rather than close with unread bytes,
          // which would reset the connection under the server; but give a server that keeps
          // the body open after its last event only a short grace.
          draining = true;
          stream.expires_at(std::min(deadline, Clock::now() + kDrainGrace));
        }
      } else if (out.body.size() < kErrorBodyLimit) {
        out.body.append(piece.substr(0, kErrorBodyLimit - out.body.size()));
      }
    }
    if (ec) {
      out.error = describe(ec, "reading the response body", timeout_s);
      break;
    }
  }
  beast::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  return out;
}

}  // namespace fp4::bench_serve
