// hash: num_hash hashes of every row of X (its last dim, as raw bytes), each XXH64 with the
// hash's index as the seed, modulo mod_by; as Fluid's hash op, so ids match Fluid's. No
// gradient.
#include <cstring>

#include "operators/common.h"

namespace loom::ops {
namespace {

// XXH64 (Yann Collet's xxHash, 64-bit variant), written from its specification.
constexpr uint64_t kP1 = 0x9E3779B185EBCA87ULL, kP2 = 0xC2B2AE3D27D4EB4FULL,
                   kP3 = 0x165667B19E3779F9ULL, kP4 = 0x85EBCA77C2B2AE63ULL,
                   kP5 = 0x27D4EB2F165667C5ULL;

uint64_t Rotl(uint64_t v, int r) { return (v << r) | (v >> (64 - r)); }
uint64_t Read64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;  // little-endian hosts only, as Fluid's
}
uint32_t Read32(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t Round(uint64_t acc, uint64_t input) { return Rotl(acc + input * kP2, 31) * kP1; }
uint64_t Merge(uint64_t acc, uint64_t v) { return (acc ^ Round(0, v)) * kP1 + kP4; }

uint64_t Xxh64(const void* data, size_t len, uint64_t seed) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  const unsigned char* end = p + len;
  uint64_t h;
  if (len >= 32) {
    uint64_t v1 = seed + kP1 + kP2, v2 = seed + kP2, v3 = seed, v4 = seed - kP1;
    for (; p + 32 <= end; p += 32) {
      v1 = Round(v1, Read64(p));
      v2 = Round(v2, Read64(p + 8));
      v3 = Round(v3, Read64(p + 16));
      v4 = Round(v4, Read64(p + 24));
    }
    h = Rotl(v1, 1) + Rotl(v2, 7) + Rotl(v3, 12) + Rotl(v4, 18);
    h = Merge(Merge(Merge(Merge(h, v1), v2), v3), v4);
  } else {
    h = seed + kP5;
  }
  h += len;
  for (; p + 8 <= end; p += 8) h = Rotl(h ^ Round(0, Read64(p)), 27) * kP1 + kP4;
  if (p + 4 <= end) {
    h = Rotl(h ^ (static_cast<uint64_t>(Read32(p)) * kP1), 23) * kP2 + kP3;
    p += 4;
  }
  for (; p < end; ++p) h = Rotl(h ^ (*p * kP5), 11) * kP1;
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

Status HashInferShape(InferShapeContext* ctx) {
  const DDim x = ctx->InputDim("X");
  if (x.size() != 2) return ctx->Error(ctx->DescribeInput("X"), " must be [rows, width]");
  const int num_hash = ctx->Attr<int>("num_hash"), mod_by = ctx->Attr<int>("mod_by");
  if (num_hash < 1) return ctx->Error("num_hash must be >= 1, got ", num_hash);
  if (mod_by < 1) return ctx->Error("mod_by (hash_size) must be >= 1, got ", mod_by);
  ctx->SetOutputDim("Out", DDim({x[0], num_hash, 1}));
  ctx->SetOutputDtype("Out", proto::INT64);
  return Status::OK();
}

template <typename T>
Status HashKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const int64_t rows = x.dims()[0], width = x.dims()[1];
  const int num_hash = ctx.Attr<int>("num_hash");
  const uint64_t mod_by = static_cast<uint64_t>(ctx.Attr<int>("mod_by"));
  Tensor* out = ctx.Output("Out");
  out->Resize(DDim({rows, num_hash, 1}));
  int64_t* o = out->mutable_data<int64_t>(ctx.place());
  for (int64_t r = 0; r < rows; ++r)
    for (int k = 0; k < num_hash; ++k)
      o[r * num_hash + k] = static_cast<int64_t>(
          Xxh64(x.data<T>() + r * width, sizeof(T) * width, static_cast<uint64_t>(k)) % mod_by);
  return Status::OK();
}

}  // namespace

LOOM_REGISTER_OP(hash)
    .Doc(
        "Out[r, k, 0] = XXH64(the bytes of row r of X, seed k) % mod_by for k < num_hash "
        "(Fluid's hash: same ids).")
    .Input("X", "int32 / int64 [rows, width]")
    .Output("Out", "int64 [rows, num_hash, 1]")
    .Attr<int>("num_hash", 1, "hashes per row")
    .Attr<int>("mod_by", 1, "the hash space (hash_size)")
    .InferShape(HashInferShape)
    .Kernel(Place::kCPU, proto::INT32, HashKernel<int32_t>)
    .Kernel(Place::kCPU, proto::INT64, HashKernel<int64_t>);

}  // namespace loom::ops
