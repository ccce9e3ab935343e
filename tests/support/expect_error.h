// Checks that bad input is refused with a message a user can act on: fp4::Error, naming the
// field, what was found and what was expected.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <string_view>

#include "core/check.h"

namespace fp4::testing {

// Expects `fn` to throw fp4::Error whose message contains every one of `parts`, and returns the
// message (empty when nothing was thrown) for checks of its own.
template <typename Fn>
std::string expect_error(Fn&& fn, std::initializer_list<std::string_view> parts) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string message = e.what();
    for (std::string_view part : parts) {
      EXPECT_NE(message.find(part), std::string::npos)
          << "message '" << message << "' lacks '" << part << "'";
    }
    return message;
  }
  ADD_FAILURE() << "no error thrown";
  return {};
}

}  // namespace fp4::testing
