// A small HTTP/1.1 server on Boost.Beast: one thread per connection, keep-alive, a limit on the
// request body, Server-Sent Events through chunked transfer encoding. Routing and everything
// above HTTP is the handler's; the handler sees only HttpRequest and HttpResponder, so it can
// be tested without sockets.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

namespace fp4::server {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // without the query string
  std::string body;
  std::map<std::string, std::string> headers;  // names in lower case

  std::string header(const std::string& lower_case_name) const {
    const auto it = headers.find(lower_case_name);
    return it == headers.end() ? std::string() : it->second;
  }
};

// How a handler answers: either send() once, or begin_stream(), any number of write_chunk()
// and end_stream().
class HttpResponder {
 public:
  virtual ~HttpResponder() = default;
  virtual void send(int status, std::string_view content_type, std::string body) = 0;
  virtual bool begin_stream(int status, std::string_view content_type) = 0;
  // False when the client is gone (nothing more will reach it).
  virtual bool write_chunk(std::string_view data) = 0;
  virtual void end_stream() = 0;
  // Whether the client has closed its side: checked without blocking, so a handler that waits
  // for the engine can notice a disconnect before it has anything to write.
  virtual bool client_gone() = 0;
};

using HttpHandler = std::function<void(const HttpRequest&, HttpResponder&)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;  // 0: any free port (see HttpServer::port)
  size_t max_body_bytes = size_t{32} << 20;
  int max_connections = 1024;
  int idle_timeout_seconds = 300;  // a keep-alive connection with no request is closed
};

class HttpServer {
 public:
  // Binds and listens at once (throws fp4::Error naming the address on failure).
  HttpServer(HttpServerOptions options, HttpHandler handler);
  ~HttpServer();

  uint16_t port() const { return port_; }
  // Accepts connections until stop(); returns once every connection has ended.
  void run();
  // From any thread (or after a signal): stops accepting and closes live connections.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  uint16_t port_ = 0;
};

}  // namespace fp4::server
