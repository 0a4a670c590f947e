#include "moe/supervisor/request_journal.h"

#include <utility>

namespace moe::supervisor {

std::vector<uint64_t> RequestJournal::ids_where(const std::function<bool(const Entry&)>& keep) const {
  std::vector<std::pair<uint64_t, std::shared_ptr<Entry>>> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    all.assign(entries_.begin(), entries_.end());
  }
  std::vector<uint64_t> out;
  for (auto& [id, e] : all) {
    std::lock_guard<std::mutex> lock(e->mu);
    if (keep(*e)) out.push_back(id);
  }
  return out;
}

std::shared_ptr<RequestJournal::Entry> RequestJournal::find(uint64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  return it == entries_.end() ? nullptr : it->second;
}

uint64_t RequestJournal::add(SeqRequest request, SeqSink sink) {
  auto e = std::make_shared<Entry>();
  e->request = std::move(request);
  e->sink = std::move(sink);
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = next_id_++;
  entries_[id] = std::move(e);
  return id;
}

void RequestJournal::pass(Entry& e, SeqEvent&& event) {
  if (!e.opened) {
    e.held.push_back(std::move(event));
    return;
  }
  e.sink(std::move(event));
}

void RequestJournal::open(uint64_t id) {
  auto e = find(id);
  if (!e) return;
  std::lock_guard<std::mutex> lock(e->mu);
  e->opened = true;
  for (SeqEvent& ev : e->held) e->sink(std::move(ev));
  e->held.clear();
  if (e->finished) remove(id);  // finished before it was opened
}

void RequestJournal::remove(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.erase(id);
}

std::optional<RequestJournal::Attempt> RequestJournal::begin_attempt(uint64_t id) {
  auto e = find(id);
  if (!e) return std::nullopt;
  std::lock_guard<std::mutex> lock(e->mu);
  if (e->finished) return std::nullopt;
  Attempt a;
  a.replay = e->submissions++ > 0;
  a.number = ++e->attempt;
  e->attached = true;
  a.request = e->request;
  a.request.resume_token_ids = e->delivered;
  return a;
}

bool RequestJournal::detach(uint64_t id, int only_attempt) {
  auto e = find(id);
  if (!e) return false;
  std::lock_guard<std::mutex> lock(e->mu);
  if (e->finished || (only_attempt >= 0 && e->attempt != only_attempt)) return false;
  ++e->attempt;  // no attempt has this number yet: every earlier one is stale
  e->attached = false;
  return true;
}

std::vector<uint64_t> RequestJournal::unattached() const {
  return ids_where([](const Entry& e) { return !e.finished && !e.cancelled && !e.attached; });
}

bool RequestJournal::deliver(uint64_t id, int attempt, SeqEvent&& event) {
  auto e = find(id);
  if (!e) return false;
  {
    std::lock_guard<std::mutex> lock(e->mu);
    if (e->finished || e->attempt != attempt) return false;
    e->delivered.insert(e->delivered.end(), event.token_ids.begin(), event.token_ids.end());
    e->prompt_tokens = event.prompt_tokens;
    e->finished = event.finished;
    pass(*e, std::move(event));
    if (!e->finished || !e->opened) return true;  // open() removes it
  }
  remove(id);
  return true;
}

bool RequestJournal::finish(uint64_t id, const std::string& finish_reason, const std::string& error) {
  auto e = find(id);
  if (!e) return false;
  {
    std::lock_guard<std::mutex> lock(e->mu);
    if (e->finished) return false;
    e->finished = true;
    ++e->attempt;
    SeqEvent ev;
    ev.finished = true;
    ev.finish_reason = finish_reason;
    ev.error = error;
    ev.prompt_tokens = e->prompt_tokens;
    ev.completion_tokens = static_cast<int>(e->delivered.size());
    pass(*e, std::move(ev));
    if (!e->opened) return true;  // open() removes it
  }
  remove(id);
  return true;
}

bool RequestJournal::mark_cancelled(uint64_t id) {
  auto e = find(id);
  if (!e) return false;
  std::lock_guard<std::mutex> lock(e->mu);
  if (e->finished) return false;
  e->cancelled = true;
  return true;
}

bool RequestJournal::cancelled(uint64_t id) const {
  auto e = find(id);
  if (!e) return false;
  std::lock_guard<std::mutex> lock(e->mu);
  return e->cancelled;
}

bool RequestJournal::is_current(uint64_t id, int attempt) const {
  auto e = find(id);
  if (!e) return false;
  std::lock_guard<std::mutex> lock(e->mu);
  return !e->finished && e->attempt == attempt;
}

void RequestJournal::set_deadline(uint64_t id, Clock::time_point deadline) {
  auto e = find(id);
  if (!e) return;
  std::lock_guard<std::mutex> lock(e->mu);
  if (!e->deadline || deadline < *e->deadline) e->deadline = deadline;
}

void RequestJournal::clear_deadline(uint64_t id) {
  auto e = find(id);
  if (!e) return;
  std::lock_guard<std::mutex> lock(e->mu);
  e->deadline.reset();
}

std::vector<uint64_t> RequestJournal::overdue(Clock::time_point now) const {
  return ids_where([now](const Entry& e) { return !e.finished && e.deadline && *e.deadline <= now; });
}

std::vector<uint64_t> RequestJournal::unfinished() const {
  return ids_where([](const Entry& e) { return !e.finished; });
}

size_t RequestJournal::size() const { return unfinished().size(); }

std::vector<int> RequestJournal::delivered(uint64_t id) const {
  auto e = find(id);
  if (!e) return {};
  std::lock_guard<std::mutex> lock(e->mu);
  return e->delivered;
}

}  // namespace moe::supervisor
