// The exception family every meshcast layer throws; messages name the bad value and the expected
// one.
#pragma once

#include <stdexcept>
#include <string>

namespace meshcast {

// Base of every error meshcast reports. The CLI prints what() and exits 2.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Input that does not describe a valid layout, plan, schedule or option value.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// A file or document that cannot be parsed (JSON plans, cluster files, schedules).
class ParseError : public Error {
 public:
  using Error::Error;
};

}  // namespace meshcast
