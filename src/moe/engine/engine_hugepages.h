// EngineOptions::hugepages applied at Engine::open (internal to engine/): the decoder's
// matrices copied into transparent huge pages (model/weights_relocate.h).
#pragma once

#include <string>

#include "moe/engine/engine_impl.h"
#include "moe/status.h"

namespace moe {

// Run after any FP8 dequantisation, int8 quantisation or TP sharding (so the copies are
// of what decode reads) and before the Decoder is made. `mode`: "on", "off" or "auto"
// (checked by choose_kernels): auto copies when the kernel offers THP, the weights come
// from a Hugging Face directory and are at least 64 MiB. After the copy the buffers those
// steps made are freed and the mapped files' pages leave the resident set. Logs what it
// did and how long it took. Never fails today (an mmap failure aborts, as an allocation
// would); returns a Status for the callers' chain.
Status place_weights_in_huge_pages(Engine::Impl* impl, const std::string& mode);

}  // namespace moe
