#include "backend/backend.h"

#include <chrono>

#include "core/check.h"

namespace fp4 {
namespace {

class WallClockMark final : public TimeMark {
 public:
  double ms_since(const TimeMark& earlier) const override {
    const auto& e = dynamic_cast<const WallClockMark&>(earlier);
    return std::chrono::duration<double, std::milli>(at_ - e.at_).count();
  }

 private:
  std::chrono::steady_clock::time_point at_ = std::chrono::steady_clock::now();
};

}  // namespace

std::unique_ptr<TimeMark> Backend::mark_time() { return std::make_unique<WallClockMark>(); }

void Backend::begin_capture() { fail("the {} backend cannot record ops", name()); }

std::unique_ptr<CapturedOps> Backend::end_capture() { fail("the {} backend cannot record ops", name()); }

void Backend::sample(const SampleParams&) { fail("the {} backend does not sample; the host sampler does", name()); }

}  // namespace fp4
