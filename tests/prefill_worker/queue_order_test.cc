// The prefill queue's order (prefill_worker/queue_order.h): earliest due first, arrival
// order among equals, so that a queue of equal objectives stays FIFO.
#include "prefill_worker/queue_order.h"

#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace pdserve::prefill {
namespace {

struct Job {
  std::string id;
  absl::Time due;
};

std::vector<std::string> Ids(const std::deque<std::unique_ptr<Job>>& queue) {
  std::vector<std::string> ids;
  for (const auto& j : queue) ids.push_back(j->id);
  return ids;
}

TEST(QueueOrderTest, EarliestDueFirstArrivalOrderAmongEquals) {
  const absl::Time t0 = absl::FromUnixSeconds(100);
  std::deque<std::unique_ptr<Job>> queue;
  auto add = [&](const std::string& id, absl::Time due) {
    InsertByDue(queue, std::make_unique<Job>(Job{id, due}),
                [](const std::unique_ptr<Job>& j) { return j->due; });
  };
  add("batch-1", t0 + absl::Seconds(10));
  add("batch-2", t0 + absl::Seconds(10));
  add("interactive-1", t0 + absl::Seconds(1));  // Arrived later, due sooner: ahead.
  add("no-objective", absl::InfiniteFuture());
  add("batch-3", t0 + absl::Seconds(10));  // Behind the batch jobs before it.
  add("interactive-2", t0 + absl::Seconds(1));
  EXPECT_EQ(Ids(queue), (std::vector<std::string>{"interactive-1", "interactive-2", "batch-1",
                                                  "batch-2", "batch-3", "no-objective"}));
}

TEST(QueueOrderTest, EqualDuesAreFifo) {
  std::deque<int> queue;
  for (int i = 0; i < 5; ++i) InsertByDue(queue, i, [](int) { return 0; });
  EXPECT_EQ(queue, (std::deque<int>{0, 1, 2, 3, 4}));
}

}  // namespace
}  // namespace pdserve::prefill
