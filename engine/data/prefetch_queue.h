#pragma once
// PrefetchQueue: a worker thread that makes items in order, a bounded number ahead of the consumer.
// Destroying the queue stops the worker and joins it, also while it waits for room or is making an item.
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

namespace tsr::data {

template <class T>
class PrefetchQueue {
 public:
  // `produce` makes the next item; it runs on the worker thread only, one call at a time.
  PrefetchQueue(size_t capacity, std::function<T()> produce)
      : m_capacity(capacity < 1 ? 1 : capacity), m_produce(std::move(produce)), m_thread([this] { run(); }) {}

  ~PrefetchQueue() {
    {
      std::lock_guard lock(m_mutex);
      m_stop = true;
    }
    m_notFull.notify_all();
    m_thread.join();
  }

  PrefetchQueue(const PrefetchQueue&) = delete;
  PrefetchQueue& operator=(const PrefetchQueue&) = delete;

  // The next item, waiting for the worker if it is not ready. An exception thrown by `produce` is rethrown here.
  T pop() {
    std::unique_lock lock(m_mutex);
    m_notEmpty.wait(lock, [&] { return !m_items.empty() || m_error; });
    if (m_items.empty()) std::rethrow_exception(m_error);
    T item = std::move(m_items.front());
    m_items.pop_front();
    lock.unlock();
    m_notFull.notify_one();
    return item;
  }

  size_t ready() const {
    std::lock_guard lock(m_mutex);
    return m_items.size();
  }

 private:
  void run() {
    while (true) {
      {
        std::unique_lock lock(m_mutex);
        m_notFull.wait(lock, [&] { return m_stop || m_items.size() < m_capacity; });
        if (m_stop) return;
      }
      try {
        T item = m_produce();  // outside the lock: the consumer keeps popping meanwhile
        std::lock_guard lock(m_mutex);
        m_items.push_back(std::move(item));
      } catch (...) {
        std::lock_guard lock(m_mutex);
        m_error = std::current_exception();
        m_notEmpty.notify_one();
        return;
      }
      m_notEmpty.notify_one();
    }
  }

  const size_t m_capacity;
  std::function<T()> m_produce;
  mutable std::mutex m_mutex;
  std::condition_variable m_notFull, m_notEmpty;
  std::deque<T> m_items;
  std::exception_ptr m_error;
  bool m_stop = false;
  std::thread m_thread;  // last: it starts once everything above is ready
};

}  // namespace tsr::data
