// PYG_EDGEDOT_CHECK(cond, parts...): TORCH_CHECK with a message built without an ostream.
//
// An integer formatted by TORCH_CHECK's ostream crashed the process on the GPU machine's
// image (std::ostream::_M_insert<long>) instead of raising (benchmarks/NOTES.md, "Why Python
// raises the errors"). So every check in csrc/ goes through this macro: its parts are
// concatenated as strings, and it takes only strings, dtypes and devices; a number must come
// as std::to_string(n), or the call does not compile (tests/test_packaging.py checks that no
// bare TORCH_CHECK is left). The message is built only when the check fails.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <string_view>

namespace pyg_edgedot {

inline std::string message_part(const char* s) { return s; }
inline std::string message_part(const std::string& s) { return s; }
inline std::string message_part(std::string_view s) { return std::string(s); }
inline std::string message_part(at::ScalarType t) { return c10::toString(t); }
inline std::string message_part(const c10::Device& d) { return d.str(); }
template <typename T>
std::string message_part(const T&) = delete;  // a number: pass std::to_string(n)

template <typename... Parts>
std::string check_message(const Parts&... parts) {
  std::string out;
  ((out += message_part(parts)), ...);
  return out;
}

}  // namespace pyg_edgedot

#define PYG_EDGEDOT_CHECK(cond, ...) TORCH_CHECK(cond, ::pyg_edgedot::check_message(__VA_ARGS__))
