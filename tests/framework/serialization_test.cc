// Tensor files, .npy, params, program files: round trips and every kind of corruption.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <random>

#include "framework/file_util.h"
#include "framework/serialization.h"

namespace loom {
namespace {

std::string TempDir() {
  char tmpl[] = "/tmp/loom_ser_XXXXXX";
  const char* d = mkdtemp(tmpl);
  return d ? d : "/tmp";
}

Tensor Iota(DataType dt, DDim dims) {
  Tensor t(dt, dims);
  t.mutable_data(Place::CPU(), dt);
  auto* bytes = static_cast<unsigned char*>(t.raw_data());
  for (size_t i = 0; i < t.nbytes(); ++i) bytes[i] = static_cast<unsigned char>(i * 7 + 1);
  if (dt == proto::BOOL)
    for (size_t i = 0; i < t.nbytes(); ++i) bytes[i] &= 1;
  return t;
}

bool SameBytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.dims() == b.dims() && a.nbytes() == b.nbytes() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

class TensorFormatTest : public ::testing::TestWithParam<DataType> {};

TEST_P(TensorFormatTest, RoundTrip) {
  for (DDim dims : {DDim{}, DDim{0}, DDim{1}, DDim{3, 5}, DDim{2, 1, 4}}) {
    Tensor t = Iota(GetParam(), dims);
    auto back = DeserializeTensor(SerializeTensor(t), "mem");
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_TRUE(SameBytes(t, back.value())) << dims.ToString();
  }
}

TEST_P(TensorFormatTest, NpyRoundTrip) {
  Tensor t = Iota(GetParam(), DDim{4, 3});
  auto back = ParseNpy(SerializeNpy(t), "mem.npy");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(SameBytes(t, back.value()));
  Tensor v = Iota(GetParam(), DDim{5});
  auto back1 = ParseNpy(SerializeNpy(v), "mem.npy");
  ASSERT_TRUE(back1.ok()) << back1.status().ToString();
  EXPECT_TRUE(SameBytes(v, back1.value()));
}

INSTANTIATE_TEST_SUITE_P(AllTypes, TensorFormatTest,
                         ::testing::Values(proto::FP32, proto::FP64, proto::FP16, proto::INT32,
                                           proto::INT64, proto::BOOL));

TEST(TensorFormatTest, DetectsEveryFlippedByte) {
  std::string good = SerializeTensor(Iota(proto::FP32, DDim{2, 3}));
  for (size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    auto r = DeserializeTensor(bad, "param.bin");
    ASSERT_FALSE(r.ok()) << "flipped byte " << i << " went unnoticed";
    EXPECT_NE(r.status().message().find("param.bin"), std::string::npos);
  }
}

TEST(TensorFormatTest, DetectsTruncationAndGarbage) {
  std::string good = SerializeTensor(Iota(proto::FP64, DDim{7}));
  for (size_t n = 0; n < good.size(); ++n) {
    auto r = DeserializeTensor(good.substr(0, n), "t");
    EXPECT_FALSE(r.ok()) << "truncated to " << n;
  }
  EXPECT_FALSE(DeserializeTensor(good + "x", "t").ok());
  auto checksum = DeserializeTensor(
      [&] {
        std::string s = good;
        s[s.size() - 20] ^= 1;
        return s;
      }(),
      "t");
  ASSERT_FALSE(checksum.ok());
  EXPECT_NE(checksum.status().message().find("checksum"), std::string::npos);
}

SelectedRows SampleRows() {
  SelectedRows s;
  s.rows = {4, 1, 4, 0};
  s.height = 6;
  s.value = Tensor(proto::FP64, DDim{4, 2});
  double* v = s.value.mutable_data<double>(Place::CPU());
  for (int i = 0; i < 8; ++i) v[i] = 0.5 * i + 1;
  return s;
}

TEST(SelectedRowsTest, MergeAndDense) {
  SelectedRows s = SampleRows(), merged;
  ASSERT_TRUE(MergeRows(s, &merged).ok());
  EXPECT_EQ(merged.rows, (std::vector<int64_t>{0, 1, 4}));
  EXPECT_EQ(merged.value.dims(), (DDim{3, 2}));
  const double* m = merged.value.data<double>();
  // id 4 = rows 0 and 2 of the value: (1, 1.5) + (3, 3.5).
  EXPECT_EQ(m[4], 4.0);
  EXPECT_EQ(m[5], 5.0);
  Tensor dense;
  ASSERT_TRUE(SelectedRowsToDense(s, &dense).ok());
  EXPECT_EQ(dense.dims(), (DDim{6, 2}));
  EXPECT_EQ(dense.data<double>()[8], 4.0);
  EXPECT_EQ(dense.data<double>()[4], 0.0);  // id 2: untouched
  s.rows[3] = 6;
  Status bad = MergeRows(s, &merged);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("outside [0, 6)"), std::string::npos) << bad.message();
}

TEST(SelectedRowsTest, FileRoundTripAndCorruption) {
  SelectedRows s = SampleRows();
  std::string path = TempDir() + "/rows.bin";
  ASSERT_TRUE(SaveSelectedRows(s, path).ok());
  auto back = LoadSelectedRows(path);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->rows, s.rows);
  EXPECT_EQ(back->height, s.height);
  EXPECT_EQ(TensorDigest(back->value), TensorDigest(s.value));
  std::string good = SerializeSelectedRows(s);
  for (size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    EXPECT_FALSE(DeserializeSelectedRows(bad, "rows.bin").ok()) << "flipped byte " << i;
  }
  for (size_t n = 0; n < good.size(); ++n)
    EXPECT_FALSE(DeserializeSelectedRows(good.substr(0, n), "rows.bin").ok()) << n;
  // An id outside the height is refused when saving, not written.
  SelectedRows out_of_range = s;
  out_of_range.rows[0] = 99;
  EXPECT_FALSE(SaveSelectedRows(out_of_range, path).ok());
  EXPECT_TRUE(LoadSelectedRows(path).ok());  // the earlier file is intact
  std::remove(path.c_str());
}

TEST(NpyTest, RejectsBadFiles) {
  EXPECT_FALSE(ParseNpy("hello", "a.npy").ok());
  std::string good = SerializeNpy(Iota(proto::FP32, DDim{2, 2}));
  EXPECT_FALSE(ParseNpy(good.substr(0, good.size() - 1), "a.npy").ok());
  std::string fortran = good;
  fortran.replace(fortran.find("False"), 5, "True ");
  auto r = ParseNpy(fortran, "a.npy");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("Fortran"), std::string::npos);
  std::string complex = good;
  complex.replace(complex.find("<f4"), 3, "<c8");
  EXPECT_FALSE(ParseNpy(complex, "a.npy").ok());
  EXPECT_FALSE(LoadNpy("/nonexistent/x.npy").ok());
  // A shape whose byte size overflows must not pass as "0 bytes of data".
  std::string huge = good;
  huge.replace(huge.find("(2, 2)"), 6, "(4611686018427387904, 4)");
  auto overflow = ParseNpy(huge, "huge.npy");
  ASSERT_FALSE(overflow.ok());
  EXPECT_NE(overflow.status().message().find("overflow"), std::string::npos);
}

TEST(FileTest, AtomicWriteReplacesWholeFileOrNothing) {
  std::string dir = TempDir();
  std::string path = JoinPath(dir, "f.bin");
  ASSERT_TRUE(WriteFileAtomic(path, "first").ok());
  ASSERT_TRUE(WriteFileAtomic(path, "second").ok());
  EXPECT_EQ(ReadFile(path).value(), "second");
  // Writing into a missing directory fails and leaves nothing behind.
  EXPECT_FALSE(WriteFileAtomic(JoinPath(dir, "no/such/dir/f"), "x").ok());
  EXPECT_EQ(ReadFile(path).value(), "second");
  EXPECT_FALSE(ReadFile(dir).ok());
}

TEST(ParamsTest, SaveAndLoadPersistables) {
  ProgramDesc p;
  BlockDesc* b = p.GlobalBlock();
  VarDesc w = b->Var("fc/w");
  w.SetDims({3, 2});
  w.SetPersistable(true);
  b->Var("tmp").SetDims({3});
  Scope scope;
  Tensor wt = Iota(proto::FP32, DDim{3, 2});
  *scope.Var("fc/w")->GetMutable<Tensor>() = wt;
  std::string dir = JoinPath(TempDir(), "params");
  ASSERT_TRUE(SaveParams(p, scope, dir).ok());
  EXPECT_TRUE(FileExists(JoinPath(dir, "fc%2Fw")));
  EXPECT_FALSE(FileExists(JoinPath(dir, "tmp")));
  Scope fresh;
  Status st = LoadParams(p, &fresh, dir);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(SameBytes(fresh.FindVar("fc/w")->Get<Tensor>(), wt));
  // A declared shape that disagrees with the file is an error naming the var.
  w.SetDims({2, 3});
  Status bad = LoadParams(p, &fresh, dir);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("fc/w"), std::string::npos);
}

TEST(ParamsTest, CombinedFileRoundTripsSortedByName) {
  ProgramDesc p;
  BlockDesc* b = p.GlobalBlock();
  for (const char* name : {"z_b", "a/w", "m"}) {
    VarDesc v = b->Var(name);
    v.SetDims({2, 3});
    v.SetPersistable(true);
  }
  b->Var("tmp").SetDims({3});
  Scope scope;
  Tensor aw = Iota(proto::FP32, DDim{2, 3}), m = Iota(proto::FP32, DDim{2, 3});
  m.data<float>()[0] = 42.f;
  *scope.Var("a/w")->GetMutable<Tensor>() = aw;
  *scope.Var("m")->GetMutable<Tensor>() = m;
  *scope.Var("z_b")->GetMutable<Tensor>() = Iota(proto::FP32, DDim{2, 3});
  const std::string path = JoinPath(TempDir(), "__params__");
  ASSERT_TRUE(SaveParamsCombined(p, scope, path).ok());
  auto entries = ReadParamsCombined(path);
  ASSERT_TRUE(entries.ok()) << entries.status().ToString();
  ASSERT_EQ(entries.value().size(), 3u);  // tmp is not persistable
  EXPECT_EQ(entries.value()[0].first, "a/w");
  EXPECT_EQ(entries.value()[1].first, "m");
  EXPECT_EQ(entries.value()[2].first, "z_b");
  Scope fresh;
  Status st = LoadParamsCombined(p, &fresh, path);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(SameBytes(fresh.FindVar("m")->Get<Tensor>(), m));
  EXPECT_TRUE(SameBytes(fresh.FindVar("a/w")->Get<Tensor>(), aw));

  // Every flipped byte and every truncation is an error naming the file; nothing is loaded.
  const std::string good = ReadFile(path).value();
  const std::string bad_path = JoinPath(TempDir(), "bad_params");
  for (size_t i = 0; i < good.size(); i += 7) {
    std::string bad = good;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    ASSERT_TRUE(WriteFileAtomic(bad_path, bad).ok());
    Scope untouched;
    Status r = LoadParamsCombined(p, &untouched, bad_path);
    ASSERT_FALSE(r.ok()) << "flipped byte " << i << " went unnoticed";
    EXPECT_NE(r.message().find(bad_path), std::string::npos) << r.ToString();
    EXPECT_EQ(untouched.FindVar("a/w"), nullptr);
  }
  ASSERT_TRUE(WriteFileAtomic(bad_path, good.substr(0, good.size() / 2)).ok());
  EXPECT_NE(LoadParamsCombined(p, &fresh, bad_path).message().find(bad_path), std::string::npos);
  Status missing = LoadParamsCombined(p, &fresh, path + ".missing");
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_NE(missing.message().find(path + ".missing"), std::string::npos);
  // A variable the program needs and the file lacks is named.
  b->Var("extra").SetPersistable(true);
  Status lacks = LoadParamsCombined(p, &fresh, path);
  ASSERT_FALSE(lacks.ok());
  EXPECT_NE(lacks.message().find("'extra'"), std::string::npos) << lacks.ToString();
}

TEST(FileTest, OnlyRegularFilesAreReplaced) {
  // A device is written into, never replaced by a regular file (as root, renaming over
  // /dev/null would replace it).
  ASSERT_TRUE(WriteFileAtomic("/dev/null", "into the void").ok());
  struct stat st;
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  std::string dir = TempDir();
  Status into_dir = WriteFileAtomic(dir, "x");
  EXPECT_EQ(into_dir.code(), StatusCode::kIOError);
  EXPECT_NE(into_dir.message().find("is a directory"), std::string::npos);
  EXPECT_TRUE(IsDirectory(dir));
  for (const Status& st : {WriteFileAtomic("", "x"), MakeDirs(""), ReadFile("").status()})
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
}

// Two variables saved, then the ways a checkpoint directory goes wrong: each load fails as a
// whole and leaves the scope as it was.
TEST(ParamsTest, CheckpointsAreOneUnit) {
  ProgramDesc p;
  BlockDesc* b = p.GlobalBlock();
  for (const char* name : {"a", "b"}) {
    VarDesc v = b->Var(name);
    v.SetDims({4});
    v.SetPersistable(true);
  }
  Scope first, second;
  *first.Var("a")->GetMutable<Tensor>() = Iota(proto::FP32, DDim{4});
  *first.Var("b")->GetMutable<Tensor>() = Iota(proto::FP32, DDim{4});
  *second.Var("a")->GetMutable<Tensor>() = Iota(proto::FP32, DDim{4});
  *second.Var("b")->GetMutable<Tensor>() = Iota(proto::FP32, DDim{4});
  second.Var("a")->GetMutable<Tensor>()->mutable_data<float>(Place::CPU())[0] = 100;
  std::string one = JoinPath(TempDir(), "ckpt_one"), two = JoinPath(TempDir(), "ckpt_two");
  ASSERT_TRUE(SaveParams(p, first, one).ok());
  ASSERT_TRUE(SaveParams(p, second, two).ok());
  EXPECT_TRUE(FileExists(JoinPath(one, "CHECKPOINT")));

  Scope target;
  *target.Var("a")->GetMutable<Tensor>() = Iota(proto::FP32, DDim{4});
  target.Var("a")->GetMutable<Tensor>()->mutable_data<float>(Place::CPU())[0] = -7;
  auto unchanged = [&] {
    EXPECT_EQ(target.FindVar("a")->Get<Tensor>().data<float>()[0], -7);
    EXPECT_EQ(target.FindVar("b"), nullptr);
  };
  // A file of the other save mixed in (an interrupted save over an older one).
  ASSERT_TRUE(WriteFileAtomic(JoinPath(one, "a"), ReadFile(JoinPath(two, "a")).value()).ok());
  Status mixed = LoadParams(p, &target, one);
  EXPECT_EQ(mixed.code(), StatusCode::kCorruption) << mixed.ToString();
  EXPECT_NE(mixed.message().find("mixes files of two saves"), std::string::npos);
  unchanged();
  // No CHECKPOINT: not written by SaveParams, or interrupted.
  ASSERT_EQ(::unlink(JoinPath(two, "CHECKPOINT").c_str()), 0);
  Status interrupted = LoadParams(p, &target, two);
  EXPECT_EQ(interrupted.code(), StatusCode::kFailedPrecondition) << interrupted.ToString();
  unchanged();
  // A variable the checkpoint lacks: nothing is loaded, not even the ones it has.
  ASSERT_TRUE(SaveParams(p, first, one).ok());
  VarDesc c = b->Var("c");
  c.SetDims({4});
  c.SetPersistable(true);
  Status missing = LoadParams(p, &target, one);
  EXPECT_EQ(missing.code(), StatusCode::kNotFound) << missing.ToString();
  unchanged();
  // Saving what has no value fails before the directory is touched.
  std::string never = JoinPath(TempDir(), "ckpt_never");
  EXPECT_FALSE(SaveParams(p, first, never).ok());
  EXPECT_FALSE(FileExists(never));
  EXPECT_EQ(SaveParams(p, first, "").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(LoadParams(p, &target, "").code(), StatusCode::kInvalidArgument);
}

TEST(ProgramFileTest, GarbageIsRejectedWithTheFileName) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::string bytes(rng() % 64, '\0');
    for (auto& c : bytes) c = static_cast<char>(rng());
    auto parsed = ParseProgram(bytes, "junk.pb");
    if (!parsed.ok()) {
      EXPECT_NE(parsed.status().message().find("junk.pb"), std::string::npos);
    }
  }
  std::string dir = TempDir();
  std::string path = JoinPath(dir, "junk.pb");
  ASSERT_TRUE(WriteFileAtomic(path, std::string("\x0a\xff\xff\xff", 4)).ok());
  auto r = LoadProgram(path);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("junk.pb"), std::string::npos);
  ASSERT_TRUE(WriteFileAtomic(path, "").ok());
  EXPECT_FALSE(LoadProgram(path).ok());  // parses, but has no blocks
}

}  // namespace
}  // namespace loom
