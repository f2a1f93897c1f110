// kiln::Error is what every user mistake raises: bad shapes, dtypes, dims, devices, misuse.
// The message starts with the operation in brackets, then says what was wrong and with which
// values, e.g. "[add] The size of tensor a (3) must match the size of tensor b (4) at
// non-singleton dimension 1". Internal invariant failures use KILN_INTERNAL_ASSERT and say so.
#pragma once
#include <cstdint>
#include <exception>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

class Error : public std::exception {
 public:
  explicit Error(std::string msg) : msg_(std::move(msg)) {}
  const char* what() const noexcept override { return msg_.c_str(); }

 private:
  std::string msg_;
};

namespace detail {
// "[2, 3]"
std::string shape_str(std::span<const int64_t> s);
inline void cat_one(std::ostringstream& os, std::span<const int64_t> s) { os << shape_str(s); }
inline void cat_one(std::ostringstream& os, const std::vector<int64_t>& s) { os << shape_str(s); }
template <typename T>
void cat_one(std::ostringstream& os, const T& v) { os << v; }
template <typename... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  (cat_one(os, args), ...);
  return os.str();
}
}  // namespace detail

}  // namespace kiln

// KILN_CHECK(cond, "op", parts...): throws kiln::Error("[op] parts...") when cond is false.
#define KILN_CHECK(cond, op, ...)                                                   \
  do {                                                                              \
    if (!(cond)) [[unlikely]]                                                       \
      throw ::kiln::Error(::kiln::detail::cat("[", op, "] ", __VA_ARGS__));         \
  } while (0)
#define KILN_FAIL(op, ...) throw ::kiln::Error(::kiln::detail::cat("[", op, "] ", __VA_ARGS__))
#define KILN_INTERNAL_ASSERT(cond)                                                  \
  do {                                                                              \
    if (!(cond)) [[unlikely]]                                                       \
      throw ::kiln::Error(::kiln::detail::cat("[internal] kiln bug: ", #cond,       \
                                              " failed at ", __FILE__, ":", __LINE__)); \
  } while (0)
