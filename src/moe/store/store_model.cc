#include "moe/store/store_model.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <utility>

#include "moe/core/clock.h"
#include "moe/store/store_layout.h"
#include "moe/store/store_parallel.h"
#include "moe/store/store_reader.h"
#include "moe/tensor/dtype.h"

namespace moe {

StatusOr<std::unique_ptr<StoreModel>> StoreModel::open(const std::string& store, int64_t version) {
  if (version <= 0) {
    MOE_ASSIGN_OR_RETURN(version, current_version(store));
  }
  MOE_ASSIGN_OR_RETURN(Manifest manifest, read_manifest(store, version));
  std::unique_ptr<StoreModel> model(new StoreModel());
  model->store_ = store;
  model->manifest_ = std::move(manifest);
  return model;
}

Status StoreModel::restore(const ExpertFilter& want, const RestoreOptions& options, RestoreReport* report) {
  if (restored_) return failed_precondition(location() + ": restore() was already called");
  const double t0 = now_seconds();
  RestoreReport rep;
  std::vector<const ShardEntry*> chosen;
  uint64_t total_raw = 0;
  for (const ShardEntry& e : manifest_.shards) {
    if (e.kind == ShardKind::kExpert) {
      ++rep.expert_shards_total;
      if (want && !want(e.layer, e.expert)) continue;
      ++rep.expert_shards_read;
    }
    chosen.push_back(&e);
    total_raw += e.raw_bytes;
  }
  // Largest first, so the threads finish together.
  std::stable_sort(chosen.begin(), chosen.end(),
                   [](const ShardEntry* a, const ShardEntry* b) { return a->raw_bytes > b->raw_bytes; });
  std::vector<Buffer> buffers(chosen.size());
  std::vector<ShardReadResult> results(chosen.size());
  std::vector<Status> read_errors(chosen.size());  // tolerated expert shards with no good copy
  const Status st = run_parallel(
      chosen.size(), options.threads, "restore", total_raw, options.progress,
      [&](size_t i, std::atomic<uint64_t>& done) -> Status {
        const ShardEntry& e = *chosen[i];
        Buffer& b = buffers[i];
        b.data.reset(new uint8_t[std::max<uint64_t>(e.raw_bytes, 1)]);
        b.size = e.raw_bytes;
        auto read = read_shard_verified(store_, manifest_, e, std::span<uint8_t>(b.data.get(), b.size));
        done += e.raw_bytes;
        if (!read.ok() && options.tolerate_missing_experts && e.kind == ShardKind::kExpert) {
          read_errors[i] = read.status();  // a peer may have it
          b = Buffer{};
          return ok_status();
        }
        MOE_ASSIGN_OR_RETURN(results[i], std::move(read));
        return ok_status();
      });
  if (!st.ok()) return st;

  for (size_t i = 0; i < chosen.size(); ++i) {
    const ShardEntry& e = *chosen[i];
    if (!read_errors[i].ok()) {
      rep.missing.push_back(MissingExpert{e.layer, e.expert, read_errors[i].message()});
      continue;
    }
    rep.raw_bytes += e.raw_bytes;
    if (results[i].source == ShardSource::kStore) {
      rep.stored_bytes += e.stored_bytes;
    } else {
      ++rep.fallbacks;
    }
    register_shard(e, std::move(buffers[i]), store_shard_path(store_, e.hash));
  }
  std::sort(rep.missing.begin(), rep.missing.end(), [](const MissingExpert& a, const MissingExpert& b) {
    return std::pair(a.layer, a.expert) < std::pair(b.layer, b.expert);
  });
  rep.shards_read = static_cast<int>(chosen.size() - rep.missing.size());
  rep.seconds = now_seconds() - t0;
  restored_ = true;
  if (report != nullptr) *report = rep;
  return ok_status();
}

void StoreModel::register_shard(const ShardEntry& e, Buffer buffer, const std::string& file) {
  const uint8_t* base = buffer.data.get();
  for (const ShardTensor& t : e.tensors) {
    StoredTensor view;
    view.name = t.name;
    view.file = file;
    view.dtype_name = t.dtype;
    view.dtype = parse_dtype(t.dtype);
    view.shape = t.shape;
    view.data = base + t.offset;
    view.nbytes = t.nbytes;
    tensors_[t.name] = std::move(view);
  }
  shard_bytes_[e.id] = std::move(buffer);
}

Status StoreModel::adopt_expert_shard(int layer, int expert, std::vector<uint8_t> bytes, const std::string& origin) {
  const std::string what = "layer " + std::to_string(layer) + ", expert " + std::to_string(expert);
  if (!restored_) return failed_precondition(location() + ": adopt_expert_shard(" + what + ") before restore()");
  const ShardEntry* e = manifest_.find_expert(layer, expert);
  if (e == nullptr) return not_found(what + " is not in " + location());
  if (bytes.size() != e->raw_bytes) {
    return data_loss(what + ": the copy from " + origin + " has " + std::to_string(bytes.size()) +
                     " bytes, the manifest of " + location() + " says " + std::to_string(e->raw_bytes));
  }
  const Hash128 got = hash_bytes(bytes.data(), bytes.size());
  if (!(got == e->hash)) {
    return data_loss(what + ": the copy from " + origin + " has hash " + got.hex() + ", the manifest of " +
                     location() + " expects " + e->hash.hex());
  }
  Buffer b;
  b.data.reset(new uint8_t[std::max<size_t>(bytes.size(), 1)]);
  b.size = bytes.size();
  if (!bytes.empty()) std::memcpy(b.data.get(), bytes.data(), bytes.size());
  register_shard(*e, std::move(b), store_shard_path(store_, e->hash) + " (copy from " + origin + ")");
  return ok_status();
}

StatusOr<StoreModel::ExpertShard> StoreModel::read_expert(int layer, int expert) const {
  const ShardEntry* e = manifest_.find_expert(layer, expert);
  if (e == nullptr) {
    return not_found("layer " + std::to_string(layer) + ", expert " + std::to_string(expert) + " is not in " +
                     location());
  }
  ExpertShard out;
  out.bytes.resize(e->raw_bytes);
  MOE_RETURN_IF_ERROR(read_shard_verified(store_, manifest_, *e, out.bytes).status());
  out.tensors = e->tensors;
  return out;
}

std::string StoreModel::location() const {
  return "store " + store_ + " (version " + std::to_string(manifest_.version) + ")";
}

StatusOr<std::string> StoreModel::read_file(const std::string& name) const {
  const ShardEntry* e = manifest_.find_file(name);
  if (e == nullptr) return not_found("file '" + name + "' not found in " + location());
  auto it = shard_bytes_.find(e->id);
  if (it != shard_bytes_.end()) {
    return std::string(reinterpret_cast<const char*>(it->second.data.get()), it->second.size);
  }
  std::string text(e->raw_bytes, '\0');
  MOE_RETURN_IF_ERROR(
      read_shard_verified(store_, manifest_, *e, std::span<uint8_t>(reinterpret_cast<uint8_t*>(text.data()), text.size()))
          .status());
  return text;
}

bool StoreModel::contains(const std::string& name) const { return manifest_.find_tensor(name).first != nullptr; }

StatusOr<const StoredTensor*> StoreModel::get(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it != tensors_.end()) return &it->second;
  const ShardEntry* shard = manifest_.find_tensor(name).first;
  if (shard == nullptr) return not_found("tensor '" + name + "' not found in " + location());
  return failed_precondition("tensor '" + name + "' (" + shard->describe() + ") of " + location() +
                             " was not restored in this process");
}

std::vector<TensorInfo> StoreModel::tensor_infos() const {
  std::vector<TensorInfo> out;
  for (const ShardEntry& e : manifest_.shards) {
    for (const ShardTensor& t : e.tensors) out.push_back(TensorInfo{t.name, t.dtype, t.shape, t.nbytes});
  }
  std::sort(out.begin(), out.end(), [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
  return out;
}

size_t StoreModel::total_bytes() const {
  size_t n = 0;
  for (const ShardEntry& e : manifest_.shards) {
    for (const ShardTensor& t : e.tensors) n += t.nbytes;
  }
  return n;
}

std::optional<ExpertDigest> StoreModel::recorded_expert_digest(int layer, int expert) const {
  const ShardEntry* e = manifest_.find_expert(layer, expert);
  if (e == nullptr) return std::nullopt;
  return ExpertDigest{e->hash.high, e->hash.low};
}

}  // namespace moe
