// Test doubles for the offload coordinator's tests (offload_coordinator_test.cc): a sink that
// records what a sequence streamed, an in-process prefill worker (the product's batcher over the
// loopback transport behind a fault injector), and a PrefillClient whose answers each test
// scripts per worker (serve, refuse, hang, ignore cancels, stop answering health checks).
// Thread-safety: the sink and the client may be called from any thread.
#ifndef PDSERVE_TESTS_DECODE_WORKER_OFFLOAD_TEST_DOUBLES_H_
#define PDSERVE_TESTS_DECODE_WORKER_OFFLOAD_TEST_DOUBLES_H_

#include <atomic>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "decode_worker/offload_coordinator.h"
#include "engine/model_loader.h"
#include "kvtransfer/loopback/loopback_transport.h"
#include "kvtransfer/staging/staging_transport.h"
#include "kvtransfer/testing/fault_injecting_transport.h"
#include "kvtransfer/testing/host_block_copier.h"
#include "prefill_worker/prefill_batcher.h"

namespace pdserve::decode::offload_testing {

using kvtransfer::FaultInjectingTransport;
using kvtransfer::FaultPlan;
using kvtransfer::LoopbackFabric;
using kvtransfer::LoopbackTransport;

constexpr int kBlockSize = 4;
constexpr uint64_t kEpoch = 7;
constexpr absl::Duration kRealWait = absl::Seconds(30);  // Bound on every wait (real time).

class RecordingSink : public StreamSink {
 public:
  void PushTokens(const std::vector<int32_t>& ids, const std::string&, int64_t) override {
    absl::MutexLock lock(&mu_);
    tokens_.insert(tokens_.end(), ids.begin(), ids.end());
  }
  void Finish(const Final& final) override {
    absl::MutexLock lock(&mu_);
    final_ = final;
    finished_ = true;
  }
  void HandBack(const std::string& why) override {
    absl::MutexLock lock(&mu_);
    handed_back_ = why;
    finished_ = true;
  }
  int pending_tokens() const override { return pending_.load(); }
  bool cancelled() const override { return cancelled_.load(); }

  void Cancel() { cancelled_.store(true); }
  // A client that stops reading (the scheduler pauses the sequence), or reads again.
  void SetUnread(int tokens) { pending_.store(tokens); }
  // Waits (real time) for the final message.
  bool WaitFinished() {
    absl::MutexLock lock(&mu_);
    auto done = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return finished_; };
    return mu_.AwaitWithTimeout(absl::Condition(&done), kRealWait);
  }
  std::vector<int32_t> tokens() const {
    absl::MutexLock lock(&mu_);
    return tokens_;
  }
  bool finished() const {
    absl::MutexLock lock(&mu_);
    return finished_;
  }
  Final final() const {
    absl::MutexLock lock(&mu_);
    return final_;
  }
  // HandBack's message; empty unless it was handed back.
  std::string handed_back() const {
    absl::MutexLock lock(&mu_);
    return handed_back_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<int32_t> tokens_ ABSL_GUARDED_BY(mu_);
  Final final_ ABSL_GUARDED_BY(mu_);
  std::string handed_back_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> cancelled_{false};
  std::atomic<int> pending_{0};
};

// A prefill worker inside the test process: its own model, pool and loopback transport (behind
// a fault injector), and the product's batcher.
struct InProcessPrefillWorker {
  engine::LoadedModel model;
  std::unique_ptr<LoopbackTransport> transport;
  std::unique_ptr<FaultInjectingTransport> faulty;
  std::unique_ptr<kvtransfer::LocalPool> transport_pool;
  std::unique_ptr<kvcache::KvPool> pool;
  std::unique_ptr<prometheus::Registry> registry;
  std::unique_ptr<prefill::PrefillMetrics> metrics;
  std::unique_ptr<prefill::PrefillBatcher> batcher;
  std::unique_ptr<kvtransfer::HostBlockCopier> copier;  // Staged: pool -> staging.
  std::shared_ptr<kvtransfer::StagingPool> staging;
  std::unique_ptr<kvtransfer::StagingTransport> staged;  // Over `faulty`.

  ~InProcessPrefillWorker() {
    if (batcher) batcher->Stop();
    batcher.reset();
    staged.reset();
    copier.reset();
    pool.reset();
    transport_pool.reset();
    faulty.reset();
    transport.reset();
  }
};

// How the scripted client treats calls to one prefill worker.
struct Script {
  enum class OnPrefill { kServe, kRefuse, kHang } prefill = OnPrefill::kServe;
  absl::Status refusal = absl::FailedPreconditionError("kv layout differs");
  enum class OnCancel { kAck, kUnavailable, kTimeout, kHold } cancel = OnCancel::kAck;
  bool alive = true;
  // Corrupts the target the worker writes to (a forged or stale transfer).
  bool stale_epoch = false;
};

class FakeCall : public PendingCall {
 public:
  explicit FakeCall(std::function<void()> on_cancel) : on_cancel_(std::move(on_cancel)) {}
  void Cancel() override {
    std::function<void()> fn;
    {
      absl::MutexLock lock(&mu_);
      fn.swap(on_cancel_);
    }
    if (fn) fn();
  }

 private:
  absl::Mutex mu_;
  std::function<void()> on_cancel_ ABSL_GUARDED_BY(mu_);
};

class ScriptedPrefillClient : public PrefillClient {
 public:
  explicit ScriptedPrefillClient(prefill::PrefillBatcher* batcher) : batcher_(batcher) {}

  void SetScript(const std::string& worker_id, Script script) {
    absl::MutexLock lock(&mu_);
    scripts_[worker_id] = std::move(script);
  }
  int prefill_calls() const {
    absl::MutexLock lock(&mu_);
    return prefill_calls_;
  }
  int cancel_calls() const {
    absl::MutexLock lock(&mu_);
    return cancel_calls_;
  }
  int alive_calls() const {
    absl::MutexLock lock(&mu_);
    return alive_calls_;
  }
  // Answers the CancelPrefill calls held so far with "writes stopped".
  void AckHeldCancels() {
    std::deque<CancelDone> held;
    {
      absl::MutexLock lock(&mu_);
      held.swap(held_cancels_);
    }
    for (auto& done : held) done(true);
  }

  std::shared_ptr<PendingCall> Prefill(const PrefillTarget& target, const PrefillJob& job,
                                       PrefillDone done) override {
    const Script script = ScriptFor(target.worker_id, /*count_prefill=*/true);
    auto shared_done = std::make_shared<std::once_flag>();
    auto finish = [shared_done, done](absl::StatusOr<PrefillResult> r) {
      std::call_once(*shared_done, [&] { done(std::move(r)); });
    };
    switch (script.prefill) {
      case Script::OnPrefill::kRefuse:
        finish(script.refusal);
        return std::make_shared<FakeCall>(nullptr);
      case Script::OnPrefill::kHang:
        return std::make_shared<FakeCall>(
            [finish] { finish(absl::CancelledError("call cancelled")); });
      case Script::OnPrefill::kServe:
        break;
    }
    auto p = std::make_unique<prefill::PrefillJob>();
    p->request_id = job.request_id;
    p->prompt = job.prompt;
    p->sampling = job.sampling;
    p->target = job.target;
    if (script.stale_epoch) p->target.pool.epoch = kEpoch + 1;
    p->first_position = job.first_position;
    p->arrival = absl::Now();
    p->deadline = job.deadline;
    p->due = job.ttft_due != absl::InfiniteFuture() ? job.ttft_due : job.deadline;
    p->done = [finish, worker = target.worker_id](const prefill::PrefillJobResult& r) {
      if (!r.status.ok()) {
        finish(r.status);
        return;
      }
      finish(
          PrefillResult{.first_token = r.first_token, .worker_id = worker, .measured = r.measured});
    };
    const uint64_t token = job.target.token;
    if (absl::Status s = batcher_->Submit(std::move(p)); !s.ok()) finish(s);
    return std::make_shared<FakeCall>([this, token] { batcher_->RequestCancel(token); });
  }

  std::shared_ptr<PendingCall> CancelPrefill(const PrefillTarget& target, uint64_t transfer_token,
                                             absl::Time, CancelDone done) override {
    const Script script = ScriptFor(target.worker_id, false);
    {
      absl::MutexLock lock(&mu_);
      ++cancel_calls_;
    }
    switch (script.cancel) {
      case Script::OnCancel::kAck:
        if (script.prefill == Script::OnPrefill::kServe) {
          batcher_->Cancel(transfer_token, [done](const std::string&) { done(true); });
        } else {
          done(true);
        }
        break;
      case Script::OnCancel::kUnavailable:
        done(absl::UnavailableError("connection refused"));
        break;
      case Script::OnCancel::kTimeout:
        done(absl::DeadlineExceededError("no answer"));
        break;
      case Script::OnCancel::kHold: {
        absl::MutexLock lock(&mu_);
        held_cancels_.push_back(std::move(done));
        break;
      }
    }
    return std::make_shared<FakeCall>(nullptr);
  }

  std::shared_ptr<PendingCall> CheckAlive(const PrefillTarget& target, absl::Time,
                                          AliveDone done) override {
    const Script script = ScriptFor(target.worker_id, false);
    {
      absl::MutexLock lock(&mu_);
      ++alive_calls_;
    }
    done(script.alive ? absl::OkStatus() : absl::DeadlineExceededError("health check timed out"));
    return std::make_shared<FakeCall>(nullptr);
  }

 private:
  Script ScriptFor(const std::string& worker_id, bool count_prefill) {
    absl::MutexLock lock(&mu_);
    if (count_prefill) ++prefill_calls_;
    auto it = scripts_.find(worker_id);
    return it == scripts_.end() ? Script{} : it->second;
  }

  prefill::PrefillBatcher* batcher_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Script> scripts_ ABSL_GUARDED_BY(mu_);
  std::deque<CancelDone> held_cancels_ ABSL_GUARDED_BY(mu_);
  int prefill_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int cancel_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int alive_calls_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace pdserve::decode::offload_testing

#endif  // PDSERVE_TESTS_DECODE_WORKER_OFFLOAD_TEST_DOUBLES_H_
