// Assertions on what a failure says: a piece of text inside a message, and the message of the
// InputError a call must throw (the error every bad input of the project raises).
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>

// Expects `piece` inside the string `text`, printing the whole text when it is not.
#define EXPECT_CONTAINS(text, piece) \
  EXPECT_NE(std::string(text).find(piece), std::string::npos) \
      << "no \"" << (piece) << "\" in: " << (text)

namespace mixpar::test_support {

// Runs f, which must throw InputError; returns its message for further checks (empty, with a
// failure recorded, when f throws something else or nothing).
std::string input_error_of(const std::function<void()>& f);

}  // namespace mixpar::test_support
