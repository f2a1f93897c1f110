// kiln's kernel threads (runtime/parallel.h): every part runs once, a caller never waits for a
// pool another caller holds, and jobs inside jobs run on their caller.
#include <gtest/gtest.h>
#include <kiln/runtime/parallel.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

namespace kp = kiln::parallel;

TEST(Parallel, EveryPartRunsOnce) {
  for (int parts : {1, 2, 3, 7, 64}) {
    std::vector<std::atomic<int>> seen(static_cast<size_t>(parts));
    for (int round = 0; round < 200; ++round) kp::run(parts, [&](int p) { seen[size_t(p)]++; });
    for (int p = 0; p < parts; ++p) EXPECT_EQ(seen[size_t(p)].load(), 200) << "part " << p << " of " << parts;
  }
}

TEST(Parallel, WorkersTakeParts) {
  if (kp::threads() < 2) GTEST_SKIP() << "one kernel thread";
  const uint64_t before = kp::parts_run_by_workers();
  // parts long enough that a worker, spinning or woken, joins in before the caller is done
  for (int round = 0; round < 50; ++round)
    kp::run(8, [](int) { std::this_thread::sleep_for(std::chrono::microseconds(200)); });
  EXPECT_GT(kp::parts_run_by_workers(), before);
}

TEST(Parallel, AJobInsideAJobRunsOnItsCaller) {
  std::atomic<int> inner{0};
  kp::run(4, [&](int) {
    EXPECT_TRUE(kp::in_job());
    const auto me = std::this_thread::get_id();
    kp::run(3, [&](int) {
      EXPECT_EQ(std::this_thread::get_id(), me);
      inner++;
    });
  });
  EXPECT_EQ(inner.load(), 12);
  EXPECT_FALSE(kp::in_job());
}

// A caller that finds the pool held by another caller's job runs its parts itself at once: it
// never waits for threads it cannot have (here the other job holds them until this one is done).
TEST(Parallel, ABusyPoolDoesNotMakeACallerWait) {
  if (kp::threads() < 2) GTEST_SKIP() << "one kernel thread";
  std::promise<void> second_done;
  std::shared_future<void> done = second_done.get_future().share();
  std::atomic<bool> holding{false};
  std::thread first([&] {
    kp::run(2, [&](int) {
      holding = true;
      // (wait for the second caller, but not forever if it is stuck behind this job)
      done.wait_for(std::chrono::seconds(20));
    });
  });
  while (!holding) std::this_thread::yield();
  std::atomic<int> parts{0};
  const auto t0 = std::chrono::steady_clock::now();
  kp::run(4, [&](int) { parts++; });
  const bool waited = std::chrono::steady_clock::now() - t0 > std::chrono::seconds(10);
  second_done.set_value();
  first.join();
  EXPECT_EQ(parts.load(), 4);
  EXPECT_FALSE(waited) << "the second caller waited for the first caller's job";
}
