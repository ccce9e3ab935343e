// The engine on its own thread, for the server: any thread submits requests and aborts, and
// reads each request's outputs from its stream. The engine thread sleeps while there is no
// work, and otherwise runs steps back to back; requests that arrive during a step join the
// next one (continuous batching).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/engine.h"

namespace fp4::engine {

// Outputs of one or more requests (an HTTP request with n > 1 or several prompts shares one),
// in the order the engine produced them. The engine pushes; the client thread pops.
class RequestStream {
 public:

  // Waits up to `timeout` for outputs; returns those queued (empty on timeout).
  std::vector<RequestOutput> wait(std::chrono::milliseconds timeout);
  void push(RequestOutput output);

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::vector<RequestOutput> queue_;
};

class AsyncEngine {
 public:
  explicit AsyncEngine(LlmEngine& engine);
  ~AsyncEngine();  // aborts what is still active and stops the thread
  AsyncEngine(const AsyncEngine&) = delete;
  AsyncEngine& operator=(const AsyncEngine&) = delete;

  // Validates the request (fp4::Error when it can never run) and queues it; its outputs go to
  // `stream`.
  RequestId submit(EngineRequest request, std::shared_ptr<RequestStream> stream);
  // Ends the request if it is still active; its stream gets a final kAbort output.
  void abort(RequestId id);

  EngineMetrics metrics() const;
  const LlmEngine& engine() const { return engine_; }  // its config and validate() only
  // Steps that failed with an exception; their requests ended with RequestOutput::error.
  int64_t failed_steps() const { return failed_steps_; }

 private:
  struct Submission {
    RequestId id;
    EngineRequest request;
    std::chrono::steady_clock::time_point arrival;
  };
  void loop();
  void fail_all(const std::string& message);

  LlmEngine& engine_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Submission> inbox_;
  std::vector<RequestId> aborts_;
  std::unordered_map<RequestId, std::shared_ptr<RequestStream>> streams_;
  EngineMetrics metrics_;  // the engine's, copied after each step
  RequestId next_id_ = 0;
  std::atomic<int64_t> failed_steps_{0};
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace fp4::engine
