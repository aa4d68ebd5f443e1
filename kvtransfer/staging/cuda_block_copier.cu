#include <cuda_runtime.h>

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "kvtransfer/staging/cuda_block_copier.h"

namespace pdserve::kvtransfer {
namespace {

absl::Status CudaOk(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("staging ", what, ": ", cudaGetErrorString(err)));
}

class CudaBlockCopier final : public BlockCopier {
 public:
  ~CudaBlockCopier() override {
    if (stream_ != nullptr) {
      cudaStreamSynchronize(stream_);
      cudaStreamDestroy(stream_);
    }
    for (auto& [ticket, event] : events_) cudaEventDestroy(event);
    if (registered_) cudaHostUnregister(host_.base);
  }

  static absl::StatusOr<std::unique_ptr<BlockCopier>> Make(PoolView device, PoolView host,
                                                           int cuda_device) {
    std::unique_ptr<CudaBlockCopier> c(new CudaBlockCopier(device, host, cuda_device));
    RETURN_IF_ERROR(CudaOk(cudaSetDevice(cuda_device), "cudaSetDevice"));
    RETURN_IF_ERROR(
        CudaOk(cudaStreamCreateWithFlags(&c->stream_, cudaStreamNonBlocking), "cudaStreamCreate"));
    // The transport allocated the staging pool; page-locking it makes the copies DMA.
    RETURN_IF_ERROR(
        CudaOk(cudaHostRegister(host.base, host.layout.pool_bytes(), cudaHostRegisterDefault),
               "cudaHostRegister"));
    c->registered_ = true;
    return std::unique_ptr<BlockCopier>(std::move(c));
  }

  absl::StatusOr<uint64_t> DeviceToHost(int layer, absl::Span<const int32_t> device_blocks,
                                        absl::Span<const int32_t> host_blocks) override {
    ASSIGN_OR_RETURN(auto copies, PlanRegionCopies(device_.layout, host_.layout, layer, 1,
                                                   device_blocks, host_blocks));
    return Enqueue(copies, cudaMemcpyDeviceToHost);
  }

  absl::StatusOr<uint64_t> HostToDevice(absl::Span<const int32_t> host_blocks,
                                        absl::Span<const int32_t> device_blocks) override {
    ASSIGN_OR_RETURN(auto copies,
                     PlanRegionCopies(device_.layout, host_.layout, 0, device_.layout.num_layers,
                                      device_blocks, host_blocks));
    return Enqueue(copies, cudaMemcpyHostToDevice);
  }

  absl::Status Wait(uint64_t ticket, absl::Duration timeout) override {
    cudaEvent_t event = nullptr;
    {
      absl::MutexLock lock(&mu_);
      if (ticket <= waited_) return absl::OkStatus();
      auto it = events_.find(ticket);
      if (it == events_.end()) return absl::InvalidArgumentError("staging: unknown copy ticket");
      event = it->second;
    }
    // Polled, not cudaEventSynchronize: a wedged device must not hang the caller past its
    // deadline.
    const absl::Time deadline = absl::Now() + timeout;
    while (true) {
      const cudaError_t state = cudaEventQuery(event);
      if (state == cudaSuccess) break;
      if (state != cudaErrorNotReady) return CudaOk(state, "copy");
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError(absl::StrCat("staging copy ", ticket, " still running"));
      }
      absl::SleepFor(absl::Microseconds(20));
    }
    absl::MutexLock lock(&mu_);
    // Events complete in order on the one stream: every earlier ticket is done too.
    for (auto it = events_.begin(); it != events_.end() && it->first <= ticket;) {
      cudaEventDestroy(it->second);
      it = events_.erase(it);
    }
    waited_ = std::max(waited_, ticket);
    return absl::OkStatus();
  }

 private:
  CudaBlockCopier(PoolView device, PoolView host, int cuda_device)
      : device_(device), host_(host), cuda_device_(cuda_device) {}

  absl::StatusOr<uint64_t> Enqueue(const std::vector<RegionCopy>& copies, cudaMemcpyKind kind) {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(CudaOk(cudaSetDevice(cuda_device_), "cudaSetDevice"));
    auto* device = static_cast<uint8_t*>(device_.base);
    auto* host = static_cast<uint8_t*>(host_.base);
    for (const RegionCopy& c : copies) {
      void* dst = kind == cudaMemcpyDeviceToHost ? static_cast<void*>(host + c.host_offset)
                                                 : static_cast<void*>(device + c.device_offset);
      const void* src = kind == cudaMemcpyDeviceToHost
                            ? static_cast<const void*>(device + c.device_offset)
                            : static_cast<const void*>(host + c.host_offset);
      RETURN_IF_ERROR(CudaOk(cudaMemcpyAsync(dst, src, c.bytes, kind, stream_), "cudaMemcpyAsync"));
    }
    cudaEvent_t event = nullptr;
    RETURN_IF_ERROR(
        CudaOk(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate"));
    const absl::Status recorded = CudaOk(cudaEventRecord(event, stream_), "cudaEventRecord");
    if (!recorded.ok()) {
      cudaEventDestroy(event);
      return recorded;
    }
    const uint64_t ticket = next_ticket_++;
    events_[ticket] = event;
    return ticket;
  }

  const PoolView device_, host_;
  const int cuda_device_;
  cudaStream_t stream_ = nullptr;
  bool registered_ = false;
  absl::Mutex mu_;
  uint64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t waited_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uint64_t, cudaEvent_t> events_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<BlockCopier>> MakeCudaBlockCopier(PoolView device, PoolView host,
                                                                 int cuda_device) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return absl::FailedPreconditionError("staging: no usable GPU");
  }
  return CudaBlockCopier::Make(device, host, cuda_device);
}

}  // namespace pdserve::kvtransfer
