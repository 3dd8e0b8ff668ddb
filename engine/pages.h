// Pages: memory for the engine's large arrays and message chunks. Blocks of kPagesThreshold
// bytes or more come straight from the kernel (mmap) and go straight back (munmap), so that
// freeing them lowers the process's RSS at once: glibc's malloc raises its own mmap threshold
// after the first large free and then keeps freed blocks in its heap. Smaller blocks use malloc.
// Blocks that are a whole number of 2 MiB huge pages are mapped 2 MiB-aligned and marked
// MADV_HUGEPAGE (when Pages::set_huge_pages(true)), so that a loaded queue costs one page fault
// and one TLB entry per 2 MiB instead of per 4 KiB (docs/engine.md, "Memory").
//
// PodVector<T>: a growable array of trivially copyable T on such blocks. It grows by half its
// size, by an eighth above 1 MiB (mremap moves large blocks without copying), and gives memory
// back when it falls below a quarter of its capacity, so that a drained queue's indexes shrink
// with it.
//
// Thread safety: the functions are thread-safe; a PodVector is not.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

namespace sundial {

inline constexpr size_t kPagesThreshold = size_t{64} << 10;
inline constexpr size_t kHugePageBytes = size_t{2} << 20;

namespace pages {

// Whether blocks of whole huge pages are mapped with MADV_HUGEPAGE (default true).
void SetHugePages(bool on);
bool HugePages();

// A block of at least `bytes` bytes (never null: aborts when the kernel refuses, as operator
// new would throw). Contents are unspecified.
void* Allocate(size_t bytes);
void Free(void* block, size_t bytes);
// Moves a block to a new size, keeping min(old, new) bytes.
void* Reallocate(void* block, size_t old_bytes, size_t new_bytes);
// A pool of 2 MiB blocks already faulted in (zeroed by the kernel), for a bulk load: a helper
// thread (recovery's decode thread) calls FillPool between batches so that the thread building
// the engine takes blocks whose page faults were paid on the other core. Allocate of exactly
// kHugePageBytes takes from the pool first. DrainPool frees what is left.
void FillPool(size_t blocks);
void DrainPool();

// Bytes currently mapped by Allocate (the process's total, every engine; malloc'd blocks not
// included). For benchmarks and metrics.
uint64_t MappedBytes();

}  // namespace pages

template <typename T>
class PodVector {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  PodVector() = default;
  ~PodVector() { Release(); }
  PodVector(const PodVector&) = delete;
  PodVector& operator=(const PodVector&) = delete;
  PodVector(PodVector&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)),
        size_(std::exchange(o.size_, 0)),
        capacity_(std::exchange(o.capacity_, 0)) {}
  PodVector& operator=(PodVector&& o) noexcept {
    if (this != &o) {
      Release();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
      capacity_ = std::exchange(o.capacity_, 0);
    }
    return *this;
  }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  size_t capacity_bytes() const { return capacity_ * sizeof(T); }
  T* data() { return data_; }
  const T* data() const { return data_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T& back() { return data_[size_ - 1]; }
  const T& back() const { return data_[size_ - 1]; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }

  void push_back(const T& v) {
    if (size_ == capacity_) Grow(size_ + 1);
    data_[size_++] = v;
  }
  void pop_back() {
    --size_;
    if (capacity_ > kMinShrinkCapacity && size_ < capacity_ / 4) Resize(size_ * 2);
  }
  // Makes room for `n` elements without further growth.
  void reserve(size_t n) {
    if (n > capacity_) Resize(n);
  }
  // Size becomes `n`; new elements are unspecified.
  void resize_uninitialized(size_t n) {
    reserve(n);
    size_ = n;
  }
  void clear() {
    size_ = 0;
    Release();
  }

 private:
  static constexpr size_t kMinShrinkCapacity = 64;
  static constexpr size_t kSlowGrowthBytes = size_t{1} << 20;

  void Grow(size_t min) {
    // Small arrays grow by half; large ones (mremap: no copy) by an eighth, so that a deep
    // queue's index carries little slack.
    size_t next =
        capacity_ + (capacity_bytes() >= kSlowGrowthBytes ? capacity_ / 8 : capacity_ / 2);
    if (next < 16) next = 16;
    if (next < min) next = min;
    Resize(next);
  }
  void Resize(size_t capacity) {
    if (capacity < 16) capacity = 16;
    data_ = static_cast<T*>(pages::Reallocate(data_, capacity_ * sizeof(T), capacity * sizeof(T)));
    capacity_ = capacity;
  }
  void Release() {
    if (data_ != nullptr) pages::Free(data_, capacity_ * sizeof(T));
    data_ = nullptr;
    capacity_ = 0;
  }

  T* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

}  // namespace sundial
