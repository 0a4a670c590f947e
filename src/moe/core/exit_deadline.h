// A deadline for a blocking call that has none of its own (MPI_Init_thread,
// MPI_Finalize, MPI_Abort): if the guarded scope has not ended in time, the process
// prints which call is stuck and ends with _exit(), so no process stays blocked forever.
//
//   {
//     ExitDeadline guard("MPI_Finalize", 10);  // armed
//     MPI_Finalize();
//   }                                           // disarmed
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace moe {

class ExitDeadline {
 public:
  // Arms a watchdog thread: unless this object is destroyed within `seconds` (> 0), it
  // writes "<what> did not return within <seconds> s; exiting" to stderr and calls
  // _exit(exit_code) (no destructors or atexit handlers run: the stuck call may hold
  // locks). Not copyable or movable; destroy it on the thread that created it.
  ExitDeadline(std::string what, double seconds, int exit_code = 1);
  ~ExitDeadline();  // disarms and joins the watchdog
  ExitDeadline(const ExitDeadline&) = delete;
  ExitDeadline& operator=(const ExitDeadline&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread watchdog_;
};

}  // namespace moe
