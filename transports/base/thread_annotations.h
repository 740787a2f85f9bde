#pragma once
// Lock annotations that clang's -Wthread-safety checks (the `clang` preset turns them into errors), and the
// annotated mutex they need: libstdc++'s std::mutex carries no annotations, so guarded state uses
// chaosbed::Mutex and MutexLock. With other compilers the macros expand to nothing.
//
//   Mutex mu_;
//   int count_ CHAOSBED_GUARDED_BY(mu_);
//   void bumpLocked() CHAOSBED_REQUIRES(mu_);
//   { MutexLock lock(mu_); ++count_; }
//
// A condition variable waits on the Mutex itself: std::condition_variable_any::wait(mu_) with mu_ held.

#include <mutex>

#if defined(__clang__)
#define CHAOSBED_TSA(x) __attribute__((x))
#else
#define CHAOSBED_TSA(x)
#endif

#define CHAOSBED_CAPABILITY(name) CHAOSBED_TSA(capability(name))
#define CHAOSBED_SCOPED_CAPABILITY CHAOSBED_TSA(scoped_lockable)
#define CHAOSBED_GUARDED_BY(mu) CHAOSBED_TSA(guarded_by(mu))
#define CHAOSBED_PT_GUARDED_BY(mu) CHAOSBED_TSA(pt_guarded_by(mu))
#define CHAOSBED_REQUIRES(...) CHAOSBED_TSA(requires_capability(__VA_ARGS__))
#define CHAOSBED_EXCLUDES(...) CHAOSBED_TSA(locks_excluded(__VA_ARGS__))
#define CHAOSBED_ACQUIRE(...) CHAOSBED_TSA(acquire_capability(__VA_ARGS__))
#define CHAOSBED_RELEASE(...) CHAOSBED_TSA(release_capability(__VA_ARGS__))
#define CHAOSBED_TRY_ACQUIRE(...) CHAOSBED_TSA(try_acquire_capability(__VA_ARGS__))
#define CHAOSBED_ACQUIRED_AFTER(...) CHAOSBED_TSA(acquired_after(__VA_ARGS__))
// For code the analysis cannot follow (a callback that UCX runs under the caller's lock): say why beside it.
#define CHAOSBED_NO_THREAD_SAFETY_ANALYSIS CHAOSBED_TSA(no_thread_safety_analysis)

namespace chaosbed {

class CHAOSBED_CAPABILITY("mutex") Mutex {
 public:
  void lock() CHAOSBED_ACQUIRE() { mu_.lock(); }
  void unlock() CHAOSBED_RELEASE() { mu_.unlock(); }
  bool try_lock() CHAOSBED_TRY_ACQUIRE(true) { return mu_.try_lock(); }

 private:
  std::mutex mu_;
};

// Holds a Mutex for its scope; unlock()/lock() let a scope drop it for a while (say, around a call out).
class CHAOSBED_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) CHAOSBED_ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~MutexLock() CHAOSBED_RELEASE() {
    if (held_) mu_.unlock();
  }
  void unlock() CHAOSBED_RELEASE() {
    mu_.unlock();
    held_ = false;
  }
  void lock() CHAOSBED_ACQUIRE() {
    mu_.lock();
    held_ = true;
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mu_;
  bool held_ = true;
};

}  // namespace chaosbed
