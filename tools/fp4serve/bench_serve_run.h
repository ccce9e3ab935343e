// `fp4serve bench serve` from start to end: the model name, the dataset and arrival times, a
// test request, warm-ups, the measured run (one thread per request in flight), the server's
// counters before and after, and the report.
#pragma once

#include <functional>
#include <vector>

#include "tools/fp4serve/bench_serve_dataset.h"
#include "tools/fp4serve/bench_serve_http.h"
#include "tools/fp4serve/bench_serve_options.h"
#include "tools/fp4serve/bench_serve_stream.h"

namespace fp4::bench_serve {

// Sends prompts[i] at arrivals[i] seconds after the start, holding each until fewer than
// `max_concurrency` requests are in flight (0: no limit; waiting is first come, first served),
// and returns the records in prompt order and the run's duration (first release to last
// completion) through `duration_s`. `send` is what a request does; the benchmark passes
// send_request, tests pass a fake.
using SendFn = std::function<RequestRecord(const Prompt& prompt, Clock::time_point bench_start,
                                           double scheduled_s)>;
std::vector<RequestRecord> run_schedule(const std::vector<Prompt>& prompts,
                                        const std::vector<double>& arrivals, int64_t max_concurrency,
                                        const SendFn& send, double& duration_s);

// Runs the whole benchmark; returns the process exit status (0 when at least one request
// succeeded, 1 when none did or the server never answered the test request). Bad flags throw
// fp4::Error.
int run_bench_serve(ServeOptions options);

}  // namespace fp4::bench_serve
