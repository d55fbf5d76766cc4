#include "rlx-test-plugin-faulty/cpp/throw.h"

#include <stdexcept>
#include <string>

void throw_runtime_error(rust::Str what) {
  throw std::runtime_error(std::string(what));
}
