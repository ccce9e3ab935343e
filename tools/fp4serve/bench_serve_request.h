// One benchmark request: the OpenAI request body, and sending it while measuring its stream.
#pragma once

#include <string>

#include "tools/fp4serve/bench_serve_dataset.h"
#include "tools/fp4serve/bench_serve_http.h"
#include "tools/fp4serve/bench_serve_options.h"
#include "tools/fp4serve/bench_serve_stream.h"

namespace fp4::bench_serve {

// The JSON body: `prompt` as an array of ids for /v1/completions, one user message of text for
// chat; always stream with include_usage, temperature 0, max_tokens (chat also gets
// max_completion_tokens, the name the chat API prefers, with the same value), and ignore_eos
// when asked.
std::string request_body(const ServeOptions& options, const std::string& model, const Prompt& prompt);

// Sends one request and measures it. `bench_start` is the origin of start_s; `scheduled_s` is
// copied into the record. Never throws for anything the server or the network does: every such
// failure ends up in record.error.
RequestRecord send_request(const HttpClient& client, const ServeOptions& options,
                           const std::string& model, const Prompt& prompt,
                           Clock::time_point bench_start, double scheduled_s);

}  // namespace fp4::bench_serve
