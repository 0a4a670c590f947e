// The supervisor's internal channel to its worker group: JSON forms of the
// GenerationService types (include/moe/generation_service.h), and the rendezvous files
// through which a freshly started group tells the supervisor where it listens.
//
// The channel is HTTP on 127.0.0.1 (worker_endpoint.h serves it, supervised_service.h
// calls it):
//   POST /submit       body: a SeqRequest; answer 200, chunked newline-delimited JSON:
//                      first a submit reply line ({"accepted":ID} or {"rejected":{code,
//                      message}}), then, if accepted, one SeqEvent per line up to the
//                      final one (finished = true). A stream that ends without a final
//                      event means the worker died.
//   POST /cancel       {"id":ID}
//   POST /reset_prefix_cache  {} -> {} (GenerationService::reset_prefix_cache), or
//                      {"error":{code,message}}
//   GET  /info         ModelInfo
//   GET  /snapshot     ServiceSnapshot
//   GET  /health       ServiceHealth (always 200; the state is in the body)
//   POST /count_tokens {"text":...} -> {"count":N}
//   POST /tokenize     {"text":...,"add_special_tokens":B} -> an ids reply
//   POST /detokenize   {"ids":[...]} -> a text reply
//   GET  /vocab_bytes  every token's bytes (GenerationService::token_bytes of ids
//                      0..vocab_size-1), hex-encoded: {"tokens":["48656c6c6f",...]}
// Replies of /tokenize and /detokenize are {"ok":VALUE} or {"error":{code,message}} (the
// service's Status, e.g. InvalidArgument for an id out of range).
//
// Decoders return InvalidArgument naming the field when the JSON is malformed or a
// field has the wrong type. Text is UTF-8; invalid bytes are replaced by U+FFFD (as the
// OpenAI front end does). Thread-safe (pure functions).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moe/generation_service.h"
#include "moe/status.h"

namespace moe::supervisor {

std::string encode_request(const SeqRequest& request);
StatusOr<SeqRequest> decode_request(const std::string& json);

std::string encode_event(const SeqEvent& event);
StatusOr<SeqEvent> decode_event(const std::string& json);

std::string encode_model_info(const ModelInfo& info);
StatusOr<ModelInfo> decode_model_info(const std::string& json);

std::string encode_snapshot(const ServiceSnapshot& snapshot);
StatusOr<ServiceSnapshot> decode_snapshot(const std::string& json);

std::string encode_health(const ServiceHealth& health);
StatusOr<ServiceHealth> decode_health(const std::string& json);

// The first line of a /submit stream: the worker's request id, or why submit() refused
// it (its Status code and message, e.g. InvalidArgument for a bad request).
std::string encode_submit_reply(const StatusOr<uint64_t>& reply);
// The decoded reply: the id, or the worker's refusal as a Status of the same code.
// InvalidArgument (with "malformed submit reply") when the line is not a reply.
StatusOr<StatusOr<uint64_t>> decode_submit_reply(const std::string& json);

std::string encode_ids_reply(const StatusOr<std::vector<int>>& reply);
// The ids, or the worker's error as a Status of the same code; InvalidArgument
// ("malformed ids reply") when `json` is not such a reply.
StatusOr<StatusOr<std::vector<int>>> decode_ids_reply(const std::string& json);
std::string encode_text_reply(const StatusOr<std::string>& reply);
StatusOr<StatusOr<std::string>> decode_text_reply(const std::string& json);
// Token bytes (any bytes, not necessarily UTF-8) as lowercase hex strings.
std::string encode_vocab_bytes(const std::vector<std::string>& tokens);
StatusOr<std::vector<std::string>> decode_vocab_bytes(const std::string& json);

// Rendezvous files in the directory a worker group is started with (--worker-endpoint
// DIR): rank 0 writes "endpoint.json" ({"port":P,"pid":PID}) once it listens and its
// engine is loaded; every rank writes "rank-<R>.pid". Written atomically (readers see
// a whole file or none).
Status publish_endpoint(const std::string& dir, int port, int64_t pid);
Status publish_rank_pid(const std::string& dir, int rank, int64_t pid);
// The port in DIR/endpoint.json: NotFound while it does not exist; DataLoss if it is
// malformed.
StatusOr<int> read_endpoint_port(const std::string& dir);
// The pid of each rank 0..num_ranks-1 found in DIR (-1 where its file is missing).
std::vector<int64_t> read_rank_pids(const std::string& dir, int num_ranks);

}  // namespace moe::supervisor
