// A 64-byte aligned, zero-initialised array for SIMD kernels.
// Thread-safety: as a std::vector.
#ifndef PDSERVE_ENGINE_CPU_ALIGNED_BUFFER_H_
#define PDSERVE_ENGINE_CPU_ALIGNED_BUFFER_H_

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

namespace pdserve::engine {

template <typename T>
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t n) { Resize(n); }
  AlignedBuffer(AlignedBuffer&&) noexcept = default;
  AlignedBuffer& operator=(AlignedBuffer&&) noexcept = default;

  // Discards the contents; the new array is zeroed.
  void Resize(size_t n) {
    if (n > (SIZE_MAX / sizeof(T)) / 2) throw std::bad_alloc();
    size_ = n;
    const size_t bytes = ((n * sizeof(T) + 63) / 64) * 64;
    void* p = bytes == 0 ? nullptr : std::aligned_alloc(64, bytes);
    if (bytes != 0 && p == nullptr) throw std::bad_alloc();
    if (p != nullptr) std::memset(p, 0, bytes);
    data_.reset(static_cast<T*>(p));
  }
  // Grows (discarding contents) only when needed.
  void EnsureSize(size_t n) {
    if (n > size_) Resize(n);
  }

  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  size_t size() const { return size_; }
  T& operator[](size_t i) { return data_.get()[i]; }
  const T& operator[](size_t i) const { return data_.get()[i]; }

 private:
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T, Free> data_;
  size_t size_ = 0;
};

}  // namespace pdserve::engine

#endif  // PDSERVE_ENGINE_CPU_ALIGNED_BUFFER_H_
