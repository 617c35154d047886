// The request path's priority: real time only for bounded stretches of
// work (review C4), on a fake and on a real thread.
#include "engine/postcopy/thread_priority.h"

#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace ramferry::engine {
namespace {

TEST(RequestPathPriorityTest, LowersPastTheBudgetAndRisesWhenIdle) {
  std::vector<bool> applied;
  RequestPathPriority p([&](bool raised) { applied.push_back(raised); });
  EXPECT_EQ(applied, std::vector<bool>{true});
  p.Worked(RequestPathPriority::kBusyLimit);
  EXPECT_TRUE(p.raised()) << "the budget itself is allowed";
  p.Worked();
  EXPECT_FALSE(p.raised());
  p.Worked(100);  // already lowered: not applied again
  EXPECT_EQ(applied, (std::vector<bool>{true, false}));
  p.Idle();
  EXPECT_TRUE(p.raised());
  p.Idle();  // already raised
  EXPECT_EQ(applied, (std::vector<bool>{true, false, true}));
  // The count starts again after a wait: a new stretch gets the budget.
  p.Worked(RequestPathPriority::kBusyLimit);
  EXPECT_TRUE(p.raised());
  p.Worked(RequestPathPriority::kBusyLimit + 1);
  EXPECT_FALSE(p.raised());
}

// The real classes: a thread that asked for real time and worked past the
// budget is a normal thread again, at its own nice value.
TEST(RequestPathPriorityTest, ARealThreadGoesBackToTheNormalClass) {
  int policy_raised = -1, policy_lowered = -1, policy_again = -1;
  int nice_before = 0, nice_lowered = 0;
  std::thread t([&] {
    const id_t tid = static_cast<id_t>(gettid());
    setpriority(PRIO_PROCESS, tid, 3);
    nice_before = getpriority(PRIO_PROCESS, tid);
    RequestPathPriority p;
    policy_raised = sched_getscheduler(0);
    p.Worked(RequestPathPriority::kBusyLimit + 1);
    policy_lowered = sched_getscheduler(0);
    nice_lowered = getpriority(PRIO_PROCESS, tid);
    p.Idle();
    policy_again = sched_getscheduler(0);
  });
  t.join();
  if (policy_raised != SCHED_RR) {
    GTEST_SKIP() << "this process may not use SCHED_RR (no CAP_SYS_NICE or "
                    "RLIMIT_RTPRIO 0): the nice fallback only";
  }
  EXPECT_EQ(policy_lowered, SCHED_OTHER);
  EXPECT_EQ(nice_lowered, nice_before);
  EXPECT_EQ(policy_again, SCHED_RR);
}

}  // namespace
}  // namespace ramferry::engine
