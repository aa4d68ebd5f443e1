// The CUDA forward pass's kernels against the CPU engine's on the same random rows
// (engine/cuda/kernels.h vs engine/cpu/kernels.h): embedding gather from f32, f16 and bf16
// tables, RMSNorm (strided, in place), bias and residual add, SiLU-and-multiply, RoPE on a
// q/k row. Needs a GPU: without one every test is skipped, and CTest reports it skipped
// (label gpu), never passed.
#include <cuda_runtime.h>

#include <cmath>
#include <random>
#include <vector>

#include "engine/cpu/kernels.h"
#include "engine/cuda/device.h"
#include "engine/cuda/kernels.h"
#include "engine/half.h"
#include "gtest/gtest.h"

namespace pdserve::engine::cuda {
namespace {

// A device copy of a host vector, freed with it.
template <typename T>
class DeviceVector {
 public:
  explicit DeviceVector(const std::vector<T>& host) : size_(host.size()) {
    EXPECT_EQ(cudaMalloc(&data_, bytes()), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(data_, host.data(), bytes(), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceVector() { cudaFree(data_); }
  DeviceVector(const DeviceVector&) = delete;
  DeviceVector& operator=(const DeviceVector&) = delete;
  T* get() { return data_; }
  std::vector<T> ToHost() const {
    std::vector<T> host(size_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(host.data(), data_, bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }

 private:
  size_t bytes() const { return size_ * sizeof(T); }
  T* data_ = nullptr;
  size_t size_;
};

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0, 1);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, float rel) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], rel * (1 + std::abs(want[i]))) << "at " << i;
  }
}

class CudaKernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const DeviceInfo info = ProbeDevices();
    if (info.count == 0) GTEST_SKIP() << "no GPU: " << info.reason;
  }
};

TEST_F(CudaKernelsTest, EmbeddingGatherWidensEveryTableType) {
  const int vocab = 50, hidden = 96;
  const std::vector<float> table = Random(vocab * hidden, 1);
  const std::vector<int32_t> tokens = {3, 0, 49, 3, 17};
  DeviceVector<int32_t> d_tokens(tokens);
  std::vector<uint16_t> f16(table.size()), bf16(table.size());
  for (size_t i = 0; i < table.size(); ++i) {
    f16[i] = FloatToHalf(table[i]);
    bf16[i] = FloatToBf16(table[i]);
  }
  DeviceVector<float> d_f32(table);
  DeviceVector<uint16_t> d_f16(f16), d_bf16(bf16);
  for (auto [type, data, rel] :
       {std::tuple{DType::kF32, static_cast<const void*>(d_f32.get()), 0.f},
        std::tuple{DType::kF16, static_cast<const void*>(d_f16.get()), 1e-3f},
        std::tuple{DType::kBF16, static_cast<const void*>(d_bf16.get()), 1e-2f}}) {
    DeviceVector<float> out(std::vector<float>(tokens.size() * hidden));
    ASSERT_TRUE(
        EmbeddingGather(data, type, d_tokens.get(), tokens.size(), hidden, out.get(), 0).ok());
    std::vector<float> want;
    for (int32_t t : tokens)
      want.insert(want.end(), table.begin() + t * hidden, table.begin() + (t + 1) * hidden);
    ExpectNear(out.ToHost(), want, rel);
  }
}

TEST_F(CudaKernelsTest, RmsNormMatchesTheCpuOnStridedRowsAndInPlace) {
  const int rows = 7, dim = 4096 + 40, stride = dim + 8;
  const std::vector<float> x = Random(rows * stride, 2), w = Random(dim, 3);
  std::vector<float> want(rows * dim);
  for (int r = 0; r < rows; ++r)
    kernels::RmsNorm(BestCpuIsa(), &x[r * stride], w.data(), 1e-5f, dim, &want[r * dim]);
  DeviceVector<float> d_x(x), d_w(w), d_y(std::vector<float>(rows * dim));
  ASSERT_TRUE(RmsNorm(d_x.get(), stride, d_w.get(), 1e-5f, rows, dim, d_y.get(), dim, 0).ok());
  ExpectNear(d_y.ToHost(), want, 1e-5f);
  // In place, on the strided rows.
  ASSERT_TRUE(RmsNorm(d_x.get(), stride, d_w.get(), 1e-5f, rows, dim, d_x.get(), stride, 0).ok());
  const std::vector<float> in_place = d_x.ToHost();
  for (int r = 0; r < rows; ++r) {
    for (int i = 0; i < dim; ++i)
      ASSERT_NEAR(in_place[r * stride + i], want[r * dim + i],
                  1e-5f * (1 + std::abs(want[r * dim + i])));
    for (int i = dim; i < stride; ++i)
      ASSERT_EQ(in_place[r * stride + i], x[r * stride + i]);  // Padding untouched.
  }
}

TEST_F(CudaKernelsTest, BiasResidualAndSiluMulMatchTheCpu) {
  const int rows = 5, dim = 300, inter = 700;
  std::vector<float> y = Random(rows * dim, 4);
  const std::vector<float> b = Random(dim, 5), x = Random(rows * dim, 6);
  DeviceVector<float> d_y(y), d_b(b), d_x(x);
  ASSERT_TRUE(AddBias(d_y.get(), d_b.get(), rows, dim, dim, 0).ok());
  ASSERT_TRUE(AddInPlace(d_y.get(), d_x.get(), rows * dim, 0).ok());
  for (int r = 0; r < rows; ++r) {
    kernels::Add(&y[r * dim], b.data(), dim);
    kernels::Add(&y[r * dim], &x[r * dim], dim);
  }
  ExpectNear(d_y.ToHost(), y, 1e-6f);

  const std::vector<float> gate_up = Random(rows * 2 * inter, 7);
  std::vector<float> want(rows * inter);
  for (int r = 0; r < rows; ++r)
    kernels::SiluMul(BestCpuIsa(), &gate_up[r * 2 * inter], &gate_up[r * 2 * inter + inter], inter,
                     &want[r * inter]);
  DeviceVector<float> d_gu(gate_up), d_out(std::vector<float>(rows * inter));
  ASSERT_TRUE(SiluMul(d_gu.get(), rows, inter, d_out.get(), 0).ok());
  ExpectNear(d_out.ToHost(), want, 1e-5f);
}

TEST_F(CudaKernelsTest, RopeRotatesTheQAndKHeadsOfAFusedRow) {
  const int rows = 6, heads = 8, kv_heads = 2, head_dim = 128, half = head_dim / 2;
  const int q_dim = heads * head_dim, kv_dim = kv_heads * head_dim, stride = q_dim + 2 * kv_dim;
  std::vector<float> qkv = Random(rows * stride, 8);
  std::vector<float> cos(rows * half), sin(rows * half);
  for (int r = 0; r < rows; ++r) {
    for (int i = 0; i < half; ++i) {
      const double angle = (100 + r) * std::pow(500000.0, -2.0 * i / head_dim);
      cos[r * half + i] = static_cast<float>(std::cos(angle));
      sin[r * half + i] = static_cast<float>(std::sin(angle));
    }
  }
  DeviceVector<float> d_qkv(qkv), d_cos(cos), d_sin(sin);
  ASSERT_TRUE(
      Rope(d_qkv.get(), rows, stride, 0, heads, head_dim, d_cos.get(), d_sin.get(), 0).ok());
  ASSERT_TRUE(
      Rope(d_qkv.get(), rows, stride, q_dim, kv_heads, head_dim, d_cos.get(), d_sin.get(), 0).ok());
  for (int r = 0; r < rows; ++r) {
    kernels::ApplyRope(&qkv[r * stride], heads, head_dim, &cos[r * half], &sin[r * half]);
    kernels::ApplyRope(&qkv[r * stride + q_dim], kv_heads, head_dim, &cos[r * half],
                       &sin[r * half]);
  }
  ExpectNear(d_qkv.ToHost(), qkv, 1e-5f);  // V (after q and k) is untouched by both.
}

}  // namespace
}  // namespace pdserve::engine::cuda
