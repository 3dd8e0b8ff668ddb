#include "engine/pages.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <vector>

#include "engine/mutex.h"

namespace sundial::pages {
namespace {

std::atomic<bool> g_huge_pages{true};
std::atomic<uint64_t> g_mapped{0};

constexpr size_t kPageBytes = 4096;

size_t RoundToPages(size_t bytes) { return (bytes + kPageBytes - 1) & ~(kPageBytes - 1); }

bool Mapped(size_t bytes) { return bytes >= kPagesThreshold; }

// Blocks of a huge page or more are mapped 2 MiB-aligned and marked MADV_HUGEPAGE: an index
// array of 100 MB read at random costs a TLB miss per access on 4 KiB pages.
bool Huge(size_t bytes) {
  return bytes >= kHugePageBytes && g_huge_pages.load(std::memory_order_relaxed);
}

void* Map(size_t bytes) {
  g_mapped.fetch_add(RoundToPages(bytes), std::memory_order_relaxed);  // what Free returns
  if (!Huge(bytes)) {
    void* p = ::mmap(nullptr, RoundToPages(bytes), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) std::abort();
    return p;
  }
  // 2 MiB-aligned: map one huge page more than needed and cut the ends off.
  bytes = RoundToPages(bytes);
  const size_t span = bytes + kHugePageBytes;
  void* raw = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) std::abort();
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugePageBytes - 1) & ~(uintptr_t{kHugePageBytes} - 1);
  if (aligned > start) ::munmap(raw, aligned - start);
  const uintptr_t end = start + span;
  if (end > aligned + bytes)
    ::munmap(reinterpret_cast<void*>(aligned + bytes), end - aligned - bytes);
  void* p = reinterpret_cast<void*>(aligned);
  (void)::madvise(p, bytes, MADV_HUGEPAGE);
  return p;
}

Mutex g_pool_mu;
std::vector<void*>* const g_pool PT_GUARDED_BY(g_pool_mu) = new std::vector<void*>;  // never freed

void* TakeFromPool() {
  MutexLock lock(&g_pool_mu);
  if (g_pool->empty()) return nullptr;
  void* p = g_pool->back();
  g_pool->pop_back();
  return p;
}

}  // namespace

void FillPool(size_t blocks) {
  while (true) {
    {
      MutexLock lock(&g_pool_mu);
      if (g_pool->size() >= blocks) return;
    }
    auto* p = static_cast<char*>(Map(kHugePageBytes));
    for (size_t at = 0; at < kHugePageBytes; at += kPageBytes) p[at] = 0;  // fault it in
    MutexLock lock(&g_pool_mu);
    g_pool->push_back(p);
  }
}

void DrainPool() {
  std::vector<void*> blocks;
  {
    MutexLock lock(&g_pool_mu);
    blocks.swap(*g_pool);
  }
  for (void* p : blocks) Free(p, kHugePageBytes);
}

uint64_t MappedBytes() { return g_mapped.load(std::memory_order_relaxed); }

void SetHugePages(bool on) { g_huge_pages.store(on, std::memory_order_relaxed); }
bool HugePages() { return g_huge_pages.load(std::memory_order_relaxed); }

void* Allocate(size_t bytes) {
  if (bytes == kHugePageBytes) {
    if (void* p = TakeFromPool()) return p;
  }
  if (Mapped(bytes)) return Map(bytes);
  void* p = std::malloc(bytes == 0 ? 1 : bytes);
  if (p == nullptr) std::abort();
  return p;
}

void Free(void* block, size_t bytes) {
  if (block == nullptr) return;
  if (Mapped(bytes)) {
    ::munmap(block, RoundToPages(bytes));
    g_mapped.fetch_sub(RoundToPages(bytes), std::memory_order_relaxed);
  } else {
    std::free(block);
  }
}

void* Reallocate(void* block, size_t old_bytes, size_t new_bytes) {
  if (block == nullptr) return Allocate(new_bytes);
  if (!Mapped(old_bytes) && !Mapped(new_bytes)) {
    void* p = std::realloc(block, new_bytes == 0 ? 1 : new_bytes);
    if (p == nullptr) std::abort();
    return p;
  }
  if (Mapped(old_bytes) && Mapped(new_bytes)) {
    // mremap moves the pages, not the bytes. The new range may not be 2 MiB-aligned: its
    // aligned interior still gets huge pages.
    void* p = ::mremap(block, RoundToPages(old_bytes), RoundToPages(new_bytes), MREMAP_MAYMOVE);
    if (p == MAP_FAILED) std::abort();
    g_mapped.fetch_add(RoundToPages(new_bytes) - RoundToPages(old_bytes),
                       std::memory_order_relaxed);
    if (Huge(new_bytes)) (void)::madvise(p, RoundToPages(new_bytes), MADV_HUGEPAGE);
    return p;
  }
  void* p = Allocate(new_bytes);
  std::memcpy(p, block, std::min(old_bytes, new_bytes));
  Free(block, old_bytes);
  return p;
}

}  // namespace sundial::pages
