// A BlockCopier between two host-memory pools, for tests of the staging logic on machines
// without a GPU: the "device" pool is ordinary memory, copies run in order on a worker thread
// (asynchronous, like a CUDA stream), optionally slowed down or failed.
// Thread-safety: every method may be called from any thread.
#ifndef PDSERVE_KVTRANSFER_TESTING_HOST_BLOCK_COPIER_H_
#define PDSERVE_KVTRANSFER_TESTING_HOST_BLOCK_COPIER_H_

#include <deque>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "kvtransfer/staging/block_copier.h"

namespace pdserve::kvtransfer {

class HostBlockCopier final : public BlockCopier {
 public:
  HostBlockCopier(PoolView device, PoolView host);
  ~HostBlockCopier() override;

  absl::StatusOr<uint64_t> DeviceToHost(int layer, absl::Span<const int32_t> device_blocks,
                                        absl::Span<const int32_t> host_blocks) override;
  absl::StatusOr<uint64_t> HostToDevice(absl::Span<const int32_t> host_blocks,
                                        absl::Span<const int32_t> device_blocks) override;
  absl::Status Wait(uint64_t ticket, absl::Duration timeout) override;

  // Each copy takes at least this long (the device->host bandwidth of a slow link).
  void set_delay(absl::Duration delay);
  // The next enqueued copy fails with `status` when it runs.
  void FailNextCopy(absl::Status status);
  // Tickets completed so far.
  uint64_t completed() const;
  // While held, enqueued copies wait (a device busy elsewhere) until Resume().
  void Hold();
  void Resume();
  // Copies enqueued and not yet started.
  int queued() const;

 private:
  struct Job {
    uint64_t ticket;
    bool to_host;
    std::vector<RegionCopy> copies;
    absl::Status fail;
  };
  absl::StatusOr<uint64_t> Enqueue(bool to_host, std::vector<RegionCopy> copies);
  void Run();

  const PoolView device_, host_;
  mutable absl::Mutex mu_;
  std::deque<Job> jobs_ ABSL_GUARDED_BY(mu_);
  uint64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t completed_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);
  uint64_t first_error_ticket_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Duration delay_ ABSL_GUARDED_BY(mu_);
  absl::Status fail_next_ ABSL_GUARDED_BY(mu_);
  bool held_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread worker_;
};

}  // namespace pdserve::kvtransfer

#endif  // PDSERVE_KVTRANSFER_TESTING_HOST_BLOCK_COPIER_H_
