// IntArrayRef: a non-owning list of int64 that binds to {1, 2}, a std::vector, or one integer,
// as libtorch's does. Valid only for the duration of the call it is passed to.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

namespace kiln {

class IntArrayRef {
 public:
  constexpr IntArrayRef() = default;
  constexpr IntArrayRef(const int64_t& one) : data_(&one), size_(1) {}
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winit-list-lifetime"
  // The list lives until the end of the full expression that passes it: long enough for a call.
  constexpr IntArrayRef(std::initializer_list<int64_t> l) : data_(l.begin()), size_(l.size()) {}
#pragma GCC diagnostic pop
  IntArrayRef(const std::vector<int64_t>& v) : data_(v.data()), size_(v.size()) {}
  constexpr IntArrayRef(std::span<const int64_t> s) : data_(s.data()), size_(s.size()) {}
  constexpr IntArrayRef(const int64_t* p, size_t n) : data_(p), size_(n) {}

  constexpr const int64_t* begin() const { return data_; }
  constexpr const int64_t* end() const { return data_ + size_; }
  constexpr const int64_t* data() const { return data_; }
  constexpr size_t size() const { return size_; }
  constexpr bool empty() const { return size_ == 0; }
  constexpr int64_t operator[](size_t i) const { return data_[i]; }
  constexpr int64_t back() const { return data_[size_ - 1]; }
  std::vector<int64_t> vec() const { return {begin(), end()}; }
  operator std::span<const int64_t>() const { return {data_, size_}; }
  bool operator==(const IntArrayRef& o) const {
    if (size_ != o.size_) return false;
    for (size_t i = 0; i < size_; ++i)
      if (data_[i] != o.data_[i]) return false;
    return true;
  }

 private:
  const int64_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace kiln
