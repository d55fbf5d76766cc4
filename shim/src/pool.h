// The plugin's CPU threads: the machine's other cores, shared by its
// kernels (the matrix product, the elementwise kernels).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

#include "rlx-mlx-shim/src/simd.h"

namespace rlx {

// The machine's other cores, kept for the plugin's kernels: a run's
// products come in quick succession, so a worker spins a little before it
// sleeps (as MLX's own stream thread lingers), and a product of a
// microsecond or two does not pay a wake-up.
class Pool {
 public:
  static Pool& get() {
    static Pool* pool = new Pool();  // never destroyed: workers run to exit
    return *pool;
  }

  // Participants: the workers and the caller.
  size_t size() const { return workers_ + 1; }

  // f(0) .. f(n - 1), spread over the caller and the workers. A caller
  // that finds the pool busy (another stream's product) runs them alone.
  void run(size_t n, const std::function<void(size_t)>& f) {
    std::unique_lock<std::mutex> busy(run_, std::try_to_lock);
    if (!busy.owns_lock() || workers_ == 0 || n <= 1) {
      for (size_t i = 0; i < n; ++i) f(i);
      return;
    }
    job_ = &f;
    n_ = n;
    next_.store(0, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> g(m_);
      generation_.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();
    work();
    while (done_.load(std::memory_order_acquire) < n) {
      cpu_pause();
    }
    job_ = nullptr;
  }

 private:
  Pool() {
    unsigned hw = std::max(1u, std::thread::hardware_concurrency());
    workers_ = hw - 1;
    for (size_t i = 0; i < workers_; ++i) {
      std::thread([this] { loop(); }).detach();
    }
  }

  void work() {
    for (;;) {
      size_t i = next_.fetch_add(1, std::memory_order_relaxed);
      if (i >= n_) return;
      (*job_)(i);
      done_.fetch_add(1, std::memory_order_release);
    }
  }

  void loop() {
    uint64_t seen = 0;
    for (;;) {
      // Spin ~50 us for the next job, then sleep.
      auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
      while (generation_.load(std::memory_order_acquire) == seen &&
             std::chrono::steady_clock::now() < until) {
        cpu_pause();
      }
      if (generation_.load(std::memory_order_acquire) == seen) {
        std::unique_lock<std::mutex> g(m_);
        cv_.wait(g, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      }
      seen = generation_.load(std::memory_order_acquire);
      if (job_ != nullptr) work();
    }
  }

  size_t workers_ = 0;
  std::mutex run_;
  std::mutex m_;
  std::condition_variable cv_;
  std::atomic<uint64_t> generation_{0};
  const std::function<void(size_t)>* job_ = nullptr;
  size_t n_ = 0;
  std::atomic<size_t> next_{0};
  std::atomic<size_t> done_{0};
};

}  // namespace rlx
