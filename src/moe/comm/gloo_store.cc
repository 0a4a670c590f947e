#include "moe/comm/gloo_store.h"

#include <gloo/common/error.h>

#include <algorithm>
#include <exception>
#include <sstream>
#include <thread>

#include "moe/core/text_format.h"

namespace moe::gloo_detail {
namespace {

using Clock = std::chrono::steady_clock;

Clock::time_point after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

std::string join_keys(const std::vector<std::string>& keys) {
  std::string s;
  for (const std::string& k : keys) {
    if (!s.empty()) s += ", ";
    s += k;
  }
  return s;
}

std::vector<char> to_bytes(const std::string& s) { return std::vector<char>(s.begin(), s.end()); }

std::string format_list(const std::vector<int>& v) {
  std::string s;
  for (int x : v) {
    if (!s.empty()) s += ',';
    s += std::to_string(x);
  }
  return s;
}

// "0,2,3" -> {0, 2, 3}; nullopt-like empty result with ok=false for anything else.
bool parse_list(const std::vector<char>& bytes, std::vector<int>* out) {
  std::stringstream in(std::string(bytes.begin(), bytes.end()));
  std::string item;
  out->clear();
  while (std::getline(in, item, ',')) {
    if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos || item.size() > 9) return false;
    out->push_back(std::stoi(item));
  }
  return !out->empty() && std::is_sorted(out->begin(), out->end());
}

}  // namespace

DeadlineFileStore::DeadlineFileStore(const std::string& dir, Clock::time_point deadline)
    : files_(dir), deadline_(deadline) {}

void DeadlineFileStore::set(const std::string& key, const std::vector<char>& data) { files_.set(key, data); }

std::vector<char> DeadlineFileStore::get(const std::string& key) {
  wait_until({key}, deadline_);
  return files_.get(key);  // present: returns at once
}

void DeadlineFileStore::wait(const std::vector<std::string>& keys) { wait_until(keys, deadline_); }

void DeadlineFileStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  wait_until(keys, std::min(deadline_, Clock::now() + timeout));
}

bool DeadlineFileStore::has(const std::string& key) { return files_.has(key); }

void DeadlineFileStore::wait_until(const std::vector<std::string>& keys, Clock::time_point until) {
  while (true) {
    bool all = true;
    for (const std::string& k : keys) {
      if (!files_.has(k)) {
        all = false;
        break;
      }
    }
    if (all) return;
    if (Clock::now() >= until) {
      throw gloo::IoException("Wait timeout for key(s): " + join_keys(keys) + " (rendezvous store)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

StatusOr<std::vector<int>> agree_members(const std::string& store_dir, int generation, const std::vector<int>& members,
                                         int my_world_rank, bool coordinator, double join_seconds,
                                         double timeout_seconds) {
  const std::string gen = "gen" + std::to_string(generation);
  const std::string where = "gloo reform to generation " + std::to_string(generation) + " on world rank " +
                            std::to_string(my_world_rank) + ": ";
  const std::string list_key = gen + "/members";
  std::vector<int> agreed;
  try {
    DeadlineFileStore store(store_dir, after(join_seconds + timeout_seconds));
    store.set(gen + "/alive/" + std::to_string(my_world_rank), to_bytes(std::to_string(my_world_rank)));
    if (coordinator) {
      const Clock::time_point join_end = after(join_seconds);
      std::vector<bool> in(members.size(), false);
      while (true) {
        bool all = true;
        for (size_t i = 0; i < members.size(); ++i) {
          if (!in[i]) in[i] = members[i] == my_world_rank || store.has(gen + "/alive/" + std::to_string(members[i]));
          all = all && in[i];
        }
        if (all || Clock::now() >= join_end) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      for (size_t i = 0; i < members.size(); ++i) {
        if (in[i]) agreed.push_back(members[i]);
      }
      std::sort(agreed.begin(), agreed.end());
      store.set(list_key, to_bytes(format_list(agreed)));
    } else {
      try {
        store.wait({list_key});
      } catch (const gloo::IoException&) {
        return Status(StatusCode::kUnavailable,
                      where + "the coordinator (rank 0) wrote no member list within " +
                          format_g(join_seconds + timeout_seconds) + " s (join " + format_g(join_seconds) +
                          " s + timeout " + format_g(timeout_seconds) + " s); it is gone or stalled");
      }
      if (!parse_list(store.get(list_key), &agreed)) {
        return internal_error(where + "malformed member list under key " + list_key + " in " + store_dir);
      }
    }
  } catch (const std::exception& e) {
    return internal_error(where + "rendezvous store " + store_dir + ": " + e.what());
  }
  if (!std::binary_search(agreed.begin(), agreed.end(), my_world_rank)) {
    return Status(StatusCode::kUnavailable, where + "this rank is not among the survivors (" + format_list(agreed) +
                                                "): it checked in too late and must exit");
  }
  return agreed;
}

}  // namespace moe::gloo_detail
