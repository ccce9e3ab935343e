#include "server/http_server.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange unincluded

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include "core/check.h"

namespace fp4::server {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

const char* error_body(int status) {
  switch (status) {
    case 400: return R"({"error":{"message":"malformed HTTP request","type":"invalid_request_error","param":null,"code":null}})";
    case 413: return R"({"error":{"message":"the request body is larger than the server accepts","type":"invalid_request_error","param":null,"code":null}})";
    default: return R"({"error":{"message":"the server has too many connections; retry later","type":"server_error","param":null,"code":null}})";
  }
}

void set_timeout(int fd, int option, int seconds) {
  timeval tv{seconds, 0};
  ::setsockopt(fd, SOL_SOCKET, option, &tv, sizeof tv);
}

class Connection final : public HttpResponder {
 public:
  Connection(tcp::socket& socket, bool keep_alive) : socket_(socket), keep_alive_(keep_alive) {}

  void send(int status, std::string_view content_type, std::string body) override {
    http::response<http::string_body> res{static_cast<http::status>(status), 11};
    res.set(http::field::server, "fp4serve");
    res.set(http::field::content_type, std::string(content_type));
    res.keep_alive(keep_alive_);
    res.body() = std::move(body);
    res.prepare_payload();
    beast::error_code ec;
    http::write(socket_, res, ec);
    if (ec) failed_ = true;
    answered_ = true;
  }

  bool begin_stream(int status, std::string_view content_type) override {
    http::response<http::empty_body> res{static_cast<http::status>(status), 11};
    res.set(http::field::server, "fp4serve");
    res.set(http::field::content_type, std::string(content_type));
    res.set(http::field::cache_control, "no-cache");
    res.keep_alive(keep_alive_);
    res.chunked(true);
    http::response_serializer<http::empty_body> sr{res};
    beast::error_code ec;
    http::write_header(socket_, sr, ec);
    answered_ = true;
    streaming_ = true;
    if (ec) failed_ = true;
    return !failed_;
  }

  bool write_chunk(std::string_view data) override {
    if (failed_) return false;
    beast::error_code ec;
    net::write(socket_, http::make_chunk(net::buffer(data.data(), data.size())), ec);
    if (ec) failed_ = true;
    return !failed_;
  }

  void end_stream() override {
    if (failed_ || !streaming_) return;
    beast::error_code ec;
    net::write(socket_, http::make_chunk_last(), ec);
    if (ec) failed_ = true;
    streaming_ = false;
  }

  bool client_gone() override {
    if (failed_) return true;
    pollfd p{socket_.native_handle(), POLLRDHUP, 0};
    return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
  }

  bool answered() const { return answered_; }
  // A stream the handler left open cannot be followed by another response on this connection.
  bool reusable() const { return keep_alive_ && !failed_ && !streaming_; }

 private:
  tcp::socket& socket_;
  bool keep_alive_;
  bool failed_ = false;
  bool answered_ = false;
  bool streaming_ = false;
};

void send_plain_error(tcp::socket& socket, int status) {
  http::response<http::string_body> res{static_cast<http::status>(status), 11};
  res.set(http::field::server, "fp4serve");
  res.set(http::field::content_type, "application/json");
  res.keep_alive(false);
  res.body() = error_body(status);
  res.prepare_payload();
  beast::error_code ec;
  http::write(socket, res, ec);
}

}  // namespace

struct HttpServer::Impl {
  HttpServerOptions options;
  HttpHandler handler;
  net::io_context io;
  tcp::acceptor acceptor{io};
  std::mutex mutex;
  std::condition_variable idle;
  std::set<int> live;  // native handles of open connections
  bool stopping = false;

  void serve(tcp::socket& socket) {
    beast::flat_buffer buffer;
    for (;;) {
      http::request_parser<http::string_body> parser;
      parser.body_limit(options.max_body_bytes);
      parser.header_limit(64 * 1024);
      beast::error_code ec;
      http::read(socket, buffer, parser, ec);
      if (ec == http::error::body_limit) {
        send_plain_error(socket, 413);
        return;
      }
      if (ec == http::error::end_of_stream || ec == net::error::eof ||
          ec == net::error::connection_reset || ec == net::error::operation_aborted ||
          ec == net::error::would_block || ec == net::error::try_again || ec == net::error::bad_descriptor) {
        return;
      }
      if (ec) {
        send_plain_error(socket, 400);
        return;
      }
      const http::request<http::string_body>& req = parser.get();
      HttpRequest request;
      request.method.assign(req.method_string().data(), req.method_string().size());
      const std::string target(req.target().data(), req.target().size());
      request.path = target.substr(0, target.find('?'));
      request.body = req.body();
      for (const auto& field : req) {
        std::string name(field.name_string().data(), field.name_string().size());
        for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        request.headers[name].assign(field.value().data(), field.value().size());
      }
      Connection connection(socket, req.keep_alive());
      try {
        handler(request, connection);
      } catch (const std::exception& e) {
        if (!connection.answered()) {
          send_internal_error(connection, e.what());
        }
        return;
      }
      if (!connection.answered()) send_internal_error(connection, "the handler sent no response");
      if (!connection.reusable()) return;
    }
  }

  static void send_internal_error(Connection& c, const std::string& what) {
    std::string escaped;
    for (char ch : what) {
      if (ch == '"' || ch == '\\') escaped += '\\';
      if (static_cast<unsigned char>(ch) >= 0x20) escaped += ch;
    }
    c.send(500, "application/json",
           fmt::format(R"({{"error":{{"message":"internal error: {}","type":"server_error","param":null,"code":null}}}})", escaped));
  }
};

HttpServer::HttpServer(HttpServerOptions options, HttpHandler handler)
    : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->handler = std::move(handler);
  beast::error_code ec;
  const net::ip::address address = net::ip::make_address(impl_->options.host, ec);
  FP4_CHECK(!ec, "--host '{}' is not an IP address: {}", impl_->options.host, ec.message());
  const tcp::endpoint endpoint(address, impl_->options.port);
  tcp::acceptor& a = impl_->acceptor;
  a.open(endpoint.protocol(), ec);
  if (!ec) a.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(endpoint, ec);
  if (!ec) a.listen(net::socket_base::max_listen_connections, ec);
  FP4_CHECK(!ec, "cannot listen on {}:{}: {}", impl_->options.host, impl_->options.port, ec.message());
  port_ = a.local_endpoint().port();
}

HttpServer::~HttpServer() {
  stop();
  std::unique_lock lock(impl_->mutex);
  impl_->idle.wait(lock, [&] { return impl_->live.empty(); });
}

void HttpServer::run() {
  Impl& s = *impl_;
  for (;;) {
    tcp::socket socket(s.io);
    beast::error_code ec;
    s.acceptor.accept(socket, ec);
    {
      std::lock_guard lock(s.mutex);
      if (s.stopping) break;
    }
    if (ec) continue;  // e.g. the peer reset before accept completed
    const int fd = socket.native_handle();
    set_timeout(fd, SO_RCVTIMEO, s.options.idle_timeout_seconds);
    set_timeout(fd, SO_SNDTIMEO, 60);
    {
      std::lock_guard lock(s.mutex);
      if (std::ssize(s.live) >= s.options.max_connections) {
        send_plain_error(socket, 503);
        continue;
      }
      s.live.insert(fd);
    }
    std::thread([&s, sock = std::move(socket), fd]() mutable {
      s.serve(sock);
      beast::error_code ignored;
      sock.shutdown(tcp::socket::shutdown_both, ignored);
      sock.close(ignored);
      std::lock_guard lock(s.mutex);
      s.live.erase(fd);
      s.idle.notify_all();
    }).detach();
  }
  std::unique_lock lock(s.mutex);
  s.idle.wait(lock, [&] { return s.live.empty(); });
}

void HttpServer::stop() {
  Impl& s = *impl_;
  {
    std::lock_guard lock(s.mutex);
    if (s.stopping) return;
    s.stopping = true;
    // Wakes every connection thread blocked in a read or write.
    for (int fd : s.live) ::shutdown(fd, SHUT_RDWR);
  }
  // Wakes the blocked accept.
  ::shutdown(s.acceptor.native_handle(), SHUT_RDWR);
}

}  // namespace fp4::server
