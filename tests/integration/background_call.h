// A Generate call running on its own thread, cancellable, joined however the test leaves its
// scope (the fault suite's streams that run while something happens to the cluster).
#ifndef PDSERVE_TESTS_INTEGRATION_BACKGROUND_CALL_H_
#define PDSERVE_TESTS_INTEGRATION_BACKGROUND_CALL_H_

#include <atomic>
#include <memory>
#include <thread>

#include "tools/client/generation_client.h"

namespace pdserve::testing {

class BackgroundCall {
 public:
  BackgroundCall(std::shared_ptr<grpc::Channel> channel, v1::GenerateRequest request,
                 absl::Duration timeout = absl::Seconds(60))
      : thread_([this, channel, request, timeout] {
          out_ = client::CallGenerate(
              channel, request, timeout,
              [this](const v1::GenerateResponse& m) {
                if (m.token_ids_size() > 0) ++tokens_;
              },
              &handle_);
        }) {}
  ~BackgroundCall() {
    handle_.Cancel();
    Join();
  }
  const client::GenerationOutcome& Join() {
    if (thread_.joinable()) thread_.join();
    return out_;
  }
  void Cancel() { handle_.Cancel(); }
  int tokens() const { return tokens_.load(); }

 private:
  client::CallHandle handle_;
  client::GenerationOutcome out_;
  std::atomic<int> tokens_{0};
  std::thread thread_;
};

}  // namespace pdserve::testing

#endif  // PDSERVE_TESTS_INTEGRATION_BACKGROUND_CALL_H_
