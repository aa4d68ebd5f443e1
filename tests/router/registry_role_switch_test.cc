// Role changes in the worker registry: checked and refused with a reason, ordered, finished by
// the worker's registration in its new role, and a switching worker's last calls left to end.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "router/worker_registry.h"
#include "tests/router/registry_fixture.h"

namespace pdserve::router {
namespace {

using testing::CounterSum;
using testing::Listener;
using testing::Load;
using testing::Registration;
using testing::RegistryTest;

class RecordingControl final : public WorkerControl {
 public:
  void SwitchRole(WorkerRole role, const std::string&) override { orders.push_back(role); }
  std::vector<WorkerRole> orders;
};

// Registers role-switching decode workers under `ids`, each having reported once; their
// sessions, in order (fewer if one was refused, which the caller's size check reports).
std::vector<uint64_t> RegisterSwitchingDecodeWorkers(WorkerRegistry& registry,
                                                     const std::vector<std::string>& ids,
                                                     std::shared_ptr<WorkerControl> control) {
  std::vector<uint64_t> sessions;
  for (const std::string& id : ids) {
    WorkerInfo info = Registration(id, WorkerRole::kDecode);
    info.role_switching = true;
    auto session = registry.Register(info, control);
    if (!session.ok() || !registry.Report(*session, Load())) break;
    sessions.push_back(*session);
  }
  return sessions;
}

// A role change: refused (saying why) for an unknown worker, one that cannot switch, one
// that has the role, the last of its role taking work, and while another switch runs; once
// ordered, the worker is told, takes no new work, and its registration in the new role
// finishes the switch. A worker that takes work in its old role again has given it up.
TEST_F(RegistryTest, RoleSwitchesAreCheckedOrderedAndFinishedByTheNewRegistration) {
  auto control = std::make_shared<RecordingControl>();
  WorkerInfo a_info = Registration("a", WorkerRole::kDecode);
  a_info.role_switching = true;
  auto a = registry_.Register(a_info, control);
  auto fixed = registry_.Register(Registration("fixed", WorkerRole::kDecode), control);
  ASSERT_TRUE(a.ok() && fixed.ok());
  auto expect_refused = [&](const std::string& id, WorkerRole role, const std::string& why) {
    auto s = registry_.RequestSwitch(id, role, "test");
    EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition) << id;
    EXPECT_TRUE(absl::StrContains(s.status().message(), why)) << s.status();
  };
  expect_refused("nobody", WorkerRole::kPrefill, "no worker 'nobody'");
  expect_refused("fixed", WorkerRole::kPrefill, "--role_switching");
  expect_refused("a", WorkerRole::kDecode, "already");
  // Before `fixed` reports it does not count as taking work: `a` would be the last.
  EXPECT_TRUE(registry_.Report(*a, Load()));
  expect_refused("a", WorkerRole::kPrefill, "last decode worker");
  EXPECT_TRUE(registry_.Report(*fixed, Load()));
  auto ordered = registry_.RequestSwitch("a", WorkerRole::kPrefill, "test");
  ASSERT_TRUE(ordered.ok()) << ordered.status();
  EXPECT_EQ(control->orders, std::vector<WorkerRole>{WorkerRole::kPrefill});
  EXPECT_EQ(registry_.PendingSwitches().size(), 1u);
  expect_refused("a", WorkerRole::kPrefill, "in progress");
  // While `a` moves to prefill, a switch the other way would undo it.
  WorkerInfo q_info = Registration("q", WorkerRole::kPrefill);
  q_info.role_switching = true;
  auto q = registry_.Register(q_info, control);
  ASSERT_TRUE(q.ok());
  EXPECT_TRUE(registry_.Report(*q, Load()));
  expect_refused("q", WorkerRole::kDecode, "the other way is in progress");
  registry_.Unregister(*q, "test");
  registry_.WithLock([](std::vector<WorkerEntry*>& workers, const PrefixIndex&) {
    for (WorkerEntry* e : workers) EXPECT_EQ(e->accepting(), e->info.worker_id != "a");
  });
  // The worker drains, then registers in its new role (same process, same epoch).
  WorkerReport draining = Load();
  draining.load.draining = true;
  EXPECT_TRUE(registry_.Report(*a, draining));
  WorkerInfo as_prefill = Registration("a", WorkerRole::kPrefill);
  as_prefill.role_switching = true;
  auto a2 = registry_.Register(as_prefill, control);
  ASSERT_TRUE(a2.ok());
  EXPECT_TRUE(registry_.PendingSwitches().empty());
  EXPECT_EQ(CounterSum(prometheus_, "pdserve_router_role_switches_total", "completed"), 1);
  // Switching back is refused while `a` is the only prefill worker; with another one it is
  // ordered, and given up when `a` takes work again without registering anew.
  EXPECT_TRUE(registry_.Report(*a2, Load()));
  expect_refused("a", WorkerRole::kDecode, "last prefill worker");
  auto p = registry_.Register(Registration("p", WorkerRole::kPrefill));
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(registry_.Report(*p, Load()));
  ASSERT_TRUE(registry_.RequestSwitch("a", WorkerRole::kDecode, "test").ok());
  EXPECT_TRUE(registry_.Report(*a2, draining));
  EXPECT_TRUE(registry_.Report(*a2, Load()));  // Draining no more: the switch was given up.
  EXPECT_TRUE(registry_.PendingSwitches().empty());
  EXPECT_EQ(CounterSum(prometheus_, "pdserve_router_role_switches_total", "aborted"), 1);
  registry_.WithLock([](std::vector<WorkerEntry*>& workers, const PrefixIndex&) {
    for (WorkerEntry* e : workers) EXPECT_TRUE(e->accepting()) << e->info.worker_id;
  });
}

// A worker changing role closes its registration once its work is done, while its last
// messages may still be on their way through the router: those calls are not cut (they end by
// their own streams), whether the old stream closes before or after the new registration. A
// worker that is not switching and leaves still has its calls told.
TEST_F(RegistryTest, AWorkerChangingRoleLeavesItsLastCallsToFinish) {
  auto control = std::make_shared<RecordingControl>();
  const std::vector<uint64_t> sessions =
      RegisterSwitchingDecodeWorkers(registry_, {"a", "b", "c"}, control);
  ASSERT_EQ(sessions.size(), 3u);
  std::vector<std::shared_ptr<Listener>> listeners;
  for (uint64_t session : sessions) {
    listeners.push_back(std::make_shared<Listener>());
    ASSERT_NE(registry_.Acquire(session, listeners.back()), 0u);
  }
  ASSERT_TRUE(registry_.RequestSwitch("a", WorkerRole::kPrefill, "test").ok());
  ASSERT_TRUE(registry_.RequestSwitch("b", WorkerRole::kPrefill, "test").ok());
  WorkerInfo as_prefill = Registration("a", WorkerRole::kPrefill);
  as_prefill.role_switching = true;
  // `a`'s old stream closes first; `b` registers anew before its old stream closes.
  registry_.Unregister(sessions[0], "registry stream closed");
  ASSERT_TRUE(registry_.Register(as_prefill, control).ok());
  as_prefill.worker_id = "b";
  ASSERT_TRUE(registry_.Register(as_prefill, control).ok());
  registry_.Unregister(sessions[1], "registry stream closed");
  EXPECT_TRUE(listeners[0]->whys.empty()) << listeners[0]->reasons[0];
  EXPECT_TRUE(listeners[1]->whys.empty()) << listeners[1]->reasons[0];
  EXPECT_EQ(CounterSum(prometheus_, "pdserve_router_role_switches_total", "completed"), 2);
  registry_.Unregister(sessions[2], "registry stream closed");
  ASSERT_EQ(listeners[2]->whys.size(), 1u);
  EXPECT_EQ(listeners[2]->whys[0], Interruption::kWorkerLeft);
}

// A worker that goes silent while it changes role has died: its calls are interrupted, to be
// placed again, as any silent worker's are.
TEST_F(RegistryTest, ASwitchingWorkerThatGoesSilentHasItsCallsInterrupted) {
  auto control = std::make_shared<RecordingControl>();
  const std::vector<uint64_t> sessions =
      RegisterSwitchingDecodeWorkers(registry_, {"a", "b"}, control);
  ASSERT_EQ(sessions.size(), 2u);
  auto listener = std::make_shared<Listener>();
  ASSERT_NE(registry_.Acquire(sessions[0], listener), 0u);
  ASSERT_TRUE(registry_.RequestSwitch("a", WorkerRole::kPrefill, "test").ok());
  clock_.Advance(absl::Seconds(3));  // Past the 2 s report timeout.
  EXPECT_EQ(registry_.ExpireSilent(), 2);
  ASSERT_EQ(listener->whys.size(), 1u);
  EXPECT_EQ(listener->whys[0], Interruption::kWorkerLeft);
}

// Switches the same way run together (the planner may order several after a shift of the
// mix), as long as the role keeps a worker taking work.
TEST_F(RegistryTest, SwitchesTheSameWayRunTogether) {
  auto control = std::make_shared<RecordingControl>();
  const std::vector<uint64_t> sessions =
      RegisterSwitchingDecodeWorkers(registry_, {"a", "b", "c"}, control);
  ASSERT_EQ(sessions.size(), 3u);
  ASSERT_TRUE(registry_.RequestSwitch("a", WorkerRole::kPrefill, "test").ok());
  ASSERT_TRUE(registry_.RequestSwitch("b", WorkerRole::kPrefill, "test").ok());
  EXPECT_EQ(registry_.PendingSwitches().size(), 2u);
  auto last = registry_.RequestSwitch("c", WorkerRole::kPrefill, "test");
  EXPECT_TRUE(absl::StrContains(last.status().message(), "last decode worker")) << last.status();
  EXPECT_EQ(control->orders, (std::vector<WorkerRole>{WorkerRole::kPrefill, WorkerRole::kPrefill}));
}

// The router paused for 6 s (SIGSTOP, a VM stall): when its sweeper runs again, the reports

}  // namespace
}  // namespace pdserve::router
