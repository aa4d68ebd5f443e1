#include "engine/cpu/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "engine/cpu/gemm.h"
#include "engine/cpu/thread_pool.h"
#include "engine/cuda/device.h"
#include "engine/half.h"
#include "engine/model_loader.h"
#include "gtest/gtest.h"
#include "tests/testing/test_models.h"

namespace pdserve::engine {
namespace {

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Every kernel test runs once per instruction set this CPU has (each path is its own code).
class IsaTest : public ::testing::TestWithParam<CpuIsa> {
 protected:
  CpuIsa isa() const { return GetParam(); }
};
using GemmTest = IsaTest;
using KernelsTest = IsaTest;

std::string IsaParamName(const ::testing::TestParamInfo<CpuIsa>& info) {
  return CpuIsaName(info.param);
}

TEST_P(GemmTest, MatchesADoublePrecisionReferenceForOddShapes) {
  ThreadPool pool(2);
  for (auto [m, n, k] :
       {std::tuple{1, 1, 1}, {3, 33, 17}, {13, 70, 300}, {25, 31, 257}, {64, 96, 64}}) {
    const auto x = Random(static_cast<size_t>(m) * k, 1), w = Random(static_cast<size_t>(n) * k, 2);
    const PackedMatrix packed = PackedMatrix::Pack(w.data(), n, k, k);
    std::vector<float> y(static_cast<size_t>(m) * n, -1.f);
    Gemm(isa(), x.data(), m, k, packed, y.data(), n, &pool);
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < n; ++j) {
        double ref = 0;
        for (int kk = 0; kk < k; ++kk) ref += double{x[i * k + kk]} * w[j * k + kk];
        EXPECT_NEAR(y[i * n + j], ref, 1e-4 * (1 + std::abs(ref))) << m << "x" << n << "x" << k;
      }
    }
  }
}

TEST_P(GemmTest, EveryRowIsIndependentOfTheBatchAndThreads) {
  // The property OpenBLAS lacks at these shapes: a row alone equals the same row in any batch.
  ThreadPool pool1(1), pool2(2);
  const int k = 768, n = 768;
  const auto w = Random(static_cast<size_t>(n) * k, 3);
  const PackedMatrix packed = PackedMatrix::Pack(w.data(), n, k, k);
  const auto x = Random(static_cast<size_t>(40) * k, 4);
  std::vector<std::vector<float>> alone(40, std::vector<float>(n));
  for (int r = 0; r < 40; ++r)
    Gemm(isa(), x.data() + r * k, 1, k, packed, alone[r].data(), n, &pool1);
  for (int m : {2, 3, 7, 12, 13, 25, 40}) {
    for (ThreadPool* pool : {&pool1, &pool2}) {
      std::vector<float> y(static_cast<size_t>(m) * n);
      Gemm(isa(), x.data(), m, k, packed, y.data(), n, pool);
      for (int r = 0; r < m; ++r) {
        ASSERT_EQ(0, std::memcmp(y.data() + r * n, alone[r].data(), n * sizeof(float)))
            << "row " << r << " of a batch of " << m << " with " << pool->size() << " threads";
      }
    }
  }
}

// The weights as a type stores them, back in float (round to nearest even).
std::vector<float> Rounded(const std::vector<float>& w, WeightType type) {
  std::vector<float> out(w.size());
  for (size_t i = 0; i < w.size(); ++i) {
    out[i] = type == WeightType::kBF16  ? Bf16ToFloat(FloatToBf16(w[i]))
             : type == WeightType::kF16 ? HalfToFloat(FloatToHalf(w[i]))
                                        : w[i];
  }
  return out;
}

TEST_P(GemmTest, HalfPrecisionWeightsGiveExactlyTheFloatResultOfTheirRoundedValues) {
  // Widened in registers and accumulated in float: the same chain of fmas as the float kernel
  // over the rounded weights, bit for bit, for every shape, batch position and thread count.
  ThreadPool pool1(1), pool2(2);
  for (WeightType type : {WeightType::kBF16, WeightType::kF16}) {
    for (auto [m, n, k] : {std::tuple{1, 1, 1},
                           {1, 70, 300},
                           {3, 33, 17},
                           {4, 64, 513},
                           {5, 96, 64},
                           {13, 70, 300},
                           {25, 31, 257}}) {
      const auto x = Random(static_cast<size_t>(m) * k, 11);
      const auto w = Random(static_cast<size_t>(n) * k, 12);
      const PackedMatrix half = PackedMatrix::Pack(w.data(), n, k, k, type);
      const PackedMatrix full = PackedMatrix::Pack(Rounded(w, type).data(), n, k, k);
      EXPECT_EQ(half.type(), type);
      EXPECT_EQ(half.bytes() * 2, full.bytes());
      for (int j = 0; j < n; j += 7) {
        for (int kk = 0; kk < k; kk += 5)
          ASSERT_EQ(half.At(j, kk), full.At(j, kk)) << WeightTypeName(type) << " W[" << j << "]";
      }
      for (ThreadPool* pool : {&pool1, &pool2}) {
        std::vector<float> y_half(static_cast<size_t>(m) * n), y_full(y_half.size());
        Gemm(isa(), x.data(), m, k, half, y_half.data(), n, pool);
        Gemm(isa(), x.data(), m, k, full, y_full.data(), n, pool);
        ASSERT_EQ(0, std::memcmp(y_half.data(), y_full.data(), y_half.size() * sizeof(float)))
            << WeightTypeName(type) << " " << m << "x" << n << "x" << k << ", " << pool->size()
            << " thread(s)";
      }
    }
  }
}

TEST_P(GemmTest, HalfPrecisionRowsAreIndependentOfTheBatch) {
  ThreadPool pool(2);
  const int k = 768, n = 200;
  const auto w = Random(static_cast<size_t>(n) * k, 13);
  const auto x = Random(static_cast<size_t>(30) * k, 14);
  for (WeightType type : {WeightType::kBF16, WeightType::kF16}) {
    const PackedMatrix packed = PackedMatrix::Pack(w.data(), n, k, k, type);
    std::vector<std::vector<float>> alone(30, std::vector<float>(n));
    for (int r = 0; r < 30; ++r)
      Gemm(isa(), x.data() + r * k, 1, k, packed, alone[r].data(), n, &pool);
    for (int m : {2, 5, 12, 13, 30}) {
      std::vector<float> y(static_cast<size_t>(m) * n);
      Gemm(isa(), x.data(), m, k, packed, y.data(), n, &pool);
      for (int r = 0; r < m; ++r) {
        ASSERT_EQ(0, std::memcmp(y.data() + r * n, alone[r].data(), n * sizeof(float)))
            << WeightTypeName(type) << " row " << r << " of " << m;
      }
    }
  }
}

TEST_P(KernelsTest, ExpIsAccurateAndSumsInAFixedOrder) {
  std::vector<float> x;
  for (float v = -80.f; v <= 80.f; v += 0.37f) x.push_back(v);
  x.push_back(-200.f);
  std::vector<float> e = x;
  kernels::ExpInPlaceSum(isa(), e.data(), static_cast<int>(e.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const double ref = std::exp(static_cast<double>(x[i]));
    EXPECT_NEAR(e[i], ref, 3e-7 * ref + 1e-38) << x[i];
  }
  std::vector<float> a(37, 0.5f), b = a;
  EXPECT_EQ(kernels::ExpInPlaceSum(isa(), a.data(), 37),
            kernels::ExpInPlaceSum(isa(), b.data(), 37));
}

// Softmax's scaling and shift: each element rounded once, as scalar code rounds it, and the
// maximum of the scaled values only (every length from 1 to 40, so each path's partial last
// vector is met; all values negative, so a padding lane counted as 0 would be the maximum).
TEST_P(KernelsTest, ScaleMaxAndShiftAreTheScalarResultsBitForBit) {
  for (int n = 1; n <= 40; ++n) {
    std::vector<float> x = Random(n, 100 + n);
    for (float& v : x) v = -1.0f - std::abs(v) * 30;
    std::vector<float> want = x;
    float want_max = -std::numeric_limits<float>::infinity();
    for (float& v : want) {
      v *= 0.125f;
      want_max = std::max(want_max, v);
    }
    EXPECT_EQ(kernels::ScaleInPlaceMax(isa(), x.data(), 0.125f, n), want_max) << n;
    EXPECT_EQ(x, want) << n;
    for (float& v : want) v -= want_max;
    kernels::AddInPlace(isa(), x.data(), -want_max, n);
    EXPECT_EQ(x, want) << n;
  }
}

TEST_P(KernelsTest, RmsNormRopeAndSiluMatchScalarMath) {
  const auto x = Random(70, 5), w = Random(70, 6);
  std::vector<float> y(70);
  kernels::RmsNorm(isa(), x.data(), w.data(), 1e-5f, 70, y.data());
  double ss = 0;
  for (float v : x) ss += double{v} * v;
  const double scale = 1 / std::sqrt(ss / 70 + 1e-5);
  for (int i = 0; i < 70; ++i) EXPECT_NEAR(y[i], x[i] * scale * w[i], 1e-5);

  std::vector<float> q = {1, 2, 3, 4};
  const float cos[2] = {0.5f, 1.0f}, sin[2] = {0.8660254f, 0.0f};
  kernels::ApplyRope(q.data(), 1, 4, cos, sin);
  EXPECT_NEAR(q[0], 1 * 0.5 - 3 * 0.8660254, 1e-6);
  EXPECT_NEAR(q[2], 3 * 0.5 + 1 * 0.8660254, 1e-6);
  EXPECT_NEAR(q[1], 2, 1e-6);

  const auto g = Random(33, 7), u = Random(33, 8);
  std::vector<float> out(33);
  kernels::SiluMul(isa(), g.data(), u.data(), 33, out.data());
  for (int i = 0; i < 33; ++i) EXPECT_NEAR(out[i], g[i] / (1 + std::exp(-g[i])) * u[i], 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Isa, GemmTest, ::testing::ValuesIn(SupportedCpuIsas()), IsaParamName);
INSTANTIATE_TEST_SUITE_P(Isa, KernelsTest, ::testing::ValuesIn(SupportedCpuIsas()), IsaParamName);

TEST(HalfTest, ScalarConversionMatchesHardwareRounding) {
  std::mt19937 rng(9);
  std::uniform_int_distribution<uint32_t> bits;
  std::vector<float> values = {0.f,      -0.f,     1.f,     65504.f,  65520.f,   1e-8f,
                               5.96e-8f, 2.98e-8f, 6.1e-5f, INFINITY, -INFINITY, 3.14159f};
  for (int i = 0; i < 20000; ++i) {
    uint32_t b = bits(rng);
    float f;
    std::memcpy(&f, &b, 4);
    if (std::isnan(f)) continue;
    values.push_back(f);
  }
  std::vector<uint16_t> bulk(values.size());
  FloatToHalf(values.data(), bulk.data(), values.size());  // F16C when present.
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(FloatToHalf(values[i]), bulk[i]) << values[i];
    const float back = HalfToFloat(bulk[i]);
    std::vector<float> one(1);
    HalfToFloat(&bulk[i], one.data(), 1);
    EXPECT_TRUE(back == one[0] || (std::isnan(back) && std::isnan(one[0])));
  }
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(NAN))));
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f)), 1.0f);
  EXPECT_EQ(FloatToBf16(1.00390625f), FloatToBf16(1.0f));  // Ties to even.
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(NAN))));
}

TEST(ThreadPoolTest, RunsEveryWorkerAndEveryIndexOnce) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(1000);
  pool.ParallelForDynamic(1000, [&](int, int i) { hits[i]++; });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  std::atomic<int> covered{0};
  pool.ParallelFor(17, [&](int b, int e) { covered += e - b; });
  EXPECT_EQ(covered.load(), 17);
  for (int i = 0; i < 200; ++i) pool.Run([](int, int) {});  // No lost wake-ups.
}

}  // namespace
}  // namespace pdserve::engine

namespace pdserve::engine {
namespace {

TEST(CudaBackendTest, SelectingCudaWithoutAGpuIsAClearError) {
  const cuda::DeviceInfo info = cuda::ProbeDevices();
  auto loaded = LoadModel(pdserve::testing::TestModelDir("micro"),
                          EngineOptions{.backend = "cuda", .num_threads = 1});
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("backend cuda"), absl::string_view::npos);
  if (info.count == 0) {
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_FALSE(info.reason.empty());
  }
  EXPECT_EQ(LoadModel("x", EngineOptions{.backend = "tpu"}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pdserve::engine
