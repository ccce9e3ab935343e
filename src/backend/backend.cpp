#include "backend/backend.h"

#include "core/check.h"

namespace fp4 {

void Backend::begin_capture() { fail("the {} backend cannot record ops", name()); }

std::unique_ptr<CapturedOps> Backend::end_capture() { fail("the {} backend cannot record ops", name()); }

void Backend::sample(const SampleParams&) { fail("the {} backend does not sample; the host sampler does", name()); }

}  // namespace fp4
