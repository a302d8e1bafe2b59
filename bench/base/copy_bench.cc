// Host copies side by side: the C library's memmove against loom::CopyBytes, at page skews
// ((dst - src) mod 4 KiB) in and out of the band where `rep movsb` slows down on AMD Zen
// (base/copy.h). Run: build/bench/copy_bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "base/copy.h"

namespace {

struct Buffers {
  Buffers(size_t bytes, size_t skew) : storage(2 * bytes + 3 * 4096) {
    const uintptr_t p = reinterpret_cast<uintptr_t>(storage.data());
    src = storage.data() + ((4096 - p % 4096) % 4096);
    dst = src + (bytes + 4095) / 4096 * 4096 + 4096 + skew;
    std::memset(storage.data(), 1, storage.size());
  }
  std::vector<char> storage;
  char* src;
  char* dst;
};

void Args(benchmark::internal::Benchmark* b) {
  for (int64_t bytes : {4 << 10, 64 << 10, 256 << 10, 1 << 20})
    for (int64_t skew : {0, 16, 64}) b->Args({bytes, skew});
}

void Memmove(void* dst, const void* src, size_t bytes) { std::memmove(dst, src, bytes); }

template <void (*Copy)(void*, const void*, size_t)>
void BM_Copy(benchmark::State& state) {
  Buffers buf(state.range(0), state.range(1));
  for (auto _ : state) {
    Copy(buf.dst, buf.src, state.range(0));
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK_TEMPLATE(BM_Copy, Memmove)->Name("memmove")->Apply(Args)->ArgNames({"bytes", "skew"});
BENCHMARK_TEMPLATE(BM_Copy, loom::CopyBytes)
    ->Name("CopyBytes")
    ->Apply(Args)
    ->ArgNames({"bytes", "skew"});

}  // namespace

BENCHMARK_MAIN();
