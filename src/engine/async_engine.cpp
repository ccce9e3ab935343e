#include "engine/async_engine.h"

#include <fmt/format.h>

namespace fp4::engine {

std::vector<RequestOutput> RequestStream::wait(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  ready_.wait_for(lock, timeout, [&] { return !queue_.empty(); });
  std::vector<RequestOutput> out;
  out.swap(queue_);
  return out;
}

void RequestStream::push(RequestOutput output) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(output));
  }
  ready_.notify_all();
}

AsyncEngine::AsyncEngine(LlmEngine& engine) : engine_(engine), metrics_(engine.metrics()) {
  thread_ = std::thread([this] { loop(); });
}

AsyncEngine::~AsyncEngine() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

RequestId AsyncEngine::submit(EngineRequest request, std::shared_ptr<RequestStream> stream) {
  engine_.validate(request);
  RequestId id = 0;
  {
    std::lock_guard lock(mutex_);
    id = next_id_++;
    streams_.emplace(id, std::move(stream));
    inbox_.push_back({id, std::move(request), std::chrono::steady_clock::now()});
  }
  wake_.notify_all();
  return id;
}

void AsyncEngine::abort(RequestId id) {
  {
    std::lock_guard lock(mutex_);
    aborts_.push_back(id);
  }
  wake_.notify_all();
}

EngineMetrics AsyncEngine::metrics() const {
  std::lock_guard lock(mutex_);
  return metrics_;
}

void AsyncEngine::loop() {
  for (;;) {
    std::deque<Submission> arrived;
    std::vector<RequestId> aborts;
    bool stopping = false;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] {
        return stopping_ || !inbox_.empty() || !aborts_.empty() || engine_.has_work();
      });
      arrived.swap(inbox_);
      aborts.swap(aborts_);
      stopping = stopping_;
    }
    std::vector<RequestOutput> outputs;
    for (Submission& s : arrived) {
      try {
        engine_.add_request(s.id, std::move(s.request), s.arrival);
      } catch (const std::exception& e) {
        RequestOutput failed;
        failed.id = s.id;
        failed.finish_reason = FinishReason::kAbort;
        failed.error = e.what();
        outputs.push_back(std::move(failed));
      }
    }
    for (RequestId id : aborts) {
      if (auto out = engine_.abort(id)) outputs.push_back(std::move(*out));
    }
    if (stopping) {
      fail_all("the server is shutting down");
      return;
    }
    if (engine_.has_work()) {
      try {
        std::vector<RequestOutput> stepped = engine_.step();
        outputs.insert(outputs.end(), std::make_move_iterator(stepped.begin()),
                       std::make_move_iterator(stepped.end()));
      } catch (const std::exception& e) {
        // A step that throws leaves the batch's state unknown: end every request with the
        // error rather than run on from it.
        ++failed_steps_;
        fail_all(fmt::format("the engine failed: {}", e.what()));
      }
    }
    std::lock_guard lock(mutex_);
    for (RequestOutput& out : outputs) {
      const auto it = streams_.find(out.id);
      if (it == streams_.end()) continue;
      const bool done = out.finished();
      it->second->push(std::move(out));
      if (done) streams_.erase(it);
    }
    metrics_ = engine_.metrics();
  }
}

void AsyncEngine::fail_all(const std::string& message) {
  std::vector<RequestId> ids;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [id, stream] : streams_) ids.push_back(id);
  }
  for (RequestId id : ids) {
    RequestOutput out;
    if (auto aborted = engine_.abort(id)) out = std::move(*aborted);
    out.id = id;
    out.finish_reason = FinishReason::kAbort;
    out.error = message;
    std::lock_guard lock(mutex_);
    const auto it = streams_.find(id);
    if (it == streams_.end()) continue;
    it->second->push(std::move(out));
    streams_.erase(it);
  }
  std::lock_guard lock(mutex_);
  metrics_ = engine_.metrics();
}

}  // namespace fp4::engine
