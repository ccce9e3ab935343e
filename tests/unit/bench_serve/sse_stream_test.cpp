// The SSE parser (events split at every byte boundary, several per read, comments, CR/LF/CRLF)
// and the rules that turn one response's events into TTFT, ITL, E2EL and token counts.
#include <gtest/gtest.h>

#include "tools/fp4serve/bench_serve_sse.h"
#include "tools/fp4serve/bench_serve_stream.h"

namespace fp4::bench_serve {
namespace {

// What a server streams: a keep-alive comment, events with LF, CRLF and CR endings, a named
// event, a two-line data field, a line without a colon (a data field with an empty value), an
// event with no data (dropped), a field the standard ignores, and [DONE].
const std::string kStream =
    ": ping\n\n"
    "data: {\"a\":1}\n\n"
    "data: {\"b\":2}\r\n\r\n"
    "event: usage\rdata:{\"c\":3}\r\r"
    "data: line1\ndata: line2\n\n"
    "data\n\n"
    "event: nothing\n\n"
    "id: 7\nretry: 10\ndata: x\n\n"
    "data: [DONE]\n\n";

std::vector<SseEvent> expected_events() {
  return {{"", "{\"a\":1}"}, {"", "{\"b\":2}"}, {"usage", "{\"c\":3}"}, {"", "line1\nline2"},
          {"", ""},          {"", "x"},         {"", "[DONE]"}};
}

void expect_same(const std::vector<SseEvent>& got, const std::string& where) {
  const auto want = expected_events();
  ASSERT_EQ(got.size(), want.size()) << where;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].event, want[i].event) << where << " event " << i;
    EXPECT_EQ(got[i].data, want[i].data) << where << " event " << i;
  }
}

TEST(BenchServeSse, WholeStreamInOneRead) {
  SseParser p;
  std::vector<SseEvent> out;
  p.feed(kStream, out);
  expect_same(out, "one read");
  EXPECT_EQ(p.comments(), 1);
}

TEST(BenchServeSse, SplitAtEveryByteBoundary) {
  for (size_t k = 0; k <= kStream.size(); ++k) {
    SseParser p;
    std::vector<SseEvent> out;
    p.feed(std::string_view(kStream).substr(0, k), out);
    p.feed(std::string_view(kStream).substr(k), out);
    expect_same(out, "split at " + std::to_string(k));
  }
}

TEST(BenchServeSse, OneByteAtATime) {
  SseParser p;
  std::vector<SseEvent> out;
  for (const char c : kStream) p.feed(std::string_view(&c, 1), out);
  expect_same(out, "byte by byte");
}

TEST(BenchServeSse, IncompleteEventIsHeldBack) {
  SseParser p;
  std::vector<SseEvent> out;
  p.feed("data: {\"a\":1}\n", out);
  EXPECT_TRUE(out.empty());  // no blank line yet
  p.feed("\n", out);
  ASSERT_EQ(out.size(), 1u);
}

using std::chrono::milliseconds;

TEST(BenchServeStream, MeasuresAsVllm) {
  const Clock::time_point t0 = Clock::now();
  StreamMeasurer m(t0);
  // First choice event at 100 ms (empty text still counts), then 110 and 130 ms; the usage
  // chunk at 131 ms has no choice, so E2EL stops at 130 ms.
  m.on_event(R"({"choices":[{"index":0,"text":""}]})", t0 + milliseconds(100));
  m.on_event(R"({"choices":[{"index":0,"text":"ab"}]})", t0 + milliseconds(110));
  m.on_event(R"({"choices":[{"index":0,"text":"c"}]})", t0 + milliseconds(130));
  m.on_event(R"({"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3}})", t0 + milliseconds(131));
  m.on_event("[DONE]", t0 + milliseconds(132));
  EXPECT_TRUE(m.finished());
  RequestRecord r;
  r.prompt_len = 5;
  m.finish(r);
  ASSERT_TRUE(r.success) << r.error;
  EXPECT_NEAR(r.ttft_s, 0.100, 1e-9);
  ASSERT_EQ(r.itl_s.size(), 2u);
  EXPECT_NEAR(r.itl_s[0], 0.010, 1e-9);
  EXPECT_NEAR(r.itl_s[1], 0.020, 1e-9);
  EXPECT_NEAR(r.e2el_s, 0.130, 1e-9);
  EXPECT_EQ(r.output_tokens, 3);
  EXPECT_TRUE(r.output_from_usage);
  EXPECT_EQ(r.prompt_len, 7);  // the server's count replaces ours
  EXPECT_EQ(r.token_events, 3);
  EXPECT_EQ(r.generated_text, "abc");
}

TEST(BenchServeStream, ChatDeltasAndNoUsageFallsBackToEvents) {
  const Clock::time_point t0 = Clock::now();
  StreamMeasurer m(t0);
  m.on_event(R"({"choices":[{"delta":{"content":"he"}}]})", t0 + milliseconds(5));
  m.on_event(R"({"choices":[{"delta":{"content":"llo"}}]})", t0 + milliseconds(7));
  RequestRecord r;
  r.prompt_len = 5;
  m.finish(r);  // the body ended without usage and without [DONE]: still a success
  ASSERT_TRUE(r.success);
  EXPECT_EQ(r.output_tokens, 2);
  EXPECT_FALSE(r.output_from_usage);
  EXPECT_EQ(r.prompt_len, 5);
  EXPECT_EQ(r.generated_text, "hello");
}

TEST(BenchServeStream, ErrorEventFails) {
  const Clock::time_point t0 = Clock::now();
  StreamMeasurer m(t0);
  m.on_event(R"({"choices":[{"text":"a"}]})", t0 + milliseconds(1));
  m.on_event(R"({"error":{"message":"engine died","type":"server_error","code":500}})", t0 + milliseconds(2));
  EXPECT_TRUE(m.finished());
  RequestRecord r;
  m.finish(r);
  EXPECT_FALSE(r.success);
  EXPECT_NE(r.error.find("engine died"), std::string::npos) << r.error;
}

TEST(BenchServeStream, NoChoiceEventFails) {
  const Clock::time_point t0 = Clock::now();
  StreamMeasurer m(t0);
  m.on_event(R"({"choices":[],"usage":{"completion_tokens":0}})", t0 + milliseconds(1));
  m.on_event("[DONE]", t0 + milliseconds(2));
  RequestRecord r;
  m.finish(r);
  EXPECT_FALSE(r.success);
  EXPECT_FALSE(r.error.empty());
}

TEST(BenchServeStream, MalformedEventFails) {
  StreamMeasurer m(Clock::now());
  m.on_event("{not json", Clock::now());
  RequestRecord r;
  m.finish(r);
  EXPECT_FALSE(r.success);
  EXPECT_NE(r.error.find("{not json"), std::string::npos) << r.error;
}

}  // namespace
}  // namespace fp4::bench_serve
